/* test_cuda_topk.c: the CUDA top-k kernel (mx_cuda_topk, backend/cuda/topk.cu) against the host
 * reference (mx_topk_host) on random rows: n_rows 1..128, vocab 10 / 1000 / 151936 / 262144,
 * k 1 / 40 / 64, rows with heavy ties, -inf and NaN entries, an all -inf row. Ids and values must
 * match exactly (values bit for bit), lse within 2e-6 relative (the GPU sums in another order).
 * The one-launch form (mx_cuda_topk_one) must give the two-launch form's results bit for bit (lse
 * included), with device outputs and without PDL, and with outputs in pinned host memory and PDL;
 * its row counters, one buffer for all cases (so the counts of every shape before are in it),
 * must be zero after each call.
 * Built only with -DMLXCEL_CUDA=ON. Without a usable GPU (a CUDA build on the development
 * machine) it checks only that the backend refuses to start with a message saying so, as
 * test_backend_cuda does; the top-k cases run on the GPU machine.
 *
 * `test_cuda_topk --quick` runs the small cases only (for compute-sanitizer);
 * `test_cuda_topk --bench` prints the kernel's time per call next to copying the full rows to
 * pageable and pinned host memory. Not a test. */
#include "test.h"
#include "mlxcel/backend.h"
#include "mlxcel/backend_cuda.h"
#include "backend/cuda/topk.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float frand(void) { return (float)((rnd32() & 0xffffff) / 8388608.0 - 1.0); } /* [-1, 1) */

/* row kinds: 0 smooth, 1 heavy ties, 2 -inf entries, 3 one NaN, 4 all -inf, 5 +-0 ties and peaks */
static void make_row(float *r, int V, int kind) {
    float scale = (float[]){0.05f, 3.0f, 20.0f}[rnd32() % 3];
    for (int i = 0; i < V; i++) {
        float x = frand() * scale;
        if (kind == 1) x = (float)(rnd32() % 7) * 0.5f;
        if (kind == 2 && rnd32() % 3 == 0) x = -INFINITY;
        if (kind == 4) x = -INFINITY;
        if (kind == 5) x = rnd32() % 500 == 0 ? 8.0f : (rnd32() % 2 ? 0.0f : -0.0f);
        r[i] = x;
    }
    if (kind == 3) r[rnd32() % V] = NAN;
}

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { TCHECK(0, "%s: %s", #call, cudaGetErrorString(e_)); goto done; } } while (0)

static int g_case_rows, g_case_vocab, g_case_k;
static cudaStream_t g_stream;   /* a stream of its own for the PDL launches (as the backend's) */
static unsigned *g_cnt;   /* the one-launch form's row counters (device, 65535: any case's rows) */
enum { CNT_ROWS = 65535 };

/* the counters are all zero (after a launch that completed) */
static bool counters_zero(void) {
    static unsigned h[CNT_ROWS];
    if (cudaMemcpy(h, g_cnt, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    for (int i = 0; i < CNT_ROWS; i++)
        if (h[i]) return false;
    return true;
}

static void one_case(int unused) {
    (void)unused;
    const int R = g_case_rows, V = g_case_vocab, k = g_case_k;
    float *h = malloc((size_t)R * V * sizeof *h), *v = malloc((size_t)R * k * sizeof *v), *l = malloc((size_t)R * sizeof *l);
    int32_t *id = malloc((size_t)R * k * sizeof *id);
    float *d_l = NULL, *d_v = NULL, *d_lse = NULL;
    int32_t *d_id = NULL;
    void *scr = NULL;
    TREQUIRE(h && v && l && id, "out of memory");
    for (int r = 0; r < R; r++) {
        int kind = R >= 6 ? r % 6 : (int)(rnd32() % 6);
        make_row(h + (size_t)r * V, V, kind);
    }
    size_t need = 0;
    TCHECK(mx_cuda_topk(NULL, NULL, R, V, k, NULL, NULL, NULL, NULL, 0, &need) == 1 && need > 0, "size query");
    CU(cudaMalloc((void **)&d_l, (size_t)R * V * sizeof *h));
    CU(cudaMalloc((void **)&d_v, (size_t)R * k * sizeof *v));
    CU(cudaMalloc((void **)&d_id, (size_t)R * k * sizeof *id));
    CU(cudaMalloc((void **)&d_lse, (size_t)R * sizeof *l));
    CU(cudaMalloc(&scr, need));
    CU(cudaMemcpy(d_l, h, (size_t)R * V * sizeof *h, cudaMemcpyHostToDevice));
    CU(cudaMemset(d_v, 0xff, (size_t)R * k * sizeof *v));   /* NaN poison */
    int rc = mx_cuda_topk(NULL, d_l, R, V, k, d_v, d_id, d_lse, scr, need, &need);
    TCHECK(rc == 0, "mx_cuda_topk returned %d", rc);
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(v, d_v, (size_t)R * k * sizeof *v, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(id, d_id, (size_t)R * k * sizeof *id, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(l, d_lse, (size_t)R * sizeof *l, cudaMemcpyDeviceToHost));
    for (int r = 0; r < R && !t_case_failed; r++) {
        float hv[64], hl;
        int32_t hi[64];
        mx_topk_host(h + (size_t)r * V, V, k, hv, hi, &hl);
        for (int i = 0; i < k; i++) {
            TCHECK(hi[i] == id[(size_t)r * k + i] && !memcmp(&hv[i], &v[(size_t)r * k + i], sizeof(float)),
                   "row %d pos %d: gpu (%g, %d) cpu (%g, %d)", r, i, v[(size_t)r * k + i], id[(size_t)r * k + i], hv[i], hi[i]);
            if (t_case_failed) break;
        }
        float g = l[r];
        if (isnan(hl) || isinf(hl)) TCHECK((isnan(hl) && isnan(g)) || hl == g, "row %d: lse gpu %g cpu %g", r, g, hl);
        else TCHECK(fabsf(g - hl) <= 2e-6f * (1 + fabsf(hl)), "row %d: lse gpu %.9g cpu %.9g", r, g, hl);
    }
    /* the one-launch form: device outputs without PDL, then pinned host outputs with PDL */
    for (int form = 0; form < 2 && !t_case_failed; form++) {
        float *ov = NULL, *ol = NULL;
        int32_t *oi = NULL;
        if (form == 0) {
            CU(cudaMalloc((void **)&ov, (size_t)R * k * 4)); CU(cudaMalloc((void **)&oi, (size_t)R * k * 4)); CU(cudaMalloc((void **)&ol, (size_t)R * 4));
            CU(cudaMemset(ov, 0xff, (size_t)R * k * 4)); CU(cudaMemset(oi, 0xff, (size_t)R * k * 4)); CU(cudaMemset(ol, 0xff, (size_t)R * 4));
        } else {
            CU(cudaMallocHost((void **)&ov, (size_t)R * k * 4)); CU(cudaMallocHost((void **)&oi, (size_t)R * k * 4)); CU(cudaMallocHost((void **)&ol, (size_t)R * 4));
            memset(ov, 0xff, (size_t)R * k * 4); memset(oi, 0xff, (size_t)R * k * 4); memset(ol, 0xff, (size_t)R * 4);
        }
        CU(cudaMemset(scr, 0xff, need));   /* the two-launch form's candidates must not be what it reads */
        CU(cudaDeviceSynchronize());
        rc = mx_cuda_topk_one(form ? (struct CUstream_st *)g_stream : NULL, d_l, R, V, k, ov, oi, ol, scr, need, &need, g_cnt, form);
        TCHECK(rc == 0, "mx_cuda_topk_one (form %d) returned %d", form, rc);
        CU(cudaDeviceSynchronize());
        float *v1 = malloc((size_t)R * k * 4), *l1 = malloc((size_t)R * 4);
        int32_t *i1 = malloc((size_t)R * k * 4);
        TREQUIRE(v1 && l1 && i1, "out of memory");
        CU(cudaMemcpy(v1, ov, (size_t)R * k * 4, cudaMemcpyDefault));
        CU(cudaMemcpy(i1, oi, (size_t)R * k * 4, cudaMemcpyDefault));
        CU(cudaMemcpy(l1, ol, (size_t)R * 4, cudaMemcpyDefault));
        TCHECK(!memcmp(v1, v, (size_t)R * k * 4) && !memcmp(i1, id, (size_t)R * k * 4) && !memcmp(l1, l, (size_t)R * 4),
               "one launch (form %d) differs from two launches", form);
        TCHECK(counters_zero(), "one launch (form %d) left row counters non-zero", form);
        free(v1); free(l1); free(i1);
        if (form == 0) { cudaFree(ov); cudaFree(oi); cudaFree(ol); }
        else { cudaFreeHost(ov); cudaFreeHost(oi); cudaFreeHost(ol); }
    }
    TCHECK(mx_cuda_topk_one(NULL, d_l, R, V, k, d_v, d_id, d_lse, scr, need, &need, NULL, 0) == -1, "no counters accepted");
    TCHECK(mx_cuda_topk_one(NULL, d_l, R, V, 65, d_v, d_id, d_lse, scr, need, &need, g_cnt, 0) == -1, "one launch: k = 65 accepted");
    TCHECK(mx_cuda_topk_one(NULL, d_l, R, V, k, d_v, d_id, d_lse, scr, need - 1, &need, g_cnt, 0) == 1, "one launch: short scratch accepted");
    /* bad arguments are refused */
    TCHECK(mx_cuda_topk(NULL, d_l, R, V, 65, d_v, d_id, d_lse, scr, need, &need) == -1, "k = 65 accepted");
    TCHECK(mx_cuda_topk(NULL, d_l, R, V, 0, d_v, d_id, d_lse, scr, need, &need) == -1, "k = 0 accepted");
    TCHECK(mx_cuda_topk(NULL, d_l, R, V, k, d_v, d_id, d_lse, scr, need - 1, &need) == 1, "short scratch accepted");
done:
    cudaFree(d_l); cudaFree(d_v); cudaFree(d_id); cudaFree(d_lse); cudaFree(scr);
    free(h); free(v); free(l); free(id);
}

static void bench(void) {
    static const int rows[] = {1, 8, 32, 128};
    const int V = 151936, k = 64;
    float *d_l, *d_v, *d_lse, *pinned, *pageable;
    int32_t *d_id;
    void *scr;
    size_t need = 0;
    mx_cuda_topk(NULL, NULL, 128, V, k, NULL, NULL, NULL, NULL, 0, &need);
    size_t big = need;
    for (int i = 0; i < 4; i++) { mx_cuda_topk(NULL, NULL, rows[i], V, k, NULL, NULL, NULL, NULL, 0, &need); if (need > big) big = need; }
    if (cudaMalloc((void **)&d_l, (size_t)128 * V * 4) || cudaMalloc((void **)&d_v, 128 * k * 4) || cudaMalloc((void **)&d_id, 128 * k * 4) ||
        cudaMalloc((void **)&d_lse, 128 * 4) || cudaMalloc(&scr, big) || cudaMallocHost((void **)&pinned, (size_t)128 * V * 4)) {
        printf("bench: allocation failed\n");
        return;
    }
    pageable = malloc((size_t)128 * V * 4);
    for (size_t i = 0; i < (size_t)128 * V; i++) pageable[i] = frand() * 10;
    cudaMemcpy(d_l, pageable, (size_t)128 * V * 4, cudaMemcpyHostToDevice);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    printf("vocab %d, k %d: microseconds per call (median-free mean of 50 after warm-up)\n", V, k);
    printf("%6s %5s %12s %12s %16s %16s\n", "rows", "k", "topk", "one launch", "copy pageable", "copy pinned");
    for (int i = 0; i < 5; i++) {
        int R = i < 4 ? rows[i] : 1, kk = i < 4 ? k : 1;   /* the last row: a greedy batch-1 step */
        float ms[4];
        for (int w = 0; w < 4; w++) {
            for (int it = 0; it < 55; it++) {
                if (it == 5) cudaEventRecord(e0, 0);
                if (w == 0) mx_cuda_topk(NULL, d_l, R, V, kk, d_v, d_id, d_lse, scr, big, &need);
                else if (w == 1) mx_cuda_topk_one(NULL, d_l, R, V, kk, d_v, d_id, d_lse, scr, big, &need, g_cnt, 0);
                else cudaMemcpy(w == 2 ? pageable : pinned, d_l, (size_t)R * V * 4, cudaMemcpyDeviceToHost);
            }
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms[w], e0, e1);
        }
        printf("%6d %5d %12.1f %12.1f %16.1f %16.1f\n", R, kk, ms[0] * 1000 / 50, ms[1] * 1000 / 50, ms[2] * 1000 / 50, ms[3] * 1000 / 50);
    }
    cudaFree(d_l); cudaFree(d_v); cudaFree(d_id); cudaFree(d_lse); cudaFree(scr); cudaFreeHost(pinned); free(pageable);
}

/* no usable GPU: the backend refuses to start and says why (the top-k cases need the GPU machine) */
static void no_gpu_refused(void) {
    mx_backend b;
    const mx_status st = mx_backend_cuda_init(&b);
    TCHECK(st == MX_ERR_UNSUPPORTED, "init without a GPU: status %d", (int)st);
    TCHECK(strstr(mx_last_error(), "no usable GPU") != NULL, "message: %s", mx_last_error());
}

int main(int argc, char **argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        RUN(no_gpu_refused);
        TEST_EXIT();
    }
    if (cudaMalloc((void **)&g_cnt, CNT_ROWS * sizeof *g_cnt) != cudaSuccess || cudaMemset(g_cnt, 0, CNT_ROWS * sizeof *g_cnt) != cudaSuccess ||
        cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) != cudaSuccess) {
        printf("FAIL counters: cannot allocate\n");
        return 1;
    }
    if (argc > 1 && !strcmp(argv[1], "--bench")) { bench(); return 0; }
    static const int rows[] = {1, 3, 128}, vocabs[] = {10, 1000, 151936, 262144}, ks[] = {1, 40, 64};
    const bool quick = argc > 1 && !strcmp(argv[1], "--quick");   /* small cases (for compute-sanitizer) */
    char name[96];
    for (int a = 0; a < (quick ? 2 : 3); a++)
        for (int b = 0; b < (quick ? 3 : 4); b++)
            for (int c = 0; c < 3; c++) {
                g_case_rows = rows[a]; g_case_vocab = vocabs[b]; g_case_k = ks[c];
                snprintf(name, sizeof name, "cuda_topk_r%d_v%d_k%d", rows[a], vocabs[b], ks[c]);
                RUN_NAMED(name, one_case, 0);
            }
    TEST_EXIT();
}
