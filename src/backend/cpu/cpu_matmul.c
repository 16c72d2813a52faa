/* cpu_matmul.c: y = x W^T (+ bias) on the CPU for dense F32/F16/BF16 weights and MLX affine
 * quantized weights (bits 2..8, read packed from the mmap'ed checkpoint, never expanded in
 * memory), plus the row dequantizer used by embed. Exact f32 reference path here; SIMD fast
 * kernels (decode GEMV, int8/bf16 prefill) are in cpu_kernels_*.c. It does not allocate per call
 * once the scratch buffers have grown. */
#include "cpu_internal.h"
#include "cpu_kernels.h"

#include <math.h>
#include <stdlib.h>

mx_status mx_cpu_weight_check(const mx_weight *w) {
    if (!w || !w->w || w->rows <= 0 || w->cols <= 0)
        return mx_errorf(MX_ERR_INVALID_ARG, "cpu weight: empty weight");
    if (w->bits == 0) {
        if (w->dtype != MX_DTYPE_F32 && w->dtype != MX_DTYPE_F16 && w->dtype != MX_DTYPE_BF16)
            return mx_errorf(MX_ERR_UNSUPPORTED, "cpu weight: dense dtype %s not supported", mx_dtype_name(w->dtype));
    } else {
        if (w->bits != 2 && w->bits != 3 && w->bits != 4 && w->bits != 5 && w->bits != 6 && w->bits != 8)
            return mx_errorf(MX_ERR_UNSUPPORTED, "cpu weight: %d-bit quantization not supported", w->bits);
        if (w->group_size <= 0 || w->cols % w->group_size || (w->cols * w->bits) % 32)
            return mx_errorf(MX_ERR_FORMAT, "cpu weight: group size %d does not divide %lld columns", w->group_size,
                             (long long)w->cols);
        if (!w->scales || !w->biases)
            return mx_errorf(MX_ERR_FORMAT, "cpu weight: quantized weight without scales/biases");
        if (w->scale_dtype != MX_DTYPE_F32 && w->scale_dtype != MX_DTYPE_F16 && w->scale_dtype != MX_DTYPE_BF16)
            return mx_errorf(MX_ERR_UNSUPPORTED, "cpu weight: scale dtype %s not supported", mx_dtype_name(w->scale_dtype));
    }
    if (w->bias && w->bias_dtype != MX_DTYPE_F32 && w->bias_dtype != MX_DTYPE_F16 && w->bias_dtype != MX_DTYPE_BF16)
        return mx_errorf(MX_ERR_UNSUPPORTED, "cpu weight: bias dtype %s not supported", mx_dtype_name(w->bias_dtype));
    return MX_OK;
}

void mx_cpu_unpack_q(const uint32_t *row, int bits, int64_t k0, int64_t n, float *out) {
    uint32_t mask = (1u << bits) - 1u;
    if (bits == 8) {
        const uint8_t *b = (const uint8_t *)row + k0;
        for (int64_t i = 0; i < n; i++) out[i] = (float)b[i];
        return;
    }
    if (bits == 4 && (k0 & 1) == 0) {
        const uint8_t *b = (const uint8_t *)row + k0 / 2;
        int64_t i = 0;
        for (; i + 2 <= n; i += 2) { out[i] = (float)(b[i / 2] & 15); out[i + 1] = (float)(b[i / 2] >> 4); }
        if (i < n) out[i] = (float)(b[i / 2] & 15);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint64_t off = (uint64_t)(k0 + i) * (uint64_t)bits;
        uint64_t wi = off >> 5;
        unsigned sh = (unsigned)(off & 31);
        uint32_t v = row[wi] >> sh;
        if (sh + (unsigned)bits > 32) v |= row[wi + 1] << (32 - sh);
        out[i] = (float)(v & mask);
    }
}

void mx_cpu_weight_row(const mx_weight *w, int64_t r, float *out) {
    int64_t K = w->cols;
    if (w->bits == 0) { mx_cpu_to_f32(w->dtype, w->w, r * K, K, out); return; }
    const uint32_t *row = (const uint32_t *)w->w + r * (K * w->bits / 32);
    mx_cpu_unpack_q(row, w->bits, 0, K, out);
    int64_t ng = K / w->group_size;
    for (int64_t g = 0; g < ng; g++) {
        float s = mx_cpu_elem(w->scale_dtype, w->scales, r * ng + g);
        float b = mx_cpu_elem(w->scale_dtype, w->biases, r * ng + g);
        float *o = out + g * w->group_size;
        for (int i = 0; i < w->group_size; i++) o[i] = fmaf(s, o[i], b);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* exact reference path: dequantize a tile of rows to f32 once, dot with every token         */

#define REF_ROWS 4
typedef struct { mx_cpu_ctx *c; const mx_weight *w; const float *x; float *y; int n; } mm_job;

static void ref_fn(void *arg, int64_t b, int64_t e, int tid) {
    mm_job *j = arg;
    const mx_weight *w = j->w;
    int64_t K = w->cols, N = w->rows;
    float *buf = mx_cpu_tscratch(j->c, tid, (size_t)K * REF_ROWS * sizeof(float));
    if (!buf) { MX_LOGE("cpu matmul: out of memory"); return; }
    for (int64_t r0 = b; r0 < e; r0 += REF_ROWS) {
        int nr = (int)(e - r0 < REF_ROWS ? e - r0 : REF_ROWS);
        for (int i = 0; i < nr; i++) mx_cpu_weight_row(w, r0 + i, buf + i * K);
        for (int t = 0; t < j->n; t++) {
            const float *x = j->x + (int64_t)t * K;
            for (int i = 0; i < nr; i++) j->y[(int64_t)t * N + r0 + i] = mx_cpu_dot(buf + i * K, x, K);
        }
    }
}

void mx_cpu_add_bias(const mx_weight *w, float *y, int n) {
    if (!w->bias) return;
    for (int t = 0; t < n; t++) {
        float *yr = y + (int64_t)t * w->rows;
        for (int64_t r = 0; r < w->rows; r++) yr[r] += mx_cpu_elem(w->bias_dtype, w->bias, r);
    }
}

void mx_cpu_matmul_ref(mx_cpu_ctx *c, const mx_weight *w, const float *x, float *y, int n) {
    mm_job j = {c, w, x, y, n};
    mx_pool_run(c->pool, w->rows, REF_ROWS * 4, ref_fn, &j);
    mx_cpu_add_bias(w, y, n);
}

void mx_cpu_matmul(void *ctx, const mx_weight *w, const float *x, float *y, int n) {
    mx_cpu_ctx *c = ctx;
    if (n <= 0) return;
    if (mx_cpu_weight_check(w) != MX_OK) {
        MX_LOGE("cpu matmul: %s", mx_last_error());
        memset(y, 0, (size_t)n * (size_t)w->rows * sizeof(float));
        return;
    }
    if (mx_cpu_matmul_fast(c, w, x, y, n)) return;
    mx_cpu_matmul_ref(c, w, x, y, n);
}

void mx_cpu_matmul_multi(void *ctx, int nw, const mx_weight *const *ws, const float *x, float *const *ys, int n) {
    mx_cpu_ctx *c = ctx;
    if (n <= 0) return;
    bool ok = true;
    for (int k = 0; k < nw; k++) ok = ok && mx_cpu_weight_check(ws[k]) == MX_OK;
    if (ok && mx_cpu_matmul_multi_fast(c, nw, ws, x, ys, n)) return;
    for (int k = 0; k < nw; k++) mx_cpu_matmul(ctx, ws[k], x, ys[k], n);
}
