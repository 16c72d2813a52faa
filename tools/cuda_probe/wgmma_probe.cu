// wgmma_probe: checks, on an sm_90a GPU, the facts a wgmma main loop for k_gemm_gq would rest on
// (src/backend/cuda/NOTES.md, "Next experiments" 1), before any kernel is built on them:
//  - the A operand from registers: warp w of the warpgroup holds rows 16 w .. 16 w + 15 in the
//    register layout of mma.sync m16n8k16's A (gm_mma: a0 {row g, k 2c, 2c+1}, a1 {g + 8, 2c},
//    a2 {g, 2c + 8}, a3 {g + 8, 2c + 8}; g = lane / 4, c = lane % 4);
//  - the accumulators: for each 8-column tile j of N, d[4j .. 4j+3] as mma.sync's C of that tile
//    (rows 16 w + g and 16 w + g + 8, columns 8 j + 2c, 2c + 1);
//  - the B operand (K x N) from shared memory without swizzle, K-major (imm-trans-b 0): "core
//    matrices" of 8 columns n x 8 k values (16 bytes a column, 128 bytes each), LBO the byte
//    distance between core matrices adjacent along K, SBO between those adjacent along N (the
//    descriptor: start >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, swizzle 0 in 62-63).
// Each variant computes D = A B (m64nNk16, then two k steps accumulated) on integer-valued bf16
// inputs, exact in f32, and compares with the host product: PASS / FAIL a variant, with the first
// mismatches. The data are also placed one way and described the other, so that one run shows
// which reading of LBO / SBO holds.
// A measuring tool for a GPU machine, not part of the build or the tests:
//   nvcc -O2 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_probe tools/cuda_probe/wgmma_probe.cu && /tmp/wgmma_probe
// (wgmma exists only in the arch-specific sm_90a target: a kernel using it in the backend, which
// also embeds compute_90 PTX, needs its wgmma code under __CUDA_ARCH_FEAT_SM90_ALL)
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>

#define N_MAX 128
#define K_STEPS 2   // two k16 steps: the second accumulates (scale-d 1)

__device__ __forceinline__ uint64_t smem_desc(const void *p, uint32_t lbo, uint32_t sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a >> 4) & 0x3FFF) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) | ((uint64_t)((sbo >> 4) & 0x3FFF) << 32);
}

// one k16 step for N = 8 or 128 (the two shapes the probe runs)
template <int N>
__device__ __forceinline__ void wgmma_step(float *d, const uint32_t *a, uint64_t bdesc, int accumulate);
template <>
__device__ __forceinline__ void wgmma_step<8>(float *d, const uint32_t *a, uint64_t bdesc, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "r"(accumulate));
}
#define D8(i) "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
template <>
__device__ __forceinline__ void wgmma_step<128>(float *d, const uint32_t *a, uint64_t bdesc, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                 : D8(0), D8(8), D8(16), D8(24), D8(32), D8(40), D8(48), D8(56)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "r"(accumulate));
}

__device__ __forceinline__ uint32_t pack2(const __nv_bfloat16 *A, int row, int k) {   // A[row][k], A[row][k+1]
    uint32_t lo = *(const uint16_t *)&A[row * 16 * K_STEPS + k], hi = *(const uint16_t *)&A[row * 16 * K_STEPS + k + 1];
    return lo | hi << 16;
}

// A: 64 x (16 K_STEPS) row-major; Bt: N x (16 K_STEPS) (B transposed, i.e. column n of B is row n);
// the B tile of each k step is laid out in shared memory as core matrices at
// (k core kc, n core nc) -> kc * lbo + nc * sbo + (n % 8) * 16 + (k % 8) * 2.
template <int N>
__global__ void probe(const __nv_bfloat16 *A, const __nv_bfloat16 *Bt, float *D, uint32_t lbo, uint32_t sbo, uint32_t dlbo,
                      uint32_t dsbo) {
    __shared__ __align__(1024) unsigned char sb[K_STEPS][16384];
    const int t = threadIdx.x, w = t / 32, lane = t % 32, g = lane / 4, c = lane % 4;
    for (int i = t; i < K_STEPS * 16384; i += blockDim.x) (&sb[0][0])[i] = 0;
    __syncthreads();
    for (int e = t; e < K_STEPS * N * 16; e += blockDim.x) {
        const int s = e / (N * 16), n = (e / 16) % N, k = e % 16;
        const size_t off = (size_t)(k / 8) * lbo + (size_t)(n / 8) * sbo + (n % 8) * 16 + (k % 8) * 2;
        if (off + 2 <= 16384) *(__nv_bfloat16 *)&sb[s][off] = Bt[n * 16 * K_STEPS + s * 16 + k];
    }
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // generic-proxy writes seen by wgmma
    float d[N / 2];
    for (int i = 0; i < N / 2; i++) d[i] = 0.f;
    for (int s = 0; s < K_STEPS; s++) {
        const int r = 16 * w + g, k0 = 16 * s + 2 * c;
        const uint32_t a[4] = {pack2(A, r, k0), pack2(A, r + 8, k0), pack2(A, r, k0 + 8), pack2(A, r + 8, k0 + 8)};
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        wgmma_step<N>(d, a, smem_desc(&sb[s][0], dlbo, dsbo), s > 0);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    for (int j = 0; j < N / 8; j++) {   // the hypothesised accumulator layout
        const int r0 = 16 * w + g, col = 8 * j + 2 * c;
        D[r0 * N + col] = d[4 * j]; D[r0 * N + col + 1] = d[4 * j + 1];
        D[(r0 + 8) * N + col] = d[4 * j + 2]; D[(r0 + 8) * N + col + 1] = d[4 * j + 3];
    }
}

template <int N>
static int run(const char *what, uint32_t lbo, uint32_t sbo, uint32_t dlbo, uint32_t dsbo) {
    const int K = 16 * K_STEPS;
    std::vector<__nv_bfloat16> hA(64 * K), hB(N * K);
    std::vector<float> fA(64 * K), fB(N * K), ref(64 * N, 0.f), got(64 * N, -1.f);
    for (int i = 0; i < 64 * K; i++) { fA[i] = (float)((i * 7 + i / K * 3) % 9 - 4); hA[i] = __float2bfloat16(fA[i]); }
    for (int i = 0; i < N * K; i++) { fB[i] = (float)((i * 5 + i / K) % 7 - 3); hB[i] = __float2bfloat16(fB[i]); }
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < N; n++) {
            float s = 0.f;
            for (int k = 0; k < K; k++) s += fA[m * K + k] * fB[n * K + k];
            ref[m * N + n] = s;
        }
    __nv_bfloat16 *dA, *dB; float *dD;
    cudaMalloc(&dA, hA.size() * 2); cudaMalloc(&dB, hB.size() * 2); cudaMalloc(&dD, got.size() * 4);
    cudaMemcpy(dA, hA.data(), hA.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, hB.data(), hB.size() * 2, cudaMemcpyHostToDevice);
    cudaMemset(dD, 0xff, got.size() * 4);
    probe<N><<<1, 128>>>(dA, dB, dD, lbo, sbo, dlbo, dsbo);
    cudaError_t e = cudaDeviceSynchronize();
    cudaMemcpy(got.data(), dD, got.size() * 4, cudaMemcpyDeviceToHost);
    cudaFree(dA); cudaFree(dB); cudaFree(dD);
    if (e != cudaSuccess) { printf("FAIL %-40s N=%3d: %s\n", what, N, cudaGetErrorString(e)); return 1; }
    int bad = 0;
    for (int i = 0; i < 64 * N; i++) bad += got[i] != ref[i];
    printf("%s %-40s N=%3d (placed %u/%u, descriptor LBO %u SBO %u): %d of %d values differ\n", bad ? "FAIL" : "PASS", what, N,
           lbo, sbo, dlbo, dsbo, bad, 64 * N);
    for (int i = 0, shown = 0; i < 64 * N && shown < 4; i++)
        if (got[i] != ref[i]) { printf("     D[%d][%d] = %g, expected %g\n", i / N, i % N, got[i], ref[i]); shown++; }
    return bad != 0;
}

int main() {
    int dev = 0; cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess || p.major < 9) { printf("needs an sm_90 GPU\n"); return 2; }
    printf("%s, sm_%d%d\n", p.name, p.major, p.minor);
    // Placed: core (kc, nc) at kc * lbo + nc * sbo. Descriptor: what the instruction is told.
    // Expected with the reading above: the first four PASS, the last two FAIL (they tell it the
    // other way round); if the first four FAIL and the last two PASS, LBO and SBO are the other way.
    int f = 0;
    f += run<8>("N=8, K cores adjacent", 128, 256, 128, 256);
    f += run<8>("N=8, K cores 256 apart", 256, 128, 256, 128);
    f += run<128>("N=128, K pairs adjacent", 128, 256, 128, 256);
    f += run<128>("N=128, K halves as planes", 2048, 128, 2048, 128);
    const int g = run<128>("N=128, told swapped (K pairs adjacent)", 128, 256, 256, 128) +
                  run<128>("N=128, told swapped (K halves as planes)", 2048, 128, 128, 2048);
    printf("%s\n", f == 0 && g == 2 ? "PROBE: the A/D register layouts and the no-swizzle LBO/SBO reading hold"
                                    : "PROBE: something differs from the reading above (see the rows)");
    return 0;
}
