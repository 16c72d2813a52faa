/* Desk simulation of k_attn_tiled + launch_attn_tiled's tile building (mlxcel backend_cuda.cu):
 * every block / warp / lane, warp shuffles and reductions emulated over the 32 lanes, phases
 * between __syncthreads run in order. Compared against a straightforward reference of k_attn's
 * semantics (per query: keys p0..min(pos, pmax), bad blocks skipped, q*scale, softcap, sink in
 * the denominator, zeros when nothing attends) and of its int8 epilogue quant_group. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <limits.h>

#define ATT_TQ 64
#define ATT_TK 32
static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { if (fails++ < 20) { printf("FAIL: " __VA_ARGS__); printf("\n"); } } } while (0)
static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }
static float frand(void) { return (float)rand() / RAND_MAX * 2.f - 1.f; }

typedef struct {
    int n, n_heads, n_kv, D, n_seqs, max_blocks, block_size, n_blocks, window;
    float scale, softcap; float *sinks;
    float *q; float *kp, *vp; int *pos, *seq, *bt;
} prob;

/* quant_group, warp-wide over 32 lanes' values v[] */
static void quant_group_w(const float v[32], int8_t *xq, float *xds /*2 per group*/, size_t i0) {
    float amax = 0.f; for (int l = 0; l < 32; l++) amax = fmaxf(amax, fabsf(v[l]));
    int s = 0;
    for (int l = 0; l < 32; l++) { int q = (int)rintf(v[l] * (amax > 0.f ? 127.f / amax : 0.f)); xq[i0 + l] = (int8_t)q; s += q; }
    xds[(i0 >> 5) * 2] = amax * (1.f / 127.f); xds[(i0 >> 5) * 2 + 1] = amax * (1.f / 127.f) * (float)s;
}

static void reference(const prob *P, float *out, int8_t *xq, float *xds) {
    const int D = P->D, pmax = P->max_blocks * P->block_size - 1, kvdim = P->n_kv * D;
    for (int t = 0; t < P->n; t++)
        for (int h = 0; h < P->n_heads; h++) {
            const int kvh = h / (P->n_heads / P->n_kv);
            float *o = out + ((size_t)t * P->n_heads + h) * D;
            double *sc = calloc(pmax + 1, sizeof(double)); int *okk = calloc(pmax + 1, sizeof(int));
            double M = -INFINITY;
            const int p_end = imin(P->pos[t], pmax), p0 = P->window > 0 ? imax(0, P->pos[t] - P->window + 1) : 0;
            for (int p = p0; p <= p_end; p++) {
                int blk = P->bt[P->seq[t] * P->max_blocks + p / P->block_size];
                if (blk < 0 || blk >= P->n_blocks) continue;
                size_t s = (size_t)blk * P->block_size + p % P->block_size;
                double d = 0; for (int e = 0; e < D; e++) d += (double)P->q[((size_t)t * P->n_heads + h) * D + e] * P->scale * P->kp[s * kvdim + kvh * D + e];
                if (P->softcap > 0.f) d = P->softcap * tanh(d / P->softcap);
                sc[p] = d; okk[p] = 1; if (d > M) M = d;
            }
            double L = 0; double acc[256] = {0};
            for (int p = p0; p <= p_end; p++) if (okk[p]) {
                int blk = P->bt[P->seq[t] * P->max_blocks + p / P->block_size];
                size_t s = (size_t)blk * P->block_size + p % P->block_size;
                double e = exp(sc[p] - M); L += e;
                for (int d = 0; d < D; d++) acc[d] += e * P->vp[s * kvdim + kvh * D + d];
            }
            if (P->sinks && M != -INFINITY) L += exp(P->sinks[h] - M);
            for (int d = 0; d < D; d++) o[d] = L > 0 ? (float)(acc[d] / L) : 0.f;
            if (xq) for (int d0 = 0; d0 < D; d0 += 32) quant_group_w(o + d0, xq, xds, ((size_t)t * P->n_heads + h) * D + d0);
            free(sc); free(okk);
        }
}

/* k_attn_tiled<T=float, NI>, transcribed; one block (tile bx, head h) */
static void tiled_block(const prob *P, int NI, const int tile[2], int h, float *out, int8_t *xq, float *xds) {
    const int D = P->D, DP = D + 4;
    float *smem = malloc(((size_t)(ATT_TQ + 2 * ATT_TK) * DP + ATT_TK) * sizeof(float));
    size_t smem_n = (size_t)(ATT_TQ + 2 * ATT_TK) * DP + ATT_TK;
    for (size_t i = 0; i < smem_n; i++) smem[i] = NAN;
    float *sq = smem, *sk = sq + ATT_TQ * DP, *sv = sk + ATT_TK * DP;
    int *sslot = (int *)(sv + ATT_TK * DP);
    int s_kmin, s_kmax;
    const int t0 = tile[0], nt = tile[1];
    const int kvh = h / (P->n_heads / P->n_kv), kvdim = P->n_kv * D;
    const int *btr = P->bt + (size_t)P->seq[t0] * P->max_blocks;
    const int pmax = P->max_blocks * P->block_size - 1;
    s_kmin = INT_MAX; s_kmax = -1;
    for (int tid = 0; tid < 256; tid++)
        for (int e = tid; e < ATT_TQ * D; e += 256) {
            const int r = e / D, d = e % D;
            sq[r * DP + d] = r < nt ? P->q[((size_t)(t0 + r) * P->n_heads + h) * D + d] * P->scale : 0.f;
        }
    /* sync */
    for (int tid = 0; tid < 256; tid++) if (tid < nt) {
        const int p = P->pos[t0 + tid];
        s_kmax = imax(s_kmax, imin(p, pmax));
        s_kmin = imin(s_kmin, P->window > 0 ? imax(0, p - P->window + 1) : 0);
    }
    /* per thread registers: [warp][lane] */
    static int qp[8][32][8]; static float m[8][32][8], l[8][32][8], acc[8][32][8][8];
    for (int w = 0; w < 8; w++) for (int lane = 0; lane < 32; lane++)
        for (int j = 0; j < 8; j++) {
            const int r = w * 8 + j;
            qp[w][lane][j] = r < nt ? P->pos[t0 + r] : -1;
            m[w][lane][j] = -INFINITY; l[w][lane][j] = 0.f;
            for (int i = 0; i < NI; i++) acc[w][lane][j][i] = 0.f;
        }
    /* sync */
    const int kmin = s_kmin, kmax = s_kmax;
    for (int k0 = kmin; k0 <= kmax; k0 += ATT_TK) {
        for (int tid = 0; tid < ATT_TK; tid++) {
            const int p = k0 + tid;
            int blk = -1;
            if (p <= kmax) { CHECK(p >= 0 && p / P->block_size < P->max_blocks, "bt read OOB p=%d", p); blk = btr[p / P->block_size]; }
            sslot[tid] = blk >= 0 && blk < P->n_blocks ? blk * P->block_size + p % P->block_size : -1;
        }
        /* sync */
        for (int tid = 0; tid < 256; tid++)
            for (int e = tid; e < ATT_TK * D; e += 256) {
                const int j = e / D, d = e % D, sl = sslot[j];
                float kv = 0.f, vv = 0.f;
                if (sl >= 0) {
                    const size_t o = (size_t)sl * kvdim + (size_t)kvh * D + d;
                    CHECK(o < (size_t)P->n_blocks * P->block_size * kvdim, "kv OOB");
                    kv = P->kp[o]; vv = P->vp[o];
                }
                sk[j * DP + d] = kv; sv[j * DP + d] = vv;
            }
        /* sync */
        for (int w = 0; w < 8; w++) {
            float sc[32][8], pj[32][8];
            for (int lane = 0; lane < 32; lane++) {
                for (int j = 0; j < 8; j++) sc[lane][j] = 0.f;
                const float *kr = sk + lane * DP;
                CHECK(((lane * DP) % 4) == 0, "float4 misaligned");
                for (int d4 = 0; d4 < D / 4; d4++)
                    for (int j = 0; j < 8; j++) {
                        const float *qq = sq + (w * 8 + j) * DP + 4 * d4, *kk = kr + 4 * d4;
                        sc[lane][j] = fmaf(qq[0], kk[0], fmaf(qq[1], kk[1], fmaf(qq[2], kk[2], fmaf(qq[3], kk[3], sc[lane][j]))));
                    }
            }
            for (int j = 0; j < 8; j++) {
                float s[32]; int ok[32]; float wmax = -INFINITY;
                for (int lane = 0; lane < 32; lane++) {
                    const int kpos = k0 + lane; const int kvalid = sslot[lane] >= 0;
                    ok[lane] = kvalid && kpos <= qp[w][lane][j] && (P->window <= 0 || kpos > qp[w][lane][j] - P->window);
                    float x = sc[lane][j];
                    if (P->softcap > 0.f) x = P->softcap * tanhf(x / P->softcap);
                    s[lane] = ok[lane] ? x : -INFINITY;
                    wmax = fmaxf(wmax, s[lane]);
                }
                /* mnew uniform? m[w][lane][j] must be the same for all lanes */
                for (int lane = 1; lane < 32; lane++) CHECK(m[w][lane][j] == m[w][0][j] || (isnan(m[w][lane][j]) && isnan(m[w][0][j])), "m not warp-uniform");
                const float mnew = fmaxf(m[w][0][j], wmax);
                if (mnew == -INFINITY) { for (int lane = 0; lane < 32; lane++) pj[lane][j] = 0.f; continue; }
                const float corr = m[w][0][j] == -INFINITY ? 0.f : expf(m[w][0][j] - mnew);
                float sum = 0.f;
                for (int lane = 0; lane < 32; lane++) { pj[lane][j] = ok[lane] ? expf(s[lane] - mnew) : 0.f; sum += pj[lane][j]; }
                for (int lane = 0; lane < 32; lane++) {
                    l[w][lane][j] = l[w][lane][j] * corr + sum;
                    for (int i = 0; i < NI; i++) acc[w][lane][j][i] *= corr;
                    m[w][lane][j] = mnew;
                }
            }
            for (int kj = 0; kj < ATT_TK; kj++)
                for (int lane = 0; lane < 32; lane++) {
                    float vr[8];
                    for (int i = 0; i < NI; i++) { const int d = lane + 32 * i; vr[i] = d < D ? sv[kj * DP + d] : 0.f; }
                    for (int j = 0; j < 8; j++) {
                        const float p = pj[kj][j];   /* __shfl_sync(pj[j], kj) */
                        for (int i = 0; i < NI; i++) acc[w][lane][j][i] = fmaf(p, vr[i], acc[w][lane][j][i]);
                    }
                }
        }
        /* sync */
    }
    for (int w = 0; w < 8; w++)
        for (int j = 0; j < 8; j++) {
            const int r = w * 8 + j;
            if (r >= nt) break;
            const size_t ob = ((size_t)(t0 + r) * P->n_heads + h) * D;
            for (int i = 0; i < NI; i++) {
                if (xq && 32 * i >= D) break;
                float av[32];
                for (int lane = 0; lane < 32; lane++) {
                    float L = l[w][lane][j];
                    if (P->sinks && m[w][lane][j] != -INFINITY) L += expf(P->sinks[h] - m[w][lane][j]);
                    const int d = lane + 32 * i;
                    const float a = d < D && L > 0.f ? acc[w][lane][j][i] / L : 0.f;
                    if (d < D) { CHECK(isnan(out[ob + d]), "out written twice"); out[ob + d] = a; }
                    av[lane] = a;
                }
                if (xq) quant_group_w(av, xq, xds, ob + 32 * i);
            }
        }
    free(smem);
}

/* launch_attn_tiled's host part, transcribed; returns 0 when it would decline */
static int tiled(const prob *P, float *out, int8_t *xq, float *xds) {
    const int n = P->n, D = P->D;
    if (n < 16 || D % 4 || D > 256) return 0;
    for (int t = 0; t < n; t++) if (P->seq[t] < 0 || P->seq[t] >= P->n_seqs || P->pos[t] < 0) return 0;
    int (*tl)[2] = malloc(sizeof(int[2]) * n); int nt = 0;
    for (int t = 0; t < n;) {
        int e = t + 1;
        while (e < n && e - t < ATT_TQ && P->seq[e] == P->seq[t]) e++;
        tl[nt][0] = t; tl[nt][1] = e - t; nt++;
        t = e;
    }
    if (nt * 4 > n) { free(tl); return 0; }
    const int NI = D <= 64 ? 2 : D <= 128 ? 4 : 8;
    for (int b = 0; b < nt; b++) for (int h = 0; h < P->n_heads; h++) tiled_block(P, NI, tl[b], h, out, xq, xds);
    free(tl);
    return 1;
}

static int run_case(int seed, int D, int window, float softcap, int use_sinks, int use_xq, int past_cache, int bad_blocks) {
    srand(seed);
    prob P; memset(&P, 0, sizeof P);
    P.D = D; P.n_kv = seed >= 100 ? 3 : 2; P.n_heads = seed >= 100 ? 3 : 4; P.block_size = 16; P.max_blocks = 6; P.n_blocks = 20; P.n_seqs = 3;
    P.window = window; P.softcap = softcap; P.scale = 1.f / sqrtf((float)D);
    int lens[3] = {40 + rand() % 60, 20 + rand() % 30, 70 + rand() % 20};
    int starts[3] = {rand() % 5, 0, rand() % 10};
    P.n = lens[0] + lens[1] + lens[2];
    P.q = malloc(sizeof(float) * P.n * P.n_heads * D);
    for (int i = 0; i < P.n * P.n_heads * D; i++) P.q[i] = frand() * 3.f;
    size_t ns = (size_t)P.n_blocks * P.block_size * P.n_kv * D;
    P.kp = malloc(ns * 4); P.vp = malloc(ns * 4);
    for (size_t i = 0; i < ns; i++) { P.kp[i] = frand(); P.vp[i] = frand(); }
    P.pos = malloc(4 * P.n); P.seq = malloc(4 * P.n);
    int t = 0;
    for (int s = 0; s < 3; s++) for (int i = 0; i < lens[s]; i++, t++) {
        P.seq[t] = s; P.pos[t] = starts[s] + i;
        if (past_cache && s == 2) P.pos[t] += 20;   /* up to 115: past max_blocks*block_size-1 = 95 */
        if (seed >= 100) P.pos[t] = rand() % 100;
    }
    P.bt = malloc(4 * P.n_seqs * P.max_blocks);
    for (int i = 0; i < P.n_seqs * P.max_blocks; i++) {
        P.bt[i] = rand() % P.n_blocks;
        if (bad_blocks && rand() % 5 == 0) P.bt[i] = rand() % 2 ? -1 : P.n_blocks + 3;
    }
    if (use_sinks) { P.sinks = malloc(4 * P.n_heads); for (int h = 0; h < P.n_heads; h++) P.sinks[h] = frand() * 2.f; }
    size_t no = (size_t)P.n * P.n_heads * D;
    float *o1 = malloc(no * 4), *o2 = malloc(no * 4);
    int8_t *x1 = NULL, *x2 = NULL; float *d1 = NULL, *d2 = NULL;
    if (use_xq) { x1 = calloc(no, 1); x2 = calloc(no, 1); d1 = calloc(no / 16, 4); d2 = calloc(no / 16, 4); }
    for (size_t i = 0; i < no; i++) o2[i] = NAN;
    reference(&P, o1, x1, d1);
    if (!tiled(&P, o2, x2, d2)) { printf("declined\n"); return 1; }
    double me = 0; int nan_ = 0, zeros = 0;
    for (size_t i = 0; i < no; i++) {
        if (isnan(o2[i])) { nan_++; continue; }
        double e = fabs(o1[i] - o2[i]); if (e > me) me = e;
        if (o1[i] == 0.f) zeros++;
    }
    int qdiff = 0;
    if (use_xq) { for (size_t i = 0; i < no; i++) if (abs(x1[i] - x2[i]) > 1) qdiff++;
                  for (size_t i = 0; i < no / 32; i++) if (fabsf(d1[2 * i] - d2[2 * i]) > 1e-4f * (1 + fabsf(d1[2*i]))) qdiff++; }
    int ok = me < 1e-4 && !nan_ && !qdiff;
    printf("D=%3d win=%2d cap=%4.1f sinks=%d xq=%d past=%d bad=%d n=%d: max abs err %.2e, unwritten %d, zero-outputs %d, int8 diffs %d %s\n",
           D, window, softcap, use_sinks, use_xq, past_cache, bad_blocks, P.n, me, nan_, zeros, qdiff, ok ? "OK" : "MISMATCH");
    if (!ok) fails++;
    return 0;
}

int main(void) {
    run_case(1, 64, 0, 0.f, 0, 1, 0, 0);
    run_case(2, 128, 0, 0.f, 1, 1, 0, 0);
    run_case(3, 80, 17, 0.f, 0, 0, 0, 0);
    run_case(4, 256, 0, 30.f, 1, 1, 1, 1);
    run_case(5, 36, 5, 0.f, 1, 0, 1, 1);
    run_case(6, 128, 40, 50.f, 0, 1, 1, 0);
    run_case(7, 192, 8, 0.f, 1, 1, 1, 1);
    run_case(8, 64, 1, 0.f, 1, 1, 0, 1);
    run_case(100, 96, 0, 0.f, 1, 1, 0, 1);
    run_case(101, 128, 23, 20.f, 1, 1, 0, 1);
    run_case(102, 64, 0, 0.f, 0, 1, 0, 0);
    printf(fails ? "SIM: %d failures\n" : "SIM: all OK%d\n", fails);
    return fails != 0;
}
