/* Desk simulation of k_gemm_q4p<BN, ST> (the cp.async-pipelined q4 GEMM of mlxcel's
 * backend_cuda.cu), with mm_impl's launch choice (narrow BN = 32 / 64, the split of k: ns, kchunk,
 * nsplit for a multiProcessorCount of 132) and k_splitk_sum. Every block (x, y, z), warp and lane
 * runs, the phases between __syncthreads in order; mma.sync.m16n8k16 is emulated from the PTX
 * ISA's fragment layouts (mma_emul.h), not from the kernel's comments.
 * Checks:
 *  - cp.async: a cp_async16 marks its 16 destination bytes pending in the issuing thread's open
 *    group (the bytes land only when a cp_async_wait<N> of that thread completes the group: all
 *    but its N most recent committed groups); a shared read of pending bytes (any thread) is an
 *    error; __syncthreads completes nothing; no copy may be left pending at the end;
 *  - races: per shared byte, the phase and thread of the last write (plain store, cp.async issue
 *    or its completion) and of the reads; a write and a read or write by another thread in the
 *    same phase is a race (so is a copy landing, at its wait, in the phase another thread reads);
 *  - reads of never-written shared memory (poison); shared accesses in their array's bounds and
 *    aligned to their width; bank conflicts per warp instruction (u32 reads: 32 lanes, 16-byte
 *    reads: 4 phases of 8 lanes);
 *  - global: W and x rows read by cp.async in bounds and 16-byte aligned (bases assumed aligned,
 *    as cudaMalloc gives), scale / bias / bias-vector reads in bounds, every y or partial-sum
 *    element written exactly once and nothing out of range, every partial read by k_splitk_sum
 *    written;
 *  - the result against a plain matmul y = x W^T (+ bias), W = s q + b per group (s, b from the
 *    bf16 / f16 scale arrays, rounded to bf16 as the kernel's tensor-core operand), x in bf16.
 * Mutants (pipeline bugs) must be caught. Not a timing model. Transcribed from the kernel as of
 * 2026-11-29. Build: gcc -O2 -Wall -o /tmp/sim_gemm_pipe tools/cuda_sim/sim_gemm_pipe.c -lm */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <assert.h>
#include "mma_emul.h"

#define GM_BM 64
#define GM_BK 64
#define GP_ST 3
#define SM_COUNT 132

static int imin(int a, int b) { return a < b ? a : b; }
static unsigned nblk(long n, int b) { return (unsigned)((n + b - 1) / b); }
static float frand(void) { return (float)rand() / RAND_MAX * 2.f - 1.f; }

static int fails = 0, quiet = 0, check_fails = 0;
#define CHECK(c, ...) do { if (!(c)) { check_fails++; if (!quiet && fails++ < 20) { printf("FAIL: " __VA_ARGS__); printf("\n"); } } } while (0)

enum { MUT_NONE, MUT_WAIT1, MUT_EARLY_ISSUE, MUT_SCALES_CUR, MUT_NO_EMPTY_COMMIT, MUT_NO_ZERO, MUT_NO_PAD, MUT_N };
static const char *mut_name[MUT_N] = {"none", "cp_async_wait<GP_ST - 1> in the loop", "next step issued before the __syncthreads",
                                      "next step's scales loaded for the current step", "no empty commit past the end",
                                      "tokens past n not zeroed", "x rows not padded (XS = GM_BK)"};
static int mutant = MUT_NONE;

/* ---- f16 (the ST = __half case) ---- */
static float h2f(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? INFINITY : ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}
static uint16_t f2h(float f) {   /* normal range only (the test values), round to nearest even */
    uint32_t u; memcpy(&u, &f, 4);
    const uint32_t s = (u >> 16) & 0x8000;
    int e = (int)((u >> 23) & 255) - 127 + 15;
    uint32_t m = u & 0x7fffff;
    assert(e > 0 && e < 31);
    uint32_t r = ((uint32_t)e << 10) | (m >> 13);
    const uint32_t rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(s | r);
}

/* ---- "device" global arrays with sizes ---- */
static uint32_t *W; static size_t nW;
static uint16_t *S, *B; static size_t nS; static int s_f16;   /* scales / biases: bf16 or f16 bits */
static uint16_t *X; static size_t nX;                         /* x, bf16 */
static float *BIAS; static int rows_g;
static float *Y; static size_t nY;
static float *PART; static size_t nPart;

static float ld_s(const uint16_t *arr, size_t i) {
    CHECK(i < nS, "scale/bias read OOB (%zu of %zu)", i, nS);
    if (i >= nS) return 0.f;
    return s_f16 ? h2f(arr[i]) : bf2f(arr[i]);
}

/* ---- shared memory of one block with its shadow ---- */
#define XS_MAX (64 * (GM_BK + 8))
#define SH_BYTES (GP_ST * XS_MAX * 2 + GP_ST * GM_BM * 8 * 4)
static uint8_t sh[SH_BYTES];
static struct { uint8_t written; int wph, wtid, rph, rtid, ptid; } meta[SH_BYTES];
static int cur_BN, cur_XS, xs_bytes, phase;
/* byte offsets of xs[st][e] (bf16) and wsm[st][i] (u32), with the C array bounds checked */
static int XS_OFF(int st, int e, int len) {
    CHECK(st >= 0 && st < GP_ST && e >= 0 && e + len <= cur_BN * cur_XS, "xs index out of bounds (st %d e %d)", st, e);
    return st * cur_BN * cur_XS * 2 + e * 2;
}
static int WS_OFF(int st, int i, int len) {
    CHECK(st >= 0 && st < GP_ST && i >= 0 && i + len <= GM_BM * 8, "wsm index out of bounds (st %d i %d)", st, i);
    return xs_bytes + (st * GM_BM * 8 + i) * 4;
}

static void sh_write_mark(int tid, int off, int nb, const char *what) {
    for (int i = off; i < off + nb; i++) {
        CHECK(!(meta[i].rph == phase && meta[i].rtid != tid), "race: %s by thread %d into shared byte %d read by thread %d in the same phase",
              what, tid, i, meta[i].rtid);
        CHECK(!(meta[i].wph == phase && meta[i].wtid != tid), "race: %s by thread %d into shared byte %d written by thread %d in the same phase",
              what, tid, i, meta[i].wtid);
        meta[i].wph = phase; meta[i].wtid = tid;
    }
}
static void sh_store(int tid, int off, int nb, const void *v) {   /* plain store */
    CHECK(off % nb == 0 && off >= 0 && off + nb <= SH_BYTES, "shared store misaligned / OOB");
    for (int i = off; i < off + nb; i++) CHECK(meta[i].ptid < 0, "plain store into bytes a cp.async still has pending");
    sh_write_mark(tid, off, nb, "store");
    memcpy(sh + off, v, nb);
    for (int i = off; i < off + nb; i++) meta[i].written = 1;
}
static void sh_load(int tid, int off, int nb, void *v) {
    CHECK(off % nb == 0 && off >= 0 && off + nb <= SH_BYTES, "shared load misaligned / OOB (off %d, %d bytes)", off, nb);
    for (int i = off; i < off + nb; i++) {
        CHECK(meta[i].ptid < 0, "read of shared byte %d whose cp.async (thread %d) is not waited for (reader %d)", i, meta[i].ptid, tid);
        CHECK(meta[i].written, "read of never-written shared byte %d (thread %d)", i, tid);
        CHECK(!(meta[i].wph == phase && meta[i].wtid != tid), "race: thread %d reads shared byte %d written by thread %d in the same phase",
              tid, i, meta[i].wtid);
        meta[i].rtid = (meta[i].rph == phase && meta[i].rtid != tid) ? -2 : tid;
        meta[i].rph = phase;
    }
    memcpy(v, sh + off, nb);
}

/* bank conflicts of one warp instruction: lanes' byte offsets, nb bytes each */
static int bk_off[32], bk_nb;
static void bank_begin(int nb) { bk_nb = nb; for (int l = 0; l < 32; l++) bk_off[l] = -1; }
static void bank_end(const char *what) {
    const int per = bk_nb <= 4 ? 32 : bk_nb == 8 ? 16 : 8;   /* lanes served together */
    for (int p0 = 0; p0 < 32; p0 += per) {
        int bw[32]; for (int b = 0; b < 32; b++) bw[b] = -1;
        for (int l = p0; l < p0 + per; l++) {
            if (bk_off[l] < 0) continue;
            for (int wd = bk_off[l] / 4; wd < (bk_off[l] + bk_nb) / 4; wd++) {
                CHECK(bw[wd % 32] < 0 || bw[wd % 32] == wd, "bank conflict on %s (bank %d, words %d / %d)", what, wd % 32, bw[wd % 32], wd);
                bw[wd % 32] = wd;
            }
        }
    }
}

/* ---- cp.async per thread ---- */
typedef struct { int off; uint8_t data[16]; int group; } pend_t;
typedef struct {
    int committed, npend;
    pend_t pend[64];
    float acc[8][4], sc[16], scn[16];
    uint32_t wl[8], wh[8];
} thr_t;
static thr_t th[128];

static void cp_async16(int tid, int off, const void *src) {
    CHECK(off % 16 == 0 && off >= 0 && off + 16 <= SH_BYTES, "cp.async shared destination misaligned / OOB");
    for (int i = off; i < off + 16; i++) CHECK(meta[i].ptid < 0, "cp.async into bytes another cp.async has pending");
    sh_write_mark(tid, off, 16, "cp.async");
    for (int i = off; i < off + 16; i++) meta[i].ptid = tid;
    thr_t *T = &th[tid];
    assert(T->npend < 64);
    pend_t *p = &T->pend[T->npend++];
    p->off = off; memcpy(p->data, src, 16); p->group = T->committed;   /* the open group */
}
static void cp_async_commit(int tid) { th[tid].committed++; }
static void cp_async_wait(int tid, int N) {   /* groups older than the N most recent committed land */
    thr_t *T = &th[tid];
    int k = 0;
    for (int j = 0; j < T->npend; j++) {
        pend_t *p = &T->pend[j];
        if (p->group < T->committed - N) {
            for (int i = p->off; i < p->off + 16; i++) meta[i].ptid = -1;
            sh_write_mark(tid, p->off, 16, "cp.async landing (at its wait)");
            memcpy(sh + p->off, p->data, 16);
            for (int i = p->off; i < p->off + 16; i++) meta[i].written = 1;
        } else T->pend[k++] = *p;
    }
    T->npend = k;
}

/* ---- the kernel's device helpers, transcribed ---- */
static uint32_t gm_pack(float s, float b, uint32_t w, int c) {
    const float f0 = fmaf(s, (float)((w >> (4 * c)) & 15u), b), f1 = fmaf(s, (float)((w >> (4 * c + 4)) & 15u), b);
    return (uint32_t)f2bf(f0) | ((uint32_t)f2bf(f1) << 16);   /* __floats2bfloat162_rn: .x low */
}
static void gm_scales(float *sc, int rlo, int rhi, int ngw, int k0, int gs_shift) {
    for (int s = 0; s < 4; s++) {
        const int gi = (k0 + 16 * s) >> gs_shift;
        CHECK(((k0 + 16 * s + 15) >> gs_shift) == gi, "16-wide sub-step crosses a group");
        sc[4 * s] = ld_s(S, (size_t)rlo * ngw + gi); sc[4 * s + 1] = ld_s(B, (size_t)rlo * ngw + gi);
        sc[4 * s + 2] = ld_s(S, (size_t)rhi * ngw + gi); sc[4 * s + 3] = ld_s(B, (size_t)rhi * ngw + gi);
    }
}
/* gm_step for warp w: fragments from registers (th[].wl/wh/sc), B from xs[st] */
static void gm_step(int w, int NT, int XS, int st) {
    for (int s = 0; s < 4; s++) {
        uint32_t a[32][4];
        for (int lane = 0; lane < 32; lane++) {
            const thr_t *T = &th[w * 32 + lane];
            const int c = 2 * (lane & 3);
            const float *sc = T->sc;
            a[lane][0] = gm_pack(sc[4 * s], sc[4 * s + 1], T->wl[2 * s], c);
            a[lane][1] = gm_pack(sc[4 * s + 2], sc[4 * s + 3], T->wh[2 * s], c);
            a[lane][2] = gm_pack(sc[4 * s], sc[4 * s + 1], T->wl[2 * s + 1], c);
            a[lane][3] = gm_pack(sc[4 * s + 2], sc[4 * s + 3], T->wh[2 * s + 1], c);
        }
        for (int t = 0; t < NT; t++) {
            uint32_t b[32][2];
            for (int h = 0; h < 2; h++) {   /* *(const uint32_t *)xb, then *(xb + 8): one instruction each */
                bank_begin(4);
                for (int lane = 0; lane < 32; lane++) {
                    const int g = lane >> 2, c = 2 * (lane & 3);
                    const int e = (t * 8 + g) * XS + 16 * s + c + 8 * h;
                    const int off = XS_OFF(st, e, 2);
                    sh_load(w * 32 + lane, off, 4, &b[lane][h]);
                    bk_off[lane] = off;
                }
                bank_end("x fragment read");
            }
            float d[32][4];
            for (int lane = 0; lane < 32; lane++) memcpy(d[lane], th[w * 32 + lane].acc[t], 16);
            mma_emul(d, a, b);
            for (int lane = 0; lane < 32; lane++) memcpy(th[w * 32 + lane].acc[t], d[lane], 16);
        }
    }
}
static void y_store(float *arr, size_t n_arr, size_t i, float v, const char *what) {
    CHECK(i < n_arr, "%s store OOB (%zu of %zu)", what, i, n_arr);
    if (i >= n_arr) return;
    CHECK(arr[i] != arr[i], "%s element %zu written twice", what, i);
    arr[i] = v;
}
static void gm_store(int tid, int NT, int rows, int n, int m0, int n0, int bz, int use_bias, int has_part) {
    const int lane = tid & 31, g = lane >> 2, c = 2 * (lane & 3);
    const int r0 = m0 + g, r1 = m0 + g + 8;
    float b0 = use_bias && r0 < rows ? BIAS[r0] : 0.f, b1 = use_bias && r1 < rows ? BIAS[r1] : 0.f;
    float *y = Y; size_t ny = nY; const char *what = "y";
    if (has_part) {
        y = PART + (size_t)bz * n * rows; ny = nPart - (size_t)bz * n * rows; what = "partial";
        b0 = b1 = 0.f;
    }
    const float (*acc)[4] = (const float (*)[4])th[tid].acc;
    for (int t = 0; t < NT; t++) {
        const int tk = n0 + t * 8 + c;
        if (r0 < rows) {
            if (tk < n) y_store(y, ny, (size_t)tk * rows + r0, acc[t][0] + b0, what);
            if (tk + 1 < n) y_store(y, ny, (size_t)(tk + 1) * rows + r0, acc[t][1] + b0, what);
        }
        if (r1 < rows) {
            if (tk < n) y_store(y, ny, (size_t)tk * rows + r1, acc[t][2] + b1, what);
            if (tk + 1 < n) y_store(y, ny, (size_t)(tk + 1) * rows + r1, acc[t][3] + b1, what);
        }
    }
}

/* ---- k_gemm_q4p<BN, ST>, one block ---- */
static int kp_BN, kp_n0, kp_mb, kp_kbeg, kp_rows, kp_cols, kp_n, kp_wpr;
static void issue(int tid, int it) {   /* the kernel's lambda */
    const int BN = kp_BN, XS = cur_XS;
    const int st = it % GP_ST, k0 = kp_kbeg + it * GM_BK;
    for (int u = tid; u < BN * 8; u += 128) {
        const int t = u >> 3, c8 = u & 7;
        const int dst = XS_OFF(st, t * XS + c8 * 8, 8);
        if (kp_n0 + t < kp_n) {
            const size_t xe = (size_t)(kp_n0 + t) * kp_cols + k0 + c8 * 8;
            CHECK(xe % 8 == 0, "x cp.async source not 16-byte aligned (elem %zu)", xe);
            CHECK(xe + 8 <= nX, "x cp.async source OOB (elem %zu of %zu)", xe, nX);
            if (xe + 8 <= nX) cp_async16(tid, dst, X + xe);
        } else if (mutant != MUT_NO_ZERO) {
            const uint8_t z[16] = {0};
            sh_store(tid, dst, 16, z);
        }
    }
    const int r = tid >> 1, h = tid & 1;
    const size_t wi = (size_t)imin(kp_mb + r, kp_rows - 1) * kp_wpr + k0 / 8 + h * 4;
    CHECK(wi % 4 == 0, "W cp.async source not 16-byte aligned (word %zu)", wi);
    CHECK(wi + 4 <= nW, "W cp.async source OOB (word %zu of %zu)", wi, nW);
    if (wi + 4 <= nW) cp_async16(tid, WS_OFF(st, r * 8 + h * 4, 4), W + wi);
}

static void k_gemm_q4p(int BN, int bx, int by, int bz, int rows, int cols, int n, int gs_shift, int kchunk, int use_bias,
                       int has_part) {
    const int NT = BN / 8, XS = mutant == MUT_NO_PAD ? GM_BK : GM_BK + 8;   /* padded x rows */
    cur_BN = BN; cur_XS = XS; xs_bytes = GP_ST * BN * XS * 2;
    for (int i = 0; i < SH_BYTES; i++) { meta[i].written = 0; meta[i].wph = meta[i].rph = -1; meta[i].ptid = -1; }
    memset(sh, 0xff, sizeof sh);
    phase = 0;
    const int mb = bx * GM_BM, n0 = by * BN;
    const int wpr = cols / 8, ngw = cols >> gs_shift;
    const int kbeg = bz * kchunk, kend = imin(cols, kbeg + kchunk), nk = (kend - kbeg) / GM_BK;
    kp_BN = BN; kp_n0 = n0; kp_mb = mb; kp_kbeg = kbeg; kp_rows = rows; kp_cols = cols; kp_n = n; kp_wpr = wpr;
    CHECK(nk >= 1 && (kend - kbeg) % GM_BK == 0, "block z %d has %d k steps (kbeg %d kend %d)", bz, nk, kbeg, kend);
    int rlo[128], rhi[128];
    for (int tid = 0; tid < 128; tid++) {
        const int lane = tid & 31, w = tid >> 5, g = lane >> 2, m0 = mb + w * 16;
        rlo[tid] = imin(m0 + g, rows - 1); rhi[tid] = imin(m0 + g + 8, rows - 1);
        memset(&th[tid], 0, sizeof th[tid]);
    }
    /* phase 0: the prologue, the first step's scales, the first wait */
    for (int tid = 0; tid < 128; tid++) {
        for (int st = 0; st < GP_ST - 1; st++) {
            if (st < nk) issue(tid, st);
            cp_async_commit(tid);
        }
        gm_scales(th[tid].sc, rlo[tid], rhi[tid], ngw, kbeg, gs_shift);
    }
    for (int it = 0; it < nk; it++) {
        for (int tid = 0; tid < 128; tid++) cp_async_wait(tid, mutant == MUT_WAIT1 ? GP_ST - 1 : GP_ST - 2);
        if (mutant == MUT_EARLY_ISSUE)
            for (int tid = 0; tid < 128; tid++) if (it + GP_ST - 1 < nk) issue(tid, it + GP_ST - 1);
        phase++;   /* __syncthreads */
        for (int tid = 0; tid < 128; tid++) {
            if (mutant != MUT_EARLY_ISSUE && it + GP_ST - 1 < nk) issue(tid, it + GP_ST - 1);
            if (mutant != MUT_NO_EMPTY_COMMIT || it + GP_ST - 1 < nk) cp_async_commit(tid);
            if (it + 1 < nk)
                gm_scales(th[tid].scn, rlo[tid], rhi[tid], ngw, kbeg + (it + (mutant == MUT_SCALES_CUR ? 0 : 1)) * GM_BK, gs_shift);
        }
        const int st = it % GP_ST;
        for (int w = 0; w < 4; w++) {
            /* l0 = pl[0], l1 = pl[1], h0 = ph[0], h1 = ph[1]: four 16-byte loads */
            for (int ins = 0; ins < 4; ins++) {
                bank_begin(16);
                for (int lane = 0; lane < 32; lane++) {
                    const int tid = w * 32 + lane, g = lane >> 2;
                    const int row = w * 16 + g + (ins >= 2 ? 8 : 0);
                    const int off = WS_OFF(st, row * 8 + (ins & 1) * 4, 4);
                    sh_load(tid, off, 16, (ins < 2 ? th[tid].wl : th[tid].wh) + (ins & 1) * 4);
                    bk_off[lane] = off;
                }
                bank_end("packed weight read");
            }
            gm_step(w, NT, XS, st);
            for (int lane = 0; lane < 32; lane++) memcpy(th[w * 32 + lane].sc, th[w * 32 + lane].scn, sizeof th[0].sc);
        }
    }
    for (int tid = 0; tid < 128; tid++) {
        cp_async_wait(tid, 0);
        CHECK(th[tid].npend == 0, "copies left pending at the end");
        const int w = tid >> 5;
        gm_store(tid, NT, rows, n, mb + w * 16, n0, bz, use_bias, has_part);
    }
}

/* ---- k_splitk_sum ---- */
static void k_splitk_sum(int nsplit, int use_bias, int rows, int64_t total) {
    for (int64_t i = 0; i < total; i++) {
        float a = 0.f;
        for (int z = 0; z < nsplit; z++) {
            const size_t pi = (size_t)z * total + i;
            CHECK(pi < nPart, "split-k sum reads OOB");
            CHECK(PART[pi] == PART[pi], "split-k sum reads an unwritten partial (split %d, elem %lld)", z, (long long)i);
            a += PART[pi];
        }
        y_store(Y, nY, (size_t)i, a + (use_bias ? BIAS[i % rows] : 0.f), "y");
    }
}

/* ---- one case: mm_impl's choice, the launches, the reference ---- */
static double test(int rows, int cols, int n, int gs, int use_bias, int f16, int force_bn, int force_ns) {
    const int gsh = (int)log2(gs);
    assert((1 << gsh) == gs && cols % GM_BK == 0 && gsh >= 4 && cols % gs == 0);   /* the launcher's condition */
    /* mm_impl */
    const unsigned gm = nblk(rows, GM_BM);
    int narrow = (int64_t)gm * nblk(n, 64) < 2 * SM_COUNT;
    if (force_bn) narrow = force_bn == 32;
    const int64_t blocks = (int64_t)gm * nblk(n, narrow ? 32 : 64), ksteps = cols / GM_BK;
    int64_t ns = (8 * (int64_t)SM_COUNT + blocks - 1) / blocks;
    if (ns > ksteps / 2) ns = ksteps / 2;
    if (ns > 16) ns = 16;
    if (ns < 1) ns = 1;
    if (force_ns) ns = force_ns;
    const int kchunk = (int)((ksteps + ns - 1) / ns) * GM_BK;
    const int nsplit = (int)((cols + kchunk - 1) / kchunk);
    const int BN = narrow ? 32 : 64;

    nW = (size_t)rows * cols / 8; W = malloc(nW * 4);
    nS = (size_t)rows * (cols / gs); S = malloc(nS * 2); B = malloc(nS * 2); s_f16 = f16;
    nX = (size_t)n * cols; X = malloc(nX * 2);
    nY = (size_t)n * rows; Y = malloc(nY * 4);
    BIAS = malloc(rows * 4); rows_g = rows;
    nPart = nsplit > 1 ? (size_t)nsplit * n * rows : 0; PART = nPart ? malloc(nPart * 4) : NULL;
    for (size_t i = 0; i < nW; i++) W[i] = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
    for (size_t i = 0; i < nS; i++) {
        float s = frand() * 0.1f, b = frand();
        if (fabsf(s) < 1e-3f) s = 1e-3f;
        if (fabsf(b) < 1e-3f) b = 1e-3f;
        S[i] = f16 ? f2h(s) : f2bf(s); B[i] = f16 ? f2h(b) : f2bf(b);
    }
    for (size_t i = 0; i < nX; i++) X[i] = f2bf(frand());   /* k_cvt: x to bf16 */
    for (int i = 0; i < rows; i++) BIAS[i] = frand();
    for (size_t i = 0; i < nY; i++) Y[i] = NAN;
    for (size_t i = 0; i < nPart; i++) PART[i] = NAN;

    const int cf0 = check_fails;
    for (int bz = 0; bz < nsplit; bz++)
        for (unsigned by = 0; by < nblk(n, BN); by++)
            for (unsigned bx = 0; bx < gm; bx++) k_gemm_q4p(BN, bx, by, bz, rows, cols, n, gsh, kchunk, use_bias, nsplit > 1);
    if (nsplit > 1) k_splitk_sum(nsplit, use_bias, rows, (int64_t)n * rows);

    /* reference: plain matmul of the affine dequantization (code j of a word at bits 4j), the
     * weight rounded to bf16 as the kernel's tensor-core operand */
    float *Wd = malloc((size_t)rows * cols * 4);
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < cols; k++) {
            const uint32_t word = W[(size_t)r * (cols / 8) + k / 8];
            const int q = (word >> (4 * (k % 8))) & 15;
            const size_t si = (size_t)r * (cols / gs) + k / gs;
            const float sc = f16 ? h2f(S[si]) : bf2f(S[si]), bi = f16 ? h2f(B[si]) : bf2f(B[si]);
            Wd[(size_t)r * cols + k] = bf2f(f2bf(fmaf(sc, (float)q, bi)));
        }
    double maxerr = 0; int unwritten = 0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            double s = 0;
            const float *wr = Wd + (size_t)r * cols;
            const uint16_t *xr = X + (size_t)t * cols;
            for (int k = 0; k < cols; k++) s += (double)wr[k] * bf2f(xr[k]);
            if (use_bias) s += BIAS[r];
            const float y = Y[(size_t)t * rows + r];
            if (y != y) { unwritten++; continue; }
            const double e = fabs(y - s) / (1.0 + fabs(s));
            if (e > maxerr) maxerr = e;
        }
    const int ok = maxerr < 1e-4 && !unwritten && check_fails == cf0;
    const int last = (cols - (nsplit - 1) * kchunk) / GM_BK;
    if (!quiet)
        printf("rows=%d cols=%d n=%d gs=%d bias=%d ST=%s: BN=%d%s ns=%lld kchunk=%d nsplit=%d (last split %d step%s)%s: "
               "max rel err %.2e, unwritten %d, check failures %d %s\n",
               rows, cols, n, gs, use_bias, f16 ? "f16" : "bf16", BN, force_bn ? " (forced)" : "", (long long)ns, kchunk / GM_BK,
               nsplit, last, last == 1 ? "" : "s", force_ns ? " (ns forced)" : "", maxerr, unwritten, check_fails - cf0,
               ok ? "OK" : "MISMATCH");
    if (!(maxerr < 1e-4 && !unwritten)) { fails++; check_fails++; }
    free(Wd); free(W); free(S); free(B); free(X); free(Y); free(BIAS); free(PART);
    return unwritten ? INFINITY : maxerr;
}

int main(void) {
    srand(1);
    /* launcher's choices (narrow: gm * nblk(n, 64) < 264) */
    test(300, 512, 17, 64, 1, 0, 0, 0);
    test(300, 512, 17, 64, 1, 1, 0, 0);
    test(130, 1024, 100, 32, 0, 0, 0, 0);
    test(130, 1024, 100, 32, 1, 1, 0, 0);
    test(130, 448, 40, 16, 1, 0, 0, 0);      /* 7 k steps: splits 3, 3, 1 */
    test(300, 1472, 17, 64, 0, 1, 0, 0);     /* 23 k steps: splits of 3, the last 2 */
    test(64, 640, 128, 64, 1, 0, 0, 0);      /* 10 k steps: splits of 2 */
    test(300, 128, 300, 32, 1, 1, 0, 0);     /* 2 k steps: no split (y direct) */
    test(130, 192, 300, 64, 0, 0, 0, 0);     /* 3 k steps: no split, 3 stages in flight */
    test(256, 2048, 128, 128, 1, 0, 0, 0);
    test(64, 4096, 40, 64, 0, 1, 0, 0);      /* 16 splits of 4 */
    test(1, 256, 9, 16, 1, 0, 0, 0);
    test(2048, 512, 540, 64, 1, 0, 0, 0);    /* gm 32 x 9 = 288 >= 264: BN 64 (the launcher's wide case) */
    /* forced tile width / split, for BN 64 and long pipelines on small shapes */
    test(300, 512, 17, 32, 1, 1, 64, 0);
    test(130, 1024, 100, 128, 0, 0, 64, 1);  /* 16 steps in one block: the buffers wrap 5 times, y direct */
    test(300, 2048, 40, 16, 1, 0, 32, 1);
    test(130, 448, 300, 64, 1, 1, 64, 3);
    test(100, 4096, 17, 128, 1, 1, 0, 1);
    printf(fails ? "SIM: %d failures\n" : "cases OK\n", fails);

    /* mutants: each must be caught (a check failure or a wrong result) */
    int missed = 0;
    for (int m = 1; m < MUT_N; m++) {
        mutant = m; quiet = 1;
        const int cf0 = check_fails, f0 = fails;
        double e = test(130, 448, 40, 32, 1, 0, 0, 1);
        e = fmax(e, test(70, 640, 17, 64, 0, 1, 64, 0));
        const int caught = check_fails > cf0;
        fails = f0;
        mutant = MUT_NONE; quiet = 0;
        printf("mutant \"%s\": %d check failures, worst err %.1e -> %s\n", mut_name[m], check_fails - cf0, e, caught ? "caught" : "NOT CAUGHT");
        if (!caught) missed++;
    }
    fails += missed;
    printf(fails ? "SIM: %d failures\n" : "SIM: all OK\n", fails);
    return fails != 0;
}
