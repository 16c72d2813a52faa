/* backend/cpu/topk.c: the topk op (mx_backend_i.topk) for the CPU backend and its host reference
 * (mx_topk_host, mx_lse_host): each logit row reduced to its k largest entries (sorted, ties
 * lower id first) and its log-sum-exp, so a sampler can work on a few candidates instead of the
 * full row. One pass with a running threshold per row (AVX-512 compares 16 values at a time; only
 * values above the current k-th enter the sorted candidate list), rows in parallel on the pool.
 * It is not a sampler: no temperature, penalties or draws here. */
#include "cpu_internal.h"

#include <float.h>
#include <math.h>

/* lse = max + log(sum exp(x - max)): float max over the non-NaN entries, exp in float (AVX-512:
 * 16 lanes, index i in lane i % 16, so the bits depend on the row only), sums in double. Terms
 * below e^-88 relative to the max are dropped (they cannot move a sum >= 1). Any NaN -> NaN. */
float mx_lse_host(const float *row, int n) {
    if (n <= 0) return -INFINITY;
    float mx = -FLT_MAX;
    bool nan = false;
#ifdef __AVX512F__
    {
        __m512 vm = _mm512_set1_ps(-FLT_MAX);
        __mmask16 un = 0;
        for (int j = 0; j < n; j += 16) {
            __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
            __m512 x = _mm512_maskz_loadu_ps(m, row + j);
            un |= _mm512_mask_cmp_ps_mask(m, x, x, _CMP_UNORD_Q);
            vm = _mm512_mask_max_ps(vm, m, x, vm);   /* max(x, vm): vm where x is NaN */
        }
        mx = _mm512_reduce_max_ps(vm);
        nan = un != 0;
    }
#else
    for (int i = 0; i < n; i++) { float x = row[i]; if (x > mx) mx = x; else if (x != x) nan = true; }
#endif
    if (nan) return NAN;
    if (mx == INFINITY) return INFINITY;
    double sum = 0;
    int i = 0;
#ifdef __AVX512F__
    __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
    const __m512 vmx = _mm512_set1_ps(mx), lo = _mm512_set1_ps(-88.0f);
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + i), vmx);
        __mmask16 keep = m & _mm512_cmp_ps_mask(d, lo, _CMP_GE_OQ);
        __m512 e = _mm512_maskz_mov_ps(keep, mx_exp512(d));
        acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        acc1 = _mm512_add_pd(acc1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    double l[16];
    _mm512_storeu_pd(l, acc0);
    _mm512_storeu_pd(l + 8, acc1);
    for (int j = 0; j < 16; j++) sum += l[j];
#else
    for (; i < n; i++) {
        float d = row[i] - mx;
        if (d >= -88.0f) sum += (double)expf(d);
    }
#endif
    return (float)((double)mx + log(sum));
}

/* Insert (x, id) into the sorted list v/ix of *cnt (<= k) entries; id is larger than every id
 * already there, so it goes after the equal values. */
static inline void cand_insert(float *v, int32_t *ix, int *cnt, int k, float x, int32_t id) {
    int p = *cnt < k ? *cnt : k - 1;
    while (p > 0 && v[p - 1] < x) {
        if (p < k) { v[p] = v[p - 1]; ix[p] = ix[p - 1]; }
        p--;
    }
    v[p] = x; ix[p] = id;
    if (*cnt < k) (*cnt)++;
}

void mx_topk_host(const float *row, int vocab, int k, float *vals, int32_t *ids, float *lse) {
    if (lse) *lse = mx_lse_host(row, vocab);
    if (k <= 0) return;
    int cnt = 0, i = 0;
    /* fill the list with the first k non-NaN values */
    for (; i < vocab && cnt < k; i++) {
        float x = row[i];
        if (x != x) continue;
        cand_insert(vals, ids, &cnt, k, x, i);
    }
    if (cnt == k) {
#ifdef __AVX512F__
        for (; i + 16 <= vocab; i += 16) {
            __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(row + i), _mm512_set1_ps(vals[k - 1]), _CMP_GT_OQ);
            while (m) {
                int b = __builtin_ctz(m);
                m &= (__mmask16)(m - 1);
                float x = row[i + b];
                if (x > vals[k - 1]) cand_insert(vals, ids, &cnt, k, x, i + b);
            }
        }
#endif
        for (; i < vocab; i++) {
            float x = row[i];
            if (x > vals[k - 1]) cand_insert(vals, ids, &cnt, k, x, i);
        }
    }
    for (; cnt < k; cnt++) { vals[cnt] = -INFINITY; ids[cnt] = -1; }
}

typedef struct topk_job {
    const float *logits;
    int vocab, k;
    float *vals, *lse;
    int32_t *ids;
} topk_job;

static void topk_fn(void *arg, int64_t b, int64_t e, int tid) {
    topk_job *j = arg;
    for (int64_t r = b; r < e; r++)
        mx_topk_host(j->logits + r * j->vocab, j->vocab, j->k, j->vals + r * j->k, j->ids + r * j->k, j->lse + r);
}

void mx_cpu_topk(void *ctx, const float *logits, int n_rows, int vocab, int k, float *vals_host,
                 int32_t *ids_host, float *lse_host) {
    mx_cpu_ctx *c = ctx;
    if (n_rows <= 0) return;
    topk_job j = {logits, vocab, k, vals_host, lse_host, ids_host};
    mx_pool_run(c->pool, n_rows, 1, topk_fn, &j);
}
