/* io/convert.c: Hugging Face checkpoint -> mlx-lm-compatible checkpoint. Stacks per-expert MoE
 * weights into switch_mlp tensors as mlx-lm does, quantizes Linear/Embedding weights with MLX's affine
 * algorithm (bit-exact with mlx.core.quantize on float32 math, scales and biases stored in the weight
 * dtype), converts float dtypes, shards output over the shard size with an index, copies tokenizer
 * files, and writes config.json with "quantization". Streams tensor by tensor from the mmap'ed input.
 * Writes into OUT.partial-<pid> and renames at the end, so a failure leaves nothing behind.
 * Not the model families' weight naming beyond MoE expert stacking. */
#include "mlxcel/io.h"
#include "mlxcel/store.h"
#include "io/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- MLX affine quantization ---- */

typedef struct { float scale, bias; } qparams;

static qparams group_params(const float *w, int gs, float n_bins) {
    float mx = -INFINITY, mn = INFINITY;
    for (int j = 0; j < gs; j++) {
        if (w[j] > mx) mx = w[j];
        if (w[j] < mn) mn = w[j];
    }
    bool mask = fabsf(mn) > fabsf(mx);
    float scale = (mx - mn) / n_bins;
    if (!(scale >= 1e-7f)) scale = 1e-7f;
    if (!mask) scale = -scale;
    float edge = mask ? mn : mx;
    float q0 = rintf(edge / scale);
    qparams p = {scale, 0.0f};
    if (q0 != 0.0f) { p.scale = edge / q0; p.bias = edge; }
    return p;
}

static void quantize_row(const float *w, int64_t cols, int bits, int gs, uint32_t *packed, float *scales, float *biases) {
    float n_bins = (float)((1 << bits) - 1);
    int64_t words = cols * bits / 32;
    if (packed) memset(packed, 0, (size_t)words * sizeof *packed);
    for (int64_t g = 0; g < cols / gs; g++) {
        const float *x = w + g * gs;
        qparams p = group_params(x, gs, n_bins);
        if (scales) scales[g] = p.scale;
        if (biases) biases[g] = p.bias;
        if (!packed) continue;
        for (int j = 0; j < gs; j++) {
            float q = rintf((x[j] - p.bias) / p.scale);
            if (!(q >= 0.0f)) q = 0.0f;      /* NaN -> 0 */
            if (q > n_bins) q = n_bins;
            uint64_t v = (uint64_t)q;
            uint64_t bit = (uint64_t)(g * gs + j) * (uint64_t)bits;
            uint64_t wi = bit / 32, off = bit % 32;
            packed[wi] |= (uint32_t)(v << off);
            if (off + (uint64_t)bits > 32) packed[wi + 1] |= (uint32_t)(v >> (32 - off));
        }
    }
}

mx_status mx_quantize_affine(const float *w, int64_t rows, int64_t cols, int bits, int group_size,
                             uint32_t *packed, float *scales, float *biases) {
    if (bits < 2 || bits > 8 || bits == 7) return mx_errorf(MX_ERR_UNSUPPORTED, "quantize: %d bits is not supported (2, 3, 4, 5, 6, 8)", bits);
    if (group_size != 32 && group_size != 64 && group_size != 128)
        return mx_errorf(MX_ERR_UNSUPPORTED, "quantize: group size %d is not supported (32, 64, 128)", group_size);
    if (cols <= 0 || cols % group_size) return mx_errorf(MX_ERR_INVALID_ARG, "quantize: %lld columns do not divide by the group size %d", (long long)cols, group_size);
    int64_t words = cols * bits / 32, ng = cols / group_size;
    for (int64_t r = 0; r < rows; r++)
        quantize_row(w + r * cols, cols, bits, group_size, packed ? packed + r * words : NULL,
                     scales ? scales + r * ng : NULL, biases ? biases + r * ng : NULL);
    return MX_OK;
}

/* ---- value conversion ---- */

static bool is_float(mx_dtype d) { return d == MX_DTYPE_F32 || d == MX_DTYPE_F16 || d == MX_DTYPE_BF16; }

static float load_f(const void *p, mx_dtype d, size_t i) {
    switch (d) {
    case MX_DTYPE_F32: { float f; memcpy(&f, (const char *)p + 4 * i, 4); return f; }
    case MX_DTYPE_F16: { uint16_t h; memcpy(&h, (const char *)p + 2 * i, 2); return mx_f16_to_f32(h); }
    case MX_DTYPE_BF16: { uint16_t h; memcpy(&h, (const char *)p + 2 * i, 2); return mx_bf16_to_f32(h); }
    default: return 0;
    }
}

static void store_f(void *p, mx_dtype d, size_t i, float v) {
    switch (d) {
    case MX_DTYPE_F32: memcpy((char *)p + 4 * i, &v, 4); break;
    case MX_DTYPE_F16: { uint16_t h = mx_f32_to_f16(v); memcpy((char *)p + 2 * i, &h, 2); break; }
    case MX_DTYPE_BF16: { uint16_t h = mx_f32_to_bf16(v); memcpy((char *)p + 2 * i, &h, 2); break; }
    default: break;
    }
}

/* Values of `n` elements from `src` (dtype sd) as float, rounded through dtype `td` first. */
static void load_row(const void *src, mx_dtype sd, mx_dtype td, size_t first, size_t n, float *out) {
    for (size_t i = 0; i < n; i++) {
        float v = load_f(src, sd, first + i);
        if (td != sd) {
            uint16_t h;
            if (td == MX_DTYPE_BF16) { h = mx_f32_to_bf16(v); v = mx_bf16_to_f32(h); }
            else if (td == MX_DTYPE_F16) { h = mx_f32_to_f16(v); v = mx_f16_to_f32(h); }
        }
        out[i] = v;
    }
}

/* ---- the output plan ---- */

enum { K_COPY, K_QW, K_QS, K_QB };

typedef struct {
    char *name;
    int kind;
    mx_st_entry e;            /* e.name == name */
    mx_dtype wdtype;          /* dtype of the (converted) weight values */
    const mx_st_tensor **src; /* stacked sources; one for plain tensors */
    int nsrc;
    int shard;
} out_t;

typedef struct {
    out_t *o;
    int n, cap;
} plan_t;

static void plan_free(plan_t *p) {
    for (int i = 0; i < p->n; i++) { free(p->o[i].name); free(p->o[i].src); }
    free(p->o);
}

static mx_status plan_add(plan_t *p, const char *name, int kind, mx_dtype dt, int ndim, const int64_t *shape,
                          mx_dtype wdtype, const mx_st_tensor **src, int nsrc) {
    if (p->n == p->cap) {
        int nc = p->cap ? p->cap * 2 : 64;
        out_t *no = realloc(p->o, (size_t)nc * sizeof *no);
        if (!no) return mx_errorf(MX_ERR_NOMEM, "out of memory");
        p->o = no; p->cap = nc;
    }
    out_t *o = &p->o[p->n];
    memset(o, 0, sizeof *o);
    o->name = mx_strdup(name);
    o->src = malloc((size_t)nsrc * sizeof *src);
    if (!o->name || !o->src) { free(o->name); free(o->src); return mx_errorf(MX_ERR_NOMEM, "out of memory"); }
    memcpy(o->src, src, (size_t)nsrc * sizeof *src);
    o->nsrc = nsrc; o->kind = kind; o->wdtype = wdtype;
    o->e.name = o->name; o->e.dtype = dt; o->e.ndim = ndim;
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) { o->e.shape[i] = shape[i]; count *= (uint64_t)shape[i]; }
    o->e.nbytes = (size_t)(count * mx_dtype_size(dt));
    p->n++;
    return MX_OK;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* "P.experts.N.PROJ.weight" with P ending in .mlp or .block_sparse_moe: the stacked output name
 * (malloc'ed) and expert index, or NULL. */
static char *expert_target(const char *name, long *expert) {
    const char *e = strstr(name, ".experts.");
    if (!e) return NULL;
    size_t pl = (size_t)(e - name);
    bool moe = (pl >= 4 && !strncmp(e - 4, ".mlp", 4)) || (pl >= 17 && !strncmp(e - 17, ".block_sparse_moe", 17));
    if (!moe) return NULL;
    const char *d = e + 9;
    char *end;
    if (*d < '0' || *d > '9') return NULL;
    long k = strtol(d, &end, 10);
    if (*end != '.' || k < 0 || k > 1 << 20) return NULL;
    const char *proj = end + 1;
    static const char *const from[] = {"gate_proj", "up_proj", "down_proj", "w1", "w3", "w2"};
    static const char *const to[] = {"gate_proj", "up_proj", "down_proj", "gate_proj", "up_proj", "down_proj"};
    for (int i = 0; i < 6; i++) {
        size_t fl = strlen(from[i]);
        if (!strncmp(proj, from[i], fl) && !strcmp(proj + fl, ".weight")) {
            size_t n = pl + strlen(".switch_mlp.") + strlen(to[i]) + strlen(".weight") + 1;
            char *out = malloc(n);
            if (!out) return NULL;
            snprintf(out, n, "%.*s.switch_mlp.%s.weight", (int)pl, name, to[i]);
            *expert = k;
            return out;
        }
    }
    return NULL;
}

typedef struct {
    char *name;
    const mx_st_tensor **ex;
    int n, cap;
} group_t;

static bool quantizable(const char *name, int ndim, const int64_t *shape, mx_dtype dt, int gs, bool stacked) {
    if (!is_float(dt) || !ends_with(name, ".weight") || strstr(name, "norm")) return false;
    if (!(ndim == 2 || (ndim == 3 && stacked))) return false;
    return shape[ndim - 1] > 0 && shape[ndim - 1] % gs == 0;
}

static mx_status add_tensor(plan_t *p, const mx_convert_opts *o, const char *name, const mx_st_tensor **src, int nsrc,
                            int ndim, const int64_t *shape) {
    mx_dtype sd = src[0]->dtype;
    mx_dtype wd = (is_float(sd) && o->dtype >= 0) ? (mx_dtype)o->dtype : sd;
    if (o->quantize && quantizable(name, ndim, shape, sd, o->group_size, nsrc > 1 || ndim == 3)) {
        size_t bl = strlen(name) - strlen(".weight");
        char *base = malloc(bl + 10);
        if (!base) return mx_errorf(MX_ERR_NOMEM, "out of memory");
        int64_t qs[MX_MAX_DIMS], ss[MX_MAX_DIMS];
        memcpy(qs, shape, (size_t)ndim * sizeof *qs);
        memcpy(ss, shape, (size_t)ndim * sizeof *ss);
        qs[ndim - 1] = shape[ndim - 1] * o->bits / 32;
        ss[ndim - 1] = shape[ndim - 1] / o->group_size;
        mx_status st;
        memcpy(base, name, bl);
        strcpy(base + bl, ".weight");
        if ((st = plan_add(p, base, K_QW, MX_DTYPE_U32, ndim, qs, wd, src, nsrc))) { free(base); return st; }
        strcpy(base + bl, ".scales");
        if ((st = plan_add(p, base, K_QS, wd, ndim, ss, wd, src, nsrc))) { free(base); return st; }
        strcpy(base + bl, ".biases");
        st = plan_add(p, base, K_QB, wd, ndim, ss, wd, src, nsrc);
        free(base);
        return st;
    }
    return plan_add(p, name, K_COPY, wd, ndim, shape, wd, src, nsrc);
}

static mx_status build_plan(mx_checkpoint *c, const mx_convert_opts *o, plan_t *p) {
    mx_status st = MX_OK;
    int n = mx_ckpt_count(c);
    group_t *g = NULL;
    int ng = 0;
    mx_strmap gi = {0};
    if (!mx_strmap_init(&gi, 64)) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    const mx_st_tensor **order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!order) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    for (int i = 0; i < n; i++) {
        const mx_st_tensor *t = mx_ckpt_tensor_at(c, i);
        long k;
        char *tgt = expert_target(t->name, &k);
        if (!tgt) {
            if ((st = add_tensor(p, o, t->name, &t, 1, t->ndim, t->shape))) goto done;
            continue;
        }
        int gidx = mx_strmap_get(&gi, tgt);
        if (gidx < 0) {
            group_t *ng2 = realloc(g, (size_t)(ng + 1) * sizeof *g);
            if (!ng2) { free(tgt); st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
            g = ng2;
            memset(&g[ng], 0, sizeof g[ng]);
            g[ng].name = tgt;
            int ex;
            if (!mx_strmap_put(&gi, g[ng].name, ng, &ex)) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); ng++; goto done; }
            gidx = ng++;
        } else free(tgt);
        group_t *gr = &g[gidx];
        if (k >= gr->cap) {
            int nc = gr->cap ? gr->cap : 8;
            while (nc <= k) nc *= 2;
            const mx_st_tensor **ne = realloc(gr->ex, (size_t)nc * sizeof *ne);
            if (!ne) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
            for (int j = gr->cap; j < nc; j++) ne[j] = NULL;
            gr->ex = ne; gr->cap = nc;
        }
        if (gr->ex[k]) { st = mx_errorf(MX_ERR_FORMAT, "%s: two tensors for expert %ld of %s", o->hf_path, k, gr->name); goto done; }
        gr->ex[k] = t;
        if (k + 1 > gr->n) gr->n = (int)k + 1;
    }
    for (int i = 0; i < ng; i++) {
        group_t *gr = &g[i];
        for (int k = 0; k < gr->n; k++) {
            if (!gr->ex[k]) { st = mx_errorf(MX_ERR_FORMAT, "%s: expert %d of %s is missing (have %d experts)", o->hf_path, k, gr->name, gr->n); goto done; }
            const mx_st_tensor *a = gr->ex[0], *b = gr->ex[k];
            if (b->dtype != a->dtype || b->ndim != 2 || a->ndim != 2 || b->shape[0] != a->shape[0] || b->shape[1] != a->shape[1]) {
                st = mx_errorf(MX_ERR_FORMAT, "%s: expert %d of %s has a different shape or dtype than expert 0", o->hf_path, k, gr->name);
                goto done;
            }
        }
        int64_t shape[3] = {gr->n, gr->ex[0]->shape[0], gr->ex[0]->shape[1]};
        if ((st = add_tensor(p, o, gr->name, gr->ex, gr->n, 3, shape))) goto done;
    }
done:
    for (int i = 0; i < ng; i++) { free(g[i].name); free(g[i].ex); }
    free(g);
    free(order);
    mx_strmap_free(&gi);
    return st;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int out_cmp(const void *a, const void *b) {
    const out_t *x = a, *y = b;
    return mx_st_order_cmp(x->e.dtype, x->e.name, y->e.dtype, y->e.name);
}

/* ---- producing data ---- */

typedef struct {
    const out_t *o;
    const mx_st_tensor *t;
    int bits, gs;
    int64_t cols, ng, words;
    char *dst;                /* this source's first output byte */
    float *scratch;           /* per thread: 3 * cols floats */
    int64_t cols_cap;
} produce_ctx;

static void produce_rows(void *vctx, int64_t b, int64_t e, int tid) {
    produce_ctx *c = vctx;
    const out_t *o = c->o;
    float *row = c->scratch + (size_t)tid * 3u * (size_t)c->cols_cap, *sc = row + c->cols_cap, *bi = sc + c->cols_cap;
    size_t esz = mx_dtype_size(o->e.dtype);
    for (int64_t r = b; r < e; r++) {
        load_row(c->t->data, c->t->dtype, o->wdtype, (size_t)(r * c->cols), (size_t)c->cols, row);
        if (o->kind == K_QW) {
            quantize_row(row, c->cols, c->bits, c->gs, (uint32_t *)(void *)(c->dst + r * c->words * 4), NULL, NULL);
        } else {
            quantize_row(row, c->cols, c->bits, c->gs, NULL, sc, bi);
            const float *v = o->kind == K_QS ? sc : bi;
            char *d = c->dst + (size_t)(r * c->ng) * esz;
            for (int64_t g = 0; g < c->ng; g++) store_f(d, o->e.dtype, (size_t)g, v[g]);
        }
    }
}

static void convert_range(void *vctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    produce_ctx *c = vctx;
    for (int64_t i = b; i < e; i++) store_f(c->dst, c->o->e.dtype, (size_t)i, load_f(c->t->data, c->t->dtype, (size_t)i));
}

/* Lets the kernel drop the source pages once read (they are file-backed and re-readable), so the
 * resident size stays near the output buffer rather than the whole input. */
static void release_source(const mx_st_tensor *t) {
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || !t->nbytes) return;
    uintptr_t a = (uintptr_t)t->data, e = a + t->nbytes;
    a = (a + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    e &= ~((uintptr_t)pg - 1);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

/* Fills buf (o->e.nbytes) with the output tensor's bytes, rows spread over the thread pool.
 * `scratch` holds 3 * cols_cap floats per pool thread. */
static void produce(const out_t *o, int bits, int gs, void *buf, float *scratch, int64_t cols_cap, mx_pool *pool) {
    char *dst = buf;
    for (int s = 0; s < o->nsrc; s++) {
        const mx_st_tensor *t = o->src[s];
        size_t elems = t->nbytes / mx_dtype_size(t->dtype);
        produce_ctx c = {.o = o, .t = t, .bits = bits, .gs = gs, .dst = dst, .scratch = scratch, .cols_cap = cols_cap};
        if (o->kind == K_COPY) {
            if (o->e.dtype == t->dtype) memcpy(dst, t->data, t->nbytes);
            else mx_pool_run(pool, (int64_t)elems, 1 << 16, convert_range, &c);
            dst += elems * mx_dtype_size(o->e.dtype);
            continue;
        }
        c.cols = t->shape[t->ndim - 1];
        int64_t rows = c.cols ? (int64_t)(elems / (size_t)c.cols) : 0;
        c.ng = c.cols / gs; c.words = c.cols * bits / 32;
        mx_pool_run(pool, rows, 4, produce_rows, &c);
        dst += o->kind == K_QW ? rows * c.words * 4 : rows * c.ng * (int64_t)mx_dtype_size(o->e.dtype);
    }
}

/* ---- files ---- */

static mx_status copy_file(const char *from, const char *to) {
    size_t n;
    char *data = mx_read_file(from, &n);
    if (!data) return MX_ERR_IO;
    int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { free(data); return mx_errorf(MX_ERR_IO, "%s: cannot create: %s", to, strerror(errno)); }
    mx_status st = mx_write_all(fd, data, n, to);
    if (close(fd) != 0 && !st) st = mx_errorf(MX_ERR_IO, "%s: close failed: %s", to, strerror(errno));
    free(data);
    return st;
}

static bool is_side_file(const char *n) {
    if (!strcmp(n, "config.json") || ends_with(n, ".index.json") || !strncmp(n, "golden", 6)) return false;
    return ends_with(n, ".json") || ends_with(n, ".jinja") || ends_with(n, ".model") || ends_with(n, ".tiktoken") ||
           !strcmp(n, "tokenizer.json.xz") ||   /* the compressed tokenizer.json mlxcel also reads */
           !strcmp(n, "merges.txt") || !strcmp(n, "vocab.txt");
}

static mx_status copy_side_files(const char *src, const char *dst) {
    DIR *d = opendir(src);
    if (!d) return mx_errorf(MX_ERR_IO, "%s: cannot read directory: %s", src, strerror(errno));
    mx_status st = MX_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !is_side_file(de->d_name)) continue;
        char *a = mx_path_join(src, de->d_name), *b = mx_path_join(dst, de->d_name);
        if (!a || !b) st = mx_errorf(MX_ERR_NOMEM, "out of memory");
        else if (mx_is_file(a)) st = copy_file(a, b);
        free(a); free(b);
        if (st) break;
    }
    closedir(d);
    return st;
}

static void progress(FILE *f, bool tty, uint64_t done, uint64_t total, int *last_pct, const char *what) {
    if (!f) return;
    int pct = total ? (int)(done * 100 / total) : 100;
    static double last_t;
    if (tty) {
        double t = mx_time_s();
        if (done < total && t - last_t < 0.1) return;
        last_t = t;
        int w = 30, fill = pct * w / 100;
        fprintf(f, "\r[");
        for (int i = 0; i < w; i++) fputc(i < fill ? '#' : '.', f);
        fprintf(f, "] %3d%% %.1f/%.1f MB %-40.40s", pct, (double)done / 1e6, (double)total / 1e6, what);
        if (done >= total) fputc('\n', f);
        fflush(f);
    } else if (pct >= *last_pct + 10 || (done >= total && *last_pct < 100)) {
        fprintf(f, "convert: %d%% (%.1f/%.1f MB)\n", pct, (double)done / 1e6, (double)total / 1e6);
        fflush(f);
        *last_pct = pct;
    }
}

static mx_status check_layers(mx_checkpoint *c, const char *dir) {
    int64_t nl;
    if (!mx_json_int(mx_ckpt_config(c), "num_hidden_layers", -1, &nl))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: num_hidden_layers is not an integer", dir);
    bool uses = false;
    for (int i = 0; i < mx_ckpt_count(c) && !uses; i++) uses = strstr(mx_ckpt_tensor_at(c, i)->name, "model.layers.") != NULL;
    if (nl <= 0 || !uses) return MX_OK;
    for (int64_t l = 0; l < nl && l < 100000; l++) {
        char pre[64];
        snprintf(pre, sizeof pre, "model.layers.%lld.", (long long)l);
        bool found = false;
        for (int i = 0; i < mx_ckpt_count(c) && !found; i++) found = strstr(mx_ckpt_tensor_at(c, i)->name, pre) != NULL;
        if (!found) return mx_errorf(MX_ERR_FORMAT, "%s: no tensors for layer %lld (config.json has num_hidden_layers = %lld)", dir, (long long)l, (long long)nl);
    }
    return MX_OK;
}

mx_status mx_convert(const mx_convert_opts *o) {
    mx_checkpoint *c = NULL;
    plan_t p = {0};
    mx_status st = MX_OK;
    char *tmpdir = NULL, *path = NULL, *hdr = NULL;
    mx_st_entry *ent = NULL;
    void *buf = NULL;
    float *scratch = NULL;
    mx_pool *pool = mx_pool_global();

    json_t *cfg = NULL, *meta = NULL, *index = NULL;
    int fd = -1;
    if (!o || !o->hf_path || !o->out_dir) return mx_errorf(MX_ERR_INVALID_ARG, "convert: --hf-path and -o are required");
    if (o->quantize) {
        if (o->bits < 2 || o->bits > 8 || o->bits == 7) return mx_errorf(MX_ERR_UNSUPPORTED, "convert: %d-bit quantization is not supported (2, 3, 4, 5, 6, 8)", o->bits);
        if (o->group_size != 32 && o->group_size != 64 && o->group_size != 128)
            return mx_errorf(MX_ERR_UNSUPPORTED, "convert: group size %d is not supported (32, 64, 128)", o->group_size);
    }
    if (o->dtype >= 0 && !is_float((mx_dtype)o->dtype)) return mx_errorf(MX_ERR_INVALID_ARG, "convert: --dtype must be bf16, f16 or f32");
    if (mx_is_dir(o->out_dir)) {
        DIR *d = opendir(o->out_dir);
        struct dirent *de;
        bool empty = true;
        while (d && (de = readdir(d))) if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = false;
        if (d) closedir(d);
        if (!empty) return mx_errorf(MX_ERR_IO, "%s: output directory exists and is not empty", o->out_dir);
    } else if (mx_is_file(o->out_dir)) return mx_errorf(MX_ERR_IO, "%s: output exists and is a file", o->out_dir);

    if ((st = mx_ckpt_open(o->hf_path, &c))) return st;
    json_t *q = json_object_get(mx_ckpt_config(c), "quantization");
    if (q && !json_is_null(q) && o->quantize) { st = mx_errorf(MX_ERR_UNSUPPORTED, "%s: already quantized (config.json has \"quantization\")", o->hf_path); goto fail; }
    if ((st = check_layers(c, o->hf_path))) goto fail;
    if ((st = build_plan(c, o, &p))) goto fail;
    if (p.n == 0) { st = mx_errorf(MX_ERR_FORMAT, "%s: no tensors", o->hf_path); goto fail; }
    qsort(p.o, (size_t)p.n, sizeof *p.o, out_cmp);

    /* shards */
    uint64_t limit = o->shard_bytes ? o->shard_bytes : (5ull << 30), acc = 0, total = 0;
    int nshards = 1;
    size_t maxbytes = 0;
    int64_t maxcols = 1;
    for (int i = 0; i < p.n; i++) {
        out_t *x = &p.o[i];
        if (acc && acc + x->e.nbytes > limit) { nshards++; acc = 0; }
        x->shard = nshards - 1;
        acc += x->e.nbytes; total += x->e.nbytes;
        if (x->e.nbytes > maxbytes) maxbytes = x->e.nbytes;
        const mx_st_tensor *t = x->src[0];
        if (t->ndim && t->shape[t->ndim - 1] > maxcols) maxcols = t->shape[t->ndim - 1];
    }

    size_t ol = strlen(o->out_dir);
    while (ol > 1 && o->out_dir[ol - 1] == '/') ol--;
    tmpdir = malloc(ol + 32);
    if (!tmpdir) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
    snprintf(tmpdir, ol + 32, "%.*s.partial-%d", (int)ol, o->out_dir, (int)getpid());
    if (mkdir(tmpdir, 0755) != 0) { st = mx_errorf(MX_ERR_IO, "%s: cannot create: %s", tmpdir, strerror(errno)); free(tmpdir); tmpdir = NULL; goto fail; }

    buf = malloc(maxbytes ? maxbytes : 1);
    scratch = malloc((size_t)mx_pool_size(pool) * 3u * (size_t)maxcols * sizeof *scratch);
    ent = malloc((size_t)p.n * sizeof *ent);
    meta = json_pack("{ss}", "format", "mlx");
    if (!buf || !scratch || !ent || !meta) { st = mx_errorf(MX_ERR_NOMEM, "convert: out of memory (largest tensor %zu bytes)", maxbytes); goto fail; }
    if (nshards > 1 && !(index = json_pack("{s{sI}s{}}", "metadata", "total_size", (json_int_t)total, "weight_map"))) {
        st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail;
    }
    bool tty = o->progress && isatty(fileno(o->progress));
    int last_pct = -10;
    uint64_t done = 0;
    int first = 0;
    for (int s = 0; s < nshards; s++) {
        int last = first;
        while (last < p.n && p.o[last].shard == s) last++;
        char fname[64];
        if (nshards == 1) snprintf(fname, sizeof fname, "model.safetensors");
        else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        for (int i = first; i < last; i++) {
            ent[i - first] = p.o[i].e;
            if (index) json_object_set_new(json_object_get(index, "weight_map"), p.o[i].name, json_string(fname));
        }
        size_t hlen;
        if ((st = mx_st_header_json(ent, last - first, meta, &hdr, &hlen))) goto fail;
        free(path);
        if (!(path = mx_path_join(tmpdir, fname))) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) { st = mx_errorf(MX_ERR_IO, "%s: cannot create: %s", path, strerror(errno)); goto fail; }
        unsigned char lenb[8];
        for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
        if ((st = mx_write_all(fd, lenb, 8, path)) || (st = mx_write_all(fd, hdr, hlen, path))) goto fail;
        free(hdr); hdr = NULL;
        for (int i = first; i < last; i++) {
            produce(&p.o[i], o->bits, o->group_size, buf, scratch, maxcols, pool);
            /* drop the source pages after each use: a later output of the same source (scales
             * after weight) reads them again from the page cache */
            for (int k = 0; k < p.o[i].nsrc; k++) release_source(p.o[i].src[k]);
            if ((st = mx_write_all(fd, buf, p.o[i].e.nbytes, path))) goto fail;
            done += p.o[i].e.nbytes;
            progress(o->progress, tty, done, total, &last_pct, p.o[i].name);
        }
        if (close(fd) != 0) { fd = -1; st = mx_errorf(MX_ERR_IO, "%s: close failed: %s", path, strerror(errno)); goto fail; }
        fd = -1;
        first = last;
    }
    if (index) {
        free(path);
        if (!(path = mx_path_join(tmpdir, "model.safetensors.index.json"))) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
        json_t *wm = json_object_get(index, "weight_map");
        json_t *sorted = json_object();
        const char **keys = malloc(json_object_size(wm) * sizeof *keys);
        size_t nk = 0;
        const char *k;
        json_t *v;
        if (!sorted || !keys) { json_decref(sorted); free(keys); st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
        json_object_foreach(wm, k, v) keys[nk++] = k;
        qsort(keys, nk, sizeof *keys, cmp_cstr);
        for (size_t i = 0; i < nk; i++) json_object_set(sorted, keys[i], json_object_get(wm, keys[i]));
        free(keys);
        json_object_set_new(index, "weight_map", sorted);
        if (json_dump_file(index, path, JSON_INDENT(4)) != 0) { st = mx_errorf(MX_ERR_IO, "%s: cannot write", path); goto fail; }
    }
    /* config.json with the quantization settings */
    cfg = json_deep_copy(mx_ckpt_config(c));
    if (!cfg) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
    if (o->quantize) {
        json_object_set_new(cfg, "quantization", json_pack("{sisi}", "group_size", o->group_size, "bits", o->bits));
        json_object_set_new(cfg, "quantization_config", json_pack("{sisi}", "group_size", o->group_size, "bits", o->bits));
    }
    if (o->dtype >= 0) {
        const char *tn = o->dtype == MX_DTYPE_F32 ? "float32" : o->dtype == MX_DTYPE_F16 ? "float16" : "bfloat16";
        if (json_object_get(cfg, "torch_dtype")) json_object_set_new(cfg, "torch_dtype", json_string(tn));
        if (json_object_get(cfg, "dtype")) json_object_set_new(cfg, "dtype", json_string(tn));
    }
    free(path);
    if (!(path = mx_path_join(tmpdir, "config.json"))) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
    if (json_dump_file(cfg, path, JSON_INDENT(2) | JSON_REAL_PRECISION(16)) != 0) { st = mx_errorf(MX_ERR_IO, "%s: cannot write", path); goto fail; }
    if ((st = copy_side_files(o->hf_path, tmpdir))) goto fail;
    if (mx_is_dir(o->out_dir) && rmdir(o->out_dir) != 0) { st = mx_errorf(MX_ERR_IO, "%s: cannot replace: %s", o->out_dir, strerror(errno)); goto fail; }
    if (rename(tmpdir, o->out_dir) != 0) { st = mx_errorf(MX_ERR_IO, "%s: cannot rename into place: %s", o->out_dir, strerror(errno)); goto fail; }
    free(tmpdir); tmpdir = NULL;
fail:
    if (fd >= 0) close(fd);
    if (tmpdir) { mx_status keep = st; char msg[1024]; snprintf(msg, sizeof msg, "%s", mx_last_error()); mx_rm_tree(tmpdir); mx_errorf(keep, "%s", msg); }
    free(tmpdir); free(path); free(hdr); free(ent); free(buf); free(scratch);
    json_decref(cfg); json_decref(meta); json_decref(index);
    plan_free(&p);
    mx_ckpt_close(c);
    return st;
}
