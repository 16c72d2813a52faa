/* backend/cuda/topk.cu: top-k candidates and log-sum-exp of logit rows on the GPU (mx_cuda_topk,
 * see topk.h), so a sampler needs only k values per row instead of the row. It is the device
 * half of the backend's `topk` op; the copy to the host is the backend's (backend_cuda.cu).
 *
 * Two kernels. (1) A grid of (chunks, rows): each block loads a chunk of 256*EPT logits into
 * shared memory as 64-bit keys (the float's order-preserving bits above the complemented id, so
 * every key is distinct and "larger value, then lower id" is plain integer order; NaN -> 0, never
 * a candidate), finds the chunk's k-th largest key by an 8-bit radix select (256-bin shared
 * histograms, usually done after 2-3 of the 8 passes), writes the keys >= it, and its (max,
 * sum exp(x - max), NaN flag, largest key). Many blocks per row keep a single row fast. (2) One
 * block per row merges: the largest chunk threshold and the k-th largest chunk maximum bound the
 * row's k-th key from below, so only keys above them (usually ~k) are gathered to shared memory and
 * selected again; the k winners are ranked, and values are read back from the row (bit-exact). The
 * partial sums combine in double. For k = 1 (greedy's top-1) neither phase selects: a chunk's
 * candidate is its largest key, and the row's the largest of those.
 * mx_cuda_topk_one runs both in one launch (tk_one): the block that finishes a row's last chunk
 * (a counter a row) merges the row, reading the others' candidates through L2.
 *
 * Measured on one H200 (test_cuda_topk --bench, vocab 151936, k 64): 22 us for 1 row, 35 us for 8,
 * 58 us for 32, 152 us for 128, against 81 / 450 / 1687 / 6513 us to copy the rows to pageable
 * host memory (19 / 96 / 362 / 1414 us pinned). */
#include "backend/cuda/topk.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define TK_THREADS 256
#define TK_MAXK 64
#define TK_MERGE_BUF 2048
#define TK_MAX_TOPS 1024
#define TK_TARGET_BLOCKS 264   /* ~2 blocks per SM of an H100/H200 */

typedef struct tk_part {
    float m, s;          /* chunk max (NaN ignored) and sum of exp(x - m) */
    int nan;             /* the chunk has a NaN */
    int pad;
    unsigned long long thr;   /* a key with >= k chunk keys at or above it (1 when fewer) */
    unsigned long long top;   /* the chunk's largest key (0: none) */
} tk_part;

typedef struct tk_sel {
    unsigned hist[256];
    unsigned long long prefix, mask;
    unsigned need, nvalid;
    int done;
} tk_sel;

__device__ __forceinline__ unsigned long long tk_key(float x, int id) {
    if (x != x) return 0ull;
    unsigned u = __float_as_uint(x == 0.0f ? 0.0f : x);   /* -0 ties with +0 */
    unsigned key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)key << 32) | (unsigned long long)(~(unsigned)id);
}
__device__ __forceinline__ int tk_id(unsigned long long c) { return (int)(~(unsigned)(c & 0xffffffffull)); }

/* A value written by other blocks of the same launch (CG: through L2, past this multiprocessor's
 * L1, as the one-launch form's merge needs) or of shared / earlier memory. */
template <bool CG, typename T> __device__ __forceinline__ T tk_ld(const T *p) { return CG ? __ldcg(p) : *p; }

/* The smallest key T such that exactly min(k, #nonzero items) nonzero items are >= T (1 when
 * all nonzero items qualify). Block-wide: every thread calls it; items may be shared or global
 * (CG: global items other blocks of this launch wrote). */
template <bool CG>
__device__ unsigned long long tk_select(const unsigned long long *items, int n, unsigned k, tk_sel *S) {
    const int tid = threadIdx.x;
    __syncthreads();   /* a previous call's result has been read */
    if (tid == 0) { S->prefix = 0; S->mask = 0; S->need = k; S->nvalid = 0; S->done = 0; }
    __syncthreads();
    unsigned nv = 0;
    for (int i = tid; i < n; i += blockDim.x) nv += tk_ld<CG>(items + i) != 0ull;
    for (int o = 16; o > 0; o >>= 1) nv += __shfl_down_sync(0xffffffffu, nv, o);
    if ((tid & 31) == 0 && nv) atomicAdd(&S->nvalid, nv);
    __syncthreads();
    if (S->nvalid <= k) return 1ull;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += blockDim.x) S->hist[i] = 0;
        __syncthreads();
        const unsigned long long prefix = S->prefix, mask = S->mask;
        for (int b = 0; b < n; b += blockDim.x) {   /* warp-uniform trip count */
            const int i = b + tid;
            const unsigned long long c = i < n ? tk_ld<CG>(items + i) : 0ull;
            const bool on = c && (c & mask) == prefix;
            const unsigned am = __ballot_sync(0xffffffffu, on);
            if (on) {   /* lanes with the same bin add once: the top bytes of logits are few */
                const unsigned bin = (unsigned)(c >> shift) & 255u;
                const unsigned peers = __match_any_sync(am, bin);
                if ((tid & 31) == __ffs(peers) - 1) atomicAdd(&S->hist[bin], (unsigned)__popc(peers));
            }
        }
        __syncthreads();
        if (tid < 32) {
            /* lane l holds bins 255-8l .. 248-8l (descending); find the bin where the count of
             * keys above reaches `need` */
            unsigned b8[8], s = 0;
            for (int j = 0; j < 8; j++) { b8[j] = S->hist[255 - 8 * tid - j]; s += b8[j]; }
            unsigned inc = s;
            for (int o = 1; o < 32; o <<= 1) {
                unsigned v = __shfl_up_sync(0xffffffffu, inc, o);
                if (tid >= o) inc += v;
            }
            unsigned ex = inc - s, need = S->need;
            __syncwarp();   /* every lane has read need before the winner rewrites it */
            if (ex < need && need <= inc) {
                unsigned cum = ex;
                for (int j = 0; j < 8; j++) {
                    if (cum + b8[j] >= need) {
                        unsigned bin = 255u - 8u * (unsigned)tid - (unsigned)j;
                        S->prefix = prefix | ((unsigned long long)bin << shift);
                        S->mask = mask | (0xffull << shift);
                        if (cum + b8[j] == need) S->done = 1;
                        S->need = need - cum;
                        break;
                    }
                    cum += b8[j];
                }
            }
        }
        __syncthreads();
        if (S->done) break;
    }
    return S->prefix;
}

__device__ __forceinline__ float tk_block_max(float v, float *red) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) r = fmaxf(r, red[w]);
    return r;
}
__device__ __forceinline__ float tk_block_sum(float v, float *red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) r += red[w];
    return r;
}

/* Phase 1 for chunk ch of row `row` (block-wide): the chunk's keys >= its k-th into cand, its
 * partials into part. items: shared [TK_THREADS * EPT]; cnt, top: shared scalars. */
template <int EPT>
__device__ __forceinline__ void tk_chunk_body(const float *logits, int vocab, int k, int n_chunks, int ch, int row,
                                              unsigned long long *cand, tk_part *part, unsigned long long *items,
                                              tk_sel *S, float *red, unsigned *cnt, unsigned long long *top) {
    const int tid = threadIdx.x;
    if (tid == 0) *top = 0ull;
    const float *x = logits + (size_t)row * vocab;
    const int base = ch * TK_THREADS * EPT;
    float v[EPT];
    float m = -INFINITY;
    int nan = 0;
    unsigned long long mk = 0ull;
#pragma unroll
    for (int j = 0; j < EPT; j++) {
        int i = base + j * TK_THREADS + tid;
        float a = i < vocab ? x[i] : -INFINITY;
        v[j] = a;
        unsigned long long key = i < vocab ? tk_key(a, i) : 0ull;
        if (k > 1) items[j * TK_THREADS + tid] = key;
        if (key > mk) mk = key;
        if (a != a) nan = 1; else m = fmaxf(m, a);
    }
    for (int o = 16; o > 0; o >>= 1) { unsigned long long t = __shfl_xor_sync(0xffffffffu, mk, o); if (t > mk) mk = t; }
    __syncthreads();   /* top = 0 is visible */
    if ((tid & 31) == 0 && mk) atomicMax(top, mk);
    m = tk_block_max(m, red);
    float s = 0;
    if (m != -INFINITY && m != INFINITY) {
#pragma unroll
        for (int j = 0; j < EPT; j++) if (v[j] != -INFINITY) s += expf(v[j] - m);
    }
    s = tk_block_sum(s, red);
    nan = __syncthreads_or(nan);   /* also makes items[] visible */
    if (k == 1) {   /* the chunk's one candidate is its largest key: no select */
        if (tid == 0) {
            const unsigned long long t = *top;
            cand[(size_t)row * n_chunks + ch] = t;
            tk_part P;
            P.m = m; P.s = s; P.nan = nan; P.pad = 0;
            P.thr = t ? t : 1ull;
            P.top = t;
            part[(size_t)row * n_chunks + ch] = P;
        }
        return;
    }
    const unsigned long long T = tk_select<false>(items, TK_THREADS * EPT, (unsigned)k, S);
    if (tid == 0) *cnt = 0;
    __syncthreads();
    unsigned long long *out = cand + ((size_t)row * n_chunks + ch) * k;
#pragma unroll
    for (int j = 0; j < EPT; j++) {
        unsigned long long c = items[j * TK_THREADS + tid];
        if (c && c >= T) out[atomicAdd(cnt, 1u)] = c;
    }
    __syncthreads();
    for (int p = (int)*cnt + tid; p < k; p += TK_THREADS) out[p] = 0ull;
    if (tid == 0) {
        tk_part P;
        P.m = m; P.s = s; P.nan = nan; P.pad = 0;
        P.thr = (int)*cnt == k ? T : 1ull;
        P.top = *top;
        part[(size_t)row * n_chunks + ch] = P;
    }
}

template <int EPT>
__global__ void __launch_bounds__(TK_THREADS) tk_chunk(const float *logits, int vocab, int k, int n_chunks,
                                                      unsigned long long *cand, tk_part *part) {
    __shared__ unsigned long long items[TK_THREADS * EPT];
    __shared__ tk_sel S;
    __shared__ float red[32];
    __shared__ unsigned cnt;
    __shared__ unsigned long long top;
    tk_chunk_body<EPT>(logits, vocab, k, n_chunks, blockIdx.x, blockIdx.y, cand, part, items, &S, red, &cnt, &top);
}

/* The block's threads append the nonzero keys of items[0, n) that are >= lo to out (count in
 * *cnt, which may pass cap: keys past cap are not stored) */
template <bool CG>
__device__ __forceinline__ void tk_keep(const unsigned long long *items, int n, unsigned long long lo, unsigned *cnt,
                                        unsigned long long *out, unsigned cap) {
    for (int i = threadIdx.x; i < n; i += TK_THREADS) {
        const unsigned long long x = tk_ld<CG>(items + i);
        if (x && x >= lo) {
            const unsigned p = atomicAdd(cnt, 1u);
            if (p < cap) out[p] = x;
        }
    }
}

/* Phase 2 for row `row` (block-wide): the row's k best of its chunks' candidates, ranked, and its
 * log-sum-exp. CG: cand and part were written by other blocks of this launch (read through L2).
 * Shared: buf [TK_MERGE_BUF], sel [TK_MAXK], tops [TK_MAX_TOPS]; lower, cnt scalars. */
template <bool CG>
__device__ __forceinline__ void tk_merge_body(const float *logits, int vocab, int k, int n_chunks, int row,
                                              const unsigned long long *cand, const tk_part *part, float *vals,
                                              int32_t *ids, float *lse, unsigned long long *buf,
                                              unsigned long long *sel, unsigned long long *tops, tk_sel *S,
                                              unsigned long long *lower, unsigned *cnt) {
    const int tid = threadIdx.x;
    const unsigned long long *c = cand + (size_t)row * n_chunks * k;
    const tk_part *pr = part + (size_t)row * n_chunks;
    const int n = n_chunks * k;
    /* row log-sum-exp from the chunk partials (warp 0) */
    if (tid < 32) {
        float M = -INFINITY;
        int nan = 0;
        unsigned long long lo = 1ull;
        for (int i = tid; i < n_chunks; i += 32) {
            M = fmaxf(M, tk_ld<CG>(&pr[i].m));
            nan |= tk_ld<CG>(&pr[i].nan);
            const unsigned long long t = tk_ld<CG>(&pr[i].thr);
            if (t > lo) lo = t;
        }
        for (int o = 16; o > 0; o >>= 1) {
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
            nan |= __shfl_xor_sync(0xffffffffu, nan, o);
            unsigned long long t = __shfl_xor_sync(0xffffffffu, lo, o);
            if (t > lo) lo = t;
        }
        double sum = 0;
        if (!nan && M != -INFINITY && M != INFINITY)
            for (int i = tid; i < n_chunks; i += 32) {
                const float pm = tk_ld<CG>(&pr[i].m);
                if (pm != -INFINITY) sum += (double)tk_ld<CG>(&pr[i].s) * exp((double)pm - (double)M);
            }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (k == 1) {   /* the row's best is the best chunk maximum (the keys order values, then ids) */
            unsigned long long b = 0ull;
            for (int i = tid; i < n_chunks; i += 32) {
                const unsigned long long t = tk_ld<CG>(&pr[i].top);
                if (t > b) b = t;
            }
            for (int o = 16; o > 0; o >>= 1) {
                const unsigned long long t = __shfl_xor_sync(0xffffffffu, b, o);
                if (t > b) b = t;
            }
            if (tid == 0) {
                const int id = b ? tk_id(b) : -1;
                vals[row] = b ? logits[(size_t)row * vocab + id] : -INFINITY;
                ids[row] = id;
            }
        }
        if (tid == 0) {
            float r;
            if (nan) r = NAN;
            else if (M == INFINITY) r = INFINITY;
            else if (M == -INFINITY) r = -INFINITY;
            else r = (float)((double)M + log(sum));
            lse[row] = r;
            *lower = lo;
            *cnt = 0;
        }
    }
    __syncthreads();
    if (k == 1) return;   /* (block-uniform) */
    /* Lower bounds of the row's k-th largest key: the best chunk threshold (that chunk alone has
     * k keys above it), and the k-th largest chunk maximum (k chunks have a key above it). Keys
     * below cannot be among the row's k largest; usually only ~k or a few times k remain. */
    unsigned long long lo = *lower;
    if (n_chunks > k && n_chunks <= TK_MAX_TOPS) {
        for (int i = tid; i < n_chunks; i += TK_THREADS) tops[i] = tk_ld<CG>(&pr[i].top);
        __syncthreads();
        const unsigned long long t1 = tk_select<false>(tops, n_chunks, (unsigned)k, S);
        if (t1 > lo) lo = t1;
    }
    tk_keep<CG>(c, n, lo, cnt, buf, TK_MERGE_BUF);
    __syncthreads();
    const unsigned nb = *cnt;
    const bool in_smem = nb <= TK_MERGE_BUF;   /* block-uniform */
    const unsigned long long *items = in_smem ? buf : c;
    const int ni = in_smem ? (int)nb : n;
    const bool cg = CG && !in_smem;   /* (CG false: the generic loads alone, as before the one-launch form) */
    const unsigned long long T = cg ? tk_select<true>(c, n, (unsigned)k, S) : tk_select<false>(items, ni, (unsigned)k, S);
    if (tid == 0) *cnt = 0;
    __syncthreads();
    if (cg) tk_keep<true>(c, n, T, cnt, sel, TK_MAXK);
    else tk_keep<false>(items, ni, T, cnt, sel, TK_MAXK);
    __syncthreads();
    const int ns = (int)*cnt < k ? (int)*cnt : k;
    const float *xr = logits + (size_t)row * vocab;
    for (int p = tid; p < k; p += TK_THREADS) {
        if (p < ns) {
            unsigned long long me = sel[p];
            int rank = 0;
            for (int q = 0; q < ns; q++) rank += sel[q] > me;
            int id = tk_id(me);
            vals[(size_t)row * k + rank] = xr[id];
            ids[(size_t)row * k + rank] = id;
        } else {
            vals[(size_t)row * k + p] = -INFINITY;
            ids[(size_t)row * k + p] = -1;
        }
    }
}

__global__ void __launch_bounds__(TK_THREADS) tk_merge(const float *logits, int vocab, int k, int n_chunks,
                                                      const unsigned long long *cand, const tk_part *part,
                                                      float *vals, int32_t *ids, float *lse) {
    __shared__ unsigned long long buf[TK_MERGE_BUF];
    __shared__ unsigned long long sel[TK_MAXK];
    __shared__ tk_sel S;
    __shared__ unsigned long long lower;
    __shared__ unsigned cnt;
    __shared__ unsigned long long tops[TK_MAX_TOPS];
    tk_merge_body<false>(logits, vocab, k, n_chunks, blockIdx.x, cand, part, vals, ids, lse, buf, sel, tops, &S, &lower, &cnt);
}

/* Both phases in one launch (mx_cuda_topk_one): the grid of tk_chunk; the block that finishes a
 * row's last chunk merges that row. Arrivals count in row_cnt[row] with atomicInc bounded by
 * n_chunks - 1, which puts the count back to 0 at the last arrival, so the counters are zero
 * between launches without a memset. The merge reads the other blocks' candidates through L2
 * (tk_merge_body<true>), after the arrivals' fences. With PDL (launched with programmatic stream
 * serialization) the blocks start while the kernel before finishes and wait here for it. */
#define TK_ONE_ITEMS(EPT) (TK_THREADS * (EPT) > TK_MERGE_BUF + TK_MAXK + TK_MAX_TOPS ? TK_THREADS * (EPT) : TK_MERGE_BUF + TK_MAXK + TK_MAX_TOPS)
template <int EPT>
__global__ void __launch_bounds__(TK_THREADS) tk_one(const float *logits, int vocab, int k, int n_chunks,
                                                    unsigned long long *cand, tk_part *part, unsigned *row_cnt,
                                                    float *vals, int32_t *ids, float *lse) {
    __shared__ unsigned long long sm[TK_ONE_ITEMS(EPT)];   /* the chunk's items, then the merge's buffers */
    __shared__ tk_sel S;
    __shared__ float red[32];
    __shared__ unsigned cnt;
    __shared__ unsigned long long top, lower;
    __shared__ int last;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const int row = blockIdx.y;
    tk_chunk_body<EPT>(logits, vocab, k, n_chunks, blockIdx.x, row, cand, part, sm, &S, red, &cnt, &top);
    __threadfence();   /* this thread's candidates (thread 0: the partials) before the arrival */
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicInc(row_cnt + row, (unsigned)(n_chunks - 1)) == (unsigned)(n_chunks - 1);
        __threadfence();   /* (as a grid barrier's: the arrival's fence, then the block's barrier) */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();   /* every chunk of the row arrived: their writes come before the reads below */
    tk_merge_body<true>(logits, vocab, k, n_chunks, row, cand, part, vals, ids, lse, sm, sm + TK_MERGE_BUF,
                        sm + TK_MERGE_BUF + TK_MAXK, &S, &lower, &cnt);
}

static int tk_ept(int n_rows, int vocab) {
    const long long r = n_rows;
    if (r * ((vocab + TK_THREADS * 16 - 1) / (TK_THREADS * 16)) >= TK_TARGET_BLOCKS) return 16;
    if (r * ((vocab + TK_THREADS * 8 - 1) / (TK_THREADS * 8)) >= TK_TARGET_BLOCKS) return 8;
    return 4;
}

static size_t tk_align(size_t x) { return (x + 255) & ~(size_t)255; }

/* The layout both forms share: the number of chunks a row and the scratch (candidates, then
 * partials). Returns -1 for bad arguments, 1 when the scratch is missing or short, else 0. */
typedef struct tk_plan { int ept, n_chunks; unsigned long long *cand; tk_part *part; } tk_plan;
static int tk_prepare(int n_rows, int vocab, int k, void *scratch, size_t scratch_bytes, size_t *scratch_needed, tk_plan *pl) {
    if (n_rows <= 0 || vocab <= 0 || k < 1 || k > TK_MAXK || !scratch_needed) return -1;
    if (n_rows > 65535) return -1;   /* grid y */
    pl->ept = tk_ept(n_rows, vocab);
    pl->n_chunks = (vocab + TK_THREADS * pl->ept - 1) / (TK_THREADS * pl->ept);
    const size_t n_rc = (size_t)n_rows * (size_t)pl->n_chunks;
    const size_t cand_bytes = tk_align(n_rc * (size_t)k * sizeof(unsigned long long));
    const size_t need = cand_bytes + tk_align(n_rc * sizeof(tk_part));
    *scratch_needed = need;
    if (!scratch || scratch_bytes < need) return 1;
    pl->cand = (unsigned long long *)scratch;
    pl->part = (tk_part *)((char *)scratch + cand_bytes);
    return 0;
}

extern "C" int mx_cuda_topk(struct CUstream_st *stream, const float *logits, int n_rows, int vocab, int k,
                            float *vals_dev, int32_t *ids_dev, float *lse_dev,
                            void *scratch, size_t scratch_bytes, size_t *scratch_needed) {
    tk_plan pl;
    const int pr = tk_prepare(n_rows, vocab, k, scratch, scratch_bytes, scratch_needed, &pl);
    if (pr) return pr;
    if (!logits || !vals_dev || !ids_dev || !lse_dev) return -1;
    cudaStream_t st = (cudaStream_t)stream;
    const int n_chunks = pl.n_chunks;
    dim3 g1((unsigned)n_chunks, (unsigned)n_rows);
    if (pl.ept == 16) tk_chunk<16><<<g1, TK_THREADS, 0, st>>>(logits, vocab, k, n_chunks, pl.cand, pl.part);
    else if (pl.ept == 8) tk_chunk<8><<<g1, TK_THREADS, 0, st>>>(logits, vocab, k, n_chunks, pl.cand, pl.part);
    else tk_chunk<4><<<g1, TK_THREADS, 0, st>>>(logits, vocab, k, n_chunks, pl.cand, pl.part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    tk_merge<<<n_rows, TK_THREADS, 0, st>>>(logits, vocab, k, n_chunks, pl.cand, pl.part, vals_dev, ids_dev, lse_dev);
    e = cudaGetLastError();
    return e == cudaSuccess ? 0 : (int)e;
}

extern "C" int mx_cuda_topk_one(struct CUstream_st *stream, const float *logits, int n_rows, int vocab, int k,
                                float *vals, int32_t *ids, float *lse, void *scratch, size_t scratch_bytes,
                                size_t *scratch_needed, unsigned *row_counters, int pdl) {
    tk_plan pl;
    const int pr = tk_prepare(n_rows, vocab, k, scratch, scratch_bytes, scratch_needed, &pl);
    if (pr) return pr;
    if (!logits || !vals || !ids || !lse || !row_counters) return -1;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3((unsigned)pl.n_chunks, (unsigned)n_rows);
    cfg.blockDim = dim3(TK_THREADS);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = (cudaStream_t)stream;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    void (*kern)(const float *, int, int, int, unsigned long long *, tk_part *, unsigned *, float *, int32_t *, float *) =
        pl.ept == 16 ? tk_one<16> : pl.ept == 8 ? tk_one<8> : tk_one<4>;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kern, logits, vocab, k, pl.n_chunks, pl.cand, pl.part, row_counters, vals, ids, lse);
    if (e != cudaSuccess && pdl) {   /* a launch configuration error is not sticky: without PDL, then */
        cudaGetLastError();
        cfg.numAttrs = 0;
        e = cudaLaunchKernelEx(&cfg, kern, logits, vocab, k, pl.n_chunks, pl.cand, pl.part, row_counters, vals, ids, lse);
    }
    if (e == cudaSuccess) e = cudaGetLastError();
    return e == cudaSuccess ? 0 : (int)e;
}
