/* engine/sampler.c: the sampler chain: logit bias, repetition/presence/frequency penalties,
 * temperature, top-k, top-p, min-p, then a seeded draw (or argmax when greedy). Log-probabilities
 * are reported under the model's unmodified distribution. Two entry points with one arithmetic:
 * mx_sampler_sample on a full logit row, and mx_sampler_sample_topk on the row's top-k
 * candidates and log-sum-exp (the backend's topk op), which gives the same token, logprobs and
 * RNG use, or says it cannot decide exactly (need_full) and then touches nothing.
 * Candidate order everywhere: value descending, lower id first on ties. Not thread-safe per
 * sampler. */
#include "mlxcel/engine.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct mx_sampler {
    mx_sampling p;
    mx_logit_bias *bias;
    int vocab;
    uint64_t rng[4];
    int32_t *idx;       /* [vocab] candidate ids */
    float *prob;        /* [vocab] */
    uint16_t *count;    /* [vocab] occurrences in the penalty window */
    float *raw;         /* [vocab] unmodified logits, kept when logprobs are wanted */
    uint8_t *mark;      /* [vocab] zero between calls: candidates of the topk path */
};

void mx_sampling_default(mx_sampling *s) {
    memset(s, 0, sizeof *s);
    s->temperature = 0.8f;
    s->top_k = 40;
    s->top_p = 0.95f;
    s->min_p = 0.05f;
    s->repeat_penalty = 1.0f;
    s->repeat_last_n = 64;
    s->seed = 0xC0FFEEu;
}

/* a repeat penalty that changes logits (1 and <= 0 leave them) */
static bool repeat_on(const mx_sampling *p) { return p->repeat_penalty != 1.0f && p->repeat_penalty > 0; }

bool mx_sampling_top1_decides(const mx_sampling *p) {
    return p->temperature <= 0.0f && p->n_logit_bias == 0 && !repeat_on(p) && p->presence_penalty == 0 &&
           p->frequency_penalty == 0 && p->n_logprobs <= 0;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t xoshiro(uint64_t *s) {   /* xoshiro256** */
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return r;
}
static double uniform01(uint64_t *s) { return (double)(xoshiro(s) >> 11) * (1.0 / 9007199254740992.0); }

mx_sampler *mx_sampler_new(const mx_sampling *params, int vocab_size) {
    if (vocab_size <= 0) return NULL;
    mx_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *params;
    s->vocab = vocab_size;
    if (params->n_logit_bias > 0) {
        s->bias = malloc((size_t)params->n_logit_bias * sizeof *s->bias);
        if (!s->bias) goto fail;
        memcpy(s->bias, params->logit_bias, (size_t)params->n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    s->idx = malloc((size_t)vocab_size * sizeof *s->idx);
    s->prob = malloc((size_t)vocab_size * sizeof *s->prob);
    s->count = calloc((size_t)vocab_size, sizeof *s->count);
    s->raw = malloc((size_t)vocab_size * sizeof *s->raw);
    s->mark = calloc((size_t)vocab_size, 1);
    if (!s->idx || !s->prob || !s->count || !s->raw || !s->mark) goto fail;
    uint64_t x = params->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    return s;
fail:
    mx_sampler_free(s);
    return NULL;
}

void mx_sampler_free(mx_sampler *s) {
    if (!s) return;
    free(s->bias); free(s->idx); free(s->prob); free(s->count); free(s->raw); free(s->mark);
    free(s);
}

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *l = ctx;
    float x = l[*(const int32_t *)a], y = l[*(const int32_t *)b];
    if (x > y) return -1;
    if (x < y) return 1;
    return *(const int32_t *)a - *(const int32_t *)b;   /* lower id first on ties */
}

/* a ranks before b: larger value, or equal value and lower id (NaN ranks with nothing). */
static inline bool ranks_before(const float *l, int32_t a, int32_t b) {
    float x = l[a], y = l[b];
    return x > y || (x == y && a < b);
}

/* Partial selection: move the k largest (by logits, ties lower id first) to the front of
 * idx[0..n), sorted. The set is exactly the first k of the full order, as the topk op gives. */
static void top_sorted(int32_t *idx, int n, int k, const float *logits) {
    if (k > n) k = n;
    if (k <= 0) return;
    int lo = 0, hi = n - 1;
    while (lo < hi && k < n) {
        int32_t pv = idx[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (i <= hi && ranks_before(logits, idx[i], pv)) i++;
            while (j >= lo && ranks_before(logits, pv, idx[j])) j--;
            if (i <= j) { int32_t t = idx[i]; idx[i] = idx[j]; idx[j] = t; i++; j--; }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
    qsort_r(idx, (size_t)k, sizeof *idx, cmp_desc, (void *)logits);
}

/* The seeded draw over n candidates: s->prob[0..n) holds their (modified) logits in candidate
 * order, s->idx[0..n) their ids, mx the largest. Temperature, min-p, top-p, one uniform draw. */
static int32_t draw(mx_sampler *s, int n, float mx) {
    const mx_sampling *p = &s->p;
    double sum = 0;
    for (int i = 0; i < n; i++) { double e = exp((double)(s->prob[i] - mx) / p->temperature); s->prob[i] = (float)e; sum += e; }
    for (int i = 0; i < n; i++) s->prob[i] = (float)(s->prob[i] / sum);
    if (p->min_p > 0 && p->min_p <= 1.0f) {   /* sorted: prob[0] is the max */
        float thr = p->min_p * s->prob[0];
        int m = 1;
        while (m < n && s->prob[m] >= thr) m++;
        n = m;
    }
    if (p->top_p > 0 && p->top_p < 1.0f) {
        double c = 0; int m = 0;
        double tot = 0; for (int i = 0; i < n; i++) tot += s->prob[i];
        while (m < n) { c += s->prob[m] / tot; m++; if (c >= p->top_p) break; }
        n = m;
    }
    double tot = 0;
    for (int i = 0; i < n; i++) tot += s->prob[i];
    double r = uniform01(s->rng) * tot, c = 0;
    int32_t chosen = s->idx[n - 1];
    for (int i = 0; i < n; i++) { c += s->prob[i]; if (r < c) { chosen = s->idx[i]; break; } }
    return chosen;
}

int32_t mx_sampler_sample(mx_sampler *s, float *logits, const int32_t *history, int n_history,
                          float *chosen_logprob, mx_token_logprob *top) {
    const int V = s->vocab;
    const mx_sampling *p = &s->p;
    /* log-softmax normalizer of the unmodified distribution, if logprobs are wanted */
    float lse = 0;   /* the same bits as the topk op's lse on the CPU (mx_lse_host) */
    bool want_lp = chosen_logprob || (top && p->n_logprobs > 0);
    if (want_lp) {
        memcpy(s->raw, logits, (size_t)V * sizeof *logits);
        lse = mx_lse_host(logits, V);
        if (top && p->n_logprobs > 0) {
            int k = p->n_logprobs < V ? p->n_logprobs : V;
            for (int i = 0; i < V; i++) s->idx[i] = i;
            top_sorted(s->idx, V, k, logits);
            for (int i = 0; i < k; i++) { top[i].id = s->idx[i]; top[i].logprob = logits[s->idx[i]] - lse; }
        }
    }
    /* logit bias */
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t id = p->logit_bias[i].id;
        if (id >= 0 && id < V) logits[id] += p->logit_bias[i].bias;
    }
    /* penalties over the window */
    bool rep = repeat_on(p);
    bool pf = p->presence_penalty != 0 || p->frequency_penalty != 0;
    if ((rep || pf) && n_history > 0) {
        int start = 0;
        if (p->repeat_last_n >= 0 && n_history > p->repeat_last_n) start = n_history - p->repeat_last_n;
        for (int i = start; i < n_history; i++)
            if (history[i] >= 0 && history[i] < V && s->count[history[i]] < UINT16_MAX) s->count[history[i]]++;
        for (int i = start; i < n_history; i++) {
            int32_t id = history[i];
            if (id < 0 || id >= V || !s->count[id]) continue;
            if (rep) logits[id] = logits[id] > 0 ? logits[id] / p->repeat_penalty : logits[id] * p->repeat_penalty;
            if (pf) logits[id] -= p->frequency_penalty * (float)s->count[id] + p->presence_penalty;
            s->count[id] = 0;   /* apply once per distinct id; also resets for next call */
        }
    }
    int32_t chosen;
    if (p->temperature <= 0.0f) {
        chosen = 0;
        for (int i = 1; i < V; i++) if (logits[i] > logits[chosen]) chosen = i;
    } else {
        int n = V;
        for (int i = 0; i < V; i++) s->idx[i] = i;
        int k = (p->top_k > 0 && p->top_k < V) ? p->top_k : V;
        /* sort candidates (only the top k when top-k is on; else all, needed for top-p) */
        bool need_sort = k < V || (p->top_p > 0 && p->top_p < 1.0f) || p->min_p > 0;
        if (need_sort) top_sorted(s->idx, V, k, logits);
        n = k;
        float mx = logits[s->idx[0]];
        if (!need_sort) for (int i = 1; i < n; i++) if (logits[s->idx[i]] > mx) mx = logits[s->idx[i]];
        for (int i = 0; i < n; i++) s->prob[i] = logits[s->idx[i]];
        chosen = draw(s, n, mx);
    }
    if (chosen_logprob) {
        *chosen_logprob = s->raw[chosen] - lse;
    }
    return chosen;
}

/* The bias and penalties of the full path applied to one logit x of token id, with the same
 * float operations in the same order (s->count holds the window's counts). */
static float modify(const mx_sampler *s, int32_t id, float x, bool rep, bool pf) {
    const mx_sampling *p = &s->p;
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].id == id) x += p->logit_bias[i].bias;
    if ((rep || pf) && s->count[id]) {
        if (rep) x = x > 0 ? x / p->repeat_penalty : x * p->repeat_penalty;
        if (pf) x -= p->frequency_penalty * (float)s->count[id] + p->presence_penalty;
    }
    return x;
}

int32_t mx_sampler_sample_topk(mx_sampler *s, const float *vals, const int32_t *ids, int k, float lse,
                               const int32_t *history, int n_history, float *chosen_logprob,
                               mx_token_logprob *top, bool *need_full) {
    const int V = s->vocab;
    const mx_sampling *p = &s->p;
    *need_full = true;
    if (k > MX_TOPK_MAX) k = MX_TOPK_MAX;       /* a prefix of a sorted list is the smaller top-k */
    if (k < 1 || lse != lse) return -1;         /* NaN somewhere in the row */
    for (int i = 0; i < k; i++) {               /* the op's contract (a padded tail only if V < k) */
        if (ids[i] < 0) { if (V > k) return -1; continue; }
        if (ids[i] >= V || vals[i] != vals[i]) return -1;
        if (i > 0 && ids[i - 1] >= 0 && !(vals[i - 1] > vals[i] || (vals[i - 1] == vals[i] && ids[i - 1] < ids[i]))) return -1;
    }
    if (V <= k) {   /* the candidates are the whole row: rebuild it and take the full path */
        float row[MX_TOPK_MAX];
        bool seen[MX_TOPK_MAX] = {0};
        int n = 0;
        for (int i = 0; i < k; i++) {
            if (ids[i] < 0) continue;
            if (seen[ids[i]]) return -1;
            seen[ids[i]] = true; row[ids[i]] = vals[i]; n++;
        }
        if (n != V) return -1;
        *need_full = false;
        return mx_sampler_sample(s, row, history, n_history, chosen_logprob, top);
    }
    /* V > k from here on: every non-candidate logit is <= vals[k - 1] */
    const bool greedy = p->temperature <= 0.0f;
    const int n_top = top && p->n_logprobs > 0 ? p->n_logprobs : 0;
    if (n_top > k) return -1;
    if (!greedy && (p->top_k <= 0 || p->top_k > k)) return -1;
    const int tk = greedy ? 1 : p->top_k;       /* candidates that must be the exact leaders */
    bool bias = false;
    for (int i = 0; i < p->n_logit_bias; i++) if (p->logit_bias[i].id >= 0 && p->logit_bias[i].id < V) bias = true;
    bool rep = repeat_on(p);
    bool pf = p->presence_penalty != 0 || p->frequency_penalty != 0;
    bool pen = (rep || pf) && n_history > 0;
    float mv[MX_TOPK_MAX];                      /* modified logits of the candidates */
    int ord[MX_TOPK_MAX];                       /* candidate positions in modified order */
    for (int i = 0; i < k; i++) { mv[i] = vals[i]; ord[i] = i; }
    if (bias || pen) {
        int start = 0;
        if (pen) {
            if (p->repeat_last_n >= 0 && n_history > p->repeat_last_n) start = n_history - p->repeat_last_n;
            for (int i = start; i < n_history; i++)
                if (history[i] >= 0 && history[i] < V && s->count[history[i]] < UINT16_MAX) s->count[history[i]]++;
        }
        bool rp = pen && rep, fp = pen && pf;
        for (int i = 0; i < k; i++) { mv[i] = modify(s, ids[i], vals[i], rp, fp); s->mark[ids[i]] = 1; }
        /* upper bound of every non-candidate's modified logit (the chain is monotone in x) */
        float ub = vals[k - 1];
        for (int i = 0; i < p->n_logit_bias; i++) {
            int32_t id = p->logit_bias[i].id;
            if (id < 0 || id >= V || s->mark[id]) continue;
            float u = modify(s, id, vals[k - 1], rp, fp);
            if (u > ub || u != u) ub = u;
        }
        if (pen)
            for (int i = start; i < n_history; i++) {
                int32_t id = history[i];
                if (id < 0 || id >= V || s->mark[id]) continue;
                float u = modify(s, id, vals[k - 1], rp, fp);
                if (u > ub || u != u) ub = u;
            }
        if (pen) for (int i = start; i < n_history; i++) if (history[i] >= 0 && history[i] < V) s->count[history[i]] = 0;
        for (int i = 0; i < k; i++) s->mark[ids[i]] = 0;
        for (int i = 0; i < k; i++) if (mv[i] != mv[i]) return -1;
        /* insertion sort of the candidates by modified value, lower id first on ties */
        for (int i = 1; i < k; i++) {
            int c = ord[i], j = i;
            while (j > 0 && (mv[ord[j - 1]] < mv[c] || (mv[ord[j - 1]] == mv[c] && ids[ord[j - 1]] > ids[c]))) { ord[j] = ord[j - 1]; j--; }
            ord[j] = c;
        }
        /* the tk leaders must beat everything outside the candidates strictly */
        if (!(mv[ord[tk - 1]] > ub)) return -1;
    }
    *need_full = false;
    int32_t chosen;
    float chosen_raw;
    if (greedy) {
        chosen = ids[ord[0]];
        chosen_raw = vals[ord[0]];
    } else {
        for (int i = 0; i < tk; i++) { s->prob[i] = mv[ord[i]]; s->idx[i] = ids[ord[i]]; }
        chosen = draw(s, tk, mv[ord[0]]);
        chosen_raw = vals[ord[0]];
        for (int i = 0; i < tk; i++) if (ids[ord[i]] == chosen) { chosen_raw = vals[ord[i]]; break; }
    }
    for (int i = 0; i < n_top; i++) { top[i].id = ids[i]; top[i].logprob = vals[i] - lse; }
    if (chosen_logprob) *chosen_logprob = chosen_raw - lse;
    return chosen;
}
