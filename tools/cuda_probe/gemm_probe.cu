// gemm_probe: how fast cuBLAS runs the backend's GEMM shapes in isolation (y[n, rows] = x[n, cols] W^T,
// W [rows, cols] bf16 row-major, as backend_cuda.cu calls cublasGemmEx), for three output/compute
// variants. A measuring tool for a GPU machine, not part of the build or the tests:
//   nvcc -O2 -arch=sm_90a -o /tmp/gemm_probe tools/cuda_probe/gemm_probe.cu -lcublas && /tmp/gemm_probe
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <vector>
struct V { const char *name; cudaDataType_t ct; cublasComputeType_t comp; };
int main() {
    cublasHandle_t h; cublasCreate(&h);
    void *ws; cudaMalloc(&ws, 32 << 20); cublasSetWorkspace(h, ws, 32 << 20);
    size_t maxw = (size_t)28672 * 14336;
    __nv_bfloat16 *W, *X; void *Y;
    cudaMalloc(&W, maxw * 2); cudaMalloc(&X, (size_t)512 * 14336 * 2); cudaMalloc(&Y, (size_t)512 * 28672 * 4);
    // fill with small random-ish values via a simple kernel-free approach: memset pattern
    std::vector<__nv_bfloat16> hw(1 << 20);
    for (size_t i = 0; i < hw.size(); i++) hw[i] = __float2bfloat16(((int)((i * 2654435761u) >> 20) % 200 - 100) * 0.0005f);
    for (size_t o = 0; o < maxw; o += hw.size()) cudaMemcpy(W + o, hw.data(), std::min(hw.size(), maxw - o) * 2, cudaMemcpyHostToDevice);
    for (size_t o = 0; o < (size_t)512 * 14336; o += hw.size()) cudaMemcpy(X + o, hw.data(), std::min(hw.size(), (size_t)512 * 14336 - o) * 2, cudaMemcpyHostToDevice);
    V vs[] = {{"C f32, compute 32F", CUDA_R_32F, CUBLAS_COMPUTE_32F},
              {"C bf16, compute 32F", CUDA_R_16BF, CUBLAS_COMPUTE_32F},
              {"C f32, 32F_FAST_16BF", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF}};
    int shapes[][3] = {{4096, 4096, 512}, {1024, 4096, 512}, {14336, 4096, 512}, {28672, 4096, 512}, {4096, 14336, 512}, {6144, 4096, 512},
                       {4096, 4096, 128}, {14336, 4096, 128}, {4096, 14336, 128}, {28672, 4096, 128}};
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    const float one = 1.f, zero = 0.f;
    for (auto &s : shapes) {
        int rows = s[0], cols = s[1], n = s[2];
        for (auto &v : vs) {
            auto run = [&]() {
                return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &one, W, CUDA_R_16BF, cols, X, CUDA_R_16BF, cols,
                                    &zero, Y, v.ct, rows, v.comp, CUBLAS_GEMM_DEFAULT);
            };
            if (run() != CUBLAS_STATUS_SUCCESS) { printf("%5d x %5d n=%3d  %-22s unsupported\n", rows, cols, n, v.name); continue; }
            cudaDeviceSynchronize();
            cudaEventRecord(a);
            for (int i = 0; i < 20; i++) run();
            cudaEventRecord(b); cudaEventSynchronize(b);
            float ms; cudaEventElapsedTime(&ms, a, b); ms /= 20;
            double tf = 2.0 * rows * cols * n / (ms * 1e-3) / 1e12;
            double gbs = ((double)rows * cols * 2) / (ms * 1e-3) / 1e9;
            printf("%5d x %5d n=%3d  %-22s %8.1f us  %6.0f TFLOP/s  %6.0f GB/s of weights\n", rows, cols, n, v.name, ms * 1e3, tf, gbs);
        }
    }
    return 0;
}
