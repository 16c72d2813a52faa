/* backend/cuda/mv_mma.cuh: q4/q8 products for a few rows of x (decode of 2..MV_I8_MAX sequences)
 * on int8 tensor cores (k_mv_mma). Included by backend_cuda.cu after the k_mv_i8 helpers; the host
 * side is mv_mma() there (MLXCEL_CUDA_MV_MMA).
 *
 * Why: k_mv_i8 multiplies each group of 32 codes with each row of x by DP4A, eight instructions a
 * (row, group, row of x); at 8-16 rows of x that arithmetic, not the weights' bytes, sets its time.
 * Here one mma.m16n8k32 (u8 codes x s8 activations) does 16 weight rows x 8 rows of x of one group,
 * and what is left per (row, group, row of x) is the float scaling k_mv_i8 does too:
 * y += s dx sum(q xq) + b (dx sum xq), the same terms from the same int8 form of x (k_quant_x's).
 *
 * Work: a block is MM_WARPS warps on row groups of 16 RT rows, each group split over kwn warps by k
 * (chunk c of a row goes to warp c % kwn). Form 1 (RT 1, kwn 4): two groups of 16 rows a block.
 * Form 2 (RT 2: a warp's two row tiles share each load of x; kwn 1-8, from the weights' shape; one
 * block a multiprocessor). A chunk is 128 bytes of
 * codes a row (q4: 256 columns, 8 groups of 32; q8: 128 columns, 4 groups) with its rows' scales
 * and biases; each warp streams its chunks through nst stages of its own in shared memory with
 * cp.async (issued before the wait on the previous kernel: weights are never written by kernels)
 * and reads the codes into mma fragments with ldmatrix (a row a 144-byte line, so the 8 rows of a
 * matrix fall on distinct banks). Up to 16 rows of x (MM_XS) the stage also holds the chunk's x,
 * its int8 codes and group factors, copied after the wait through L1 (the warps of a block on the
 * same chunk share those lines): read from global memory in the loop instead, x's loads held the
 * warps more than half of their cycles (thirty-seventh session); above 16 rows x is read so.
 * At the end the kwn warps of a group add their sums in a fixed order through shared memory, so the
 * results do not depend on timing.
 *
 * Fragments (PTX ISA, mma.m16n8k32 with 8-bit operands; lane = 4 g + t): a0/a1 hold rows g / g + 8 at
 * k 4t..4t+3, a2/a3 the same rows at k 16+4t..16+4t+3; b0/b1 column (row of x) g at those k; c0..c3
 * rows g, g, g + 8, g + 8 and columns 2t, 2t + 1, 2t, 2t + 1. The k order inside a group is free as
 * long as codes and x agree: q8 uses it as it is (ldmatrix of a row's two 16-byte halves gives word
 * t of each, k 4t.. and 16 + 4t..); q4 takes word t of the group (codes 8t..8t+7, nibble i is code
 * 8t + i) and gives its low nibbles (codes 8t, 8t+2, 8t+4, 8t+6) the place of k 4t..4t+3 and its
 * high ones that of 16+4t.., so x's bytes 8t..8t+7 are split the same way (byte_perm). */

#define MM_WARPS 8
#define MM_ST 4                          /* stages a warp, the most (MLXCEL_CUDA_MV_MMA_STAGES: nst, 2-4) */
#define MM_CB 128                        /* code bytes of a row in a chunk */
#define MM_RS (MM_CB + 16)               /* a row's line in shared memory */
#define MM_STAGE(RT) (16 * (RT) * MM_RS + 32 * (RT) * 16)   /* 16 RT rows of codes, 16 RT lines of scales, of biases */
/* x's part of a stage (MM_XS: up to 16 rows of x, NT <= 2): the chunk's int8 codes of the 8 NT rows of
 * x, a row a line of CK + MM_XPAD bytes (the lanes' 8- or 4-byte loads then fall on distinct banks),
 * then their group factors, GPC float2 a row */
#define MM_XS(NT) ((NT) <= 2)
#define MM_CK(BITS) (MM_CB * 8 / (BITS))
#define MM_XPAD(BITS) ((BITS) == 4 ? 32 : 16)
#define MM_XST(BITS, NT) (MM_XS(NT) ? 8 * (NT) * (MM_CK(BITS) + MM_XPAD(BITS)) + 8 * (NT) * (MM_CK(BITS) / 32) * 8 : 0)
#define MM_STAGE_ALL(BITS, NT, RT) (MM_STAGE(RT) + MM_XST(BITS, NT))
#define MM_NMAX 32                       /* rows of x: 4 tiles of 8 */

__device__ __forceinline__ void pf_l1(const void *p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }
__device__ __forceinline__ void ldsm_x4_b(uint32_t *r, unsigned a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
/* c = MM_MAGIC + a b (u8 x s8 -> s32), 16 x 8 x 32: each c[i] is then the bits of the float
 * 1.5 * 2^23 + sum exactly (|sum| <= 32 * 255 * 127 < 2^22), so mm_f turns it into the float sum
 * with one full-rate add instead of a quarter-rate I2F (the same value, bit for bit) */
#define MM_MAGIC 0x4B400000
__device__ __forceinline__ void mma_u8s8(int *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(MM_MAGIC));
}
__device__ __forceinline__ float mm_f(int c) { return __int_as_float(c) - 12582912.f; }
/* cp.async of N (4, 8 or 16) bytes, through L1's allocation-free path where it can (16) unless CA */
template <int N, bool CA = false>
__device__ __forceinline__ void cp_async_n(unsigned sa, const void *g) {
    if constexpr (N == 16 && !CA) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g) : "memory");
    else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(sa), "l"(g), "n"(N) : "memory");
}

/* RT: row tiles of 16 a warp (its A fragments share each load of x); kwn: warps of a row group,
 * splitting k (1, 2, 4 or 8; a block is MM_WARPS / kwn groups of 16 RT rows); sb: bytes of a row's
 * scales in a chunk, 2 CK / group size (4, 8 or 16) */
template <int BITS, typename ST, int NT, int RT>
__global__ void __launch_bounds__(MM_WARPS * 32)
k_mv_mma(const mv_set set, const int8_t *__restrict__ xq, const float2 *__restrict__ xds, int cols, int gs_shift, int sb,
         int n, int kwn, int pfx, int nst) {
    bool waited = pdl_entry_weights_first();
    constexpr int CK = MM_CB * 8 / BITS, GPC = CK / 32;   /* columns, groups of 32 a chunk */
    constexpr int RW = 16 * RT, STW = MM_STAGE(RT), STG = MM_STAGE_ALL(BITS, NT, RT);   /* rows a warp; a stage's weights, all */
    constexpr bool XS = MM_XS(NT);
    constexpr int XRS = CK + MM_XPAD(BITS), PPR = CK / 16, DPR = GPC / 2;   /* x's lines; 16-byte pieces a row of codes, of factors */
    extern __shared__ __align__(16) unsigned char mm_smem[];
    int k = 0;
#pragma unroll
    for (int i = 1; i < 4; i++) if (i < set.nw && (int)blockIdx.x >= set.blk0[i]) k = i;
    const int rows = set.rows[k], lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int kw = wid % kwn, r0 = (((int)blockIdx.x - set.blk0[k]) * (MM_WARPS / kwn) + wid / kwn) * RW;
    const int g = lane >> 2, t = lane & 3, ngx = cols >> 5;
    const int nch = cols / CK, nc = r0 < rows && kw < nch ? (nch - kw + kwn - 1) / kwn : 0;
    const size_t rowb = (size_t)cols * BITS / 8, srow = (size_t)(cols >> gs_shift) * 2;
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(mm_smem) + wid * (nst * STG);
    const uint8_t *W = (const uint8_t *)set.W[k];
    const uint8_t *S = (const uint8_t *)set.S[k], *B = (const uint8_t *)set.B[k];
    /* this lane's copies of a chunk's codes: 16-byte pieces p = lane + 32 i (row p / 8, piece p % 8) */
    const uint8_t *wsrc[4 * RT];
    unsigned wdst[4 * RT];
#pragma unroll
    for (int i = 0; i < 4 * RT; i++) {
        const int p = lane + 32 * i, r = p >> 3;
        wsrc[i] = W + (size_t)min(r0 + r, rows - 1) * rowb + (p & 7) * 16;
        wdst[i] = r * MM_RS + (p & 7) * 16;
    }
    /* the scales' and biases' lines: 4-byte pieces p = lane + 32 i (i < RW sb / 64; line p / (sb / 4):
     * lines 0 .. RW - 1 the rows' scales, RW .. 2 RW - 1 their biases) */
    const int nps = sb >> 2;
    const uint8_t *ssrc[4 * RT];
    unsigned sdst[4 * RT];
#pragma unroll
    for (int i = 0; i < 4 * RT; i++) {
        const int p = lane + 32 * i, line = p / nps, off = (p % nps) * 4;
        ssrc[i] = (line < RW ? S : B) + (size_t)min(r0 + line % RW, rows - 1) * srow + off;
        sdst[i] = RW * MM_RS + line * 16 + off;
    }
    auto issue_w = [&](int i) {   /* the weights of the warp's i-th chunk into its stage i % nst */
        if (i < nc) {
            const int c = kw + i * kwn;
            const unsigned st = sbase + (i % nst) * STG;
#pragma unroll
            for (int j = 0; j < 4 * RT; j++) cp_async_n<16>(st + wdst[j], wsrc[j] + (size_t)c * MM_CB);
#pragma unroll
            for (int j = 0; j < 4 * RT; j++) if (j < nps * RT) cp_async_n<4>(st + sdst[j], ssrc[j] + (size_t)c * sb);
        }
    };
    /* XS: x's codes and group factors of the chunk into the stage too (rows clamped to n - 1, whose
     * sums are not stored), through L1 (the warps of a block on the same chunk then share them) */
    auto issue_x = [&](int i) {
        if (XS && i < nc) {
            const int c = kw + i * kwn;
            const unsigned xst = sbase + (i % nst) * STG + STW;
#pragma unroll
            for (int j = 0; j < 8 * NT * PPR / 32; j++) {
                const int p = lane + 32 * j, r = p / PPR, pc = p % PPR;
                cp_async_n<16, true>(xst + r * XRS + pc * 16, xq + (size_t)min(r, n - 1) * cols + (size_t)c * CK + pc * 16);
            }
            for (int p = lane; p < 8 * NT * DPR; p += 32) {
                const int r = p / DPR, pc = p % DPR;
                cp_async_n<16, true>(xst + 8 * NT * XRS + r * (GPC * 8) + pc * 16,
                                     (const uint8_t *)(xds + (size_t)min(r, n - 1) * ngx + (size_t)c * GPC) + pc * 16);
            }
        }
    };
    auto issue = [&](int i) { issue_w(i); issue_x(i); cp_async_commit(); };
    /* the first nst - 1 chunks' weights before the wait; x (the previous kernel's output) after it.
     * XS: group 0 then holds those weights and chunk 0's x, group s chunk s's x */
    for (int i = 0; i < nst - 1; i++) { issue_w(i); if (!XS) cp_async_commit(); }
    if (!waited) { pdl_wait(); waited = true; }
    if (XS) for (int i = 0; i < nst - 1; i++) { issue_x(i); cp_async_commit(); }
    float acc[RT][NT][4];
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int u = 0; u < NT; u++) acc[rt][u][0] = acc[rt][u][1] = acc[rt][u][2] = acc[rt][u][3] = 0.f;
    /* x rows of this lane: b operand g of each tile (clamped: the sums of rows >= n are not stored),
     * and the group factors of rows 2t, 2t + 1 */
    const int8_t *xb[NT];
    const float2 *xd0[NT], *xd1[NT];
#pragma unroll
    for (int u = 0; u < NT; u++) {
        xb[u] = xq + (size_t)min(8 * u + g, n - 1) * cols;   /* (!XS) */
        xd0[u] = xds + (size_t)min(8 * u + 2 * t, n - 1) * ngx;
        xd1[u] = xds + (size_t)min(8 * u + 2 * t + 1, n - 1) * ngx;
    }
    /* this lane's ldmatrix row: matrix lane / 8 (rows + 8 for matrices 1, 3), row lane % 8 */
    const unsigned lrow = ((lane & 7) + 8 * ((lane >> 3) & 1)) * MM_RS;
    const int lhalf = lane >> 4;   /* matrices 2, 3: the next group (q4) or the row's second half (q8) */
    /* pfx: the next chunk's x into L1 while this one computes (lanes 0-15: a row of x's 128-byte lines
     * of the chunk, two for q4; 16-23: its group factors, 64 bytes for q4, 32 for q8) */
    const int pl_tok = lane & 7, pl_kind = lane >> 3;
    for (int i = 0; i < nc; i++) {
        if (nst >= 4) cp_async_wait<2>(); else if (nst == 3) cp_async_wait<1>(); else cp_async_wait<0>();
        __syncwarp();   /* chunk i landed for every lane; chunk i - 1's stage is read by all */
        issue(i + nst - 1);
        const int c = kw + i * kwn;
        if (!XS && pfx && i + 1 < nc && pl_kind < 3 && (BITS == 4 || pl_kind != 1)) {
            const int cn = c + kwn;
#pragma unroll
            for (int u = 0; u < NT; u++) {
                const int tk = min(8 * u + pl_tok, n - 1);
                if (pl_kind < 2) pf_l1(xq + (size_t)tk * cols + (size_t)cn * CK + pl_kind * 128);
                else pf_l1(xds + (size_t)tk * ngx + (size_t)cn * GPC);
            }
        }
        const unsigned st = sbase + (i % nst) * STG;
        const unsigned char *sm = mm_smem + (st - (unsigned)__cvta_generic_to_shared(mm_smem));
        const ST *sc = (const ST *)(sm + RW * MM_RS), *bi = (const ST *)(sm + RW * MM_RS + RW * 16);
        const unsigned char *xsm = sm + STW, *xdm = xsm + 8 * NT * XRS;   /* XS: the chunk's x, its factors */
        uint32_t q4n[RT][2];
#pragma unroll
        for (int j = 0; j < GPC; j++) {
            const int gx = c * GPC + j;   /* x's group */
            uint32_t a[RT][4];
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                const unsigned tb = st + rt * 16 * MM_RS + lrow;
                if constexpr (BITS == 4) {
                    if (j % 2 == 0) {
                        uint32_t r[4];
                        ldsm_x4_b(r, tb + (j + lhalf) * 16);
                        /* r: word t of rows g, g + 8 in groups j, j + 1 */
                        a[rt][0] = r[0] & 0x0f0f0f0fu; a[rt][1] = r[1] & 0x0f0f0f0fu;
                        a[rt][2] = (r[0] >> 4) & 0x0f0f0f0fu; a[rt][3] = (r[1] >> 4) & 0x0f0f0f0fu;
                        q4n[rt][0] = r[2]; q4n[rt][1] = r[3];   /* (the next group's, for j + 1) */
                    } else {
                        a[rt][0] = q4n[rt][0] & 0x0f0f0f0fu; a[rt][1] = q4n[rt][1] & 0x0f0f0f0fu;
                        a[rt][2] = (q4n[rt][0] >> 4) & 0x0f0f0f0fu; a[rt][3] = (q4n[rt][1] >> 4) & 0x0f0f0f0fu;
                    }
                } else {
                    ldsm_x4_b(a[rt], tb + j * 32 + lhalf * 16);
                }
            }
            const int sg = (j * 32) >> gs_shift;   /* the weights' group in the chunk */
            float s0[RT], s1[RT], c0[RT], c1[RT];
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                const int ra = rt * 16 + g;
                s0[rt] = ld_s(sc + ra * 8 + sg); s1[rt] = ld_s(sc + (ra + 8) * 8 + sg);
                c0[rt] = ld_s(bi + ra * 8 + sg); c1[rt] = ld_s(bi + (ra + 8) * 8 + sg);
            }
#pragma unroll
            for (int u = 0; u < NT; u++) {
                uint32_t b0, b1;
                float2 d0, d1;
                if constexpr (XS) {
                    const unsigned char *xr = xsm + (8 * u + g) * XRS + j * 32;
                    if constexpr (BITS == 4) {
                        const uint2 v = *(const uint2 *)(xr + 8 * t);
                        b0 = __byte_perm(v.x, v.y, 0x6420); b1 = __byte_perm(v.x, v.y, 0x7531);
                    } else {
                        b0 = *(const uint32_t *)(xr + 4 * t);
                        b1 = *(const uint32_t *)(xr + 16 + 4 * t);
                    }
                    d0 = *(const float2 *)(xdm + (8 * u + 2 * t) * (GPC * 8) + j * 8);
                    d1 = *(const float2 *)(xdm + (8 * u + 2 * t + 1) * (GPC * 8) + j * 8);
                } else {
                    if constexpr (BITS == 4) {
                        const uint2 v = __ldg((const uint2 *)(xb[u] + (size_t)gx * 32 + 8 * t));
                        b0 = __byte_perm(v.x, v.y, 0x6420); b1 = __byte_perm(v.x, v.y, 0x7531);
                    } else {
                        b0 = __ldg((const uint32_t *)(xb[u] + (size_t)gx * 32 + 4 * t));
                        b1 = __ldg((const uint32_t *)(xb[u] + (size_t)gx * 32 + 16 + 4 * t));
                    }
                    d0 = __ldg(xd0[u] + gx); d1 = __ldg(xd1[u] + gx);
                }
#pragma unroll
                for (int rt = 0; rt < RT; rt++) {
                    int q[4];
                    mma_u8s8(q, a[rt], b0, b1);
                    float *ac = acc[rt][u];
                    ac[0] = fmaf(s0[rt] * d0.x, mm_f(q[0]), fmaf(c0[rt], d0.y, ac[0]));
                    ac[1] = fmaf(s0[rt] * d1.x, mm_f(q[1]), fmaf(c0[rt], d1.y, ac[1]));
                    ac[2] = fmaf(s1[rt] * d0.x, mm_f(q[2]), fmaf(c1[rt], d0.y, ac[2]));
                    ac[3] = fmaf(s1[rt] * d1.x, mm_f(q[3]), fmaf(c1[rt], d1.y, ac[3]));
                }
            }
        }
    }
    cp_async_wait<0>();
    if (!waited) pdl_wait();   /* (no chunks) before any write */
    __syncthreads();   /* every warp done with its stages: they hold the partial sums now */
    constexpr int NV = RT * NT * 4;   /* a lane's sums */
    float *red = (float *)mm_smem;   /* [warp][NV][lane] */
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int u = 0; u < NT; u++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[(wid * NV + (rt * NT + u) * 4 + e) * 32 + lane] = acc[rt][u][e];
    __syncthreads();
    if (kw != 0 || r0 >= rows) return;
    const float *bias = set.bias[k];
    float *y = set.y[k];
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int u = 0; u < NT; u++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = 0.f;
                for (int w = 0; w < kwn; w++) v += red[((wid + w) * NV + (rt * NT + u) * 4 + e) * 32 + lane];
                const int r = r0 + rt * 16 + g + 8 * (e >> 1), tk = 8 * u + 2 * t + (e & 1);
                if (r < rows && tk < n) y[(size_t)tk * rows + r] = v + (bias ? bias[r] : 0.f);
            }
}
