/* cpu_backend.c: the CPU implementation of the backend vtable (mlxcel/backend.h): memory, the
 * paged KV cache, norms, RoPE, activations and element-wise ops, all multithreaded over rows with the
 * global pool. Matmul lives in cpu_matmul.c/cpu_kernels.c, attention in cpu_attention.c. It does not know model families. */
#include "cpu_internal.h"

#include <math.h>
#include <stdlib.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* ---------------------------------------------------------------------------------------- */
/* scratch and conversion helpers                                                           */

void *mx_cpu_tscratch(mx_cpu_ctx *c, int tid, size_t bytes) {
    if (tid < 0 || tid >= MX_CPU_MAX_THREADS) return NULL;
    if (c->tscratch_size[tid] >= bytes) return c->tscratch[tid];
    free(c->tscratch[tid]);
    size_t sz = (bytes + 4095) & ~(size_t)4095;
    c->tscratch[tid] = mx_aligned_alloc(64, sz);
    c->tscratch_size[tid] = c->tscratch[tid] ? sz : 0;
    return c->tscratch[tid];
}

void *mx_cpu_shared(mx_cpu_ctx *c, size_t bytes) {
    if (c->shared_size >= bytes) return c->shared;
    free(c->shared);
    size_t sz = (bytes + 4095) & ~(size_t)4095;
    c->shared = mx_aligned_alloc(64, sz);
    c->shared_size = c->shared ? sz : 0;
    return c->shared;
}

void mx_cpu_to_f32(mx_dtype dt, const void *src, int64_t off, int64_t n, float *dst) {
    int64_t i = 0;
    if (dt == MX_DTYPE_F32) { memcpy(dst, (const float *)src + off, (size_t)n * sizeof(float)); return; }
    const uint16_t *s = (const uint16_t *)src + off;
    if (dt == MX_DTYPE_BF16) {
#ifdef __AVX512F__
        for (; i + 16 <= n; i += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(s + i));
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
        }
#endif
        for (; i < n; i++) dst[i] = mx_bf16_to_f32(s[i]);
    } else if (dt == MX_DTYPE_F16) {
#ifdef __AVX512F__
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
#endif
        for (; i < n; i++) dst[i] = mx_f16_to_f32(s[i]);
    } else {
        for (; i < n; i++) dst[i] = 0.0f;
    }
}

float mx_cpu_dot(const float *a, const float *b, int64_t n) {
    int64_t i = 0;
#ifdef __AVX512F__
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
        i = n;
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
#else
    float s[8] = {0};
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    float t = 0;
    for (; i < n; i++) t += a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + t;
#endif
}

/* ---------------------------------------------------------------------------------------- */
/* memory                                                                                   */

static void *cpu_alloc(void *ctx, size_t bytes) { (void)ctx; return mx_aligned_alloc(64, bytes); }
static void cpu_free(void *ctx, void *p) { (void)ctx; free(p); }
static void cpu_write(void *ctx, void *dst, const void *src, size_t bytes) { (void)ctx; if (bytes) memmove(dst, src, bytes); }
static void cpu_read(void *ctx, void *dst, const void *src, size_t bytes) { (void)ctx; if (bytes) memmove(dst, src, bytes); }
static void cpu_sync(void *ctx) { (void)ctx; }

static mx_status cpu_weight_prepare(void *ctx, mx_weight *w) { (void)ctx; return mx_cpu_weight_check(w); }

static mx_status cpu_vec_prepare(void *ctx, mx_vec *v) {
    (void)ctx;
    if (!v || !v->data || v->n <= 0) return mx_errorf(MX_ERR_INVALID_ARG, "cpu backend: empty vector");
    if (v->dtype != MX_DTYPE_F32 && v->dtype != MX_DTYPE_F16 && v->dtype != MX_DTYPE_BF16)
        return mx_errorf(MX_ERR_UNSUPPORTED, "cpu backend: vector dtype %s not supported", mx_dtype_name(v->dtype));
    return MX_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* KV cache                                                                                 */

static void cpu_kv_free(void *ctx) {
    mx_cpu_ctx *c = ctx;
    if (c->k_cache) for (int l = 0; l < c->kv.n_layers; l++) free(c->k_cache[l]);
    if (c->v_cache) for (int l = 0; l < c->kv.n_layers; l++) free(c->v_cache[l]);
    free(c->k_cache); free(c->v_cache);
    c->k_cache = c->v_cache = NULL;
    memset(&c->kv, 0, sizeof c->kv);
}

static mx_status cpu_kv_init(void *ctx, mx_kv_desc *d) {
    mx_cpu_ctx *c = ctx;
    cpu_kv_free(c);
    if (!d || d->n_layers <= 0 || d->n_kv_heads <= 0 || d->head_dim <= 0 || d->block_size <= 0 || d->n_blocks <= 0)
        return mx_errorf(MX_ERR_INVALID_ARG, "cpu kv_init: bad geometry");
    uint64_t slots = (uint64_t)d->n_blocks * (uint64_t)d->block_size;
    uint64_t per = (uint64_t)d->n_kv_heads * (uint64_t)d->head_dim;
    if (slots > INT32_MAX || per > (1u << 24) || slots * per > (uint64_t)SIZE_MAX / sizeof(float) / 2)
        return mx_errorf(MX_ERR_NOMEM, "cpu kv_init: cache too large");
    size_t bytes = (size_t)(slots * per * sizeof(float));
    c->k_cache = calloc((size_t)d->n_layers, sizeof(float *));
    c->v_cache = calloc((size_t)d->n_layers, sizeof(float *));
    if (!c->k_cache || !c->v_cache) goto fail;
    c->kv = *d;
    for (int l = 0; l < d->n_layers; l++) {
        c->k_cache[l] = mx_aligned_alloc(64, bytes);
        c->v_cache[l] = mx_aligned_alloc(64, bytes);
        if (!c->k_cache[l] || !c->v_cache[l]) goto fail;
        memset(c->k_cache[l], 0, bytes);
        memset(c->v_cache[l], 0, bytes);
    }
    d->dtype = MX_DTYPE_F32;
    c->kv.dtype = MX_DTYPE_F32;
    return MX_OK;
fail:
    cpu_kv_free(c);
    return mx_errorf(MX_ERR_NOMEM, "cpu kv_init: cannot allocate %d layers x %zu bytes", d->n_layers, bytes * 2);
}

/* ---------------------------------------------------------------------------------------- */
/* embed                                                                                    */

typedef struct { const mx_weight *w; const int32_t *ids; float *out; } embed_job;
static void embed_fn(void *arg, int64_t b, int64_t e, int tid) {
    embed_job *j = arg;
    for (int64_t i = b; i < e; i++) {
        float *o = j->out + i * j->w->cols;
        int32_t id = j->ids[i];
        if (id < 0 || id >= j->w->rows) { memset(o, 0, (size_t)j->w->cols * sizeof(float)); continue; }
        mx_cpu_weight_row(j->w, id, o);
    }
}
static void cpu_embed(void *ctx, const mx_weight *w, const int32_t *ids, int n, float *out) {
    mx_cpu_ctx *c = ctx;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->rows) MX_LOGE("cpu embed: token id %d out of range [0, %lld)", ids[i], (long long)w->rows);
    embed_job j = {w, ids, out};
    mx_pool_run(c->pool, n, 1, embed_fn, &j);
}

/* ---------------------------------------------------------------------------------------- */
/* norms                                                                                    */

typedef struct { const float *x; const mx_vec *g, *b; float eps, add_one; float *y; int d; float *gf, *bf; } norm_job;

static void rmsnorm_fn(void *arg, int64_t b, int64_t e, int tid) {
    norm_job *j = arg;
    int d = j->d;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->x + r * d;
        float *y = j->y + r * d;
        double ss = 0;
        int i = 0;
#ifdef __AVX512F__
        __m512 acc = _mm512_setzero_ps();
        for (; i + 16 <= d; i += 16) { __m512 v = _mm512_loadu_ps(x + i); acc = _mm512_fmadd_ps(v, v, acc); }
        float lanes[16];
        _mm512_storeu_ps(lanes, acc);
        for (int k = 0; k < 16; k++) ss += lanes[k];
#endif
        for (; i < d; i++) ss += (double)x[i] * x[i];
        float inv = 1.0f / sqrtf((float)(ss / d) + j->eps);
        if (j->gf) for (i = 0; i < d; i++) y[i] = (x[i] * inv) * j->gf[i];
        else for (i = 0; i < d; i++) y[i] = x[i] * inv;
    }
}

static void layernorm_fn(void *arg, int64_t b, int64_t e, int tid) {
    norm_job *j = arg;
    int d = j->d;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->x + r * d;
        float *y = j->y + r * d;
        double s = 0;
        for (int i = 0; i < d; i++) s += x[i];
        double mean = s / d, v = 0;
        for (int i = 0; i < d; i++) { double t = x[i] - mean; v += t * t; }
        float inv = 1.0f / sqrtf((float)(v / d) + j->eps), m = (float)mean;
        for (int i = 0; i < d; i++) {
            float t = (x[i] - m) * inv;
            if (j->gf) t *= j->gf[i];
            if (j->bf) t += j->bf[i];
            y[i] = t;
        }
    }
}

/* Convert a gamma/beta vector to float (+ add) in a shared scratch region. */
static float *vec_f32(mx_cpu_ctx *c, const mx_vec *v, int d, float add, float *buf) {
    if (!v) return NULL;
    int64_t n = v->n < d ? v->n : d;
    mx_cpu_to_f32(v->dtype, v->data, 0, n, buf);
    for (int64_t i = n; i < d; i++) buf[i] = 0;
    if (add != 0.0f) for (int i = 0; i < d; i++) buf[i] += add;
    return buf;
}

static void cpu_rmsnorm(void *ctx, const float *x, const mx_vec *g, float eps, float add_one, float *y, int n, int d) {
    mx_cpu_ctx *c = ctx;
    if (n <= 0 || d <= 0) return;
    float *buf = mx_cpu_shared(c, (size_t)d * sizeof(float));
    if (!buf) { MX_LOGE("cpu rmsnorm: out of memory"); return; }
    norm_job j = {x, g, NULL, eps, add_one, y, d, vec_f32(c, g, d, add_one, buf), NULL};
    mx_pool_run(c->pool, n, d >= 4096 ? 1 : 4096 / d, rmsnorm_fn, &j); /* >= ~4K values per chunk */
}

static void cpu_layernorm(void *ctx, const float *x, const mx_vec *g, const mx_vec *b, float eps, float *y, int n, int d) {
    mx_cpu_ctx *c = ctx;
    if (n <= 0 || d <= 0) return;
    float *buf = mx_cpu_shared(c, (size_t)d * 2 * sizeof(float));
    if (!buf) { MX_LOGE("cpu layernorm: out of memory"); return; }
    norm_job j = {x, g, b, eps, 0, y, d, vec_f32(c, g, d, 0, buf), vec_f32(c, b, d, 0, buf + d)};
    mx_pool_run(c->pool, n, d >= 4096 ? 1 : 4096 / d, layernorm_fn, &j);
}

/* ---------------------------------------------------------------------------------------- */
/* RoPE                                                                                     */

typedef struct { float *x; int n_heads, head_dim, half; const float *cs; const mx_attn_meta *meta; } rope_job;
static void rope_fn(void *arg, int64_t b, int64_t e, int tid) {
    rope_job *j = arg;
    int half = j->half;
    for (int64_t t = b; t < e; t++) {
        const float *cs = j->cs + (int64_t)j->meta->pos[t] * half * 2;
        for (int h = 0; h < j->n_heads; h++) {
            float *v = j->x + (t * j->n_heads + h) * (int64_t)j->head_dim;
            for (int i = 0; i < half; i++) {
                float a = v[i], bb = v[i + half], c = cs[2 * i], s = cs[2 * i + 1];
                v[i] = a * c - bb * s;
                v[i + half] = bb * c + a * s;
            }
        }
    }
}

typedef struct { struct mx_cpu_rope_tab *tab; int from; } ropetab_job;
static void ropetab_fn(void *arg, int64_t b, int64_t e, int tid) {
    ropetab_job *j = arg;
    int half = j->tab->rot_dim / 2;
    for (int64_t p = j->from + b; p < j->from + e; p++) {
        float *cs = j->tab->cs + p * half * 2;
        for (int i = 0; i < half; i++) {
            float ang = (float)p * j->tab->inv_freq[i]; /* f32 angle, as HF computes it */
            cs[2 * i] = (float)cos((double)ang) * j->tab->attn_factor;
            cs[2 * i + 1] = (float)sin((double)ang) * j->tab->attn_factor;
        }
    }
}

/* cos/sin table for this configuration covering positions [0, max_pos], or NULL on OOM. */
static const float *rope_table(mx_cpu_ctx *c, const mx_rope *rope, int max_pos) {
    int half = rope->rot_dim / 2;
    struct mx_cpu_rope_tab *tab = NULL;
    for (int i = 0; i < 2 && !tab; i++) {
        struct mx_cpu_rope_tab *t = &c->rope_tab[i];
        if (t->inv_freq && t->rot_dim == rope->rot_dim && t->attn_factor == rope->attn_factor &&
            !memcmp(t->inv_freq, rope->inv_freq, (size_t)half * sizeof(float)))
            tab = t;
    }
    if (!tab) { /* replace the least recently used entry */
        tab = c->rope_tab[0].used <= c->rope_tab[1].used ? &c->rope_tab[0] : &c->rope_tab[1];
        free(tab->inv_freq); free(tab->cs);
        memset(tab, 0, sizeof *tab);
        tab->inv_freq = malloc((size_t)half * sizeof(float));
        if (!tab->inv_freq) return NULL;
        memcpy(tab->inv_freq, rope->inv_freq, (size_t)half * sizeof(float));
        tab->rot_dim = rope->rot_dim;
        tab->attn_factor = rope->attn_factor;
    }
    tab->used = ++c->rope_clock;
    if (max_pos >= tab->n_pos) {
        if (max_pos >= tab->cap) {
            int cap = tab->cap ? tab->cap : 256;
            while (cap <= max_pos) cap *= 2;
            float *ncs = realloc(tab->cs, (size_t)cap * half * 2 * sizeof(float));
            if (!ncs) return NULL;
            tab->cs = ncs;
            tab->cap = cap;
        }
        ropetab_job j = {tab, tab->n_pos};
        mx_pool_run(c->pool, max_pos + 1 - tab->n_pos, 64, ropetab_fn, &j);
        tab->n_pos = max_pos + 1;
    }
    return tab->cs;
}

static void cpu_rope(void *ctx, float *x, int n, int n_heads, int head_dim, const mx_rope *rope, const mx_attn_meta *meta) {
    mx_cpu_ctx *c = ctx;
    if (rope->rot_dim <= 0 || rope->rot_dim > head_dim || rope->rot_dim % 2) {
        MX_LOGE("cpu rope: bad rot_dim %d for head_dim %d", rope->rot_dim, head_dim);
        return;
    }
    int max_pos = 0;
    for (int t = 0; t < n; t++) {
        if (meta->pos[t] < 0) { MX_LOGE("cpu rope: negative position %d", meta->pos[t]); return; }
        if (meta->pos[t] > max_pos) max_pos = meta->pos[t];
    }
    const float *cs = rope_table(c, rope, max_pos);
    if (!cs) { MX_LOGE("cpu rope: out of memory"); return; }
    rope_job j = {x, n_heads, head_dim, rope->rot_dim / 2, cs, meta};
    mx_pool_run(c->pool, n, 1, rope_fn, &j);
}

/* ---------------------------------------------------------------------------------------- */
/* activations and element-wise ops                                                        */

static inline float act1(mx_act a, float x) {
    switch (a) {
    case MX_ACT_SILU: return x / (1.0f + expf(-x));
    case MX_ACT_GELU_TANH: {
        /* 0.5 x (1 + tanh(u)) = x * sigmoid(2u): no cancellation for negative x */
        const float k = 1.5957691216057308f; /* 2 sqrt(2/pi) */
        return x / (1.0f + expf(-k * (x + 0.044715f * x * x * x)));
    }
    case MX_ACT_GELU: return 0.5f * x * erfcf(x * -0.7071067811865476f);
    case MX_ACT_RELU: return x > 0 ? x : 0.0f;
    }
    return x;
}

typedef struct { mx_act act; const float *a, *b; int64_t stride; float *y; int d; float s; } ew_job;

#ifdef __AVX512F__
/* silu, gelu-tanh or relu of 16 floats (exact gelu takes the scalar erfc path) */
static inline __m512 act16(mx_act a, __m512 x) {
    if (a == MX_ACT_SILU) /* x / (1 + e^-x) */
        return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), mx_exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    if (a == MX_ACT_GELU_TANH) { /* x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
        __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        __m512 u = _mm512_mul_ps(_mm512_set1_ps(-1.5957691216057308f), _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
        return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), mx_exp512(u)));
    }
    return _mm512_max_ps(x, _mm512_setzero_ps()); /* relu */
}
#endif

static void act_row(mx_act act, const float *g, const float *u, float *y, int64_t d) {
    int64_t i = 0;
#ifdef __AVX512F__
    if (act != MX_ACT_GELU)
        for (; i + 16 <= d; i += 16) {
            __m512 v = act16(act, _mm512_loadu_ps(g + i));
            if (u) v = _mm512_mul_ps(v, _mm512_loadu_ps(u + i));
            _mm512_storeu_ps(y + i, v);
        }
#endif
    for (; i < d; i++) y[i] = u ? act1(act, g[i]) * u[i] : act1(act, g[i]);
}

static void act_mul_fn(void *arg, int64_t b, int64_t e, int tid) {
    ew_job *j = arg;
    for (int64_t r = b; r < e; r++) act_row(j->act, j->a + r * j->stride, j->b + r * j->stride, j->y + r * j->d, j->d);
}
static void cpu_act_mul(void *ctx, mx_act act, const float *gate, const float *up, int64_t stride, float *y, int n, int d) {
    mx_cpu_ctx *c = ctx;
    ew_job j = {act, gate, up, stride, y, d, 0};
    mx_pool_run(c->pool, n, 1, act_mul_fn, &j);
}

#define EW_GRAIN 16384
static void act_fn(void *arg, int64_t b, int64_t e, int tid) {
    ew_job *j = arg;
    act_row(j->act, j->a + b, NULL, j->y + b, e - b);
}
static void cpu_act(void *ctx, mx_act act, const float *x, float *y, int64_t count) {
    mx_cpu_ctx *c = ctx;
    ew_job j = {act, x, NULL, 0, y, 0, 0};
    mx_pool_run(c->pool, count, EW_GRAIN, act_fn, &j);
}
static void add_fn(void *arg, int64_t b, int64_t e, int tid) {
    ew_job *j = arg;
    for (int64_t i = b; i < e; i++) j->y[i] = j->a[i] + j->b[i];
}
static void cpu_add(void *ctx, const float *a, const float *b, float *y, int64_t count) {
    mx_cpu_ctx *c = ctx;
    ew_job j = {0, a, b, 0, y, 0, 0};
    mx_pool_run(c->pool, count, EW_GRAIN, add_fn, &j);
}
static void scale_fn(void *arg, int64_t b, int64_t e, int tid) {
    ew_job *j = arg;
    for (int64_t i = b; i < e; i++) j->y[i] = j->a[i] * j->s;
}
static void cpu_scale(void *ctx, const float *x, float s, float *y, int64_t count) {
    mx_cpu_ctx *c = ctx;
    ew_job j = {0, x, NULL, 0, y, 0, s};
    mx_pool_run(c->pool, count, EW_GRAIN, scale_fn, &j);
}
static void softcap_fn(void *arg, int64_t b, int64_t e, int tid) {
    ew_job *j = arg;
    for (int64_t i = b; i < e; i++) j->y[i] = j->s * tanhf(j->y[i] / j->s);
}
static void cpu_softcap(void *ctx, float *x, float cap, int64_t count) {
    mx_cpu_ctx *c = ctx;
    if (!(cap > 0)) return;
    ew_job j = {0, NULL, NULL, 0, x, 0, cap};
    mx_pool_run(c->pool, count, EW_GRAIN, softcap_fn, &j);
}
static void cpu_gather_rows(void *ctx, const float *src, const int32_t *rows, int n, int d, float *dst) {
    (void)ctx;
    for (int i = 0; i < n; i++) memmove(dst + (int64_t)i * d, src + (int64_t)rows[i] * d, (size_t)d * sizeof(float));
}

static void cpu_set_precision(void *ctx, int mode) {
    mx_cpu_ctx *c = ctx;
    c->prec_mode = mode;
}

/* ---------------------------------------------------------------------------------------- */
/* vtable                                                                                   */

static const mx_backend_i g_cpu_i = {
    .name = "cpu",
    .alloc = cpu_alloc, .free = cpu_free, .write = cpu_write, .read = cpu_read, .sync = cpu_sync,
    .weight_prepare = cpu_weight_prepare, .vec_prepare = cpu_vec_prepare,
    .kv_init = cpu_kv_init, .kv_free = cpu_kv_free,
    .matmul = mx_cpu_matmul, .embed = cpu_embed, .rmsnorm = cpu_rmsnorm, .layernorm = cpu_layernorm,
    .rope = cpu_rope, .attention = mx_cpu_attention, .act_mul = cpu_act_mul, .act = cpu_act, .add = cpu_add,
    .scale = cpu_scale, .gather_rows = cpu_gather_rows, .softcap = cpu_softcap,
    .set_precision = cpu_set_precision, .matmul_multi = mx_cpu_matmul_multi,
    .topk = mx_cpu_topk,
};

mx_status mx_backend_cpu_init(mx_backend *out) {
    if (!out) return mx_errorf(MX_ERR_INVALID_ARG, "cpu backend: NULL output");
    mx_cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return mx_errorf(MX_ERR_NOMEM, "cpu backend: out of memory");
    c->pool = mx_pool_global();
    c->n_threads = mx_pool_size(c->pool);
    if (c->n_threads > MX_CPU_MAX_THREADS) {
        free(c);
        return mx_errorf(MX_ERR_UNSUPPORTED, "cpu backend: at most %d threads", MX_CPU_MAX_THREADS);
    }
    const char *e = getenv("MLXCEL_PRECISE");
    c->precise = e && *e && strcmp(e, "0") != 0;
    c->fast_min_n = 8;
    out->i = &g_cpu_i;
    out->ctx = c;
    return MX_OK;
}

void mx_backend_cpu_free(mx_backend *b) {
    if (!b || !b->ctx) return;
    mx_cpu_ctx *c = b->ctx;
    cpu_kv_free(c);
    for (int i = 0; i < MX_CPU_MAX_THREADS; i++) free(c->tscratch[i]);
    free(c->shared);
    for (int i = 0; i < 2; i++) { free(c->rope_tab[i].inv_freq); free(c->rope_tab[i].cs); }
    free(c);
    b->ctx = NULL;
    b->i = NULL;
}

void mx_backend_cpu_set_precise(mx_backend *b, bool precise) {
    if (b && b->ctx && b->i == &g_cpu_i) ((mx_cpu_ctx *)b->ctx)->precise = precise;
}
