/* cpu_internal.h: private declarations shared by the CPU backend's files (context, scratch,
 * element conversion, matmul entry points). Not a public header: only src/backend/cpu/ includes it. */
#ifndef MLXCEL_CPU_INTERNAL_H
#define MLXCEL_CPU_INTERNAL_H

#include "mlxcel/backend.h"

#include <string.h>

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
/* Validate a weight's geometry; MX_OK or an error with a message. */
mx_status mx_cpu_weight_check(const mx_weight *w);

#endif
