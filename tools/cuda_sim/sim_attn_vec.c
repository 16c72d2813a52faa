/* tools/cuda_sim/sim_attn_vec.c: desk simulation of the decode attention kernel k_attn_vec<T, D, G, W, U>
 * with its helpers halve_sum, att_merge, att_zero and quant_group, and of the instantiation choice
 * of launch_attn / launch_attn_vec / launch_attn_vec_d (mlxcel src/backend/cuda/backend_cuda.cu).
 * Every block, warp and lane runs: lane state in arrays [32], __shfl_xor_sync / __shfl_sync over
 * the 32 lanes of a warp (every lane reads before any writes), the phases between __syncwarp /
 * __syncthreads in order. Shared memory (ss, sacc, sm, sl, sbt) is poisoned with NaN and
 * shadowed: every read must be of a location written earlier, in an earlier phase (same warp:
 * separated by __syncwarp; other warps: by __syncthreads), every write must not race a read or a
 * write of another thread in its phase (same-value stores of replicated lanes of one warp are
 * counted, not failed), and the ss entries the softmax reads must be the scores of that chunk,
 * those the p-v loop reads its probabilities. Global reads are checked for bounds and alignment,
 * every output element (out, the int8 xq and its xds pairs) for being written exactly once.
 * Compared with a plain f64 reference of the CPU backend's attention semantics (cpu_attention.c)
 * over the same bf16-rounded cache; mutants of the kernel must be caught.
 * It is not a timing or register model, and not part of the test suite; the kernel's own tests
 * run on a GPU. Transcribed from the kernel as of 2026-11-29 (commit 3ce6949).
 *   gcc -O2 -Wall -o /tmp/sim_attn_vec tools/cuda_sim/sim_attn_vec.c -lm && /tmp/sim_attn_vec */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"   /* mma_emul, unused here */
#include "mma_emul.h"   /* f2bf / bf2f: the cache's bf16 rounding */
#pragma GCC diagnostic pop

static int fails = 0, quiet = 0, check_fails = 0;
static char first_msg[200];   /* quiet (mutants): the first failed check */
#define CHECK(c, ...) do { if (!(c)) { check_fails++; \
    if (quiet) { if (!first_msg[0]) snprintf(first_msg, sizeof first_msg, __VA_ARGS__); } \
    else if (fails++ < 20) { printf("FAIL: " __VA_ARGS__); printf("\n"); } } } while (0)
static float frand(void) { return (float)rand() / RAND_MAX * 2.f - 1.f; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
/* __float2int_rn: round to nearest even, saturating, NaN to 0 (NaN / inf only reach it in mutants) */
static int f2i_rn(float x) { return x != x ? 0 : x >= 2147483520.f ? 2147483647 : x <= -2147483648.f ? (-2147483647 - 1) : (int)rintf(x); }

enum { MUT_NONE, MUT_HALF_SWAP, MUT_NO_BASE, MUT_SEG_HALF, MUT_CORR_LANE, MUT_NO_SYNC_NEXT, MUT_MAX_ONE_KG,
       MUT_NO_SYNC_SCORES, MUT_NO_KG_ACC_SUM, MUT_NO_OKMASK, MUT_NO_PROB_STORE, MUT_N };
static const char *mut_name[MUT_N] = {
    "none",
    "halve_sum upper/lower half choice swapped",
    "halve_sum base offset not advanced",
    "chunk max over SEG/2 lanes",
    "corr broadcast from the next segment's lane",
    "__syncwarp before the next chunk's score writes removed",
    "chunk max not combined across key groups (over U lanes)",
    "__syncwarp between score writes and softmax removed",
    "key groups' outputs not added (xor from 2 LPK)",
    "bad-key mask (okm) ignored",
    "probabilities not stored over the scores (p-v reads the scores)",
};
static int mutant = MUT_NONE;

/* ---------------- the problem ---------------- */
typedef struct {
    int es;   /* cache element size: 2 bf16, 4 f32 */
    int n, n_heads, n_kv, D, n_seqs, max_blocks, block_size, n_blocks, window;
    float scale, softcap; float *sinks;
    float *q; uint8_t *kp, *vp; int *pos, *seq, *bt;
} prob;
static float kv_at(const prob *P, const uint8_t *base, size_t e) {
    if (P->es == 2) { uint16_t h; memcpy(&h, base + 2 * e, 2); return bf2f(h); }
    float f; memcpy(&f, base + 4 * e, 4); return f;
}

/* one instantiation k_attn_vec<T, D, G, W, U> (T by its size) */
typedef struct { int es, D, G, W, U, launched; } inst;

/* ---------------- shared memory with a shadow ---------------- */
static int bphase = 0, wphase = 0;   /* bphase: bumped at __syncthreads; wphase: at every __syncwarp or __syncthreads */
static long chunk_serial = 0;        /* ss tags: 2 chunk (score), 2 chunk + 1 (probability) */
static long redundant_writes = 0;    /* same-value stores to one location by lanes of one warp in one phase */
static void sync_threads(void) { bphase++; wphase++; }
static void sync_warp(void) { wphase++; }
typedef struct { int wb, ww, wtid, rb, rw, rtid, rmulti; long tag; } shadow;
typedef struct { uint32_t *v; shadow *s; size_t n; const char *name; } shm;
static void shm_init(shm *m, size_t n, const char *name) {
    m->v = malloc(n * 4); m->s = malloc(n * sizeof(shadow)); m->n = n; m->name = name;
    for (size_t i = 0; i < n; i++) { m->v[i] = 0x7fc00000u; m->s[i] = (shadow){-1, -1, -1, -1, -1, -1, 0, -1}; }   /* NaN */
}
static void shm_free(shm *m) { free(m->v); free(m->s); }
/* threads a and b in one phase: same warp, no __syncwarp between; other warps, no __syncthreads */
static int same_phase(int b, int w, int tid_a, int tid_b) { return (tid_a >> 5) == (tid_b >> 5) ? w == wphase : b == bphase; }
static uint32_t sh_rd(shm *m, size_t e, int tid, long want_tag) {
    CHECK(e < m->n, "%s[%zu] read out of bounds (%zu)", m->name, e, m->n);
    if (e >= m->n) return 0x7fc00000u;
    shadow *s = &m->s[e];
    CHECK(s->wtid >= 0, "%s[%zu] read before any write (tid %d)", m->name, e, tid);
    CHECK(!(s->wtid >= 0 && s->wtid != tid && same_phase(s->wb, s->ww, s->wtid, tid)),
          "%s[%zu] race: read by %d, written by %d in the same phase", m->name, e, tid, s->wtid);
    if (want_tag >= 0) CHECK(s->tag == want_tag, "%s[%zu] read by %d holds tag %ld, not this chunk's %ld", m->name, e, tid, s->tag, want_tag);
    if (s->rb == bphase && s->rw == wphase) { if (s->rtid != tid) s->rmulti = 1; }
    else { s->rb = bphase; s->rw = wphase; s->rtid = tid; s->rmulti = 0; }
    return m->v[e];
}
static void sh_wr(shm *m, size_t e, uint32_t val, int tid, long tag) {
    CHECK(e < m->n, "%s[%zu] write out of bounds (%zu)", m->name, e, m->n);
    if (e >= m->n) return;
    shadow *s = &m->s[e];
    if (s->wtid >= 0 && s->wtid != tid && same_phase(s->wb, s->ww, s->wtid, tid)) {
        const int benign = (s->wtid >> 5) == (tid >> 5) && m->v[e] == val && s->tag == tag;
        if (benign) redundant_writes++;
        CHECK(benign, "%s[%zu] race: written by %d and %d in the same phase (different values)", m->name, e, s->wtid, tid);
    }
    CHECK(!(s->rtid >= 0 && (s->rtid != tid || s->rmulti) && same_phase(s->rb, s->rw, s->rtid, tid)),
          "%s[%zu] race: written by %d, read by %d%s in the same phase", m->name, e, tid, s->rtid, s->rmulti ? " and others" : "");
    s->wb = bphase; s->ww = wphase; s->wtid = tid; s->tag = tag;
    m->v[e] = val;
}

/* ---------------- outputs ---------------- */
typedef struct { float *out; int8_t *xq; float *xds; int *wout, *wxq, *wxds; size_t no; } outs;
static void put_out(outs *O, size_t i, float v) {
    CHECK(i < O->no, "out store OOB"); if (i >= O->no) return;
    O->out[i] = v; O->wout[i]++;
}
/* quant_group over a warp: the values a[] of lanes 0..31 to codes at xq[i[lane]], lane 0 the pair */
static void quant_group_w(const float a[32], const size_t i[32], outs *O) {
    for (int l = 0; l < 32; l++) CHECK(i[l] == i[0] + (size_t)l && i[0] % 32 == 0, "quant_group: lanes not one aligned group of 32");
    float mx[32];
    for (int l = 0; l < 32; l++) mx[l] = fabsf(a[l]);
    for (int o = 16; o > 0; o >>= 1) {   /* warp_max */
        float s[32]; memcpy(s, mx, sizeof s);
        for (int l = 0; l < 32; l++) mx[l] = fmaxf(s[l], s[l ^ o]);
    }
    int qs[32]; long long sum = 0;
    for (int l = 0; l < 32; l++) { qs[l] = f2i_rn(a[l] * (mx[l] > 0.f ? 127.f / mx[l] : 0.f)); sum += qs[l]; }   /* __reduce_add_sync */
    for (int l = 0; l < 32; l++) {
        CHECK(i[l] < O->no, "xq store OOB"); if (i[l] >= O->no) continue;
        O->xq[i[l]] = (int8_t)qs[l]; O->wxq[i[l]]++;
        if (l == 0) {
            const float dx = mx[0] * (1.f / 127.f);
            O->xds[2 * (i[0] >> 5)] = dx; O->xds[2 * (i[0] >> 5) + 1] = dx * (float)sum; O->wxds[i[0] >> 5]++;
        }
    }
}
/* att_zero: thread tid writes d = tid, tid + nthr, .. */
static void att_zero(outs *O, size_t ob, int count, int nthr) {
    for (int tid = 0; tid < nthr; tid++)
        for (int d = tid; d < count; d += nthr) {
            put_out(O, ob + d, 0.f);
            if (O->xq) {
                O->xq[ob + d] = 0; O->wxq[ob + d]++;
                if (!((ob + d) & 31)) { O->xds[2 * ((ob + d) >> 5)] = 0.f; O->xds[2 * ((ob + d) >> 5) + 1] = 0.f; O->wxds[(ob + d) >> 5]++; }
            }
        }
}

/* ---------------- halve_sum<N, O>, over the 32 lanes of a warp ---------------- */
#define MAXNV 32
static void halve_sum(float v[32][MAXNV], int N, int O, int base[32]) {
    if (O <= 0) return;
    if (N > 1) {
        for (int i = 0; i < N / 2; i++) {
            float send[32], keep[32];
            for (int lane = 0; lane < 32; lane++) {
                int up = (lane & O) != 0;
                if (mutant == MUT_HALF_SWAP) up = !up;
                send[lane] = up ? v[lane][i] : v[lane][i + N / 2];
                keep[lane] = up ? v[lane][i + N / 2] : v[lane][i];
            }
            for (int lane = 0; lane < 32; lane++) v[lane][i] = keep[lane] + send[lane ^ O];   /* __shfl_xor_sync(send, O) */
        }
        for (int lane = 0; lane < 32; lane++) if ((lane & O) && mutant != MUT_NO_BASE) base[lane] += N / 2;
        halve_sum(v, N / 2, O / 2, base);
    } else {
        float s[32];
        for (int lane = 0; lane < 32; lane++) s[lane] = v[lane][0];
        for (int lane = 0; lane < 32; lane++) v[lane][0] += s[lane ^ O];
        halve_sum(v, 1, O / 2, base);
    }
}

static void unpack16(const uint32_t w[4], int es, float *f) {   /* unpack_word over a 16-byte vector */
    for (int i = 0; i < 4; i++) {
        if (es == 2) { f[2 * i] = u2f(w[i] << 16); f[2 * i + 1] = u2f(w[i] & 0xffff0000u); }
        else f[i] = u2f(w[i]);
    }
}

/* ---------------- k_attn_vec<T, D, G, W, U>: one block (token bx, query heads by G ..) ---------------- */
static void vec_block(const prob *P, const inst *I, int bx, int by, int sbt_n, outs *O) {
    const int es = I->es, D = I->D, G = I->G, W = I->W, U = I->U;
    const int VPL = 16 / es, LPK = D / VPL, KPL = 32 / LPK, CH = KPL * U;
    const int NV = G * U, REM = NV >= LPK ? NV / LPK : 1, E = G * CH, NJ = (E + 31) / 32, SEG = CH < 32 ? CH : 32;
    CHECK(D % VPL == 0 && LPK >= 1 && LPK <= 32 && 32 % LPK == 0, "static_assert: a K row is 1..32 lanes' 16-byte vectors");
    CHECK(CH <= 32 && (CH & (CH - 1)) == 0 && U <= 32, "static_assert: a chunk is at most 32 keys, a power of two");
    CHECK(NV <= MAXNV && G <= 4 && VPL <= 8 && U <= 8 && W <= 16 && NJ <= 4, "simulation limits");
    const int nthr = W * 32;
    const int t = bx, h0 = by * G;
    CHECK(t < P->n, "pos/seq read OOB");
    const int grp = P->n_heads / P->n_kv, kvh = h0 / grp, kvdim = P->n_kv * D;
    CHECK((h0 + G - 1) / grp == kvh && h0 + G <= P->n_heads, "the G heads of a block are not of one KV head");
    int bshift = 0; while ((1 << bshift) < P->block_size) bshift++;
    CHECK((1 << bshift) == P->block_size, "block size not a power of two");
    const int bmask = (1 << bshift) - 1;
    bphase++; wphase++;   /* a new block */
    if (P->seq[t] < 0 || P->seq[t] >= P->n_seqs || P->pos[t] < 0) { att_zero(O, ((size_t)t * P->n_heads + h0) * D, G * D, nthr); return; }
    shm sm, sl, sacc, ss, sbt;
    shm_init(&sm, (size_t)W * G, "sm"); shm_init(&sl, (size_t)W * G, "sl"); shm_init(&sacc, (size_t)W * G * D, "sacc");
    shm_init(&ss, (size_t)W * G * KPL * U, "ss"); shm_init(&sbt, (size_t)(sbt_n > 0 ? sbt_n : 1), "sbt");
    static float qv[16][32][4][8], acc[16][32][4][8], mj[16][32][4], lj[16][32][4];
    const size_t nq = (size_t)P->n * P->n_heads * D, nkv = (size_t)P->n_blocks * P->block_size * kvdim;
    /* phase 1: q (float4 loads, scaled), state, the block table to shared memory */
    for (int w = 0; w < W; w++)
        for (int lane = 0; lane < 32; lane++) {
            const int d0 = (lane % LPK) * VPL;
            for (int g = 0; g < G; g++) {
                const size_t qo = ((size_t)t * P->n_heads + h0 + g) * D + d0;
                for (int i = 0; i < VPL / 4; i++) {
                    CHECK((qo + 4 * i) % 4 == 0 && qo + 4 * i + 4 <= nq, "q float4 load misaligned / OOB");
                    for (int k = 0; k < 4; k++) qv[w][lane][g][4 * i + k] = P->q[qo + 4 * i + k] * P->scale;
                }
                for (int j = 0; j < VPL; j++) acc[w][lane][g][j] = 0.f;
            }
            for (int j = 0; j < NJ; j++) { mj[w][lane][j] = -INFINITY; lj[w][lane][j] = 0.f; }
        }
    const int pmax = (P->max_blocks << bshift) - 1;
    const int p_end = P->pos[t] < pmax ? P->pos[t] : pmax;
    const int p0 = P->window > 0 ? (P->pos[t] - P->window + 1 > 0 ? P->pos[t] - P->window + 1 : 0) : 0;
    const size_t btr0 = (size_t)P->seq[t] * P->max_blocks;
    if (sbt_n > 0) {
        const int nb = (p_end >> bshift) + 1 < sbt_n ? (p_end >> bshift) + 1 : sbt_n;
        for (int tid = 0; tid < nthr; tid++)
            for (int i = tid; i < nb; i += nthr) {
                CHECK(i < P->max_blocks, "bt read OOB (entry %d)", i);
                sh_wr(&sbt, i, (uint32_t)P->bt[btr0 + i], tid, -1);
            }
        sync_threads();
    }
    /* phase 2: each warp's chunks (warps are independent until the __syncthreads) */
    for (int w = 0; w < W; w++) {
        const size_t sw = (size_t)w * G * KPL * U;   /* ssw */
        for (int c0 = p0 + w * CH; c0 <= p_end; c0 += W * CH) {
            const long ch = ++chunk_serial;
            static uint32_t kr[32][8][4], vr[32][8][4];
            uint32_t okm[32];
            for (int lane = 0; lane < 32; lane++) {
                const int tid = w * 32 + lane, kg = lane / LPK, d0 = (lane % LPK) * VPL;
                okm[lane] = 0;
                for (int u = 0; u < U; u++) {
                    const int pj = c0 + u * KPL + kg;
                    int blk = -1;
                    if (pj <= p_end) {
                        const int bi = pj >> bshift;
                        if (sbt_n > 0) blk = (int)sh_rd(&sbt, bi, tid, -1);
                        else { CHECK(bi >= 0 && bi < P->max_blocks, "bt read OOB (entry %d)", bi); blk = P->bt[btr0 + bi]; }
                    }
                    int ok = blk >= 0 && blk < P->n_blocks;
                    if (mutant == MUT_NO_OKMASK) ok = 1;
                    okm[lane] |= (uint32_t)ok << u;
                    memset(kr[lane][u], 0, 16); memset(vr[lane][u], 0, 16);
                    if (blk >= 0 && blk < P->n_blocks) {
                        const size_t o = ((size_t)blk << bshift | (size_t)(pj & bmask)) * kvdim + (size_t)kvh * D + d0;
                        CHECK((o * es) % 16 == 0 && o + VPL <= nkv, "K/V uint4 load misaligned / OOB (elem %zu)", o);
                        if (o + VPL <= nkv) { memcpy(kr[lane][u], P->kp + o * es, 16); memcpy(vr[lane][u], P->vp + o * es, 16); }
                    }
                }
            }
            static float v[32][MAXNV];
            for (int lane = 0; lane < 32; lane++)
                for (int u = 0; u < U; u++) {
                    float kf[8];
                    unpack16(kr[lane][u], es, kf);
                    for (int g = 0; g < G; g++) {
                        float d = 0.f;
                        for (int j = 0; j < VPL; j++) d = fmaf(qv[w][lane][g][j], kf[j], d);
                        v[lane][g * U + u] = d;
                    }
                }
            int base[32] = {0};
            halve_sum(v, NV, LPK / 2, base);
            for (int lane = 0; lane < 32; lane++) {
                const int tid = w * 32 + lane, kg = lane / LPK;
                for (int r = 0; r < REM; r++) {
                    const int idx = base[lane] + r, g = idx / U, u = idx % U;
                    float d = v[lane][r];
                    if (P->softcap > 0.f) d = P->softcap * tanhf(d / P->softcap);
                    sh_wr(&ss, sw + (size_t)(g * KPL + kg) * U + u, f2u((okm[lane] >> u & 1u) ? d : -INFINITY), tid, 2 * ch);
                }
            }
            if (mutant != MUT_NO_SYNC_SCORES) sync_warp();
            float corr[32][4];
            for (int lane = 0; lane < 32; lane++) for (int g = 0; g < 4; g++) corr[lane][g] = NAN;
            for (int j = 0; j < NJ; j++) {
                float sc[32], mx[32], cjv[32];
                for (int lane = 0; lane < 32; lane++) {
                    const int i = lane + 32 * j;
                    sc[lane] = i < E ? u2f(sh_rd(&ss, sw + i, w * 32 + lane, 2 * ch)) : -INFINITY;
                    mx[lane] = sc[lane];
                }
                const int segw = mutant == MUT_SEG_HALF ? SEG / 2 : mutant == MUT_MAX_ONE_KG ? U : SEG;
                for (int o = 1; o < segw; o <<= 1) {
                    float s[32]; memcpy(s, mx, sizeof s);
                    for (int lane = 0; lane < 32; lane++) mx[lane] = fmaxf(s[lane], s[lane ^ o]);
                }
                for (int lane = 0; lane < 32; lane++) {
                    const int i = lane + 32 * j;
                    const float mn = fmaxf(mj[w][lane][j], mx[lane]);
                    const float cj = mn == -INFINITY ? 1.f : expf(mj[w][lane][j] - mn);
                    const float e = mn == -INFINITY ? 0.f : expf(sc[lane] - mn);
                    lj[w][lane][j] = lj[w][lane][j] * cj + e;
                    mj[w][lane][j] = mn;
                    if (i < E && mutant != MUT_NO_PROB_STORE) sh_wr(&ss, sw + i, f2u(e), w * 32 + lane, 2 * ch + 1);
                    cjv[lane] = cj;
                }
                for (int g = 0; g < G; g++)
                    if ((g * CH) / 32 == j) {
                        const int src = mutant == MUT_CORR_LANE ? (g * CH + SEG) % 32 : (g * CH) % 32;
                        for (int lane = 0; lane < 32; lane++) corr[lane][g] = cjv[src];   /* __shfl_sync(cj, src) */
                    }
            }
            sync_warp();
            for (int lane = 0; lane < 32; lane++)
                for (int g = 0; g < G; g++)
                    for (int j = 0; j < VPL; j++) acc[w][lane][g][j] *= corr[lane][g];
            float e[32][4][8];
            for (int lane = 0; lane < 32; lane++) {
                const int tid = w * 32 + lane, kg = lane / LPK;
                for (int g = 0; g < G; g++) {
                    const size_t er = sw + (size_t)(g * KPL + kg) * U;
                    if (U % 4 == 0) {
                        for (int u = 0; u < U; u += 4) {
                            CHECK((er + u) % 4 == 0, "ss float4 read misaligned");
                            for (int k = 0; k < 4; k++) e[lane][g][u + k] = u2f(sh_rd(&ss, er + u + k, tid, 2 * ch + 1));
                        }
                    } else
                        for (int u = 0; u < U; u++) e[lane][g][u] = u2f(sh_rd(&ss, er + u, tid, 2 * ch + 1));
                }
            }
            if (mutant != MUT_NO_SYNC_NEXT) sync_warp();   /* read before the next chunk's scores overwrite them */
            for (int lane = 0; lane < 32; lane++)
                for (int u = 0; u < U; u++) {
                    float vf[8];
                    unpack16(vr[lane][u], es, vf);
                    for (int g = 0; g < G; g++)
                        for (int j = 0; j < VPL; j++) acc[w][lane][g][j] = fmaf(e[lane][g][u], vf[j], acc[w][lane][g][j]);
                }
        }
        /* the sums over each head's segment; the key groups of the warp add their outputs */
        for (int j = 0; j < NJ; j++)
            for (int o = 1; o < SEG; o <<= 1) {
                float s[32];
                for (int lane = 0; lane < 32; lane++) s[lane] = lj[w][lane][j];
                for (int lane = 0; lane < 32; lane++) lj[w][lane][j] += s[lane ^ o];
            }
        for (int g = 0; g < G; g++) {
            const int src = (g * CH) % 32, jj = (g * CH) / 32;
            const float mg = mj[w][src][jj], lg = lj[w][src][jj];   /* __shfl_sync: the same for every lane */
            for (int o = mutant == MUT_NO_KG_ACC_SUM ? 2 * LPK : LPK; o < 32; o <<= 1)
                for (int j = 0; j < VPL; j++) {
                    float s[32];
                    for (int lane = 0; lane < 32; lane++) s[lane] = acc[w][lane][g][j];
                    for (int lane = 0; lane < 32; lane++) acc[w][lane][g][j] += s[lane ^ o];
                }
            for (int lane = 0; lane < LPK; lane++) {
                const int d0 = (lane % LPK) * VPL;
                for (int i = 0; i < VPL / 4; i++) {
                    const size_t so = ((size_t)w * G + g) * D + d0 + 4 * i;
                    CHECK(so % 4 == 0, "sacc float4 store misaligned");
                    for (int k = 0; k < 4; k++) sh_wr(&sacc, so + k, f2u(acc[w][lane][g][4 * i + k]), w * 32 + lane, -1);
                }
            }
            sh_wr(&sm, (size_t)w * G + g, f2u(mg), w * 32, -1);
            sh_wr(&sl, (size_t)w * G + g, f2u(lg), w * 32, -1);
        }
    }
    sync_threads();
    /* phase 3: att_merge<W, G>(sm, sl, sacc, D, D, ...) */
    const size_t ob = ((size_t)t * P->n_heads + h0) * D;
    static float cjT[512][16], LT[512];
    for (int g = 0; g < G; g++) {
        for (int tid = 0; tid < nthr; tid++) {
            float M = -INFINITY, L = 0.f;
            for (int j = 0; j < W; j++) M = fmaxf(M, u2f(sh_rd(&sm, (size_t)j * G + g, tid, -1)));
            for (int j = 0; j < W; j++) {
                const float smj = u2f(sh_rd(&sm, (size_t)j * G + g, tid, -1));
                cjT[tid][j] = smj == -INFINITY ? 0.f : expf(smj - M);
                L += u2f(sh_rd(&sl, (size_t)j * G + g, tid, -1)) * cjT[tid][j];
            }
            if (P->sinks && M != -INFINITY) { CHECK(h0 + g < P->n_heads, "sinks read OOB"); L += expf(P->sinks[h0 + g] - M); }
            LT[tid] = L;
        }
        const size_t og = ob + (size_t)g * D;
        int done[16] = {0};
        for (int d0 = 0; d0 < D; d0 += W * 32)
            for (int wq = 0; wq < W; wq++) {
                if (done[wq]) continue;
                if (O->xq && d0 + wq * 32 >= D) { done[wq] = 1; continue; }   /* break */
                float a[32]; size_t qi[32];
                for (int lane = 0; lane < 32; lane++) {
                    const int tid = wq * 32 + lane, d = d0 + tid;
                    a[lane] = 0.f; qi[lane] = og + d;
                    if (d < D) {
                        for (int j = 0; j < W; j++) a[lane] += u2f(sh_rd(&sacc, (size_t)(j * G + g) * D + d, tid, -1)) * cjT[tid][j];
                        a[lane] = LT[tid] > 0.f ? a[lane] / LT[tid] : 0.f;
                        put_out(O, og + d, a[lane]);
                    }
                }
                if (O->xq) quant_group_w(a, qi, O);
            }
    }
    shm_free(&sm); shm_free(&sl); shm_free(&sacc); shm_free(&ss); shm_free(&sbt);
}

/* ---------------- the launcher's choice (launch_attn, launch_attn_vec, launch_attn_vec_d) ---------------- */
/* 0: k_attn_vec not taken (k_attn instead); else *I the instantiation, *G_ the block's head count */
static int launch_pick(int es, int hd, int block_size, int n, int n_heads, int n_kv, int n_sm, int attn_gqa, inst *I) {
    const int wide = (long)n * n_heads < 4 * n_sm && attn_gqa != 2;
    const int grp = n_heads / n_kv;
    int G = 1;
    if (!wide && attn_gqa) {
        const long bl = 4 * (long)n_sm;
        const int any = attn_gqa == 2;
        if (grp % 4 == 0 && hd <= 128 && (any || (long)n * n_heads / 4 >= bl)) G = 4;
        else if (grp % 2 == 0 && (any || (long)n * n_heads / 2 >= bl)) G = 2;
    }
    if (block_size <= 0 || (block_size & (block_size - 1))) return 0;   /* log2_exact < 0 */
    if (!(hd == 64 || hd == 128 || (es == 2 && hd == 256))) return 0;
    const int U = hd * es <= 256 ? 8 : 4, U4 = 4;
    I->es = es; I->D = hd; I->launched = 1;
    if (wide) { I->G = 1; I->W = 16; I->U = 2; }
    else if (G == 4) { I->G = 4; I->W = 4; I->U = U4; }
    else if (G == 2) { I->G = 2; I->W = 4; I->U = U; }
    else { I->G = 1; I->W = 4; I->U = U; }
    return 1;
}

/* every instantiation the launcher can take (brief's list), and D = 256 G = 4, which it does not instantiate
 * (launch_attn picks G = 4 only up to head size 128): run anyway, as a case of the template */
static const inst insts[] = {
    {2, 64, 1, 16, 2, 1}, {2, 64, 1, 4, 8, 1}, {2, 64, 2, 4, 8, 1}, {2, 64, 4, 4, 4, 1},
    {2, 128, 1, 16, 2, 1}, {2, 128, 1, 4, 8, 1}, {2, 128, 2, 4, 8, 1}, {2, 128, 4, 4, 4, 1},
    {2, 256, 1, 16, 2, 1}, {2, 256, 1, 4, 4, 1}, {2, 256, 2, 4, 4, 1}, {2, 256, 4, 4, 4, 0},
    {4, 64, 1, 16, 2, 1}, {4, 64, 1, 4, 8, 1}, {4, 64, 2, 4, 8, 1}, {4, 64, 4, 4, 4, 1},
    {4, 128, 1, 16, 2, 1}, {4, 128, 1, 4, 4, 1}, {4, 128, 2, 4, 4, 1}, {4, 128, 4, 4, 4, 1},
};
#define NINST ((int)(sizeof insts / sizeof insts[0]))

/* the launcher's reachable instantiations over a grid of shapes must be exactly the launched ones of insts[] */
static void check_launcher(void) {
    int hit[NINST] = {0}, stray = 0, declined = 0;
    static const int hds[] = {32, 64, 96, 128, 256, 512}, grps[] = {1, 2, 3, 4, 8}, nkvs[] = {1, 2, 8}, ns[] = {1, 4, 8, 64, 512, 4096};
    static const int bss[] = {16, 32, 24};
    for (int es = 2; es <= 4; es += 2)
        for (int a = 0; a < 6; a++) for (int b = 0; b < 5; b++) for (int c = 0; c < 3; c++) for (int d = 0; d < 6; d++)
            for (int gq = 0; gq < 3; gq++) for (int bsi = 0; bsi < 3; bsi++) {
                inst I;
                if (!launch_pick(es, hds[a], bss[bsi], ns[d], nkvs[c] * grps[b], nkvs[c], 132, gq, &I)) { declined++; continue; }
                int f = -1;
                for (int k = 0; k < NINST; k++)
                    if (insts[k].es == I.es && insts[k].D == I.D && insts[k].G == I.G && insts[k].W == I.W && insts[k].U == I.U) f = k;
                if (f < 0 || !insts[f].launched) stray++; else hit[f]++;
                if (I.G > 1 && (nkvs[c] * grps[b] / nkvs[c]) % I.G) stray++;   /* G must divide the GQA ratio */
            }
    int missing = 0;
    for (int k = 0; k < NINST; k++) if (insts[k].launched && !hit[k]) missing++;
    CHECK(!stray && !missing, "launcher: %d choices outside the list, %d listed instantiations never chosen", stray, missing);
    printf("launcher choice (H200, 132 SMs; shapes x attn_gqa 0/1/2 x block size 16/32/24): %d listed instantiations all reachable, "
           "none outside the list, %d shapes declined (head size or block size) %s\n", NINST - 1, declined, stray || missing ? "MISMATCH" : "OK");
}

/* ---------------- reference (cpu_attention.c's semantics, f64) ---------------- */
static void reference(const prob *P, double *ref) {
    const int D = P->D, kvdim = P->n_kv * D, bs = P->block_size;
    for (int t = 0; t < P->n; t++)
        for (int h = 0; h < P->n_heads; h++) {
            double *o = ref + ((size_t)t * P->n_heads + h) * D;
            for (int d = 0; d < D; d++) o[d] = 0;
            const int seq = P->seq[t], pos = P->pos[t];
            if (seq < 0 || seq >= P->n_seqs || pos < 0) continue;
            const int kvh = h / (P->n_heads / P->n_kv);
            const int lo = P->window > 0 && pos - P->window + 1 > 0 ? pos - P->window + 1 : 0;
            double *sc = malloc(sizeof(double) * (pos + 1)); long *off = malloc(sizeof(long) * (pos + 1));
            double M = -INFINITY;
            const float *qr = P->q + ((size_t)t * P->n_heads + h) * D;
            for (int p = lo; p <= pos; p++) {
                const int bi = p / bs, blk = bi < P->max_blocks ? P->bt[seq * P->max_blocks + bi] : -1;
                off[p] = blk < 0 || blk >= P->n_blocks ? -1 : ((long)blk * bs + p % bs) * kvdim + (long)kvh * D;
                if (off[p] < 0) continue;
                double d = 0;
                for (int e = 0; e < D; e++) d += (double)(qr[e] * P->scale) * kv_at(P, P->kp, off[p] + e);
                if (P->softcap > 0.f) d = P->softcap * tanh(d / P->softcap);
                sc[p] = d; if (d > M) M = d;
            }
            double L = 0;
            for (int p = lo; p <= pos; p++) if (off[p] >= 0) {
                const double e = exp(sc[p] - M); L += e;
                for (int d = 0; d < D; d++) o[d] += e * kv_at(P, P->vp, off[p] + d);
            }
            if (P->sinks && M != -INFINITY) L += exp(P->sinks[h] - M);
            for (int d = 0; d < D; d++) o[d] = L > 0 ? o[d] / L : 0;
            free(sc); free(off);
        }
}

/* ---------------- cases ---------------- */
typedef struct { const char *name; int bs, ratio, window; float softcap; int sinks, bad, xq, sbt0; } kase;
static const kase cases[] = {
    {"plain", 16, 1, 0, 0.f, 0, 0, 0, 0},
    {"window 17, xq", 16, 2, 17, 0.f, 0, 0, 1, 0},
    {"softcap 10 + sinks, bs 32, xq", 32, 4, 0, 10.f, 1, 0, 1, 0},
    {"bad blocks + sinks, xq", 16, 8, 0, 0.f, 1, 1, 1, 0},
    {"window 100 + softcap + bad, bs 32", 32, 8, 100, 10.f, 0, 1, 0, 0},
    {"window 1 + sinks, xq", 16, 4, 1, 0.f, 1, 0, 1, 0},
    {"table from global (sbt_n 0), window 64, bs 32, xq", 32, 2, 64, 0.f, 0, 0, 1, 1},
    {"window 40 + softcap + sinks + bad, xq", 16, 4, 40, 10.f, 1, 1, 1, 0},
    {"softcap + bad, bs 32, xq", 32, 1, 0, 10.f, 0, 1, 1, 0},
    {"large sinks", 16, 8, 0, 0.f, 1, 0, 0, 0},
};
#define NCASE ((int)(sizeof cases / sizeof cases[0]))
#define TOL 1e-5

typedef struct { double err; int bad, writes_bad, xq_bad, nblocks; } result;

static result run_case(const inst *I, const kase *K, int seed) {
    result R = {0, 0, 0, 0, 0};
    srand(seed);
    prob P; memset(&P, 0, sizeof P);
    P.es = I->es; P.D = I->D; P.n_heads = 8; P.n_kv = 8 / K->ratio;
    P.block_size = K->bs; P.window = K->window; P.softcap = K->softcap; P.scale = 1.f / sqrtf((float)P.D);
    P.n_seqs = 5; P.max_blocks = (300 + K->bs - 1) / K->bs + 1; P.n_blocks = P.n_seqs * P.max_blocks;
    /* tokens: 1 position; 300 positions; two of random lengths; an earlier position of the long one;
     * seq -1; a position past the table; seq == n_seqs; pos -1; 6 positions in the first block
     * (with bad blocks: that block's id is bad, nothing to attend) */
    const int tseq[] = {0, 1, 2, 3, 1, -1, 4, 5, 2, 2};
    int tpos[] = {0, 299, 20 + rand() % 130, 150 + rand() % 150, 250, 10, P.max_blocks * K->bs + 5, 7, -1, 5};
    P.n = 10;
    P.seq = malloc(4 * P.n); P.pos = malloc(4 * P.n);
    memcpy(P.seq, tseq, sizeof tseq); memcpy(P.pos, tpos, sizeof tpos);
    const float qamp = K->softcap > 0.f ? 8.f : 3.f;   /* softcap: scores large enough for tanh to bend */
    const size_t nq = (size_t)P.n * P.n_heads * P.D;
    P.q = malloc(4 * nq);
    for (size_t i = 0; i < nq; i++) P.q[i] = frand() * qamp;
    const size_t ncache = (size_t)P.n_blocks * P.block_size * P.n_kv * P.D;
    P.kp = malloc(ncache * P.es); P.vp = malloc(ncache * P.es);
    for (size_t i = 0; i < ncache; i++) {
        if (P.es == 2) { uint16_t k = f2bf(frand()), v = f2bf(frand()); memcpy(P.kp + 2 * i, &k, 2); memcpy(P.vp + 2 * i, &v, 2); }
        else { float k = frand(), v = frand(); memcpy(P.kp + 4 * i, &k, 4); memcpy(P.vp + 4 * i, &v, 4); }
    }
    /* shuffled block tables: a permutation of the pool */
    P.bt = malloc(4 * P.n_seqs * P.max_blocks);
    for (int i = 0; i < P.n_blocks; i++) P.bt[i] = i;
    for (int i = P.n_blocks - 1; i > 0; i--) { int k = rand() % (i + 1), x = P.bt[i]; P.bt[i] = P.bt[k]; P.bt[k] = x; }
    if (K->bad) {   /* -1, past the pool, huge: skipped, never read */
        P.bt[1 * P.max_blocks + 2] = -1; P.bt[1 * P.max_blocks + 9] = P.n_blocks; P.bt[3 * P.max_blocks + 4] = 1 << 30;
        P.bt[2 * P.max_blocks + 0] = -7;
    }
    if (K->sinks) {
        P.sinks = malloc(4 * P.n_heads);
        for (int h = 0; h < P.n_heads; h++) P.sinks[h] = frand() * 3.f + (K->ratio == 8 && !K->bad ? 6.f : 0.f);
    }
    const size_t no = nq;
    double *ref = malloc(no * sizeof(double));
    outs O; memset(&O, 0, sizeof O);
    O.no = no; O.out = malloc(no * 4); O.wout = calloc(no, sizeof(int));
    for (size_t i = 0; i < no; i++) O.out[i] = NAN;
    if (K->xq) { O.xq = calloc(no, 1); O.xds = calloc(no / 16, 4); O.wxq = calloc(no, sizeof(int)); O.wxds = calloc(no / 32, sizeof(int)); }
    reference(&P, ref);
    const int cf0 = check_fails;
    /* the launch: grid (n, n_heads / G), W * 32 threads, sbt_n = max_blocks (<= ATT_SBT_MAX) */
    const int sbt_n = K->sbt0 ? 0 : P.max_blocks;
    const size_t static_shm = 4 * ((size_t)2 * I->W * I->G + (size_t)I->W * I->G * I->D + (size_t)I->W * I->G * (32 / (I->D * I->es / 16)) * I->U);
    CHECK(static_shm + 4 * 4096 <= 48 * 1024, "shared memory %zu + dynamic 16 KiB over 48 KiB", static_shm);
    for (int bx = 0; bx < P.n; bx++)
        for (int by = 0; by < P.n_heads / I->G; by++) { vec_block(&P, I, bx, by, sbt_n, &O); R.nblocks++; }
    /* every output once; error relative to the row's max |ref| (absolute on zero rows) */
    for (size_t i = 0; i < no; i++) R.writes_bad += O.wout[i] != 1;
    if (K->xq) {
        for (size_t i = 0; i < no; i++) R.writes_bad += O.wxq[i] != 1;
        for (size_t i = 0; i < no / 32; i++) R.writes_bad += O.wxds[i] != 1;
    }
    CHECK(R.writes_bad == 0, "%d output elements not written exactly once", R.writes_bad);
    for (size_t r = 0; r < no / P.D; r++) {
        double rmax = 0, emax = 0;
        for (int d = 0; d < P.D; d++) {
            const size_t i = r * P.D + d;
            rmax = fmax(rmax, fabs(ref[i]));
            emax = fmax(emax, isnan(O.out[i]) ? INFINITY : fabs(O.out[i] - ref[i]));
        }
        const double rel = rmax > 0 ? emax / rmax : emax;
        if (!(rel <= R.err)) R.err = rel;
    }
    if (K->xq) {   /* codes: exactly quant_group of the kernel's own output, and within 1 of the reference's */
        for (size_t g0 = 0; g0 < no; g0 += 32) {
            float a[32], am = 0, ar = 0; int s = 0;
            for (int l = 0; l < 32; l++) { a[l] = O.out[g0 + l]; am = fmaxf(am, fabsf(a[l])); ar = fmaxf(ar, fabsf((float)ref[g0 + l])); }
            for (int l = 0; l < 32; l++) {
                const int qk = (int8_t)f2i_rn(a[l] * (am > 0.f ? 127.f / am : 0.f));
                const int qr = f2i_rn((float)ref[g0 + l] * (ar > 0.f ? 127.f / ar : 0.f));
                R.xq_bad += O.xq[g0 + l] != qk || abs(O.xq[g0 + l] - qr) > 1;
                s += O.xq[g0 + l];
            }
            const float dx = O.xds[2 * (g0 >> 5)];
            R.xq_bad += dx != am * (1.f / 127.f) || O.xds[2 * (g0 >> 5) + 1] != dx * (float)s || fabsf(dx - ar / 127.f) > 1e-5f * (ar / 127.f) + 1e-30f;
        }
        CHECK(R.xq_bad == 0, "%d int8 groups / codes differ", R.xq_bad);
    }
    R.bad = check_fails - cf0;
    free(P.seq); free(P.pos); free(P.q); free(P.kp); free(P.vp); free(P.bt); free(P.sinks); free(ref);
    free(O.out); free(O.wout); free(O.xq); free(O.xds); free(O.wxq); free(O.wxds);
    return R;
}
static int result_ok(result r) { return r.err < TOL && !r.bad && !r.writes_bad && !r.xq_bad; }

int main(void) {
    check_launcher();
    double worst = 0;
    int nrun = 0;
    for (int k = 0; k < NINST; k++) {
        const inst *I = &insts[k];
        const int VPL = 16 / I->es, LPK = I->D / VPL, KPL = 32 / LPK, CH = KPL * I->U, NV = I->G * I->U;
        double e = 0; int ok = 1, nc = 0, bad = 0;
        const long red0 = redundant_writes;
        for (int c = 0; c < NCASE; c++) {
            if (cases[c].ratio % I->G) continue;   /* G divides the GQA ratio (launch_attn) */
            const result r = run_case(I, &cases[c], 100 * k + c + 1);
            nc++; nrun++;
            if (!result_ok(r)) { ok = 0; fails++; if (!quiet) printf("  case \"%s\": err %.2e, failed checks %d, writes %d, int8 %d MISMATCH\n",
                                                                    cases[c].name, r.err, r.bad, r.writes_bad, r.xq_bad); }
            bad += r.bad;
            if (!(r.err <= e)) e = r.err;
        }
        if (!(e <= worst)) worst = e;
        printf("%-4s D=%3d G=%d W=%2d U=%d (LPK %2d KPL %d CH %2d NV %2d REM %d)%s: %2d cases, worst err %.1e, failed checks %d, "
               "same-value ss stores %ld %s\n", I->es == 2 ? "bf16" : "f32", I->D, I->G, I->W, I->U, LPK, KPL, CH, NV,
               NV >= LPK ? NV / LPK : 1, I->launched ? "" : " [not instantiated by the launcher]", nc, e, bad, redundant_writes - red0,
               ok ? "OK" : "MISMATCH");
    }
    printf("%d runs (instantiation x case); worst error %.2e of the row's max |ref| (tolerance %.0e)\n", nrun, worst, TOL);
    /* mutants: each must fail somewhere over the instantiations on two cases */
    for (int m = 1; m < MUT_N; m++) {
        mutant = m; quiet = 1; first_msg[0] = 0;
        int caught = 0, where = 0; double e = 0;
        for (int k = 0; k < NINST; k++)
            for (int c = 2; c <= 7; c += 5) {
                if (cases[c].ratio % insts[k].G) continue;
                const int cf = check_fails;
                const result r = run_case(&insts[k], &cases[c], 7000 + 10 * k + c);
                if (!result_ok(r) || check_fails != cf) { caught = 1; where++; }
                if (!(r.err <= e)) e = r.err;
            }
        mutant = MUT_NONE; quiet = 0;
        printf("mutant %s: %s (%d runs failed; worst err %.1e; first failed check: %s)\n", mut_name[m], caught ? "caught" : "NOT CAUGHT",
               where, e, first_msg[0] ? first_msg : "none");
        if (!caught) fails++;
    }
    printf(fails ? "SIM: FAIL\n" : "SIM: all OK\n");
    return fails != 0;
}
