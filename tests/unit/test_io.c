/* test_io.c: safetensors reading (fixtures and hand-made bad files), the writer (round trip and
 * byte-identical to a Python-written fixture), checkpoint directories (single, sharded, errors),
 * MLX quantization settings with per-layer overrides, and the JSON helpers. */
#include "mlxcel/io.h"
#include "test.h"

#include <ftw.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[256];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}
static void rm_rf(const char *p) { nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static const char *tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_tmp, name);
    return buf;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}
static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

/* A safetensors file with header `hdr` (length field `hlen_field`, or the real length when ~0)
 * followed by `data_len` bytes of data. */
static void write_st(const char *path, const char *hdr, uint64_t hlen_field, size_t data_len) {
    size_t hl = strlen(hdr);
    if (hlen_field == ~0ull) hlen_field = hl;
    size_t n = 8 + hl + data_len;
    unsigned char *b = calloc(1, n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen_field >> (8 * i));
    memcpy(b + 8, hdr, hl);
    for (size_t i = 0; i < data_len; i++) b[8 + hl + i] = (unsigned char)i;
    write_bytes(path, b, n);
    free(b);
}

static void t_fixture_llama(void) {
    char p[512];
    mx_safetensors *f = NULL;
    mx_status st = mx_st_open(t_path(p, sizeof p, "tests/fixtures/models/llama/model.safetensors"), &f);
    TREQUIRE(st == MX_OK, "open: %s", mx_last_error());
    TCHECK(mx_st_count(f) > 10, "count %d", mx_st_count(f));
    const mx_st_tensor *t = mx_st_find(f, "model.embed_tokens.weight");
    TREQUIRE(t != NULL, "embed missing");
    TCHECK(t->dtype == MX_DTYPE_BF16 && t->ndim == 2 && t->shape[0] == 512 && t->shape[1] == 64, "embed shape");
    TCHECK(t->nbytes == 512 * 64 * 2, "nbytes %zu", t->nbytes);
    t = mx_st_find(f, "model.layers.0.input_layernorm.weight");
    TCHECK(t && t->ndim == 1 && t->shape[0] == 64, "norm shape");
    TCHECK(mx_st_find(f, "nope") == NULL, "missing name");
    json_t *m = mx_st_metadata(f);
    TCHECK(m && !strcmp(json_string_value(json_object_get(m, "format")), "pt"), "metadata format");
    for (int i = 0; i < mx_st_count(f); i++) {
        const mx_st_tensor *x = mx_st_tensor_at(f, i);
        TCHECK(mx_st_find(f, x->name) == x, "lookup %s", x->name);
    }
    TCHECK(mx_st_tensor_at(f, -1) == NULL && mx_st_tensor_at(f, mx_st_count(f)) == NULL, "index bounds");
    mx_st_close(f);
}

static void t_fixture_q4(void) {
    char p[512];
    mx_checkpoint *c = NULL;
    mx_status st = mx_ckpt_open(t_path(p, sizeof p, "tests/fixtures/models/qwen3_moe-mlx-q4"), &c);
    TREQUIRE(st == MX_OK, "open: %s", mx_last_error());
    const mx_st_tensor *t = mx_ckpt_find(c, "model.layers.0.mlp.switch_mlp.gate_proj.weight");
    TREQUIRE(t != NULL, "switch_mlp missing");
    TCHECK(t->dtype == MX_DTYPE_U32 && t->ndim == 3 && t->shape[0] == 8 && t->shape[1] == 32 && t->shape[2] == 8, "shape");
    int bits, gs;
    TCHECK(mx_ckpt_quant_for(c, "model.layers.0.self_attn.q_proj", &bits, &gs) == MX_OK && bits == 4 && gs == 32, "q_proj %d %d", bits, gs);
    TCHECK(mx_ckpt_quant_for(c, "model.layers.0.input_layernorm", &bits, &gs) == MX_OK && bits == 0, "norm not quantized");
    TCHECK(mx_ckpt_quant_for(c, "model.layers.0.mlp.gate", &bits, &gs) == MX_OK && bits == 4, "router");
    size_t total = 0;
    for (int i = 0; i < mx_ckpt_count(c); i++) total += mx_ckpt_tensor_at(c, i)->nbytes;
    TCHECK(total == mx_ckpt_total_bytes(c) && total > 0, "total bytes");
    int64_t v;
    TCHECK(mx_json_int(mx_ckpt_config(c), "hidden_size", 0, &v) && v == 64, "hidden_size");
    mx_ckpt_close(c);
}

/* Each bad file: expected status and a fragment of the message. */
typedef struct { const char *name, *hdr; uint64_t hlen; size_t data; mx_status st; const char *msg; } bad_case;

static void t_bad_files(void) {
    static const bad_case cases[] = {
        {"hlen_huge", "{}", 1ull << 40, 0, MX_ERR_FORMAT, "limit"},
        {"hlen_beyond", "{}", 1000, 0, MX_ERR_FORMAT, "exceeds the file"},
        {"bad_json", "{\"a\": [", ~0ull, 0, MX_ERR_FORMAT, "not valid JSON"},
        {"not_object", "[1,2]", ~0ull, 0, MX_ERR_FORMAT, "not a JSON object"},
        {"unknown_dtype", "{\"x\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,2]}}", ~0ull, 2, MX_ERR_FORMAT, "unknown dtype 'Q4'"},
        {"out_of_range", "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", ~0ull, 8, MX_ERR_FORMAT, "exceed the file's data section"},
        {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", ~0ull, 16, MX_ERR_FORMAT, "overlap"},
        {"shape_mismatch", "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", ~0ull, 8, MX_ERR_FORMAT, "shape and dtype give 12 bytes"},
        {"negative_dim", "{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", ~0ull, 8, MX_ERR_FORMAT, "non-negative"},
        {"huge_shape", "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}", ~0ull, 8, MX_ERR_FORMAT, "too large"},
        {"reversed_offsets", "{\"x\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", ~0ull, 8, MX_ERR_FORMAT, "begin <= end"},
        {"offsets_not_pair", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", ~0ull, 8, MX_ERR_FORMAT, "pair"},
        {"no_dtype", "{\"x\":{\"shape\":[1],\"data_offsets\":[0,1]}}", ~0ull, 8, MX_ERR_FORMAT, "no dtype"},
        {"entry_not_object", "{\"x\":3}", ~0ull, 8, MX_ERR_FORMAT, "not an object"},
        {"too_many_dims", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", ~0ull, 8, MX_ERR_UNSUPPORTED, "dimensions"},
        {"duplicate_key", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", ~0ull, 8, MX_ERR_FORMAT, "not valid JSON"},
        {"bad_metadata", "{\"__metadata__\":5}", ~0ull, 0, MX_ERR_FORMAT, "__metadata__"},
    };
    char p[512];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const bad_case *c = &cases[i];
        tmp_path(p, sizeof p, c->name);
        write_st(p, c->hdr, c->hlen, c->data);
        mx_safetensors *f = (mx_safetensors *)1;
        mx_clear_error();
        mx_status st = mx_st_open(p, &f);
        TCHECK(st == c->st, "%s: status %s (%s)", c->name, mx_status_str(st), mx_last_error());
        TCHECK(f == NULL, "%s: out not cleared", c->name);
        TCHECK(strstr(mx_last_error(), c->msg) != NULL, "%s: message '%s' lacks '%s'", c->name, mx_last_error(), c->msg);
        TCHECK(strstr(mx_last_error(), c->name) != NULL, "%s: message '%s' does not name the file", c->name, mx_last_error());
        if (!st) mx_st_close(f);
    }
}

static void t_truncated_empty(void) {
    char p[512], src[512];
    /* truncate a real file in the middle of its data */
    size_t n;
    char *buf = mx_read_file(t_path(src, sizeof src, "tests/fixtures/models/llama/model.safetensors"), &n);
    TREQUIRE(buf, "read fixture");
    write_bytes(tmp_path(p, sizeof p, "truncated.safetensors"), buf, n - 100);
    mx_safetensors *f = NULL;
    mx_status st = mx_st_open(p, &f);
    TCHECK(st == MX_ERR_FORMAT && strstr(mx_last_error(), "exceed"), "truncated data: %s", mx_last_error());
    /* truncated inside the header */
    write_bytes(p, buf, 100);
    st = mx_st_open(p, &f);
    TCHECK(st == MX_ERR_FORMAT && strstr(mx_last_error(), "exceeds the file"), "truncated header: %s", mx_last_error());
    /* 5 bytes, 0 bytes */
    write_bytes(p, buf, 5);
    st = mx_st_open(p, &f);
    TCHECK(st == MX_ERR_FORMAT && strstr(mx_last_error(), "too small"), "5 bytes: %s", mx_last_error());
    write_bytes(tmp_path(p, sizeof p, "empty.safetensors"), "", 0);
    st = mx_st_open(p, &f);
    TCHECK(st == MX_ERR_FORMAT && strstr(mx_last_error(), "empty.safetensors"), "empty: %s", mx_last_error());
    st = mx_st_open(tmp_path(p, sizeof p, "does-not-exist.safetensors"), &f);
    TCHECK(st == MX_ERR_IO && strstr(mx_last_error(), "does-not-exist"), "missing: %s", mx_last_error());
    st = mx_st_open(g_tmp, &f);
    TCHECK(st == MX_ERR_IO, "directory: %s", mx_last_error());
    /* every prefix of a small valid file fails cleanly or opens */
    for (size_t k = 0; k < 3200 && k < n; k += 97) {
        write_bytes(p, buf, k);
        f = NULL;
        st = mx_st_open(p, &f);
        TCHECK(st != MX_OK, "prefix %zu opened", k);
        mx_st_close(f);
    }
    free(buf);
}

static void t_writer_roundtrip(void) {
    char p[512];
    mx_st_writer *w = mx_st_writer_new();
    TREQUIRE(w, "new");
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {0x3f80, 0x4000, 0x4040};
    uint8_t c[5] = {9, 8, 7, 6, 5};
    int64_t sa[2] = {2, 3}, sb[1] = {3}, sc[1] = {5}, s0[2] = {0, 4};
    TCHECK(mx_st_writer_add(w, "z.bf16", MX_DTYPE_BF16, 1, sb, b, sizeof b) == MX_OK, "add b");
    TCHECK(mx_st_writer_add(w, "a.u8", MX_DTYPE_U8, 1, sc, c, sizeof c) == MX_OK, "add c");
    TCHECK(mx_st_writer_add(w, "m.f32", MX_DTYPE_F32, 2, sa, a, sizeof a) == MX_OK, "add a");
    TCHECK(mx_st_writer_add(w, "empty", MX_DTYPE_F32, 2, s0, NULL, 0) == MX_OK, "add empty");
    TCHECK(mx_st_writer_add(w, "scalar", MX_DTYPE_F32, 0, NULL, a, 4) == MX_OK, "add scalar");
    TCHECK(mx_st_writer_add(w, "m.f32", MX_DTYPE_F32, 2, sa, a, sizeof a) == MX_ERR_INVALID_ARG, "duplicate rejected");
    TCHECK(mx_st_writer_add(w, "bad", MX_DTYPE_F32, 2, sa, a, 8) == MX_ERR_INVALID_ARG, "size mismatch rejected");
    TCHECK(mx_st_writer_set_meta(w, "format", "mlx") == MX_OK, "meta");
    tmp_path(p, sizeof p, "rt.safetensors");
    { mx_status _rs = mx_st_writer_save(w, p); TCHECK(_rs == MX_OK, "save: %s", mx_last_error()); if (_rs) return; }
    mx_st_writer_free(w);
    char tp[520];
    snprintf(tp, sizeof tp, "%s.tmp", p);
    TCHECK(access(tp, F_OK) != 0, "tmp file left behind");
    size_t n;
    char *raw = mx_read_file(p, &n);
    TREQUIRE(raw, "read back");
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (unsigned char)raw[i];
    TCHECK(hl % 8 == 0, "header length %llu not padded to 8", (unsigned long long)hl);
    TCHECK(raw[8 + hl - 1] == ' ' || raw[8 + hl - 1] == '}', "padding is spaces");
    /* dtype order as the Python library: F32 first, then BF16, then U8; names sorted within */
    const char *pe = strstr(raw + 8, "\"empty\""), *pm = strstr(raw + 8, "\"m.f32\""), *ps = strstr(raw + 8, "\"scalar\""),
               *pz = strstr(raw + 8, "\"z.bf16\""), *pa = strstr(raw + 8, "\"a.u8\"");
    TCHECK(pe && pm && ps && pz && pa && pe < pm && pm < ps && ps < pz && pz < pa, "tensor order in header");
    TCHECK(!strncmp(raw + 8, "{\"__metadata__\":{\"format\":\"mlx\"}", 32), "metadata first");
    free(raw);
    mx_safetensors *f = NULL;
    { mx_status _rs = mx_st_open(p, &f); TCHECK(_rs == MX_OK, "reopen: %s", mx_last_error()); if (_rs) return; }
    TCHECK(mx_st_count(f) == 5, "count %d", mx_st_count(f));
    const mx_st_tensor *t = mx_st_find(f, "m.f32");
    TCHECK(t && t->dtype == MX_DTYPE_F32 && t->ndim == 2 && t->shape[1] == 3 && !memcmp(t->data, a, sizeof a), "f32 data");
    t = mx_st_find(f, "z.bf16");
    TCHECK(t && t->dtype == MX_DTYPE_BF16 && !memcmp(t->data, b, sizeof b), "bf16 data");
    t = mx_st_find(f, "a.u8");
    TCHECK(t && !memcmp(t->data, c, sizeof c), "u8 data");
    t = mx_st_find(f, "empty");
    TCHECK(t && t->nbytes == 0 && t->shape[0] == 0, "empty");
    t = mx_st_find(f, "scalar");
    TCHECK(t && t->ndim == 0 && t->nbytes == 4, "scalar");
    TCHECK(!strcmp(json_string_value(json_object_get(mx_st_metadata(f), "format")), "mlx"), "meta back");
    mx_st_close(f);
    /* saving into a missing directory fails with a message */
    w = mx_st_writer_new();
    TCHECK(mx_st_writer_save(w, tmp_path(p, sizeof p, "no/such/dir/x.safetensors")) == MX_ERR_IO, "bad dir");
    mx_st_writer_free(w);
}

/* Re-writing a Python-written fixture's tensors (added in reverse order) gives the same bytes. */
static void t_writer_identical(void) {
    char p[512], q[512];
    const char *fx[] = {"tests/fixtures/models/llama-mlx-q4/model.safetensors", "tests/fixtures/models/llama/model.safetensors"};
    for (int k = 0; k < 2; k++) {
        mx_safetensors *f = NULL;
        { mx_status _rs = mx_st_open(t_path(p, sizeof p, fx[k]), &f); TCHECK(_rs == MX_OK, "open %s", mx_last_error()); if (_rs) return; }
        mx_st_writer *w = mx_st_writer_new();
        for (int i = mx_st_count(f) - 1; i >= 0; i--) {
            const mx_st_tensor *t = mx_st_tensor_at(f, i);
            TCHECK(mx_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes) == MX_OK, "add");
        }
        mx_st_writer_set_meta(w, "format", k == 0 ? "mlx" : "pt");
        { mx_status _rs = mx_st_writer_save(w, tmp_path(q, sizeof q, "same.safetensors")); TCHECK(_rs == MX_OK, "save"); if (_rs) return; }
        mx_st_writer_free(w);
        mx_st_close(f);
        size_t n1, n2;
        char *a = mx_read_file(p, &n1), *b = mx_read_file(q, &n2);
        TCHECK(a && b && n1 == n2 && !memcmp(a, b, n1), "%s: rewritten file differs (%zu vs %zu bytes)", fx[k], n1, n2);
        free(a); free(b);
    }
}

static void write_tensor_file(const char *path, const char *const *names, int n, float base) {
    mx_st_writer *w = mx_st_writer_new();
    int64_t shape[1] = {4};
    for (int i = 0; i < n; i++) {
        float v[4] = {base + (float)i, 1, 2, 3};
        mx_st_writer_add(w, names[i], MX_DTYPE_F32, 1, shape, v, sizeof v);
    }
    mx_st_writer_save(w, path);
    mx_st_writer_free(w);
}

static void t_sharded(void) {
    char d[512], p[600];
    tmp_path(d, sizeof d, "sharded");
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/config.json", d);
    write_text(p, "{\"model_type\":\"llama\",\"hidden_size\":4}");
    const char *s1[] = {"a.weight", "b.weight"}, *s2[] = {"c.weight"};
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", d);
    write_tensor_file(p, s1, 2, 10);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", d);
    write_tensor_file(p, s2, 1, 20);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    write_text(p, "{\"metadata\":{\"total_size\":48},\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                  "\"b.weight\":\"model-00001-of-00002.safetensors\",\"c.weight\":\"model-00002-of-00002.safetensors\"}}");
    mx_checkpoint *c = NULL;
    { mx_status _rs = mx_ckpt_open(d, &c); TCHECK(_rs == MX_OK, "open: %s", mx_last_error()); if (_rs) return; }
    TCHECK(mx_ckpt_count(c) == 3, "count %d", mx_ckpt_count(c));
    const mx_st_tensor *t = mx_ckpt_find(c, "c.weight");
    TCHECK(t && ((const float *)t->data)[0] == 20.0f, "c data");
    t = mx_ckpt_find(c, "b.weight");
    TCHECK(t && ((const float *)t->data)[0] == 11.0f, "b data");
    TCHECK(mx_ckpt_total_bytes(c) == 48, "total %zu", mx_ckpt_total_bytes(c));
    TCHECK(!strcmp(mx_ckpt_dir(c), d), "dir");
    int bits, gs;
    TCHECK(mx_ckpt_quant_for(c, "a", &bits, &gs) == MX_OK && bits == 0, "unquantized");
    mx_ckpt_close(c);

    /* index naming a missing shard */
    write_text(p, "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\",\"x.weight\":\"model-00003-of-00003.safetensors\"}}");
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_IO && strstr(mx_last_error(), "model-00003-of-00003.safetensors"), "missing shard: %s", mx_last_error());
    /* index pointing to a tensor absent from its shard */
    write_text(p, "{\"weight_map\":{\"a.weight\":\"model-00002-of-00002.safetensors\"}}");
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_FORMAT && strstr(mx_last_error(), "'a.weight'"), "wrong shard: %s", mx_last_error());
    /* unsafe shard path */
    write_text(p, "{\"weight_map\":{\"a.weight\":\"../x.safetensors\"}}");
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_FORMAT && strstr(mx_last_error(), "unsafe"), "unsafe: %s", mx_last_error());
    write_text(p, "{\"weight_map\":[]}");
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_FORMAT && strstr(mx_last_error(), "weight_map"), "bad index: %s", mx_last_error());
    /* duplicate tensor across shards */
    const char *s3[] = {"c.weight", "d.weight"};
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", d);
    write_tensor_file(p, s3, 2, 30);
    const char *s4[] = {"a.weight", "c.weight"};
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", d);
    write_tensor_file(p, s4, 2, 40);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    write_text(p, "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\",\"d.weight\":\"model-00002-of-00002.safetensors\"}}");
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_FORMAT && strstr(mx_last_error(), "more than one shard"), "duplicate: %s", mx_last_error());
    /* without the index, shards are found by name; the duplicate is still caught */
    unlink(p);
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_FORMAT && strstr(mx_last_error(), "'c.weight'"), "duplicate glob: %s", mx_last_error());
}

static void t_ckpt_errors(void) {
    char d[512], p[600];
    mx_checkpoint *c = NULL;
    TCHECK(mx_ckpt_open(tmp_path(d, sizeof d, "nodir"), &c) == MX_ERR_IO && strstr(mx_last_error(), "no such directory"), "nodir: %s", mx_last_error());
    tmp_path(d, sizeof d, "ck");
    mkdir(d, 0755);
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_IO && strstr(mx_last_error(), "missing config.json"), "noconfig: %s", mx_last_error());
    snprintf(p, sizeof p, "%s/config.json", d);
    write_text(p, "{\"a\": ");
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_FORMAT && strstr(mx_last_error(), "config.json"), "bad config: %s", mx_last_error());
    write_text(p, "[1]");
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_FORMAT && strstr(mx_last_error(), "not a JSON object"), "array config: %s", mx_last_error());
    write_text(p, "{}");
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_IO && strstr(mx_last_error(), "no safetensors files"), "no st: %s", mx_last_error());
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    write_text(p, "garbage!garbage!");
    TCHECK(mx_ckpt_open(d, &c) == MX_ERR_FORMAT && strstr(mx_last_error(), "model.safetensors"), "bad st: %s", mx_last_error());
    TCHECK(c == NULL, "out cleared");
    snprintf(p, sizeof p, "%s/config.json", d);
    TCHECK(mx_ckpt_open(p, &c) == MX_ERR_IO && strstr(mx_last_error(), "not a directory"), "file: %s", mx_last_error());
}

static void t_quant_overrides(void) {
    char d[512], p[600];
    tmp_path(d, sizeof d, "quant");
    mkdir(d, 0755);
    const char *names[] = {"l0.q.scales", "l0.k.scales", "l0.gate.scales", "lm_head.scales"};
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    write_tensor_file(p, names, 4, 0);
    snprintf(p, sizeof p, "%s/config.json", d);
    write_text(p, "{\"quantization\":{\"group_size\":64,\"bits\":4,\"l0.gate\":{\"group_size\":128,\"bits\":8},"
                  "\"lm_head\":false,\"l0.bad\":{\"bits\":7,\"group_size\":64},\"l0.badgs\":{\"bits\":4,\"group_size\":16},"
                  "\"l0.str\":\"x\"}}");
    mx_checkpoint *c = NULL;
    { mx_status _rs = mx_ckpt_open(d, &c); TCHECK(_rs == MX_OK, "open: %s", mx_last_error()); if (_rs) return; }
    int bits = -1, gs = -1;
    TCHECK(mx_ckpt_quant_for(c, "l0.q", &bits, &gs) == MX_OK && bits == 4 && gs == 64, "default %d/%d", bits, gs);
    TCHECK(mx_ckpt_quant_for(c, "l0.gate", &bits, &gs) == MX_OK && bits == 8 && gs == 128, "override %d/%d", bits, gs);
    TCHECK(mx_ckpt_quant_for(c, "lm_head", &bits, &gs) == MX_OK && bits == 0, "false override");
    TCHECK(mx_ckpt_quant_for(c, "l0.norm", &bits, &gs) == MX_OK && bits == 0, "no scales -> not quantized");
    TCHECK(mx_ckpt_quant_for(c, "l0.bad", &bits, &gs) == MX_ERR_UNSUPPORTED && strstr(mx_last_error(), "7-bit"), "bits 7: %s", mx_last_error());
    TCHECK(mx_ckpt_quant_for(c, "l0.badgs", &bits, &gs) == MX_ERR_UNSUPPORTED && strstr(mx_last_error(), "group size 16"), "gs 16: %s", mx_last_error());
    TCHECK(mx_ckpt_quant_for(c, "l0.str", &bits, &gs) == MX_ERR_FORMAT, "string override");
    mx_ckpt_close(c);
    /* quantization_config fallback; global bits unsupported */
    write_text(p, "{\"quantization_config\":{\"group_size\":32,\"bits\":3}}");
    { mx_status _rs = mx_ckpt_open(d, &c); TCHECK(_rs == MX_OK, "open2"); if (_rs) return; }
    TCHECK(mx_ckpt_quant_for(c, "l0.k", &bits, &gs) == MX_OK && bits == 3 && gs == 32, "fallback %d/%d", bits, gs);
    mx_ckpt_close(c);
    write_text(p, "{\"quantization\":{\"group_size\":64,\"bits\":1}}");
    { mx_status _rs = mx_ckpt_open(d, &c); TCHECK(_rs == MX_OK, "open3"); if (_rs) return; }
    TCHECK(mx_ckpt_quant_for(c, "l0.k", &bits, &gs) == MX_ERR_UNSUPPORTED, "global bits 1");
    mx_ckpt_close(c);
    write_text(p, "{\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4}}");
    { mx_status _rs = mx_ckpt_open(d, &c); TCHECK(_rs == MX_OK, "open4"); if (_rs) return; }
    TCHECK(mx_ckpt_quant_for(c, "l0.k", &bits, &gs) == MX_ERR_UNSUPPORTED && strstr(mx_last_error(), "gptq"), "gptq: %s", mx_last_error());
    mx_ckpt_close(c);
    write_text(p, "{\"quantization\":{\"group_size\":64,\"bits\":4,\"mode\":\"mxfp4\"}}");
    { mx_status _rs = mx_ckpt_open(d, &c); TCHECK(_rs == MX_OK, "open5"); if (_rs) return; }
    TCHECK(mx_ckpt_quant_for(c, "l0.k", &bits, &gs) == MX_ERR_UNSUPPORTED && strstr(mx_last_error(), "mxfp4"), "mode: %s", mx_last_error());
    mx_ckpt_close(c);
}

static void t_json_helpers(void) {
    json_t *o = json_loads("{\"i\":5,\"r\":2.5,\"ri\":3.0,\"b\":true,\"s\":\"x\",\"n\":null}", 0, NULL);
    TREQUIRE(o, "parse");
    int64_t i; double d; bool b;
    TCHECK(mx_json_int(o, "i", 0, &i) && i == 5, "int");
    TCHECK(mx_json_int(o, "ri", 0, &i) && i == 3, "integral real");
    TCHECK(!mx_json_int(o, "r", 7, &i) && i == 7, "fractional real rejected");
    TCHECK(!mx_json_int(o, "s", 7, &i) && i == 7, "string rejected");
    TCHECK(mx_json_int(o, "missing", 9, &i) && i == 9, "default");
    TCHECK(mx_json_int(o, "n", 9, &i) && i == 9, "null is default");
    TCHECK(mx_json_int(NULL, "i", 4, &i) && i == 4, "null object");
    TCHECK(mx_json_num(o, "r", 0, &d) && d == 2.5, "num");
    TCHECK(mx_json_num(o, "i", 0, &d) && d == 5, "num from int");
    TCHECK(!mx_json_num(o, "b", 1, &d) && d == 1, "num wrong type");
    TCHECK(mx_json_bool(o, "b", false, &b) && b, "bool");
    TCHECK(!mx_json_bool(o, "i", false, &b) && !b, "bool wrong type");
    TCHECK(mx_json_bool(o, "missing", true, &b) && b, "bool default");
    json_decref(o);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/mlxcel-test-io-XXXXXX");
    if (!mkdtemp(g_tmp)) { printf("FAIL mkdtemp\n"); return 1; }
    RUN(t_fixture_llama);
    RUN(t_fixture_q4);
    RUN(t_bad_files);
    RUN(t_truncated_empty);
    RUN(t_writer_roundtrip);
    RUN(t_writer_identical);
    RUN(t_sharded);
    RUN(t_ckpt_errors);
    RUN(t_quant_overrides);
    RUN(t_json_helpers);
    rm_rf(g_tmp);
    TEST_EXIT();
}
