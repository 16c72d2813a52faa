// tools/cuda_probe/sync_probe.cu: what the persistent decode kernel (src/backend/cuda/
// fused_decode.cuh) rests on, measured alone on the GPU (sm_90): a block per multiprocessor, warp 0
// streaming a buffer through a ring of shared-memory slots with bulk copies (cp.async.bulk, an
// mbarrier a slot), warps 1-15 either freeing the slots at once or doing something else:
//   1. the ring's streaming rate (consumers free slots at once): the HBM ceiling of that design;
//   2. a grid barrier (release add + acquire polls, as fd_grid_sync), alone and while warp 0
//      streams;
//   3. a dependent chain of L2 loads (thread 0 of each block, a random cycle over 16 MB), alone and
//      while warp 0 streams.
// Not a test: prints "PROBE name value unit" lines (gpu_check.sh, stage syncprobe). Exit 1 on a
// CUDA error.
//   nvcc -O2 -gencode arch=compute_90a,code=sm_90a -o sync_probe tools/cuda_probe/sync_probe.cu
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <random>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

constexpr int THREADS = 512, CT = 480, NSLOT = 5, SLOT = 32768;

__device__ __forceinline__ uint32_t sa(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *b, int n) { asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(sa(b)), "r"(n) : "memory"); }
__device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t n) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sa(b)) : "memory"); }
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t par) {
    uint32_t ok = 0;
    while (!ok)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok) : "r"(sa(b)), "r"(par) : "memory");
}
__device__ __forceinline__ void cbar() { asm volatile("bar.sync 1, %0;" ::"n"(CT) : "memory"); }
__device__ __forceinline__ unsigned ld_acq(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// mode bit 0: warp 0 streams `chunks` slots of the buffer (wrapping within the block's part) and
// thread 0 of the consumers frees them: while it measures (between polls and loads) and then until
// all have landed; bit 2: grid barriers; bit 3: the dependent L2 chain. out[block]: cycles of the
// measurement.
__global__ void __launch_bounds__(THREADS, 1) k_probe(const uint8_t *buf, size_t bytes, int chunks, int mode,
                                                      unsigned *ctr, const uint32_t *chain, int nbar, int nchase,
                                                      unsigned long long *out) {
    extern __shared__ __align__(128) uint8_t sm[];
    uint64_t *full = (uint64_t *)(sm + NSLOT * SLOT), *empty = full + NSLOT;
    if (threadIdx.x == 0) {
        for (int s = 0; s < NSLOT; s++) { mbar_init(&full[s], 1); mbar_init(&empty[s], 1); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ctid = threadIdx.x - 32;
    const bool stream = mode & 1;
    const size_t per = bytes / gridDim.x / SLOT * SLOT;
    const uint8_t *mine = buf + per * blockIdx.x;
    if (warp == 0) {
        if (lane != 0 || !stream) return;
        for (int ci = 0; ci < chunks; ci++) {
            const int s = ci % NSLOT;
            mbar_wait(&empty[s], ((ci / NSLOT) & 1) ^ 1);
            mbar_expect(&full[s], SLOT);
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(sa(sm + s * SLOT)), "l"(mine + ((size_t)ci * SLOT) % per), "r"(SLOT), "r"(sa(&full[s]))
                         : "memory");
        }
        return;
    }
    int ci = 0;   // slots thread 0 has freed
    auto poll_ring = [&]() {
        if (!stream || ci >= chunks) return;
        const int s = ci % NSLOT;
        uint32_t ok;
        asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok) : "r"(sa(&full[s])), "r"((uint32_t)(ci / NSLOT) & 1) : "memory");
        if (ok) { mbar_arrive(&empty[s]); ci++; }
    };
    const long long t0 = clock64();
    uint32_t j = blockIdx.x * 977u;
    if (mode & 4) {   // grid barriers, as fd_grid_sync
        for (int b = 1; b <= nbar; b++) {
            cbar();
            if (ctid == 0) {
                asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(ctr) : "memory");
                while (ld_acq(ctr) < (unsigned)b * gridDim.x) poll_ring();
            }
            cbar();
        }
    }
    if ((mode & 8) && ctid == 0)   // a dependent chain of L2 loads
        for (int i = 0; i < nchase; i++) { j = __ldcg(chain + j); poll_ring(); }
    const long long t1 = clock64();
    if (ctid == 0) {
        out[blockIdx.x] = (unsigned long long)(t1 - t0) + (j == 0xffffffffu ? 1 : 0);
        for (; stream && ci < chunks; ci++) {   // the rest of the stream (all of it for mode 1)
            const int s = ci % NSLOT;
            mbar_wait(&full[s], (uint32_t)(ci / NSLOT) & 1u);
            mbar_arrive(&empty[s]);
        }
    }
}

int main() {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int clk_khz = 0;
    CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
    const int G = p.multiProcessorCount;
    const size_t bytes = (size_t)4 << 30;
    uint8_t *buf;
    CK(cudaMalloc(&buf, bytes));
    CK(cudaMemset(buf, 1, bytes));
    const int nch = 16 << 20 >> 2;   // 16 MB of u32: a random cycle
    std::vector<uint32_t> perm(nch), nxt(nch);
    for (int i = 0; i < nch; i++) perm[i] = i;
    std::mt19937 rng(7);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int i = 0; i < nch; i++) nxt[perm[i]] = perm[(i + 1) % nch];
    uint32_t *chain;
    CK(cudaMalloc(&chain, nch * 4));
    CK(cudaMemcpy(chain, nxt.data(), nch * 4, cudaMemcpyHostToDevice));
    unsigned *ctr;
    unsigned long long *out;
    CK(cudaMalloc(&ctr, 4));
    CK(cudaMalloc(&out, G * 8));
    const size_t smem = NSLOT * SLOT + 2 * NSLOT * 8;
    CK(cudaFuncSetAttribute(k_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    auto run = [&](int mode, int chunks, int nbar, int nchase, double *ms, double *cyc_max) {
        CK(cudaMemset(ctr, 0, 4));
        cudaEventRecord(e0);
        k_probe<<<G, THREADS, smem>>>(buf, bytes, chunks, mode, ctr, chain, nbar, nchase, out);
        cudaEventRecord(e1);
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float f;
        cudaEventElapsedTime(&f, e0, e1);
        std::vector<unsigned long long> h(G);
        CK(cudaMemcpy(h.data(), out, G * 8, cudaMemcpyDeviceToHost));
        *ms = f;
        *cyc_max = (double)*std::max_element(h.begin(), h.end());
    };
    double ms, cyc;
    const int chunks = (int)(bytes / G / SLOT);   // the whole buffer once
    run(1, chunks, 0, 0, &ms, &cyc);   // warm-up
    run(1, chunks, 0, 0, &ms, &cyc);
    printf("PROBE ring_stream %.0f GB/s (%d blocks, %d slots of %d bytes, %.2f GB)\n", (double)chunks * SLOT * G / ms / 1e6, G,
           NSLOT, SLOT, (double)chunks * SLOT * G / 1e9);
    const int nbar = 2000, nchase = 4000;
    const double us_per_cyc = 1e3 / clk_khz;
    run(4, 0, nbar, 0, &ms, &cyc);
    run(4, 0, nbar, 0, &ms, &cyc);
    printf("PROBE grid_barrier %.3f us (alone)\n", cyc * us_per_cyc / nbar);
    run(5, 4 * chunks, nbar, 0, &ms, &cyc);
    printf("PROBE grid_barrier_streaming %.3f us (warp 0 streaming)\n", cyc * us_per_cyc / nbar);
    run(8, 0, 0, nchase, &ms, &cyc);
    printf("PROBE l2_chain %.0f ns a load (alone)\n", cyc * us_per_cyc * 1e3 / nchase);
    run(9, 4 * chunks, 0, nchase, &ms, &cyc);
    printf("PROBE l2_chain_streaming %.0f ns a load (warp 0 streaming)\n", cyc * us_per_cyc * 1e3 / nchase);
    return 0;
}
