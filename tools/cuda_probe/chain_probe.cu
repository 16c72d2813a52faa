// tools/cuda_probe/chain_probe.cu: what a hand-off between two dependent kernels costs, measured
// alone on the GPU (sm_90), for the batch-1 decode steps, which are chains of ~8 small dependent
// kernels a layer (NOTES.md: Qwen3-0.6B spends ~28 us a layer of which the weights are ~3).
//
// A chain of kernels, each reading all of the vector the kernel before it wrote (one L2 round trip
// and a block reduction) and writing its share of the next one, handed over in four ways:
//   stream  plain stream order (no programmatic dependent launch)
//   pdl     programmatic dependent launch as the backend's pdl_entry does it: griddepcontrol.wait,
//           then griddepcontrol.launch_dependents
//   pdl_rel the same with the release first (launch_dependents at entry, then wait), as the decode
//           matvecs (pdl_entry_weights_first)
//   flag    launch_dependents at entry, and instead of griddepcontrol.wait thread 0 of each block
//           polls a counter that each block of the kernel before adds to (red.release / ld.acquire,
//           as a grid barrier) once it has written its share: the wait for the grid's completion
//           and its memory flush is replaced by a wait for the data
// each as eager launches and as graph replays. A step is a host-to-device copy (as the decoder's
// metadata upload, which also orders steps) and the chain. The values are integers that name the
// step and the kernel, and every kernel checks what it read (a read before the kernel before it
// wrote counts as an error), so a hand-off that breaks the order is seen, not timed.
// Shapes: "qwen06": Qwen3-0.6B's batch-1 step as launched now (28 layers of norm 1x1024, q/k/v on the
// ring 132x512 with 160 KB of shared memory, q/k prep 32x64, attention 16x512, o on the ring, norm,
// the gate/up pair on the ring, down on the ring; then the final norm and the LM head on the ring); "tiny": 224 kernels
// of one 256-thread block; "wide": 224 kernels of 132 blocks of 512 threads (no shared memory).
// Not a test: prints "PROBE name value unit" lines (gpu_check.sh, stage chainprobe). Exit 1 on a
// CUDA error or on any read out of order.
//   nvcc -O2 -gencode arch=compute_90a,code=sm_90a -o chain_probe tools/cuda_probe/chain_probe.cu
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

enum { M_STREAM, M_PDL, M_PDL_REL, M_FLAG, M_N };
static const char *const k_mode[M_N] = {"stream", "pdl", "pdl_rel", "flag"};
constexpr int D = 1024;          // values a vector
constexpr int SMEM_RING = 160 << 10;

__device__ __forceinline__ void gd_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void gd_release() { asm volatile("griddepcontrol.launch_dependents;" :::); }
__device__ __forceinline__ unsigned ld_acq(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_rel(unsigned *p) { asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory"); }

struct link {
    const unsigned *x;        // the vector the kernel before wrote
    unsigned *y;              // this kernel's
    unsigned *ctr;            // counters, one a kernel of the step (flag)
    const unsigned *step;     // the step's number (uploaded before the chain)
    int *err;
    int k, nk;                // this kernel's index in the chain, the chain's length
    unsigned prev_blocks;     // blocks of the kernel before (flag)
};

// The kernel k of the chain: v(k, step) = step * nk + k is what it writes; it expects to read
// v(k, step) - 1 everywhere (kernel 0: the last kernel of the step before).
template <int MODE>
__global__ void k_link(const link a) {
    extern __shared__ unsigned smem_pad[];   // (only to occupy shared memory as the ring kernels do)
    __shared__ unsigned red[32];
    if (MODE == M_PDL_REL || MODE == M_FLAG) gd_release();
    if (MODE == M_PDL || MODE == M_PDL_REL) gd_wait();
    if (MODE == M_PDL) gd_release();
    if (MODE == M_FLAG && a.k > 0) {
        if (threadIdx.x == 0) {
            // (bounded: a count that never comes is an error, not a hang)
            for (long long i = 0; ld_acq(&a.ctr[a.k - 1]) != a.prev_blocks; i++)
                if (i == (1ll << 22)) { atomicAdd(a.err, 1 << 20); break; }   // (~2 s)
            // every block of kernel k-1 has passed its own poll of ctr[k-2]: nobody reads it again
            // this step
            if (blockIdx.x == 0 && a.k >= 2) a.ctr[a.k - 2] = 0;
        }
        __syncthreads();
    }
    const unsigned step = *a.step, want = step * (unsigned)a.nk + (unsigned)a.k;
    unsigned bad = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) bad += a.x[i] != want - 1u;
    // (a block reduction, as the real kernels' norms do)
    for (int o = 16; o; o >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = bad;
    __syncthreads();
    if (threadIdx.x < 32) {
        unsigned b = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0u;
        for (int o = 16; o; o >>= 1) b += __shfl_xor_sync(0xffffffffu, b, o);
        if (threadIdx.x == 0 && b) atomicAdd(a.err, (int)b);
    }
    const int per = (D + gridDim.x - 1) / gridDim.x, j0 = blockIdx.x * per, j1 = min(D, j0 + per);
    for (int j = j0 + threadIdx.x; j < j1; j += blockDim.x) a.y[j] = want;
    if (MODE == M_FLAG) {
        __syncthreads();   // the block's stores before its count
        if (threadIdx.x == 0) { __threadfence(); red_rel(&a.ctr[a.k]); }
    }
    (void)smem_pad;
}

struct kspec { int blocks, threads, smem; };

int main() {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    const int G = p.multiProcessorCount;
    const kspec norm = {1, 1024, 0}, ring = {G, 512, SMEM_RING}, prep = {32, 64, 0}, attn = {16, 512, 0};
    struct shape { const char *name; std::vector<kspec> ks; };
    std::vector<shape> shapes(3);
    shapes[0].name = "qwen06";
    for (int l = 0; l < 28; l++)
        for (const kspec &k : {norm, ring, prep, attn, ring, norm, ring, ring}) shapes[0].ks.push_back(k);
    shapes[0].ks.push_back(norm);   // the final norm and the LM head
    shapes[0].ks.push_back(ring);
    shapes[1].name = "tiny";
    shapes[1].ks.assign(224, kspec{1, 256, 0});
    shapes[2].name = "wide";
    shapes[2].ks.assign(224, kspec{G, 512, 0});
    void (*const kf[M_N])(const link) = {k_link<M_STREAM>, k_link<M_PDL>, k_link<M_PDL_REL>, k_link<M_FLAG>};
    for (int m = 0; m < M_N; m++) CK(cudaFuncSetAttribute(kf[m], cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_RING));
    unsigned *buf, *ctr, *stepd;
    int *err;
    CK(cudaMalloc(&buf, 2 * D * sizeof(unsigned)));
    CK(cudaMalloc(&ctr, 512 * sizeof(unsigned)));
    CK(cudaMalloc(&stepd, sizeof(unsigned)));
    CK(cudaMalloc(&err, sizeof(int)));
    unsigned *hstep;
    CK(cudaMallocHost(&hstep, 64 * sizeof(unsigned)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    int fails = 0;
    for (const shape &sh : shapes) {
        const int nk = (int)sh.ks.size();   // (even: kernel 0 reads buf[1], which the last one wrote)
        if (nk % 2 || nk > 512) { printf("FAIL chain_%s: %d kernels (an even number up to 512)\n", sh.name, nk); return 1; }
        for (int m = 0; m < M_N; m++) {
            // the step: its number uploaded and the counters that no kernel of the step before reset
            // (its last two) set to 0, then the chain (kernel 0 in plain order after the copy)
            auto enqueue = [&](unsigned *src) {
                CK(cudaMemcpyAsync(stepd, src, sizeof(unsigned), cudaMemcpyHostToDevice, st));
                CK(cudaMemsetAsync(ctr + nk - 2, 0, 2 * sizeof(unsigned), st));
                for (int k = 0; k < nk; k++) {
                    link a;
                    a.x = buf + (size_t)((k + 1) & 1) * D; a.y = buf + (size_t)(k & 1) * D;
                    a.ctr = ctr; a.step = stepd; a.err = err; a.k = k; a.nk = nk;
                    a.prev_blocks = (unsigned)sh.ks[(k + nk - 1) % nk].blocks;
                    const kspec &ks = sh.ks[k];
                    cudaLaunchConfig_t cfg = {};
                    cudaLaunchAttribute at[1] = {};
                    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                    at[0].val.programmaticStreamSerializationAllowed = 1;
                    cfg.gridDim = dim3((unsigned)ks.blocks); cfg.blockDim = dim3((unsigned)ks.threads);
                    cfg.dynamicSmemBytes = (size_t)ks.smem; cfg.stream = st;
                    cfg.attrs = at; cfg.numAttrs = (m != M_STREAM && k > 0) ? 1 : 0;
                    CK(cudaLaunchKernelEx(&cfg, kf[m], a));
                }
            };
            // a consistent start: the vector holds what the step before step 1 left, counters 0
            std::vector<unsigned> init(D, (unsigned)nk - 1u);   // v(nk - 1, 0)
            CK(cudaMemcpy(buf + D, init.data(), D * sizeof(unsigned), cudaMemcpyHostToDevice));
            CK(cudaMemset(ctr, 0, 512 * sizeof(unsigned)));
            CK(cudaMemset(err, 0, sizeof(int)));
            CK(cudaDeviceSynchronize());
            const int R = 20;
            unsigned s = 1;
            // eager: 3 warm-up steps, then R timed; each step's number from its own pinned word
            for (int w = 0; w < 3; w++, s++) { hstep[s % 64] = s; enqueue(&hstep[s % 64]); }
            CK(cudaEventRecord(e0, st));
            for (int r = 0; r < R; r++, s++) { hstep[s % 64] = s; enqueue(&hstep[s % 64]); }
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            float ms_e;
            CK(cudaEventElapsedTime(&ms_e, e0, e1));
            // graph: one step captured, its number from a word the host rewrites between replays
            cudaGraph_t g;
            cudaGraphExec_t ge;
            unsigned *gword = &hstep[63];
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            enqueue(gword);
            CK(cudaStreamEndCapture(st, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            float ms_g = 0.f;
            for (int r = -3; r < R; r++, s++) {
                if (r == 0) CK(cudaEventRecord(e0, st));
                // (the copy reads the word when it runs: wait for the previous replay first)
                CK(cudaStreamSynchronize(st));
                *gword = s;
                if (r >= 0) {   // time each replay alone (the host wait above is outside it)
                    CK(cudaEventRecord(e0, st));
                    CK(cudaGraphLaunch(ge, st));
                    CK(cudaEventRecord(e1, st));
                    CK(cudaEventSynchronize(e1));
                    float f;
                    CK(cudaEventElapsedTime(&f, e0, e1));
                    ms_g += f;
                } else {
                    CK(cudaGraphLaunch(ge, st));
                }
            }
            CK(cudaStreamSynchronize(st));
            CK(cudaGetLastError());
            int herr = 0;
            CK(cudaMemcpy(&herr, err, sizeof(int), cudaMemcpyDeviceToHost));
            printf("PROBE chain_%s_%s_eager %.3f us a kernel (%d kernels a step, %.1f us a step)\n", sh.name, k_mode[m],
                   ms_e * 1e3 / R / nk, nk, ms_e * 1e3 / R);
            printf("PROBE chain_%s_%s_graph %.3f us a kernel (%.1f us a step)\n", sh.name, k_mode[m], ms_g * 1e3 / R / nk,
                   ms_g * 1e3 / R);
            if (herr) { printf("FAIL chain_%s_%s: %d values read out of order\n", sh.name, k_mode[m], herr); fails++; }
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
        }
    }
    return fails ? 1 : 0;
}
