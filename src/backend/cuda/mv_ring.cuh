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
 * longer than 4096 columns (x from L1 for each row) were slower than k_mv_i8, so they stay there. */

#define MR_MAXSLOTS 16

struct mr_set {                  /* up to 4 weights of one format sharing x, as mv_set */
    const uint8_t *W[4], *S[4], *B[4];
    const float *bias[4];
    float *y[4];
    int rows[4], blk0[5], nw;
    int row_wb, row_sb;          /* bytes of a row: codes, scales (= biases) */
    int ng;                      /* groups of 32 columns a row (<= 128) */
    int slots, slot_b;           /* slots a warp, bytes a slot (RS rows) */
};

template <int BITS, typename ST, int RS>
__global__ void __launch_bounds__(512, 1)
k_mv_ring(const mr_set set, const int8_t *__restrict__ xq, const float2 *__restrict__ xds, int gs_shift) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t mr_smem[];
    bool waited = pdl_entry_weights_first();
    int k = 0;
#pragma unroll
    for (int i = 1; i < 4; i++) if (i < set.nw && (int)blockIdx.x >= set.blk0[i]) k = i;
    const int nb = set.blk0[k + 1] - set.blk0[k], lb = (int)blockIdx.x - set.blk0[k], rows = set.rows[k];
    const int rb0 = (int)((int64_t)lb * rows / nb), rb1 = (int)((int64_t)(lb + 1) * rows / nb);
    const int nwarp = (int)(blockDim.x >> 5), wid = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int nunit = (rb1 - rb0 + RS - 1) / RS, S = set.slots;
    const int nitem = nunit > wid ? (nunit - wid + nwarp - 1) / nwarp : 0;
    uint8_t *ring = mr_smem + (size_t)wid * S * set.slot_b;
    uint64_t *bar = (uint64_t *)(mr_smem + (size_t)nwarp * S * set.slot_b) + wid * S;
    const uint8_t *Wk = set.W[k], *Sk = set.S[k], *Bk = set.B[k];
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    /* (lane 0) item t of this warp into its slot */
    auto issue = [&](int t) {
        const int r0 = rb0 + (wid + nwarp * t) * RS, nr = min(RS, rb1 - r0);
        uint8_t *d = ring + (size_t)(t % S) * set.slot_b;
        uint64_t *b = bar + t % S;
        const uint32_t wb = (uint32_t)(nr * set.row_wb), sb = (uint32_t)(nr * set.row_sb);
        fd_mbar_expect(b, wb + 2 * sb);
        fd_bulk(d, Wk + (size_t)r0 * set.row_wb, wb, b, pol);
        fd_bulk(d + RS * set.row_wb, Sk + (size_t)r0 * set.row_sb, sb, b, pol);
        fd_bulk(d + RS * (set.row_wb + set.row_sb), Bk + (size_t)r0 * set.row_sb, sb, b, pol);
    };
    if (lane == 0) {
        for (int s = 0; s < S; s++) fd_mbar_init(bar + s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int t = 0; t < S && t < nitem; t++) issue(t);
    }
    __syncwarp();
    if (!waited) pdl_wait();   /* x below is the previous kernel's output */
    const float *bias = set.bias[k];
    float *y = set.y[k];
    const int ng = set.ng, ssw = set.row_sb / 2;
    constexpr int V = BITS / 4;   /* 16-byte vectors a group of 32 codes */
    /* x of the lane's groups (lane + 32 uu) as 8 words, q4 in nibble order: the even columns of
     * each 8 in one word, the odd ones in the next (the codes' low and high nibbles multiply them
     * without byte permutes; the integer dot products are the same) */
    uint32_t xv[4][8];
    float2 ds[4];
#pragma unroll
    for (int uu = 0; uu < 4; uu++) {
        const int g = 32 * uu + lane;
        if (g >= ng) break;
        const uint4 *xp = (const uint4 *)(xq + ((size_t)g << 5));
        const uint4 xa = __ldg(xp), xb = __ldg(xp + 1);
        const uint32_t v[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
        for (int h = 0; h < 4; h++) {
            xv[uu][2 * h] = BITS == 4 ? __byte_perm(v[2 * h], v[2 * h + 1], 0x6420) : v[2 * h];
            xv[uu][2 * h + 1] = BITS == 4 ? __byte_perm(v[2 * h], v[2 * h + 1], 0x7531) : v[2 * h + 1];
        }
        ds[uu] = __ldg(xds + g);
    }
    for (int t = 0; t < nitem; t++) {
        const int r0 = rb0 + (wid + nwarp * t) * RS, nr = min(RS, rb1 - r0);
        fd_mbar_wait(bar + t % S, (uint32_t)(t / S) & 1u);
        const uint8_t *d = ring + (size_t)(t % S) * set.slot_b;
        const ST *sc = (const ST *)(d + RS * set.row_wb), *bc = (const ST *)(d + RS * (set.row_wb + set.row_sb));
        float acc[RS];
#pragma unroll
        for (int r = 0; r < RS; r++) acc[r] = 0.f;
#pragma unroll
        for (int uu = 0; uu < 4; uu++) {
            const int g = 32 * uu + lane;
            if (g >= ng) break;
            const int wg = (g << 5) >> gs_shift;
#pragma unroll
            for (int r = 0; r < RS; r++) {
                if (r >= nr) break;
                const uint4 *wp = (const uint4 *)(d + (size_t)r * set.row_wb) + (size_t)g * V;
                int ia = 0;
                if (BITS == 4) {
                    const uint4 q = wp[0];
                    const uint32_t wd[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
                    for (int h = 0; h < 4; h++) {
                        ia = dp4a_us(wd[h] & 0x0f0f0f0fu, xv[uu][2 * h], ia);
                        ia = dp4a_us((wd[h] >> 4) & 0x0f0f0f0fu, xv[uu][2 * h + 1], ia);
                    }
                } else {
                    const uint4 qa = wp[0], qb = wp[V - 1];
                    const uint32_t wb[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                    for (int j = 0; j < 8; j++) ia = dp4a_us(wb[j], xv[uu][j], ia);
                }
                const float s = ld_s(sc + r * ssw + wg), b = ld_s(bc + r * ssw + wg);
                acc[r] = fmaf(s * ds[uu].x, (float)ia, fmaf(b, ds[uu].y, acc[r]));
            }
        }
        __syncwarp();   /* every lane has read the slot: it may be refilled */
        if (lane == 0 && t + S < nitem) issue(t + S);
#pragma unroll
        for (int r = 0; r < RS; r++) {
            const float a = warp_sum(acc[r]);
            if (lane == 0 && r < nr) y[r0 + r] = a + (bias ? bias[r0 + r] : 0.f);
        }
    }
#else
    __trap();   /* launched only on sm_90 and later (mv_ring checks the device) */
#endif
}
