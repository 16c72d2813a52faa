/* cpu_kernels.h: private entry points of the CPU backend's SIMD matmul kernels. */
#ifndef MLXCEL_CPU_KERNELS_H
#define MLXCEL_CPU_KERNELS_H
#include "cpu_internal.h"

/* Exact f32 reference matmul (any format). */
void mx_cpu_matmul_ref(mx_cpu_ctx *c, const mx_weight *w, const float *x, float *y, int n);
void mx_cpu_add_bias(const mx_weight *w, float *y, int n);
/* Try a fast kernel; returns false when none applies (caller falls back to the reference). */
bool mx_cpu_matmul_fast(mx_cpu_ctx *c, const mx_weight *w, const float *x, float *y, int n);
/* Several weights on one input in one dispatch, when they share format and take the gemv path. */
bool mx_cpu_matmul_multi_fast(mx_cpu_ctx *c, int nw, const mx_weight *const *ws, const float *x,
                              float *const *ys, int n);
#endif
