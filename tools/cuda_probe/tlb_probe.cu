// tools/cuda_probe/tlb_probe.cu: what a decode step's attention pays for where the KV pool puts a
// layer's rows. Between two layers' attentions a batch-1 step streams that layer's weights (~130 MB
// at Llama-8B q4, ~12 MB at Qwen3-0.6B); then the attention's first K/V load is a dependent load on
// the critical path. This probe models it: for each of 32 "layers", all multiprocessors stream W
// bytes of a large buffer, then one thread times two dependent loads into the pool:
//   first   the layer's row (never in L2: each visit takes a new line), the one the attention waits for;
//   second  a line 64 KB further in the same 2 MB page (also not in L2), so its address translation
//           is warm: first - second is what the translation costs.
// The layer's rows lie `stride` bytes apart: 0 = every layer in one region (the rows of a slot's
// layers side by side, [slot][layer]), 256 KB = a pool of 128 positions a layer ([layer][slot],
// Llama-8B's 2 KB a position), 1 MB = 512 positions, 8 MB and 64 MB = a server's pool.
// Not a test: prints "PROBE name value unit" lines. Exit 1 on a CUDA error.
//   nvcc -O2 -gencode arch=compute_90a,code=sm_90a -o tlb_probe tools/cuda_probe/tlb_probe.cu
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__global__ void k_stream(const uint4 *__restrict__ w, size_t n16, unsigned *sink) {
    uint32_t acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = __ldcs(w + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345679u) atomicAdd(sink, 1u);
}

__device__ __forceinline__ unsigned ld_cg(const unsigned *p) {
    unsigned v;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* an instruction that reads v: issue is in order, so a clock read after it comes after v arrived */
__device__ __forceinline__ unsigned use(unsigned v) {
    unsigned w;
    asm volatile("add.u32 %0, %1, 1;" : "=r"(w) : "r"(v) : "memory");
    return w;
}
__device__ __forceinline__ long long clk() {
    long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) :: "memory");
    return t;
}
/* one thread: two dependent loads, each timed from its issue to an instruction that uses it */
__global__ void k_probe(const char *pool, size_t off, long long *out, unsigned *sink) {
    const unsigned *a = (const unsigned *)(pool + off);
    long long t0 = clk();
    unsigned v = use(ld_cg(a));
    long long t1 = clk();
    const unsigned *b = (const unsigned *)(pool + off + 65536 + ((v & 1u) << 2));   /* depends on v */
    unsigned u = use(ld_cg(b));
    long long t2 = clk();
    out[0] = t1 - t0;
    out[1] = t2 - t1;
    if (u == 0x12345679u) atomicAdd(sink, 1u);
}

int main() {
    int dev = 0, sms = 0, clk = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev));   /* kHz */
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, dev));
    printf("PROBE device %s sms %d clock_khz %d\n", pr.name, sms, clk);
    const size_t WB = (size_t)6 << 30, PB = (size_t)3 << 30;
    char *w = NULL, *pool = NULL;
    unsigned *sink = NULL;
    long long *out = NULL;
    CK(cudaMalloc(&w, WB));
    CK(cudaMalloc(&pool, PB));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMallocHost(&out, 2 * sizeof(long long)));
    CK(cudaMemset(w, 1, WB));
    CK(cudaMemset(pool, 2, PB));
    const size_t strides[] = {0, 256u << 10, 1u << 20, 8u << 20, 64u << 20};
    const size_t streams[] = {(size_t)130 << 20, (size_t)12 << 20, 0};
    const int L = 32, STEPS = 6;
    for (size_t sb : streams) {
        for (size_t st : strides) {
            std::vector<double> f, s;
            size_t woff = 0;
            for (int step = 0; step < STEPS; step++) {
                for (int l = 0; l < L; l++) {
                    if (sb) {
                        if (woff + sb > WB) woff = 0;
                        k_stream<<<sms * 4, 512>>>((const uint4 *)(w + woff), sb / 16, sink);
                        woff += sb;
                    }
                    /* a new line each visit: step * 128 B past the layer's row, within 32 KB */
                    size_t off = (size_t)l * (st ? st : 2048) + (size_t)step * 4096 + 128 * (size_t)(l % 8);
                    if (st == 0) off = (size_t)l * 2048 + (size_t)step * 128 * 1024;   /* [slot][layer]: 64 KB a slot */
                    k_probe<<<1, 1>>>(pool, off, out, sink);
                    CK(cudaDeviceSynchronize());
                    if (step >= 2) { f.push_back((double)out[0]); s.push_back((double)out[1]); }
                }
            }
            std::sort(f.begin(), f.end());
            std::sort(s.begin(), s.end());
            double mf = 0, ms = 0;
            for (double x : f) mf += x;
            for (double x : s) ms += x;
            mf /= f.size(); ms /= s.size();
            const double ns = 1e6 / clk;
            printf("PROBE stream_mb %zu stride_kb %zu first_ns %.0f (median %.0f) second_ns %.0f (median %.0f) "
                   "translation_ns %.0f\n",
                   sb >> 20, st >> 10, mf * ns, f[f.size() / 2] * ns, ms * ns, s[s.size() / 2] * ns, (mf - ms) * ns);
        }
    }
    CK(cudaGetLastError());
    return 0;
}
