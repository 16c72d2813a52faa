/* io/safetensors.c: reading safetensors files through mmap with every header field validated
 * (header length, JSON, dtypes, shapes, offsets, overlaps, truncation), and writing them in the
 * layout of the Python `safetensors` library (tensors sorted by dtype alignment then name, header
 * padded with spaces to 8 bytes). Also the small string hash table and path helpers io/ shares.
 * Not checkpoint directories (checkpoint.c). */
#include "mlxcel/io.h"
#include "io/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MX_ST_MAX_HEADER (100u * 1024u * 1024u)

/* ---- string map ---- */

static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 1099511628211ull; }
    return h;
}

bool mx_strmap_init(mx_strmap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 + 1) cap *= 2;
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = calloc(cap, sizeof *m->vals);
    m->cap = cap; m->n = 0;
    if (!m->keys || !m->vals) { mx_strmap_free(m); return false; }
    return true;
}

void mx_strmap_free(mx_strmap *m) {
    free(m->keys); free(m->vals);
    m->keys = NULL; m->vals = NULL; m->cap = m->n = 0;
}

static bool strmap_grow(mx_strmap *m) {
    mx_strmap g;
    if (!mx_strmap_init(&g, m->cap)) return false;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) { int ex; mx_strmap_put(&g, m->keys[i], m->vals[i], &ex); }
    mx_strmap_free(m);
    *m = g;
    return true;
}

bool mx_strmap_put(mx_strmap *m, const char *key, int val, int *existing) {
    *existing = -1;
    if ((m->n + 1) * 2 > m->cap && !strmap_grow(m)) return false;
    size_t mask = m->cap - 1, i = (size_t)str_hash(key) & mask;
    while (m->keys[i]) {
        if (!strcmp(m->keys[i], key)) { *existing = m->vals[i]; return true; }
        i = (i + 1) & mask;
    }
    m->keys[i] = key; m->vals[i] = val; m->n++;
    return true;
}

int mx_strmap_get(const mx_strmap *m, const char *key) {
    if (!m->cap || !key) return -1;
    size_t mask = m->cap - 1, i = (size_t)str_hash(key) & mask;
    while (m->keys[i]) {
        if (!strcmp(m->keys[i], key)) return m->vals[i];
        i = (i + 1) & mask;
    }
    return -1;
}

const char *mx_path_base(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

char *mx_path_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    size_t k = la;
    if (la && a[la - 1] != '/') p[k++] = '/';
    memcpy(p + k, b, lb + 1);
    return p;
}

bool mx_is_dir(const char *path) { struct stat st; return stat(path, &st) == 0 && S_ISDIR(st.st_mode); }
bool mx_is_file(const char *path) { struct stat st; return stat(path, &st) == 0 && S_ISREG(st.st_mode); }

/* ---- reading ---- */

struct mx_safetensors {
    char *path;
    void *map;
    size_t size;
    json_t *header;        /* owns the tensor name strings */
    json_t *meta;          /* borrowed from header, may be NULL */
    int n;
    mx_st_tensor *t;
    mx_strmap index;
};

typedef struct { uint64_t begin, end; int idx; } st_span;

static int span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Reads a JSON integer >= 0 into *out. */
static bool json_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return false;
    json_int_t i = json_integer_value(v);
    if (i < 0) return false;
    *out = (uint64_t)i;
    return true;
}

static mx_status parse_tensor(mx_safetensors *f, const char *name, json_t *v, uint64_t data_len,
                              mx_st_tensor *t, st_span *sp) {
    const char *p = f->path;
    if (!json_is_object(v)) return mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' entry is not an object", p, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"), *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd)) return mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' has no dtype string", p, name);
    if (!mx_dtype_from_name(json_string_value(jd), &t->dtype))
        return mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%s'", p, name, json_string_value(jd));
    if (!json_is_array(js)) return mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' has no shape array", p, name);
    size_t nd = json_array_size(js);
    if (nd > MX_MAX_DIMS)
        return mx_errorf(MX_ERR_UNSUPPORTED, "%s: tensor '%s' has %zu dimensions (at most %d)", p, name, nd, MX_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t count = 1;
    bool overflow = false;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (!json_u64(json_array_get(js, i), &d))
            return mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' shape[%zu] is not a non-negative integer", p, name, i);
        t->shape[i] = (int64_t)d;
        if (d && count > UINT64_MAX / d) overflow = true;
        else count *= d;
    }
    for (size_t i = nd; i < MX_MAX_DIMS; i++) t->shape[i] = 0;
    uint64_t esz = mx_dtype_size(t->dtype);
    /* a zero dimension makes the whole tensor empty even after an overflowing prefix */
    for (size_t i = 0; i < nd; i++) if (t->shape[i] == 0) { count = 0; overflow = false; }
    if (overflow || (count && count > UINT64_MAX / esz))
        return mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' shape is too large", p, name);
    uint64_t nbytes = count * esz;
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' data_offsets is not a [begin, end] pair", p, name);
    uint64_t b, e;
    if (!json_u64(json_array_get(jo, 0), &b) || !json_u64(json_array_get(jo, 1), &e) || e < b)
        return mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' data_offsets are not integers with begin <= end", p, name);
    if (e - b != nbytes)
        return mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' shape and dtype give %llu bytes but data_offsets [%llu, %llu) hold %llu",
                         p, name, (unsigned long long)nbytes, (unsigned long long)b, (unsigned long long)e,
                         (unsigned long long)(e - b));
    if (e > data_len)
        return mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' data offsets [%llu, %llu) exceed the file's data section (%llu bytes; truncated file?)",
                         p, name, (unsigned long long)b, (unsigned long long)e, (unsigned long long)data_len);
    t->name = name;
    t->nbytes = (size_t)nbytes;
    sp->begin = b; sp->end = e;
    return MX_OK;
}

mx_status mx_st_open(const char *path, mx_safetensors **out) {
    *out = NULL;
    mx_status st = MX_OK;
    st_span *spans = NULL;
    int fd = -1;
    mx_safetensors *f = calloc(1, sizeof *f);
    if (!f) return mx_errorf(MX_ERR_NOMEM, "%s: out of memory", path);
    f->path = mx_strdup(path);
    if (!f->path) { st = mx_errorf(MX_ERR_NOMEM, "%s: out of memory", path); goto fail; }

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { st = mx_errorf(MX_ERR_IO, "%s: cannot open: %s", path, strerror(errno)); goto fail; }
    struct stat sb;
    if (fstat(fd, &sb) != 0) { st = mx_errorf(MX_ERR_IO, "%s: cannot stat: %s", path, strerror(errno)); goto fail; }
    if (!S_ISREG(sb.st_mode)) { st = mx_errorf(MX_ERR_IO, "%s: not a regular file", path); goto fail; }
    if (sb.st_size < 8) {
        st = mx_errorf(MX_ERR_FORMAT, "%s: file is %lld bytes, too small for a safetensors header", path, (long long)sb.st_size);
        goto fail;
    }
    f->size = (size_t)sb.st_size;
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) { f->map = NULL; st = mx_errorf(MX_ERR_IO, "%s: mmap failed: %s", path, strerror(errno)); goto fail; }
    close(fd); fd = -1;

    const unsigned char *u = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | u[i];
    if (hlen > MX_ST_MAX_HEADER) {
        st = mx_errorf(MX_ERR_FORMAT, "%s: header length %llu is larger than the %u-byte limit", path,
                       (unsigned long long)hlen, MX_ST_MAX_HEADER);
        goto fail;
    }
    if (hlen > f->size - 8) {
        st = mx_errorf(MX_ERR_FORMAT, "%s: header length %llu exceeds the file (%zu bytes; truncated file?)", path,
                       (unsigned long long)hlen, f->size);
        goto fail;
    }
    if (hlen < 2) { st = mx_errorf(MX_ERR_FORMAT, "%s: header length %llu is too small", path, (unsigned long long)hlen); goto fail; }
    json_error_t jerr;
    f->header = json_loadb((const char *)u + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->header) {
        st = mx_errorf(MX_ERR_FORMAT, "%s: header is not valid JSON (%s at byte %d)", path, jerr.text, jerr.position);
        goto fail;
    }
    if (!json_is_object(f->header)) { st = mx_errorf(MX_ERR_FORMAT, "%s: header is not a JSON object", path); goto fail; }
    uint64_t data_len = f->size - 8 - hlen;
    const unsigned char *data = u + 8 + hlen;

    size_t nkeys = json_object_size(f->header);
    f->t = calloc(nkeys ? nkeys : 1, sizeof *f->t);
    spans = calloc(nkeys ? nkeys : 1, sizeof *spans);
    if (!f->t || !spans || !mx_strmap_init(&f->index, nkeys)) { st = mx_errorf(MX_ERR_NOMEM, "%s: out of memory", path); goto fail; }
    const char *key;
    json_t *val;
    json_object_foreach(f->header, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val) && !json_is_null(val)) {
                st = mx_errorf(MX_ERR_FORMAT, "%s: __metadata__ is not an object", path); goto fail;
            }
            f->meta = json_is_object(val) ? val : NULL;
            continue;
        }
        mx_st_tensor *t = &f->t[f->n];
        st = parse_tensor(f, key, val, data_len, t, &spans[f->n]);
        if (st) goto fail;
        t->data = data + spans[f->n].begin;
        spans[f->n].idx = f->n;
        int ex;
        if (!mx_strmap_put(&f->index, t->name, f->n, &ex)) { st = mx_errorf(MX_ERR_NOMEM, "%s: out of memory", path); goto fail; }
        f->n++;
    }
    qsort(spans, (size_t)f->n, sizeof *spans, span_cmp);
    for (int i = 1; i < f->n; i++) {
        const st_span *a = &spans[i - 1], *b = &spans[i];
        if (b->begin < a->end && b->end > b->begin && a->end > a->begin) {
            st = mx_errorf(MX_ERR_FORMAT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", path,
                           f->t[a->idx].name, (unsigned long long)a->begin, (unsigned long long)a->end,
                           f->t[b->idx].name, (unsigned long long)b->begin, (unsigned long long)b->end);
            goto fail;
        }
    }
    free(spans);
    *out = f;
    return MX_OK;
fail:
    if (fd >= 0) close(fd);
    free(spans);
    mx_st_close(f);
    return st;
}

void mx_st_close(mx_safetensors *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->size);
    mx_strmap_free(&f->index);
    free(f->t);
    json_decref(f->header);
    free(f->path);
    free(f);
}

int mx_st_count(const mx_safetensors *f) { return f ? f->n : 0; }
const mx_st_tensor *mx_st_tensor_at(const mx_safetensors *f, int i) {
    return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}
const mx_st_tensor *mx_st_find(const mx_safetensors *f, const char *name) {
    if (!f) return NULL;
    int i = mx_strmap_get(&f->index, name);
    return i >= 0 ? &f->t[i] : NULL;
}
json_t *mx_st_metadata(const mx_safetensors *f) { return f ? f->meta : NULL; }

/* ---- writing ---- */

typedef struct {
    char *name;
    mx_dtype dtype;
    int ndim;
    int64_t shape[MX_MAX_DIMS];
    void *data;
    size_t nbytes;
} st_wtensor;

struct mx_st_writer {
    st_wtensor *t;
    int n, cap;
    json_t *meta;           /* NULL until a key is set */
    mx_strmap names;
};

mx_st_writer *mx_st_writer_new(void) {
    mx_st_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    if (!mx_strmap_init(&w->names, 16)) { free(w); return NULL; }
    return w;
}

void mx_st_writer_free(mx_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) { free(w->t[i].name); free(w->t[i].data); }
    free(w->t);
    json_decref(w->meta);
    mx_strmap_free(&w->names);
    free(w);
}

mx_status mx_st_writer_add(mx_st_writer *w, const char *name, mx_dtype dt, int ndim, const int64_t *shape,
                           const void *data, size_t nbytes) {
    if (!w || !name || !*name) return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: empty tensor name");
    if (!strcmp(name, "__metadata__")) return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: reserved tensor name '__metadata__'");
    if ((unsigned)dt >= MX_DTYPE_COUNT) return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: tensor '%s' has a bad dtype", name);
    if (ndim < 0 || ndim > MX_MAX_DIMS) return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: tensor '%s' has %d dimensions", name, ndim);
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: tensor '%s' has a negative dimension", name);
        if (shape[i] && count > UINT64_MAX / (uint64_t)shape[i])
            return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: tensor '%s' is too large", name);
        count *= (uint64_t)shape[i];
    }
    if (count > SIZE_MAX / mx_dtype_size(dt) || count * mx_dtype_size(dt) != nbytes)
        return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: tensor '%s' has %zu bytes, its shape needs %llu",
                         name, nbytes, (unsigned long long)(count * mx_dtype_size(dt)));
    if (mx_strmap_get(&w->names, name) >= 0)
        return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: tensor '%s' added twice", name);
    if (w->n == w->cap) {
        int nc = w->cap ? w->cap * 2 : 16;
        st_wtensor *nt = realloc(w->t, (size_t)nc * sizeof *nt);
        if (!nt) return mx_errorf(MX_ERR_NOMEM, "safetensors writer: out of memory");
        w->t = nt; w->cap = nc;
    }
    st_wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = mx_strdup(name);
    t->data = malloc(nbytes ? nbytes : 1);
    if (!t->name || !t->data) { free(t->name); free(t->data); return mx_errorf(MX_ERR_NOMEM, "safetensors writer: out of memory"); }
    if (nbytes) memcpy(t->data, data, nbytes);
    t->dtype = dt; t->ndim = ndim; t->nbytes = nbytes;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    int ex;
    if (!mx_strmap_put(&w->names, t->name, w->n, &ex)) {
        free(t->name); free(t->data);
        return mx_errorf(MX_ERR_NOMEM, "safetensors writer: out of memory");
    }
    w->n++;
    return MX_OK;
}

mx_status mx_st_writer_set_meta(mx_st_writer *w, const char *key, const char *value) {
    if (!w || !key || !value) return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: null metadata");
    if (!w->meta && !(w->meta = json_object())) return mx_errorf(MX_ERR_NOMEM, "safetensors writer: out of memory");
    if (json_object_set_new(w->meta, key, json_string(value)) != 0)
        return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: metadata '%s' is not valid UTF-8", key);
    return MX_OK;
}

/* The Python library's order: larger dtypes first (its Dtype enum order, descending), then name. */
int mx_st_dtype_rank(mx_dtype d) {
    switch (d) {
    case MX_DTYPE_BOOL: return 0;
    case MX_DTYPE_U8: return 1;
    case MX_DTYPE_I8: return 2;
    case MX_DTYPE_I16: return 3;
    case MX_DTYPE_U16: return 4;
    case MX_DTYPE_F16: return 5;
    case MX_DTYPE_BF16: return 6;
    case MX_DTYPE_I32: return 7;
    case MX_DTYPE_U32: return 8;
    case MX_DTYPE_F32: return 9;
    case MX_DTYPE_F64: return 10;
    case MX_DTYPE_I64: return 11;
    case MX_DTYPE_U64: return 12;
    default: return -1;
    }
}

int mx_st_order_cmp(mx_dtype da, const char *na, mx_dtype db, const char *nb) {
    int ra = mx_st_dtype_rank(da), rb = mx_st_dtype_rank(db);
    if (ra != rb) return ra > rb ? -1 : 1;
    return strcmp(na, nb);
}

static int wt_cmp(const void *a, const void *b) {
    const st_wtensor *x = *(st_wtensor *const *)a, *y = *(st_wtensor *const *)b;
    return mx_st_order_cmp(x->dtype, x->name, y->dtype, y->name);
}

mx_status mx_st_header_json(const mx_st_entry *e, int n, json_t *meta, char **out, size_t *len_out) {
    *out = NULL;
    json_t *h = json_object();
    if (!h) return mx_errorf(MX_ERR_NOMEM, "safetensors writer: out of memory");
    if (meta && json_object_set(h, "__metadata__", meta)) goto nomem;
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        json_t *t = json_object();
        if (!shape || !t) { json_decref(shape); json_decref(t); goto nomem; }
        for (int d = 0; d < e[i].ndim; d++) json_array_append_new(shape, json_integer(e[i].shape[d]));
        json_object_set_new(t, "dtype", json_string(mx_dtype_name(e[i].dtype)));
        json_object_set_new(t, "shape", shape);
        json_t *offs = json_pack("[II]", (json_int_t)off, (json_int_t)(off + e[i].nbytes));
        json_object_set_new(t, "data_offsets", offs);
        off += e[i].nbytes;
        if (json_object_set_new(h, e[i].name, t)) { json_decref(h); return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: tensor name '%s' is not valid UTF-8", e[i].name); }
    }
    char *s = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    if (!s) return mx_errorf(MX_ERR_NOMEM, "safetensors writer: out of memory");
    size_t len = strlen(s), pad = (8 - len % 8) % 8;
    char *p = realloc(s, len + pad + 1);
    if (!p) { free(s); return mx_errorf(MX_ERR_NOMEM, "safetensors writer: out of memory"); }
    memset(p + len, ' ', pad);
    p[len + pad] = 0;
    *out = p; *len_out = len + pad;
    return MX_OK;
nomem:
    json_decref(h);
    return mx_errorf(MX_ERR_NOMEM, "safetensors writer: out of memory");
}

mx_status mx_write_all(int fd, const void *p, size_t n, const char *path) {
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == ENOSPC) return mx_errorf(MX_ERR_IO, "%s: write failed: disk full", path);
            return mx_errorf(MX_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        c += k; n -= (size_t)k;
    }
    return MX_OK;
}

mx_status mx_st_writer_save(mx_st_writer *w, const char *path) {
    if (!w || !path) return mx_errorf(MX_ERR_INVALID_ARG, "safetensors writer: null argument");
    mx_status st = MX_OK;
    st_wtensor **ord = calloc(w->n ? (size_t)w->n : 1, sizeof *ord);
    mx_st_entry *ent = calloc(w->n ? (size_t)w->n : 1, sizeof *ent);
    char *hdr = NULL, *tmp = NULL;
    int fd = -1;
    if (!ord || !ent) { st = mx_errorf(MX_ERR_NOMEM, "safetensors writer: out of memory"); goto fail; }
    for (int i = 0; i < w->n; i++) ord[i] = &w->t[i];
    qsort(ord, (size_t)w->n, sizeof *ord, wt_cmp);
    for (int i = 0; i < w->n; i++) {
        ent[i].name = ord[i]->name; ent[i].dtype = ord[i]->dtype; ent[i].ndim = ord[i]->ndim;
        memcpy(ent[i].shape, ord[i]->shape, sizeof ent[i].shape);
        ent[i].nbytes = ord[i]->nbytes;
    }
    size_t hlen;
    if ((st = mx_st_header_json(ent, w->n, w->meta, &hdr, &hlen))) goto fail;
    size_t pl = strlen(path);
    tmp = malloc(pl + 5);
    if (!tmp) { st = mx_errorf(MX_ERR_NOMEM, "safetensors writer: out of memory"); goto fail; }
    memcpy(tmp, path, pl); memcpy(tmp + pl, ".tmp", 5);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { st = mx_errorf(MX_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno)); goto fail; }
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    if ((st = mx_write_all(fd, lenb, 8, tmp))) goto fail;
    if ((st = mx_write_all(fd, hdr, hlen, tmp))) goto fail;
    for (int i = 0; i < w->n; i++)
        if ((st = mx_write_all(fd, ord[i]->data, ord[i]->nbytes, tmp))) goto fail;
    if (close(fd) != 0) { fd = -1; st = mx_errorf(MX_ERR_IO, "%s: close failed: %s", tmp, strerror(errno)); goto fail; }
    fd = -1;
    if (rename(tmp, path) != 0) { st = mx_errorf(MX_ERR_IO, "%s: rename failed: %s", path, strerror(errno)); goto fail; }
    free(tmp); free(hdr); free(ord); free(ent);
    return MX_OK;
fail:
    if (fd >= 0) close(fd);
    if (tmp) unlink(tmp);
    free(tmp); free(hdr); free(ord); free(ent);
    return st;
}
