/* tools/bench_kernels.c: microbenchmark of the CPU backend's matmul kernels. Prints, per weight
 * format, GB/s of weights read for a batch-1 GEMV and GFLOP/s for a 128-token GEMM, then times a
 * whole-model-shaped sequence of matmuls (Qwen3-0.6B: 28 layers of q,k,v,o,gate,up,down plus the
 * tied lm_head) for decode (1 token) and a 128-token prompt (lm_head on the last token only, as
 * llama-bench does), as tok/s; then attention (128-token prompt, decode at position 127) and the
 * other per-layer ops (norms, RoPE, act_mul, adds) over 28 layers. Random weights; not a test.
 * The whole forward pass (with attention, sampling) is timed by `mlxcel bench --random`.
 *
 * usage: bench_kernels [--formats q4,q8,bf16,...] [--threads N] [--precise] [--no-model] [--no-kernels] */
#include "mlxcel/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t next64(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static float frand(void) { return (float)((double)(next64() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

typedef struct { const char *name; mx_dtype dt; int bits, gs; } fmt;
static const fmt FMTS[] = {
    {"q4", MX_DTYPE_U32, 4, 64}, {"q8", MX_DTYPE_U32, 8, 64}, {"bf16", MX_DTYPE_BF16, 0, 0},
    {"q2", MX_DTYPE_U32, 2, 64}, {"q3", MX_DTYPE_U32, 3, 64}, {"q5", MX_DTYPE_U32, 5, 64},
    {"q6", MX_DTYPE_U32, 6, 64}, {"q4g32", MX_DTYPE_U32, 4, 32}, {"q4g128", MX_DTYPE_U32, 4, 128},
    {"f16", MX_DTYPE_F16, 0, 0}, {"f32", MX_DTYPE_F32, 0, 0},
};

static size_t wbytes(const mx_weight *w) {
    if (!w->bits) return (size_t)(w->rows * w->cols) * mx_dtype_size(w->dtype);
    return (size_t)(w->rows * w->cols * w->bits / 8) + (size_t)(w->rows * (w->cols / w->group_size)) * 4;
}

static int make_weight(mx_weight *w, const fmt *f, int64_t rows, int64_t cols) {
    memset(w, 0, sizeof *w);
    w->rows = rows; w->cols = cols; w->dtype = f->dt; w->bits = f->bits; w->group_size = f->gs;
    if (!f->bits) {
        size_t n = (size_t)(rows * cols);
        if (f->dt == MX_DTYPE_F32) {
            float *p = malloc(n * 4); if (!p) return -1;
            for (size_t i = 0; i < n; i++) p[i] = frand() * 0.05f;
            w->w = p;
        } else {
            uint16_t *p = malloc(n * 2); if (!p) return -1;
            for (size_t i = 0; i < n; i++) p[i] = f->dt == MX_DTYPE_BF16 ? mx_f32_to_bf16(frand() * 0.05f) : mx_f32_to_f16(frand() * 0.05f);
            w->w = p;
        }
        return 0;
    }
    size_t nw = (size_t)(rows * cols * f->bits / 32), ng = (size_t)(rows * cols / f->gs);
    uint64_t *q = malloc(nw * 4 + 8);
    uint16_t *s = malloc(ng * 2), *b = malloc(ng * 2);
    if (!q || !s || !b) return -1;
    for (size_t i = 0; i < (nw + 1) / 2; i++) q[i] = next64();
    for (size_t i = 0; i < ng; i++) { s[i] = mx_f32_to_bf16(0.01f * (1 + frand() * 0.5f)); b[i] = mx_f32_to_bf16(-0.08f * (1 + frand() * 0.5f)); }
    w->w = q; w->scales = s; w->biases = b; w->scale_dtype = MX_DTYPE_BF16;
    return 0;
}
static void free_weight(mx_weight *w) { free((void *)w->w); free((void *)w->scales); free((void *)w->biases); }

static double time_mm(mx_backend *B, const mx_weight *w, const float *x, float *y, int n, double min_s) {
    B->i->matmul(B->ctx, w, x, y, n); /* warm */
    double best = 1e30, t0 = mx_time_s();
    do { /* best of many: the VM's timings are noisy */
        double t1 = mx_time_s();
        B->i->matmul(B->ctx, w, x, y, n);
        double d = mx_time_s() - t1;
        if (d < best) best = d;
    } while (mx_time_s() - t0 < min_s);
    return best;
}

int main(int argc, char **argv) {
    const char *formats = "q4,q8,bf16";
    int threads = 0, precise = 0, model = 1, kernels = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--formats") && i + 1 < argc) formats = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--precise")) precise = 1;
        else if (!strcmp(argv[i], "--no-model")) model = 0;
        else if (!strcmp(argv[i], "--no-kernels")) kernels = 0;
        else { fprintf(stderr, "usage: %s [--formats q4,q8,bf16,...] [--threads N] [--precise] [--no-model] [--no-kernels]\n", argv[0]); return 2; }
    }
    if (threads > 0) mx_pool_global_set_threads(threads);
    mx_backend B;
    if (mx_backend_cpu_init(&B) != MX_OK) { fprintf(stderr, "init: %s\n", mx_last_error()); return 1; }
    mx_backend_cpu_set_precise(&B, precise);
    printf("threads %d, precise %d\n", mx_pool_size(mx_pool_global()), precise);
    const int H = 1024, I = 3072, L = 28, NQ = 2048, NKV = 1024, V = 151936, P = 128;
    float *x = malloc(sizeof(float) * (size_t)P * I), *y = malloc(sizeof(float) * (size_t)P * V);
    for (int i = 0; i < P * I; i++) x[i] = frand();
    for (size_t fi = 0; fi < sizeof FMTS / sizeof FMTS[0]; fi++) {
        const fmt *f = &FMTS[fi];
        char pat[64]; snprintf(pat, sizeof pat, ",%s,", f->name);
        char list[512]; snprintf(list, sizeof list, ",%s,", formats);
        if (!strstr(list, pat)) continue;
        if (kernels) {
            /* one gate/up-sized and one down-sized matrix */
            int64_t shapes[2][2] = {{I, H}, {H, I}};
            for (int s = 0; s < 2; s++) {
                mx_weight w;
                if (make_weight(&w, f, shapes[s][0], shapes[s][1])) { fprintf(stderr, "oom\n"); return 1; }
                double t1 = time_mm(&B, &w, x, y, 1, 0.3), tp = time_mm(&B, &w, x, y, P, 0.5);
                double fl = 2.0 * (double)w.rows * (double)w.cols;
                printf("%-7s %5lldx%-5lld  n=1: %7.1f us %6.1f GB/s   n=%d: %8.1f us %6.1f GFLOP/s\n", f->name,
                       (long long)w.rows, (long long)w.cols, t1 * 1e6, wbytes(&w) / t1 / 1e9, P, tp * 1e6, fl * P / tp / 1e9);
                free_weight(&w);
            }
        }
        if (model) {
            mx_weight *ws = calloc((size_t)L * 7 + 1, sizeof(mx_weight));
            int64_t sh[7][2] = {{NQ, H}, {NKV, H}, {NKV, H}, {H, NQ}, {I, H}, {I, H}, {H, I}};
            size_t total = 0;
            for (int l = 0; l < L; l++)
                for (int k = 0; k < 7; k++) {
                    if (make_weight(&ws[l * 7 + k], f, sh[k][0], sh[k][1])) { fprintf(stderr, "oom\n"); return 1; }
                    total += wbytes(&ws[l * 7 + k]);
                }
            mx_weight *lm = &ws[L * 7];
            if (make_weight(lm, f, V, H)) { fprintf(stderr, "oom\n"); return 1; }
            total += wbytes(lm);
            for (int pass = 0; pass < 2; pass++) {
                int n = pass ? P : 1, iters = pass ? 3 : 10;
                double tl = 1e30, th = 1e30; /* best of iters */
                for (int it = -1; it < iters; it++) {
                    double t0 = mx_time_s();
                    for (int l = 0; l < L; l++)
                        for (int k = 0; k < 7; k++) B.i->matmul(B.ctx, &ws[l * 7 + k], x, y, n);
                    double t1 = mx_time_s();
                    B.i->matmul(B.ctx, lm, x, y, 1);
                    double t2 = mx_time_s();
                    if (it >= 0) { if (t1 - t0 < tl) tl = t1 - t0; if (t2 - t1 < th) th = t2 - t1; }
                }
                if (!pass)
                    printf("model %-6s decode : %.1f ms/token (layers %.1f, lm_head %.1f) = %.1f tok/s, %.1f GB/s (%.0f MB)\n",
                           f->name, (tl + th) * 1e3, tl * 1e3, th * 1e3, 1.0 / (tl + th), total / (tl + th) / 1e9, total / 1e6);
                else
                    printf("model %-6s prompt%d: %.1f ms (layers %.1f, lm_head %.1f) = %.1f tok/s\n", f->name, P,
                           (tl + th) * 1e3, tl * 1e3, th * 1e3, P / (tl + th));
                fflush(stdout);
            }
            for (int i = 0; i < L * 7 + 1; i++) free_weight(&ws[i]);
            free(ws);
        }
    }
    if (model) { /* attention: 28 layers, 16 q / 8 kv heads, head_dim 128, a 128-token prompt then decode */
        mx_kv_desc kd = {L, 8, 128, 16, 64, MX_DTYPE_F32};
        if (B.i->kv_init(B.ctx, &kd) != MX_OK) { fprintf(stderr, "kv_init: %s\n", mx_last_error()); return 1; }
        int32_t pos[P], slot[P], seq[P], bt[64];
        for (int i = 0; i < 64; i++) bt[i] = 63 - i;
        for (int i = 0; i < P; i++) { pos[i] = i; seq[i] = 0; slot[i] = bt[i / 16] * 16 + i % 16; }
        mx_attn_meta m = {P, pos, slot, seq, 1, 64, bt};
        mx_attn_params ap = {16, 8, 128, 0.08838834764f, 0, 0, NULL};
        float *q = malloc(sizeof(float) * P * 2048), *k = malloc(sizeof(float) * P * 1024), *v = malloc(sizeof(float) * P * 1024);
        for (int i = 0; i < P * 2048; i++) q[i] = frand();
        for (int i = 0; i < P * 1024; i++) { k[i] = frand(); v[i] = frand(); }
        double best = 1e30;
        for (int it = 0; it < 3; it++) {
            double t0 = mx_time_s();
            for (int l = 0; l < L; l++) B.i->attention(B.ctx, l, q, k, v, y, &ap, &m);
            double d = mx_time_s() - t0;
            if (d < best) best = d;
        }
        printf("attention prompt%d x %d layers: %.1f ms\n", P, L, best * 1e3);
        int32_t dpos = P - 1, dslot = slot[P - 1], dseq = 0;
        mx_attn_meta dm = {1, &dpos, &dslot, &dseq, 1, 64, bt};
        best = 1e30;
        for (int it = 0; it < 20; it++) {
            double t0 = mx_time_s();
            for (int l = 0; l < L; l++) B.i->attention(B.ctx, l, q, k, v, y, &ap, &dm);
            double d = mx_time_s() - t0;
            if (d < best) best = d;
        }
        printf("attention decode at pos %d x %d layers: %.3f ms\n", P - 1, L, best * 1e3);
        /* the other per-layer ops of a Qwen3 layer: 2 rmsnorm, q/k head norms, rope q/k, act_mul, 2 adds */
        {
            float *hbuf = malloc(sizeof(float) * P * H), *gu = malloc(sizeof(float) * P * 2 * I), *o = malloc(sizeof(float) * P * I);
            uint16_t gam[3072];
            for (int i = 0; i < 3072; i++) gam[i] = mx_f32_to_bf16(1.0f + 0.1f * frand());
            for (int i = 0; i < P * H; i++) hbuf[i] = frand();
            for (int i = 0; i < P * 2 * I; i++) gu[i] = frand();
            mx_vec g = {H, MX_DTYPE_BF16, gam, NULL}, gh = {128, MX_DTYPE_BF16, gam, NULL};
            float inv[64];
            for (int i = 0; i < 64; i++) inv[i] = powf(1000000.0f, -2.0f * i / 128);
            mx_rope rp = {128, inv, 1.0f};
            for (int pass = 0; pass < 2; pass++) {
                int nt = pass ? P : 1;
                best = 1e30;
                for (int it = 0; it < 5; it++) {
                    double t0 = mx_time_s();
                    for (int l = 0; l < L; l++) {
                        B.i->rmsnorm(B.ctx, hbuf, &g, 1e-6f, 0, o, nt, H);
                        B.i->rmsnorm(B.ctx, q, &gh, 1e-6f, 0, q, nt * 16, 128);
                        B.i->rmsnorm(B.ctx, k, &gh, 1e-6f, 0, k, nt * 8, 128);
                        B.i->rope(B.ctx, q, nt, 16, 128, &rp, &m);
                        B.i->rope(B.ctx, k, nt, 8, 128, &rp, &m);
                        B.i->add(B.ctx, hbuf, o, o, (int64_t)nt * H);
                        B.i->rmsnorm(B.ctx, o, &g, 1e-6f, 0, o, nt, H);
                        B.i->act_mul(B.ctx, MX_ACT_SILU, gu, gu + I, 2 * I, o, nt, I);
                        B.i->add(B.ctx, hbuf, o, o, (int64_t)nt * H);
                    }
                    double d = mx_time_s() - t0;
                    if (d < best) best = d;
                }
                printf("other layer ops (norms, rope, act_mul, adds) %d tokens x %d layers: %.3f ms\n", nt, L, best * 1e3);
            }
            free(hbuf); free(gu); free(o);
        }
        B.i->kv_free(B.ctx);
        free(q); free(k); free(v);
    }
    printf("llama.cpp (2 threads): q4/g64 decode 46.4 prompt 448; q8/g64 decode 39.5 prompt 487; bf16 decode 15.9 prompt 174 tok/s\n");
    mx_backend_cpu_free(&B);
    free(x); free(y);
    return 0;
}
