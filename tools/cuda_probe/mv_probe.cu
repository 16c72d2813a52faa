// tools/cuda_probe/mv_probe.cu: how fast the batch-1 matvecs' weight reads can go on the GPU
// (sm_90), the reads alone (no arithmetic beyond keeping the loads live), for the q4 byte sizes of
// Llama-3.1-8B's matrices (down 4096 x 14336: 7,168-byte rows; gate/up 28,672 x 4096 and q/k/v
// 6,144 x 4096: 2,048-byte rows):
//   reg U:   k_mv_i8's pattern: a warp a row, U 16-byte loads a lane a batch into registers, the
//            batches of a row one after another (U = 4 is the backend's);
//   regp U:  persistent warps over the flat matrix, the next chunk's U loads issued before the
//            current one is used (two chunks in flight a warp); _bN: N blocks a multiprocessor;
//   smem S:  a block streams a run of rows through S stages of shared memory with cp.async
//            (16 bytes a thread a piece, 16 KB a stage), the threads reading each stage after its
//            wait: what is in flight is bounded by shared memory, not registers; _b1: one block
//            a multiprocessor.
// Run in the tenth session (NOTES.md): registers read as fast as shared memory here (gate/up
// 3.74 TB/s, down 3.0-3.2), and the 6-9 MB matrices take ~5.5 us whatever the form.
// Each launch reads a copy of the matrix not in L2 (copies rotated over > 4x the L2 size), timed
// over back-to-back launches. Not a test: prints "PROBE name value unit" lines (gpu_check.sh,
// stage mvprobe). Exit 1 on a CUDA error.
//   nvcc -O2 -gencode arch=compute_90a,code=sm_90a -o mv_probe tools/cuda_probe/mv_probe.cu
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__device__ __forceinline__ uint4 ld_nc(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

/* a warp a row of rb bytes, U vectors a lane a batch */
template <int U>
__global__ void __launch_bounds__(256) k_reg(const uint4 *__restrict__ w, int rows, int rb, unsigned *out) {
    const int lane = threadIdx.x & 31, row = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int nv = rb / 16;
    const uint4 *r = w + (size_t)row * nv;
    unsigned acc = 0;
    for (int v0 = lane; v0 < nv; v0 += 32 * U) {
        uint4 q[U];
#pragma unroll
        for (int u = 0; u < U; u++) q[u] = v0 + 32 * u < nv ? ld_nc(r + v0 + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; u++) acc += q[u].x ^ q[u].y ^ q[u].z ^ q[u].w;
    }
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) out[row] = acc;
}

/* persistent warps over the flat matrix in chunks of 32 x U vectors, the next chunk's loads issued
 * before the current one is consumed (two chunks in flight a warp) */
template <int U>
__global__ void __launch_bounds__(256) k_regp(const uint4 *__restrict__ w, size_t nvec, unsigned *out) {
    const int lane = threadIdx.x & 31;
    const size_t nw = (size_t)gridDim.x * 8, cv = 32 * U, nch = (nvec + cv - 1) / cv;
    size_t c = (size_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    uint4 q[U], p[U];
    unsigned acc = 0;
    auto load = [&](uint4 *d, size_t ch) {
#pragma unroll
        for (int u = 0; u < U; u++) { const size_t v = ch * cv + 32 * u + lane; d[u] = ch < nch && v < nvec ? ld_nc(w + v) : make_uint4(0, 0, 0, 0); }
    };
    load(q, c);
    for (; c < nch; c += nw) {
        load(p, c + nw);
#pragma unroll
        for (int u = 0; u < U; u++) { acc += q[u].x ^ q[u].y ^ q[u].z ^ q[u].w; q[u] = p[u]; }
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

__device__ __forceinline__ void cp16(void *s, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(s)), "l"(g) : "memory");
}
/* block b streams bytes [b n / G, (b + 1) n / G) (16-byte vectors) through S stages of 16 KB */
template <int S>
__global__ void __launch_bounds__(256) k_smem(const uint4 *__restrict__ w, size_t nvec, unsigned *out) {
    extern __shared__ uint4 ring[];   /* S x 1024 vectors */
    const size_t v0 = (size_t)blockIdx.x * nvec / gridDim.x, v1 = (size_t)(blockIdx.x + 1) * nvec / gridDim.x;
    const int nst = (int)((v1 - v0 + 1023) / 1024);
    auto issue = [&](int st) {
#pragma unroll
        for (int p = 0; p < 4; p++) {
            const size_t v = v0 + (size_t)st * 1024 + p * 256 + threadIdx.x;
            if (v < v1) cp16(&ring[(st % S) * 1024 + p * 256 + threadIdx.x], w + v);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    for (int st = 0; st < S - 1; st++) {
        if (st < nst) issue(st);
        else asm volatile("cp.async.commit_group;" ::: "memory");
    }
    unsigned acc = 0;
    for (int st = 0; st < nst; st++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(S - 2) : "memory");
        __syncthreads();   /* stage st landed for all; stage st - 1 read by all */
        if (st + S - 1 < nst) issue(st + S - 1);
        else asm volatile("cp.async.commit_group;" ::: "memory");
#pragma unroll
        for (int p = 0; p < 4; p++) {
            const size_t v = v0 + (size_t)st * 1024 + p * 256 + threadIdx.x;
            if (v < v1) { const uint4 q = ring[(st % S) * 1024 + p * 256 + threadIdx.x]; acc += q.x ^ q.y ^ q.z ^ q.w; }
        }
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;   /* (keeps the reads) */
}

int main() {
    int dev = 0, sms = 0, l2 = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    printf("PROBE sms %d count\nPROBE l2 %.1f MB\n", sms, l2 / 1e6);
    const size_t big = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, big)); CK(cudaMalloc(&b, big));
    CK(cudaMemset(a, 1, big));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    CK(cudaMemcpy(b, a, big, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 4; i++) CK(cudaMemcpy(b, a, big, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("PROBE copy %.0f GB/s\n", 4.0 * 2 * big / (ms * 1e-3) / 1e9);
    unsigned *out;
    CK(cudaMalloc(&out, 1 << 20));
    struct shape { const char *name; int rows, rb; } shapes[] = {
        {"down", 4096, 7168}, {"gate_up", 28672, 2048}, {"qkv", 6144, 2048}, {"o", 4096, 2048}};
    for (const shape &sh : shapes) {
        const size_t bytes = (size_t)sh.rows * sh.rb;
        const int ncopy = (int)(big / bytes) < 64 ? (int)(big / bytes) : 64;   /* > 4x L2 in all */
        const int reps = 40;
        auto timeit = [&](auto launch) {
            for (int i = 0; i < 4; i++) launch((const uint4 *)((char *)a + (size_t)(i % ncopy) * bytes));
            CK(cudaEventRecord(e0));
            for (int i = 0; i < reps; i++) launch((const uint4 *)((char *)a + (size_t)(i % ncopy) * bytes));
            CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            float t;
            CK(cudaEventElapsedTime(&t, e0, e1));
            return t * 1e3 / reps;   /* us a launch */
        };
        const unsigned blocks = (unsigned)((sh.rows + 7) / 8);
        double us;
        us = timeit([&](const uint4 *w) { k_reg<4><<<blocks, 256>>>(w, sh.rows, sh.rb, out); });
        printf("PROBE %s_reg4 %.2f us (%.0f GB/s)\n", sh.name, us, bytes / (us * 1e-6) / 1e9);
        us = timeit([&](const uint4 *w) { k_reg<8><<<blocks, 256>>>(w, sh.rows, sh.rb, out); });
        printf("PROBE %s_reg8 %.2f us (%.0f GB/s)\n", sh.name, us, bytes / (us * 1e-6) / 1e9);
        {
            int bps = 0;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, k_regp<4>, 256, 0));
            const unsigned g = (unsigned)(bps * sms);
            us = timeit([&](const uint4 *w) { k_regp<4><<<g, 256>>>(w, bytes / 16, out); });
            printf("PROBE %s_regp4 %.2f us (%.0f GB/s, %d blocks an SM)\n", sh.name, us, bytes / (us * 1e-6) / 1e9, bps);
            for (int bl = 1; bl <= 4; bl *= 2) {
                us = timeit([&](const uint4 *w) { k_regp<4><<<(unsigned)(bl * sms), 256>>>(w, bytes / 16, out); });
                printf("PROBE %s_regp4_b%d %.2f us (%.0f GB/s)\n", sh.name, bl, us, bytes / (us * 1e-6) / 1e9);
            }
        }
        const int S[] = {3, 6, 12};
        for (int si = 0; si < 3; si++) {
            const size_t shm = (size_t)S[si] * 16384;
            auto kk = S[si] == 3 ? k_smem<3> : S[si] == 6 ? k_smem<6> : k_smem<12>;
            CK(cudaFuncSetAttribute(kk, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm));
            int bps = 0;
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, kk, 256, shm));
            const unsigned g = (unsigned)(bps * sms);
            us = timeit([&](const uint4 *w) { kk<<<g, 256, shm>>>(w, bytes / 16, out); });
            printf("PROBE %s_smem%d %.2f us (%.0f GB/s, %d blocks an SM)\n", sh.name, S[si], us, bytes / (us * 1e-6) / 1e9, bps);
            if (bps > 1) {
                us = timeit([&](const uint4 *w) { kk<<<(unsigned)sms, 256, shm>>>(w, bytes / 16, out); });
                printf("PROBE %s_smem%d_b1 %.2f us (%.0f GB/s)\n", sh.name, S[si], us, bytes / (us * 1e-6) / 1e9);
            }
        }
    }
    printf("PROBE done 1 ok\n");
    return 0;
}
