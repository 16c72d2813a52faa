/* cpu_attention.c: causal attention over the paged KV cache for the CPU backend (GQA, sliding
 * window, softcap, attention sinks). One work unit is (token, kv head): the q heads of a GQA
 * group share the key and value loads. Scores, softmax and the weighted value sum are f32
 * (AVX-512 where available, with a vector exp accurate to a few ulp); the scalar path is the
 * portable fallback. It does not write the cache (cpu_backend.c does) and knows nothing of block
 * allocation. */
#include "cpu_internal.h"

#include <math.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

typedef struct {
    mx_cpu_ctx *c;
    const float *q; float *out;
    const float *kc, *vc;
    const mx_attn_params *p;
    const mx_attn_meta *m;
    int max_ctx;
    int split;          /* key ranges per (token, kv head); > 1 writes partial results */
    float *part, *pml;  /* split > 1: [units][grp*hd] partial outputs, [units][grp][2] max/sum */
} attn_job;

#define GB 8 /* q heads handled together */

#ifdef __AVX512F__
/* r[i] = sum of the lanes of v[i], i < 16 */
static inline __m512 reduce16(const __m512 *v) {
    __m512 t[8], u[4], w[2];
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 2; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

/* One (token, kv head) unit: ng q heads starting at q (stride hd), keys at koff[0..cnt) (-1 = missing). */
static inline __attribute__((always_inline)) void attn_heads(const attn_job *j, const float *q, float *out, int ng,
                                                             const int64_t *koff, int cnt,
                                                             float *sc /* [GB][cnt rounded to 16] */,
                                                             float *ml /* NULL or [ng][2]: max, sum of exp */) {
    const mx_attn_params *p = j->p;
    const int hd = p->head_dim;
    const int cs = (cnt + 15) & ~15;
#ifdef __AVX512F__
    const int hd16 = hd & ~15;
    const __mmask16 tm = (__mmask16)((1u << (hd - hd16)) - 1);
    /* scores */
    for (int i0 = 0; i0 < cnt; i0 += 16) {
        __m512 part[GB][16];
        int nb = cnt - i0 < 16 ? cnt - i0 : 16;
        for (int b = 0; b < 16; b++) {
            int64_t off = b < nb ? koff[i0 + b] : -1;
            if (off < 0) { _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) part[g][b] = _mm512_setzero_ps(); continue; }
            const float *kp = j->kc + off;
            __m512 a[GB];
            _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) a[g] = _mm512_setzero_ps();
            for (int d = 0; d < hd16; d += 16) {
                __m512 kv = _mm512_loadu_ps(kp + d);
                _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) a[g] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (int64_t)g * hd + d), kv, a[g]);
            }
            if (tm) {
                __m512 kv = _mm512_maskz_loadu_ps(tm, kp + hd16);
                _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) a[g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tm, q + (int64_t)g * hd + hd16), kv, a[g]);
            }
            _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) part[g][b] = a[g];
        }
        _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++)
            _mm512_store_ps(sc + (size_t)g * cs + i0, _mm512_mul_ps(reduce16(part[g]), _mm512_set1_ps(p->scale)));
    }
    /* softcap, masking, softmax */
    _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) {
        float *s = sc + (size_t)g * cs;
        if (p->softcap > 0) for (int i = 0; i < cnt; i++) s[i] = p->softcap * tanhf(s[i] / p->softcap);
        for (int i = 0; i < cnt; i++) if (koff[i] < 0) s[i] = -INFINITY;
        for (int i = cnt; i < cs; i++) s[i] = -INFINITY;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int i = 0; i < cs; i += 16) mx = _mm512_max_ps(mx, _mm512_load_ps(s + i));
        float m = _mm512_reduce_max_ps(mx);
        if (m == -INFINITY) m = 0;
        __m512 vm = _mm512_set1_ps(m), sum = _mm512_setzero_ps();
        for (int i = 0; i < cs; i += 16) {
            __m512 x = _mm512_load_ps(s + i);
            __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
            __m512 e = _mm512_maskz_mov_ps(ok, mx_exp512(_mm512_sub_ps(x, vm)));
            _mm512_store_ps(s + i, e);
            sum = _mm512_add_ps(sum, e);
        }
        float tot = _mm512_reduce_add_ps(sum);
        if (ml) { ml[2 * g] = m; ml[2 * g + 1] = tot; }
        __m512 inv = _mm512_set1_ps(tot > 0 ? 1.0f / tot : 0.0f);
        for (int i = 0; i < cs; i += 16) _mm512_store_ps(s + i, _mm512_mul_ps(_mm512_load_ps(s + i), inv));
    }
    /* weighted sum of values */
    for (int d = 0; d < hd; d += 16) {
        __mmask16 m = d + 16 <= hd ? (__mmask16)0xffff : tm;
        __m512 a[GB];
        _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) a[g] = _mm512_setzero_ps();
        for (int i = 0; i < cnt; i++) {
            if (koff[i] < 0) continue;
            __m512 vv = _mm512_maskz_loadu_ps(m, j->vc + koff[i] + d);
            _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) a[g] = _mm512_fmadd_ps(_mm512_set1_ps(sc[(size_t)g * cs + i]), vv, a[g]);
        }
        _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) _mm512_mask_storeu_ps(out + (int64_t)g * hd + d, m, a[g]);
    }
#else
    _Pragma("GCC unroll 8") for (int g = 0; g < ng; g++) {
        float *s = sc + (size_t)g * cs;
        float mx = -INFINITY;
        for (int i = 0; i < cnt; i++) {
            if (koff[i] < 0) { s[i] = -INFINITY; continue; }
            const float *kp = j->kc + koff[i], *qg = q + (int64_t)g * hd;
            float d = 0;
            for (int e = 0; e < hd; e++) d += qg[e] * kp[e];
            d *= p->scale;
            if (p->softcap > 0) d = p->softcap * tanhf(d / p->softcap);
            s[i] = d;
            if (d > mx) mx = d;
        }
        float sum = 0;
        for (int i = 0; i < cnt; i++) { float e = s[i] == -INFINITY ? 0.0f : expf(s[i] - mx); s[i] = e; sum += e; }
        float inv = sum > 0 ? 1.0f / sum : 0.0f;
        if (ml) { ml[2 * g] = mx == -INFINITY ? 0.0f : mx; ml[2 * g + 1] = sum; }
        float *o = out + (int64_t)g * hd;
        for (int e = 0; e < hd; e++) o[e] = 0;
        for (int i = 0; i < cnt; i++) {
            if (koff[i] < 0) continue;
            const float *vp = j->vc + koff[i];
            float w = s[i] * inv;
            for (int e = 0; e < hd; e++) o[e] += w * vp[e];
        }
    }
#endif
}

/* ng as a compile-time constant so the per-head accumulators stay in registers */
static void attn_heads_n(const attn_job *j, const float *q, float *out, int ng, const int64_t *koff, int cnt, float *sc,
                         float *ml) {
    switch (ng) {
    case 1: attn_heads(j, q, out, 1, koff, cnt, sc, ml); break;
    case 2: attn_heads(j, q, out, 2, koff, cnt, sc, ml); break;
    case 3: attn_heads(j, q, out, 3, koff, cnt, sc, ml); break;
    case 4: attn_heads(j, q, out, 4, koff, cnt, sc, ml); break;
    case 5: attn_heads(j, q, out, 5, koff, cnt, sc, ml); break;
    case 6: attn_heads(j, q, out, 6, koff, cnt, sc, ml); break;
    case 7: attn_heads(j, q, out, 7, koff, cnt, sc, ml); break;
    default: attn_heads(j, q, out, 8, koff, cnt, sc, ml); break;
    }
}

static void attn_fn(void *arg, int64_t b, int64_t e, int tid) {
    attn_job *j = arg;
    const mx_attn_params *p = j->p;
    const mx_attn_meta *m = j->m;
    const int hd = p->head_dim, nkv = p->n_kv_heads, grp = p->n_heads / p->n_kv_heads;
    const int64_t kvstride = (int64_t)nkv * hd;
    const int bs = j->c->kv.block_size;
    const size_t cs = ((size_t)j->max_ctx + 15) & ~(size_t)15;
    char *scr = mx_cpu_tscratch(j->c, tid, cs * sizeof(int64_t) + (size_t)GB * cs * sizeof(float) + 64);
    if (!scr) { MX_LOGE("cpu attention: out of memory"); return; }
    int64_t *koff = (int64_t *)scr;
    float *sc = (float *)(scr + cs * sizeof(int64_t));
    for (int64_t u = b; u < e; u++) {
        const int S = j->split, sp = (int)(u % S);
        const int64_t tu = u / S;
        /* last tokens first: in a prefill they attend to the most keys, so dynamic chunking balances */
        int t = m->n_tokens - 1 - (int)(tu / nkv), kh = (int)(tu % nkv);
        int seq = m->seq[t], pos = m->pos[t];
        const float *q = j->q + (int64_t)t * p->n_heads * hd + (int64_t)kh * grp * hd;
        float *out = S > 1 ? j->part + u * grp * hd : j->out + (int64_t)t * p->n_heads * hd + (int64_t)kh * grp * hd;
        float *ml = S > 1 ? j->pml + u * grp * 2 : NULL;
        int lo = 0;
        if (p->sliding_window > 0 && pos - p->sliding_window + 1 > 0) lo = pos - p->sliding_window + 1;
        int cnt = pos - lo + 1;
        if (seq < 0 || seq >= m->n_seqs || pos < 0 || cnt > j->max_ctx) cnt = 0;
        if (S > 1) { /* this unit's share of the key range */
            int cl = (cnt + S - 1) / S, s0 = sp * cl;
            int s1 = s0 + cl < cnt ? s0 + cl : cnt;
            lo += s0;
            cnt = s1 > s0 ? s1 - s0 : 0;
        }
        if (cnt <= 0) {
            memset(out, 0, (size_t)grp * hd * sizeof(float));
            if (ml) for (int g = 0; g < grp; g++) { ml[2 * g] = 0; ml[2 * g + 1] = 0; }
            continue;
        }
        const int32_t *bt = m->block_tables + (int64_t)seq * m->max_blocks;
        for (int i = 0; i < cnt; i++) {
            int ps = lo + i, bi = ps / bs;
            int32_t blk = bi < m->max_blocks ? bt[bi] : -1;
            koff[i] = (blk < 0 || blk >= j->c->kv.n_blocks) ? -1 : ((int64_t)blk * bs + ps % bs) * kvstride + (int64_t)kh * hd;
        }
        for (int g0 = 0; g0 < grp; g0 += GB) {
            int ng = grp - g0 < GB ? grp - g0 : GB;
            float mlg[2 * GB];
            float *mlp = ml ? ml + 2 * g0 : p->sinks ? mlg : NULL;
            attn_heads_n(j, q + (int64_t)g0 * hd, out + (int64_t)g0 * hd, ng, koff, cnt, sc, mlp);
            if (p->sinks && !ml) /* the sink joins the denominator: scale by sum / (sum + e^(sink - max)) */
                for (int g = 0; g < ng; g++) {
                    float tot = mlg[2 * g + 1], f = tot > 0 ? tot / (tot + expf(p->sinks[kh * grp + g0 + g] - mlg[2 * g])) : 0.0f;
                    float *o = out + (int64_t)(g0 + g) * hd;
                    for (int d = 0; d < hd; d++) o[d] *= f;
                }
        }
    }
}

/* Combine the split key ranges of each (token, kv head): softmax-weighted by sum * e^(max - M). */
static void attn_merge(const attn_job *j) {
    const mx_attn_params *p = j->p;
    const int hd = p->head_dim, nkv = p->n_kv_heads, grp = p->n_heads / p->n_kv_heads, S = j->split;
    const int64_t units = (int64_t)j->m->n_tokens * nkv;
    for (int64_t tu = 0; tu < units; tu++) {
        int t = j->m->n_tokens - 1 - (int)(tu / nkv), kh = (int)(tu % nkv);
        float *out = j->out + (int64_t)t * p->n_heads * hd + (int64_t)kh * grp * hd;
        for (int g = 0; g < grp; g++) {
            float M = -INFINITY, W = 0;
            for (int s = 0; s < S; s++) {
                const float *ml = j->pml + ((tu * S + s) * grp + g) * 2;
                if (ml[1] > 0 && ml[0] > M) M = ml[0];
            }
            float wts[64];
            for (int s = 0; s < S; s++) {
                const float *ml = j->pml + ((tu * S + s) * grp + g) * 2;
                wts[s] = ml[1] > 0 ? ml[1] * expf(ml[0] - M) : 0.0f;
                W += wts[s];
            }
            float *o = out + (int64_t)g * hd;
            for (int d = 0; d < hd; d++) o[d] = 0;
            if (!(W > 0)) continue;
            float Wd = W;   /* denominator: with the sink's e^(sink - M) when there is one */
            if (p->sinks) Wd += expf(p->sinks[kh * grp + g] - M);
            for (int s = 0; s < S; s++) {
                if (wts[s] == 0) continue;
                const float *src = j->part + (tu * S + s) * grp * hd + (int64_t)g * hd;
                float w = wts[s] / Wd;
                for (int d = 0; d < hd; d++) o[d] += w * src[d];
            }
        }
    }
}

void mx_cpu_attention(void *ctx, int layer, const float *q, const float *k, const float *v, float *out,
                      const mx_attn_params *p, const mx_attn_meta *m) {
    mx_cpu_ctx *c = ctx;
    int n = m->n_tokens;
    if (!c->k_cache || layer < 0 || layer >= c->kv.n_layers || p->n_kv_heads != c->kv.n_kv_heads ||
        p->head_dim != c->kv.head_dim || p->n_kv_heads <= 0 || p->n_heads % p->n_kv_heads) {
        MX_LOGE("cpu attention: layer %d / heads %d/%d / head_dim %d do not match the KV cache", layer,
                p->n_heads, p->n_kv_heads, p->head_dim);
        memset(out, 0, (size_t)n * p->n_heads * p->head_dim * sizeof(float));
        return;
    }
    int64_t kvstride = (int64_t)p->n_kv_heads * p->head_dim;
    int64_t nslots = (int64_t)c->kv.n_blocks * c->kv.block_size;
    float *kc = c->k_cache[layer], *vc = c->v_cache[layer];
    for (int t = 0; t < n; t++) {
        int32_t s = m->slot[t];
        if (s < 0 || s >= nslots) { MX_LOGE("cpu attention: slot %d out of range", s); continue; }
        memcpy(kc + s * kvstride, k + t * kvstride, (size_t)kvstride * sizeof(float));
        memcpy(vc + s * kvstride, v + t * kvstride, (size_t)kvstride * sizeof(float));
    }
    int max_ctx = 1;
    for (int t = 0; t < n; t++) {
        int cnt = m->pos[t] + 1;
        if (p->sliding_window > 0 && cnt > p->sliding_window) cnt = p->sliding_window;
        if (cnt > max_ctx) max_ctx = cnt;
    }
    int64_t cap = (int64_t)m->max_blocks * c->kv.block_size;
    if (max_ctx > cap) max_ctx = (int)(cap > 0 ? cap : 1);
    attn_job j = {c, q, out, kc, vc, p, m, max_ctx, 1, NULL, NULL};
    int64_t units = (int64_t)n * p->n_kv_heads;
    /* few (token, kv head) units over a long context (decode, MQA): split the key range too */
    if (c->n_threads > 1 && units < 2 * c->n_threads && max_ctx >= 256) {
        int S = (int)((4 * c->n_threads + units - 1) / units);
        if (S > max_ctx / 64) S = max_ctx / 64;
        if (S > 64) S = 64;
        int grp = p->n_heads / p->n_kv_heads;
        size_t need = (size_t)(units * S) * (size_t)grp * ((size_t)p->head_dim + 2) * sizeof(float);
        float *buf = S > 1 ? mx_cpu_shared(c, need) : NULL;
        if (buf) {
            j.split = S;
            j.part = buf;
            j.pml = buf + (size_t)(units * S) * grp * p->head_dim;
        }
    }
    mx_pool_run(c->pool, units * j.split, 1, attn_fn, &j);
    if (j.split > 1) attn_merge(&j);
}
