/* backend/cuda/mv_ring.cuh: the batch-1 q4/q8 matvec with its weights streamed into shared memory
 * by bulk copies (k_mv_ring), for rows of at most 4096 columns (x of a lane's groups then fits its
 * registers). Included by backend_cuda.cu after fused_decode.cuh (whose mbarrier and bulk-copy
 * helpers it uses); the host side is mv_ring() there.
 *
 * Why: k_mv_i8 loads a row's codes into registers, one batch a warp, so the bytes in flight are
 * bounded by the resident warps and a warp's loads stop while it computes and exits. Here one
 * block a multiprocessor holds a ring of shared-memory slots per warp; lane 0 of each warp keeps
 * its slots in flight with cp.async.bulk (the copy engine, no registers), refilling a slot as soon
 * as the warp has read it. Copies are issued before the wait on the previous kernel (weights are
 * never written by kernels): a whole ring (~190 KB a multiprocessor, 25 MB on an H200) streams in
 * while the norm or attention kernel before the matvec runs.
 *
 * Work: the blocks of a weight of the set take equal runs of its rows; a block's run is cut into
 * items of RS consecutive rows dealt round-robin to its warps; an item fills one slot of its
 * warp: the rows' codes, then their scales, then their biases (2-byte types, contiguous for
 * consecutive rows). Each warp's slots are its own, used in order, so one mbarrier a slot (the
 * copies' completion) is all the synchronization there is.
 * Arithmetic: k_mv_i8's term for term (a lane takes the groups lane, lane + 32, ... of the row in
 * order; the same integer dot products; the same warp sum), so the results are bit for bit those
 * of k_mv_i8.
 * Measured on the H200 (NOTES.md, tenth session): larger copies matter more than more slots
 * (Llama-8B q4 decode 390 tok/s with a row a slot, 470 with two), fewer warps are slower; rows
 * longer than 4096 columns (x from L1 for each row) were slower than k_mv_i8, so they stay there,
 * except with the add's epilogue (PRO 6, thirtieth session: x staged in shared memory once a block,
 * 8 warps of two one-row slots; Llama-8B's down +0.4% against k_mv_i8<.., EPI>).
 *
 * Also here (eleventh session): k_mv_ring_bf, the same for dense bf16 weights (x staged in shared
 * memory, long rows in segments; host mv_ring_bf), and the batch-1 rmsnorm of x run in either
 * kernel's prologue (mr_norm; host rn_product, MLXCEL_CUDA_RING_NORM). Measured (Llama-8B, H200):
 * bf16 decode 238.4 tok/s with the norm in the ring for q/k/v, gate/up and the LM head (the other
 * bf16 products on registers), against 227.1-230.2 with neither; the norm in k_mv_ring (q4) was
 * slower, 461.8 against 487.0, so q4/q8 keep the norm kernel by default.
 * Thirteenth session: k_mv_ring_bf<.., PAIR>, a gate/up pair and the act_mul after it in one
 * launch (host pb_defer / c_act_mul, MLXCEL_CUDA_RING_PAIR): Qwen3-0.6B bf16 decode 1,137 against
 * 1,096 tok/s, Llama-8B bf16 unchanged (239.7 / 239.7 against 240.2 / 239.8: there the act_mul
 * was already hidden behind the down product's first loads); and the long rows' products (Llama-
 * 8B's down, 14,336 columns) on k_mv_ring_bf by default (238.9 / 239.8 against 235.2 / 234.9).
 * Fourteenth session: the prologues shortened (gamma with a and b; the last-block count read at
 * the end, mr_arrive / mr_end): Qwen3-0.6B bf16 1,159.5 against 1,138.0, the norm in k_mv_ring (q4)
 * 495.3 against 468.9 before (the norm kernel, still the q4 default: 496.8), Llama-8B bf16 at
 * parity (242.4 / 243.3 against 243.5 / 243.0); one call, the previous binary beside.
 * Twenty-third session: k_mv_ring<.., PRO 4> (the residual add after the product and its rows' part
 * of the next rmsnorm's sum of squares, with x's int8 form before the norm's scale) and <.., SC>
 * (x scaled by that norm's scale from the parts): MLXCEL_CUDA_RING_EPI, host pe_take; Qwen3-0.6B q4
 * decode +3.0-4.4% on an H100 once the parts were loaded before x (even before). */

#define MR_MAXSLOTS 16
#define MR_PARTS 160             /* SC: the most parts (a multiple of 32; the blocks of a k_mv_ring<.., 4>) */

struct mr_set {                  /* up to 4 weights of one format sharing x, as mv_set */
    const uint8_t *W[4], *S[4], *B[4];
    const float *bias[4];
    float *y[4];
    int rows[4], blk0[5], nw;
    int row_wb, row_sb;          /* bytes of a row: codes, scales (= biases) */
    int ng;                      /* groups of 32 columns a row (<= 128) */
    int slots, slot_b;           /* slots a warp, bytes a slot (RS rows) */
};

/* The rmsnorm before a ring product, run in the product's prologue (MLXCEL_CUDA_RING_NORM): each
 * block computes x = rmsnorm(a (+ b)) of the one row itself (8 values a thread), so the norm is not
 * a kernel of its own; the block that reads a and b last (a counter in device memory, which it
 * resets) stores the sum (a + b: the residual stream) and the normed row, as the norm would have:
 * no block can then read a value another has overwritten (a may be the sum's own buffer).
 * Arithmetic: k_rmsnorm_r's (the sum, v * inv * (g + add_one), quant_group's int8 form), but the
 * sum of squares is reduced in another order, so x may differ from the norm kernel's in the last
 * bit. a null: no norm (x is the previous kernel's output). */
struct mr_norm {
    const float *a, *b;          /* the row (b null: a alone) */
    float *sum;                  /* a + b stored here (b non-null) */
    const float *g;              /* gamma (null: 1), plus add_one */
    float eps, add_one;
    float *y;                    /* the normed row stored here */
    unsigned *count;             /* blocks that have read a and b (the last resets it) */
    int act;                     /* k_mv_ring<.., PRO 2>: x = act(a) * b (an act_mul), stored to y;
                                  * PRO 3: the activation of the pair's act_mul */
    int8_t *oq; float2 *ods;     /* PRO 3: the int8 form of the act_mul's output (not x's buffer);
                                  * PRO 4: the int8 form of (a + y) * (g + add_one), the next product's x
                                  * before its norm's scale */
    float *part;                 /* PRO 4: each block's sum of squares of a + y, part[block]; SC: read */
    int np;                      /* SC: how many parts */
};

/* Which block stores the sum and the normed row (or the act_mul's output): the last to have read a
 * and b. Thread 0 counts its block in nm.count after a barrier that follows every thread's loads of
 * a and b (mr_arrive); the count comes back while the block streams its rows, and only at the end
 * (mr_end, after a barrier) does the block learn whether it was the last, which then resets the
 * counter and stores from the registers it kept. So the atomic's round trip is not on the path to
 * the first row (it was: a barrier waited for it before the quantization). */
__device__ __forceinline__ unsigned mr_arrive(const mr_norm &nm) {
    return threadIdx.x == 0 ? atomicAdd(nm.count, 1u) : 0u;
}
__device__ __forceinline__ bool mr_end(const mr_norm &nm, unsigned tok, float *sh) {
    if (threadIdx.x == 0) {
        const bool l = tok == gridDim.x - 1;
        if (l) *nm.count = 0;   /* (every other block has taken its turn) */
        sh[32] = l ? 1.f : 0.f;
    }
    __syncthreads();
    return sh[32] != 0.f;
}

/* the weight of a set (mr_set, mrb_set) this block takes, and its rows [rb0, rb1): the blocks
 * blk0[k] .. blk0[k + 1] - 1 take equal runs of weight k's rows */
template <typename SET>
__device__ __forceinline__ int mr_block(const SET &set, int *rb0, int *rb1) {
    int k = 0;
#pragma unroll
    for (int i = 1; i < 4; i++) if (i < set.nw && (int)blockIdx.x >= set.blk0[i]) k = i;
    const int nb = set.blk0[k + 1] - set.blk0[k], lb = (int)blockIdx.x - set.blk0[k], rows = set.rows[k];
    *rb0 = (int)((int64_t)lb * rows / nb);
    *rb1 = (int)((int64_t)(lb + 1) * rows / nb);
    return k;
}
/* PRO 3 (a gate/up pair): the block's rows [rb0, rb1) of both weights, whole groups of 32 rows
 * (the block quantizes the act_mul's output of its rows itself) */
__device__ __forceinline__ int mr_pair_block(int rows, int *rb0, int *rb1) {
    const int ng = rows >> 5;
    *rb0 = (int)((int64_t)blockIdx.x * ng / gridDim.x) << 5;
    *rb1 = (int)((int64_t)(blockIdx.x + 1) * ng / gridDim.x) << 5;
    return 0;
}
/* the L2 policy of the rings' copies: weights are read once a step */
__device__ __forceinline__ uint64_t mr_evict_first() {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

/* a ring kernel's start: lane 0 of each warp initializes the warp's S mbarriers and issues its
 * first items (issue(t), up to S of its nitem); then the wait on the previous kernel, unless the
 * kernel waited at entry (waited): x, outputs and the norm's inputs come after it. (A block that
 * starts after the kernel before has ended gets its first loads after the wait back only behind
 * these copies: ~4 us for Llama-8B's gate/up pair at two 4.6 KB slots a warp, the wait trace's
 * `load`; yet issuing fewer of them before the wait and the rest after x's loads was slower,
 * twenty-fourth session, NOTES.md.) */
template <typename F>
__device__ __forceinline__ void mr_start(uint64_t *bar, int S, int nitem, int lane, bool waited, const F &issue) {
    if (lane == 0) {
        for (int s = 0; s < S; s++) fd_mbar_init(bar + s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int t = 0; t < S && t < nitem; t++) issue(t);
    }
    __syncwarp();
    if (!waited) pdl_wait();
}


/* the integer dot product of group g of a row's codes (in a slot) with x's words of that group */
template <int BITS>
__device__ __forceinline__ int mr_gdot(const uint8_t *row, int g, const uint32_t *xw) {
    constexpr int V = BITS / 4;   /* 16-byte vectors a group of 32 codes */
    const uint4 *wp = (const uint4 *)row + (size_t)g * V;
    return BITS == 4 ? dot_q4n(wp[0], xw) : dot_q8(wp[0], wp[V - 1], xw);
}

/* PRO, the prologue: 0 none (the tenth session's kernel, which the form with a runtime branch on
 * nm.a measured slower than: Qwen3-0.6B q4 decode ~5%, twelfth session, NOTES.md); 1 the norm
 * (nm); 2 the act_mul before the product (MLXCEL_CUDA_RING_ACT): x = act(nm.a) * nm.b computed and
 * quantized by every block as k_act_mul does, stored to nm.y by the block that reads a and b last
 * (a may be y's own buffer: the decoder's act_mul is in place).
 * PRO 3, no prologue but an epilogue (MLXCEL_CUDA_RING_PAIR): a gate/up pair (set.nw 2, equal
 * rows, a multiple of 32) and the act_mul after it in one launch. Every block takes the same run
 * of whole groups of 32 rows of both weights (mr_pair_block); a unit of RS rows is two items, its
 * gate's rows and its up's, which go to different warps (the items are dealt in turn); the warps
 * keep the sums in shared memory, and after a barrier each warp takes a group of 32 rows: y[1] =
 * up, y[0] = act(gate) * up (in place over gate: what the two ops leave) and the int8 form of the
 * latter into nm.oq / nm.ods as k_act_mul writes it (quant_group), for the down product. The sums
 * are the unpaired form's, so every output is bit for bit that of the ring and k_act_mul.
 * Measured (H200, one call, tok/s): Llama-8B q4 decode 510.9 / 509.7 / 508.6 against 496.3 /
 * 495.2 / 491.9 without the pair; Qwen3-0.6B q4 (graphs) 1,265.6 / 1,290.1 against 1,244.9 /
 * 1,281.0. A first form, which gave a warp both items of a unit and had lane 0 store the act_mul
 * row by row, was slower on Qwen3-0.6B (1,191 / 1,187 against 1,270 / 1,241; NOTES.md).
 * PRO 4: the residual add and the next norm's parts after the product (MLXCEL_CUDA_RING_EPI, below).
 * PRO 6: PRO 4 for rows longer than 4,096 columns (MLXCEL_CUDA_RING_LONG: Llama-8B's down, 14,336):
 * x's int8 form is staged in shared memory after the wait (its groups do not fit a lane's
 * registers) and read group by group for each item; otherwise PRO 4's kernel. */
template <int BITS, typename ST, int RS, int PRO, bool SC = false>
__global__ void __launch_bounds__(512, 1)
k_mv_ring(const mr_set set, const int8_t *__restrict__ xq, const float2 *__restrict__ xds, int gs_shift, const mr_norm nm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t mr_smem[];
    __shared__ float sh[33];
    bool waited = pdl_entry_weights_first();
    int rb0, rb1;
    constexpr bool EP = PRO == 4 || PRO == 6, XS = PRO == 6;   /* the add's epilogue; x staged in shared memory */
    const int k = PRO >= 3 ? mr_pair_block(set.rows[0], &rb0, &rb1) : mr_block(set, &rb0, &rb1);
    const int nwarp = (int)(blockDim.x >> 5), wid = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int nunit = (rb1 - rb0 + RS - 1) / RS, S = set.slots;
    /* items: a unit of RS rows; PRO 3 two a unit (its gate's rows, its up's), dealt to the warps in
     * turn, so the gate's and the up's rows of a unit stream in side by side */
    const int nit = PRO == 3 ? 2 * nunit : nunit;
    const int nitem = nit > wid ? (nit - wid + nwarp - 1) / nwarp : 0;
    /* item t of this warp: its first row, and (PRO 3) kk, its weight */
    auto item_of = [&](int t, int &kk) -> int {
        if constexpr (PRO == 3) {
            const int j = wid + nwarp * t;
            kk = j & 1;
            return rb0 + (j >> 1) * RS;
        } else {
            kk = 0;
            return rb0 + (wid + nwarp * t) * RS;
        }
    };
    uint8_t *ring = mr_smem + (size_t)wid * S * set.slot_b;
    uint64_t *bar = (uint64_t *)(mr_smem + (size_t)nwarp * S * set.slot_b) + wid * S;
    const uint8_t *Wk = set.W[k], *Sk = set.S[k], *Bk = set.B[k];
    const uint64_t pol = mr_evict_first();
    /* (lane 0) item t of this warp into its slot */
    auto issue = [&](int t) {
        int kk;
        const int r0 = item_of(t, kk), nr = min(RS, rb1 - r0);
        uint8_t *d = ring + (size_t)(t % S) * set.slot_b;
        uint64_t *b = bar + t % S;
        const uint32_t wb = (uint32_t)(nr * set.row_wb), sb = (uint32_t)(nr * set.row_sb);
        const uint8_t *Wt = PRO == 3 && kk ? set.W[1] : Wk, *St = PRO == 3 && kk ? set.S[1] : Sk, *Bt = PRO == 3 && kk ? set.B[1] : Bk;
        fd_mbar_expect(b, wb + 2 * sb);
        fd_bulk(d, Wt + (size_t)r0 * set.row_wb, wb, b, pol);
        fd_bulk(d + RS * set.row_wb, St + (size_t)r0 * set.row_sb, sb, b, pol);
        fd_bulk(d + RS * (set.row_wb + set.row_sb), Bt + (size_t)r0 * set.row_sb, sb, b, pol);
    };
    mr_start(bar, S, nitem, lane, waited, issue);
    const float *bias = set.bias[k];
    float *y = set.y[k];
    const int ng = set.ng, ssw = set.row_sb / 2;
    /* SC: the parts (up to MR_PARTS, 5 a lane) and the block's first values of the normed row's
     * inputs, loaded now, before x (their round trips overlap x's) */
    float pt[MR_PARTS / 32], sa0 = 0.f, sg0 = 1.f;
    int si0 = 0, si1 = 0;
    if constexpr (SC) {
#pragma unroll
        for (int j = 0; j < MR_PARTS / 32; j++) pt[j] = lane + 32 * j < nm.np ? __ldcg(nm.part + lane + 32 * j) : 0.f;
        const int d = ng << 5;
        si0 = (int)((int64_t)blockIdx.x * d / gridDim.x); si1 = (int)((int64_t)(blockIdx.x + 1) * d / gridDim.x);
        if (nm.y && si0 + (int)threadIdx.x < si1) {
            sa0 = nm.a[si0 + threadIdx.x];
            sg0 = nm.g ? nm.g[si0 + threadIdx.x] + nm.add_one : 1.f;
        }
    }
    /* PRO 4: the residual and gamma of the warp's first group of rows of the epilogue, loaded now */
    float pa0 = 0.f, pg0 = 1.f;
    if constexpr (EP) {
        if (wid < (rb1 - rb0) >> 5) {
            const int i = rb0 + (wid << 5) + lane;
            pa0 = nm.a[i];
            pg0 = nm.g ? nm.g[i] + nm.add_one : 1.f;
        }
    }
    /* the norm (PRO 1): warp w quantizes groups w, w + nwarp, ... (up to 8) into shared memory,
     * after the ring and its mbarriers: codes, then (dx, dx * code sum) a group */
    int8_t *xq_s = (int8_t *)(mr_smem + (((size_t)nwarp * S * (set.slot_b + 8) + 15) & ~(size_t)15));
    float2 *xds_s = (float2 *)(xq_s + (ng << 5));
    float pv[8], po[8];   /* (PRO: the values this block stores at the end if it is the last) */
    unsigned tok = 0;
    if constexpr (PRO == 2) {   /* the act_mul: groups as the norm's */
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int g = wid + nwarp * j, i = (g << 5) + lane;
            pv[j] = g < ng ? act_f(nm.act, nm.a[i]) * nm.b[i] : 0.f;
        }
        __syncthreads();   /* (every thread's loads of a and b have returned) */
        tok = mr_arrive(nm);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int g = wid + nwarp * j, i = (g << 5) + lane;
            if (g >= ng) break;   /* (uniform in the warp) */
            quant_group(pv[j], xq_s, xds_s, (size_t)i);   /* (k_act_mul's int8 form, into shared memory) */
        }
        __syncthreads();
    }
    if constexpr (PRO == 1) {
        const int d = ng << 5;
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < 8; j++) {   /* (gamma loaded with a and b: one round trip) */
            const int g = wid + nwarp * j, i = (g << 5) + lane;
            pv[j] = g < ng ? nm.a[i] + (nm.b ? nm.b[i] : 0.f) : 0.f;
            po[j] = g < ng && nm.g ? nm.g[i] + nm.add_one : 1.f;
            ss = fmaf(pv[j], pv[j], ss);
        }
        ss = block_sum(ss, sh);   /* (every thread's loads of a and b have returned) */
        tok = mr_arrive(nm);
        const float inv = rsqrtf(ss / (float)d + nm.eps);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int g = wid + nwarp * j, i = (g << 5) + lane;
            if (g >= ng) break;   /* (uniform in the warp) */
            const float o = pv[j] * inv * po[j];
            po[j] = o;
            const float amax = warp_max(fabsf(o));
            const int q = __float2int_rn(o * (amax > 0.f ? 127.f / amax : 0.f));
            xq_s[i] = (int8_t)q;
            const int qs = __reduce_add_sync(0xffffffffu, q);
            if (lane == 0) { const float dx = amax * (1.f / 127.f); xds_s[g] = make_float2(dx, dx * (float)qs); }
        }
        __syncthreads();
    }
    /* x of the lane's groups (lane + 32 uu) as 8 words (x_words) */
    uint32_t xv[4][8];
    float2 ds[4];
    if constexpr (XS) {   /* x's int8 form into shared memory (after the ring), then every warp reads it */
        for (int i = (int)threadIdx.x; i < 2 * ng; i += (int)blockDim.x) ((uint4 *)xq_s)[i] = __ldg((const uint4 *)xq + i);
        for (int i = (int)threadIdx.x; i < ng; i += (int)blockDim.x) xds_s[i] = __ldg(xds + i);
        __syncthreads();
    }
#pragma unroll
    for (int uu = 0; uu < 4; uu++) {
        const int g = 32 * uu + lane;
        if (XS || g >= ng) break;
        uint4 xa, xb;
        if constexpr (PRO == 1 || PRO == 2) {
            const uint4 *xp = (const uint4 *)(xq_s + (g << 5));
            xa = xp[0]; xb = xp[1]; ds[uu] = xds_s[g];
        } else {
            const uint4 *xp = (const uint4 *)(xq + ((size_t)g << 5));
            xa = __ldg(xp); xb = __ldg(xp + 1); ds[uu] = __ldg(xds + g);
        }
        x_words<BITS>(xa, xb, xv[uu]);
    }
    /* SC: x's norm scale from the parts the product before left (each warp sums them itself, in
     * one order: every lane, every warp and every block gets the same bits), after x's loads went out */
    float xs = 1.f;
    if constexpr (SC) {
        float t = 0.f;
#pragma unroll
        for (int j = 0; j < MR_PARTS / 32; j++) t += pt[j];
        xs = rsqrtf(warp_sum(t) / (float)(ng << 5) + nm.eps);
#pragma unroll
        for (int uu = 0; uu < 4; uu++)
            if (32 * uu + lane < ng) { ds[uu].x *= xs; ds[uu].y *= xs; }
    }
    /* (PRO 3: the sums of the block's rows, the gate's then the up's; PRO 4 its rows'; PRO 6 after x) */
    float *ob = XS ? (float *)(xds_s + ng) : (float *)xq_s;
    for (int t = 0; t < nitem; t++) {
        int kk;
        const int r0 = item_of(t, kk), nr = min(RS, rb1 - r0);
        fd_mbar_wait(bar + t % S, (uint32_t)(t / S) & 1u);
        const uint8_t *d = ring + (size_t)(t % S) * set.slot_b;
        const ST *sc = (const ST *)(d + RS * set.row_wb), *bc = (const ST *)(d + RS * (set.row_wb + set.row_sb));
        float acc[RS];
#pragma unroll
        for (int r = 0; r < RS; r++) acc[r] = 0.f;
        if constexpr (XS) {   /* the lane's groups lane, lane + 32, ... of the row, x from shared memory */
            for (int g = lane; g < ng; g += 32) {
                const uint4 *xp = (const uint4 *)(xq_s + (g << 5));
                const uint4 xa = xp[0], xb = xp[1];
                const float2 dg = xds_s[g];
                uint32_t xw[8];
                x_words<BITS>(xa, xb, xw);
                const int wg = (g << 5) >> gs_shift;
#pragma unroll
                for (int r = 0; r < RS; r++) {
                    if (r >= nr) break;
                    const int ia = mr_gdot<BITS>(d + (size_t)r * set.row_wb, g, xw);
                    const float s = ld_s(sc + r * ssw + wg), b = ld_s(bc + r * ssw + wg);
                    acc[r] = fmaf(s * dg.x, (float)ia, fmaf(b, dg.y, acc[r]));
                }
            }
        }
#pragma unroll
        for (int uu = 0; uu < 4; uu++) {
            const int g = 32 * uu + lane;
            if (XS || g >= ng) break;
            const int wg = (g << 5) >> gs_shift;
#pragma unroll
            for (int r = 0; r < RS; r++) {
                if (r >= nr) break;
                const int ia = mr_gdot<BITS>(d + (size_t)r * set.row_wb, g, xv[uu]);
                const float s = ld_s(sc + r * ssw + wg), b = ld_s(bc + r * ssw + wg);
                acc[r] = fmaf(s * ds[uu].x, (float)ia, fmaf(b, ds[uu].y, acc[r]));
            }
        }
        __syncwarp();   /* every lane has read the slot: it may be refilled */
        if (lane == 0 && t + S < nitem) issue(t + S);
#pragma unroll
        for (int r = 0; r < RS; r++) {
            const float a = warp_sum(acc[r]);
            if constexpr (PRO == 3) {
                const float *bk = kk ? set.bias[1] : set.bias[0];
                if (lane == 0 && r < nr) ob[kk * (rb1 - rb0) + r0 - rb0 + r] = a + (bk ? bk[r0 + r] : 0.f);
            } else if constexpr (EP) {
                if (lane == 0 && r < nr) ob[r0 - rb0 + r] = a + (bias ? bias[r0 + r] : 0.f);
            } else {
                if (lane == 0 && r < nr) y[r0 + r] = a + (bias ? bias[r0 + r] : 0.f);
            }
        }
    }
    if constexpr (PRO == 3) {   /* the act_mul of the block's rows, a group of 32 a warp, and its int8 form */
        __syncthreads();
        const int nb = rb1 - rb0;
        for (int gl = wid; gl < nb >> 5; gl += nwarp) {
            const int i = (gl << 5) + lane;
            const float g = ob[i], u = ob[nb + i], o = act_f(nm.act, g) * u;
            set.y[1][rb0 + i] = u;
            set.y[0][rb0 + i] = o;
            quant_group(o, nm.oq, nm.ods, (size_t)(rb0 + i));
        }
    }
    if constexpr (EP) {   /* the residual add of the block's rows, its sum of squares, and the int8 form of the next x */
        __syncthreads();
        const int nb = rb1 - rb0;
        float ss = 0.f;
        for (int gl = wid; gl < nb >> 5; gl += nwarp) {
            const int i = rb0 + (gl << 5) + lane;
            const bool first = gl == wid;
            const float v = ob[(gl << 5) + lane], h = (first ? pa0 : nm.a[i]) + v;
            y[i] = v;
            nm.sum[i] = h;
            ss = fmaf(h, h, ss);
            quant_group(h * (first ? pg0 : nm.g ? nm.g[i] + nm.add_one : 1.f), nm.oq, nm.ods, (size_t)i);
        }
        ss = warp_sum(ss);
        if (lane == 0) sh[wid] = ss;
        __syncthreads();
        if (threadIdx.x == 0) {
            float t = 0.f;
            for (int w = 0; w < nwarp; w++) t += sh[w];
            nm.part[blockIdx.x] = t;
        }
    }
    if constexpr (SC) {   /* the normed row, the norm's output, a slice a block (no block reads it) */
        if (nm.y) {
            for (int i = si0 + (int)threadIdx.x; i < si1; i += (int)blockDim.x)
                nm.y[i] = (i == si0 + (int)threadIdx.x ? sa0 : nm.a[i]) * xs * (i == si0 + (int)threadIdx.x ? sg0 : nm.g ? nm.g[i] + nm.add_one : 1.f);
        }
    }
    if constexpr (PRO == 1 || PRO == 2) {   /* the last block to have read a and b stores what the norm (act_mul) would */
        if (mr_end(nm, tok, sh)) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int g = wid + nwarp * j, i = (g << 5) + lane;
                if (g >= ng) break;
                if (PRO == 2) { nm.y[i] = pv[j]; } else { if (nm.b) nm.sum[i] = pv[j]; nm.y[i] = po[j]; }
            }
        }
    }
#else
    __trap();   /* launched only on sm_90 and later (mv_ring checks the device) */
#endif
}

/* The same for dense bf16 weights (k_mv_ring_bf): x (f32) staged in shared memory once a block,
 * after the wait, each 256 columns as the lanes' low halves then their high halves (a lane's two
 * float4 reads then fall on consecutive words, no bank conflicts); the weights bulk-copied into
 * per-warp rings as in k_mv_ring, an item being RS whole rows (one copy) when a row fits the slot
 * cap, else one segment of a row (rows longer than a slot are cut into nseg segments of seg
 * columns, a multiple of 256, the warp keeping the row's sums across them). Columns: a multiple of
 * 256. A lane takes the 8-column vectors lane, lane + 32, ... of an item's columns; two partial
 * sums a row (even and odd vectors), then the warp sum: not bit for bit k_mv_dense_sk's order
 * (f32 sums of the same products; the tests bound the difference). */
struct mrb_set {                 /* up to 4 dense bf16 weights of equal columns sharing x */
    const uint8_t *W[4];
    const float *bias[4];
    float *y[4];
    int rows[4], blk0[5], nw;
    int cols, seg, nseg;         /* columns; columns a segment (= cols unless RS == 1), segments a row */
    int slots, slot_b;           /* slots a warp, bytes a slot */
    int act;                     /* PAIR: the activation (an mx_act) */
};

/* PAIR (MLXCEL_CUDA_RING_PAIR): a gate/up pair (nw 2, equal rows) and the act_mul after it, one
 * launch: every block takes the same run of both weights' rows, a warp's items go unit by unit,
 * the gate's segments then the up's, so the warp holds the gate's sums when the up's are done and
 * writes y[1] = up, y[0] = act(gate) * up (act_mul in place over gate: what the two ops leave) */
template <int RS, bool PAIR>
__global__ void __launch_bounds__(512, 1)
k_mv_ring_bf(const mrb_set set, const float *__restrict__ x, const mr_norm nm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t mr_smem[];
    __shared__ float sh[33];
    bool waited = pdl_entry_weights_first();
    int rb0, rb1, k = 0;
    if constexpr (PAIR) {
        rb0 = (int)((int64_t)blockIdx.x * set.rows[0] / gridDim.x);
        rb1 = (int)((int64_t)(blockIdx.x + 1) * set.rows[0] / gridDim.x);
    } else {
        k = mr_block(set, &rb0, &rb1);
    }
    const int nwarp = (int)(blockDim.x >> 5), wid = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int nunit = (rb1 - rb0 + RS - 1) / RS, S = set.slots, nseg = set.nseg, cols = set.cols;
    constexpr int NK = PAIR ? 2 : 1;   /* weights a unit */
    const int per = NK * nseg;         /* items a unit */
    const int nitem = (nunit > wid ? (nunit - wid + nwarp - 1) / nwarp : 0) * per;
    float *xs = (float *)mr_smem;
    uint8_t *ring = mr_smem + (size_t)cols * 4 + (size_t)wid * S * set.slot_b;
    uint64_t *bar = (uint64_t *)(mr_smem + (size_t)cols * 4 + (size_t)nwarp * S * set.slot_b) + wid * S;
    const uint8_t *Wk = set.W[k];
    const uint64_t pol = mr_evict_first();
    /* (lane 0) item t of this warp into its slot: unit t / per; of it weight (t % per) / nseg
     * (PAIR), segment t % nseg */
    auto issue = [&](int t) {
        const int u = t / per, e = t - u * per, kk = PAIR ? e / nseg : k, j = PAIR ? e - kk * nseg : e;
        const int r0 = rb0 + (wid + nwarp * u) * RS, nr = min(RS, rb1 - r0);
        const int c0 = j * set.seg, sc = min(set.seg, cols - c0);
        const uint32_t bytes = (uint32_t)(nr * sc * 2);
        uint64_t *b = bar + t % S;
        fd_mbar_expect(b, bytes);
        fd_bulk(ring + (size_t)(t % S) * set.slot_b, (PAIR ? set.W[kk] : Wk) + ((size_t)r0 * cols + c0) * 2, bytes, b, pol);
    };
    mr_start(bar, S, nitem, lane, waited, issue);
    float4 nv[2], no[2];   /* (the norm: what this block stores at the end if it is the last) */
    unsigned tok = 0;
    if (nm.a) {   /* the norm (nm.a): float4 f = thread + blockDim j of the row, j < 2 */
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < 2; j++) {   /* (gamma loaded with a and b: one round trip) */
            const int f = (int)threadIdx.x + (int)blockDim.x * j;
            nv[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            no[j] = make_float4(1.f, 1.f, 1.f, 1.f);
            if (f < cols / 4) {
                nv[j] = ((const float4 *)nm.a)[f];
                if (nm.b) {
                    const float4 w = ((const float4 *)nm.b)[f];
                    nv[j].x += w.x; nv[j].y += w.y; nv[j].z += w.z; nv[j].w += w.w;
                }
                if (nm.g) {
                    no[j] = ((const float4 *)nm.g)[f];
                    no[j].x += nm.add_one; no[j].y += nm.add_one; no[j].z += nm.add_one; no[j].w += nm.add_one;
                }
            }
            ss = fmaf(nv[j].x, nv[j].x, ss); ss = fmaf(nv[j].y, nv[j].y, ss);
            ss = fmaf(nv[j].z, nv[j].z, ss); ss = fmaf(nv[j].w, nv[j].w, ss);
        }
        ss = block_sum(ss, sh);   /* (every thread's loads of a and b have returned) */
        tok = mr_arrive(nm);
        const float inv = rsqrtf(ss / (float)cols + nm.eps);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int f = (int)threadIdx.x + (int)blockDim.x * j, vv = f >> 1;
            if (f >= cols / 4) break;
            const float4 gm = no[j];
            const float4 o = make_float4(nv[j].x * inv * gm.x, nv[j].y * inv * gm.y, nv[j].z * inv * gm.z, nv[j].w * inv * gm.w);
            no[j] = o;
            *(float4 *)(xs + (vv >> 5) * 256 + (f & 1) * 128 + (vv & 31) * 4) = o;
        }
    } else {
        for (int f = (int)threadIdx.x; f < cols / 4; f += (int)blockDim.x) {
            const int v = f >> 1;
            *(float4 *)(xs + (v >> 5) * 256 + (f & 1) * 128 + (v & 31) * 4) = __ldg((const float4 *)x + f);
        }
    }
    __syncthreads();
    const float *bias = set.bias[k];
    float *y = set.y[k];
    float a0[RS], a1[RS], gs[RS];   /* (gs: PAIR, the gate's sums of the unit) */
#pragma unroll
    for (int r = 0; r < RS; r++) a0[r] = a1[r] = gs[r] = 0.f;
    for (int t = 0; t < nitem; t++) {
        const int u = t / per, e = t - u * per, kk = PAIR ? e / nseg : k, j = PAIR ? e - kk * nseg : e;
        const int r0 = rb0 + (wid + nwarp * u) * RS, nr = min(RS, rb1 - r0);
        const int c0 = j * set.seg, sc = min(set.seg, cols - c0), nv = sc >> 3, nc = sc >> 8;
        fd_mbar_wait(bar + t % S, (uint32_t)(t / S) & 1u);
        const uint4 *d = (const uint4 *)(ring + (size_t)(t % S) * set.slot_b) + lane;
        const float *xc = xs + c0 + lane * 4;
        /* the lane's vector of chunk i (256 columns) times x, into a */
        auto vec = [&](int i, float (&a)[RS]) {
            const float4 xa = *(const float4 *)(xc + 256 * i), xb = *(const float4 *)(xc + 256 * i + 128);
#pragma unroll
            for (int r = 0; r < RS; r++) {
                if (r >= nr) break;
                float f[8];
                unpack_vec<__nv_bfloat16>(d[r * nv + 32 * i], f);
                float s = a[r];
                s = fmaf(f[0], xa.x, s); s = fmaf(f[1], xa.y, s); s = fmaf(f[2], xa.z, s); s = fmaf(f[3], xa.w, s);
                s = fmaf(f[4], xb.x, s); s = fmaf(f[5], xb.y, s); s = fmaf(f[6], xb.z, s); s = fmaf(f[7], xb.w, s);
                a[r] = s;
            }
        };
        int i = 0;
        for (; i + 1 < nc; i += 2) { vec(i, a0); vec(i + 1, a1); }
        if (i < nc) vec(i, a0);
        __syncwarp();   /* every lane has read the slot: it may be refilled */
        if (lane == 0 && t + S < nitem) issue(t + S);
        if (j == nseg - 1) {
#pragma unroll
            for (int r = 0; r < RS; r++) {
                if constexpr (!PAIR) {
                    const float a = warp_sum(a0[r] + a1[r]);
                    if (lane == 0 && r < nr) y[r0 + r] = a + (bias ? bias[r0 + r] : 0.f);
                } else {
                    const float *bk = set.bias[kk];
                    const float a = warp_sum(a0[r] + a1[r]) + (bk && r < nr ? bk[r0 + r] : 0.f);
                    if (kk == 0) {
                        gs[r] = a;
                    } else if (lane == 0 && r < nr) {
                        set.y[1][r0 + r] = a;
                        set.y[0][r0 + r] = act_f(set.act, gs[r]) * a;
                    }
                }
                a0[r] = a1[r] = 0.f;
            }
        }
    }
    if (nm.a && mr_end(nm, tok, sh)) {   /* the last block to have read a and b stores what the norm would */
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int f = (int)threadIdx.x + (int)blockDim.x * j;
            if (f >= cols / 4) break;
            if (nm.b) ((float4 *)nm.sum)[f] = nv[j];
            ((float4 *)nm.y)[f] = no[j];
        }
    }
#else
    __trap();   /* launched only on sm_90 and later (mv_ring_bf checks the device) */
#endif
}
