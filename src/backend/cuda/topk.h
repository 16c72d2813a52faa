/* backend/cuda/topk.h: the CUDA top-k + log-sum-exp reduction of logit rows (topk.cu), the
 * device half of the backend's optional `topk` op (mlxcel/backend.h). Private to the CUDA
 * backend and its tests; C and CUDA callers alike. It does not copy anything to the host. */
#ifndef MLXCEL_CUDA_TOPK_H
#define MLXCEL_CUDA_TOPK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;   /* = cudaStream_t */

/* For each row r of logits[n_rows, vocab] (device): the k (1..64) largest values, descending with
 * ties lower id first, into vals_dev[r*k ..] and their ids into ids_dev[r*k ..] (NaN entries are
 * never candidates; missing ones are -INFINITY / -1), and lse_dev[r] = log(sum exp) of the whole
 * row (NaN if the row has a NaN, +inf if its max is +inf). Values are copied from the row, bit
 * for bit. All output buffers are device memory; the work is queued on `stream`.
 *
 * scratch: device memory of at least *scratch_needed bytes. Call with scratch == NULL (or too
 * small) to learn the size: returns 1 and sets *scratch_needed, launches nothing. The size
 * depends on n_rows, vocab and k only (grows with n_rows: size it for the largest batch).
 * Returns 0 when the kernels were queued, -1 for bad arguments, else a cudaError_t value from
 * the launch. */
int mx_cuda_topk(struct CUstream_st *stream, const float *logits, int n_rows, int vocab, int k,
                 float *vals_dev, int32_t *ids_dev, float *lse_dev,
                 void *scratch, size_t scratch_bytes, size_t *scratch_needed);

/* The same results from one launch (tk_one: the block that finishes a row's last chunk merges
 * the row), so a step's tail is one kernel, not two. vals / ids / lse may be device memory or
 * pinned host memory the device can write (cudaMallocHost under unified addressing), which
 * spares the copy to the host. row_counters: device memory of n_rows unsigned ints, zero before
 * the first call; each call that runs to completion leaves them zero (a call that fails midway
 * may not: zero them again). pdl != 0 launches it with programmatic stream serialization (its
 * blocks may start while the kernel before finishes; they wait for it before reading). Scratch
 * and return values as mx_cuda_topk's (the same size). */
int mx_cuda_topk_one(struct CUstream_st *stream, const float *logits, int n_rows, int vocab, int k,
                     float *vals, int32_t *ids, float *lse, void *scratch, size_t scratch_bytes,
                     size_t *scratch_needed, unsigned *row_counters, int pdl);

#ifdef __cplusplus
}
#endif
#endif
