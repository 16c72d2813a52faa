/* tools/cuda_sim/mma_emul.h: what the CPU simulations share: bf16 rounding (round to nearest
 * even, as __float2bfloat16 / __floats2bfloat162_rn on finite values) and mma.sync.m16n8k16
 * .row.col.f32.bf16.bf16.f32 emulated from the PTX ISA's documented fragment layouts (not from a
 * kernel's comments):
 *   A (16x16): g = lane>>2, t = lane&3; reg r holds elements 2r,2r+1 (low half = lower i):
 *      a_i: row = g (i in {0,1,4,5}) else g+8; col = 2t + (i&1) (+8 if i>=4)
 *   B (16x8):  b_i: row(k) = 2t + (i&1) (+8 if i>=2); col(n) = g
 *   C (16x8):  c_i: row = g (i<2) else g+8; col = 2t + (i&1) */
#ifndef MX_CUDA_SIM_MMA_EMUL_H
#define MX_CUDA_SIM_MMA_EMUL_H
#include <assert.h>
#include <stdint.h>
#include <string.h>

static uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); uint32_t r = 0x7fff + ((u >> 16) & 1); return (uint16_t)((u + r) >> 16); }
static float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

/* emulated mma: d += A*B using per-lane registers and the documented layouts */
static void mma_emul(float d[32][4], const uint32_t a[32][4], const uint32_t b[32][2]) {
    float A[16][16], B[16][8];
    int seenA[16][16] = {{0}}, seenB[16][8] = {{0}};
    for (int lane = 0; lane < 32; lane++) {
        int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 8; i++) {
            int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
            int col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
            uint32_t reg = a[lane][i / 2];
            uint16_t h = (i & 1) ? (uint16_t)(reg >> 16) : (uint16_t)(reg & 0xffff);
            A[row][col] = bf2f(h); seenA[row][col]++;
        }
        for (int i = 0; i < 4; i++) {
            int k = 2 * t + (i & 1) + (i >= 2 ? 8 : 0), n = g;
            uint32_t reg = b[lane][i / 2];
            uint16_t h = (i & 1) ? (uint16_t)(reg >> 16) : (uint16_t)(reg & 0xffff);
            B[k][n] = bf2f(h); seenB[k][n]++;
        }
    }
    for (int r = 0; r < 16; r++) for (int c = 0; c < 16; c++) assert(seenA[r][c] == 1);
    for (int r = 0; r < 16; r++) for (int c = 0; c < 8; c++) assert(seenB[r][c] == 1);
    for (int lane = 0; lane < 32; lane++) {
        int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
            float s = 0.f;
            for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
            d[lane][i] += s;
        }
    }
}

#endif
