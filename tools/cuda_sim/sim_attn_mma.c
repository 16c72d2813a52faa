/* Desk simulation of k_attn_mma<D> + launch_attn_tiled's tile building (mlxcel backend_cuda.cu):
 * every block / warp / lane, the phases between __syncthreads run in order, the quad reductions
 * (__shfl_xor_sync 1, 2) emulated over the 4 lanes of a quad, and mma.sync.m16n8k16 bf16
 * emulated from the PTX ISA's documented fragment layouts (as the other simulations here), NOT from the kernel's
 * comments:
 *   A (16x16): g = lane>>2, t = lane&3; reg r holds elements 2r,2r+1 (low half = lower i):
 *      a_i: row = g (i in {0,1,4,5}) else g+8; col = 2t + (i&1) (+8 if i>=4)
 *   B (16x8):  b_i: row(k) = 2t + (i&1) (+8 if i>=2); col(n) = g
 *   C (16x8):  c_i: row = g (i<2) else g+8; col = 2t + (i&1)
 * Checks: every global access in bounds and aligned for its vector width (base pointers assumed
 * 16-byte aligned, as cudaMalloc / the KV pool give); every shared access in bounds, aligned, of
 * written data, and free of races inside a __syncthreads phase (shadow: last writer / reader and
 * phase per element); bank conflicts of the u32 fragment reads of sq / sk / svt (per warp
 * instruction); each output element of a tile's rows written exactly once, nothing else written.
 * Compared against a plain f64 causal attention over the paged bf16 cache with the CPU backend's
 * semantics (cpu_attention.c: keys max(0, pos - window + 1)..pos, bad blocks skipped, softcap on
 * the scaled score, the sink in the denominator, zeros when nothing attends). Mutants (B registers
 * swapped, correction factor dropped, P fragment registers swapped, one quad shuffle dropped,
 * softcap dropped) must be caught. Not a timing model: the bank conflicts of the K/V stores are
 * only reported. Transcribed from the kernel as of 2026-11-29 (K/V load with lanes on keys). */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <limits.h>
#include <assert.h>
#include "mma_emul.h"

#define AM_TK 32
#define ATT_TQ 64
static int fails = 0, quiet = 0, check_fails = 0;
#define CHECK(c, ...) do { if (!(c)) { check_fails++; if (!quiet && fails++ < 20) { printf("FAIL: " __VA_ARGS__); printf("\n"); } } } while (0)
static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }
static float frand(void) { return (float)rand() / RAND_MAX * 2.f - 1.f; }

static uint32_t pack2(float x, float y) { return (uint32_t)f2bf(x) | ((uint32_t)f2bf(y) << 16); }   /* .x low */

enum { MUT_NONE, MUT_SWAP_B, MUT_NO_CORR, MUT_PA_SWAP, MUT_NO_SHFL2, MUT_NO_CAP, MUT_N };
static const char *mut_name[MUT_N] = {"none", "QK^T B registers swapped", "O correction factor dropped",
                                      "P A-registers 1/2 swapped", "max quad shuffle xor 2 dropped", "softcap dropped"};
static int mutant = MUT_NONE;

/* ---- shared memory with a shadow: phase and thread of the last write / read of each element ---- */
static int phase = 0;   /* bumped at every __syncthreads (and per block) */
typedef struct { int wph, wtid, rph, rtid; } shadow;
typedef struct { uint16_t *v; shadow *s; size_t n; const char *name; } shm16;
static void shm_init(shm16 *m, size_t n, const char *name) {
    m->v = malloc(n * 2); m->s = malloc(n * sizeof(shadow)); m->n = n; m->name = name;
    for (size_t i = 0; i < n; i++) { m->v[i] = 0xffff; m->s[i] = (shadow){-1, -1, -1, -1}; }   /* poison: NaN */
}
static void shm_free(shm16 *m) { free(m->v); free(m->s); }
static void sh_read(shadow *s, int tid, const char *name, size_t e) {
    CHECK(s->wph >= 0, "%s[%zu] read before any write (tid %d)", name, e, tid);
    CHECK(!(s->wph == phase && s->wtid != tid), "%s[%zu] race: read by %d, written by %d in the same phase", name, e, tid, s->wtid);
    if (s->rph == phase && s->rtid != tid) s->rtid = -2; else if (s->rph != phase) { s->rph = phase; s->rtid = tid; }
}
static void sh_write(shadow *s, int tid, const char *name, size_t e) {
    CHECK(!(s->wph == phase && s->wtid != tid), "%s[%zu] race: written by %d and %d in the same phase", name, e, tid, s->wtid);
    CHECK(!(s->rph == phase && s->rtid != tid), "%s[%zu] race: written by %d, read by %d in the same phase", name, e, tid, s->rtid);
    s->wph = phase; s->wtid = tid;
}
static uint32_t ld32(shm16 *m, size_t e, int tid) {
    CHECK(e % 2 == 0, "%s u32 read misaligned (elem %zu)", m->name, e);
    CHECK(e + 2 <= m->n, "%s u32 read OOB (elem %zu of %zu)", m->name, e, m->n);
    if (e % 2 || e + 2 > m->n) return 0;
    sh_read(&m->s[e], tid, m->name, e); sh_read(&m->s[e + 1], tid, m->name, e + 1);
    return (uint32_t)m->v[e] | ((uint32_t)m->v[e + 1] << 16);
}
static void stn(shm16 *m, size_t e, const uint16_t *v, int cnt, int tid) {   /* cnt halves, aligned to cnt */
    CHECK(e % cnt == 0, "%s %d-byte store misaligned (elem %zu)", m->name, 2 * cnt, e);
    CHECK(e + cnt <= m->n, "%s store OOB (elem %zu of %zu)", m->name, e, m->n);
    if (e % cnt || e + cnt > m->n) return;
    for (int i = 0; i < cnt; i++) { sh_write(&m->s[e + i], tid, m->name, e + i); m->v[e + i] = v[i]; }
}
/* one warp instruction's u32 shared reads: two lanes in the same bank at different words conflict */
static int max_ways_seen = 1;
static int bank_ways(const size_t words[32]) {
    int worst = 1;
    for (int b = 0; b < 32; b++) {
        size_t seen[32]; int ns = 0;
        for (int l = 0; l < 32; l++) {
            if (words[l] % 32 != (size_t)b) continue;
            int dup = 0; for (int k = 0; k < ns; k++) dup |= seen[k] == words[l];
            if (!dup) seen[ns++] = words[l];
        }
        worst = imax(worst, ns);
    }
    return worst;
}
static void bank_check(const size_t elems[32], const char *what) {   /* elems: bf16 element offsets */
    size_t w[32]; for (int l = 0; l < 32; l++) w[l] = elems[l] / 2;
    int ways = bank_ways(w);
    if (ways > max_ways_seen) max_ways_seen = ways;
    CHECK(ways == 1, "%d-way bank conflict on %s fragment read", ways, what);
}
/* the B fragments of an 8-column tile for warp w: lane (g, c2) reads the u32 at row r0 + g, column
 * k0 + c2 and k0 + c2 + 8 of a tile with rows of `stride` elements; bank-checked */
static void ld_frag_b(shm16 *m, size_t r0, size_t stride, size_t k0, int w, uint32_t b[32][2]) {
    size_t e0[32], e1[32];
    for (int lane = 0; lane < 32; lane++) {
        const size_t kb = (r0 + (size_t)(lane >> 2)) * stride + k0 + 2 * (lane & 3);
        e0[lane] = kb; e1[lane] = kb + 8;
        b[lane][0] = ld32(m, kb, w * 32 + lane);
        b[lane][1] = ld32(m, kb + 8, w * 32 + lane);
    }
    bank_check(e0, m->name); bank_check(e1, m->name);
}
static int svt_store_ways = 1, sk_store_ways = 1;   /* informational: store conflicts */

/* ---- the problem ---- */
typedef struct {
    int n, n_heads, n_kv, D, n_seqs, max_blocks, block_size, n_blocks, window;
    float scale, softcap; float *sinks;
    float *q; uint16_t *kp, *vp; int *pos, *seq, *bt;
} prob;

/* plain attention with cpu_attention.c's semantics, f64, over the bf16 cache values */
static void reference(const prob *P, double *out, int qbf16) {
    const int D = P->D, kvdim = P->n_kv * D;
    for (int t = 0; t < P->n; t++)
        for (int h = 0; h < P->n_heads; h++) {
            const int kvh = h / (P->n_heads / P->n_kv), pos = P->pos[t];
            const int lo = P->window > 0 && pos - P->window + 1 > 0 ? pos - P->window + 1 : 0;
            double *o = out + ((size_t)t * P->n_heads + h) * D;
            double *sc = malloc(sizeof(double) * (pos + 1)); long *off = malloc(sizeof(long) * (pos + 1));
            double M = -INFINITY;
            for (int p = lo; p <= pos; p++) {
                const int bi = p / P->block_size, blk = bi < P->max_blocks ? P->bt[P->seq[t] * P->max_blocks + bi] : -1;
                off[p] = blk < 0 || blk >= P->n_blocks ? -1 : ((long)blk * P->block_size + p % P->block_size) * kvdim + kvh * D;
                if (off[p] < 0) continue;
                double d = 0;
                const float *qr = P->q + ((size_t)t * P->n_heads + h) * D;
                if (qbf16)   /* the kernel's operand: q * scale rounded to bf16 */
                    for (int e = 0; e < D; e++) d += (double)bf2f(f2bf(qr[e] * P->scale)) * bf2f(P->kp[off[p] + e]);
                else {
                    for (int e = 0; e < D; e++) d += (double)qr[e] * bf2f(P->kp[off[p] + e]);
                    d *= P->scale;
                }
                if (P->softcap > 0.f) d = P->softcap * tanh(d / P->softcap);
                sc[p] = d; if (d > M) M = d;
            }
            double L = 0; for (int d = 0; d < D; d++) o[d] = 0;
            for (int p = lo; p <= pos; p++) if (off[p] >= 0) {
                const double e = exp(sc[p] - M); L += e;
                for (int d = 0; d < D; d++) o[d] += e * bf2f(P->vp[off[p] + d]);
            }
            if (L > 0) {
                const double Ld = P->sinks ? L + exp(P->sinks[h] - M) : L;
                for (int d = 0; d < D; d++) o[d] /= Ld;
            }
            free(sc); free(off);
        }
}

/* k_attn_mma<D>, transcribed: one block (tile bx, head h), 128 threads = 4 warps */
static void mma_block(const prob *P, const int (*tiles)[2], int ntiles, int bx, int h, float *out, int *wcnt) {
    const int D = P->D, QS = D + 8, KS = D + 8, VS = AM_TK + 8;
    const size_t nq = (size_t)P->n * P->n_heads * D, nkvs = (size_t)P->n_blocks * P->block_size * P->n_kv * D;
    shm16 sq, sk, svt;
    shm_init(&sq, (size_t)64 * QS, "sq"); shm_init(&sk, (size_t)AM_TK * KS, "sk"); shm_init(&svt, (size_t)D * VS, "svt");
    int sslot[AM_TK]; shadow sslot_sh[AM_TK];
    for (int i = 0; i < AM_TK; i++) { sslot[i] = INT_MIN; sslot_sh[i] = (shadow){-1, -1, -1, -1}; }
    int s_kmin = INT_MIN + 1, s_kmax = INT_MIN + 1;
    phase++;
    CHECK(bx < ntiles, "tiles read OOB");
    const int t0 = tiles[bx][0], nt = tiles[bx][1];
    CHECK(t0 >= 0 && t0 < P->n && nt >= 1 && nt <= 64 && t0 + nt <= P->n, "bad tile %d+%d", t0, nt);
    const int kvh = h / (P->n_heads / P->n_kv), kvdim = P->n_kv * D;
    CHECK(P->seq[t0] >= 0 && P->seq[t0] < P->n_seqs, "seq OOB");
    const size_t btr0 = (size_t)P->seq[t0] * P->max_blocks;
    const int pmax = P->max_blocks * P->block_size - 1;
    /* phase: s_kmin/s_kmax init (thread 0); Q staging, scaled, to bf16 */
    s_kmin = INT_MAX; s_kmax = -1;
    for (int tid = 0; tid < 128; tid++)
        for (int e = tid; e < 64 * (D / 2); e += 128) {
            const int r = e / (D / 2), d = 2 * (e % (D / 2));
            float vx = 0.f, vy = 0.f;
            if (r < nt) {
                const size_t o = ((size_t)(t0 + r) * P->n_heads + h) * D + d;
                CHECK(o % 2 == 0, "q float2 load misaligned"); CHECK(o + 2 <= nq, "q load OOB");
                vx = P->q[o]; vy = P->q[o + 1];
            }
            const uint32_t w = pack2(vx * P->scale, vy * P->scale);
            const uint16_t hv[2] = {(uint16_t)(w & 0xffff), (uint16_t)(w >> 16)};
            stn(&sq, (size_t)r * QS + d, hv, 2, tid);
        }
    phase++;   /* __syncthreads */
    /* phase: atomics on the key range; fragments of Q; per-thread state */
    for (int tid = 0; tid < 128; tid++)
        if (tid < nt) {
            CHECK(t0 + tid < P->n, "pos read OOB");
            const int p = P->pos[t0 + tid];
            s_kmax = imax(s_kmax, imin(p, pmax));
            s_kmin = imin(s_kmin, P->window > 0 ? imax(0, p - P->window + 1) : 0);
        }
    enum { MAXJ = 128 / 8, MAXS = 128 / 16 };
    static uint32_t qa[4][32][MAXS][4];
    static float o_[4][MAXJ][32][4];   /* [warp][j][lane][4]: the mma's C layout over lanes */
    static float m0[4][32], m1[4][32], l0[4][32], l1[4][32];
    static int qp0[4][32], qp1[4][32];
    for (int w = 0; w < 4; w++) {
        for (int s = 0; s < D / 16; s++)
            for (int reg = 0; reg < 4; reg++) {   /* each a warp-wide u32 load */
                size_t el[32];
                for (int lane = 0; lane < 32; lane++) {
                    const int g = lane >> 2, c2 = 2 * (lane & 3), rq = w * 16 + g;
                    const int row = reg & 1 ? rq + 8 : rq, col = 16 * s + (reg & 2 ? 8 : 0) + c2;
                    el[lane] = (size_t)row * QS + col;
                    qa[w][lane][s][reg] = ld32(&sq, el[lane], w * 32 + lane);
                }
                bank_check(el, "sq");
            }
        for (int lane = 0; lane < 32; lane++) {
            const int rq = w * 16 + (lane >> 2);
            if (rq < nt) CHECK(t0 + rq < P->n, "pos read OOB");
            qp0[w][lane] = rq < nt ? P->pos[t0 + rq] : -1;
            qp1[w][lane] = rq + 8 < nt ? P->pos[t0 + rq + 8] : -1;
            m0[w][lane] = m1[w][lane] = -INFINITY; l0[w][lane] = l1[w][lane] = 0.f;
            for (int j = 0; j < D / 8; j++) o_[w][j][lane][0] = o_[w][j][lane][1] = o_[w][j][lane][2] = o_[w][j][lane][3] = 0.f;
        }
    }
    phase++;   /* __syncthreads */
    const int kmin = s_kmin, kmax = s_kmax;
    for (int k0 = kmin; k0 <= kmax; k0 += AM_TK) {
        /* phase: slots of the tile's keys */
        for (int tid = 0; tid < AM_TK; tid++) {
            const int p = k0 + tid;
            int blk = -1;
            if (p <= kmax) {
                CHECK(p >= 0 && p / P->block_size < P->max_blocks, "bt read OOB p=%d", p);
                blk = P->bt[btr0 + p / P->block_size];
            }
            sh_write(&sslot_sh[tid], tid, "sslot", tid);
            sslot[tid] = blk >= 0 && blk < P->n_blocks ? blk * P->block_size + p % P->block_size : -1;
        }
        phase++;   /* __syncthreads */
        /* phase: K rows and V transposed to shared, 16 bytes a step */
        const int lim = AM_TK * (D / 8);
        for (int it = 0; it * 128 < lim; it++)
            for (int w = 0; w < 4; w++) {
                size_t vel[8][32], kel[32]; int act = 0;
                for (int lane = 0; lane < 32; lane++) {
                    const int tid = w * 32 + lane, e = tid + 128 * it;
                    if (e >= lim) continue;
                    act++;
                    const int j = e % AM_TK, d8 = 8 * (e / AM_TK);   /* lanes take different keys */
                    sh_read(&sslot_sh[j], tid, "sslot", j);
                    const int sl = sslot[j];
                    uint16_t kv[8] = {0}, vv[8] = {0};
                    if (sl >= 0) {
                        const size_t o = (size_t)sl * kvdim + (size_t)kvh * D + d8;
                        CHECK(o % 8 == 0, "kv uint4 load misaligned"); CHECK(o + 8 <= nkvs, "kv load OOB (slot %d)", sl);
                        if (o + 8 <= nkvs) { memcpy(kv, P->kp + o, 16); memcpy(vv, P->vp + o, 16); }
                    }
                    stn(&sk, (size_t)j * KS + d8, kv, 8, tid);
                    kel[lane] = (size_t)j * KS + d8;
                    for (int i = 0; i < 8; i++) { stn(&svt, (size_t)(d8 + i) * VS + j, &vv[i], 1, tid); vel[i][lane] = ((size_t)(d8 + i) * VS + j) / 2; }
                }
                if (act == 32) {
                    for (int i = 0; i < 8; i++) svt_store_ways = imax(svt_store_ways, bank_ways(vel[i]));
                    for (int q8 = 0; q8 < 4; q8++) {   /* a quarter warp's 8 x 16 bytes: 32 words */
                        size_t wd[32];
                        for (int l = 0; l < 32; l++) wd[l] = kel[q8 * 8 + l / 4] / 2 + l % 4;
                        sk_store_ways = imax(sk_store_ways, bank_ways(wd));
                    }
                }
            }
        phase++;   /* __syncthreads */
        /* phase: each warp: S = Q K^T, online softmax, O += P V */
        for (int w = 0; w < 4; w++) {
            static float s[AM_TK / 8][32][4];
            memset(s, 0, sizeof s);
            for (int ks = 0; ks < D / 16; ks++)
                for (int j = 0; j < AM_TK / 8; j++) {
                    uint32_t a[32][4], b[32][2];
                    ld_frag_b(&sk, 8 * j, KS, 16 * ks, w, b);
                    for (int lane = 0; lane < 32; lane++) {
                        if (mutant == MUT_SWAP_B) { uint32_t x = b[lane][0]; b[lane][0] = b[lane][1]; b[lane][1] = x; }
                        memcpy(a[lane], qa[w][lane][ks], sizeof a[lane]);
                    }
                    mma_emul(s[j], a, b);
                }
            float mx0[32], mx1[32];
            for (int lane = 0; lane < 32; lane++) {
                const int c2 = 2 * (lane & 3);
                mx0[lane] = mx1[lane] = -INFINITY;
                for (int j = 0; j < AM_TK / 8; j++)
                    for (int i = 0; i < 4; i++) {
                        const int kk = 8 * j + c2 + (i & 1), kpos = k0 + kk, qpp = i < 2 ? qp0[w][lane] : qp1[w][lane];
                        sh_read(&sslot_sh[kk], w * 32 + lane, "sslot", kk);
                        const int ok = sslot[kk] >= 0 && kpos <= qpp && (P->window <= 0 || kpos > qpp - P->window);
                        float v = s[j][lane][i];
                        if (P->softcap > 0.f && mutant != MUT_NO_CAP) v = P->softcap * tanhf(v / P->softcap);
                        v = ok ? v : -INFINITY;
                        s[j][lane][i] = v;
                        if (i < 2) mx0[lane] = fmaxf(mx0[lane], v); else mx1[lane] = fmaxf(mx1[lane], v);
                    }
            }
            for (int x = 1; x <= 2; x *= 2) {   /* __shfl_xor_sync(.., x): every lane reads the old value of lane ^ x */
                if (mutant == MUT_NO_SHFL2 && x == 2) break;
                float n0[32], n1[32];
                for (int lane = 0; lane < 32; lane++) { n0[lane] = fmaxf(mx0[lane], mx0[lane ^ x]); n1[lane] = fmaxf(mx1[lane], mx1[lane ^ x]); }
                memcpy(mx0, n0, sizeof n0); memcpy(mx1, n1, sizeof n1);
            }
            for (int lane = 0; lane < 32; lane++) {
                const float mn0 = fmaxf(m0[w][lane], mx0[lane]), mn1 = fmaxf(m1[w][lane], mx1[lane]);
                float cr0 = mn0 == -INFINITY ? 1.f : expf(m0[w][lane] - mn0), cr1 = mn1 == -INFINITY ? 1.f : expf(m1[w][lane] - mn1);
                if (mutant == MUT_NO_CORR) cr0 = cr1 = 1.f;
                m0[w][lane] = mn0; m1[w][lane] = mn1;
                l0[w][lane] *= cr0; l1[w][lane] *= cr1;
                for (int j = 0; j < AM_TK / 8; j++) {
                    float *sj = s[j][lane];
                    sj[0] = mn0 == -INFINITY ? 0.f : expf(sj[0] - mn0);
                    sj[1] = mn0 == -INFINITY ? 0.f : expf(sj[1] - mn0);
                    sj[2] = mn1 == -INFINITY ? 0.f : expf(sj[2] - mn1);
                    sj[3] = mn1 == -INFINITY ? 0.f : expf(sj[3] - mn1);
                    l0[w][lane] += sj[0] + sj[1];
                    l1[w][lane] += sj[2] + sj[3];
                }
                for (int j = 0; j < D / 8; j++) {
                    float *oj = o_[w][j][lane];
                    oj[0] *= cr0; oj[1] *= cr0; oj[2] *= cr1; oj[3] *= cr1;
                }
            }
            for (int s2 = 0; s2 < AM_TK / 16; s2++) {
                uint32_t pa[32][4];
                for (int lane = 0; lane < 32; lane++) {
                    const float *x0 = s[2 * s2][lane], *x1 = s[2 * s2 + 1][lane];
                    pa[lane][0] = pack2(x0[0], x0[1]); pa[lane][1] = pack2(x0[2], x0[3]);
                    pa[lane][2] = pack2(x1[0], x1[1]); pa[lane][3] = pack2(x1[2], x1[3]);
                    if (mutant == MUT_PA_SWAP) { uint32_t x = pa[lane][1]; pa[lane][1] = pa[lane][2]; pa[lane][2] = x; }
                }
                for (int j = 0; j < D / 8; j++) {
                    uint32_t b[32][2];
                    ld_frag_b(&svt, 8 * j, VS, 16 * s2, w, b);
                    mma_emul(o_[w][j], pa, b);
                }
            }
        }
        phase++;   /* __syncthreads: the tile's K/V are consumed before the next load */
    }
    /* epilogue: quad sums of l, sink, stores */
    for (int w = 0; w < 4; w++) {
        for (int x = 1; x <= 2; x *= 2) {
            float n0[32], n1[32];
            for (int lane = 0; lane < 32; lane++) { n0[lane] = l0[w][lane] + l0[w][lane ^ x]; n1[lane] = l1[w][lane] + l1[w][lane ^ x]; }
            memcpy(l0[w], n0, sizeof n0); memcpy(l1[w], n1, sizeof n1);
        }
        for (int lane = 0; lane < 32; lane++) {
            const int g = lane >> 2, c2 = 2 * (lane & 3), rq = w * 16 + g;
            if (P->sinks) {
                CHECK(h < P->n_heads, "sinks OOB");
                if (m0[w][lane] != -INFINITY) l0[w][lane] += expf(P->sinks[h] - m0[w][lane]);
                if (m1[w][lane] != -INFINITY) l1[w][lane] += expf(P->sinks[h] - m1[w][lane]);
            }
            for (int hf = 0; hf < 2; hf++) {
                const int r = rq + 8 * hf;
                if (r >= nt) continue;
                const float L = hf ? l1[w][lane] : l0[w][lane], inv = L > 0.f ? 1.f / L : 0.f;
                const size_t ob = ((size_t)(t0 + r) * P->n_heads + h) * D;
                for (int j = 0; j < D / 8; j++) {
                    const size_t oi = ob + 8 * j + c2;
                    CHECK(oi % 2 == 0, "out float2 store misaligned"); CHECK(oi + 2 <= nq, "out store OOB");
                    if (oi + 2 > nq) continue;
                    out[oi] = o_[w][j][lane][2 * hf] * inv; out[oi + 1] = o_[w][j][lane][2 * hf + 1] * inv;
                    wcnt[oi]++; wcnt[oi + 1]++;
                }
            }
        }
    }
    shm_free(&sq); shm_free(&sk); shm_free(&svt);
}

/* launch_attn_tiled's host part for the mma path, transcribed; returns the number of tiles, 0 when it declines */
static int mma_launch(const prob *P, float *out, int *wcnt, int (*tl)[2]) {
    const int n = P->n, D = P->D;
    if (n < 16 || D % 4 || D > 256) return 0;
    for (int t = 0; t < n; t++) if (P->seq[t] < 0 || P->seq[t] >= P->n_seqs || P->pos[t] < 0) return 0;
    int nt = 0;
    for (int t = 0; t < n;) {
        int e = t + 1;
        while (e < n && e - t < ATT_TQ && P->seq[e] == P->seq[t]) e++;
        tl[nt][0] = t; tl[nt][1] = e - t; nt++;
        t = e;
    }
    if (nt * 4 > n) return 0;
    if (!(D == 32 || D == 64 || D == 128)) return 0;
    for (int b = 0; b < nt; b++) for (int h = 0; h < P->n_heads; h++) mma_block(P, (const int (*)[2])tl, nt, b, h, out, wcnt);
    return nt;
}

/* seqs: n_seqs sequences of lens[s] tokens starting at starts[s] (earlier positions already cached) */
typedef struct { const char *name; int n_seqs; int lens[3], starts[3]; } layout;
static const layout layouts[] = {
    {"tiles 64+37+1", 2, {101, 1}, {0, 50}},
    {"prefill 150", 1, {150}, {0}},
    {"chunk at pos 70", 1, {100}, {70}},
    {"2 seqs, 2nd chunk", 2, {30, 90}, {0, 100}},
};

#define TOL 2e-2    /* against the exact reference: bf16 Q and P */
#define TOLQ 1e-2   /* against the reference with the kernel's bf16 Q: bf16 P only */
#define QAMP_CAP 8.f

/* worst row-relative error (max |out - ref| over the row / the row's max |ref|; absolute where the
 * reference row is all zeros) */
static double row_err(const double *ref, const float *o, int n_rows, int D) {
    double worst = 0;
    for (int r = 0; r < n_rows; r++) {
        double rmax = 0, emax = 0;
        for (int d = 0; d < D; d++) {
            rmax = fmax(rmax, fabs(ref[(size_t)r * D + d]));
            const double e = isnan(o[(size_t)r * D + d]) ? INFINITY : fabs(o[(size_t)r * D + d] - ref[(size_t)r * D + d]);
            emax = fmax(emax, e);
        }
        const double rel = rmax > 0 ? emax / rmax : emax;
        if (!(rel <= worst)) worst = rel;   /* NaN counts as worst */
    }
    return worst;
}

typedef struct { double err, errq; int bad, ntiles; } result;

/* one case: err against the exact reference, errq against the one with the kernel's bf16 Q;
 * bad = failed access / write checks */
static result run_case(int seed, int D, int gqa, int li, int window, float softcap, int use_sinks, int bad_blocks) {
    srand(seed);
    const layout *ly = &layouts[li];
    result R = {0, 0, 0, 0};
    prob P; memset(&P, 0, sizeof P);
    P.D = D; P.n_heads = gqa ? 8 : 3; P.n_kv = gqa ? 2 : 3;
    P.block_size = 16; P.max_blocks = 12; P.n_blocks = 40; P.n_seqs = ly->n_seqs;
    P.window = window; P.softcap = softcap; P.scale = 1.f / sqrtf((float)D);
    P.n = 0; for (int s = 0; s < ly->n_seqs; s++) P.n += ly->lens[s];
    const float qamp = softcap > 0.f ? QAMP_CAP : 3.f;   /* softcap cases: scores large enough for tanh to bend */
    P.q = malloc(sizeof(float) * P.n * P.n_heads * D);
    for (int i = 0; i < P.n * P.n_heads * D; i++) P.q[i] = frand() * qamp;
    const size_t ns = (size_t)P.n_blocks * P.block_size * P.n_kv * D;
    P.kp = malloc(ns * 2); P.vp = malloc(ns * 2);
    for (size_t i = 0; i < ns; i++) { P.kp[i] = f2bf(frand()); P.vp[i] = f2bf(frand()); }
    P.pos = malloc(4 * P.n); P.seq = malloc(4 * P.n);
    for (int s = 0, t = 0; s < ly->n_seqs; s++)
        for (int i = 0; i < ly->lens[s]; i++, t++) { P.seq[t] = s; P.pos[t] = ly->starts[s] + i; }
    /* shuffled block table: a permutation of the blocks */
    int perm[40]; for (int i = 0; i < 40; i++) perm[i] = i;
    for (int i = 39; i > 0; i--) { int k = rand() % (i + 1), x = perm[i]; perm[i] = perm[k]; perm[k] = x; }
    P.bt = malloc(4 * P.n_seqs * P.max_blocks);
    for (int i = 0; i < P.n_seqs * P.max_blocks; i++) P.bt[i] = perm[i];
    if (bad_blocks) { P.bt[1] = -1; P.bt[3] = P.n_blocks + 5; P.bt[P.n_seqs * P.max_blocks - 5] = 1 << 30; }
    if (use_sinks) { P.sinks = malloc(4 * P.n_heads); for (int h = 0; h < P.n_heads; h++) P.sinks[h] = frand() * 3.f; }
    const size_t no = (size_t)P.n * P.n_heads * D;
    double *ref = malloc(no * sizeof(double)), *refq = malloc(no * sizeof(double));
    float *o = malloc(no * 4); int *wc = calloc(no, sizeof(int));
    for (size_t i = 0; i < no; i++) o[i] = NAN;
    reference(&P, ref, 0); reference(&P, refq, 1);
    int (*tl)[2] = malloc(sizeof(int[2]) * P.n);
    const int cf0 = check_fails;
    R.ntiles = mma_launch(&P, o, wc, tl);
    CHECK(R.ntiles > 0, "launch declined");
    int writes_bad = 0;
    for (size_t i = 0; i < no; i++) writes_bad += wc[i] != 1;
    CHECK(writes_bad == 0, "%d output elements not written exactly once", writes_bad);
    R.err = row_err(ref, o, P.n * P.n_heads, D);
    R.errq = row_err(refq, o, P.n * P.n_heads, D);
    R.bad = check_fails - cf0;
    free(P.q); free(P.kp); free(P.vp); free(P.pos); free(P.seq); free(P.bt); free(P.sinks);
    free(ref); free(refq); free(o); free(wc); free(tl);
    return R;
}

static int result_ok(result r) { return r.err < TOL && r.errq < TOLQ && !r.bad; }

int main(void) {
    static const struct { int window; float softcap; int sinks; } feats[] = {{0, 0.f, 0}, {16, 0.f, 0}, {0, 30.f, 1}, {16, 30.f, 1}};
    static const int Ds[] = {32, 64, 128};
    int seed = 1;
    double worst = 0, worstq = 0;
    printf("errors: exact reference / reference with bf16 Q, for: plain | window 16 | softcap 30 + sinks | all three\n");
    for (int di = 0; di < 3; di++)
        for (int gqa = 0; gqa < 2; gqa++)
            for (int li = 0; li < 4; li++) {
                char fe[160] = ""; int ok = 1, nt = 0;
                for (int fi = 0; fi < 4; fi++) {
                    const result r = run_case(seed++, Ds[di], gqa, li, feats[fi].window, feats[fi].softcap, feats[fi].sinks, 0);
                    snprintf(fe + strlen(fe), sizeof fe - strlen(fe), "%s%.1e/%.1e", fi ? " | " : "", r.err, r.errq);
                    if (!result_ok(r)) { ok = 0; fails++; }
                    if (!(r.err <= worst)) worst = r.err;
                    if (!(r.errq <= worstq)) worstq = r.errq;
                    nt = r.ntiles;
                }
                printf("D=%3d %s %-17s %d tiles: %s %s\n", Ds[di], gqa ? "GQA 8/2" : "MHA 3/3", layouts[li].name, nt, fe, ok ? "OK" : "MISMATCH");
            }
    /* bad blocks in the table (-1, past n_blocks): skipped, never read */
    for (int di = 0; di < 3; di++) {
        const result r = run_case(seed++, Ds[di], 1, 3, 0, 0.f, 1, 1);
        if (!result_ok(r)) fails++;
        if (!(r.err <= worst)) worst = r.err;
        if (!(r.errq <= worstq)) worstq = r.errq;
        printf("D=%3d GQA 8/2 bad block-table entries (-1, >= n_blocks), sinks: %.1e/%.1e, failed checks %d %s\n", Ds[di],
               r.err, r.errq, r.bad, result_ok(r) ? "OK" : "MISMATCH");
    }
    printf("fragment reads (sq, sk, svt): worst bank conflict %d-way (1 = none); stores (info, performance only): "
           "svt transposed up to %d-way, sk 16-byte up to %d-way\n", max_ways_seen, svt_store_ways, sk_store_ways);
    /* mutants: the simulation must catch each */
    for (int m = 1; m < MUT_N; m++) {
        mutant = m; quiet = 1;
        int caught = 0; double e = 0;
        for (int di = 0; di < 3; di++) {
            const result r = run_case(1000 + di, Ds[di], 1, 1, 0, 30.f, 1, 0);
            if (!(r.err <= e)) e = r.err;
            caught |= !result_ok(r);
        }
        mutant = MUT_NONE; quiet = 0;
        printf("mutant \"%s\": worst err %.1e -> %s\n", mut_name[m], e, caught ? "caught" : "NOT CAUGHT");
        if (!caught) fails++;
    }
    printf("worst error over all cases: %.2e vs exact (tolerance %.0e), %.2e vs bf16-Q reference (tolerance %.0e), of the row's max |out|\n",
           worst, TOL, worstq, TOLQ);
    if (fails) printf("SIM: %d failures\n", fails); else printf("SIM: all OK\n");
    return fails != 0;
}
