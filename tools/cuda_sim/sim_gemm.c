/* Desk simulation of k_gemm_q4 (mlxcel backend_cuda.cu) for every block/warp/lane.
 * mma.m16n8k16.row.col.f32.bf16.bf16.f32 is emulated from the documented fragment layouts
 * (PTX ISA 9.7.14.5.8 / CuTe SM80 16x8x16 layouts), NOT from the kernel's comments:
 *   A (16x16): g = lane>>2, t = lane&3; reg r holds elements 2r,2r+1 (low half = lower i):
 *      a_i: row = g (i in {0,1,4,5}) else g+8; col = 2t + (i&1) (+8 if i>=4)
 *   B (16x8):  b_i: row(k) = 2t + (i&1) (+8 if i>=2); col(n) = g
 *   C (16x8):  c_i: row = g (i<2) else g+8; col = 2t + (i&1)
 * Checks: result vs plain matmul; every global / shared access in bounds; alignment of vector
 * accesses; bank conflicts of the fragment reads. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <assert.h>
#include "mma_emul.h"

static int imin(int a, int b) { return a < b ? a : b; }

static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { if (fails++ < 20) { printf("FAIL: " __VA_ARGS__); printf("\n"); } } } while (0)

/* the kernel's gm_pack, transcribed */
static uint32_t gm_pack(float s, float b, uint32_t w, int c) {
    const float f0 = fmaf(s, (float)((w >> (4 * c)) & 15u), b), f1 = fmaf(s, (float)((w >> (4 * c + 4)) & 15u), b);
    return (uint32_t)f2bf(f0) | ((uint32_t)f2bf(f1) << 16);   /* __floats2bfloat162_rn: .x low */
}

#define GM_BM 64
#define GM_BK 64

/* "device" arrays with sizes, for bounds checks */
static uint32_t *W; static size_t nW;
static uint16_t *Sb, *Bb; static size_t nS;   /* scales/biases as bf16 */
static uint16_t *X; static size_t nX;          /* x bf16 */
static float *Y; static size_t nY;
static float *BIAS; static size_t nBias;

static void run_block(int BN, int bx, int by, int rows, int cols, int n, int gs_shift, int use_bias) {
    const int NT = BN / 8, XS = GM_BK + 8;
    uint16_t *xs = malloc(sizeof(uint16_t) * BN * XS);
    for (int i = 0; i < BN * XS; i++) xs[i] = 0xffff;   /* poison (NaN) */
    const int wpr = cols / 8, ngw = cols >> gs_shift;
    float acc[4][8][32][4];   /* [warp][t][lane][4] */
    memset(acc, 0, sizeof acc);
    for (int k0 = 0; k0 < cols; k0 += GM_BK) {
        /* phase 1: every thread stages x */
        for (int tid = 0; tid < 128; tid++)
            for (int u = tid; u < BN * 8; u += 128) {
                const int t = u >> 3, c8 = u & 7, n0 = by * BN;
                uint16_t v[8] = {0};
                if (n0 + t < n) {
                    size_t off = (size_t)(n0 + t) * cols + k0 + c8 * 8;
                    CHECK(off % 8 == 0, "x uint4 load misaligned (elem off %zu)", off);
                    CHECK(off + 8 <= nX, "x load OOB");
                    memcpy(v, X + off, 16);
                }
                size_t so = (size_t)t * XS + c8 * 8;
                CHECK(so % 8 == 0 && so + 8 <= (size_t)BN * XS, "xs store misaligned/OOB");
                memcpy(xs + so, v, 16);
            }
        /* __syncthreads, then phase 2: each warp */
        for (int w = 0; w < 4; w++) {
            const int m0 = bx * GM_BM + w * 16;
            uint32_t wl[32][8], wh[32][8];
            int rlo_[32], rhi_[32];
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2;
                const int rlo = imin(m0 + g, rows - 1), rhi = imin(m0 + g + 8, rows - 1);
                rlo_[lane] = rlo; rhi_[lane] = rhi;
                size_t plo = (size_t)rlo * wpr + k0 / 8, phi = (size_t)rhi * wpr + k0 / 8;
                CHECK(plo % 4 == 0 && phi % 4 == 0, "W uint4 load misaligned");
                CHECK(plo + 8 <= nW && phi + 8 <= nW, "W load OOB");
                for (int j = 0; j < 8; j++) { wl[lane][j] = W[plo + j]; wh[lane][j] = W[phi + j]; }
            }
            for (int s = 0; s < 4; s++) {
                uint32_t a[32][4];
                for (int lane = 0; lane < 32; lane++) {
                    const int c = 2 * (lane & 3);
                    const int gi = (k0 + 16 * s) >> gs_shift;
                    size_t il = (size_t)rlo_[lane] * ngw + gi, ih = (size_t)rhi_[lane] * ngw + gi;
                    CHECK(il < nS && ih < nS, "scale OOB");
                    /* the group really must be the same for all 16 k of the step */
                    CHECK(((k0 + 16 * s + 15) >> gs_shift) == gi, "16-wide step crosses a group");
                    const float sl = bf2f(Sb[il]), bl = bf2f(Bb[il]), sh = bf2f(Sb[ih]), bh = bf2f(Bb[ih]);
                    a[lane][0] = gm_pack(sl, bl, wl[lane][2 * s], c);
                    a[lane][1] = gm_pack(sh, bh, wh[lane][2 * s], c);
                    a[lane][2] = gm_pack(sl, bl, wl[lane][2 * s + 1], c);
                    a[lane][3] = gm_pack(sh, bh, wh[lane][2 * s + 1], c);
                }
                for (int t = 0; t < NT; t++) {
                    uint32_t b[32][2];
                    int bank_users[32][2]; memset(bank_users, -1, sizeof bank_users);
                    for (int lane = 0; lane < 32; lane++) {
                        const int g = lane >> 2, c = 2 * (lane & 3);
                        size_t xb = (size_t)(t * 8 + g) * XS + 16 * s + c;
                        CHECK(xb % 2 == 0, "xs u32 read misaligned");
                        CHECK(xb + 10 <= (size_t)BN * XS, "xs read OOB");
                        for (int h = 0; h < 2; h++) {
                            size_t e = xb + 8 * h;
                            int bank = (int)((e * 2 / 4) % 32), word = (int)(e * 2 / 4);
                            if (bank_users[bank][h] >= 0 && bank_users[bank][h] != word) CHECK(0, "bank conflict on B fragment read");
                            bank_users[bank][h] = word;
                            uint32_t v = (uint32_t)xs[e] | ((uint32_t)xs[e + 1] << 16);
                            b[lane][h] = v;
                        }
                    }
                    float d[32][4];
                    for (int lane = 0; lane < 32; lane++) for (int i = 0; i < 4; i++) d[lane][i] = acc[w][t][lane][i];
                    mma_emul(d, a, b);
                    for (int lane = 0; lane < 32; lane++) for (int i = 0; i < 4; i++) acc[w][t][lane][i] = d[lane][i];
                }
            }
        }
        /* __syncthreads */
    }
    /* epilogue, transcribed */
    for (int w = 0; w < 4; w++)
        for (int lane = 0; lane < 32; lane++) {
            const int g = lane >> 2, c = 2 * (lane & 3);
            const int m0 = bx * GM_BM + w * 16, n0 = by * BN;
            const int r0 = m0 + g, r1 = m0 + g + 8;
            const float *bias = use_bias ? BIAS : NULL;
            const float b0 = bias && r0 < rows ? bias[r0] : 0.f, b1 = bias && r1 < rows ? bias[r1] : 0.f;
            for (int t = 0; t < NT; t++) {
                const int tk = n0 + t * 8 + c;
                float *a4 = acc[w][t][lane];
#define ST(idx, val) do { size_t _i = (idx); CHECK(_i < nY, "y store OOB"); CHECK(Y[_i] != Y[_i] , "y written twice %zu", _i); Y[_i] = (val); } while (0)
                if (r0 < rows) {
                    if (tk < n) ST((size_t)tk * rows + r0, a4[0] + b0);
                    if (tk + 1 < n) ST((size_t)(tk + 1) * rows + r0, a4[1] + b0);
                }
                if (r1 < rows) {
                    if (tk < n) ST((size_t)tk * rows + r1, a4[2] + b1);
                    if (tk + 1 < n) ST((size_t)(tk + 1) * rows + r1, a4[3] + b1);
                }
            }
        }
    free(xs);
}

static unsigned nblk(long n, int b) { return (unsigned)((n + b - 1) / b); }
static float frand(void) { return (float)rand() / RAND_MAX * 2.f - 1.f; }

static void test(int rows, int cols, int n, int gs, int BN, int use_bias) {
    int gs_shift = 0; while ((1 << gs_shift) < gs) gs_shift++;
    nW = (size_t)rows * cols / 8; W = malloc(nW * 4);
    nS = (size_t)rows * (cols / gs); Sb = malloc(nS * 2); Bb = malloc(nS * 2);
    nX = (size_t)n * cols; X = malloc(nX * 2);
    nY = (size_t)n * rows; Y = malloc(nY * 4);
    nBias = rows; BIAS = malloc(rows * 4);
    for (size_t i = 0; i < nW; i++) W[i] = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
    for (size_t i = 0; i < nS; i++) { Sb[i] = f2bf(frand() * 0.1f); Bb[i] = f2bf(frand()); }
    for (size_t i = 0; i < nX; i++) X[i] = f2bf(frand());
    for (int i = 0; i < rows; i++) BIAS[i] = frand();
    for (size_t i = 0; i < nY; i++) Y[i] = NAN;
    for (unsigned bx = 0; bx < nblk(rows, GM_BM); bx++)
        for (unsigned by = 0; by < nblk(n, BN); by++) run_block(BN, bx, by, rows, cols, n, gs_shift, use_bias);
    /* reference: plain matmul of the MLX affine dequantization (value j of a word at bits 4j) */
    double maxerr = 0; int unwritten = 0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            double s = 0;
            for (int k = 0; k < cols; k++) {
                uint32_t word = W[(size_t)r * (cols / 8) + k / 8];
                int q = (word >> (4 * (k % 8))) & 15;
                float sc = bf2f(Sb[(size_t)r * (cols / gs) + k / gs]), bi = bf2f(Bb[(size_t)r * (cols / gs) + k / gs]);
                float wv = bf2f(f2bf(fmaf(sc, (float)q, bi)));   /* bf16 operand, as cuBLAS path */
                s += (double)wv * bf2f(X[(size_t)t * cols + k]);
            }
            if (use_bias) s += BIAS[r];
            float y = Y[(size_t)t * rows + r];
            if (y != y) { unwritten++; continue; }
            double e = fabs(y - s) / (1.0 + fabs(s));
            if (e > maxerr) maxerr = e;
        }
    printf("rows=%d cols=%d n=%d gs=%d BN=%d bias=%d: max rel err %.2e, unwritten %d %s\n", rows, cols, n, gs, BN, use_bias,
           maxerr, unwritten, (maxerr < 1e-4 && !unwritten) ? "OK" : "MISMATCH");
    if (!(maxerr < 1e-4 && !unwritten)) fails++;
    free(W); free(Sb); free(Bb); free(X); free(Y); free(BIAS);
}

int main(void) {
    srand(1);
    test(64, 64, 32, 64, 32, 0);
    test(128, 128, 64, 32, 64, 1);
    test(100, 192, 37, 16, 32, 1);    /* rows not a multiple of 64, n not of the tile */
    test(70, 256, 70, 128, 64, 0);
    test(1, 64, 9, 64, 32, 1);
    test(200, 128, 130, 64, 64, 1);
    test(64, 512, 17, 256, 64, 1);
    /* the unit test's fused shapes (test_backend_cuda.c g_mm, bits 4, n > 16), both tile widths */
    for (int bn = 32; bn <= 64; bn += 32) {
        test(300, 512, 17, 64, bn, 1);
        test(130, 1024, 100, 32, bn, 0);
        test(256, 2048, 128, 128, bn, 1);
        test(64, 4096, 40, 64, bn, 0);
    }
    printf(fails ? "SIM: %d failures\n" : "SIM: all OK%d\n", fails);
    return fails != 0;
}
