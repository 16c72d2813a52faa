/* test_sampler_topk.c: sampling from top-k candidates instead of full logit rows.
 * - the topk op (mx_topk_host and the CPU backend's hook) against a full sort and a double
 *   log-sum-exp, on random rows with ties, -inf and NaN entries, vocab smaller than k;
 * - mx_sampler_sample_topk against mx_sampler_sample on thousands of random rows and sampling
 *   parameters: two samplers of one seed draw several times in a row; each draw must give the
 *   same token and bit-identical logprobs, or report need_full (then the full row is used, so
 *   the RNG streams stay in step). Fallback rates are printed; greedy and the default
 *   parameters must never fall back;
 * - mx_model_forward_topk / mx_model_read_logits on a random model against mx_model_forward,
 *   with the backend's hook and without it (host reduction). */
#include "test.h"
#include "mlxcel/engine.h"

#include <float.h>
#include <jansson.h>
#include <math.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd64(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return g_rng;
}
static int rndi(int n) { return (int)(rnd64() % (uint64_t)n); }
static double rndu(void) { return (double)(rnd64() >> 11) * (1.0 / 9007199254740992.0); }
static float rndn(void) {   /* roughly normal */
    double s = 0;
    for (int i = 0; i < 4; i++) s += rndu();
    return (float)((s - 2.0) * 1.7);
}

/* A random logit row of one of several shapes. */
static void make_row(float *row, int V, int kind, bool allow_nan) {
    float scale = (float[]){0.01f, 1.0f, 4.0f, 12.0f, 40.0f}[rndi(5)];
    float off = (float)(rndu() * 60 - 30);
    for (int i = 0; i < V; i++) {
        float x = off + scale * rndn();
        switch (kind) {
        case 1: x = off + (float)rndi(6) * scale; break;                 /* heavy ties */
        case 2: if (rndi(4) == 0) x = -INFINITY; break;                  /* banned tokens */
        case 3: if (rndi(50) == 0) x += 15 * scale; break;               /* a few peaks */
        case 4: x = off + (float)rndi(3); if (rndi(3) == 0) x = -INFINITY; break;
        default: break;
        }
        row[i] = x;
    }
    if (kind == 5 && V > 1) for (int i = 0; i < V; i++) row[i] = (i % 3) ? -INFINITY : row[i];
    if (allow_nan && rndi(200) == 0) row[rndi(V)] = NAN;
}

typedef struct ref_ent { float v; int32_t id; } ref_ent;
static int ref_cmp(const void *a, const void *b) {
    const ref_ent *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Check one row's op result against a sort and a double lse. */
static bool check_row(const float *row, int V, int k, const float *vals, const int32_t *ids, float lse, char *why, size_t n) {
    ref_ent *e = malloc((size_t)V * sizeof *e);
    int m = 0;
    bool nan = false;
    double mx = -INFINITY;
    for (int i = 0; i < V; i++) {
        if (row[i] != row[i]) { nan = true; continue; }
        e[m].v = row[i]; e[m].id = i; m++;
        if (row[i] > mx) mx = row[i];
    }
    qsort(e, (size_t)m, sizeof *e, ref_cmp);
    bool ok = true;
    for (int i = 0; i < k && ok; i++) {
        float wv = i < m ? e[i].v : -INFINITY;
        int32_t wi = i < m ? e[i].id : -1;
        if (!(vals[i] == wv || (isinf(wv) && vals[i] == wv)) || ids[i] != wi) {
            snprintf(why, n, "V=%d k=%d pos %d: got (%g, %d) want (%g, %d)", V, k, i, vals[i], ids[i], wv, wi);
            ok = false;
        }
    }
    if (ok) {
        if (nan) {
            if (lse == lse) { snprintf(why, n, "V=%d: NaN in the row but lse %g", V, lse); ok = false; }
        } else if (isinf(mx) && mx < 0) {
            if (!(isinf(lse) && lse < 0)) { snprintf(why, n, "V=%d all -inf: lse %g", V, lse); ok = false; }
        } else {
            double s = 0;
            for (int i = 0; i < V; i++) s += exp((double)row[i] - mx);
            double want = mx + log(s);
            if (fabs(lse - want) > 2e-6 * (1 + fabs(want))) { snprintf(why, n, "V=%d: lse %.9g want %.9g", V, lse, want); ok = false; }
        }
    }
    free(e);
    return ok;
}

static void topk_op(void) {
    mx_backend be;
    TREQUIRE(mx_backend_cpu_init(&be) == MX_OK, "cpu backend: %s", mx_last_error());
    TREQUIRE(be.i->topk != NULL, "the CPU backend has no topk hook");
    char why[256];
    static const int ks[] = {1, 2, 5, 40, 63, 64};
    for (int t = 0; t < 400 && !t_case_failed; t++) {
        int V = t == 0 ? 151936 : t < 3 ? 262144 : t % 5 == 0 ? 1 + rndi(70) : 1 + rndi(5000);
        int k = ks[rndi(6)];
        int rows = 1 + rndi(4);
        float *l = be.i->alloc(be.ctx, (size_t)rows * V * sizeof *l);
        float *v = malloc((size_t)rows * k * sizeof *v), *lse = malloc((size_t)rows * sizeof *lse);
        int32_t *id = malloc((size_t)rows * k * sizeof *id);
        TREQUIRE(l && v && lse && id, "out of memory");
        for (int r = 0; r < rows; r++) make_row(l + (size_t)r * V, V, rndi(6), true);
        be.i->topk(be.ctx, l, rows, V, k, v, id, lse);
        for (int r = 0; r < rows && !t_case_failed; r++) {
            const float *row = l + (size_t)r * V;
            TCHECK(check_row(row, V, k, v + (size_t)r * k, id + (size_t)r * k, lse[r], why, sizeof why), "%s", why);
            float hv[64], hl; int32_t hi[64];
            mx_topk_host(row, V, k, hv, hi, &hl);
            TCHECK(!memcmp(hv, v + (size_t)r * k, (size_t)k * sizeof *hv) && !memcmp(hi, id + (size_t)r * k, (size_t)k * sizeof *hi),
                   "op and mx_topk_host differ (V=%d k=%d)", V, k);
            float l2 = mx_lse_host(row, V);
            TCHECK(!memcmp(&hl, &lse[r], sizeof hl) && !memcmp(&l2, &hl, sizeof hl), "lse bits differ: %.9g %.9g %.9g", lse[r], hl, l2);
        }
        be.i->free(be.ctx, l);
        free(v); free(lse); free(id);
    }
    mx_backend_cpu_free(&be);
}

/* ---- sampler equivalence ------------------------------------------------------------------ */

enum { C_GREEDY, C_DEFAULT, C_TEMP, C_TOPK, C_TOPP_MINP, C_PENALTY, C_BIAS, C_LOGPROBS, C_SMALLV, C_N };
static const char *c_names[C_N] = {"greedy", "default", "temperature", "top_k", "top_p/min_p", "penalties", "logit_bias", "logprobs", "vocab<=k"};
static long c_draws[C_N], c_full[C_N];

typedef struct eq_case { int V, k, cat; mx_sampling p; mx_logit_bias bias[8]; } eq_case;

static void rand_case(eq_case *c) {
    memset(c, 0, sizeof *c);
    c->cat = rndi(C_N);
    c->V = c->cat == C_SMALLV ? 1 + rndi(64) : 65 + rndi(rndi(4) == 0 ? 20000 : 600);
    c->k = rndi(5) == 0 ? (int[]){1, 5, 16, 40}[rndi(4)] : MX_TOPK_MAX;
    mx_sampling *p = &c->p;
    mx_sampling_default(p);
    p->seed = rnd64();
    static const int tks[] = {0, 1, 5, 40, 64, 100};
    switch (c->cat) {
    case C_GREEDY: p->temperature = 0; if (rndi(2)) p->top_k = tks[rndi(6)]; break;
    case C_DEFAULT: break;
    case C_TEMP: p->temperature = (float)(0.05 + rndu() * 2.5); p->top_k = tks[rndi(6)]; p->top_p = 1; p->min_p = 0; break;
    case C_TOPK: p->top_k = tks[rndi(6)]; p->temperature = (float)(0.1 + rndu() * 1.5); break;
    case C_TOPP_MINP:
        p->top_k = tks[rndi(6)]; p->temperature = (float)(0.1 + rndu() * 1.5);
        p->top_p = rndi(3) ? (float)rndu() : 1.0f; p->min_p = rndi(2) ? (float)(rndu() * 0.5) : 0; break;
    default: break;
    }
    if (c->cat == C_PENALTY || (c->cat >= C_LOGPROBS && rndi(3) == 0)) {
        if (rndi(2)) p->repeat_penalty = (float)(0.7 + rndu() * 1.0);
        if (rndi(2)) p->presence_penalty = (float)(rndu() * 3 - 1);
        if (rndi(2)) p->frequency_penalty = (float)(rndu() * 2 - 0.5);
        p->repeat_last_n = (int[]){-1, 0, 8, 64}[rndi(4)];
        if (rndi(3) == 0) p->temperature = 0;
    }
    if (c->cat == C_BIAS || (c->cat >= C_LOGPROBS && rndi(3) == 0)) {
        int nb = 1 + rndi(8);
        for (int i = 0; i < nb; i++) {
            c->bias[i].id = rndi(10) == 0 ? c->V + 3 : rndi(c->V);
            c->bias[i].bias = rndi(6) == 0 ? -INFINITY : (float)(rndu() * 20 - 10);
        }
        p->logit_bias = c->bias; p->n_logit_bias = nb;
        if (rndi(3) == 0) p->temperature = 0;
    }
    if (c->cat == C_LOGPROBS || rndi(4) == 0) p->n_logprobs = rndi(21);
}

/* One case: several consecutive draws through both paths. */
static void eq_run(const eq_case *c, char *why, size_t n, bool *ok) {
    const int V = c->V, k = c->k;
    mx_sampler *a = mx_sampler_new(&c->p, V), *b = mx_sampler_new(&c->p, V);
    float *row = malloc((size_t)V * sizeof *row), *ra = malloc((size_t)V * sizeof *ra), *rb = malloc((size_t)V * sizeof *rb);
    int32_t hist[64];
    int nh = 0;
    for (int i = 0; i < 20; i++) hist[nh++] = rndi(V);   /* a "prompt" */
    int kind = rndi(6);
    for (int d = 0; d < 6 && *ok; d++) {
        make_row(row, V, kind, true);
        if (nh > 0 && rndi(2)) row[hist[rndi(nh)]] += 3;   /* repeated tokens near the top */
        memcpy(ra, row, (size_t)V * sizeof *row);
        memcpy(rb, row, (size_t)V * sizeof *row);
        bool lp = rndi(2);
        mx_token_logprob ta[20], tb[20];
        memset(ta, 0, sizeof ta); memset(tb, 0, sizeof tb);
        float la = 0, lb = 0;
        int32_t ia = mx_sampler_sample(a, ra, hist, nh, lp ? &la : NULL, c->p.n_logprobs > 0 ? ta : NULL);
        float cv[MX_TOPK_MAX], clse;
        int32_t ci[MX_TOPK_MAX];
        mx_topk_host(row, V, k, cv, ci, &clse);
        bool full = false;
        int32_t ib = mx_sampler_sample_topk(b, cv, ci, k, clse, hist, nh, lp ? &lb : NULL, c->p.n_logprobs > 0 ? tb : NULL, &full);
        bool has_nan = false;
        for (int i = 0; i < V; i++) if (row[i] != row[i]) has_nan = true;
        bool counted = k == MX_TOPK_MAX && !has_nan;   /* rates as the engine sees them */
        if (counted) c_draws[c->cat]++;
        if (full) {
            if (counted) c_full[c->cat]++;
            if (counted && getenv("TOPK_DEBUG")) fprintf(stderr, "fallback %s V=%d T=%g top_k=%d nlp=%d nbias=%d rep=%g pres=%g freq=%g\n", c_names[c->cat], V, c->p.temperature, c->p.top_k, c->p.n_logprobs, c->p.n_logit_bias, c->p.repeat_penalty, c->p.presence_penalty, c->p.frequency_penalty);
            if (ib != -1) { snprintf(why, n, "need_full but returned %d", ib); *ok = false; break; }
            ib = mx_sampler_sample(b, rb, hist, nh, lp ? &lb : NULL, c->p.n_logprobs > 0 ? tb : NULL);
        }
        int nt = c->p.n_logprobs < V ? c->p.n_logprobs : V;
        if (ia != ib || memcmp(&la, &lb, sizeof la) || memcmp(ta, tb, (size_t)nt * sizeof *ta)) {
            snprintf(why, n, "%s V=%d k=%d T=%g top_k=%d top_p=%g min_p=%g rep=%g pres=%g freq=%g nbias=%d nlp=%d draw %d%s: "
                     "full %d (lp %.9g, top0 %d %.9g) topk %d (lp %.9g, top0 %d %.9g)",
                     c_names[c->cat], V, k, c->p.temperature, c->p.top_k, c->p.top_p, c->p.min_p, c->p.repeat_penalty,
                     c->p.presence_penalty, c->p.frequency_penalty, c->p.n_logit_bias, c->p.n_logprobs, d, full ? " (fallback)" : "",
                     ia, la, ta[0].id, ta[0].logprob, ib, lb, tb[0].id, tb[0].logprob);
            *ok = false;
        }
        if (nh < 64) hist[nh++] = ia;
    }
    free(row); free(ra); free(rb);
    mx_sampler_free(a); mx_sampler_free(b);
}

static void sampler_equivalence(void) {
    char why[440];
    bool ok = true;
    for (int t = 0; t < 6000 && ok; t++) {
        eq_case c;
        rand_case(&c);
        eq_run(&c, why, sizeof why, &ok);
    }
    TCHECK(ok, "case: %s", why);
    for (int i = 0; i < C_N; i++)
        printf("  fallback (k=%d, NaN-free rows) %-12s %5ld of %5ld draws (%.2f%%)\n", MX_TOPK_MAX, c_names[i], c_full[i], c_draws[i], c_draws[i] ? 100.0 * c_full[i] / c_draws[i] : 0.0);
}

/* Fallback rate of the default parameters with typical penalties (printed, not asserted). */
static void typical_penalty_rate(void) {
    long draws = 0, full_n = 0;
    for (int t = 0; t < 1000; t++) {
        int V = 1000 + rndi(3000);
        mx_sampling p;
        mx_sampling_default(&p);
        p.seed = rnd64();
        p.repeat_penalty = 1.1f; p.presence_penalty = 0.5f; p.frequency_penalty = 0.2f;
        mx_sampler *s = mx_sampler_new(&p, V);
        float *row = malloc((size_t)V * sizeof *row);
        int32_t hist[40];
        for (int i = 0; i < 40; i++) hist[i] = rndi(V);
        make_row(row, V, 3, false);
        for (int i = 0; i < 10; i++) row[hist[i]] += 5;
        float cv[MX_TOPK_MAX], clse;
        int32_t ci[MX_TOPK_MAX];
        mx_topk_host(row, V, MX_TOPK_MAX, cv, ci, &clse);
        bool full = false;
        mx_sampler_sample_topk(s, cv, ci, MX_TOPK_MAX, clse, hist, 40, NULL, NULL, &full);
        draws++; full_n += full;
        free(row);
        mx_sampler_free(s);
    }
    printf("  fallback (k=%d) default + repeat 1.1, presence 0.5, frequency 0.2: %ld of %ld draws\n", MX_TOPK_MAX, full_n, draws);
}

/* Greedy without bias/penalties and the default parameters never need the full row (NaN-free rows). */
static void no_fallback_common(void) {
    for (int t = 0; t < 2000; t++) {
        int V = 65 + rndi(3000);
        mx_sampling p;
        mx_sampling_default(&p);
        p.seed = rnd64();
        if (t % 2) p.temperature = 0;
        if (t % 3 == 0) p.n_logprobs = rndi(21);
        mx_sampler *s = mx_sampler_new(&p, V);
        float *row = malloc((size_t)V * sizeof *row);
        make_row(row, V, rndi(6), false);
        float cv[MX_TOPK_MAX], clse, lp;
        int32_t ci[MX_TOPK_MAX];
        mx_token_logprob top[20];
        mx_topk_host(row, V, MX_TOPK_MAX, cv, ci, &clse);
        bool full = true;
        int32_t id = mx_sampler_sample_topk(s, cv, ci, MX_TOPK_MAX, clse, NULL, 0, &lp, top, &full);
        TCHECK(!full && id >= 0 && id < V, "T=%g V=%d: need_full %d id %d", p.temperature, V, full, id);
        free(row);
        mx_sampler_free(s);
        if (t_case_failed) return;
    }
}

/* mx_sampling_top1_decides: greedy alone; each of bias, penalties, log-probabilities, a
 * temperature makes it false; where it is true, the sampler decides from one candidate (k = 1)
 * what it decides from the full row */
static void top1_decides(void) {
    mx_sampling p;
    mx_sampling_default(&p);
    TCHECK(!mx_sampling_top1_decides(&p), "the default sampling (temperature 0.8) decided by the top-1");
    p.temperature = 0;
    TCHECK(mx_sampling_top1_decides(&p), "greedy not decided by the top-1");
    mx_logit_bias lb = {3, 1.f};
    mx_sampling q = p; q.logit_bias = &lb; q.n_logit_bias = 1;
    TCHECK(!mx_sampling_top1_decides(&q), "a logit bias");
    q = p; q.repeat_penalty = 1.1f;
    TCHECK(!mx_sampling_top1_decides(&q), "a repeat penalty");
    q = p; q.repeat_penalty = 0;   /* (off) */
    TCHECK(mx_sampling_top1_decides(&q), "a repeat penalty of 0 (off)");
    q = p; q.presence_penalty = 0.5f;
    TCHECK(!mx_sampling_top1_decides(&q), "a presence penalty");
    q = p; q.frequency_penalty = 0.5f;
    TCHECK(!mx_sampling_top1_decides(&q), "a frequency penalty");
    q = p; q.n_logprobs = 2;
    TCHECK(!mx_sampling_top1_decides(&q), "log-probabilities");
    for (int t = 0; t < 200 && !t_case_failed; t++) {
        const int V = 65 + rndi(3000);
        float *row = malloc((size_t)V * sizeof *row);
        make_row(row, V, rndi(6), false);
        float cv, clse;
        int32_t ci, hist[1] = {1};
        mx_topk_host(row, V, 1, &cv, &ci, &clse);
        mx_sampler *sm = mx_sampler_new(&p, V);
        bool full = true;
        const int32_t id = mx_sampler_sample_topk(sm, &cv, &ci, 1, clse, hist, 1, NULL, NULL, &full);
        const int32_t ref = mx_sampler_sample(sm, row, hist, 1, NULL, NULL);
        TCHECK(!full && id == ref, "V=%d: from the top-1 %d (need_full %d), from the row %d", V, id, full, ref);
        mx_sampler_free(sm);
        free(row);
    }
}

/* need_full draws nothing: after a refused draw the next draws match a sampler that never saw it. */
static void fallback_keeps_rng(void) {
    const int V = 1000;
    mx_sampling p;
    mx_sampling_default(&p);
    p.top_k = 0;   /* sampling over the whole row: always needs it */
    mx_sampler *a = mx_sampler_new(&p, V), *b = mx_sampler_new(&p, V);
    float *row = malloc(V * sizeof *row), *r2 = malloc(V * sizeof *r2);
    for (int d = 0; d < 20; d++) {
        make_row(row, V, 0, false);
        float cv[MX_TOPK_MAX], clse;
        int32_t ci[MX_TOPK_MAX];
        mx_topk_host(row, V, MX_TOPK_MAX, cv, ci, &clse);
        bool full = false;
        int32_t r = mx_sampler_sample_topk(b, cv, ci, MX_TOPK_MAX, clse, NULL, 0, NULL, NULL, &full);
        TCHECK(full && r == -1, "top_k 0 sampled from candidates");
        memcpy(r2, row, V * sizeof *row);
        int32_t x = mx_sampler_sample(a, row, NULL, 0, NULL, NULL), y = mx_sampler_sample(b, r2, NULL, 0, NULL, NULL);
        TCHECK(x == y, "draw %d: %d vs %d", d, x, y);
    }
    /* invalid candidate lists are refused, not trusted */
    float cv[4] = {1, 2, 0, 0}; int32_t ci[4] = {0, 1, 2, 3};
    bool full = false;
    mx_sampler_sample_topk(a, cv, ci, 4, 3.0f, NULL, 0, NULL, NULL, &full);
    TCHECK(full, "unsorted candidates accepted");
    ci[1] = V; cv[0] = 3; full = false;
    mx_sampler_sample_topk(a, cv, ci, 4, 3.0f, NULL, 0, NULL, NULL, &full);
    TCHECK(full, "out-of-range id accepted");
    free(row); free(r2);
    mx_sampler_free(a); mx_sampler_free(b);
}

/* ---- model level -------------------------------------------------------------------------- */

static void model_forward_topk(void) {
    const char *js = "{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 32, \"num_hidden_layers\": 2, "
                     "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 16, \"intermediate_size\": 64}";
    json_error_t je;
    json_t *cfg = json_loads(js, 0, &je);
    TREQUIRE(cfg, "json: %s", je.text);
    mx_backend be, nohook;
    TREQUIRE(mx_backend_cpu_init(&be) == MX_OK, "cpu: %s", mx_last_error());
    mx_backend_i without = *be.i;
    without.topk = NULL;
    nohook.i = &without; nohook.ctx = be.ctx;
    for (int pass = 0; pass < 2 && !t_case_failed; pass++) {
        mx_model *m = NULL;
        mx_status st = mx_model_load_random(cfg, 0, 0, MX_DTYPE_F32, 5, pass ? &nohook : &be, &m);
        TREQUIRE(st == MX_OK, "load: %s", mx_last_error());
        TREQUIRE(mx_model_prepare(m, 4, 16, 8) == MX_OK, "prepare: %s", mx_last_error());
        const int V = 300, n = 5, K = MX_TOPK_MAX;
        int32_t tok[5] = {1, 7, 42, 299, 3}, pos[5] = {0, 1, 2, 3, 4}, seq[5] = {0}, tab[4] = {0, 1, 2, 3}, rows[3] = {4, 0, 2};
        mx_batch b = {n, tok, pos, seq, 1, 4, tab, 3, rows, 0};
        float full[3 * 300], row[300], v[3 * MX_TOPK_MAX], lse[3];
        int32_t id[3 * MX_TOPK_MAX];
        TCHECK(mx_model_forward(m, &b, full) == MX_OK, "forward: %s", mx_last_error());
        TCHECK(mx_model_forward_topk(m, &b, K, v, id, lse) == MX_OK, "forward_topk: %s", mx_last_error());
        for (int r = 0; r < 3; r++) {
            float hv[MX_TOPK_MAX], hl; int32_t hi[MX_TOPK_MAX];
            mx_topk_host(full + r * V, V, K, hv, hi, &hl);
            TCHECK(!memcmp(hv, v + r * K, sizeof hv) && !memcmp(hi, id + r * K, sizeof hi) && !memcmp(&hl, &lse[r], sizeof hl),
                   "pass %d row %d: candidates differ from the full logits", pass, r);
            TCHECK(mx_model_read_logits(m, r, row) == MX_OK && !memcmp(row, full + r * V, sizeof row), "pass %d: read_logits row %d", pass, r);
        }
        TCHECK(mx_model_read_logits(m, 3, row) == MX_ERR_RANGE && strstr(mx_last_error(), "logit row"), "row 3 of 3 accepted");
        TCHECK(mx_model_read_logits(m, -1, row) == MX_ERR_RANGE, "row -1 accepted");
        TCHECK(mx_model_forward_topk(m, &b, 0, v, id, lse) == MX_ERR_INVALID_ARG, "k = 0 accepted");
        TCHECK(mx_model_forward_topk(m, &b, MX_TOPK_MAX + 1, v, id, lse) == MX_ERR_INVALID_ARG, "k > MX_TOPK_MAX accepted");
        b.n_logits = 0;
        TCHECK(mx_model_forward_topk(m, &b, K, v, id, lse) == MX_OK, "no logit rows: %s", mx_last_error());
        TCHECK(mx_model_read_logits(m, 0, row) == MX_ERR_RANGE, "row 0 after a forward without logits accepted");
        tok[0] = V;
        b.n_logits = 3;
        TCHECK(mx_model_forward_topk(m, &b, K, v, id, lse) == MX_ERR_RANGE, "bad token accepted");
        mx_model_free(m);
    }
    mx_backend_cpu_free(&be);
    json_decref(cfg);
}

int main(void) {
    RUN(topk_op);
    RUN(sampler_equivalence);
    RUN(no_fallback_common);
    RUN(typical_penalty_rate);
    RUN(fallback_keeps_rng);
    RUN(top1_decides);
    RUN(model_forward_topk);
    TEST_EXIT();
}
