/* tools/cuda_sim/sim_gemm_wg.c: desk simulation of k_gemm_wg<BN, NWG, ST> (the q4 GEMM of mlxcel's
 * backend_cuda.cu on Hopper's warpgroup MMA: packed weights dequantized in registers as wgmma's A
 * operand, the x tile read by the tensor cores from shared memory through a matrix descriptor),
 * with k_cvt_gq (x to bf16 in gq_perm order), up_pairs (the (scale, bias) pairs, group-major
 * [ngw][rows]), gq_gemm's launch choice for the wgmma form (NWG = 4 warpgroups for >= 4096
 * columns else 2, BN = 64 for n <= 64 else 128, the split of k from the cost of waves over slots =
 * blocks per SM x 132 multiprocessors, kchunk, nsplit, the grid, WG_SMEM) run with blocks per SM
 * of 1, of 2 and of 2 / 2 / 1 / 1 (<64, 2> / <128, 2> / <64, 4> / <128, 4>), and k_gq_sum adding
 * the split-k partial sums. All 8 instantiations run (checked). It is not a timing model and not
 * part of the test suite.
 *
 * Every block (x, y, z), warpgroup, warp and lane runs (4 large cases run a sample: the first,
 * middle and last row blocks and a few more); the phases between __syncthreads in order, the
 * warpgroups of a phase one after another (their order rotating with the iteration). A wgmma
 * m64nBNk16 is executed as 4 warps x BN / 8 mma.sync m16n8k16 of mma_emul.h.
 * The wgmma facts used are those tools/cuda_probe/wgmma_probe.cu verified on the H200:
 *  - A (m64 x k16) from registers: warp w of the warpgroup holds rows 16 w .. 16 w + 15 in
 *    mma.sync m16n8k16's A layout (a0 {g, 2c..2c+1}, a1 {g + 8, 2c..}, a2 {g, 2c + 8..},
 *    a3 {g + 8, 2c + 8..}; g = lane / 4, c = lane % 4; low half the lower k);
 *  - D: for 8-column tile j, d[4j .. 4j + 3] = (g, 8j + 2c), (g, +1), (g + 8, 8j + 2c), (g + 8, +1)
 *    of the warp's 16 rows;
 *  - B (k16 x N) from shared memory, no swizzle, K-major: element (k, n) at start + (k / 8) LBO +
 *    (n / 8) SBO + (n % 8) 16 + (k % 8) 2, the descriptor holding start >> 4 (bits 0-13),
 *    LBO >> 4 (16-29), SBO >> 4 (32-45); every other bit must be 0 (checked).
 * Asynchrony:
 *  - wgmma.mma_async is recorded at issue (which A register set, the descriptor) and executed
 *    at its retirement by wgmma.wait_group (the latest moment it may read): wait_group N retires,
 *    in order, all but the N most recent committed groups of the warpgroup. Between issue and
 *    retirement the A register set it reads must not be written (by any thread of the
 *    warpgroup) and no byte of its B region may be written (a cp.async issued or landing there by
 *    any thread); a region read by a wgmma of another warpgroup that retired in the same phase
 *    counts as being read (no barrier orders them). The accumulators may not be read (gm_store)
 *    while any wgmma of the warpgroup is pending, and registers (A or accumulators) written by
 *    ordinary instructions need a wgmma.fence before the next wgmma.
 *  - At issue every B byte must have landed (its cp.async waited) and have been made visible to
 *    the async proxy: the thread whose copy wrote it executed fence.proxy.async after the
 *    cp.async.wait that landed it and before a __syncthreads that precedes the wgmma.
 *  - cp.async: a copy marks its 16 bytes pending in its thread's open group; they land only at
 *    that thread's cp.async.wait_group N covering the group (all but its N most recent groups).
 *    Reading pending bytes (ld.shared or wgmma) is an error, so is a copy into bytes another
 *    copy still has pending, into bytes read (ld.shared) or landed by another thread in the same
 *    phase, or into bytes a pending wgmma reads; shared memory starts poisoned (0xff bytes, a bf16
 *    NaN) and a read of never-written bytes is an error; nothing may be pending at the end.
 *  - the x tile's tokens >= n must be zero where a wgmma reads them (the zero fill of cp.async
 *    with src-size 0).
 * Also checked: bounds and alignment of every global access (weights, pairs, x, y, the partial
 * buffer, k_gq_sum's reads), the splits covering cols once on 64-aligned steps, every y element
 * (and with a split every partial, inside its weight's slice of part, poisoned with NaN first)
 * written exactly once, every partial read once by k_gq_sum; shared-memory wavefronts of the
 * cp.async stores (x and weights) and of the uint2 weight loads, and 32-byte global sectors of the
 * x / weight copies and the pair loads (a warp instruction's, against the fewest its bytes need),
 * are counted and reported (only x stores over twice the ideal wavefronts fail); y against a
 * double-precision reference of the bf16-rounded x and the dequantized weights (s q + b rounded
 * once to bf16).
 * The rotated k loop (gq_set.rot = c->gq_rot, MLXCEL_CUDA_GEMM_ROT, default 1): block x starts at
 * step r0it = x mod nk of its split (nk: that split's steps; the last split may have fewer) and
 * wraps once, kstep(it) = kbeg + ((it + r0it) wrapped mod nk) 64; kstep(it) is the k of iteration
 * it's x and weight copies (issue), kstep(0) that of the first (scale, bias) pairs, kstep(it + 1)
 * that of the pairs prefetched in iteration it. Every case runs with rot 1 (under each set of
 * blocks per SM) and with rot 0 (once). Checked besides the result: each block's iterations copy
 * the steps of its split [kbeg, kend), each once (weights and x alike: nk x BN x 8 pieces of x); an
 * iteration's x and weight stages come from the same step; the pairs a lane dequantizes with are
 * those of the group of its 16 codes of that step. The rotation's coverage is counted and must
 * include: blocks with r0it > 0 (so the wrap), with x >= nk (so the mod matters), a launch whose
 * splits have different nk (a ragged last split) with r0it > 0 in the short one, nk < WG_D (the
 * prologue wrapping), and groups of 128 / 256 spanning several steps with a first pair of another
 * group than kbeg's.
 * Mutants (injected bugs) must each be caught; `SIM: all OK` only when every real case passes and
 * every mutant fails. Transcribed from the kernel as of 2026-11-29 (commit 1f18cd2; the rotation
 * from cbf8f53, which also removed the experimental thread-block-cluster form
 * k_gemm_wg<128, 4, ST, CL> the sim modelled before). Not modelled: the PAIR form (gate/up with the
 * activation in the epilogue), which the GPU op tests cover.
 *   gcc -O2 -Wall -o /tmp/sim_gemm_wg tools/cuda_sim/sim_gemm_wg.c -lm && /tmp/sim_gemm_wg */
#include "gq_emul.h"   /* (with mma_emul.h and the C headers) what sim_gemm_gq.c and sim_gemm_wg.c share */

#define WG_ST(nwg) ((nwg) == 4 ? 7 : 5)
#define WG_XB(bn) ((bn) * GQ_BK * 2)   /* bytes of an x stage */
#define WG_WB(nwg) ((nwg) * 64 * 32)   /* bytes of a weight stage */
#define WG_SMEM(bn, nwg) ((size_t)WG_ST(nwg) * (WG_XB(bn) + WG_WB(nwg)))
#define SH_MAX ((int)WG_SMEM(128, 4))
#define TMAX 512

enum { MUT_NONE, MUT_REFILL, MUT_WAIT2, MUT_LBO_SBO, MUT_XMAP, MUT_NOFENCE, MUT_FENCE_EARLY, MUT_PAIRS_RM, MUT_CQ_GROUP,
       MUT_NOZFILL, MUT_ONESET, MUT_EARLY_ISSUE, MUT_NOWAIT0, MUT_CPWAIT, MUT_DESC_STEP, MUT_AORDER, MUT_NOCLAMP,
       MUT_NOSWAP, MUT_PART_RB, MUT_NOWGFENCE, MUT_PAIR_HALVES, MUT_GQPERM, MUT_NOBARRIER, MUT_WROW_NOCLAMP, MUT_STORE_C,
       /* the rotated k loop (rot 1) */
       MUT_ROT_PAIRS_UNROT, MUT_ROT_PAIR0_KBEG, MUT_ROT_PAIRS_CUR, MUT_ROT_PAIRS_NOWRAP, MUT_ROT_X_UNROT, MUT_ROT_W_UNROT,
       MUT_ROT_WRAP_COLS, MUT_ROT_WRAP_KCHUNK, MUT_ROT_NOWRAP, MUT_ROT_NOMOD, MUT_N };
static const char *mut_name[MUT_N] = {
    "none", "refill_distance_WG_ST-1", "wg_wait<2>_before_A_write", "LBO_SBO_swapped", "x_copy_token_k_swapped",
    "no_fence.proxy.async", "fence.proxy.async_before_cp.async.wait", "pairs_read_as_[row][group]", "group_index_without_cq",
    "no_zero_fill_beyond_n", "one_A_register_set", "refill_issued_before_syncthreads", "no_final_wg_wait<0>",
    "cp.async.wait_group_WG_D", "desc_step_s*8", "a1_a2_swapped", "pair_rows_not_clamped", "next_pairs_not_loaded",
    "partials_without_rb_offset", "no_wgmma.fence", "pair_scale_bias_halves_swapped", "gq_perm_swap_e_h", "no_syncthreads",
    "weight_rows_not_clamped", "gm_store_column_cq",
    "rot:pairs_from_unrotated_k", "rot:first_pairs_from_kbeg", "rot:next_pairs_from_kstep(it)",
    "rot:next_pairs_from_kstep(it)+64_unwrapped", "rot:x_copied_from_unrotated_k", "rot:weights_copied_from_unrotated_k",
    "rot:wrap_with_the_steps_of_the_whole_k_range", "rot:wrap_with_kchunk/64_steps_(not_the_ragged_split's_nk)",
    "rot:no_wrap", "rot:r0it_blockIdx.x_without_mod_nk"};
static int mutant = MUT_NONE;

static uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {   /* __byte_perm (default mode) */
    const uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 255) << (8 * i);
    return r;
}

/* ---- the "device" global arrays are gq_emul.h's; the occupancy the launcher is given ---- */
static int wg_bps[2][2];     /* blocks an SM holds, [nwg == 4][bn == 128] */

/* ---- shared memory of the block being simulated, a shadow per 4-byte word ---- */
static uint8_t sh[SH_MAX];
typedef struct {
    int8_t written;
    int16_t ptid, ltid, rtid;   /* pending copy's thread, the thread that landed it, the last reader */
    int lph, rph, fph;          /* phase landed, phase read, phase of the writer's fence.proxy.async (-1: none since landing) */
    int16_t wpend[4];           /* wgmmas of each warpgroup pending that read the word */
    int wret[4];                /* phase in which a wgmma of that warpgroup reading it last retired */
} meta_t;
static meta_t meta[SH_MAX / 4];
static int shm_bytes, phase;

/* ---- per thread and per warpgroup state ---- */
typedef struct { uint16_t s[2], b[2]; float fs, fb; int valid, kq; } sc_t;   /* gq_sc<ST>: bf16 halves, or f16 as f32;
                                                                               * kq (the sim's): the k whose group it holds */
typedef struct {
    int committed, npend;
    pend_t pend[64];
    int nland, land[128];   /* words landed by this thread's copies, not yet fenced */
    sc_t s0, s1;
    uint32_t p0, p1;
    int pk;                 /* the k whose group p0 / p1 hold (the sim's) */
    int r0, r1;
    uint32_t a[2][4];
    int a_valid[2];
    float d[64];
    uint32_t wl[2], wh[2];
} thr_t;
static thr_t th[TMAX];
typedef struct { int set, group; uint64_t desc; } wop_t;
typedef struct { wop_t q[64]; int nq, committed, dirty, apend[2]; } wgs_t;
static wgs_t wgs[4];
/* ---- the block's parameters; the k step each iteration's weight / x copies took (-1: none yet) ---- */
static int kb_BN, kb_NWG, kb_T, kb_NST, kb_k, kb_rows, kb_mb, kb_nb, kb_kbeg, kb_cols, kb_n, kb_wpr;
static int kb_nk, kb_nkw, kb_r0it;   /* the block's steps; those the rotation wraps at (nk; mutants: other); r0it */
#define ITMAX 256
static int it_wk0[ITMAX], it_xk0[ITMAX];
static long kb_xpieces;              /* 16-byte x pieces the block cp.asyncs */

static void meta_reset(void) {
    for (int i = 0; i < shm_bytes / 4; i++) {
        meta_t *m = &meta[i];
        memset(m, 0, sizeof *m);
        m->ptid = m->ltid = m->rtid = -1;
        m->lph = m->rph = m->fph = -1;
        for (int w = 0; w < 4; w++) m->wret[w] = -1;
    }
    memset(sh, 0xff, SH_MAX);
}

static void sh_read(int tid, int off, int nb, void *dst, const char *what) {
    CHECK(off % nb == 0 && off >= 0 && off + nb <= shm_bytes, "%s: shared read misaligned / OOB (off %d, %d bytes)", what, off, nb);
    if (off < 0 || off + nb > shm_bytes) { memset(dst, 0, nb); return; }
    for (int i = off / 4; i < (off + nb) / 4; i++) {
        CHECK(meta[i].ptid < 0, "%s: thread %d reads shared word %d whose cp.async (thread %d) is not waited for", what, tid, i, meta[i].ptid);
        CHECK(meta[i].written, "%s: thread %d reads never-written shared word %d", what, tid, i);
        CHECK(!(meta[i].lph == phase && meta[i].ltid != tid),
              "%s: thread %d reads shared word %d landed by thread %d with no __syncthreads between", what, tid, i, meta[i].ltid);
        meta[i].rtid = (int16_t)((meta[i].rph == phase && meta[i].rtid != tid) ? -2 : tid);
        meta[i].rph = phase;
    }
    memcpy(dst, sh + off, nb);
}

/* cp.async of thread tid (warpgroup tid / 128) of 16 bytes; src NULL: src-size 0 (16 zero bytes) */
static void cp_async16(int tid, int off, const void *src) {
    const int wg = tid >> 7;
    CHECK(off % 16 == 0 && off >= 0 && off + 16 <= shm_bytes, "cp.async shared destination misaligned / OOB (%d)", off);
    if (off < 0 || off + 16 > shm_bytes) return;
    for (int i = off / 4; i < off / 4 + 4; i++) {
        meta_t *m = &meta[i];
        CHECK(m->ptid < 0, "cp.async by thread %d into shared word %d with a copy of thread %d pending", tid, i, m->ptid);
        CHECK(!(m->rph == phase && m->rtid != tid), "race: cp.async by thread %d into shared word %d read by thread %d in the same phase",
              tid, i, m->rtid);
        CHECK(!(m->lph == phase && m->ltid != tid), "race: cp.async by thread %d into shared word %d landed by %d in the same phase",
              tid, i, m->ltid);
        for (int w = 0; w < 4; w++) {
            CHECK(m->wpend[w] == 0, "cp.async by thread %d (warpgroup %d) into shared word %d that a pending wgmma of warpgroup %d reads",
                  tid, wg, i, w);
            CHECK(!(w != wg && m->wret[w] == phase),
                  "race: cp.async by thread %d (warpgroup %d) into shared word %d read by a wgmma of warpgroup %d in the same phase", tid, wg, i, w);
        }
        m->ptid = (int16_t)tid;
    }
    thr_t *T = &th[tid];
    pend_push(T->pend, &T->npend, 64, T->committed, off, src);
}
static void cp_async_commit(int tid) { th[tid].committed++; }
static void cp_land(int tid, const pend_t *p) {   /* a copy of thread tid lands: not yet fenced for the async proxy */
    thr_t *T = &th[tid];
    for (int i = p->off / 4; i < p->off / 4 + 4; i++) {
        meta_t *m = &meta[i];
        CHECK(!(m->rph == phase && m->rtid != tid), "race: copy of thread %d lands in shared word %d read by %d in its phase", tid, i, m->rtid);
        m->ptid = -1; m->written = 1; m->lph = phase; m->ltid = (int16_t)tid; m->fph = -1;
        if (T->nland < 128) T->land[T->nland++] = i;
    }
    memcpy(sh + p->off, p->data, 16);
}
static void cp_async_wait(int tid, int N) { thr_t *T = &th[tid]; pend_wait(T->pend, &T->npend, T->committed, N, tid, cp_land); }
static void fence_proxy_async(int tid) {   /* fence.proxy.async.shared::cta: this thread's landed copies, to the async proxy */
    thr_t *T = &th[tid];
    for (int j = 0; j < T->nland; j++) meta[T->land[j]].fph = phase;
    T->nland = 0;
}

/* ---- bank wavefronts of one warp instruction (128 bytes a wavefront) ---- */
enum { BK_CPX, BK_CPW, BK_U2, BK_N };
static const char *bk_name[BK_N] = {"cp.async x", "cp.async W", "uint2 W"};
static bank_t bk[BK_N];

/* ---- 32-byte global sectors of one warp instruction (the arrays 32-byte aligned, as cudaMalloc's) ---- */
enum { SC_X, SC_W, SC_PAIRS, SC_N };
static struct { long ins, sec, ideal; } sc_st[SC_N];
static void sector_count(int kind, const int64_t *byteoff, int nb, int nl) {
    int64_t sec[64], by[64 * 16];
    int ns = 0, nby = 0;
    for (int l = 0; l < nl; l++) {
        if (byteoff[l] < 0) continue;
        for (int64_t b = byteoff[l]; b < byteoff[l] + nb; b++) {
            int seen = 0;
            for (int j = 0; j < ns; j++) seen |= sec[j] == b / 32;
            if (!seen) sec[ns++] = b / 32;
            if (b % 4 == 0) {   /* distinct 4-byte words (all accesses here are whole words) */
                int sw = 0;
                for (int j = 0; j < nby; j++) sw |= by[j] == b;
                if (!sw) by[nby++] = b;
            }
        }
    }
    sc_st[kind].ins++; sc_st[kind].sec += ns; sc_st[kind].ideal += (nby * 4 + 31) / 32;
}

/* ---- the kernel's device helpers, transcribed ---- */
/* up_pairs: t[gi * rows + r] = s[r * ngw + gi] | b[r * ngw + gi] << 16 */
static void up_pairs(wt_t *W, int ngw) {
    for (int gi = 0; gi < ngw; gi++)
        for (int r = 0; r < W->rows; r++)
            W->SB[(size_t)gi * W->rows + r] = W->S[(size_t)r * ngw + gi] | (uint32_t)W->B[(size_t)r * ngw + gi] << 16;
}
static uint32_t sb_read(int k, size_t i) {   /* a global read of set.SB[k][i] */
    CHECK(i < wt[k].nS, "pairs read OOB (%zu of %zu, weight %d)", i, wt[k].nS, k);
    return i < wt[k].nS ? wt[k].SB[i] : 0;
}
static void load_pair(sc_t *sc, uint32_t v) {   /* gq_sc<ST>::load_pair */
    if (s_f16) {   /* __half2 from v: .x (low) the scale, .y the bias, as float2 */
        sc->fs = h2f((uint16_t)(v & 0xffff)); sc->fb = h2f((uint16_t)(v >> 16));
        if (mutant == MUT_PAIR_HALVES) { const float t = sc->fs; sc->fs = sc->fb; sc->fb = t; }
    } else {
        uint32_t ss = byte_perm(v, 0, 0x1010), bb = byte_perm(v, 0, 0x3232);
        if (mutant == MUT_PAIR_HALVES) { const uint32_t t = ss; ss = bb; bb = t; }
        sc->s[0] = (uint16_t)ss; sc->s[1] = (uint16_t)(ss >> 16);
        sc->b[0] = (uint16_t)bb; sc->b[1] = (uint16_t)(bb >> 16);
    }
    sc->valid = 1;
}
static uint32_t gq_deq(uint32_t w, int p, const sc_t *sc) {
    CHECK(sc->valid, "dequantization with scales never loaded");
    return s_f16 ? gq_deq_f16(w, p, 4 * p + 16, sc->fs, sc->fb) : gq_deq_bf16(w, p, sc->s, sc->b);
}

/* ---- wgmma ---- */
static uint64_t wg_desc(uint32_t saddr) {   /* no swizzle, LBO 128, SBO 1024 */
    const uint64_t lbo = mutant == MUT_LBO_SBO ? 1024 : 128, sbo = mutant == MUT_LBO_SBO ? 128 : 1024;
    return (uint64_t)((saddr >> 4) & 0x3FFF) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32);
}
/* the byte of B element (k, n) a descriptor describes (-1: a descriptor the sim does not take) */
static int desc_addr(uint64_t desc, int k, int n) {
    const int start = (int)(desc & 0x3FFF) << 4, lbo = (int)((desc >> 16) & 0x3FFF) << 4, sbo = (int)((desc >> 32) & 0x3FFF) << 4;
    return start + (k / 8) * lbo + (n / 8) * sbo + (n % 8) * 16 + (k % 8) * 2;
}
static int desc_ok(uint64_t desc) {   /* bits other than start, LBO, SBO (base offset, swizzle mode, reserved) must be 0 */
    return (desc & ~(0x3FFFull | 0x3FFFull << 16 | 0x3FFFull << 32)) == 0;
}
static void wg_fence(int wg) { wgs[wg].dirty = 0; }
static void wg_mma(int wg, int set, uint64_t desc) {
    wgs_t *G = &wgs[wg];
    CHECK(!G->dirty, "warpgroup %d: wgmma issued with A or accumulator registers written since the last wgmma.fence", wg);
    CHECK(desc_ok(desc), "wgmma descriptor %llx has bits set outside start / LBO / SBO", (unsigned long long)desc);
    for (int k = 0; k < 16; k += 2)
        for (int n = 0; n < kb_BN; n++) {
            const int off = desc_addr(desc, k, n);
            CHECK(off % 4 == 0 && off >= 0 && off + 4 <= shm_bytes, "wgmma B element (%d, %d) at byte %d misaligned / OOB", k, n, off);
            if (off % 4 || off < 0 || off + 4 > shm_bytes) continue;
            meta_t *m = &meta[off / 4];
            CHECK(m->ptid < 0, "warpgroup %d: wgmma reads shared word %d whose cp.async (thread %d) is not waited for", wg, off / 4, m->ptid);
            CHECK(m->written, "warpgroup %d: wgmma reads never-written shared word %d", wg, off / 4);
            CHECK(m->fph >= 0 && m->fph < phase,
                  "warpgroup %d: wgmma reads shared word %d (landed by thread %d in phase %d) not made visible to the async proxy"
                  " (fence.proxy.async in phase %d, now %d)", wg, off / 4, m->ltid, m->lph, m->fph, phase);
            m->wpend[wg]++;
        }
    G->apend[set]++;
    assert(G->nq < 64);
    G->q[G->nq++] = (wop_t){set, -1, desc};
}
static void wg_commit(int wg) {
    wgs_t *G = &wgs[wg];
    for (int i = 0; i < G->nq; i++) if (G->q[i].group < 0) G->q[i].group = G->committed;
    G->committed++;
}
/* a wgmma executed at its retirement: D (64 x BN) += A (registers now) B (shared memory now), as
 * 4 warps x BN / 8 mma.sync.m16n8k16 (mma_emul): warp w's A registers its 16 rows, B's 8-column
 * tile j in mma.sync's B layout, the accumulators d[4j .. 4j + 3] that tile's C */
static void wg_exec(int wg, const wop_t *op) {
    static uint16_t Bh[16][128];
    const int BN = kb_BN;
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < BN; n++) {
            const int off = desc_addr(op->desc, k, n);
            if (off % 4 != (k % 2) * 2 || off < 0 || off + 2 > shm_bytes) { Bh[k][n] = 0; continue; }
            memcpy(&Bh[k][n], sh + off, 2);
            if (kb_nb + n >= kb_n) CHECK(Bh[k][n] == 0, "wgmma reads x of token %d >= n %d not zero (0x%04x)", kb_nb + n, kb_n, Bh[k][n]);
        }
    for (int w = 0; w < 4; w++) {
        uint32_t a[32][4], b[32][2];
        float d[32][4];
        thr_t *T0 = &th[wg * 128 + w * 32];
        for (int l = 0; l < 32; l++) {
            CHECK(T0[l].a_valid[op->set], "wgmma reads an A register set never written");
            memcpy(a[l], T0[l].a[op->set], 16);
        }
        for (int j = 0; j < BN / 8; j++) {
            for (int l = 0; l < 32; l++) {
                const int g = l >> 2, t = l & 3;   /* b_i: k = 2t + (i & 1) (+8 for i >= 2), n = g */
                b[l][0] = Bh[2 * t][8 * j + g] | (uint32_t)Bh[2 * t + 1][8 * j + g] << 16;
                b[l][1] = Bh[2 * t + 8][8 * j + g] | (uint32_t)Bh[2 * t + 9][8 * j + g] << 16;
                memcpy(d[l], &T0[l].d[4 * j], 16);
            }
            mma_emul(d, (const uint32_t (*)[4])a, (const uint32_t (*)[2])b);
            for (int l = 0; l < 32; l++) memcpy(&T0[l].d[4 * j], d[l], 16);
        }
    }
    for (int k = 0; k < 16; k += 2)
        for (int n = 0; n < BN; n++) {
            const int off = desc_addr(op->desc, k, n);
            if (off % 4 || off < 0 || off + 4 > shm_bytes) continue;
            meta[off / 4].wpend[wg]--;
            meta[off / 4].wret[wg] = phase;
        }
    wgs[wg].apend[op->set]--;
}
static void wg_wait(int wg, int N) {   /* retire, in order, all but the N most recent committed groups */
    wgs_t *G = &wgs[wg];
    int i = 0;
    while (i < G->nq && G->q[i].group >= 0 && G->q[i].group < G->committed - N) { wg_exec(wg, &G->q[i]); i++; }
    memmove(G->q, G->q + i, (size_t)(G->nq - i) * sizeof G->q[0]);
    G->nq -= i;
}
static void a_write(int tid, int set, int r, uint32_t v) {   /* an ordinary write of A register a[set][r] */
    const int wg = tid >> 7;
    CHECK(wgs[wg].apend[set] == 0, "thread %d writes A register set %d while a wgmma reading it is pending", tid, set);
    th[tid].a[set][r] = v;
    wgs[wg].dirty = 1;
}


/* ---- kstep(it), transcribed: kbeg + ((it + r0it) wrapped once mod nk) * GQ_BK; unrot: a mutant's
 * unrotated k (kbeg + it * GQ_BK); the wrap at kb_nkw (nk, or a mutant's other count) ---- */
static int kstep(int it, int unrot) {
    if (unrot) return kb_kbeg + it * GQ_BK;
    const int s = it + kb_r0it;
    if (mutant == MUT_ROT_NOWRAP) return kb_kbeg + s * GQ_BK;
    return kb_kbeg + (s >= kb_nkw ? s - kb_nkw : s) * GQ_BK;
}

/* ---- the kernel's issue lambda for the 32 lanes of warp w ---- */
static void issue_warp(int w, int it) {
    const int st = it % kb_NST, BN = kb_BN, T = kb_T;
    const int k0w = kstep(it, mutant == MUT_ROT_W_UNROT), k0x = kstep(it, mutant == MUT_ROT_X_UNROT);
    const int WWB = WG_WB(kb_NWG), XB_ = WG_XB(BN), wbase = kb_NST * XB_;
    assert(it >= 0 && it < ITMAX);
    CHECK(k0w % GQ_BK == 0 && k0w + GQ_BK <= kb_cols, "W k step at %d not a 64-aligned step inside cols %d", k0w, kb_cols);
    CHECK(k0x % GQ_BK == 0 && k0x + GQ_BK <= kb_cols, "x k step at %d not a 64-aligned step inside cols %d", k0x, kb_cols);
    CHECK(k0w >= kb_kbeg && k0w < kb_kbeg + kb_nk * GQ_BK && k0x >= kb_kbeg && k0x < kb_kbeg + kb_nk * GQ_BK,
          "iteration %d copies step W %d / x %d outside the block's split [%d, %d)", it, k0w, k0x, kb_kbeg, kb_kbeg + kb_nk * GQ_BK);
    if (it_wk0[it] < 0) { it_wk0[it] = k0w; it_xk0[it] = k0x; }   /* every warp copies iteration it's step: the same one */
    else CHECK(it_wk0[it] == k0w && it_xk0[it] == k0x, "warp %d copies another step than the first warp in iteration %d", w, it);
    int offs[32];
    int64_t src[32];
    for (int l = 0; l < 32; l++) {   /* BM rows x 2 halves of 16 bytes: one a thread */
        const int tid = w * 32 + l, r = tid >> 1, h = tid & 1;
        const size_t wi = (size_t)(mutant == MUT_WROW_NOCLAMP ? kb_mb + r : imin(kb_mb + r, kb_rows - 1)) * kb_wpr + k0w / 8 + h * 4;
        const int di = wbase + st * WWB + (r * 8 + h * 4) * 4;
        CHECK(di >= wbase + st * WWB && di + 16 <= wbase + (st + 1) * WWB, "wsm index outside its stage");
        CHECK(wi % 4 == 0 && wi + 4 <= wt[kb_k].nW, "W cp.async source misaligned / OOB (word %zu of %zu)", wi, wt[kb_k].nW);
        offs[l] = di; src[l] = (int64_t)wi * 4;
        if (wi + 4 <= wt[kb_k].nW) cp_async16(tid, di, wt[kb_k].W + wi);
    }
    bank_count(&bk[BK_CPW], offs, 16, 32);
    sector_count(SC_W, src, 16, 32);
    /* BN tokens x 8 pieces of 16 bytes, one instruction a pass (u = tid, tid + T, ... < BN * 8); lane
     * pairs read 32 bytes */
    for (int u0 = 0; u0 < BN * 8; u0 += T) {
        if (u0 + w * 32 >= BN * 8) break;   /* the whole warp past the end (BN * 8 a multiple of 32) */
        for (int l = 0; l < 32; l++) {
            const int tid = w * 32 + l, u = u0 + tid;
            if (u >= BN * 8) { offs[l] = -1; src[l] = -1; continue; }
            const int t = (u >> 1) % BN, c8 = 2 * (u / (2 * BN)) + (u & 1), tk = kb_nb + t;
            const size_t xe = (size_t)imin(tk, kb_n - 1) * kb_cols + k0x + c8 * 8;
            const int di = st * XB_ + (t >> 3) * 1024 + (mutant == MUT_XMAP ? (t & 7) * 128 + c8 * 16 : c8 * 128 + (t & 7) * 16);
            CHECK(c8 < 8 && di >= st * XB_ && di + 16 <= (st + 1) * XB_, "xsm index outside its stage");
            CHECK(xe % 8 == 0 && xe + 8 <= nX, "x cp.async source misaligned / OOB (elem %zu of %zu)", xe, nX);
            offs[l] = di; src[l] = (int64_t)xe * 2;
            kb_xpieces++;
            if (xe + 8 <= nX) cp_async16(tid, di, (tk < kb_n || mutant == MUT_NOZFILL) ? (const void *)(XB + xe) : NULL);
        }
        bank_count(&bk[BK_CPX], offs, 16, 32);
        sector_count(SC_X, src, 16, 32);
    }
}

/* gm_store<BN / 8>: the accumulators of thread tid to y (+ bias) or, with a split, to part[bz] + pk */
static void gm_store(int tid, int k, int rows, int n, int m0, int n0, int bz, int has_part) {
    const int lane = tid & 31, g = lane >> 2, c = (mutant == MUT_STORE_C ? 1 : 2) * (lane & 3);
    CHECK(wgs[tid >> 7].nq == 0, "thread %d reads its accumulators with %d wgmmas of its warpgroup pending", tid, wgs[tid >> 7].nq);
    const float (*acc)[4] = (const float (*)[4])th[tid].d;
    if (has_part) {   /* checked against this weight's slice of part[bz]; the mutant's stores start at part[bz] + 0 */
        const size_t ptot = (size_t)n * rb[NW], pk = (size_t)n * rb[k], lo = (size_t)bz * ptot + pk, hi = lo + (size_t)n * rows;
        assert(hi <= nPart);
        gm_store_nt(kb_BN / 8, acc, NULL, PART, (size_t)bz * ptot + (mutant == MUT_PART_RB ? 0 : pk), lo, hi, "partial", rows, n, m0, n0, g, c);
    } else gm_store_nt(kb_BN / 8, acc, wt[k].bias, wt[k].y, 0, 0, wt[k].ny, "y", rows, n, m0, n0, g, c);
}


/* ---- the rotation's coverage: block runs of rot 1 cases (not the mutants') with ... ---- */
enum { RC_R0, RC_MOD, RC_RAGGED, RC_SHORT_PROLOGUE, RC_GROUP0, RC_N };
static const char *rc_name[RC_N] = {"r0it > 0 (the wrap)", "x >= nk (the mod)", "r0it > 0 in a ragged last split",
                                    "r0it > 0 with nk < WG_D", "first pairs of another group than kbeg's (groups >= 128)"};
static long rcov[RC_N];

/* ---- k_gemm_wg<BN, NWG, ST>: block (bx, by, bz) with set.rot = rot ---- */
static void k_gemm_wg(int BN, int NWG, int rot, int bx, int by, int bz, int cols, int n, int gsh, int kchunk, int has_part) {
    const int NST = WG_ST(NWG), WG_D = mutant == MUT_REFILL ? NST - 1 : NST - 2, T = 128 * NWG, BM = 64 * NWG;
    const int XB_ = WG_XB(BN), WWB = WG_WB(NWG), NWARP = T / 32;
    meta_reset();
    phase = 0;
    int k = 0;
    for (int i = 1; i < 4; i++) if (i < NW && bx >= blk0[i]) k = i;
    const int rows = wt[k].rows, mb = (bx - blk0[k]) * BM, nb = by * BN;
    const int wpr = cols / 8, ngw = cols >> gsh;
    const int kbeg = bz * kchunk, kend = imin(cols, kbeg + kchunk), nk = (kend - kbeg) / GQ_BK;
    kb_BN = BN; kb_NWG = NWG; kb_T = T; kb_NST = NST; kb_k = k; kb_rows = rows; kb_mb = mb; kb_nb = nb;
    kb_kbeg = kbeg; kb_cols = cols; kb_n = n; kb_wpr = wpr; kb_nk = nk;
    /* r0it = set.rot && nk > 0 ? blockIdx.x % nk : 0, and the wrap at nk (the mutants': other counts) */
    kb_nkw = mutant == MUT_ROT_WRAP_COLS ? cols / GQ_BK : mutant == MUT_ROT_WRAP_KCHUNK ? kchunk / GQ_BK : nk;
    kb_r0it = rot && kb_nkw > 0 ? (mutant == MUT_ROT_NOMOD ? bx : bx % kb_nkw) : 0;
    CHECK(nk >= 1 && nk <= ITMAX, "block z %d has %d k steps (kbeg %d kend %d)", bz, nk, kbeg, kend);
    if (nk < 1 || nk > ITMAX) return;
    CHECK((size_t)shm_bytes == WG_SMEM(BN, NWG), "shared memory size");
    for (int i = 0; i < nk; i++) it_wk0[i] = it_xk0[i] = -1;
    kb_xpieces = 0;
    if (rot && !quiet) {
        rcov[RC_R0] += kb_r0it > 0;
        rcov[RC_MOD] += bx >= nk;
        rcov[RC_RAGGED] += kb_r0it > 0 && nk < kchunk / GQ_BK;
        rcov[RC_SHORT_PROLOGUE] += kb_r0it > 0 && nk < WG_D;
        rcov[RC_GROUP0] += gsh >= 7 && (kstep(0, 0) >> gsh) != (kbeg >> gsh);
    }
    memset(wgs, 0, sizeof wgs);
    for (int tid = 0; tid < T; tid++) memset(&th[tid], 0, sizeof th[tid]);
    /* the prologue: WG_D stages */
    for (int w = 0; w < NWARP; w++)
        for (int st = 0; st < WG_D; st++) {
            if (st < nk) issue_warp(w, st);
            for (int l = 0; l < 32; l++) cp_async_commit(w * 32 + l);
        }
    /* this lane's rows and the first pairs (of kstep(0)) */
    for (int tid = 0; tid < T; tid++) {
        thr_t *Tt = &th[tid];
        const int lane = tid & 31, wr = tid >> 5, g = lane >> 2, cq = lane & 3;
        Tt->r0 = mb + 16 * wr + g; Tt->r1 = mb + 16 * wr + g + 8;
        if (mutant != MUT_NOCLAMP) { Tt->r0 = imin(Tt->r0, rows - 1); Tt->r1 = imin(Tt->r1, rows - 1); }
        const int k00 = mutant == MUT_ROT_PAIR0_KBEG ? kbeg : kstep(0, mutant == MUT_ROT_PAIRS_UNROT);
        const int kq = mutant == MUT_CQ_GROUP ? k00 : k00 + 16 * cq;
        if (mutant == MUT_PAIRS_RM) {
            load_pair(&Tt->s0, sb_read(k, (size_t)Tt->r0 * ngw + (kq >> gsh)));
            load_pair(&Tt->s1, sb_read(k, (size_t)Tt->r1 * ngw + (kq >> gsh)));
        } else {
            const size_t gi = (size_t)(kq >> gsh) * rows;
            load_pair(&Tt->s0, sb_read(k, gi + Tt->r0)); load_pair(&Tt->s1, sb_read(k, gi + Tt->r1));
        }
        Tt->s0.kq = Tt->s1.kq = kq;
        for (int i = 0; i < BN / 2; i++) Tt->d[i] = 0.f;   /* ordinary writes of the accumulators */
    }
    for (int wg = 0; wg < NWG; wg++) wgs[wg].dirty = 1;
    const uint32_t xs0 = 0;   /* the dynamic shared memory's address (the kernel has no static shared memory) */
    for (int it = 0; it < nk; it++) {
        /* the end of the previous phase: cp.async.wait_group, fence.proxy.async (+ a mutant's early refill) */
        for (int tid = 0; tid < T; tid++) {
            if (mutant == MUT_FENCE_EARLY) fence_proxy_async(tid);
            cp_async_wait(tid, mutant == MUT_CPWAIT ? WG_D : WG_D - 1);
            if (mutant != MUT_NOFENCE && mutant != MUT_FENCE_EARLY) fence_proxy_async(tid);
        }
        if (mutant == MUT_EARLY_ISSUE)
            for (int w = 0; w < NWARP; w++) if (it + WG_D < nk) issue_warp(w, it + WG_D);
        if (mutant != MUT_NOBARRIER) phase++;   /* __syncthreads */
        const int st = it % NST;
        /* the stage read in this iteration: iteration it's copies, of one step */
        CHECK(it_wk0[it] >= 0 && it_wk0[it] == it_xk0[it], "iteration %d: the weight stage holds step %d, the x stage step %d", it,
              it_wk0[it], it_xk0[it]);
        for (int wo = 0; wo < NWG; wo++) {
            const int wg = (wo + it) % NWG;
            for (int w = 4 * wg; w < 4 * wg + 4; w++) {
                if (mutant != MUT_EARLY_ISSUE && it + WG_D < nk) issue_warp(w, it + WG_D);
                int offl[32], offh[32];
                int64_t pi0[32], pi1[32];
                for (int l = 0; l < 32; l++) {
                    const int tid = w * 32 + l, cq = l & 3, g = l >> 2, wr = w;
                    thr_t *Tt = &th[tid];
                    cp_async_commit(tid);
                    if (it + 1 < nk) {   /* the pairs of kstep(it + 1) */
                        const int k0n = mutant == MUT_ROT_PAIRS_CUR ? kstep(it, 0) : mutant == MUT_ROT_PAIRS_NOWRAP ? kstep(it, 0) + GQ_BK
                                        : kstep(it + 1, mutant == MUT_ROT_PAIRS_UNROT);
                        const int kq = mutant == MUT_CQ_GROUP ? k0n : k0n + 16 * cq;
                        CHECK(((k0n + 16 * cq + 15) >> gsh) == ((k0n + 16 * cq) >> gsh), "a lane's 16 codes cross a group");
                        if (mutant == MUT_PAIRS_RM) {
                            pi0[l] = (int64_t)Tt->r0 * ngw + (kq >> gsh); pi1[l] = (int64_t)Tt->r1 * ngw + (kq >> gsh);
                        } else {
                            const size_t gi = (size_t)(kq >> gsh) * rows;
                            pi0[l] = (int64_t)(gi + Tt->r0); pi1[l] = (int64_t)(gi + Tt->r1);
                        }
                        Tt->p0 = sb_read(k, (size_t)pi0[l]); Tt->p1 = sb_read(k, (size_t)pi1[l]);
                        Tt->pk = kq;
                        pi0[l] *= 4; pi1[l] *= 4;
                    }
                    const int wbase = NST * XB_ + st * WWB;
                    offl[l] = wbase + ((16 * wr + g) * 8 + 2 * cq) * 4;
                    offh[l] = wbase + ((16 * wr + g + 8) * 8 + 2 * cq) * 4;
                    sh_read(tid, offl[l], 8, Tt->wl, "uint2 W (g)");
                }
                bank_count(&bk[BK_U2], offl, 8, 32);
                if (it + 1 < nk) { sector_count(SC_PAIRS, pi0, 4, 32); sector_count(SC_PAIRS, pi1, 4, 32); }
                for (int l = 0; l < 32; l++) sh_read(w * 32 + l, offh[l], 8, th[w * 32 + l].wh, "uint2 W (g + 8)");
                bank_count(&bk[BK_U2], offh, 8, 32);
            }
            /* the pairs this warpgroup's lanes dequantize with: their group of this stage's step */
            int badg = 0, bt = -1;
            for (int tid = 128 * wg; tid < 128 * wg + 128; tid++) {
                const int want = (it_wk0[it] + 16 * (tid & 3)) >> gsh;
                if ((th[tid].s0.kq >> gsh) != want || (th[tid].s1.kq >> gsh) != want) { badg++; if (bt < 0) bt = tid; }
            }
            CHECK(!badg, "iteration %d (step %d): %d lanes of warpgroup %d dequantize with the pairs of another group (thread %d: k %d,"
                  " group %d, not %d)", it, it_wk0[it], badg, wg, bt, bt >= 0 ? th[bt].s0.kq : 0, bt >= 0 ? th[bt].s0.kq >> gsh : 0,
                  bt >= 0 ? (it_wk0[it] + 16 * (bt & 3)) >> gsh : 0);
            const uint64_t desc = wg_desc(xs0 + st * XB_);
            for (int s = 0; s < 4; s++) {
                const int p = 2 * (s & 1), set = mutant == MUT_ONESET ? 0 : s & 1;
                wg_wait(wg, mutant == MUT_WAIT2 ? 2 : 1);
                for (int tid = 128 * wg; tid < 128 * wg + 128; tid++) {
                    thr_t *Tt = &th[tid];
                    const uint32_t l = Tt->wl[s >> 1], h = Tt->wh[s >> 1];
                    uint32_t a0 = gq_deq(l, p, &Tt->s0), a1 = gq_deq(h, p, &Tt->s1), a2 = gq_deq(l, p + 1, &Tt->s0), a3 = gq_deq(h, p + 1, &Tt->s1);
                    if (mutant == MUT_AORDER) { const uint32_t x = a1; a1 = a2; a2 = x; }
                    a_write(tid, set, 0, a0); a_write(tid, set, 1, a1); a_write(tid, set, 2, a2); a_write(tid, set, 3, a3);
                    Tt->a_valid[set] = 1;
                }
                if (mutant != MUT_NOWGFENCE) wg_fence(wg);
                wg_mma(wg, set, desc + (uint64_t)(s * (mutant == MUT_DESC_STEP ? 8 : 16)));
                wg_commit(wg);
            }
            if (it + 1 < nk && mutant != MUT_NOSWAP)
                for (int tid = 128 * wg; tid < 128 * wg + 128; tid++) {
                    thr_t *Tt = &th[tid];
                    load_pair(&Tt->s0, Tt->p0); load_pair(&Tt->s1, Tt->p1);
                    Tt->s0.kq = Tt->s1.kq = Tt->pk;
                }
        }
    }
    if (mutant != MUT_NOWAIT0) for (int wg = 0; wg < NWG; wg++) wg_wait(wg, 0);
    for (int tid = 0; tid < T; tid++) {
        cp_async_wait(tid, 0);
        CHECK(th[tid].npend == 0, "copies left pending at the end");
    }
    for (int tid = 0; tid < T; tid++) gm_store(tid, k, rows, n, mb + 16 * (tid >> 5), nb, bz, has_part);
    for (int wg = 0; wg < NWG; wg++) CHECK(wgs[wg].nq == 0, "warpgroup %d exits with %d wgmmas pending", wg, wgs[wg].nq);
    /* the block's iterations copied the steps of its split, each once */
    int seen[ITMAX] = {0}, bad = 0;
    for (int it = 0; it < nk; it++) {
        const int j = (it_wk0[it] - kbeg) / GQ_BK;
        if (it_wk0[it] < kbeg || j >= nk || it_xk0[it] != it_wk0[it]) bad++;
        else seen[j]++;
    }
    for (int j = 0; j < nk; j++) bad += seen[j] != 1;
    CHECK(!bad, "block (%d, %d, %d): its %d iterations copy the %d steps of [%d, %d) other than once each (%d wrong; r0it %d)", bx, by, bz,
          nk, nk, kbeg, kend, bad, kb_r0it);
    CHECK(kb_xpieces == (long)nk * BN * 8, "block (%d, %d, %d) copies %ld pieces of x, not %d steps x %d tokens x 8", bx, by, bz,
          kb_xpieces, nk, BN);
}

/* ---- one case: gq_gemm's choice, the launches, the reference ---- */
static double last_rel, worst_rel;
static int inst_ran[2][2][2];   /* k_gemm_wg instantiations run: [bn == 128][nwg == 4][f16] */
static int ncase_runs;
static char summary[160][160];
static int nsummary;

static int run_case(const case_t *cs, int rot) {   /* rot: c->gq_rot (MLXCEL_CUDA_GEMM_ROT) */
    const int nw = cs->nw, cols = cs->cols, n = cs->n, gs = cs->gs;
    /* gq_gemm's choice for the wgmma form, transcribed */
    const int bn = n <= 64 ? 64 : 128;
    const int nwg = cols >= 4096 ? 4 : 2, bm = 64 * nwg;
    const int gsh = gq_setup(cs, bm);   /* gq_rows / gq_gemm's conditions, blk0, rb */
    const int64_t tiles = (int64_t)blk0[nw] * nblk(n, bn);
    const int64_t slots = (int64_t)wg_bps[nwg == 4][bn == 128] * SM_COUNT;
    int kchunk;
    const int ns = gq_split(tiles, cols, slots, &kchunk), nsplit = (int)((cols + kchunk - 1) / kchunk);
    CHECK(nsplit >= 1 && nsplit <= ns && nsplit <= 16, "nsplit %d for ns %d", nsplit, ns);
    CHECK(kchunk % GQ_BK == 0, "kchunk %d not a multiple of 64", kchunk);
    const size_t shm = WG_SMEM(bn, nwg);   /* the launch's dynamic shared memory = the cudaFuncSetAttribute value */
    const int threads = 128 * nwg;
    CHECK(shm <= SHM_HW_MAX, "dynamic shared memory %zu over the hardware limit", shm);
    CHECK(threads <= 1024 && threads / 2 == bm, "threads %d for %d rows (one weight copy a thread)", threads, bm);
    CHECK(nblk(n, bn) <= 65535 && nsplit <= 65535, "grid too large");
    shm_bytes = (int)shm;
    assert(shm_bytes <= SH_MAX);
    check_cover(cols, nsplit, kchunk);

    gen_data(cs);
    for (int k = 0; k < nw; k++) {   /* up_pairs (no rand(): the draws as gen_data made them) */
        wt[k].SB = malloc(wt[k].nS * 4);
        up_pairs(&wt[k], cols / gs);
    }
    const int gx = blk0[nw], gy = (int)nblk(n, bn);   /* the grid: (blk0[nw], nblk(n, bn), nsplit) */
    if (!quiet) { inst_ran[bn == 128][nwg == 4][cs->f16] = 1; ncase_runs++; }
    alloc_part(nsplit, n);
    memset(bk, 0, sizeof bk);
    memset(sc_st, 0, sizeof sc_st);

    /* blocks to run */
    uint8_t *bx_on = calloc(gx, 1);
    if (!cs->sample) memset(bx_on, 1, gx);
    else {
        for (int k = 0; k < nw; k++) {   /* the first and last blocks of each weight (sample < 0: only those), the middle one */
            bx_on[blk0[k]] = bx_on[blk0[k + 1] - 1] = 1;
            if (cs->sample > 0) bx_on[(blk0[k] + blk0[k + 1]) / 2] = 1;
        }
        for (int i = 0; i < cs->sample; i++) bx_on[(int)((int64_t)i * 7919 % gx)] = 1;
    }
    mark_rows(cs, bx_on, gx, bm);

    /* the launches: k_cvt_gq, k_gemm_wg (its partials poisoned first), with a split k_gq_sum */
    const int cf0 = check_fails;
    launch_x(n, cols, mutant == MUT_GQPERM);
    for (int bz = 0; bz < nsplit; bz++)
        for (int by = 0; by < gy; by++)
            for (int bx = 0; bx < gx; bx++)
                if (bx_on[bx]) k_gemm_wg(bn, nwg, rot, bx, by, bz, cols, n, gsh, kchunk, nsplit > 1);
    const double rel = launch_sum_check(cs, nsplit);
    last_rel = rel;
    const int ok = check_fails == cf0;
    const int nklast = (cols - (nsplit - 1) * kchunk) / GQ_BK;
    if (!quiet) {
        if (rel > worst_rel) worst_rel = rel;
        char rws[64];
        rows_str(cs, rws, sizeof rws);
        int nblocks = 0;
        for (int bx = 0; bx < gx; bx++) nblocks += bx_on[bx];
        printf("%-8s rows %-14s cols %5d n %3d gs %3d %s bias %x | k_gemm_wg<%3d, %d, %s> rot %d bps %d ns %2d kchunk %4d nsplit %2d"
               " (last %2d steps) grid %d(%d run)x%dx%d shm %6zu | rel err %.2e | wavefronts/instr (ideal): cpX %.2f (%.2f) cpW %.2f (%.2f)"
               " uint2 %.2f (%.2f) | 32-byte sectors/instr (ideal): x %.2f (%.2f) W %.2f (%.2f) pairs %.2f (%.2f) | %s\n",
               cs->name, rws, cols, n, gs, cs->f16 ? "f16 " : "bf16", cs->bias_mask, bn, nwg, cs->f16 ? "half" : "bf16", rot,
               wg_bps[nwg == 4][bn == 128], ns, kchunk, nsplit, nklast, gx, nblocks, gy, nsplit, shm, rel,
               (double)bk[BK_CPX].wav / bk[BK_CPX].ins, (double)bk[BK_CPX].ideal / bk[BK_CPX].ins,
               (double)bk[BK_CPW].wav / bk[BK_CPW].ins, (double)bk[BK_CPW].ideal / bk[BK_CPW].ins,
               (double)bk[BK_U2].wav / bk[BK_U2].ins, (double)bk[BK_U2].ideal / bk[BK_U2].ins,
               (double)sc_st[SC_X].sec / sc_st[SC_X].ins, (double)sc_st[SC_X].ideal / sc_st[SC_X].ins,
               (double)sc_st[SC_W].sec / sc_st[SC_W].ins, (double)sc_st[SC_W].ideal / sc_st[SC_W].ins,
               sc_st[SC_PAIRS].ins ? (double)sc_st[SC_PAIRS].sec / sc_st[SC_PAIRS].ins : 0.,
               sc_st[SC_PAIRS].ins ? (double)sc_st[SC_PAIRS].ideal / sc_st[SC_PAIRS].ins : 0., ok ? "OK" : "FAILED");
        fflush(stdout);
    }
    CHECK(bk[BK_CPX].wav <= 2 * bk[BK_CPX].ideal, "%s: bank conflicts (%ld wavefronts, ideal %ld)", bk_name[BK_CPX], bk[BK_CPX].wav,
          bk[BK_CPX].ideal);
    if (!quiet && nsummary < 160)
        snprintf(summary[nsummary++], sizeof summary[0], "%-8s %d  <%3d,%d,%s>  %d  %3d %7d %7d %6d %9.2e %s", cs->name,
                 wg_bps[nwg == 4][bn == 128], bn, nwg, cs->f16 ? "half" : "bf16", rot, ns, kchunk, nsplit, nklast, rel,
                 check_fails == cf0 ? "OK" : "FAILED");
    free(bx_on);
    free_data(nw);
    return check_fails == cf0;
}

int main(void) {
    srand(1);
    check_gq_perm(0);   /* gq_perm: a bijection matching the A fragments (k16 step s) */
    /* the descriptor's start field must not carry out of its 14 bits on desc + 16 s over the whole shared memory */
    CHECK(((SH_MAX >> 4) + 48) <= 0x3FFF, "descriptor start field overflows");
    const case_t cases[] = {
        /* NWG 2 (cols < 4096) */
        {"c1", 1, {300}, 512, 17, 64, 0, 1, 0},              /* BN 64, a partial row block (44 rows), bias */
        {"c2", 1, {130}, 1024, 100, 32, 1, 0, 0},            /* BN 128, f16 scales, a block of 2 rows */
        {"gs16", 1, {70}, 256, 64, 16, 0, 0, 0},             /* groups of 16, n = BN */
        {"qkv", 3, {200, 64, 130}, 1024, 40, 64, 0, 2, 0},   /* a set of 3 */
        {"set4", 4, {64, 100, 17, 256}, 768, 65, 32, 1, 0xa, 0},   /* a set of 4, f16, n 65 (BN 128, 63 tokens zero) */
        {"uneven", 1, {130}, 1216, 40, 64, 0, 1, 0},         /* 19 steps: splits 5, 5, 5, 4 */
        {"last1", 1, {130}, 1344, 40, 64, 0, 1, 0},          /* 21 steps: 5, 5, 5, 5, 1 (fewer steps than stages) */
        {"gs128", 1, {100}, 1152, 33, 128, 1, 1, 0},         /* 18 steps: splits starting mid-group */
        {"row1", 1, {1}, 320, 17, 32, 1, 1, 0},              /* one row */
        {"n128", 1, {150}, 2048, 128, 64, 0, 1, 0},          /* n = GQ_NMAX */
        {"wide", 1, {16896}, 1024, 40, 32, 0, 1, 6},         /* 132 blocks: no split with 1 block per SM, 16 steps (sampled) */
        {"long2", 1, {8448}, 1024, 100, 64, 1, 1, 4},        /* 66 x 2 tiles of BN 128: 16 / 8 steps a split (sampled) */
        /* the rotation: many row blocks (r0it = x mod nk over 0 .. nk - 1, x >= nk), splits of different nk */
        {"rot-sp", 1, {1000}, 1152, 40, 128, 0, 1, 0},       /* 8 blocks, 18 steps: splits 5, 5, 5, 3; groups of 2 steps, splits
                                                              * starting mid-group */
        {"rot-gs16", 1, {900}, 1216, 20, 16, 0, 0, 0},       /* 8 blocks, groups of 16 (4 a step): 5, 5, 5, 4 */
        /* NWG 4 (cols >= 4096) */
        {"w4-64", 1, {266}, 4096, 17, 32, 0, 1, 0},          /* BN 64, cols = 4096, a block of 10 rows */
        {"gateup", 2, {300, 300}, 4096, 128, 64, 0, 0, 0},   /* a set of 2, BN 128 */
        {"down", 1, {520}, 4352, 65, 128, 1, 1, 0},          /* 68 steps, f16, gs 128 */
        {"w4-f16", 3, {100, 40, 40}, 4160, 50, 16, 1, 5, 0}, /* a set of 3 with gs 16, 65 steps, f16 */
        {"w4-many", 1, {33792}, 4096, 90, 64, 0, 0, 5},      /* 132 blocks of 256 rows: 64 / 32 steps a split (sampled) */
        {"long4", 1, {16896}, 4096, 40, 32, 0, 1, 3},        /* 66 blocks, BN 64: 32 / 16 steps a split (sampled) */
        {"rot-w4", 2, {300, 400}, 4352, 70, 256, 1, 2, 0},  /* 2 + 2 blocks, f16, groups of 4 steps, 68 steps: 14 splits, 13 of
                                                              * 5 (== WG_D) and one of 3 (< WG_D), starting mid-group */
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    int nbad = 0;
    /* blocks per SM ([nwg == 4][bn == 128], what cudaOccupancyMaxActiveBlocksPerMultiprocessor gives
     * the launcher): 1 and 2 for all, then 2 / 2 / 1 / 1 (what 128 registers a thread, ptxas -v for
     * sm_90a on all 8 instantiations, and the shared memory allow: shared memory alone 3 / 2 / 2 / 1) */
    static const int bps_set[3][2][2] = {{{1, 1}, {1, 1}}, {{2, 2}, {2, 2}}, {{2, 2}, {1, 1}}};
    for (int b = 0; b < 3; b++) {
        memcpy(wg_bps, bps_set[b], sizeof wg_bps);
        printf("-- MLXCEL_CUDA_GEMM_ROT=1 (the default), blocks per SM: <64, 2> %d, <128, 2> %d, <64, 4> %d, <128, 4> %d (slots x %d)\n",
               wg_bps[0][0], wg_bps[0][1], wg_bps[1][0], wg_bps[1][1], SM_COUNT);
        for (int i = 0; i < ncases; i++) nbad += !run_case(&cases[i], 1);
    }
    printf("-- MLXCEL_CUDA_GEMM_ROT=0, blocks per SM: <64, 2> %d, <128, 2> %d, <64, 4> %d, <128, 4> %d (slots x %d)\n",
           wg_bps[0][0], wg_bps[0][1], wg_bps[1][0], wg_bps[1][1], SM_COUNT);
    for (int i = 0; i < ncases; i++) nbad += !run_case(&cases[i], 0);
    for (int i = 0; i < 8; i++)
        CHECK(inst_ran[i >> 2][(i >> 1) & 1][i & 1], "k_gemm_wg<%d, %d, %s> never ran", i >> 2 ? 128 : 64, (i >> 1) & 1 ? 4 : 2, i & 1 ? "__half" : "__nv_bfloat16");
    printf("\nrotation coverage (block runs with rot 1):");
    for (int i = 0; i < RC_N; i++) {
        printf("%s %s %ld", i ? "," : "", rc_name[i], rcov[i]);
        CHECK(rcov[i] > 0, "the rotation never ran with %s", rc_name[i]);
    }
    printf("\n\ncase     bps <BN,NWG,ST>  rot  ns  kchunk  nsplit  last   rel err\n");
    for (int i = 0; i < nsummary; i++) printf("%s\n", summary[i]);
    printf("%d case runs, worst relative error %.2e\n\n", ncase_runs, worst_rel);

    /* mutants: each must be caught (a check failure or a wrong result), with rot 1 */
    const case_t mcases[] = {
        {"m1", 1, {130}, 1216, 40, 16, 0, 1, 0},        /* NWG 2, BN 64, gs 16, splits 5, 5, 5, 4, a block of 2 rows */
        {"m2", 1, {70}, 512, 100, 32, 1, 0, 0},         /* NWG 2, BN 128, f16 */
        {"m3", 2, {70, 130}, 512, 40, 32, 0, 3, 0},     /* a set of 2 with a split */
        {"m4", 1, {100}, 4096, 20, 64, 0, 1, 0},        /* NWG 4, BN 64 */
        {"m5", 1, {16896}, 1024, 40, 32, 0, 1, -1},     /* NWG 2, no split: 16 steps (> WG_ST: refills; first and last blocks) */
        {"m6", 1, {16896}, 4096, 20, 64, 1, 0, -1},     /* NWG 4, 2 splits of 32 steps (first and last blocks) */
    };
    for (int i = 0; i < 2; i++) for (int j = 0; j < 2; j++) wg_bps[i][j] = 1;
    int missed = 0;
    for (int m = 1; m < MUT_N; m++) {
        mutant = m;
        const mut_run_t mr = mutant_begin();
        double worst = 0;
        for (size_t i = 0; i < sizeof mcases / sizeof mcases[0]; i++) { run_case(&mcases[i], 1); if (last_rel > worst) worst = last_rel; }
        mutant = MUT_NONE;
        if (!mutant_end(mut_name[m], mr, worst)) missed++;
    }
    printf("%d of %d mutants caught\n", MUT_N - 1 - missed, MUT_N - 1);
    return sim_verdict(nbad, missed);
}
