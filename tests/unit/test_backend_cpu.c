/* test_backend_cpu.c: every CPU backend op against a naive double-precision reference on random
 * inputs: matmul/embed for dense F32/F16/BF16 and MLX affine quantized weights (bits 2..8, groups
 * 32/64/128, scale dtypes, linear bias), norms, RoPE, paged attention (several sequences and
 * blocks, GQA, sliding window, softcap), activations and element-wise ops. */
#include "test.h"
#include "mlxcel/backend.h"

#include <math.h>
#include <stdint.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0,1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}
static float frand(void) { return (float)(urand() * 2.0 - 1.0); }
static void fill(float *p, int64_t n, float s) { for (int64_t i = 0; i < n; i++) p[i] = frand() * s; }

static mx_backend B;

/* ---------- building weights ---------- */
typedef struct {
    mx_weight w;
    void *wbuf, *sbuf, *bbuf, *biasbuf;
    double *deq; /* [rows, cols] exact values the kernel should see */
    double *bias;
} tw;

static uint16_t enc16(mx_dtype dt, float f) { return dt == MX_DTYPE_BF16 ? mx_f32_to_bf16(f) : mx_f32_to_f16(f); }
static void store(mx_dtype dt, void *buf, int64_t i, float f, double *exact) {
    if (dt == MX_DTYPE_F32) { ((float *)buf)[i] = f; *exact = f; return; }
    uint16_t h = enc16(dt, f);
    ((uint16_t *)buf)[i] = h;
    *exact = dt == MX_DTYPE_BF16 ? mx_bf16_to_f32(h) : mx_f16_to_f32(h);
}

static void tw_free(tw *t) { free(t->wbuf); free(t->sbuf); free(t->bbuf); free(t->biasbuf); free(t->deq); free(t->bias); }

static void tw_make(tw *t, int64_t rows, int64_t cols, mx_dtype dt, int bits, int gs, mx_dtype sdt, bool bias, mx_dtype bdt) {
    memset(t, 0, sizeof *t);
    t->w.rows = rows; t->w.cols = cols; t->w.bits = bits; t->w.group_size = gs;
    t->deq = malloc((size_t)(rows * cols) * sizeof(double));
    float *src = malloc((size_t)(rows * cols) * sizeof(float));
    fill(src, rows * cols, 0.5f);
    if (bits == 0) {
        t->w.dtype = dt;
        t->wbuf = malloc((size_t)(rows * cols) * mx_dtype_size(dt));
        for (int64_t i = 0; i < rows * cols; i++) store(dt, t->wbuf, i, src[i], &t->deq[i]);
    } else {
        t->w.dtype = MX_DTYPE_U32;
        t->w.scale_dtype = sdt;
        int64_t ng = cols / gs, wpr = cols * bits / 32;
        uint32_t *q = calloc((size_t)(rows * wpr), 4);
        t->wbuf = q;
        t->sbuf = malloc((size_t)(rows * ng) * mx_dtype_size(sdt));
        t->bbuf = malloc((size_t)(rows * ng) * mx_dtype_size(sdt));
        int qmax = (1 << bits) - 1;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t g = 0; g < ng; g++) {
                const float *v = src + r * cols + g * gs;
                float mn = v[0], mxv = v[0];
                for (int i = 1; i < gs; i++) { if (v[i] < mn) mn = v[i]; if (v[i] > mxv) mxv = v[i]; }
                double s, b;
                store(sdt, t->sbuf, r * ng + g, (mxv - mn) / qmax, &s);
                store(sdt, t->bbuf, r * ng + g, mn, &b);
                for (int i = 0; i < gs; i++) {
                    long qi = s > 0 ? lround((v[i] - b) / s) : 0;
                    if (qi < 0) qi = 0;
                    if (qi > qmax) qi = qmax;
                    int64_t k = g * gs + i;
                    uint64_t off = (uint64_t)k * (uint64_t)bits;
                    uint32_t *row = q + r * wpr;
                    row[off >> 5] |= (uint32_t)qi << (off & 31);
                    if ((off & 31) + (uint64_t)bits > 32) row[(off >> 5) + 1] |= (uint32_t)qi >> (32 - (off & 31));
                    t->deq[r * cols + k] = s * (double)qi + b;
                }
            }
    }
    t->w.w = t->wbuf; t->w.scales = t->sbuf; t->w.biases = t->bbuf;
    if (bias) {
        t->w.bias_dtype = bdt;
        t->biasbuf = malloc((size_t)rows * mx_dtype_size(bdt));
        t->bias = malloc((size_t)rows * sizeof(double));
        for (int64_t r = 0; r < rows; r++) store(bdt, t->biasbuf, r, frand(), &t->bias[r]);
        t->w.bias = t->biasbuf;
    }
    free(src);
}

/* ---------- matmul ---------- */
/* max over outputs of |y - ref| / (sum |w x| + |bias| + 1e-30) */
static double mm_err(const tw *t, const float *x, const float *y, int n, double *rel_l2) {
    double worst = 0, num = 0, den = 0;
    int64_t N = t->w.rows, K = t->w.cols;
    for (int i = 0; i < n; i++)
        for (int64_t r = 0; r < N; r++) {
            double s = 0, a = 0;
            for (int64_t k = 0; k < K; k++) { double p = t->deq[r * K + k] * x[(int64_t)i * K + k]; s += p; a += fabs(p); }
            if (t->bias) { s += t->bias[r]; a += fabs(t->bias[r]); }
            double e = fabs(y[(int64_t)i * N + r] - s) / (a + 1e-30);
            if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
            num += (y[(int64_t)i * N + r] - s) * (y[(int64_t)i * N + r] - s); den += s * s;
        }
    if (rel_l2) *rel_l2 = sqrt(num / (den + 1e-30));
    return worst;
}

typedef struct { mx_dtype dt; int bits, gs; mx_dtype sdt; bool bias; int64_t rows, cols; } mm_case;

static void check_matmul(const mm_case *c) {
    tw t;
    tw_make(&t, c->rows, c->cols, c->dt, c->bits, c->gs, c->sdt, c->bias, MX_DTYPE_BF16);
    TREQUIRE(B.i->weight_prepare(B.ctx, &t.w) == MX_OK, "weight_prepare: %s", mx_last_error());
    static const int ns[] = {1, 2, 3, 5, 7, 8, 17};
    int maxn = 17;
    float *x = malloc(sizeof(float) * (size_t)(maxn * c->cols));
    float *y = malloc(sizeof(float) * (size_t)(maxn * c->rows));
    fill(x, maxn * c->cols, 1.0f);
    for (int precise = 1; precise >= 0; precise--) {
        mx_backend_cpu_set_precise(&B, precise);
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            int n = ns[k];
            for (int64_t i = 0; i < n * c->rows; i++) y[i] = NAN;
            B.i->matmul(B.ctx, &t.w, x, y, n);
            double l2, e = mm_err(&t, x, y, n, &l2);
            /* exact paths: f32 accumulation; fast paths (n >= 8, not precise): int8/bf16 activations */
            bool fast = !precise && n >= 8 && c->bits > 0; /* dense GEMM is exact */
            if (!fast) TCHECK(e < 2e-6, "precise=%d n=%d: max rel err %.3g", precise, n, e);
            else TCHECK(l2 < 1.5e-2 && e < 0.05, "fast n=%d: rel l2 err %.3g, max %.3g", n, l2, e);
        }
    }
    mx_backend_cpu_set_precise(&B, true);
    free(x); free(y);
    tw_free(&t);
}

static void test_matmul_dense(void) {
    mx_dtype dts[] = {MX_DTYPE_F32, MX_DTYPE_F16, MX_DTYPE_BF16};
    for (int d = 0; d < 3; d++) {
        mm_case c = {dts[d], 0, 0, MX_DTYPE_F32, d == 1, 37, 200};
        check_matmul(&c);
        mm_case c2 = {dts[d], 0, 0, MX_DTYPE_F32, d != 1, 64, 256};
        check_matmul(&c2);
        if (t_case_failed) return;
    }
}

static void test_matmul_quant(void) {
    int bitss[] = {2, 3, 4, 5, 6, 8}, gss[] = {32, 64, 128};
    mx_dtype sdts[] = {MX_DTYPE_BF16, MX_DTYPE_F16, MX_DTYPE_F32};
    int k = 0;
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++, k++) {
            mm_case c = {MX_DTYPE_U32, bitss[b], gss[g], sdts[k % 3], k % 2 == 0, 35 + 2 * (k % 3), 384};
            check_matmul(&c);
            if (t_case_failed) { printf("  (bits %d group %d)\n", bitss[b], gss[g]); return; }
        }
}

/* Larger shapes exercise row blocking and thread splitting. */
static void test_matmul_large(void) {
    mm_case c[] = {
        {MX_DTYPE_U32, 4, 64, MX_DTYPE_BF16, false, 300, 1024},
        {MX_DTYPE_U32, 8, 64, MX_DTYPE_BF16, true, 130, 1024},
        {MX_DTYPE_BF16, 0, 0, MX_DTYPE_F32, false, 129, 1024},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0] && !t_case_failed; i++) check_matmul(&c[i]);
}

static void test_bad_weight(void) {
    mx_weight w = {0};
    w.rows = 4; w.cols = 64; w.dtype = MX_DTYPE_U32; w.bits = 7; w.group_size = 32;
    uint32_t buf[64] = {0};
    w.w = buf; w.scales = buf; w.biases = buf; w.scale_dtype = MX_DTYPE_BF16;
    TCHECK(B.i->weight_prepare(B.ctx, &w) == MX_ERR_UNSUPPORTED, "7 bits accepted");
    w.bits = 4; w.group_size = 48;
    TCHECK(B.i->weight_prepare(B.ctx, &w) != MX_OK, "group 48 over 64 cols accepted");
    w.group_size = 32; w.dtype = MX_DTYPE_U32;
    TCHECK(B.i->weight_prepare(B.ctx, &w) == MX_OK, "good weight rejected: %s", mx_last_error());
}

/* ---------- embed ---------- */
static void test_embed(void) {
    struct { mx_dtype dt; int bits, gs; } cs[] = {{MX_DTYPE_F32, 0, 0}, {MX_DTYPE_BF16, 0, 0}, {MX_DTYPE_F16, 0, 0},
                                                   {MX_DTYPE_U32, 4, 64}, {MX_DTYPE_U32, 3, 32}, {MX_DTYPE_U32, 6, 128},
                                                   {MX_DTYPE_U32, 8, 32}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        tw t;
        tw_make(&t, 50, 256, cs[c].dt, cs[c].bits, cs[c].gs, MX_DTYPE_BF16, false, MX_DTYPE_F32);
        int32_t ids[5] = {0, 49, 7, 7, 23};
        float out[5 * 256];
        B.i->embed(B.ctx, &t.w, ids, 5, out);
        for (int i = 0; i < 5; i++)
            for (int k = 0; k < 256; k++) {
                double r = t.deq[ids[i] * 256 + k];
                TCHECK(fabs(out[i * 256 + k] - r) <= 1e-6 * (fabs(r) + 1e-3), "case %zu id %d col %d: %g vs %g", c, ids[i], k,
                       out[i * 256 + k], r);
            }
        tw_free(&t);
    }
}

/* ---------- norms ---------- */
static void test_rmsnorm(void) {
    int n = 5, d = 96;
    float x[5 * 96], y[5 * 96];
    uint16_t g16[96];
    double gd[96];
    fill(x, n * d, 3.0f);
    for (int i = 0; i < d; i++) store(MX_DTYPE_BF16, g16, i, frand(), &gd[i]);
    mx_vec g = {d, MX_DTYPE_BF16, g16, NULL};
    TCHECK(B.i->vec_prepare(B.ctx, &g) == MX_OK, "vec_prepare");
    for (int mode = 0; mode < 3; mode++) {
        float add = mode == 1 ? 1.0f : 0.0f;
        B.i->rmsnorm(B.ctx, x, mode == 2 ? NULL : &g, 1e-6f, add, y, n, d);
        for (int r = 0; r < n; r++) {
            double ss = 0;
            for (int i = 0; i < d; i++) ss += (double)x[r * d + i] * x[r * d + i];
            double inv = 1.0 / sqrt(ss / d + 1e-6);
            for (int i = 0; i < d; i++) {
                double ref = x[r * d + i] * inv * (mode == 2 ? 1.0 : gd[i] + add);
                TCHECK(fabs(y[r * d + i] - ref) < 1e-5 * (fabs(ref) + 1e-2), "mode %d: %g vs %g", mode, y[r * d + i], ref);
            }
        }
    }
    /* in place */
    float z[5 * 96];
    memcpy(z, x, sizeof z);
    B.i->rmsnorm(B.ctx, z, &g, 1e-6f, 0.0f, z, n, d);
    B.i->rmsnorm(B.ctx, x, &g, 1e-6f, 0.0f, y, n, d);
    TCHECK(!memcmp(z, y, sizeof z), "in-place rmsnorm differs");
    /* many short rows (split across threads) equal the row-by-row results */
    enum { R = 300, D = 64 };
    float *xs = malloc(sizeof(float) * R * D), *ya = malloc(sizeof(float) * R * D), *yb = malloc(sizeof(float) * R * D);
    fill(xs, R * D, 2.0f);
    mx_vec g64 = {D, MX_DTYPE_BF16, g16, NULL};
    B.i->rmsnorm(B.ctx, xs, &g64, 1e-5f, 1.0f, ya, R, D);
    for (int r = 0; r < R; r++) B.i->rmsnorm(B.ctx, xs + r * D, &g64, 1e-5f, 1.0f, yb + r * D, 1, D);
    TCHECK(!memcmp(ya, yb, sizeof(float) * R * D), "batched rmsnorm differs from row by row");
    free(xs); free(ya); free(yb);
}

static void test_layernorm(void) {
    int n = 3, d = 70;
    float x[3 * 70], y[3 * 70], gf[70], bf[70];
    fill(x, n * d, 2.0f); fill(gf, d, 1.0f); fill(bf, d, 1.0f);
    for (int i = 0; i < n * d; i++) x[i] += 0.7f;
    mx_vec g = {d, MX_DTYPE_F32, gf, NULL}, b = {d, MX_DTYPE_F32, bf, NULL};
    for (int mode = 0; mode < 2; mode++) {
        B.i->layernorm(B.ctx, x, mode ? NULL : &g, mode ? NULL : &b, 1e-5f, y, n, d);
        for (int r = 0; r < n; r++) {
            double m = 0, v = 0;
            for (int i = 0; i < d; i++) m += x[r * d + i];
            m /= d;
            for (int i = 0; i < d; i++) v += (x[r * d + i] - m) * (x[r * d + i] - m);
            v /= d;
            for (int i = 0; i < d; i++) {
                double ref = (x[r * d + i] - m) / sqrt(v + 1e-5);
                if (!mode) ref = ref * gf[i] + bf[i];
                TCHECK(fabs(y[r * d + i] - ref) < 1e-5 * (fabs(ref) + 1e-2), "mode %d: %g vs %g", mode, y[r * d + i], ref);
            }
        }
    }
}

/* ---------- rope ---------- */
static void check_rope(int rot, float factor, float base) {
    int n = 4, nh = 3, hd = 16;
    float x[4 * 3 * 16], x0[4 * 3 * 16], inv[8];
    int32_t pos[4] = {0, 1, 17, 1000};
    fill(x, n * nh * hd, 1.0f);
    memcpy(x0, x, sizeof x);
    for (int i = 0; i < rot / 2; i++) inv[i] = (float)pow(base, -2.0 * i / rot);
    mx_rope rp = {rot, inv, factor};
    mx_attn_meta m = {0};
    m.n_tokens = n; m.pos = pos;
    B.i->rope(B.ctx, x, n, nh, hd, &rp, &m);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            const float *a = x0 + (t * nh + h) * hd;
            const float *o = x + (t * nh + h) * hd;
            for (int i = 0; i < hd; i++) {
                double ref;
                if (i < rot) {
                    int j = i % (rot / 2);
                    double ang = (double)((float)pos[t] * inv[j]);
                    double cs = cos(ang) * factor, sn = sin(ang) * factor;
                    ref = i < rot / 2 ? a[i] * cs - a[i + rot / 2] * sn : a[i] * cs + a[i - rot / 2] * sn;
                } else ref = a[i];
                TCHECK(fabs(o[i] - ref) < 2e-6 * (fabs(ref) + 1), "rot %d factor %g t %d h %d i %d: %g vs %g", rot, factor,
                       t, h, i, o[i], ref);
            }
        }
}
static void test_rope(void) {
    /* alternating configurations exercise the backend's cos/sin table cache */
    for (int rep = 0; rep < 2; rep++) {
        check_rope(12, 1.25f, 10000.0f);
        check_rope(16, 1.0f, 10000.0f);
        check_rope(16, 1.0f, 1000000.0f);
        check_rope(8, 0.5f, 500.0f);
    }
}

/* ---------- attention ---------- */
/* Host-side history of each sequence's K/V per position, for the reference. */
#define A_MAXP 64
static int A_NH, A_NKV, A_HD;
static const float *A_SINKS;   /* attention sinks for run_attention / run_attention_long, or NULL */
static float *hk[2][A_MAXP], *hv[2][A_MAXP];

static void attn_ref(const float *q, int seq, int pos, const mx_attn_params *p, double *out) {
    int grp = p->n_heads / p->n_kv_heads;
    for (int h = 0; h < p->n_heads; h++) {
        int kh = h / grp;
        int lo = 0;
        if (p->sliding_window > 0 && pos - p->sliding_window + 1 > 0) lo = pos - p->sliding_window + 1;
        double sc[A_MAXP], mx = -1e300, sum = 0;
        for (int j = lo; j <= pos; j++) {
            double d = 0;
            for (int i = 0; i < A_HD; i++) d += (double)q[h * A_HD + i] * hk[seq][j][kh * A_HD + i];
            d *= p->scale;
            if (p->softcap > 0) d = p->softcap * tanh(d / p->softcap);
            sc[j] = d;
            if (d > mx) mx = d;
        }
        if (p->sinks && p->sinks[h] > mx) mx = p->sinks[h];
        for (int j = lo; j <= pos; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
        if (p->sinks) sum += exp(p->sinks[h] - mx);   /* the sink joins the denominator only */
        for (int i = 0; i < A_HD; i++) {
            double a = 0;
            for (int j = lo; j <= pos; j++) a += sc[j] / sum * hv[seq][j][kh * A_HD + i];
            out[h * A_HD + i] = a;
        }
    }
}

static void run_attention(int nh, int nkv, int hd, int window, float softcap) {
    A_NH = nh; A_NKV = nkv; A_HD = hd;
    const int bs = 4, nblocks = 40;
    mx_kv_desc kd = {2, A_NKV, A_HD, bs, nblocks, MX_DTYPE_F32};
    TREQUIRE(B.i->kv_init(B.ctx, &kd) == MX_OK, "kv_init: %s", mx_last_error());
    TCHECK(kd.dtype == MX_DTYPE_F32, "kv dtype");
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < A_MAXP; i++) { hk[s][i] = malloc(sizeof(float) * nkv * hd); hv[s][i] = malloc(sizeof(float) * nkv * hd); }
    /* two sequences with scattered block tables */
    int32_t bt[2][16];
    for (int i = 0; i < 16; i++) { bt[0][i] = 39 - 2 * i; bt[1][i] = 2 * i + 1; }
    mx_attn_params p = {A_NH, A_NKV, A_HD, 1.0f / sqrtf((float)hd), window, softcap, A_SINKS};
    int len[2] = {0, 0};
    /* steps: (tokens of seq0, tokens of seq1): a mixed prefill, then decodes, then a chunk */
    int steps[][2] = {{7, 0}, {1, 11}, {1, 1}, {5, 1}, {1, 9}, {1, 1}, {14, 1}};
    float *q = malloc(sizeof(float) * 32 * nh * hd), *out = malloc(sizeof(float) * 32 * nh * hd);
    float *kk = malloc(sizeof(float) * 32 * nkv * hd), *vv = malloc(sizeof(float) * 32 * nkv * hd);
    double *ref = malloc(sizeof(double) * nh * hd);
    for (size_t st = 0; st < sizeof steps / sizeof steps[0] && !t_case_failed; st++) {
        int n = steps[st][0] + steps[st][1];
        int32_t pos[32], slot[32], seq[32];
        int k = 0;
        /* interleave the two sequences' tokens to test arbitrary order */
        for (int s = 1; s >= 0; s--)
            for (int i = 0; i < steps[st][s]; i++, k++) {
                int ps = len[s] + i;
                pos[k] = ps; seq[k] = s; slot[k] = bt[s][ps / bs] * bs + ps % bs;
            }
        fill(q, n * nh * hd, 2.0f); fill(kk, n * nkv * hd, 2.0f); fill(vv, n * nkv * hd, 1.0f);
        for (int t = 0; t < n; t++) {
            memcpy(hk[seq[t]][pos[t]], kk + t * nkv * hd, sizeof(float) * nkv * hd);
            memcpy(hv[seq[t]][pos[t]], vv + t * nkv * hd, sizeof(float) * nkv * hd);
        }
        mx_attn_meta m = {n, pos, slot, seq, 2, 16, &bt[0][0]};
        for (int layer = 0; layer < 2; layer++) {
            B.i->attention(B.ctx, layer, q, kk, vv, out, &p, &m);
            for (int t = 0; t < n; t++) {
                attn_ref(q + t * nh * hd, seq[t], pos[t], &p, ref);
                for (int i = 0; i < nh * hd; i++)
                    TCHECK(fabs(out[t * nh * hd + i] - ref[i]) < 1e-5 * (fabs(ref[i]) + 0.1),
                           "heads %d/%d hd %d step %zu layer %d tok %d (seq %d pos %d) i %d: %g vs %g", nh, nkv, hd, st,
                           layer, t, seq[t], pos[t], i, out[t * nh * hd + i], ref[i]);
            }
        }
        len[0] += steps[st][0]; len[1] += steps[st][1];
    }
    free(q); free(out); free(kk); free(vv); free(ref);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < A_MAXP; i++) { free(hk[s][i]); free(hv[s][i]); }
    B.i->kv_free(B.ctx);
}
static void test_attention(void) {
    run_attention(4, 2, 16, 0, 0);
    run_attention(12, 1, 72, 0, 0);   /* > 8 q heads per kv head, head_dim with a tail */
    run_attention(8, 8, 128, 0, 0);   /* MHA */
}
/* One long sequence: a 700-token prefill, then single-token decodes with one kv head (few work
 * units, so the backend also splits the key range across threads and merges). */
static void run_attention_long(int window) {
    enum { NH = 4, NKV = 1, HD = 64, BS = 16, NB = 64, P = 700 };
    mx_kv_desc kd = {1, NKV, HD, BS, NB, MX_DTYPE_F32};
    TREQUIRE(B.i->kv_init(B.ctx, &kd) == MX_OK, "kv_init: %s", mx_last_error());
    int32_t bt[NB];
    for (int i = 0; i < NB; i++) bt[i] = NB - 1 - i;
    float *q = malloc(sizeof(float) * (P + 2) * NH * HD), *out = malloc(sizeof(float) * P * NH * HD);
    float *kk = malloc(sizeof(float) * (P + 2) * NKV * HD), *vv = malloc(sizeof(float) * (P + 2) * NKV * HD);
    int32_t *pos = malloc(sizeof(int32_t) * P), *slot = malloc(sizeof(int32_t) * P), *seq = malloc(sizeof(int32_t) * P);
    fill(q, (P + 2) * NH * HD, 2.0f); fill(kk, (P + 2) * NKV * HD, 2.0f); fill(vv, (P + 2) * NKV * HD, 1.0f);
    for (int i = 0; i < P; i++) { pos[i] = i; seq[i] = 0; slot[i] = bt[i / BS] * BS + i % BS; }
    mx_attn_params p = {NH, NKV, HD, 0.125f, window, 0, A_SINKS};
    mx_attn_meta m = {P, pos, slot, seq, 1, NB, bt};
    B.i->attention(B.ctx, 0, q, kk, vv, out, &p, &m);
    for (int step = 0; step <= 2 && !t_case_failed; step++) {
        int t = step < 2 ? (step ? 350 : P - 1) : P; /* two prefill rows, then a decode at position P */
        if (step == 2) {
            int32_t dp = P, ds = bt[P / BS] * BS + P % BS, dq = 0;
            mx_attn_meta dm = {1, &dp, &ds, &dq, 1, NB, bt};
            B.i->attention(B.ctx, 0, q + (size_t)P * NH * HD, kk + (size_t)P * NKV * HD, vv + (size_t)P * NKV * HD, out, &p, &dm);
        }
        const float *o = step == 2 ? out : out + (size_t)t * NH * HD;
        int lo = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
        for (int h = 0; h < NH; h++) {
            double mx = -1e300, sum = 0, *sc = malloc(sizeof(double) * (P + 1));
            for (int jx = lo; jx <= t; jx++) {
                double d = 0;
                for (int i = 0; i < HD; i++) d += (double)q[((size_t)t * NH + h) * HD + i] * kk[(size_t)jx * HD + i];
                sc[jx] = d * 0.125;
                if (sc[jx] > mx) mx = sc[jx];
            }
            if (A_SINKS && A_SINKS[h] > mx) mx = A_SINKS[h];
            for (int jx = lo; jx <= t; jx++) { sc[jx] = exp(sc[jx] - mx); sum += sc[jx]; }
            if (A_SINKS) sum += exp(A_SINKS[h] - mx);
            for (int i = 0; i < HD; i++) {
                double a = 0;
                for (int jx = lo; jx <= t; jx++) a += sc[jx] / sum * vv[(size_t)jx * HD + i];
                TCHECK(fabs(o[h * HD + i] - a) < 1e-5 * (fabs(a) + 0.1), "window %d pos %d head %d i %d: %g vs %g", window,
                       t, h, i, o[h * HD + i], a);
            }
            free(sc);
        }
    }
    free(q); free(out); free(kk); free(vv); free(pos); free(slot); free(seq);
    B.i->kv_free(B.ctx);
}
static void test_attention_long(void) { run_attention_long(0); run_attention_long(300); }

static void test_attention_window(void) { run_attention(4, 2, 16, 5, 0); run_attention(6, 2, 64, 17, 0); }
/* gpt-oss attention sinks: a per-head logit in the softmax denominator (no value); large ones
 * dominate, so the outputs shrink measurably. Plain, windowed, many heads per kv head, and the
 * long context whose key range is split across threads and merged. */
static void test_attention_sinks(void) {
    static float sk[12];
    for (int i = 0; i < 12; i++) sk[i] = (float)(i % 5) - 1.5f + (i == 3 ? 4.0f : 0.0f);
    A_SINKS = sk;
    run_attention(4, 2, 16, 0, 0);
    run_attention(12, 1, 72, 5, 0);
    run_attention_long(0);
    run_attention_long(300);
    A_SINKS = NULL;
}
static void test_attention_softcap(void) { run_attention(4, 2, 16, 0, 1.5f); run_attention(4, 2, 32, 3, 2.0f); }

/* ---------- activations, element-wise ---------- */
static double act_ref(mx_act a, double x) {
    switch (a) {
    case MX_ACT_SILU: return x / (1 + exp(-x));
    case MX_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case MX_ACT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case MX_ACT_RELU: return x > 0 ? x : 0;
    }
    return x;
}

static void test_act(void) {
    int n = 3, d = 50;
    float gu[3 * 100], y[3 * 50], z[150];
    fill(gu, 300, 5.0f);
    for (int a = 0; a < 4; a++) {
        B.i->act_mul(B.ctx, (mx_act)a, gu, gu + d, 2 * d, y, n, d);
        for (int r = 0; r < n; r++)
            for (int i = 0; i < d; i++) {
                double ref = act_ref((mx_act)a, gu[r * 2 * d + i]) * gu[r * 2 * d + d + i];
                TCHECK(fabs(y[r * d + i] - ref) < 1e-5 * (fabs(ref) + 1e-3), "act_mul %d: %g vs %g", a, y[r * d + i], ref);
            }
        B.i->act(B.ctx, (mx_act)a, gu, z, 150);
        for (int i = 0; i < 150; i++) {
            double ref = act_ref((mx_act)a, gu[i]);
            TCHECK(fabs(z[i] - ref) < 1e-5 * (fabs(ref) + 1e-3), "act %d: %g vs %g", a, z[i], ref);
        }
    }
}

static void test_elementwise(void) {
    enum { N = 40000 };
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    fill(a, N, 10.0f); fill(b, N, 10.0f);
    B.i->add(B.ctx, a, b, y, N);
    for (int i = 0; i < N; i++) TCHECK(y[i] == a[i] + b[i], "add %d", i);
    B.i->scale(B.ctx, a, 0.3f, y, N);
    for (int i = 0; i < N; i++) TCHECK(y[i] == a[i] * 0.3f, "scale %d", i);
    memcpy(y, a, N * sizeof(float));
    B.i->softcap(B.ctx, y, 3.0f, N);
    for (int i = 0; i < N; i++) TCHECK(fabs(y[i] - 3.0 * tanh(a[i] / 3.0)) < 1e-6, "softcap %d", i);
    memcpy(y, a, N * sizeof(float));
    B.i->add(B.ctx, y, b, y, N);
    for (int i = 0; i < N; i++) TCHECK(y[i] == a[i] + b[i], "add in place %d", i);
    int32_t rows[3] = {5, 0, 5};
    B.i->gather_rows(B.ctx, a, rows, 3, 100, y);
    TCHECK(!memcmp(y, a + 500, 400) && !memcmp(y + 100, a, 400) && !memcmp(y + 200, a + 500, 400), "gather_rows");
    free(a); free(b); free(y);
}

static void test_memory(void) {
    void *p = B.i->alloc(B.ctx, 1000);
    TREQUIRE(p, "alloc");
    TCHECK(((uintptr_t)p & 63) == 0, "alloc not 64-byte aligned");
    char src[1000], dst[1000];
    for (int i = 0; i < 1000; i++) src[i] = (char)i;
    B.i->write(B.ctx, p, src, 1000);
    B.i->sync(B.ctx);
    B.i->read(B.ctx, dst, p, 1000);
    TCHECK(!memcmp(src, dst, 1000), "write/read round trip");
    B.i->free(B.ctx, p);
    mx_kv_desc bad = {0, 1, 1, 1, 1, MX_DTYPE_F32};
    TCHECK(B.i->kv_init(B.ctx, &bad) != MX_OK, "kv_init accepted 0 layers");
}

/* matmul_multi (q/k/v, gate/up in one pass) gives exactly what separate matmuls give, on the
 * exact path and the fast path, for each format. */
static void test_matmul_multi(void) {
    struct { mx_dtype dt; int bits, gs; } fm[] = {{MX_DTYPE_U32, 4, 64}, {MX_DTYPE_U32, 8, 64}, {MX_DTYPE_U32, 4, 32},
                                                   {MX_DTYPE_U32, 6, 64}, {MX_DTYPE_BF16, 0, 0}, {MX_DTYPE_F32, 0, 0}};
    const int64_t K = 256, rows[3] = {96, 48, 48};
    for (size_t f = 0; f < sizeof fm / sizeof *fm; f++)
        for (int prec = 0; prec < 2; prec++)
            for (int n = 1; n <= 9; n += 4) {
                tw t[3];
                const mx_weight *ws[3];
                float *ys[3], *yr[3];
                float *x = malloc((size_t)(n * K) * sizeof(float));
                fill(x, n * K, 1.0f);
                for (int k = 0; k < 3; k++) {
                    tw_make(&t[k], rows[k], K, fm[f].dt, fm[f].bits, fm[f].gs, MX_DTYPE_BF16, k == 0, MX_DTYPE_BF16);
                    ws[k] = &t[k].w;
                    ys[k] = malloc((size_t)(n * rows[k]) * sizeof(float));
                    yr[k] = malloc((size_t)(n * rows[k]) * sizeof(float));
                }
                B.i->set_precision(B.ctx, prec ? MX_PREC_FAST : MX_PREC_EXACT);
                mx_backend_cpu_set_precise(&B, false);
                B.i->matmul_multi(B.ctx, 3, ws, x, ys, n);
                for (int k = 0; k < 3; k++) B.i->matmul(B.ctx, ws[k], x, yr[k], n);
                B.i->set_precision(B.ctx, MX_PREC_AUTO);
                mx_backend_cpu_set_precise(&B, true);
                for (int k = 0; k < 3; k++) {
                    TCHECK(!memcmp(ys[k], yr[k], (size_t)(n * rows[k]) * sizeof(float)),
                           "format %zu prec %d n %d weight %d: multi differs from single", f, prec, n, k);
                    tw_free(&t[k]); free(ys[k]); free(yr[k]);
                }
                free(x);
            }
}

int main(void) {
    if (mx_backend_cpu_init(&B) != MX_OK) { printf("FAIL init: %s\n", mx_last_error()); return 1; }
    mx_backend_cpu_set_precise(&B, true);
    RUN(test_memory);
    RUN(test_matmul_dense);
    RUN(test_matmul_quant);
    RUN(test_matmul_large);
    RUN(test_matmul_multi);
    RUN(test_bad_weight);
    RUN(test_embed);
    RUN(test_rmsnorm);
    RUN(test_layernorm);
    RUN(test_rope);
    RUN(test_attention);
    RUN(test_attention_window);
    RUN(test_attention_long);
    RUN(test_attention_softcap);
    RUN(test_attention_sinks);
    RUN(test_act);
    RUN(test_elementwise);
    mx_backend_cpu_free(&B);
    TEST_EXIT();
}
