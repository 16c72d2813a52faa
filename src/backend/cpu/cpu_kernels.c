/* cpu_kernels.c: SIMD matmul kernels of the CPU backend (AVX-512; the portable path is the exact
 * reference in cpu_matmul.c).
 *
 *  - gemv (n < 8, or any n in precise mode): exact f32. Each row's packed values are unpacked
 *    in registers 32 at a time (in a format-friendly order; the activations are permuted the same
 *    way once per call), FMA'd with up to 8 tokens, scaled per group; the group offset term is
 *    sum_g bias[g] * sum(x in group g). Decode is bound by reading the weights: software
 *    prefetch MX_PF_DIST ahead, rows split over the pool. One token with q4/q8 and groups of
 *    64/128 (decode) takes gemv_digits: x as three int8 digits per group (error <= 2^-22 of the
 *    group's max |x|, below f32 rounding of the sum), exact int32 vpdpbusd sums.
 *  - int8 GEMM (quantized weights, n >= fast_min_n, not precise): activations are quantized to
 *    int8 per token and group (absmax/127); the unsigned q values of a 32-row tile are unpacked
 *    once into a VNNI layout ([k/4][32 rows][4 bytes]) and reused for every token with vpdpbusd;
 *    int32 group sums are scaled by scale[g] * dx and the offset term uses the exact f32 x sums.
 *  - f32 GEMM (dense weights, n >= 8, any mode; exact): 32-row tiles converted to f32 in a
 *    [k][32] layout, reused for every token with broadcast FMAs.
 * It does not allocate per call once the scratch buffers have grown. */
#include "cpu_kernels.h"

#include <math.h>
#include <stdlib.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define MX_HAVE_AVX512 1
#endif

#ifdef MX_HAVE_AVX512

/* Activation order inside each 32-value block: NAT = natural, EO = evens then odds (q4: low
 * nibbles then high nibbles of 16 bytes; bf16: low then high halves of 16 dwords). */
enum { ORD_NAT = 0, ORD_EO = 1 };

static int fmt_order(const mx_weight *w) {
    if (w->bits == 4) return ORD_EO;
    if (w->bits == 0 && w->dtype == MX_DTYPE_BF16) return ORD_EO;
    return ORD_NAT;
}

/* 32 values -> evens then odds */
static inline void eo32(const float *x, float *out) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
    _mm512_storeu_ps(out, _mm512_permutex2var_ps(a, ev, b));
    _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(a, od, b));
}

static void permute_eo(const float *x, float *out, int64_t K) {
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) eo32(x + k, out + k);
    for (; k < K; k++) out[k] = x[k];
}

/* ---------------------------------------------------------------------------------------- */
/* unpackers: a block of `cnt` values (multiple of 32) starting at value k0 (multiple of 32)   */

#ifdef __AVX512VBMI__
/* any bits in 2..8: 16 values occupy 2*bits bytes; lane i takes the 4 bytes from bit i*bits */
typedef struct { __m512i idx, sh, mask; __mmask64 lm; } genq;
static inline genq genq_make(int bits) {
    genq g;
    uint8_t idx[64];
    uint32_t sh[16];
    for (int i = 0; i < 16; i++) {
        int bit = i * bits;
        for (int k = 0; k < 4; k++) idx[4 * i + k] = (uint8_t)(bit / 8 + k);
        sh[i] = (uint32_t)(bit % 8);
    }
    g.idx = _mm512_loadu_si512(idx);
    g.sh = _mm512_loadu_si512(sh);
    g.mask = _mm512_set1_epi32((1 << bits) - 1);
    g.lm = (__mmask64)((1ull << (2 * bits)) - 1);
    return g;
}
static inline __m512i genq_16(const genq *g, const uint8_t *p) {
    __m512i src = _mm512_maskz_loadu_epi8(g->lm, p);
    __m512i v = _mm512_permutexvar_epi8(g->idx, src);
    return _mm512_and_si512(_mm512_srlv_epi32(v, g->sh), g->mask);
}
#endif

/* 16x16 dword transpose: dst + j*dst_stride gets column j of the rows src + i*src_stride. */
static inline void transpose16(const int32_t *src, int64_t src_stride, int32_t *dst, int64_t dst_stride) {
    __m512i r[16], t[16], u[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + i * src_stride);
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* u[4i + c] lane L = rows 4i..4i+3 of column 4L + c */
        u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int c = 0; c < 4; c++) { /* 4x4 transpose of 128-bit lanes */
        __m512i a = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(1, 0, 1, 0));
        __m512i b = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(1, 0, 1, 0));
        __m512i a2 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 2, 3, 2));
        __m512i b2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 2, 3, 2));
        _mm512_storeu_si512(dst + (0 + c) * dst_stride, _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_storeu_si512(dst + (4 + c) * dst_stride, _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm512_storeu_si512(dst + (8 + c) * dst_stride, _mm512_shuffle_i32x4(a2, b2, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_storeu_si512(dst + (12 + c) * dst_stride, _mm512_shuffle_i32x4(a2, b2, _MM_SHUFFLE(3, 1, 3, 1)));
    }
}

/* [32][cols] dwords (row stride cols) -> [cols][32] */
static void transpose_tile32(const int32_t *rows, int64_t cols, int32_t *tile) {
    const __m512i vidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)cols));
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        transpose16(rows + c, cols, tile + c * 32, 32);
        transpose16(rows + 16 * cols + c, cols, tile + c * 32 + 16, 32);
    }
    for (; c < cols; c++) {
        _mm512_store_si512(tile + c * 32, _mm512_i32gather_epi32(vidx, rows + c, 4));
        _mm512_store_si512(tile + c * 32 + 16, _mm512_i32gather_epi32(vidx, rows + 16 * cols + c, 4));
    }
}

/* ---------------------------------------------------------------------------------------- */
/* exact gemv                                                                               */

#define GEMV_T 8         /* tokens per pass */
#ifndef MX_PF_HINT
#define MX_PF_HINT _MM_HINT_T0
#endif
#ifndef MX_PF_DIST
#define MX_PF_DIST 4096  /* software prefetch distance (bytes) in the weight stream (dense: twice) */
#endif

enum { F_Q4 = 0, F_Q8, F_QGEN, F_BF16, F_F16, F_F32 };

typedef struct {
    mx_cpu_ctx *c;
    const mx_weight *w;
    const float *xp;     /* [n, K] activations in the format's order */
    const float *xsum;   /* [n, ng] group sums (quantized) */
    float *y;
    int n, fmt;
    const int8_t *xd;    /* q8 decode (n == 1): x as three int8 digits [3][K], see digits_prep */
    const float *dxd;    /* [ng] digit scale per group */
} gemv_job;

static inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

/* 32 weights as two float vectors (in the format's order). Quantized: p points at the packed
 * bytes of the 32 values; dense: p points at the first element. */
static inline __attribute__((always_inline)) void load32(int FMT, const char *p, const void *gq, int bits,
                                                         __m512 *w0, __m512 *w1) {
    if (FMT == F_Q4) {
        const __m512 tbl = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
        *w0 = _mm512_permutexvar_ps(d, tbl);
        *w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), tbl);
    } else if (FMT == F_Q8) {
        *w0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
        *w1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16))));
    } else if (FMT == F_QGEN) {
#ifdef __AVX512VBMI__
        *w0 = _mm512_cvtepi32_ps(genq_16((const genq *)gq, (const uint8_t *)p));
        *w1 = _mm512_cvtepi32_ps(genq_16((const genq *)gq, (const uint8_t *)p + 2 * bits));
#else
        (void)gq; (void)bits;
        *w0 = *w1 = _mm512_setzero_ps();
#endif
    } else if (FMT == F_BF16) {
        __m512i v = _mm512_loadu_si512(p);
        *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        *w1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
    } else if (FMT == F_F16) {
        *w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        *w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
    } else {
        *w0 = _mm512_loadu_ps((const float *)p);
        *w1 = _mm512_loadu_ps((const float *)p + 16);
    }
}

/* Row r's group scales (or biases) as floats. */
static inline void row_params(mx_dtype dt, const void *src, int64_t off, int64_t ng, float *out) {
    if (dt == MX_DTYPE_BF16) {
        const uint16_t *s = (const uint16_t *)src + off;
        int64_t g = 0;
        for (; g + 16 <= ng; g += 16)
            _mm512_storeu_ps(out + g, _mm512_castsi512_ps(_mm512_slli_epi32(
                                          _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + g))), 16)));
        for (; g < ng; g++) out[g] = mx_bf16_to_f32(s[g]);
    } else mx_cpu_to_f32(dt, src, off, ng, out);
}

static inline float dot_masked(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return hsum(acc);
}

/* y[t0 + t, r] for rows [rb, re) and NT tokens. GS: group size (quantized), 0 for dense. */
static inline __attribute__((always_inline)) void gemv_rows(int FMT, int NT, int GS, const gemv_job *j, int64_t rb,
                                                            int64_t re, int t0, float *sf, float *bf) {
    const mx_weight *w = j->w;
    const int64_t K = w->cols, N = w->rows;
    const bool quant = FMT <= F_QGEN;
    const int bits = FMT == F_Q4 ? 4 : FMT == F_Q8 ? 8 : w->bits;
    const int64_t ng = quant ? K / GS : 0;
    const int64_t K32 = K & ~(int64_t)31;
    const int esz = FMT == F_F32 ? 4 : 2;
    const size_t rowbytes = quant ? (size_t)(K * bits / 8) : (size_t)K * esz;
    const size_t chunk = quant ? (size_t)(4 * bits) : (size_t)(32 * esz); /* bytes per 32 values */
#ifdef __AVX512VBMI__
    genq gq;
    if (FMT == F_QGEN) gq = genq_make(bits);
    const void *gqp = &gq;
#else
    const void *gqp = NULL;
#endif
    const float *xs[GEMV_T];
    for (int t = 0; t < NT; t++) xs[t] = j->xp + (int64_t)(t0 + t) * K;
    for (int64_t r = rb; r < re; r++) {
        const char *p = (const char *)w->w + (size_t)r * rowbytes;
        if (quant) {
            row_params(w->scale_dtype, w->scales, r * ng, ng, sf);
            row_params(w->scale_dtype, w->biases, r * ng, ng, bf);
        }
        __m512 acc[GEMV_T], acc2 = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
        if (quant) {
            int64_t k = 0;
            for (int64_t g = 0; g < ng; g++) {
                __m512 d[GEMV_T], d2 = _mm512_setzero_ps();
#pragma GCC unroll 8
                for (int t = 0; t < NT; t++) d[t] = _mm512_setzero_ps();
#pragma GCC unroll 4
                for (int c = 0; c < GS; c += 32) {
                    if ((c * bits / 8) % 64 == 0) _mm_prefetch(p + MX_PF_DIST, MX_PF_HINT);
                    __m512 w0, w1;
                    load32(FMT, p, gqp, bits, &w0, &w1);
                    p += chunk;
                    if (NT == 1) {
                        d[0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs[0] + k + c), d[0]);
                        d2 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xs[0] + k + c + 16), d2);
                    } else {
#pragma GCC unroll 8
                        for (int t = 0; t < NT; t++) {
                            d[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs[t] + k + c), d[t]);
                            d[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xs[t] + k + c + 16), d[t]);
                        }
                    }
                }
                k += GS;
                __m512 s = _mm512_set1_ps(sf[g]);
                if (NT == 1) d[0] = _mm512_add_ps(d[0], d2);
#pragma GCC unroll 8
                for (int t = 0; t < NT; t++) acc[t] = _mm512_fmadd_ps(d[t], s, acc[t]);
            }
        } else {
            for (int64_t k = 0; k < K32; k += 32) {
                _mm_prefetch(p + 2 * MX_PF_DIST, MX_PF_HINT);
                if (esz == 4) _mm_prefetch(p + 2 * MX_PF_DIST + 64, MX_PF_HINT);
                __m512 w0, w1;
                load32(FMT, p, gqp, 0, &w0, &w1);
                p += chunk;
                if (NT == 1) {
                    acc[0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs[0] + k), acc[0]);
                    acc2 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xs[0] + k + 16), acc2);
                } else {
#pragma GCC unroll 8
                    for (int t = 0; t < NT; t++) {
                        acc[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs[t] + k), acc[t]);
                        acc[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xs[t] + k + 16), acc[t]);
                    }
                }
            }
            if (NT == 1) acc[0] = _mm512_add_ps(acc[0], acc2);
        }
        for (int t = 0; t < NT; t++) {
            float s = hsum(acc[t]);
            if (quant) s += dot_masked(bf, j->xsum + (int64_t)(t0 + t) * ng, ng);
            else if (K32 < K) /* dense tail, natural order */
                for (int64_t k = K32; k < K; k++) s += mx_cpu_elem(w->dtype, w->w, r * K + k) * xs[t][k];
            j->y[(int64_t)(t0 + t) * N + r] = s;
        }
    }
}

#if defined(__AVX512VNNI__)
/* q8 or q4, one token, group size GS (64 or 128): x = dx[g] * (a + b/254 + c/254^2) with int8 digits
 * a, b, c (error <= 2^-22 of the group's largest |x|), so sum_j q_j x_j = dx * (A + B/254 + C/254^2)
 * with A, B, C exact int32 vpdpbusd sums over the unsigned 8-bit q: 3 vpdpbusd per 64 weights
 * instead of 4 conversions and 4 FMAs. */
static inline __attribute__((always_inline)) void gemv_digits(const gemv_job *j, int64_t rb, int64_t re, int GS,
                                                              int BITS, float *sf, float *bf) {
    const mx_weight *w = j->w;
    const int64_t K = w->cols, ng = K / GS;
    /* q4: 32 packed bytes broadcast to both halves; words of the upper half shifted by 4 */
    const __m512i sh4 = _mm512_setr_epi64(0, 0, 0, 0, 0x0004000400040004ll, 0x0004000400040004ll,
                                          0x0004000400040004ll, 0x0004000400040004ll);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const int8_t *da = j->xd, *db = j->xd + K, *dc = j->xd + 2 * K;
    const __m512 k1 = _mm512_set1_ps(1.0f / 254), k2 = _mm512_set1_ps(1.0f / (254.0f * 254.0f));
    for (int64_t r = rb; r < re; r++) {
        const uint8_t *p = (const uint8_t *)w->w + (size_t)r * (size_t)(K * BITS / 8);
        row_params(w->scale_dtype, w->scales, r * ng, ng, sf);
        row_params(w->scale_dtype, w->biases, r * ng, ng, bf);
        for (int64_t g = 0; g < ng; g += 16) { /* sf *= dx */
            __mmask16 m = (__mmask16)(ng - g >= 16 ? 0xffff : (1u << (ng - g)) - 1);
            _mm512_mask_storeu_ps(sf + g, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sf + g), _mm512_maskz_loadu_ps(m, j->dxd + g)));
        }
        __m512 acc = _mm512_setzero_ps();
        for (int64_t g = 0; g < ng; g++) {
            __m512i ia = _mm512_setzero_si512(), ib = _mm512_setzero_si512(), ic = _mm512_setzero_si512();
            for (int c = 0; c < GS; c += 64) {
                const int64_t k = g * GS + c;
                __m512i wv;
                if (BITS == 8) {
                    _mm_prefetch((const char *)p + k + MX_PF_DIST, MX_PF_HINT);
                    wv = _mm512_loadu_si512(p + k);
                } else { /* 64 nibbles -> bytes: low nibbles (even k) then high nibbles (odd k) */
                    if (c % 128 == 0) _mm_prefetch((const char *)p + k / 2 + MX_PF_DIST, MX_PF_HINT);
                    __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + k / 2)));
                    wv = _mm512_and_si512(_mm512_srlv_epi16(b, sh4), m4);
                }
                ia = _mm512_dpbusd_epi32(ia, wv, _mm512_loadu_si512(da + k));
                ib = _mm512_dpbusd_epi32(ib, wv, _mm512_loadu_si512(db + k));
                ic = _mm512_dpbusd_epi32(ic, wv, _mm512_loadu_si512(dc + k));
            }
            __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ib), k1, _mm512_cvtepi32_ps(ia));
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ic), k2, f);
            acc = _mm512_fmadd_ps(f, _mm512_set1_ps(sf[g]), acc);
        }
        j->y[r] = hsum(acc) + dot_masked(bf, j->xsum, ng);
    }
}

static void gemv_digits_fn(const gemv_job *j, int64_t rb, int64_t re, float *sf, float *bf) {
    const int gs = j->w->group_size, bits = j->w->bits;
    if (bits == 8) { if (gs == 64) gemv_digits(j, rb, re, 64, 8, sf, bf); else gemv_digits(j, rb, re, 128, 8, sf, bf); }
    else { if (gs == 64) gemv_digits(j, rb, re, 64, 4, sf, bf); else gemv_digits(j, rb, re, 128, 4, sf, bf); }
}

/* x in "EO64" order (per 64 values: evens then odds), matching the q4 nibble unpack above. */
static void permute_eo64(const float *x, float *out, int64_t K) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t k = 0; k + 64 <= K; k += 64) {
        __m512 v0 = _mm512_loadu_ps(x + k), v1 = _mm512_loadu_ps(x + k + 16);
        __m512 v2 = _mm512_loadu_ps(x + k + 32), v3 = _mm512_loadu_ps(x + k + 48);
        _mm512_storeu_ps(out + k, _mm512_permutex2var_ps(v0, ev, v1));
        _mm512_storeu_ps(out + k + 16, _mm512_permutex2var_ps(v2, ev, v3));
        _mm512_storeu_ps(out + k + 32, _mm512_permutex2var_ps(v0, od, v1));
        _mm512_storeu_ps(out + k + 48, _mm512_permutex2var_ps(v2, od, v3));
    }
}

/* Digits of one token for gemv_digits: a = round(x/dx), b = round((x/dx - a) * 254), c likewise. */
static void digits_prep(const float *x, int64_t K, int gs, int8_t *xd, float *dxd) {
    const int64_t ng = K / gs;
    for (int64_t g = 0; g < ng; g++) {
        const float *v = x + g * gs;
        __m512 mx = _mm512_setzero_ps();
        for (int i = 0; i < gs; i += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(v + i)));
        float amax = _mm512_reduce_max_ps(mx);
        dxd[g] = amax / 127.0f;
        const __m512 id = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f), b254 = _mm512_set1_ps(254.0f);
        for (int i = 0; i < gs; i += 16) {
            __m512 t = _mm512_mul_ps(_mm512_loadu_ps(v + i), id);
            t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
            __m512 a = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m512 r1 = _mm512_mul_ps(_mm512_sub_ps(t, a), b254);      /* |r1| <= 127 */
            __m512 b = _mm512_roundscale_ps(r1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m512 c = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_sub_ps(r1, b), b254), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm_storeu_si128((__m128i *)(xd + g * gs + i), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(a)));
            _mm_storeu_si128((__m128i *)(xd + K + g * gs + i), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(b)));
            _mm_storeu_si128((__m128i *)(xd + 2 * K + g * gs + i), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(c)));
        }
    }
}
#endif

#define GEMV_NT(FMT, GS)                                                                                  \
    static void gemv_##FMT##_##GS(const gemv_job *j, int64_t rb, int64_t re, int t0, int nt, float *sf, float *bf) { \
        while (nt > 0) {                                                                                  \
            int k = nt >= 8 ? 8 : nt >= 4 ? 4 : nt;                                                       \
            switch (k) {                                                                                  \
            case 1: gemv_rows(FMT, 1, GS, j, rb, re, t0, sf, bf); break;                                  \
            case 2: gemv_rows(FMT, 2, GS, j, rb, re, t0, sf, bf); break;                                  \
            case 3: gemv_rows(FMT, 3, GS, j, rb, re, t0, sf, bf); break;                                  \
            case 4: gemv_rows(FMT, 4, GS, j, rb, re, t0, sf, bf); break;                                  \
            default: gemv_rows(FMT, 8, GS, j, rb, re, t0, sf, bf); break;                                 \
            }                                                                                             \
            t0 += k; nt -= k;                                                                             \
        }                                                                                                 \
    }
GEMV_NT(F_Q4, 32)
GEMV_NT(F_Q4, 64)
GEMV_NT(F_Q4, 128)
GEMV_NT(F_Q8, 32)
GEMV_NT(F_Q8, 64)
GEMV_NT(F_Q8, 128)
GEMV_NT(F_QGEN, 32)
GEMV_NT(F_QGEN, 64)
GEMV_NT(F_QGEN, 128)
GEMV_NT(F_BF16, 0)
GEMV_NT(F_F16, 0)
GEMV_NT(F_F32, 0)

typedef void (*gemv_kern)(const gemv_job *, int64_t, int64_t, int, int, float *, float *);
static gemv_kern gemv_pick(int fmt, int gs) {
    int gi = gs == 32 ? 0 : gs == 64 ? 1 : gs == 128 ? 2 : -1;
    static const gemv_kern q[3][3] = {{gemv_F_Q4_32, gemv_F_Q4_64, gemv_F_Q4_128},
                                      {gemv_F_Q8_32, gemv_F_Q8_64, gemv_F_Q8_128},
                                      {gemv_F_QGEN_32, gemv_F_QGEN_64, gemv_F_QGEN_128}};
    if (fmt <= F_QGEN) return gi < 0 ? NULL : q[fmt][gi];
    return fmt == F_BF16 ? gemv_F_BF16_0 : fmt == F_F16 ? gemv_F_F16_0 : gemv_F_F32_0;
}

static void gemv_fn(void *arg, int64_t rb, int64_t re, int tid) {
    gemv_job *j = arg;
    const mx_weight *w = j->w;
    const int64_t ng = w->bits ? w->cols / w->group_size : 0;
    float *scr = mx_cpu_tscratch(j->c, tid, (size_t)(2 * ng + 32) * sizeof(float));
    if (!scr) { MX_LOGE("cpu matmul: out of memory"); return; }
    float *sf = scr, *bf = scr + ng + 16;
#if defined(__AVX512VNNI__)
    if (j->xd) { gemv_digits_fn(j, rb, re, sf, bf); return; }
#endif
    gemv_kern kern = gemv_pick(j->fmt, w->bits ? w->group_size : 0);
    /* row blocks keep the weights of a few rows in L1/L2 while all token passes run */
    const int64_t RB = j->n > GEMV_T ? 16 : re - rb;
    for (int64_t r0 = rb; r0 < re; r0 += RB) {
        int64_t r1 = r0 + RB < re ? r0 + RB : re;
        for (int t0 = 0; t0 < j->n; t0 += GEMV_T) {
            int nt = j->n - t0 < GEMV_T ? j->n - t0 : GEMV_T;
            kern(j, r0, r1, t0, nt, sf, bf);
        }
    }
}

typedef struct { const float *x; float *xp, *xsum; int64_t K; int gs, ord; } prep_job;
static void prep_fn(void *arg, int64_t b, int64_t e, int tid) {
    prep_job *p = arg;
    for (int64_t t = b; t < e; t++) {
        const float *x = p->x + t * p->K;
        if (p->xp) {
            if (p->ord == ORD_EO) permute_eo(x, p->xp + t * p->K, p->K);
            else memcpy(p->xp + t * p->K, x, (size_t)p->K * sizeof(float));
        }
        if (p->xsum) {
            int64_t ng = p->K / p->gs;
            for (int64_t g = 0; g < ng; g++) {
                const float *v = x + g * p->gs;
                __m512 s = _mm512_setzero_ps();
                for (int i = 0; i < p->gs; i += 16) s = _mm512_add_ps(s, _mm512_loadu_ps(v + i));
                p->xsum[t * ng + g] = hsum(s);
            }
        }
    }
}

/* Everything a gemv call does before the row loop: checks, activation prep (order, group sums,
 * digits) in the shared scratch. Fills *jo (y left NULL); false if this path does not apply. */
static bool gemv_setup(mx_cpu_ctx *c, const mx_weight *w, const float *x, int n, gemv_job *jo) {
    const int64_t K = w->cols;
    if (w->bits && w->group_size != 32 && w->group_size != 64 && w->group_size != 128) return false;
    if (w->bits && w->bits != 4 && w->bits != 8) {
#ifndef __AVX512VBMI__
        return false;
#endif
    }
    int ord = fmt_order(w);
    int64_t ng = w->bits ? K / w->group_size : 0;
    bool copy = ord != ORD_NAT;
#if defined(__AVX512VNNI__)
    bool digits = n == 1 && (w->bits == 8 || w->bits == 4) && (w->group_size == 64 || w->group_size == 128);
#else
    bool digits = false;
#endif
    size_t need = ((copy ? (size_t)(n * K) : 0) + (size_t)(n * ng) + 32) * sizeof(float);
    size_t dig_off = (need + 63) & ~(size_t)63;
    if (digits) need = dig_off + (size_t)ng * sizeof(float) + 3 * (size_t)K + 64 + (size_t)K * sizeof(float);
    float *sh = mx_cpu_shared(c, need);
    if (!sh) return false;
    float *xp = copy ? sh : NULL;
    float *xsum = w->bits ? sh + (copy ? (size_t)(n * K) : 0) : NULL;
    if (xp || xsum) {
        prep_job p = {x, xp, xsum, K, w->group_size, ord};
        mx_pool_run(c->pool, n, 4, prep_fn, &p);
    }
    int fmt = w->bits == 4 ? F_Q4 : w->bits == 8 ? F_Q8 : w->bits ? F_QGEN
            : w->dtype == MX_DTYPE_BF16 ? F_BF16 : w->dtype == MX_DTYPE_F16 ? F_F16 : F_F32;
    gemv_job j = {c, w, xp ? xp : x, xsum, NULL, n, fmt, NULL, NULL};
#if defined(__AVX512VNNI__)
    if (digits) {
        float *dxd = (float *)((char *)sh + dig_off);
        float *xe = dxd + ng;                     /* q4: x in EO64 order */
        int8_t *xd = (int8_t *)(xe + K);
        const float *xsrc = x;
        if (w->bits == 4) { permute_eo64(x, xe, K); xsrc = xe; }
        digits_prep(xsrc, K, w->group_size, xd, dxd);
        j.xd = xd; j.dxd = dxd;
    }
#endif
    *jo = j;
    return true;
}

static bool gemv(mx_cpu_ctx *c, const mx_weight *w, const float *x, float *y, int n) {
    gemv_job j;
    if (!gemv_setup(c, w, x, n, &j)) return false;
    j.y = y;
    mx_pool_run(c->pool, w->rows, 4, gemv_fn, &j);
    mx_cpu_add_bias(w, y, n);
    return true;
}

/* Several weights applied to the same input in one pool dispatch (fewer barriers per layer). */
#define MULTI_MAX 4
typedef struct { gemv_job j[MULTI_MAX]; int64_t off[MULTI_MAX + 1]; int nw; } multi_job;
static void multi_fn(void *arg, int64_t b, int64_t e, int tid) {
    multi_job *m = arg;
    for (int k = 0; k < m->nw; k++) {
        int64_t lo = b > m->off[k] ? b : m->off[k], hi = e < m->off[k + 1] ? e : m->off[k + 1];
        if (lo < hi) gemv_fn(&m->j[k], lo - m->off[k], hi - m->off[k], tid);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* int8 VNNI GEMM for quantized weights                                                     */

#if defined(__AVX512VNNI__)
#define GEMM_T 8

typedef struct {
    mx_cpu_ctx *c;
    const mx_weight *w;
    const int8_t *xq;       /* [n, K] in the format's order */
    const float *dx, *xsum; /* [n, ng] */
    float *y;
    int n;
} q8_job;

/* Unpack row r's q values to bytes in the format's order. */
static inline void row_to_u8(const mx_weight *w, int64_t r, uint8_t *out) {
    const int64_t K = w->cols;
    const int bits = w->bits;
    const uint8_t *p = (const uint8_t *)((const uint32_t *)w->w + r * (K * bits / 32));
    if (bits == 8) { memcpy(out, p, (size_t)K); return; }
    if (bits == 4) {
        const __m128i m = _mm_set1_epi8(0x0f);
        const __m512i m5 = _mm512_set1_epi8(0x0f);
        const __m512i ia = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), ib = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
        int64_t k0 = 0;
        for (; k0 + 128 <= K; k0 += 128) { /* 64 bytes: per 16-byte lane, low nibbles then high nibbles */
            __m512i b = _mm512_loadu_si512(p + k0 / 2);
            __m512i lo = _mm512_and_si512(b, m5), hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), m5);
            _mm512_storeu_si512(out + k0, _mm512_permutex2var_epi64(lo, ia, hi));
            _mm512_storeu_si512(out + k0 + 64, _mm512_permutex2var_epi64(lo, ib, hi));
        }
        for (int64_t k = k0; k < K; k += 32) {
            __m128i b = _mm_loadu_si128((const __m128i *)(p + k / 2));
            _mm_storeu_si128((__m128i *)(out + k), _mm_and_si128(b, m));
            _mm_storeu_si128((__m128i *)(out + k + 16), _mm_and_si128(_mm_srli_epi16(b, 4), m));
        }
        return;
    }
#ifdef __AVX512VBMI__
    genq g = genq_make(bits);
    for (int64_t k = 0; k < K; k += 16) _mm_storeu_si128((__m128i *)(out + k), _mm512_cvtepi32_epi8(genq_16(&g, p + k * bits / 8)));
#else
    for (int64_t k = 0; k < K; k++) {
        uint64_t off = (uint64_t)k * (uint64_t)bits, wi = off >> 5;
        unsigned sh = (unsigned)(off & 31);
        const uint32_t *row = (const uint32_t *)p;
        uint32_t v = row[wi] >> sh;
        if (sh + (unsigned)bits > 32) v |= row[wi + 1] << (32 - sh);
        out[k] = (uint8_t)(v & ((1u << bits) - 1));
    }
#endif
}

#define QR 32 /* rows per int8 tile: two vectors, so each activation broadcast feeds two vpdpbusd */

/* y[t, r0..r0+32) for T tokens: tile [K/4][32] u32 (4 q values of a row per dword),
 * sv/bv [ng][32] scales/biases, xq [T][K] int8, dx/xs [T][ng]. */
static inline __attribute__((always_inline)) void q8_block(const uint32_t *tile, const float *sv, const float *bv,
                                                           const int8_t *xq, const float *dx, const float *xs,
                                                           int64_t K, int GS, int64_t ng, int T, float *y, int64_t N,
                                                           int64_t r0, __mmask16 m0, __mmask16 m1) {
    const int gs = GS;
    __m512 f0[GEMM_T], f1[GEMM_T];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) { f0[t] = _mm512_setzero_ps(); f1[t] = _mm512_setzero_ps(); }
    for (int64_t g = 0; g < ng; g++) {
        __m512i i0[GEMM_T], i1[GEMM_T];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) { i0[t] = _mm512_setzero_si512(); i1[t] = _mm512_setzero_si512(); }
        const int64_t kb = g * (gs / 4);
#ifdef __OPTIMIZE__
#pragma GCC unroll 32
#endif
        for (int kk = 0; kk < GS / 4; kk++) {
            const int64_t k4 = kb + kk;
            __m512i w0 = _mm512_load_si512(tile + k4 * QR), w1 = _mm512_load_si512(tile + k4 * QR + 16);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                __m512i xv = _mm512_set1_epi32(((const int32_t *)(xq + t * K))[k4]);
                i0[t] = _mm512_dpbusd_epi32(i0[t], w0, xv);
                i1[t] = _mm512_dpbusd_epi32(i1[t], w1, xv);
            }
        }
        __m512 s0 = _mm512_load_ps(sv + g * QR), s1 = _mm512_load_ps(sv + g * QR + 16);
        __m512 b0 = _mm512_load_ps(bv + g * QR), b1 = _mm512_load_ps(bv + g * QR + 16);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m512 d = _mm512_set1_ps(dx[t * ng + g]), xsv = _mm512_set1_ps(xs[t * ng + g]);
            f0[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(i0[t]), d), s0, f0[t]);
            f1[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(i1[t]), d), s1, f1[t]);
            f0[t] = _mm512_fmadd_ps(b0, xsv, f0[t]);
            f1[t] = _mm512_fmadd_ps(b1, xsv, f1[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        _mm512_mask_storeu_ps(y + t * N + r0, m0, f0[t]);
        _mm512_mask_storeu_ps(y + t * N + r0 + 16, m1, f1[t]);
    }
}

static inline __attribute__((always_inline)) void q8_tokens(const q8_job *j, const uint32_t *tile, const float *sv,
                                                            const float *bv, int64_t K, int GS, int64_t ng, int64_t N,
                                                            int64_t r0, __mmask16 m0, __mmask16 m1) {
    int t = 0;
    for (; t + GEMM_T <= j->n; t += GEMM_T)
        q8_block(tile, sv, bv, j->xq + (int64_t)t * K, j->dx + t * ng, j->xsum + t * ng, K, GS, ng, GEMM_T,
                 j->y + (int64_t)t * N, N, r0, m0, m1);
    for (; t + 4 <= j->n; t += 4)
        q8_block(tile, sv, bv, j->xq + (int64_t)t * K, j->dx + t * ng, j->xsum + t * ng, K, GS, ng, 4,
                 j->y + (int64_t)t * N, N, r0, m0, m1);
    for (; t < j->n; t++)
        q8_block(tile, sv, bv, j->xq + (int64_t)t * K, j->dx + t * ng, j->xsum + t * ng, K, GS, ng, 1,
                 j->y + (int64_t)t * N, N, r0, m0, m1);
}

static void q8_fn(void *arg, int64_t tb, int64_t te, int tid) {
    q8_job *j = arg;
    const mx_weight *w = j->w;
    const int64_t K = w->cols, N = w->rows;
    const int gs = w->group_size;
    const int64_t ng = K / gs;
    size_t need = (size_t)K * QR * 2 + (size_t)ng * QR * 2 * sizeof(float) + 128;
    uint8_t *scr = mx_cpu_tscratch(j->c, tid, need);
    if (!scr) { MX_LOGE("cpu matmul: out of memory"); return; }
    uint32_t *tile = (uint32_t *)scr;                       /* [K/4][QR] */
    uint8_t *rows = scr + (size_t)K * QR;                   /* [QR][K] */
    float *sv = (float *)(rows + (size_t)K * QR);           /* [ng][QR] */
    float *bv = sv + ng * QR;
    const int64_t K4 = K / 4;
    for (int64_t tile_i = tb; tile_i < te; tile_i++) {
        int64_t r0 = tile_i * QR;
        int nr = (int)(N - r0 < QR ? N - r0 : QR);
        for (int i = 0; i < QR; i++) {
            if (i < nr) row_to_u8(w, r0 + i, rows + (size_t)i * K);
            else memset(rows + (size_t)i * K, 0, (size_t)K);
        }
        transpose_tile32((const int32_t *)rows, K4, (int32_t *)tile); /* [QR][K/4] dwords -> [K/4][QR] */
        for (int i = 0; i < QR; i++) {
            if (i < nr) {
                for (int64_t g = 0; g < ng; g++) {
                    sv[g * QR + i] = mx_cpu_elem(w->scale_dtype, w->scales, (r0 + i) * ng + g);
                    bv[g * QR + i] = mx_cpu_elem(w->scale_dtype, w->biases, (r0 + i) * ng + g);
                }
            } else for (int64_t g = 0; g < ng; g++) sv[g * QR + i] = bv[g * QR + i] = 0.0f;
        }
        __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
        __mmask16 m1 = (__mmask16)(nr <= 16 ? 0 : nr >= 32 ? 0xffff : (1u << (nr - 16)) - 1);
        switch (gs) {
        case 32: q8_tokens(j, tile, sv, bv, K, 32, ng, N, r0, m0, m1); break;
        case 64: q8_tokens(j, tile, sv, bv, K, 64, ng, N, r0, m0, m1); break;
        default: q8_tokens(j, tile, sv, bv, K, 128, ng, N, r0, m0, m1); break;
        }
    }
}

typedef struct { const float *x; int8_t *xq; float *dx, *xsum; int64_t K; int gs, ord; } qprep_job;
static void qprep_fn(void *arg, int64_t b, int64_t e, int tid) {
    qprep_job *p = arg;
    const int64_t K = p->K, ng = K / p->gs;
    float tmp[32];
    for (int64_t t = b; t < e; t++) {
        const float *x = p->x + t * K;
        int8_t *q = p->xq + t * K;
        for (int64_t g = 0; g < ng; g++) {
            const float *v = x + g * p->gs;
            __m512 mx = _mm512_setzero_ps();
            for (int i = 0; i < p->gs; i += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(v + i)));
            float amax = _mm512_reduce_max_ps(mx);
            float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
            p->dx[t * ng + g] = d;
            /* The group-bias term uses the sum of the *quantized* activations, so that the result
             * is exactly sum((scale*q + bias) * xq): the activation rounding error is then not
             * amplified by the weights' zero-point offset (q is unsigned, bias ~ -scale*2^(b-1)). */
            __m512i isum = _mm512_setzero_si512();
            __m512 vid = _mm512_set1_ps(id);
            for (int i = 0; i < p->gs; i += 32) {
                const float *src = v + i;
                if (p->ord == ORD_EO) { eo32(src, tmp); src = tmp; }
                for (int h = 0; h < 32; h += 16) {
                    __m512i qi = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(src + h), vid),
                                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                    qi = _mm512_max_epi32(_mm512_min_epi32(qi, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
                    isum = _mm512_add_epi32(isum, qi);
                    _mm_storeu_si128((__m128i *)(q + g * p->gs + i + h), _mm512_cvtsepi32_epi8(qi));
                }
            }
            p->xsum[t * ng + g] = d * (float)_mm512_reduce_add_epi32(isum);
        }
    }
}

static bool gemm_q8(mx_cpu_ctx *c, const mx_weight *w, const float *x, float *y, int n) {
    const int64_t K = w->cols, ng = K / w->group_size;
    if (w->group_size != 32 && w->group_size != 64 && w->group_size != 128) return false;
    size_t need = (size_t)n * (size_t)K + (size_t)n * (size_t)ng * 2 * sizeof(float) + 256;
    uint8_t *sh = mx_cpu_shared(c, need);
    if (!sh) return false;
    float *dx = (float *)sh, *xsum = dx + (size_t)n * ng;
    int8_t *xq = (int8_t *)(xsum + (size_t)n * ng);
    qprep_job p = {x, xq, dx, xsum, K, w->group_size, fmt_order(w)};
    mx_pool_run(c->pool, n, 4, qprep_fn, &p);
    q8_job j = {c, w, xq, dx, xsum, y, n};
    mx_pool_run(c->pool, (w->rows + QR - 1) / QR, 1, q8_fn, &j);
    mx_cpu_add_bias(w, y, n);
    return true;
}
#endif /* VNNI */

/* ---------------------------------------------------------------------------------------- */
/* f32 GEMM for dense weights (exact: bf16/f16 -> f32 is exact, f32 FMA accumulation)        */

#define DT_T 8
#define DT_R 32   /* rows per dense tile: two vectors, so each broadcast feeds two FMAs */
typedef struct { mx_cpu_ctx *c; const mx_weight *w; const float *x; float *y; int n; } df_job;

static inline __attribute__((always_inline)) void df_block(const float *tile, const float *x, int64_t K, int T,
                                                           float *y, int64_t N, int64_t r0, __mmask16 m0, __mmask16 m1) {
    __m512 a0[DT_T], a1[DT_T];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) { a0[t] = _mm512_setzero_ps(); a1[t] = _mm512_setzero_ps(); }
    for (int64_t k = 0; k < K; k++) {
        __m512 w0 = _mm512_load_ps(tile + k * DT_R), w1 = _mm512_load_ps(tile + k * DT_R + 16);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_set1_ps(x[t * K + k]);
            a0[t] = _mm512_fmadd_ps(w0, xv, a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, xv, a1[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        _mm512_mask_storeu_ps(y + t * N + r0, m0, a0[t]);
        _mm512_mask_storeu_ps(y + t * N + r0 + 16, m1, a1[t]);
    }
}

static void df_fn(void *arg, int64_t tb, int64_t te, int tid) {
    df_job *j = arg;
    const mx_weight *w = j->w;
    const int64_t K = w->cols, N = w->rows;
    float *tile = mx_cpu_tscratch(j->c, tid, (size_t)K * DT_R * 4 * 2 + 128);
    if (!tile) { MX_LOGE("cpu matmul: out of memory"); return; }
    float *rows = tile + (size_t)K * DT_R; /* [DT_R][K] */
    for (int64_t ti = tb; ti < te; ti++) {
        int64_t r0 = ti * DT_R;
        int nr = (int)(N - r0 < DT_R ? N - r0 : DT_R);
        for (int i = 0; i < DT_R; i++) {
            if (i < nr) mx_cpu_to_f32(w->dtype, w->w, (r0 + i) * K, K, rows + (size_t)i * K);
            else memset(rows + (size_t)i * K, 0, (size_t)K * sizeof(float));
        }
        transpose_tile32((const int32_t *)rows, K, (int32_t *)tile); /* [DT_R][K] -> [K][DT_R] */
        __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
        __mmask16 m1 = (__mmask16)(nr <= 16 ? 0 : nr >= 32 ? 0xffff : (1u << (nr - 16)) - 1);
        int t = 0;
        for (; t + DT_T <= j->n; t += DT_T)
            df_block(tile, j->x + (int64_t)t * K, K, DT_T, j->y + (int64_t)t * N, N, r0, m0, m1);
        for (; t + 4 <= j->n; t += 4) df_block(tile, j->x + (int64_t)t * K, K, 4, j->y + (int64_t)t * N, N, r0, m0, m1);
        for (; t < j->n; t++) df_block(tile, j->x + (int64_t)t * K, K, 1, j->y + (int64_t)t * N, N, r0, m0, m1);
    }
}

static bool gemm_dense(mx_cpu_ctx *c, const mx_weight *w, const float *x, float *y, int n) {
    df_job j = {c, w, x, y, n};
    mx_pool_run(c->pool, (w->rows + DT_R - 1) / DT_R, 1, df_fn, &j);
    mx_cpu_add_bias(w, y, n);
    return true;
}

#endif /* MX_HAVE_AVX512 */

bool mx_cpu_matmul_multi_fast(mx_cpu_ctx *c, int nw, const mx_weight *const *ws, const float *x,
                              float *const *ys, int n) {
#ifdef MX_HAVE_AVX512
    if (nw < 2 || nw > MULTI_MAX) return false;
    const mx_weight *w0 = ws[0];
    bool fast = !c->precise && c->prec_mode != MX_PREC_EXACT && (c->prec_mode == MX_PREC_FAST || n >= c->fast_min_n);
    /* only where each weight would take the gemv path, with identical activation prep */
    if (w0->bits ? fast : n >= 8) return false;
    for (int k = 1; k < nw; k++) {
        const mx_weight *w = ws[k];
        if (w->cols != w0->cols || w->bits != w0->bits || w->group_size != w0->group_size ||
            w->dtype != w0->dtype || (w->bits && w->scale_dtype != w0->scale_dtype)) return false;
    }
    multi_job m;
    if (!gemv_setup(c, w0, x, n, &m.j[0])) return false;
    m.nw = nw;
    m.off[0] = 0;
    for (int k = 0; k < nw; k++) {
        m.j[k] = m.j[0];
        m.j[k].w = ws[k];
        m.j[k].y = ys[k];
        m.off[k + 1] = m.off[k] + ws[k]->rows;
    }
    mx_pool_run(c->pool, m.off[nw], 4, multi_fn, &m);
    for (int k = 0; k < nw; k++) mx_cpu_add_bias(ws[k], ys[k], n);
    return true;
#else
    (void)c; (void)nw; (void)ws; (void)x; (void)ys; (void)n;
    return false;
#endif
}

bool mx_cpu_matmul_fast(mx_cpu_ctx *c, const mx_weight *w, const float *x, float *y, int n) {
#ifdef MX_HAVE_AVX512
    bool fast = !c->precise && c->prec_mode != MX_PREC_EXACT && (c->prec_mode == MX_PREC_FAST || n >= c->fast_min_n);
#if defined(__AVX512VNNI__)
    if (fast && w->bits && gemm_q8(c, w, x, y, n)) return true;
#endif
    if (!w->bits && n >= 8 && gemm_dense(c, w, x, y, n)) return true; /* exact, any mode */
    return gemv(c, w, x, y, n);
#else
    (void)c; (void)w; (void)x; (void)y; (void)n;
    return false;
#endif
}
