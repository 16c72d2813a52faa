/* models/common.c: weight building (from checkpoints, or random for benchmarks), common
 * config.json fields, RoPE tables. Not a forward pass. */
#include "models/common.h"
#include "models/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static uint64_t rng_next(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(uint64_t *x) { return (float)((rng_next(x) >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f; }

static void *own(mx_wsrc *s, size_t bytes) {
    if (s->n_owned == s->cap_owned) {
        int cap = s->cap_owned ? s->cap_owned * 2 : 64;
        void **o = realloc(s->owned, (size_t)cap * sizeof *o);
        if (!o) return NULL;
        s->owned = o; s->cap_owned = cap;
    }
    /* large buffers on 2 MiB boundaries with transparent huge pages: weight streaming then crosses
     * fewer page boundaries (TLB misses, prefetcher stops) */
    bool huge = bytes >= (2u << 20);
    void *p = mx_aligned_alloc(huge ? (2u << 20) : 64, bytes);
    if (p && huge) madvise(p, (bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1), MADV_HUGEPAGE);
    if (p) s->owned[s->n_owned++] = p;
    return p;
}

void mx_wsrc_free(mx_wsrc *s) {
    for (int i = 0; i < s->n_owned; i++) free(s->owned[i]);
    free(s->owned);
    s->owned = NULL; s->n_owned = s->cap_owned = 0;
}

bool mx_wsrc_has(mx_wsrc *s, const char *name) { return s->ck ? mx_ckpt_find(s->ck, name) != NULL : true; }

static const char *shape_str(const mx_st_tensor *t, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < t->ndim && k < n; i++) k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static mx_status expect_shape(const mx_st_tensor *t, int64_t a, int64_t b, const char *dir) {
    char sb[96];
    if (b < 0) {
        if (t->ndim != 1 || t->shape[0] != a)
            return mx_errorf(MX_ERR_FORMAT, "%s: tensor %s has shape %s, expected [%lld]", dir, t->name, shape_str(t, sb, sizeof sb), (long long)a);
    } else if (t->ndim != 2 || t->shape[0] != a || t->shape[1] != b) {
        return mx_errorf(MX_ERR_FORMAT, "%s: tensor %s has shape %s, expected [%lld, %lld]", dir, t->name, shape_str(t, sb, sizeof sb), (long long)a, (long long)b);
    }
    return MX_OK;
}

static bool is_float_dtype(mx_dtype d) { return d == MX_DTYPE_F32 || d == MX_DTYPE_F16 || d == MX_DTYPE_BF16; }

static mx_status random_linear(mx_wsrc *s, int64_t rows, int64_t cols, int want_bias, mx_weight *w) {
    memset(w, 0, sizeof *w);
    w->rows = rows; w->cols = cols;
    float amp = 1.0f / sqrtf((float)cols) * 1.7f;
    if (s->q_bits) {
        int bits = s->q_bits, gs = s->q_group;
        if (cols % gs || (cols * bits) % 32) return mx_errorf(MX_ERR_UNSUPPORTED, "random weights: %lld columns do not divide into groups of %d", (long long)cols, gs);
        size_t words = (size_t)rows * (size_t)(cols * bits / 32), groups = (size_t)rows * (size_t)(cols / gs);
        uint32_t *q = own(s, words * 4);
        uint16_t *sc = own(s, groups * 2), *bi = own(s, groups * 2);
        if (!q || !sc || !bi) return mx_errorf(MX_ERR_NOMEM, "random weights: out of memory");
        for (size_t i = 0; i < words; i += 2) { uint64_t r = rng_next(&s->rng); q[i] = (uint32_t)r; if (i + 1 < words) q[i + 1] = (uint32_t)(r >> 32); }
        float levels = (float)((1 << bits) - 1);
        for (size_t g = 0; g < groups; g++) {
            float scale = 2.f * amp / levels * (0.75f + 0.25f * rng_uniform(&s->rng));
            sc[g] = mx_f32_to_bf16(scale);
            bi[g] = mx_f32_to_bf16(-scale * levels * 0.5f);
        }
        w->dtype = MX_DTYPE_U32; w->bits = bits; w->group_size = gs;
        w->w = q; w->scales = sc; w->biases = bi; w->scale_dtype = MX_DTYPE_BF16;
    } else {
        size_t n = (size_t)rows * (size_t)cols, es = mx_dtype_size(s->dtype);
        void *d = own(s, n * es);
        if (!d) return mx_errorf(MX_ERR_NOMEM, "random weights: out of memory");
        for (size_t i = 0; i < n; i++) {
            float v = amp * rng_uniform(&s->rng);
            if (s->dtype == MX_DTYPE_BF16) ((uint16_t *)d)[i] = mx_f32_to_bf16(v);
            else if (s->dtype == MX_DTYPE_F16) ((uint16_t *)d)[i] = mx_f32_to_f16(v);
            else ((float *)d)[i] = v;
        }
        w->dtype = s->dtype; w->w = d;
    }
    if (want_bias == 1) {
        uint16_t *b = own(s, (size_t)rows * 2);
        if (!b) return mx_errorf(MX_ERR_NOMEM, "random weights: out of memory");
        for (int64_t i = 0; i < rows; i++) b[i] = mx_f32_to_bf16(0.02f * rng_uniform(&s->rng));
        w->bias = b; w->bias_dtype = MX_DTYPE_BF16;
    }
    return MX_OK;
}

mx_status mx_wsrc_linear(mx_wsrc *s, const char *prefix, int64_t rows, int64_t cols, int want_bias, mx_weight *w) {
    if (!s->ck) return random_linear(s, rows, cols, want_bias, w);
    const char *dir = mx_ckpt_dir(s->ck);
    char name[512];
    memset(w, 0, sizeof *w);
    w->rows = rows; w->cols = cols;
    snprintf(name, sizeof name, "%s.weight", prefix);
    const mx_st_tensor *t = mx_ckpt_find(s->ck, name);
    if (!t) return mx_errorf(MX_ERR_FORMAT, "%s: missing tensor %s", dir, name);
    mx_status st;
    if (t->dtype == MX_DTYPE_U32) {
        int bits, gs;
        if ((st = mx_ckpt_quant_for(s->ck, prefix, &bits, &gs)) != MX_OK) return st;
        if (bits == 0) return mx_errorf(MX_ERR_FORMAT, "%s: %s is U32 (quantized) but config.json has no quantization for it", dir, name);
        if (cols % gs) return mx_errorf(MX_ERR_FORMAT, "%s: %s: %lld columns do not divide into groups of %d", dir, prefix, (long long)cols, gs);
        if ((cols * bits) % 32) return mx_errorf(MX_ERR_FORMAT, "%s: %s: %lld columns of %d bits do not fill whole u32 words", dir, prefix, (long long)cols, bits);
        if ((st = expect_shape(t, rows, cols * bits / 32, dir)) != MX_OK) return st;
        char sn[512], bn[512];
        snprintf(sn, sizeof sn, "%s.scales", prefix);
        snprintf(bn, sizeof bn, "%s.biases", prefix);
        const mx_st_tensor *ts = mx_ckpt_find(s->ck, sn), *tb = mx_ckpt_find(s->ck, bn);
        if (!ts) return mx_errorf(MX_ERR_FORMAT, "%s: missing tensor %s", dir, sn);
        if (!tb) return mx_errorf(MX_ERR_FORMAT, "%s: missing tensor %s", dir, bn);
        if ((st = expect_shape(ts, rows, cols / gs, dir)) != MX_OK) return st;
        if ((st = expect_shape(tb, rows, cols / gs, dir)) != MX_OK) return st;
        if (!is_float_dtype(ts->dtype) || ts->dtype != tb->dtype)
            return mx_errorf(MX_ERR_FORMAT, "%s: %s scales/biases must share a float dtype (got %s, %s)", dir, prefix, mx_dtype_name(ts->dtype), mx_dtype_name(tb->dtype));
        w->dtype = MX_DTYPE_U32; w->bits = bits; w->group_size = gs;
        w->w = t->data; w->scales = ts->data; w->biases = tb->data; w->scale_dtype = ts->dtype;
    } else if (is_float_dtype(t->dtype)) {
        if ((st = expect_shape(t, rows, cols, dir)) != MX_OK) return st;
        w->dtype = t->dtype; w->w = t->data;
    } else {
        return mx_errorf(MX_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; weights must be F32, F16, BF16 or U32 (MLX quantized)", dir, name, mx_dtype_name(t->dtype));
    }
    snprintf(name, sizeof name, "%s.bias", prefix);
    const mx_st_tensor *tb = mx_ckpt_find(s->ck, name);
    if (want_bias == 1 && !tb) return mx_errorf(MX_ERR_FORMAT, "%s: missing tensor %s", dir, name);
    if (tb && want_bias) {
        if ((st = expect_shape(tb, rows, -1, dir)) != MX_OK) return st;
        if (!is_float_dtype(tb->dtype)) return mx_errorf(MX_ERR_FORMAT, "%s: %s must be a float tensor", dir, name);
        w->bias = tb->data; w->bias_dtype = tb->dtype;
    }
    return MX_OK;
}

static mx_status expect_shape3(const mx_st_tensor *t, int64_t e, int64_t a, int64_t b, const char *dir) {
    char sb[96];
    if (t->ndim != 3 || t->shape[0] != e || t->shape[1] != a || t->shape[2] != b)
        return mx_errorf(MX_ERR_FORMAT, "%s: tensor %s has shape %s, expected [%lld, %lld, %lld]", dir, t->name, shape_str(t, sb, sizeof sb),
                         (long long)e, (long long)a, (long long)b);
    return MX_OK;
}

mx_status mx_wsrc_experts(mx_wsrc *s, const char *prefix, int n_experts, int64_t rows, int64_t cols, mx_weight *w) {
    if (n_experts <= 0) return mx_errorf(MX_ERR_INVALID_ARG, "%s: no experts", prefix);
    if (!s->ck) {
        for (int e = 0; e < n_experts; e++) {
            mx_status st = random_linear(s, rows, cols, 0, &w[e]);
            if (st) return st;
        }
        return MX_OK;
    }
    const char *dir = mx_ckpt_dir(s->ck);
    char name[512], sn[512], bn[512];
    mx_weight base;
    memset(&base, 0, sizeof base);
    base.rows = rows; base.cols = cols;
    snprintf(name, sizeof name, "%s.weight", prefix);
    const mx_st_tensor *t = mx_ckpt_find(s->ck, name);
    if (!t) return mx_errorf(MX_ERR_FORMAT, "%s: missing tensor %s", dir, name);
    mx_status st;
    size_t wstride, sstride = 0;
    if (t->dtype == MX_DTYPE_U32) {
        int bits, gs;
        if ((st = mx_ckpt_quant_for(s->ck, prefix, &bits, &gs)) != MX_OK) return st;
        if (bits == 0) return mx_errorf(MX_ERR_FORMAT, "%s: %s is U32 (quantized) but config.json has no quantization for it", dir, name);
        if (gs <= 0 || cols % gs) return mx_errorf(MX_ERR_FORMAT, "%s: %s: %lld columns do not divide into groups of %d", dir, prefix, (long long)cols, gs);
        if ((cols * bits) % 32) return mx_errorf(MX_ERR_FORMAT, "%s: %s: %lld columns of %d bits do not fill whole u32 words", dir, prefix, (long long)cols, bits);
        if ((st = expect_shape3(t, n_experts, rows, cols * bits / 32, dir)) != MX_OK) return st;
        snprintf(sn, sizeof sn, "%s.scales", prefix);
        snprintf(bn, sizeof bn, "%s.biases", prefix);
        const mx_st_tensor *ts = mx_ckpt_find(s->ck, sn), *tb = mx_ckpt_find(s->ck, bn);
        if (!ts) return mx_errorf(MX_ERR_FORMAT, "%s: missing tensor %s", dir, sn);
        if (!tb) return mx_errorf(MX_ERR_FORMAT, "%s: missing tensor %s", dir, bn);
        if ((st = expect_shape3(ts, n_experts, rows, cols / gs, dir)) != MX_OK) return st;
        if ((st = expect_shape3(tb, n_experts, rows, cols / gs, dir)) != MX_OK) return st;
        if (!is_float_dtype(ts->dtype) || ts->dtype != tb->dtype)
            return mx_errorf(MX_ERR_FORMAT, "%s: %s scales/biases must share a float dtype (got %s, %s)", dir, prefix, mx_dtype_name(ts->dtype), mx_dtype_name(tb->dtype));
        base.dtype = MX_DTYPE_U32; base.bits = bits; base.group_size = gs;
        base.w = t->data; base.scales = ts->data; base.biases = tb->data; base.scale_dtype = ts->dtype;
        wstride = (size_t)rows * (size_t)(cols * bits / 32) * 4;
        sstride = (size_t)rows * (size_t)(cols / gs) * mx_dtype_size(ts->dtype);
    } else if (is_float_dtype(t->dtype)) {
        if ((st = expect_shape3(t, n_experts, rows, cols, dir)) != MX_OK) return st;
        base.dtype = t->dtype; base.w = t->data;
        wstride = (size_t)rows * (size_t)cols * mx_dtype_size(t->dtype);
    } else {
        return mx_errorf(MX_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; weights must be F32, F16, BF16 or U32 (MLX quantized)", dir, name, mx_dtype_name(t->dtype));
    }
    for (int e = 0; e < n_experts; e++) {
        w[e] = base;
        w[e].w = (const char *)base.w + (size_t)e * wstride;
        if (base.bits) {
            w[e].scales = (const char *)base.scales + (size_t)e * sstride;
            w[e].biases = (const char *)base.biases + (size_t)e * sstride;
        }
    }
    return MX_OK;
}

mx_status mx_wsrc_vec(mx_wsrc *s, const char *name, int64_t n, float fill, mx_vec *v) {
    memset(v, 0, sizeof *v);
    v->n = n;
    if (!s->ck) {
        float *d = own(s, (size_t)n * sizeof *d);
        if (!d) return mx_errorf(MX_ERR_NOMEM, "random weights: out of memory");
        for (int64_t i = 0; i < n; i++) d[i] = fill;
        v->dtype = MX_DTYPE_F32; v->data = d;
        return MX_OK;
    }
    const char *dir = mx_ckpt_dir(s->ck);
    const mx_st_tensor *t = mx_ckpt_find(s->ck, name);
    if (!t) return mx_errorf(MX_ERR_FORMAT, "%s: missing tensor %s", dir, name);
    mx_status st = expect_shape(t, n, -1, dir);
    if (st) return st;
    if (!is_float_dtype(t->dtype)) return mx_errorf(MX_ERR_FORMAT, "%s: %s must be a float tensor, not %s", dir, name, mx_dtype_name(t->dtype));
    v->dtype = t->dtype; v->data = t->data;
    return MX_OK;
}

mx_status mx_wsrc_vec_f32(mx_wsrc *s, const char *name, int64_t n, float fill, float **out) {
    mx_vec v;
    *out = NULL;
    mx_status st = mx_wsrc_vec(s, name, n, fill, &v);
    if (st) return st;
    float *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (!d) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
        d[i] = v.dtype == MX_DTYPE_F32 ? ((const float *)v.data)[i]
               : v.dtype == MX_DTYPE_BF16 ? mx_bf16_to_f32(((const uint16_t *)v.data)[i])
                                          : mx_f16_to_f32(((const uint16_t *)v.data)[i]);
    *out = d;
    return MX_OK;
}

static mx_status get_int(json_t *cfg, const char *dir, const char *key, int64_t def, bool required, int64_t lo, int64_t hi, int *out) {
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        if (required) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: missing \"%s\"", dir, key);
        *out = (int)def;
        return MX_OK;
    }
    if (!json_is_integer(v)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"%s\" must be an integer", dir, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"%s\" = %lld is out of range [%lld, %lld]", dir, key, (long long)x, (long long)lo, (long long)hi);
    *out = (int)x;
    return MX_OK;
}

static void add_eos(mx_model_config *c, json_t *v) {
    if (json_is_integer(v)) {
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= c->vocab_size) return;
        for (int i = 0; i < c->n_eos; i++) if (c->eos_ids[i] == id) return;
        if (c->n_eos < MX_MAX_EOS) c->eos_ids[c->n_eos++] = (int32_t)id;
    } else if (json_is_array(v)) {
        size_t i; json_t *e;
        json_array_foreach(v, i, e) add_eos(c, e);
    }
}

mx_status mx_parse_common_config(json_t *cfg, const char *dir, mx_model_config *c) {
    mx_status st;
    memset(c, 0, sizeof *c);
    json_t *mt = json_object_get(cfg, "model_type");
    if (!json_is_string(mt)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: missing \"model_type\"", dir);
    snprintf(c->model_type, sizeof c->model_type, "%s", json_string_value(mt));
    if ((st = get_int(cfg, dir, "vocab_size", 0, true, 1, 1 << 24, &c->vocab_size))) return st;
    if ((st = get_int(cfg, dir, "hidden_size", 0, true, 1, 1 << 20, &c->hidden_size))) return st;
    if ((st = get_int(cfg, dir, "num_hidden_layers", 0, true, 1, 4096, &c->n_layers))) return st;
    if ((st = get_int(cfg, dir, "num_attention_heads", 0, true, 1, 4096, &c->n_heads))) return st;
    if ((st = get_int(cfg, dir, "num_key_value_heads", c->n_heads, false, 1, 4096, &c->n_kv_heads))) return st;
    if ((st = get_int(cfg, dir, "head_dim", c->hidden_size / c->n_heads, false, 1, 4096, &c->head_dim))) return st;
    if ((st = get_int(cfg, dir, "intermediate_size", 0, true, 1, 1 << 22, &c->intermediate_size))) return st;
    if ((st = get_int(cfg, dir, "max_position_embeddings", 4096, false, 1, 1 << 30, &c->max_position_embeddings))) return st;
    if (c->n_heads % c->n_kv_heads)
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)", dir, c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: head_dim %d must be even", dir, c->head_dim);
    double eps = 1e-6;
    json_t *e = json_object_get(cfg, "rms_norm_eps");
    if (!e) e = json_object_get(cfg, "layer_norm_eps");
    if (e && !json_is_null(e)) {
        if (!json_is_number(e)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"rms_norm_eps\" must be a number", dir);
        eps = json_number_value(e);
        if (!(eps >= 0 && eps < 1)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"rms_norm_eps\" out of range", dir);
    }
    c->norm_eps = (float)eps;
    json_t *tie = json_object_get(cfg, "tie_word_embeddings");
    if (tie && !json_is_boolean(tie) && !json_is_null(tie)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"tie_word_embeddings\" must be true or false", dir);
    c->tie_word_embeddings = tie && json_is_true(tie);
    json_t *bos = json_object_get(cfg, "bos_token_id");
    c->bos_id = json_is_integer(bos) ? (int32_t)json_integer_value(bos) : -1;
    add_eos(c, json_object_get(cfg, "eos_token_id"));
    if (dir) {   /* generation_config.json may list more EOS ids */
        char path[4096];
        snprintf(path, sizeof path, "%s/generation_config.json", dir);
        json_error_t err;
        json_t *g = json_load_file(path, 0, &err);
        if (g) { add_eos(c, json_object_get(g, "eos_token_id")); json_decref(g); }
    }
    json_t *q = json_object_get(cfg, "quantization");
    if (!q) q = json_object_get(cfg, "quantization_config");
    if (json_is_object(q)) {
        json_t *b = json_object_get(q, "bits"), *g = json_object_get(q, "group_size");
        if (json_is_integer(b)) c->q_bits = (int)json_integer_value(b);
        if (json_is_integer(g)) c->q_group_size = (int)json_integer_value(g);
    }
    return MX_OK;
}

mx_status mx_rope_inv_freq(json_t *cfg, int rot_dim, float **out) {
    json_t *rp = json_object_get(cfg, "rope_parameters");
    if (!json_is_object(rp)) rp = json_object_get(cfg, "rope_scaling");
    double theta = 10000.0;
    json_t *t = json_object_get(cfg, "rope_theta");
    if (json_is_object(rp) && json_is_number(json_object_get(rp, "rope_theta"))) t = json_object_get(rp, "rope_theta");
    if (t && json_is_number(t)) theta = json_number_value(t);
    if (!(theta > 1.0)) return mx_errorf(MX_ERR_FORMAT, "config.json: rope_theta must be > 1");
    const char *type = "default";
    if (json_is_object(rp)) {
        json_t *ty = json_object_get(rp, "rope_type");
        if (!json_is_string(ty)) ty = json_object_get(rp, "type");
        if (json_is_string(ty)) type = json_string_value(ty);
    }
    int half = rot_dim / 2;
    float *f = malloc((size_t)half * sizeof *f);
    if (!f) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < half; i++) {
        /* as transformers: float32 of base ** (2i / dim) */
        float ex = (float)(2 * i) / (float)rot_dim;
        f[i] = 1.0f / powf((float)theta, ex);
    }
    if (!strcmp(type, "default")) {
    } else if (!strcmp(type, "linear")) {
        double factor = 1.0;
        json_t *fa = json_object_get(rp, "factor");
        if (json_is_number(fa)) factor = json_number_value(fa);
        if (!(factor > 0)) { free(f); return mx_errorf(MX_ERR_FORMAT, "config.json: rope factor must be > 0"); }
        for (int i = 0; i < half; i++) f[i] = (float)(f[i] / factor);
    } else if (!strcmp(type, "llama3")) {
        double factor = 8, lo = 1, hi = 4, old = 8192;
        json_t *v;
        if ((v = json_object_get(rp, "factor")) && json_is_number(v)) factor = json_number_value(v);
        if ((v = json_object_get(rp, "low_freq_factor")) && json_is_number(v)) lo = json_number_value(v);
        if ((v = json_object_get(rp, "high_freq_factor")) && json_is_number(v)) hi = json_number_value(v);
        if ((v = json_object_get(rp, "original_max_position_embeddings")) && json_is_number(v)) old = json_number_value(v);
        if (!(factor > 0) || !(hi > lo) || !(old > 0)) { free(f); return mx_errorf(MX_ERR_FORMAT, "config.json: bad llama3 rope parameters"); }
        float low_wl = (float)(old / lo), high_wl = (float)(old / hi);
        for (int i = 0; i < half; i++) {
            float inv = f[i];
            float wl = 2.0f * (float)M_PI / inv;
            float scaled = wl > low_wl ? inv / (float)factor : inv;
            if (!(wl < high_wl) && !(wl > low_wl)) {
                float smooth = ((float)old / wl - (float)lo) / (float)(hi - lo);
                scaled = (1 - smooth) * scaled / (float)factor + smooth * scaled;
            }
            f[i] = scaled;
        }
    } else if (!strcmp(type, "yarn")) {
        /* as transformers: blend interpolated (inv / factor) and extrapolated frequencies with a
         * linear ramp between the correction dims of beta_fast and beta_slow rotations */
        double factor, fast = 32, slow = 1, old;
        bool trunc = true;
        json_t *v;
        if (!((v = json_object_get(rp, "factor")) && json_is_number(v)) || !((factor = json_number_value(v)) > 0)) {
            free(f);
            return mx_errorf(MX_ERR_FORMAT, "config.json: yarn rope needs a positive \"factor\"");
        }
        if ((v = json_object_get(rp, "beta_fast")) && json_is_number(v)) fast = json_number_value(v);
        if ((v = json_object_get(rp, "beta_slow")) && json_is_number(v)) slow = json_number_value(v);
        if ((v = json_object_get(rp, "truncate")) && json_is_boolean(v)) trunc = json_is_true(v);
        v = json_object_get(rp, "original_max_position_embeddings");
        if (!json_is_number(v)) v = json_object_get(cfg, "max_position_embeddings");
        old = json_is_number(v) ? json_number_value(v) : 0;
        if (!(old > 0) || !(fast > 0) || !(slow > 0)) { free(f); return mx_errorf(MX_ERR_FORMAT, "config.json: bad yarn rope parameters"); }
        double lo = rot_dim * log(old / (fast * 2 * M_PI)) / (2 * log(theta));
        double hi = rot_dim * log(old / (slow * 2 * M_PI)) / (2 * log(theta));
        if (trunc) { lo = floor(lo); hi = ceil(hi); }
        if (lo < 0) lo = 0;
        if (hi > rot_dim - 1) hi = rot_dim - 1;
        float flo = (float)lo, fhi = (float)hi;
        if (flo == fhi) fhi += 0.001f;
        for (int i = 0; i < half; i++) {
            float ramp = ((float)i - flo) / (fhi - flo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float extra = 1.0f - ramp;   /* weight of the extrapolated (unscaled) frequency */
            float interp = f[i] / (float)factor;
            f[i] = interp * (1 - extra) + f[i] * extra;
        }
    } else {
        free(f);
        return mx_errorf(MX_ERR_UNSUPPORTED, "config.json: rope type \"%s\" is not supported (default, linear, llama3, yarn)", type);
    }
    *out = f;
    return MX_OK;
}

float mx_rope_attn_factor(json_t *cfg) {
    json_t *rp = json_object_get(cfg, "rope_parameters");
    if (!json_is_object(rp)) rp = json_object_get(cfg, "rope_scaling");
    if (!json_is_object(rp)) return 1.0f;
    json_t *ty = json_object_get(rp, "rope_type");
    if (!json_is_string(ty)) ty = json_object_get(rp, "type");
    if (!json_is_string(ty) || strcmp(json_string_value(ty), "yarn")) return 1.0f;
    json_t *v = json_object_get(rp, "attention_factor");
    if (json_is_number(v)) return (float)json_number_value(v);
    double factor = 1, ms = 0, msa = 0;
    if ((v = json_object_get(rp, "factor")) && json_is_number(v)) factor = json_number_value(v);
    if ((v = json_object_get(rp, "mscale")) && json_is_number(v)) ms = json_number_value(v);
    if ((v = json_object_get(rp, "mscale_all_dim")) && json_is_number(v)) msa = json_number_value(v);
    double m1 = factor <= 1 ? 1.0 : 0.1 * (ms != 0 && msa != 0 ? ms : 1.0) * log(factor) + 1.0;
    double m2 = factor <= 1 ? 1.0 : 0.1 * msa * log(factor) + 1.0;
    return (float)(ms != 0 && msa != 0 ? m1 / m2 : m1);
}

mx_status mx_wsrc_experts_t(mx_wsrc *s, const char *name, int n_experts, int64_t in, int64_t out, int n_parts, mx_weight *w) {
    const int E = n_experts;
    if (!s->ck) {
        for (int i = 0; i < n_parts * E; i++) {
            mx_status st = random_linear(s, out, in, 1, &w[i]);
            if (st) return st;
        }
        return MX_OK;
    }
    const char *dir = mx_ckpt_dir(s->ck);
    char bn[512];
    snprintf(bn, sizeof bn, "%s_bias", name);
    const mx_st_tensor *t = mx_ckpt_find(s->ck, name), *tb = mx_ckpt_find(s->ck, bn);
    if (!t) return mx_errorf(MX_ERR_FORMAT, "%s: missing tensor %s", dir, name);
    if (!tb) return mx_errorf(MX_ERR_FORMAT, "%s: missing tensor %s", dir, bn);
    const int64_t oc = out * n_parts;
    if (!is_float_dtype(t->dtype) || !is_float_dtype(tb->dtype))
        return mx_errorf(MX_ERR_UNSUPPORTED, "%s: %s and its bias must be F32, F16 or BF16 (got %s, %s)", dir, name, mx_dtype_name(t->dtype), mx_dtype_name(tb->dtype));
    if (t->ndim != 3 || t->shape[0] != E || t->shape[1] != in || t->shape[2] != oc)
        return mx_errorf(MX_ERR_FORMAT, "%s: %s must have shape [%d, %lld, %lld]", dir, name, E, (long long)in, (long long)oc);
    if (tb->ndim != 2 || tb->shape[0] != E || tb->shape[1] != oc)
        return mx_errorf(MX_ERR_FORMAT, "%s: %s must have shape [%d, %lld]", dir, bn, E, (long long)oc);
    const size_t es = mx_dtype_size(t->dtype), bs = mx_dtype_size(tb->dtype);
    for (int p = 0; p < n_parts; p++)
        for (int e = 0; e < E; e++) {
            char *wd = own(s, (size_t)out * (size_t)in * es), *bd = own(s, (size_t)out * bs);
            if (!wd || !bd) return mx_errorf(MX_ERR_NOMEM, "out of memory transposing %s", name);
            const char *src = (const char *)t->data + (size_t)e * (size_t)in * (size_t)oc * es;
            for (int64_t o = 0; o < out; o++) {
                int64_t c = o * n_parts + p;   /* part p's column o */
                for (int64_t i = 0; i < in; i++) memcpy(wd + ((size_t)o * (size_t)in + (size_t)i) * es, src + ((size_t)i * (size_t)oc + (size_t)c) * es, es);
                memcpy(bd + (size_t)o * bs, (const char *)tb->data + ((size_t)e * (size_t)oc + (size_t)c) * bs, bs);
            }
            mx_weight *x = &w[(size_t)p * E + e];
            memset(x, 0, sizeof *x);
            x->rows = out; x->cols = in; x->dtype = t->dtype; x->w = wd;
            x->bias = bd; x->bias_dtype = tb->dtype;
        }
    return MX_OK;
}

mx_status mx_cfg_count(json_t *config, const char *dir, const char *key, const char *alt, int lo, int hi, int *out) {
    json_t *v = json_object_get(config, key);
    const char *name = key;
    if ((!v || json_is_null(v)) && alt) { v = json_object_get(config, alt); name = alt; }
    if (!v || json_is_null(v)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: missing \"%s\"", dir, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"%s\" must be an integer in [%d, %d]", dir, name, lo, hi);
    *out = (int)json_integer_value(v);
    return MX_OK;
}
