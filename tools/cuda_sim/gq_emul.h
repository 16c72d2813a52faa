/* tools/cuda_sim/gq_emul.h: what the two CPU simulations of gq_gemm's q4 GEMMs share, one copy for
 * both (sim_gemm_gq.c: k_gemm_gq with mma.sync; sim_gemm_wg.c: k_gemm_wg with wgmma):
 *  - the harness: CHECK (a failure counted, printed unless quiet; while quiet the first failures of
 *    3 different check sites, by file and line, are kept for the mutant's report), mutant_begin /
 *    mutant_end (the MUTANT line), sim_verdict (the `SIM: all OK` line);
 *  - f16 and exact bf16 rounding (bf16 of a float: mma_emul.h), bank wavefronts of a warp's shared
 *    access, the per-thread cp.async group queue (what a landing does is each sim's: land);
 *  - the "device" global arrays of a launch (a gq_set of <= 4 weights, x and its gq-order copy, the
 *    split-k partial buffer), a case and its data: the rand() draws (weights, then scales and
 *    biases, then the bias vector, weight after weight; x at the launch) are in the sims' outputs,
 *    so their order is fixed here;
 *  - transcriptions of what both kernels take from src/backend/cuda/backend_cuda.cu the same way:
 *    gq_perm / k_cvt_gq, gq_deq (both overloads; the caller passes its gq_sc's halves), gm_store<NT>,
 *    gq_gemm's conditions, row blocks and split of k, k_gq_sum (+ its checks), and the
 *    double-precision reference of y (from the [row][group] scales, independent of both kernels).
 * Not here (each sim's own): the kernels' bodies and issue lambdas, gq_sc's layouts, the shared
 * memory and its shadow (sh_read, cp.async's issue and landing checks), the launch choice of
 * BN / NWG / shared memory, which blocks run. Static functions and state: one simulation a program. */
#ifndef MX_CUDA_SIM_GQ_EMUL_H
#define MX_CUDA_SIM_GQ_EMUL_H
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mma_emul.h"

#define GQ_BK 64
#define GQ_NMAX 128
#define MV_I8_MAX 16
#define SM_COUNT 132
#define SHM_HW_MAX 232448   /* 227 KiB a block on sm_90 */

static int imin(int a, int b) { return a < b ? a : b; }
static int64_t nblk(int64_t n, int b) { return (n + b - 1) / b; }
static float frand(void) { return (float)rand() / RAND_MAX * 2.f - 1.f; }

/* ---- the checks: CHECK counts a failure; printed (the first 20) unless quiet, else the first
 * failures of 3 different check sites (file and line) are kept for the mutant's report ---- */
static int fails = 0, quiet = 0, check_fails = 0;
static char first_msg[3][200];   /* the first failures of 3 different checks while quiet (mutants) */
static const char *first_file[3];
static int first_line[3], nfirst;
static int new_line(const char *file, int line) {
    for (int i = 0; i < nfirst; i++) if (first_line[i] == line && !strcmp(first_file[i], file)) return 0;
    if (nfirst == 3) return 0;
    first_file[nfirst] = file; first_line[nfirst] = line;
    return 1;
}
#define CHECK(c, ...) do { if (!(c)) { check_fails++; \
    if (quiet && new_line(__FILE__, __LINE__)) snprintf(first_msg[nfirst++], sizeof first_msg[0], __VA_ARGS__); \
    if (!quiet && fails++ < 20) { printf("FAIL: " __VA_ARGS__); printf("\n"); } } } while (0)

/* a mutant's run: mutant_begin (quiet; the counts before), its cases, then mutant_end (its report,
 * the counts as before; 1 if it was caught) */
typedef struct { int cf0, f0; } mut_run_t;
static mut_run_t mutant_begin(void) { quiet = 1; nfirst = 0; return (mut_run_t){check_fails, fails}; }
static int mutant_end(const char *name, mut_run_t mr, double worst) {
    const int caught = check_fails > mr.cf0, nf = check_fails - mr.cf0;
    fails = mr.f0; check_fails = mr.cf0;
    quiet = 0;
    printf("MUTANT %s: %s (%d check failures, worst rel err %.1e; first: %s%s%s%s%s)\n", name, caught ? "caught" : "NOT caught",
           nf, worst, nfirst ? first_msg[0] : "", nfirst > 1 ? "; then: " : "", nfirst > 1 ? first_msg[1] : "", nfirst > 2 ? "; then: " : "",
           nfirst > 2 ? first_msg[2] : "");
    return caught;
}
/* the last line and the exit status */
static int sim_verdict(int nbad, int missed) {
    if (!nbad && !missed && !check_fails) printf("SIM: all OK\n");
    else printf("SIM: %d failing cases, %d mutants not caught\n", nbad, missed);
    return nbad || missed;
}

/* ---- f16 and exact bf16 rounding of a double ---- */
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
static uint16_t d2bf(double x) {   /* one rounding (nearest even) of a double to bf16: normal range */
    if (x == 0) return signbit(x) ? 0x8000 : 0;
    int e;
    frexp(x, &e);
    assert(e > -120 && e < 120);
    const float f = (float)ldexp(nearbyint(ldexp(x, 8 - e)), e - 8);
    uint32_t u; memcpy(&u, &f, 4);
    assert((u & 0xffff) == 0);
    return (uint16_t)(u >> 16);
}

/* ---- bank wavefronts of one warp instruction (128 bytes a wavefront): nl lanes of nb bytes at
 * shared offsets off (< 0: lane idle), into the counters of one kind of instruction ---- */
typedef struct { long ins, wav, ideal, maxw; } bank_t;
static void bank_count(bank_t *bk, const int *off, int nb, int nl) {
    int words[32][32], cnt[32] = {0}, total = 0;
    for (int l = 0; l < nl; l++) {
        if (off[l] < 0) continue;
        for (int wd = off[l] / 4; wd < (off[l] + nb) / 4; wd++) {
            const int b = wd % 32;
            int seen = 0;
            for (int j = 0; j < cnt[b]; j++) seen |= words[b][j] == wd;
            if (!seen) { assert(cnt[b] < 32); words[b][cnt[b]++] = wd; total++; }
        }
    }
    int w = 0;
    for (int b = 0; b < 32; b++) if (cnt[b] > w) w = cnt[b];
    bk->ins++; bk->wav += w; bk->ideal += (total * 4 + 127) / 128;
    if (w > bk->maxw) bk->maxw = w;
}

/* ---- cp.async per thread: a copy joins the thread's open group (pend_push), commit_group closes
 * it, wait_group N lands, in issue order, the copies of all but the N most recent committed groups
 * (pend_wait; what a landing does to shared memory and its shadow is the sim's land) ---- */
typedef struct { int off; uint8_t data[16]; int group; } pend_t;
static void pend_push(pend_t *pend, int *npend, int cap, int committed, int off, const void *src) {   /* src NULL: 16 zero bytes */
    assert(*npend < cap);
    pend_t *p = &pend[(*npend)++];
    p->off = off; p->group = committed;
    if (src) memcpy(p->data, src, 16); else memset(p->data, 0, 16);
}
static void pend_wait(pend_t *pend, int *npend, int committed, int N, int tid, void (*land)(int tid, const pend_t *p)) {
    int k = 0;
    for (int j = 0; j < *npend; j++) {
        pend_t *p = &pend[j];
        if (p->group < committed - N) land(tid, p);
        else pend[k++] = *p;
    }
    *npend = k;
}

/* ---- "device" global arrays, with sizes ---- */
typedef struct {
    uint32_t *W; size_t nW;
    uint16_t *S, *B; size_t nS;   /* bf16 or f16 bits, [row][group] */
    uint32_t *SB;                 /* up_pairs: [group][row], nS of them (sim_gemm_wg; NULL in sim_gemm_gq) */
    float *bias, *y; size_t ny;
    int rows;
} wt_t;
static wt_t wt[4];
static int NW, blk0[5], rb[5], s_f16;
static float *XF; static uint16_t *XB; static size_t nX;   /* x f32 and its k_cvt_gq form */
static float *PART; static uint8_t *part_rd; static size_t nPart;   /* part (nsplit x n x rb[nw]), reads of each by k_gq_sum */
static uint8_t *row_on[4];   /* rows of each weight whose blocks run (all unless sampled) */

/* ---- one case ---- */
typedef struct { const char *name; int nw, rows[4], cols, n, gs, f16, bias_mask, sample; } case_t;

/* gq_rows / gq_gemm's conditions (q4, groups >= 16, 64-multiple cols, 16 < n <= 128, a set of <= 4),
 * the set's row blocks of bm rows (blk0) and its row offsets (rb); returns log2 of the group size */
static int gq_setup(const case_t *cs, int bm) {
    const int nw = cs->nw, cols = cs->cols, n = cs->n, gs = cs->gs;
    int gsh = 0;
    while ((1 << gsh) < gs) gsh++;
    assert((1 << gsh) == gs && gsh >= 4 && cols % GQ_BK == 0 && n > MV_I8_MAX && n <= GQ_NMAX && nw >= 1 && nw <= 4);
    NW = nw; s_f16 = cs->f16;
    blk0[0] = rb[0] = 0;
    for (int k = 0; k < nw; k++) {
        blk0[k + 1] = blk0[k] + (int)nblk(cs->rows[k], bm);
        rb[k + 1] = rb[k] + cs->rows[k];
    }
    return gsh;
}
/* gq_gemm's split of k, transcribed: ns from the cost of waves of tiles over slots (blocks per SM x
 * the SMs), each split costing 5% more, at most ksteps / 4 splits; kchunk whole k steps */
static int gq_split(int64_t tiles, int cols, int64_t slots, int *kchunk) {
    const int64_t ksteps = cols / GQ_BK;
    int ns = 1;
    double best = 1e30;
    for (int s = 1; s <= 16 && (s == 1 || s <= ksteps / 4); s++) {
        const double cost = (double)((tiles * s + slots - 1) / slots) / s * (1.0 + 0.05 * (s - 1));
        if (cost < best - 1e-9) { best = cost; ns = s; }
    }
    *kchunk = (int)((ksteps + ns - 1) / ns) * GQ_BK;
    return ns;
}
/* the splits' k steps cover cols once */
static void check_cover(int cols, int nsplit, int kchunk) {
    uint8_t *cov = calloc(cols, 1);
    for (int z = 0; z < nsplit; z++) {
        const int kb = z * kchunk, ke = imin(cols, kb + kchunk), nk = (ke - kb) / GQ_BK;
        for (int c = kb; c < kb + nk * GQ_BK && c < cols; c++) cov[c]++;
    }
    int bad = 0;
    for (int c = 0; c < cols; c++) bad += cov[c] != 1;
    CHECK(!bad, "the splits cover %d of %d columns other than once (kchunk %d)", bad, cols, kchunk);
    free(cov);
}
/* the case's data: x (its values drawn at the launch), the weights (random codes, scales and biases
 * away from 0, in bf16 or f16), the bias vectors of bias_mask, y poisoned with NaN */
static void gen_data(const case_t *cs) {
    const int cols = cs->cols, n = cs->n, gs = cs->gs;
    nX = (size_t)n * cols;
    XF = malloc(nX * 4); XB = malloc(nX * 2);
    for (int k = 0; k < cs->nw; k++) {
        wt_t *W = &wt[k];
        const int rows = cs->rows[k];
        W->rows = rows;
        W->nW = (size_t)rows * cols / 8; W->W = malloc(W->nW * 4);
        W->nS = (size_t)rows * (cols / gs); W->S = malloc(W->nS * 2); W->B = malloc(W->nS * 2); W->SB = NULL;
        for (size_t i = 0; i < W->nW; i++) W->W[i] = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
        for (size_t i = 0; i < W->nS; i++) {
            float s = frand() * 0.05f, b = frand() * 0.4f;
            if (fabsf(s) < 1e-3f) s = 1e-3f;
            if (fabsf(b) < 1e-3f) b = 1e-3f;
            W->S[i] = cs->f16 ? f2h(s) : f2bf(s); W->B[i] = cs->f16 ? f2h(b) : f2bf(b);
        }
        W->bias = NULL;
        if (cs->bias_mask >> k & 1) { W->bias = malloc(rows * 4); for (int i = 0; i < rows; i++) W->bias[i] = frand(); }
        W->ny = (size_t)n * rows; W->y = malloc(W->ny * 4);
        for (size_t i = 0; i < W->ny; i++) W->y[i] = NAN;
        row_on[k] = calloc(rows, 1);
    }
}
static void alloc_part(int nsplit, int n) {   /* gq_gemm's scratch for part */
    nPart = nsplit > 1 ? (size_t)nsplit * n * rb[NW] : 0;
    PART = nPart ? malloc(nPart * 4) : NULL; part_rd = nPart ? calloc(nPart, 1) : NULL;
}
static void free_data(int nw) {
    for (int k = 0; k < nw; k++) {
        free(wt[k].W); free(wt[k].S); free(wt[k].B); free(wt[k].SB); free(wt[k].bias); free(wt[k].y); free(row_on[k]);
    }
    free(XF); free(XB); free(PART); free(part_rd);
}
/* the rows whose blocks run: bx_on of the gx blocks of bm rows */
static void mark_rows(const case_t *cs, const uint8_t *bx_on, int gx, int bm) {
    for (int bx = 0; bx < gx; bx++) {
        if (!bx_on[bx]) continue;
        int k = 0;
        for (int i = 1; i < cs->nw; i++) if (bx >= blk0[i]) k = i;
        for (int r = (bx - blk0[k]) * bm; r < (bx - blk0[k] + 1) * bm && r < cs->rows[k]; r++) row_on[k][r] = 1;
    }
}
static void rows_str(const case_t *cs, char *buf, size_t size) {   /* "r0,r1,..." */
    buf[0] = 0;
    for (int k = 0; k < cs->nw; k++) snprintf(buf + strlen(buf), size - strlen(buf), "%s%d", k ? "," : "", cs->rows[k]);
}

/* ---- the kernel's device helpers, transcribed ---- */
static int gq_perm(int P, int swap_eh) {   /* swap_eh: a mutant with e and h swapped */
    const int cq = P >> 4, sh_ = (P >> 3) & 1, q = P & 7, e = q >> 2, p = q & 3;
    if (swap_eh) return 16 * (2 * sh_ + (p >> 1)) + 8 * e + 2 * cq + (p & 1);
    return 16 * (2 * sh_ + (p >> 1)) + 8 * (p & 1) + 2 * cq + e;
}
/* gq_perm: a bijection of 0..63 matching the A fragments (lane cq, k16 step s, half h, element e
 * hold code 16 cq + 8 (s >> 1) + 2 (s & 1) + h + 4 e) */
static void check_gq_perm(int swap_eh) {
    int seen[64] = {0};
    for (int P = 0; P < 64; P++) seen[gq_perm(P, swap_eh)]++;
    for (int L = 0; L < 64; L++) CHECK(seen[L] == 1, "gq_perm not a bijection at %d", L);
    for (int cq = 0; cq < 4; cq++) for (int s = 0; s < 4; s++) for (int h = 0; h < 2; h++) for (int e = 0; e < 2; e++)
        CHECK(gq_perm(16 * cq + 8 * (s >> 1) + 2 * (s & 1) + h + 4 * e, swap_eh) == 16 * s + 8 * h + 2 * cq + e, "gq_perm vs A fragment");
}
static void k_cvt_gq(int64_t total, int swap_eh) {   /* st_gq: xg[(i & ~63) + gq_perm(i & 63)] = bf16(x[i]) */
    uint8_t *seen = calloc((size_t)total, 1);
    for (int64_t i = 0; i < total; i++) {
        const int64_t d = (i & ~(int64_t)63) + gq_perm((int)(i & 63), swap_eh);
        CHECK(d >= 0 && d < total, "k_cvt_gq store OOB");
        if (d < 0 || d >= total) continue;
        CHECK(!seen[d], "k_cvt_gq writes element %lld twice", (long long)d);
        seen[d] = 1;
        XB[d] = f2bf(XF[i]);
    }
    for (int64_t i = 0; i < total; i++) CHECK(seen[i], "k_cvt_gq leaves element %lld unwritten", (long long)i);
    free(seen);
}
/* gq_deq(w, p, float2): f32 fma, then __floats2bfloat162_rn; the codes at bits 4 p and hs (the
 * kernel: 4 p + 16) */
static uint32_t gq_deq_f16(uint32_t w, int p, int hs, float fs, float fb) {
    const float f0 = fmaf(fs, (float)((w >> (4 * p)) & 15u), fb), f1 = fmaf(fs, (float)((w >> hs) & 15u), fb);
    return (uint32_t)f2bf(f0) | ((uint32_t)f2bf(f1) << 16);
}
/* gq_deq(w, p, s2, b2) bit for bit: the OR 0x43004300, __hsub2 of 128 (rn), then __hfma2 (one
 * rounding), lane h with s2 / b2's half h (bf16 bits) */
static uint32_t gq_deq_bf16(uint32_t w, int p, const uint16_t s2[2], const uint16_t b2[2]) {
    const uint32_t t = ((w >> (4 * p)) & 0x000F000Fu) | 0x43004300u;   /* (128 + q0, 128 + q1) */
    uint32_t u = 0;
    for (int h = 0; h < 2; h++) {
        const uint16_t v = (uint16_t)(t >> (16 * h));
        const double q = bf2f(d2bf((double)bf2f(v) - (double)bf2f(f2bf(128.f))));
        u |= (uint32_t)d2bf(fma(q, bf2f(s2[h]), bf2f(b2[h]))) << (16 * h);
    }
    return u;
}
static long nstores;   /* y / partial stores (sim_gemm_wg counts a block's) */
static void y_store(float *arr, size_t lo, size_t hi, size_t i, float v, const char *what) {
    nstores++;
    CHECK(i >= lo && i < hi, "%s store out of its range (%zu not in [%zu, %zu))", what, i, lo, hi);
    if (i < lo || i >= hi) return;
    CHECK(arr[i] != arr[i], "%s element %zu written twice", what, i);
    CHECK(v == v, "%s element %zu stored as NaN", what, i);
    arr[i] = v;
}

/* gm_store<NT>, transcribed: a warp's rows m0 + g, m0 + g + 8 x tokens n0 + 8 t + c, + 1 (t < NT) of
 * accumulators (mma's C layout) to y[token][row] (+ bias when not NULL: b0 / b1, 0 for rows past
 * rows), rows >= rows and tokens >= n skipped; y element i is stored at arr[base + i] by y_store
 * (once, not NaN, inside [lo, hi)) */
static void gm_store_nt(int NT, const float (*acc)[4], const float *bias, float *arr, size_t base, size_t lo, size_t hi,
                        const char *what, int rows, int n, int m0, int n0, int g, int c) {
    const int r0 = m0 + g, r1 = m0 + g + 8;
    const float b0 = bias && r0 < rows ? bias[r0] : 0.f, b1 = bias && r1 < rows ? bias[r1] : 0.f;
    for (int t = 0; t < NT; t++) {
        const int tk = n0 + t * 8 + c;
        if (r0 < rows) {
            if (tk < n) y_store(arr, lo, hi, base + (size_t)tk * rows + r0, acc[t][0] + b0, what);
            if (tk + 1 < n) y_store(arr, lo, hi, base + (size_t)(tk + 1) * rows + r0, acc[t][1] + b0, what);
        }
        if (r1 < rows) {
            if (tk < n) y_store(arr, lo, hi, base + (size_t)tk * rows + r1, acc[t][2] + b1, what);
            if (tk + 1 < n) y_store(arr, lo, hi, base + (size_t)(tk + 1) * rows + r1, acc[t][3] + b1, what);
        }
    }
}

/* ---- k_gq_sum: a launch of its own (one thread an element, nblk(total, 256) x 256) adding the
 * partials in split order + bias into y_k ---- */
static void k_gq_sum(int nsplit, int n) {
    const int64_t total = (int64_t)n * rb[NW];
    const int64_t nthreads = nblk(total, 256) * 256;
    for (int64_t i = 0; i < nthreads; i++) {
        if (i >= total) continue;
        int k = 0;
        for (int j = 1; j < 4; j++) if (j < NW && i >= (int64_t)n * rb[j]) k = j;
        const int64_t li = i - (int64_t)n * rb[k];
        if (!row_on[k][li % wt[k].rows]) continue;   /* rows whose blocks ran (sampled cases) */
        float a = 0.f;
        for (int z = 0; z < nsplit; z++) {
            const size_t pi = (size_t)z * total + i;
            CHECK(pi < nPart, "k_gq_sum reads OOB");
            if (pi >= nPart) continue;
            CHECK(PART[pi] == PART[pi], "k_gq_sum reads an unwritten partial (split %d, elem %lld)", z, (long long)i);
            part_rd[pi]++;
            a += PART[pi];
        }
        y_store(wt[k].y, 0, wt[k].ny, (size_t)li, a + (wt[k].bias ? wt[k].bias[li % wt[k].rows] : 0.f), "y (k_gq_sum)");
    }
}
/* k_gq_sum after the GEMM's launch (all partials visible), and its checks */
static void gq_sum(int n, int nsplit) {
    k_gq_sum(nsplit, n);
    const int64_t total = (int64_t)n * rb[NW];
    long unread = 0, twice = 0, unwritten = 0, yun = 0;
    for (int z = 0; z < nsplit; z++)
        for (int64_t i = 0; i < total; i++) {
            int k = 0;
            for (int j = 1; j < 4; j++) if (j < NW && i >= (int64_t)n * rb[j]) k = j;
            if (!row_on[k][(i - (int64_t)n * rb[k]) % wt[k].rows]) continue;
            const size_t pi = (size_t)z * total + i;
            unread += part_rd[pi] == 0; twice += part_rd[pi] > 1; unwritten += PART[pi] != PART[pi];
        }
    CHECK(!unread && !twice && !unwritten, "k_gq_sum: partials: %ld never read, %ld read twice, %ld never written", unread, twice, unwritten);
    for (int k = 0; k < NW; k++)
        for (size_t i = 0; i < wt[k].ny; i++) yun += row_on[k][i % wt[k].rows] && wt[k].y[i] != wt[k].y[i];
    CHECK(!yun, "k_gq_sum: %ld y elements never written", yun);
}

/* y of the rows that ran against a double-precision reference: W = s q + b rounded once to bf16
 * (code j of a word at bits 4j, scales from the [row][group] arrays, independent of the kernels'
 * permutation and pair layout), x in bf16; returns the relative error */
static double ref_check(const case_t *cs) {
    const int nw = cs->nw, cols = cs->cols, n = cs->n, gs = cs->gs;
    double maxerr = 0, maxref = 0;
    long unwritten = 0;
    double *xr = malloc(nX * sizeof(double));
    for (size_t i = 0; i < nX; i++) xr[i] = bf2f(f2bf(XF[i]));
    double *wrow = malloc((size_t)cols * sizeof(double));
    for (int k = 0; k < nw; k++) {
        const wt_t *W = &wt[k];
        for (int r = 0; r < W->rows; r++) {
            if (!row_on[k][r]) continue;
            for (int c = 0; c < cols; c++) {
                const int q = (W->W[(size_t)r * (cols / 8) + c / 8] >> (4 * (c % 8))) & 15;
                const size_t si = (size_t)r * (cols / gs) + c / gs;
                const double s = cs->f16 ? h2f(W->S[si]) : bf2f(W->S[si]), b = cs->f16 ? h2f(W->B[si]) : bf2f(W->B[si]);
                wrow[c] = bf2f(d2bf(s * q + b));
            }
            for (int t = 0; t < n; t++) {
                double a = 0;
                const double *xt = xr + (size_t)t * cols;
                for (int c = 0; c < cols; c++) a += wrow[c] * xt[c];
                if (W->bias) a += W->bias[r];
                const float y = W->y[(size_t)t * W->rows + r];
                if (fabs(a) > maxref) maxref = fabs(a);
                if (y != y) { unwritten++; continue; }
                if (fabs(y - a) > maxerr) maxerr = fabs(y - a);
            }
        }
    }
    free(xr); free(wrow);
    CHECK(!unwritten, "%ld y elements never written", unwritten);
    const double rel = maxerr / (maxref > 0 ? maxref : 1);
    CHECK(rel < 1e-5, "relative error %.2e", rel);
    return rel;
}

/* the launches around the GEMM's: k_cvt_gq of fresh x (the case's last rand() draws) and the partial
 * buffer poisoned with NaN before it; after it, with a split k_gq_sum, then the reference (its
 * relative error) */
static void launch_x(int n, int cols, int swap_eh) {
    for (size_t i = 0; i < nX; i++) XF[i] = frand();
    k_cvt_gq((int64_t)n * cols, swap_eh);
    for (size_t i = 0; i < nPart; i++) PART[i] = NAN;
}
static double launch_sum_check(const case_t *cs, int nsplit) {
    if (nsplit > 1) gq_sum(cs->n, nsplit);
    return ref_check(cs);
}

#endif
