/* cpu_internal.h: private declarations shared by the CPU backend's files (context, scratch,
 * element conversion, matmul entry points). Not a public header: only src/backend/cpu/ includes it. */
#ifndef MLXCEL_CPU_INTERNAL_H
#define MLXCEL_CPU_INTERNAL_H

#include "mlxcel/backend.h"

#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
/* e^x for 16 floats, within a few ulp of expf (x clamped to [-88, 88]). */
static inline __m512 mx_exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-88.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
#endif

#define MX_CPU_MAX_THREADS 256

typedef struct mx_cpu_ctx {
    mx_pool *pool;
    int n_threads;
    bool precise;               /* true: exact f32 paths only (no int8/bf16 activation rounding) */
    int fast_min_n;             /* fast low-precision matmul used when n >= this (and !precise) */
    int prec_mode;              /* MX_PREC_*: set per call by the model (set_precision) */
    /* KV cache */
    mx_kv_desc kv;
    float **k_cache, **v_cache; /* [n_layers] -> [n_blocks*block_size, n_kv_heads*head_dim] */
    /* per-thread scratch (grown on demand, never shrunk) */
    void *tscratch[MX_CPU_MAX_THREADS];
    size_t tscratch_size[MX_CPU_MAX_THREADS];
    /* RoPE cos/sin tables for the last two configurations seen (rows computed up to n_pos) */
    struct mx_cpu_rope_tab {
        int rot_dim, n_pos, cap;
        float attn_factor;
        float *inv_freq;        /* [rot_dim/2] copy, the cache key */
        float *cs;              /* [cap][rot_dim/2][2] cos, sin (times attn_factor) */
        uint64_t used;
    } rope_tab[2];
    uint64_t rope_clock;
    /* shared scratch for one op call (activation sums, quantized activations) */
    void *shared;
    size_t shared_size;
} mx_cpu_ctx;

/* Returns a per-thread buffer of at least `bytes` (64-byte aligned), or NULL on OOM. */
void *mx_cpu_tscratch(mx_cpu_ctx *c, int tid, size_t bytes);
/* Returns the shared buffer of at least `bytes`, or NULL on OOM. Call from the calling thread only. */
void *mx_cpu_shared(mx_cpu_ctx *c, size_t bytes);

/* Convert `n` elements of dtype (F32/F16/BF16) at src[off..] to float. */
void mx_cpu_to_f32(mx_dtype dt, const void *src, int64_t off, int64_t n, float *dst);
static inline float mx_cpu_elem(mx_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case MX_DTYPE_F32: return ((const float *)p)[i];
    case MX_DTYPE_F16: return mx_f16_to_f32(((const uint16_t *)p)[i]);
    case MX_DTYPE_BF16: return mx_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.0f;
    }
}

/* Unpack q values [k0, k0+n) of one packed row (u32 words, low bits first) to float. */
void mx_cpu_unpack_q(const uint32_t *row, int bits, int64_t k0, int64_t n, float *out);
/* Dequantize/convert row r of a weight to float [w->cols]. */
void mx_cpu_weight_row(const mx_weight *w, int64_t r, float *out);
/* Dot product of two float vectors, f32 accumulation (SIMD where available). */
float mx_cpu_dot(const float *a, const float *b, int64_t n);

void mx_cpu_attention(void *ctx, int layer, const float *q, const float *k, const float *v, float *out,
                      const mx_attn_params *p, const mx_attn_meta *m);
void mx_cpu_matmul(void *ctx, const mx_weight *w, const float *x, float *y, int n);
void mx_cpu_matmul_multi(void *ctx, int nw, const mx_weight *const *ws, const float *x, float *const *ys, int n);
void mx_cpu_topk(void *ctx, const float *logits, int n_rows, int vocab, int k, float *vals_host,
                 int32_t *ids_host, float *lse_host);   /* topk.c */
/* Validate a weight's geometry; MX_OK or an error with a message. */
mx_status mx_cpu_weight_check(const mx_weight *w);

#endif
