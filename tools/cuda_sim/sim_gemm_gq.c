/* Desk simulation of k_gemm_gq<BN, ST> (the q4 tensor-core GEMM of mlxcel's backend_cuda.cu with
 * the weights dequantized in registers), with k_cvt_gq (x to bf16 in gq_perm order), gq_gemm's
 * launch choice (BN; the split of k: ns from the cost of waves over slots = blocks per SM x a
 * multiProcessorCount of 132, each split costing 5% more, at most ksteps / 4 splits; kchunk,
 * nsplit, the grid, the dynamic shared-memory size, the partial buffer's size), run with blocks
 * per SM (BN 64 / BN 128, what cudaOccupancyMaxActiveBlocksPerMultiprocessor gives) of 4/2, 3/1
 * and 2/1, and the split-k sum: with nsplit > 1 every block stores its partial sums (no bias) to
 * part[z] (the weights' outputs one after another, n x rows_k each) and returns; k_gq_sum, a
 * launch of its own (one thread an element), adds them in split order + bias into y_k.
 * Block as of GQ_WR = 32: 4 warps of 32 rows (a lane's rows g + 8 j, j < 4: two row tiles
 * sharing each ldmatrix'd x fragment; GQ_BM = 128) x BN / 64 warps of 64 tokens.
 * Every block (x, y, z), warp and lane runs, the phases between __syncthreads in order; ldmatrix.x4 follows the PTX ISA (lane i addresses
 * row i % 8 of matrix i / 8; lane l gets from matrix j the two b16 at row l / 4, columns
 * 2 (l % 4), +1, in register j); mma.sync.m16n8k16 is emulated from the PTX ISA's fragment
 * layouts (mma_emul.h); gq_deq's bit tricks are run bit for bit (the OR 0x43004300, the bf16
 * subtract of 128 and the bf16x2 fma rounded once to bf16), the f16-scale path in f32.
 * Checks:
 *  - cp.async: a copy marks its 16 destination bytes pending in the issuing thread's open group;
 *    they land only at a cp_async_wait<N> of that thread that completes the group (all but its N
 *    most recent committed groups). A shared read of pending bytes is an error, and so is a read
 *    by another thread in the phase (between two __syncthreads) where they landed; a copy into
 *    bytes that another thread reads in the same phase (no __syncthreads between) or that another
 *    copy still has pending is an error; reads of never-written shared memory; nothing pending at
 *    the end; zero-fill copies (src-size 0) for tokens >= n;
 *  - bounds and alignment of every global (16-byte cp.async sources, scale / bias reads, y and
 *    partial stores, k_gq_sum's reads) and shared (16-byte cp.async, 8-byte uint2, 16-byte
 *    ldmatrix rows) access, the k steps of the splits covering cols exactly once on 64-aligned
 *    steps, every y element (and with a split every partial, inside its weight's part) written
 *    exactly once, every partial read once by k_gq_sum and none unwritten (the partial buffer is
 *    poisoned with NaN before every launch of k_gemm_gq);
 *  - shared-memory wavefronts of the ldmatrix.x4, the uint2 weight loads and the cp.async stores
 *    (128 bytes a wavefront: the most distinct 4-byte words any one bank serves);
 *  - y against a double-precision reference from the bf16-rounded x and the bf16-rounded
 *    dequantized weights (s q + b rounded once), independent of the kernel's permutation.
 * Mutants (injected bugs) must be caught. Not a timing model. Transcribed from the kernel as of
 * 2026-11-29 18:25 UTC (GQ_WR 32, partial sums + k_gq_sum). Build: gcc -O2 -Wall -o /tmp/sim_gemm_gq tools/cuda_sim/sim_gemm_gq.c -lm */
#include "gq_emul.h"   /* (with mma_emul.h and the C headers) what sim_gemm_gq.c and sim_gemm_wg.c share */

#define GQ_WR 32   /* weight rows a warp (two row tiles of 16) */
#define GQ_BM (4 * GQ_WR)
#define NR (GQ_WR / 8)   /* a lane's rows: g + 8 j, j = 2 m + h (row tile m, fragment half h) */
#define GQ_ST 4
#define GQ_XS 72
#define SHM_ATTR (GQ_ST * (GQ_BM * 8 * 4 + GQ_NMAX * GQ_XS * 2))   /* the cudaFuncSetAttribute value */

enum { MUT_NONE, MUT_PERM, MUT_AORDER, MUT_LK, MUT_WAIT, MUT_NOSWAP, MUT_KCHUNK, MUT_EARLY_ISSUE, MUT_F16_NIB, MUT_NOPAD, MUT_LROW,
       MUT_PART_RB, MUT_N };
static const char *mut_name[MUT_N] = {"none", "gq_perm_swap_e_h", "a_regs_order", "lk_not_matrices_1_3", "cp_async_wait_ST-1",
                                      "scales_not_swapped", "kchunk_not_multiple_of_64", "issue_before_syncthreads",
                                      "f16_deq_nibble_p+1", "x_rows_not_padded(GQ_XS=64)",
                                      "ldmatrix_matrices_1_2_swapped", "partials_without_rb_offset"};
static int mutant = MUT_NONE;

/* ---- the "device" global arrays are gq_emul.h's; the occupancy the launcher is given ---- */
static int bps[2] = {4, 2};   /* cudaOccupancyMaxActiveBlocksPerMultiprocessor for BN 64, 128 */

/* ---- shared memory of one block, per 4-byte word shadow ---- */
#define SH_MAX (GQ_ST * (GQ_BM * 8 * 4 + GQ_NMAX * GQ_XS * 2))
static uint8_t sh[SH_MAX];
static struct { int8_t written; int16_t ptid, ltid, rtid; int lph, rph; } meta[SH_MAX / 4];
static int shm_bytes, phase, xs_base, gq_xs = GQ_XS;   /* gq_xs: GQ_XS, or 64 for a mutant */

static void sh_read(int tid, int off, int nb, void *dst, const char *what) {
    CHECK(off % nb == 0 && off >= 0 && off + nb <= shm_bytes, "%s: shared read misaligned / OOB (off %d, %d bytes)", what, off, nb);
    if (off < 0 || off + nb > shm_bytes) { memset(dst, 0, nb); return; }
    for (int i = off / 4; i < (off + nb) / 4; i++) {
        CHECK(meta[i].ptid < 0, "%s: thread %d reads shared word %d whose cp.async (thread %d) is not waited for", what, tid, i, meta[i].ptid);
        CHECK(meta[i].written, "%s: thread %d reads never-written shared word %d", what, tid, i);
        CHECK(!(meta[i].lph == phase && meta[i].ltid != tid),
              "%s: thread %d reads shared word %d landed / written by thread %d with no __syncthreads between", what, tid, i, meta[i].ltid);
        meta[i].rtid = (int16_t)((meta[i].rph == phase && meta[i].rtid != tid) ? -2 : tid);
        meta[i].rph = phase;
    }
    memcpy(dst, sh + off, nb);
}

/* ---- cp.async per thread ---- */
typedef struct { uint16_t s, b; float fs, fb; int valid; } sc_t;   /* gq_sc<ST>: bf16 bits, or f16 as f32 */
typedef struct {
    int committed, npend;
    pend_t pend[32];
    sc_t sc[NR], scn[NR];
    float acc[NR / 2][8][4];
    uint32_t wv[NR][2];
} thr_t;
static thr_t th[256];

static void cp_async16(int tid, int off, const void *src) {   /* src NULL: src-size 0 (16 zero bytes) */
    CHECK(off % 16 == 0 && off >= 0 && off + 16 <= shm_bytes, "cp.async shared destination misaligned / OOB (%d)", off);
    if (off < 0 || off + 16 > shm_bytes) return;
    for (int i = off / 4; i < off / 4 + 4; i++) {
        CHECK(meta[i].ptid < 0, "cp.async by thread %d into shared word %d with a copy of thread %d pending", tid, i, meta[i].ptid);
        CHECK(!(meta[i].rph == phase && meta[i].rtid != tid),
              "race: cp.async by thread %d into shared word %d read by thread %d in the same phase", tid, i, meta[i].rtid);
        CHECK(!(meta[i].lph == phase && meta[i].ltid != tid), "race: cp.async by thread %d into shared word %d written by %d in the same phase",
              tid, i, meta[i].ltid);
        meta[i].ptid = (int16_t)tid;
    }
    thr_t *T = &th[tid];
    pend_push(T->pend, &T->npend, 32, T->committed, off, src);
}
static void cp_async_commit(int tid) { th[tid].committed++; }
static void cp_land(int tid, const pend_t *p) {   /* a copy of thread tid lands */
    for (int i = p->off / 4; i < p->off / 4 + 4; i++) {
        CHECK(!(meta[i].rph == phase && meta[i].rtid != tid), "race: copy of thread %d lands in shared word %d read by %d in its phase",
              tid, i, meta[i].rtid);
        meta[i].ptid = -1; meta[i].written = 1; meta[i].lph = phase; meta[i].ltid = (int16_t)tid;
    }
    memcpy(sh + p->off, p->data, 16);
}
static void cp_async_wait(int tid, int N) { thr_t *T = &th[tid]; pend_wait(T->pend, &T->npend, T->committed, N, tid, cp_land); }

/* ---- bank wavefronts of one warp instruction (128 bytes a wavefront) ---- */
enum { BK_LDSM, BK_U2, BK_CPW, BK_CPX, BK_N };
static const char *bk_name[BK_N] = {"ldmatrix.x4", "uint2 W", "cp.async W", "cp.async x"};
static bank_t bk[BK_N];

/* ---- the kernel's device helpers, transcribed ---- */
static void sc_load(sc_t *sc, int k, size_t i) {
    CHECK(i < wt[k].nS, "scale / bias read OOB (%zu of %zu, weight %d)", i, wt[k].nS, k);
    if (i >= wt[k].nS) { sc->valid = 0; return; }
    sc->s = wt[k].S[i]; sc->b = wt[k].B[i];
    sc->fs = h2f(sc->s); sc->fb = h2f(sc->b);
    sc->valid = 1;
}
static uint32_t gq_deq(uint32_t w, int p, const sc_t *sc) {
    CHECK(sc->valid, "dequantization with scales never loaded");
    if (s_f16) return gq_deq_f16(w, p, mutant == MUT_F16_NIB ? 4 * p + 4 : 4 * p + 16, sc->fs, sc->fb);
    const uint16_t s2[2] = {sc->s, sc->s}, b2[2] = {sc->b, sc->b};   /* gq_sc<bf16>::load: __halves2bfloat162(v, v) */
    return gq_deq_bf16(w, p, s2, b2);
}
static void ldsm_x4(int w, const int *addr, uint32_t r[32][4]) {
    uint32_t row[32][4];
    for (int l = 0; l < 32; l++) {
        CHECK(addr[l] % 16 == 0, "ldmatrix row address not 16-byte aligned (%d)", addr[l]);
        sh_read(w * 32 + l, addr[l], 16, row[l], "ldmatrix");
    }
    bank_count(&bk[BK_LDSM], addr, 16, 32);
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) r[l][j] = row[j * 8 + (l >> 2)][l & 3];
}
/* ---- k_gemm_gq<BN, ST>, one block ---- */
static int kb_BN, kb_T, kb_k, kb_rows, kb_mb, kb_nb, kb_kbeg, kb_cols, kb_n, kb_wpr;
static void issue_warp(int w, int it) {   /* the kernel's lambda, for the 32 lanes of warp w */
    const int st = it % GQ_ST, k0 = kb_kbeg + it * GQ_BK, WSZ = GQ_BM * 8, XSZ = kb_BN * gq_xs;
    CHECK(k0 % GQ_BK == 0 && k0 + GQ_BK <= kb_cols, "k step at %d not a 64-aligned step inside cols %d", k0, kb_cols);
    int offs[32];
    for (int u0 = 0; u0 < GQ_BM * 2; u0 += kb_T) {   /* GQ_BM rows x 2 halves of 16 bytes, one instruction per pass */
        int any = 0;
        for (int l = 0; l < 32; l++) {
            const int tid = w * 32 + l, u = u0 + tid, r = u >> 1, h = u & 1;
            offs[l] = -1;
            if (u >= GQ_BM * 2) continue;
            any = 1;
            const size_t wi = (size_t)imin(kb_mb + r, kb_rows - 1) * kb_wpr + k0 / 8 + h * 4;
            const int di = st * WSZ + r * 8 + h * 4;
            CHECK(di >= 0 && di + 4 <= GQ_ST * WSZ, "wsm index OOB");
            CHECK(wi % 4 == 0 && wi + 4 <= wt[kb_k].nW, "W cp.async source misaligned / OOB (word %zu of %zu)", wi, wt[kb_k].nW);
            offs[l] = di * 4;
            if (wi + 4 <= wt[kb_k].nW) cp_async16(tid, di * 4, wt[kb_k].W + wi);
        }
        if (any) bank_count(&bk[BK_CPW], offs, 16, 32);
    }
    assert(kb_BN * 8 % kb_T == 0);
    for (int u0 = 0; u0 < kb_BN * 8; u0 += kb_T) {   /* one instruction per pass */
        for (int l = 0; l < 32; l++) {
            const int tid = w * 32 + l, u = u0 + tid, t = u >> 3, c8 = u & 7, tk = kb_nb + t;
            const size_t xe = (size_t)imin(tk, kb_n - 1) * kb_cols + k0 + c8 * 8;
            const int di = st * XSZ + t * gq_xs + c8 * 8;
            CHECK(di >= 0 && di + 8 <= GQ_ST * XSZ, "xsm index OOB");
            CHECK(xe % 8 == 0 && xe + 8 <= nX, "x cp.async source misaligned / OOB (elem %zu of %zu)", xe, nX);
            offs[l] = xs_base + di * 2;
            if (xe + 8 <= nX) cp_async16(tid, xs_base + di * 2, tk < kb_n ? (const void *)(XB + xe) : NULL);
        }
        bank_count(&bk[BK_CPX], offs, 16, 32);
    }
}

/* gm_store<8>: acc of thread tid to y (+ bias) or, with a split, to part[bz] + pk (no bias) */
static void gm_store(int tid, const float (*acc)[4], int k, int rows, int n, int m0, int n0, int bz, int has_part) {
    const int lane = tid & 31, g = lane >> 2, c = 2 * (lane & 3);
    if (has_part) {   /* this weight's slice of part[bz] (the mutant's: from part[bz] + 0, its range alike) */
        const size_t ntot = rb[NW], lo = (size_t)bz * n * ntot + (mutant == MUT_PART_RB ? 0 : (size_t)n * rb[k]), hi = lo + (size_t)n * rows;
        assert(hi <= nPart);
        gm_store_nt(8, acc, NULL, PART, lo, lo, hi, "partial", rows, n, m0, n0, g, c);
    } else gm_store_nt(8, acc, wt[k].bias, wt[k].y, 0, 0, wt[k].ny, "y", rows, n, m0, n0, g, c);
}

/* the block: its main loop, then gm_store to y (+ bias) or, with a split, to its partials */
static void k_gemm_gq(int BN, int bx, int by, int bz, int cols, int n, int gsh, int kchunk, int has_part) {
    const int T = 128 * (BN / 64), WSZ = GQ_BM * 8, XSZ = BN * gq_xs, NWARP = T / 32;
    xs_base = GQ_ST * WSZ * 4;
    for (int i = 0; i < shm_bytes / 4; i++) { meta[i].written = 0; meta[i].ptid = -1; meta[i].lph = meta[i].rph = -1; meta[i].ltid = meta[i].rtid = -1; }
    memset(sh, 0xff, sizeof sh);
    phase = 0;
    int k = 0;
    for (int i = 1; i < 4; i++) if (i < NW && bx >= blk0[i]) k = i;
    const int rows = wt[k].rows, mb = (bx - blk0[k]) * GQ_BM, nb = by * BN;
    const int wpr = cols / 8, ngw = cols >> gsh;
    const int kbeg = bz * kchunk, kend = imin(cols, kbeg + kchunk), nk = (kend - kbeg) / GQ_BK;
    kb_BN = BN; kb_T = T; kb_k = k; kb_rows = rows; kb_mb = mb; kb_nb = nb; kb_kbeg = kbeg; kb_cols = cols; kb_n = n; kb_wpr = wpr;
    CHECK(nk >= 1, "block z %d has no k step (kbeg %d kend %d)", bz, kbeg, kend);
    static size_t so[256][NR];
    int xoff[256];
    for (int tid = 0; tid < T; tid++) {
        memset(&th[tid], 0, sizeof th[tid]);
        const int lane = tid & 31, wm = (tid >> 5) & 3, wn = tid >> 7, g = lane >> 2;
        for (int j = 0; j < NR; j++) so[tid][j] = (size_t)imin(mb + wm * GQ_WR + g + 8 * j, rows - 1) * ngw;
        const int lrow = wn * 64 + ((mutant == MUT_LROW ? (lane >> 3) & 1 : lane >> 4) << 3) + (lane & 7);
        const int lk = mutant == MUT_LK || mutant == MUT_LROW ? ((lane >> 4) & 1) * 8 : ((lane >> 3) & 1) * 8;
        xoff[tid] = lrow * gq_xs + lk;
    }
    /* phase 0: the prologue, the first step's scales, the first wait */
    for (int w = 0; w < NWARP; w++)
        for (int st = 0; st < GQ_ST - 1; st++) {
            if (st < nk) issue_warp(w, st);
            for (int l = 0; l < 32; l++) cp_async_commit(w * 32 + l);
        }
    for (int tid = 0; tid < T; tid++) {
        const int cq = tid & 3, gi = (kbeg + 16 * cq) >> gsh;
        for (int j = 0; j < NR; j++) sc_load(&th[tid].sc[j], k, so[tid][j] + gi);
    }
    for (int it = 0; it < nk; it++) {
        for (int tid = 0; tid < T; tid++) cp_async_wait(tid, mutant == MUT_WAIT ? GQ_ST - 1 : GQ_ST - 2);
        if (mutant == MUT_EARLY_ISSUE)
            for (int w = 0; w < NWARP; w++) if (it + GQ_ST - 1 < nk) issue_warp(w, it + GQ_ST - 1);
        phase++;   /* __syncthreads */
        const int st = it % GQ_ST;
        for (int w = 0; w < NWARP; w++) {
            if (mutant != MUT_EARLY_ISSUE && it + GQ_ST - 1 < nk) issue_warp(w, it + GQ_ST - 1);
            for (int l = 0; l < 32; l++) {
                const int tid = w * 32 + l, cq = l & 3;
                cp_async_commit(tid);
                if (it + 1 < nk) {
                    const int k0n = kbeg + (it + 1) * GQ_BK, gi = (k0n + 16 * cq) >> gsh;
                    CHECK(((k0n + 16 * cq + 15) >> gsh) == gi, "a lane's 16 codes cross a group");
                    for (int j = 0; j < NR; j++) sc_load(&th[tid].scn[j], k, so[tid][j] + gi);
                }
            }
            /* wv[j]: NR uint2 loads (rows g + 8 j of the warp's GQ_WR) */
            for (int j = 0; j < NR; j++) {
                int offs[32];
                for (int l = 0; l < 32; l++) {
                    const int tid = w * 32 + l, wm = (tid >> 5) & 3, g = l >> 2, cq = l & 3;
                    const int wi = st * WSZ + (wm * GQ_WR + g + 8 * j) * 8 + 2 * cq;
                    CHECK(wi >= 0 && wi + 2 <= GQ_ST * WSZ, "wsm read index OOB");
                    offs[l] = wi * 4;
                    sh_read(tid, wi * 4, 8, th[tid].wv[j], "uint2 W");
                }
                bank_count(&bk[BK_U2], offs, 8, 32);
            }
            for (int s = 0; s < 4; s++) {
                static uint32_t a[NR / 2][32][4];
                for (int m = 0; m < NR / 2; m++)
                    for (int l = 0; l < 32; l++) {
                        const thr_t *Tt = &th[w * 32 + l];
                        const uint32_t wl = Tt->wv[2 * m][s >> 1], wh = Tt->wv[2 * m + 1][s >> 1];
                        const int p = 2 * (s & 1);
                        a[m][l][0] = gq_deq(wl, p, &Tt->sc[2 * m]); a[m][l][1] = gq_deq(wh, p, &Tt->sc[2 * m + 1]);
                        a[m][l][2] = gq_deq(wl, p + 1, &Tt->sc[2 * m]); a[m][l][3] = gq_deq(wh, p + 1, &Tt->sc[2 * m + 1]);
                        if (mutant == MUT_AORDER) { const uint32_t x = a[m][l][1]; a[m][l][1] = a[m][l][2]; a[m][l][2] = x; }
                    }
                for (int t2 = 0; t2 < 4; t2++) {
                    int addr[32];
                    for (int l = 0; l < 32; l++) {
                        const int e = st * XSZ + xoff[w * 32 + l] + t2 * 16 * gq_xs + 16 * s;
                        CHECK(e >= 0 && e + 8 <= GQ_ST * XSZ, "xsm ldmatrix index OOB");
                        addr[l] = xs_base + e * 2;
                    }
                    uint32_t r[32][4], b[32][2];
                    ldsm_x4(w, addr, r);
                    for (int m = 0; m < NR / 2; m++)
                        for (int h = 0; h < 2; h++) {
                            float d[32][4];
                            for (int l = 0; l < 32; l++) {
                                b[l][0] = r[l][2 * h]; b[l][1] = r[l][2 * h + 1];
                                memcpy(d[l], th[w * 32 + l].acc[m][2 * t2 + h], 16);
                            }
                            mma_emul(d, (const uint32_t (*)[4])a[m], b);
                            for (int l = 0; l < 32; l++) memcpy(th[w * 32 + l].acc[m][2 * t2 + h], d[l], 16);
                        }
                }
            }
            if (it + 1 < nk && mutant != MUT_NOSWAP)
                for (int l = 0; l < 32; l++) memcpy(th[w * 32 + l].sc, th[w * 32 + l].scn, sizeof th[0].sc);
        }
    }
    for (int tid = 0; tid < T; tid++) {
        cp_async_wait(tid, 0);
        CHECK(th[tid].npend == 0, "copies left pending at the end");
        const int wm = (tid >> 5) & 3, wn = tid >> 7;
        for (int m = 0; m < NR / 2; m++)
            gm_store(tid, (const float (*)[4])th[tid].acc[m], k, rows, n, mb + wm * GQ_WR + 16 * m, nb + wn * 64, bz, has_part);
    }
}

/* ---- one case: gq_gemm's choice, the launches, the reference ---- */
static double last_rel;
static char summary[64][128];   /* the table printed at the end */
static int nsummary;

static int run_case(const case_t *cs) {
    const int nw = cs->nw, cols = cs->cols, n = cs->n, gs = cs->gs;
    const int gsh = gq_setup(cs, GQ_BM);   /* gq_gemm's conditions, blk0, rb */
    /* gq_gemm's split of k */
    const int bn = n <= 64 ? 64 : 128;
    const int64_t tiles = (int64_t)blk0[nw] * nblk(n, bn);
    const int64_t slots = (int64_t)bps[bn == 128] * SM_COUNT;
    int kchunk;
    const int ns = gq_split(tiles, cols, slots, &kchunk);
    if (mutant == MUT_KCHUNK) kchunk = (int)((cols + ns - 1) / ns);   /* in columns, not whole k steps */
    const int nsplit = (int)((cols + kchunk - 1) / kchunk);
    CHECK(nsplit >= 1 && nsplit <= ns && nsplit <= 16, "nsplit %d for ns %d", nsplit, ns);
    gq_xs = mutant == MUT_NOPAD ? GQ_BK : GQ_XS;
    const size_t shm = (size_t)GQ_ST * (GQ_BM * 8 * 4 + (size_t)bn * gq_xs * 2);
    const int threads = bn == 64 ? 128 : 256;
    CHECK(threads == 128 * (bn / 64), "launch threads %d != the kernel's T", threads);
    CHECK(shm <= SHM_ATTR && SHM_ATTR <= SHM_HW_MAX, "dynamic shared memory %zu over the raised limit %d", shm, SHM_ATTR);
    CHECK(nblk(n, bn) <= 65535 && nsplit <= 65535, "grid too large");
    shm_bytes = (int)shm;
    assert(shm_bytes <= SH_MAX);
    check_cover(cols, nsplit, kchunk);

    gen_data(cs);
    const int gx = blk0[nw], gy = (int)nblk(n, bn);
    alloc_part(nsplit, n);
    memset(bk, 0, sizeof bk);

    /* blocks to run */
    uint8_t *bx_on = calloc(gx, 1);
    if (!cs->sample) memset(bx_on, 1, gx);
    else {
        for (int k = 0; k < nw; k++) { bx_on[blk0[k]] = bx_on[blk0[k + 1] - 1] = 1; bx_on[(blk0[k] + blk0[k + 1]) / 2] = 1; }
        for (int i = 0; i < cs->sample; i++) bx_on[(int)((int64_t)i * 7919 % gx)] = 1;
    }
    mark_rows(cs, bx_on, gx, GQ_BM);

    /* the launches: k_cvt_gq, k_gemm_gq (its partials poisoned first), with a split k_gq_sum */
    const int cf0 = check_fails;
    launch_x(n, cols, mutant == MUT_PERM);
    for (int bz = 0; bz < nsplit; bz++)
        for (int by = 0; by < gy; by++)
            for (int bx = 0; bx < gx; bx++)
                if (bx_on[bx]) k_gemm_gq(bn, bx, by, bz, cols, n, gsh, kchunk, nsplit > 1);
    const double rel = launch_sum_check(cs, nsplit);
    last_rel = rel;
    const int ok = check_fails == cf0;
    if (!quiet) {
        char rws[64];
        rows_str(cs, rws, sizeof rws);
        int nblocks = 0;
        for (int bx = 0; bx < gx; bx++) nblocks += bx_on[bx];
        printf("%-9s rows %-9s cols %5d n %3d gs %3d %s bias %x | bps %d/%d BN %3d ns %2d kchunk %4d nsplit %2d grid %d(%d run)x%dx%d"
               " shm %zu part %zu | rel err %.2e | wavefronts/instr (ideal): ldsm %.2f (%.2f) uint2 %.2f (%.2f)"
               " cpW %.2f cpX %.2f | %s\n",
               cs->name, rws, cols, n, gs, cs->f16 ? "f16 " : "bf16", cs->bias_mask, bps[0], bps[1], bn, ns, kchunk, nsplit, gx, nblocks,
               gy, nsplit, shm, nPart * 4, rel, (double)bk[BK_LDSM].wav / bk[BK_LDSM].ins,
               (double)bk[BK_LDSM].ideal / bk[BK_LDSM].ins, (double)bk[BK_U2].wav / bk[BK_U2].ins, (double)bk[BK_U2].ideal / bk[BK_U2].ins,
               (double)bk[BK_CPW].wav / bk[BK_CPW].ins, (double)bk[BK_CPX].wav / bk[BK_CPX].ins, ok ? "OK" : "FAILED");
        fflush(stdout);
    }
    for (int kd = 0; kd < BK_N; kd++)
        CHECK(bk[kd].wav == bk[kd].ideal, "%s: bank conflicts (%ld wavefronts, ideal %ld)", bk_name[kd], bk[kd].wav, bk[kd].ideal);
    if (!quiet && nsummary < 64)
        snprintf(summary[nsummary++], sizeof summary[0], "%-9s %d/%d %4d %3d %7d %7d %9.2e %s", cs->name, bps[0], bps[1], bn, ns, kchunk,
                 nsplit, rel, check_fails == cf0 ? "OK" : "FAILED");
    free(bx_on);
    free_data(nw);
    return check_fails == cf0;
}

int main(int argc, char **argv) {
    srand(1);
    check_gq_perm(0);   /* gq_perm: a bijection matching the A fragments (mma step s) */
    const int sample_llama = argc > 1 ? atoi(argv[1]) : 0;   /* 0: every block (about 20 s); N: the edge blocks + N */
    const case_t cases[] = {
        {"c1", 1, {300}, 512, 17, 64, 0, 1, 0},
        {"c2", 1, {130}, 1024, 100, 32, 1, 0, 0},
        {"c3", 1, {256}, 2048, 128, 128, 0, 1, 0},
        {"c4", 1, {64}, 4096, 40, 64, 0, 0, 0},
        {"c5", 1, {2100}, 2048, 24, 64, 0, 1, 0},
        {"set3", 3, {200, 64, 130}, 1024, 40, 64, 0, 2, 0},
        {"set2", 2, {4096, 1024}, 4096, 128, 64, 0, 0, 0},
        {"gs16", 1, {70}, 256, 64, 16, 0, 0, 0},
        {"llama-dn", 1, {4096}, 14336, 128, 64, 0, 0, sample_llama},
        /* extra: f16 with bias and a split, an uneven split (19 steps: 5, 5, 5, 4), one row, a set of 4 */
        {"x-f16", 1, {200}, 2048, 90, 32, 1, 1, 0},
        {"x-uneven", 1, {130}, 1216, 40, 64, 0, 1, 0},
        {"x-row1", 1, {1}, 320, 17, 32, 1, 1, 0},
        {"x-set4", 4, {64, 100, 17, 256}, 768, 65, 64, 1, 0xa, 0},
        {"x-last1", 1, {130}, 1344, 40, 64, 0, 1, 0},    /* 21 steps: splits 5, 5, 5, 5, 1 (fewer steps than stages) */
        {"x-gs128", 1, {100}, 1152, 33, 128, 1, 1, 0},   /* 18 steps: splits of 5 starting mid-group */
        {"x-ns16", 1, {100}, 4352, 20, 64, 0, 1, 0},     /* 68 steps: ns 16 -> kchunk 5 steps, nsplit 14 (13 x 5 + 3) */
        {"x-slots", 1, {8192}, 4096, 48, 64, 0, 1, 6},   /* 64 tiles of BN 64: ns 8 / 6 / 4 with 4 / 3 / 2 blocks per SM (sampled) */
    };
    int nbad = 0;
    /* blocks per SM for BN 64 / 128 (the occupancy API's at most 4/2, then fewer): the split
     * choice changes with them. The later passes sample llama-dn's blocks (the edge blocks + 6) unless told */
    static const int bps_set[3][2] = {{4, 2}, {3, 1}, {2, 1}};
    for (int b = 0; b < 3; b++) {
        bps[0] = bps_set[b][0]; bps[1] = bps_set[b][1];
        printf("-- blocks per SM %d (BN 64) / %d (BN 128): slots %d / %d (shared memory alone, 228 KiB an SM and 1 KiB reserved a block,"
               " allows %d / %d)\n", bps[0], bps[1], bps[0] * SM_COUNT, bps[1] * SM_COUNT,
               233472 / (GQ_ST * (GQ_BM * 8 * 4 + 64 * GQ_XS * 2) + 4 + 1024), 233472 / (GQ_ST * (GQ_BM * 8 * 4 + 128 * GQ_XS * 2) + 4 + 1024));
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            case_t c = cases[i];
            if (b && !strcmp(c.name, "llama-dn") && !c.sample) c.sample = 6;
            nbad += !run_case(&c);
        }
    }
    bps[0] = 4; bps[1] = 2;
    printf("\ncase      bps    BN  ns  kchunk  nsplit  rel err\n");
    for (int i = 0; i < nsummary; i++) printf("%s\n", summary[i]);
    printf("\n");

    /* mutants: each must be caught (a check failure, a wrong result) */
    const case_t mcases[] = {
        {"m1", 1, {130}, 1216, 40, 64, 0, 1, 0},   /* BN 64, 4 splits of 5, 5, 5, 4 steps (kchunk 304 when not rounded) */
        {"m2", 1, {70}, 512, 100, 32, 1, 0, 0},    /* BN 128 (8 warps), f16 */
        {"m3", 2, {70, 130}, 512, 40, 32, 0, 3, 0},   /* a set of 2 with a split */
    };
    int missed = 0;
    for (int m = 1; m < MUT_N; m++) {
        mutant = m;
        const mut_run_t mr = mutant_begin();
        double worst = 0;
        for (size_t i = 0; i < sizeof mcases / sizeof mcases[0]; i++) { run_case(&mcases[i]); if (last_rel > worst) worst = last_rel; }
        mutant = MUT_NONE;
        if (!mutant_end(mut_name[m], mr, worst)) missed++;
    }
    return sim_verdict(nbad, missed);
}
