/* tokenizer/tk_model.c: the tokenization models of tokenizer.json: BPE (byte-level and
 * SentencePiece-style with byte_fallback / fuse_unk / ignore_merges; priority-queue merging by
 * rank, merge lookup by pair of ids), WordPiece (greedy longest match) and Unigram (Viterbi).
 * Also the shared word cache for BPE. It does not parse JSON (tokenizer.c does). */
#include "tokenizer/tk_internal.h"

#include <stdlib.h>

/* ---- word cache: sharded, direct-mapped, one mutex per shard ---- */
#define CACHE_SHARDS 64
#define CACHE_SLOTS 256
#define CACHE_KEY 46
#define CACHE_IDS 14
typedef struct { uint64_t h; uint8_t klen, nids; char key[CACHE_KEY]; int32_t ids[CACHE_IDS]; } tk_centry;
struct tk_cache {
    struct { pthread_mutex_t mu; tk_centry e[CACHE_SLOTS]; } shard[CACHE_SHARDS];
};

mx_status tk_cache_new(tk_cache **out) {
    tk_cache *c = calloc(1, sizeof *c);
    if (!c) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory for the word cache");
    for (int i = 0; i < CACHE_SHARDS; i++) pthread_mutex_init(&c->shard[i].mu, NULL);
    *out = c;
    return MX_OK;
}

void tk_cache_free(tk_cache *c) {
    if (!c) return;
    for (int i = 0; i < CACHE_SHARDS; i++) pthread_mutex_destroy(&c->shard[i].mu);
    free(c);
}

static bool cache_get(tk_cache *c, uint64_t h, const char *w, size_t n, tk_ids *out) {
    unsigned s = (unsigned)(h & (CACHE_SHARDS - 1)), i = (unsigned)(h >> 6) & (CACHE_SLOTS - 1);
    bool hit = false;
    pthread_mutex_lock(&c->shard[s].mu);
    tk_centry *e = &c->shard[s].e[i];
    if (e->h == h && e->klen == n && e->nids && !memcmp(e->key, w, n) && tk_ids_reserve(out, e->nids)) {
        memcpy(out->v + out->n, e->ids, e->nids * sizeof(int32_t));
        out->n += e->nids;
        hit = true;
    }
    pthread_mutex_unlock(&c->shard[s].mu);
    return hit;
}

static void cache_put(tk_cache *c, uint64_t h, const char *w, size_t n, const int32_t *ids, size_t nids) {
    if (n > CACHE_KEY || nids > CACHE_IDS || nids == 0) return;
    unsigned s = (unsigned)(h & (CACHE_SHARDS - 1)), i = (unsigned)(h >> 6) & (CACHE_SLOTS - 1);
    pthread_mutex_lock(&c->shard[s].mu);
    tk_centry *e = &c->shard[s].e[i];
    e->h = h; e->klen = (uint8_t)n; e->nids = (uint8_t)nids;
    memcpy(e->key, w, n);
    memcpy(e->ids, ids, nids * sizeof(int32_t));
    pthread_mutex_unlock(&c->shard[s].mu);
}

/* ---- scratch ---- */
static bool sym_reserve(tk_ctx *c, size_t n) {
    if (c->sym_cap >= n) return true;
    size_t nc = c->sym_cap ? c->sym_cap : 64;
    while (nc < n) nc *= 2;
    int32_t *a = realloc(c->sym_id, nc * sizeof *a); if (!a) return false; c->sym_id = a;
    a = realloc(c->sym_prev, nc * sizeof *a); if (!a) return false; c->sym_prev = a;
    a = realloc(c->sym_next, nc * sizeof *a); if (!a) return false; c->sym_next = a;
    uint32_t *l = realloc(c->sym_len, nc * sizeof *l); if (!l) return false; c->sym_len = l;
    c->sym_cap = nc;
    return true;
}

typedef struct { int32_t rank, pos, newid; } tk_hent;

static inline bool hless(const tk_hent *a, const tk_hent *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void hpush(tk_hent *h, size_t *n, tk_hent v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&v, &h[p])) break;
        h[i] = h[p]; i = p;
    }
    h[i] = v;
}

static tk_hent hpop(tk_hent *h, size_t *n) {
    tk_hent top = h[0], last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, s = i;
        const tk_hent *best = &last;
        if (l < m && hless(&h[l], best)) { s = l; best = &h[l]; }
        if (r < m && hless(&h[r], best)) { s = r; }
        if (s == i) break;
        h[i] = h[s]; i = s;
    }
    if (m) h[i] = last;
    return top;
}

/* ---- BPE ---- */
static mx_status bpe_piece(const mx_tokenizer *t, tk_ctx *c, const char *w, size_t n, tk_ids *out) {
    if (n == 0) return MX_OK;
    if (t->ignore_merges) {
        int32_t id = tk_smap_get(&t->vocab, w, n);
        if (id >= 0) return tk_ids_push(out, id) ? MX_OK : mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
    }
    uint64_t h = 0;
    bool cacheable = t->cache && n <= CACHE_KEY;
    if (cacheable) {
        h = tk_hash(w, n);
        if (cache_get(t->cache, h, w, n, out)) return MX_OK;
    }
    if (!sym_reserve(c, n + 1)) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
    int32_t *sid = c->sym_id, *prev = c->sym_prev, *next = c->sym_next;
    uint32_t *slen = c->sym_len;
    int ns = 0;
    int32_t unk = -1; uint32_t unk_len = 0;   /* pending unknown (fuse_unk) */
    char tmp[256];
    for (size_t i = 0; i < n;) {
        size_t cl = tk_utf8_len((unsigned char)w[i]);
        if (cl > n - i) cl = n - i;
        const char *s = w + i; size_t sl = cl;
        bool first = i == 0, last = i + cl == n;
        if ((t->cont_prefix_len && !first) || (t->eow_suffix_len && last)) {
            size_t k = 0;
            if (t->cont_prefix_len && !first && t->cont_prefix_len < 200) { memcpy(tmp, t->cont_prefix, t->cont_prefix_len); k = t->cont_prefix_len; }
            memcpy(tmp + k, s, cl); k += cl;
            if (t->eow_suffix_len && last && k + t->eow_suffix_len <= sizeof tmp) { memcpy(tmp + k, t->eow_suffix, t->eow_suffix_len); k += t->eow_suffix_len; }
            s = tmp; sl = k;
        }
        int32_t id = tk_smap_get(&t->vocab, s, sl);
        if (id >= 0) {
            if (unk >= 0) { sid[ns] = unk; slen[ns] = unk_len; ns++; unk = -1; }
            sid[ns] = id; slen[ns] = (uint32_t)cl; ns++;
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (size_t b = 0; b < sl; b++) if (t->byte_tok[(unsigned char)s[b]] < 0) { all = false; break; }
                if (all) {
                    if (!sym_reserve(c, (size_t)ns + sl + n + 1)) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
                    sid = c->sym_id; prev = c->sym_prev; next = c->sym_next; slen = c->sym_len;
                    for (size_t b = 0; b < sl; b++) { sid[ns] = t->byte_tok[(unsigned char)s[b]]; slen[ns] = 1; ns++; }
                    done = true;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (unk >= 0 && t->fuse_unk) unk_len += (uint32_t)cl;
                else {
                    if (unk >= 0) { sid[ns] = unk; slen[ns] = unk_len; ns++; }
                    unk = t->unk_id; unk_len = (uint32_t)cl;
                }
            }
        }
        i += cl;
    }
    if (unk >= 0) { sid[ns] = unk; slen[ns] = unk_len; ns++; }
    for (int i = 0; i < ns; i++) { prev[i] = i - 1; next[i] = i + 1 < ns ? i + 1 : -1; }

    /* merges */
    if (ns > 1 && t->merges.n) {
        size_t need = (size_t)ns * 2 + 8;
        if (c->heap_cap < need) {
            void *hp = realloc(c->heap, need * sizeof(tk_hent));
            if (!hp) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
            c->heap = hp; c->heap_cap = need;
        }
        tk_hent *hp = c->heap;
        size_t hn = 0;
        for (int i = 0; i + 1 < ns; i++) {
            int32_t r, nid;
            if (tk_pmap_get(&t->merges, sid[i], sid[i + 1], &r, &nid)) hpush(hp, &hn, (tk_hent){ r, i, nid });
        }
        while (hn) {
            tk_hent top = hpop(hp, &hn);
            int p = top.pos;
            if (slen[p] == 0 || next[p] < 0) continue;
            int q = next[p];
            int32_t r, nid;
            if (!tk_pmap_get(&t->merges, sid[p], sid[q], &r, &nid) || nid != top.newid) continue;
            sid[p] = nid; slen[p] += slen[q]; slen[q] = 0;
            next[p] = next[q];
            if (next[q] >= 0) prev[next[q]] = p;
            if (hn + 2 > c->heap_cap) {   /* cannot happen: each merge removes one symbol, adds <= 2 */
                void *nh = realloc(c->heap, (c->heap_cap * 2 + 4) * sizeof(tk_hent));
                if (!nh) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
                c->heap = nh; c->heap_cap = c->heap_cap * 2 + 4; hp = nh;
            }
            if (prev[p] >= 0 && tk_pmap_get(&t->merges, sid[prev[p]], sid[p], &r, &nid))
                hpush(hp, &hn, (tk_hent){ r, prev[p], nid });
            if (next[p] >= 0 && tk_pmap_get(&t->merges, sid[p], sid[next[p]], &r, &nid))
                hpush(hp, &hn, (tk_hent){ r, p, nid });
        }
    }
    size_t start = out->n;
    for (int i = ns ? 0 : -1; i >= 0; i = next[i])
        if (!tk_ids_push(out, sid[i])) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
    if (cacheable) cache_put(t->cache, h, w, n, out->v + start, out->n - start);
    return MX_OK;
}

/* SentencePiece-style BPE often runs on whole texts (no pre-tokenizer). A boundary just before a
 * U+2581 that follows a character c can never be crossed by a merge when no vocab token contains
 * "c\u2581" (checked at load: t->ms_bad lists such c), so the word is cut there: the result is
 * identical and the pieces hit the word cache. */
static bool ms_bad(const mx_tokenizer *t, uint32_t cp) {
    for (int i = 0; i < t->n_ms_bad; i++) if (t->ms_bad[i] == cp) return true;
    return false;
}

static mx_status bpe_word(const mx_tokenizer *t, tk_ctx *c, const char *w, size_t n, tk_ids *out) {
    if (!t->ms_split || n < 8) return bpe_piece(t, c, w, n, out);
    size_t start = 0, i = 0, prev_at = 0, prev_len = 0;
    uint32_t prev = 0x2581;
    /* a character outside the vocab becomes <0xXX> tokens, which end in '>' */
    bool gt_bad = t->byte_fallback && ms_bad(t, '>');
    while (i < n) {
        uint32_t cp;
        size_t k = tk_utf8_get(w + i, &cp);
        if (cp == 0x2581 && i > start && prev != 0x2581 && !ms_bad(t, prev) &&
            !(gt_bad && tk_smap_get(&t->vocab, w + prev_at, prev_len) < 0)) {
            mx_status st = bpe_piece(t, c, w + start, i - start, out);
            if (st) return st;
            start = i;
        }
        prev = cp; prev_at = i; prev_len = k;
        i += k;
    }
    return bpe_piece(t, c, w + start, n - start, out);
}

/* ---- WordPiece ---- */
static mx_status wordpiece_word(const mx_tokenizer *t, tk_ctx *c, const char *w, size_t n, tk_ids *out) {
    size_t chars = 0;
    for (size_t i = 0; i < n; i += tk_utf8_len((unsigned char)w[i])) chars++;
    size_t start_n = out->n;
    if (chars <= (size_t)t->max_input_chars) {
        size_t start = 0;
        bool bad = false;
        while (start < n) {
            /* no vocab entry is longer than max_piece_len bytes: skip hopeless substrings */
            size_t lim = start + t->max_piece_len - (start > 0 && t->max_piece_len >= t->cont_prefix_len ? t->cont_prefix_len : 0);
            size_t end = lim < n ? lim : n;
            while (end > start && end < n && ((unsigned char)w[end] & 0xC0) == 0x80) end--;
            int32_t cur = -1;
            while (start < end) {
                int32_t id;
                if (start > 0) {
                    c->t1.n = 0;
                    if (!tk_buf_add(&c->t1, t->cont_prefix, t->cont_prefix_len) || !tk_buf_add(&c->t1, w + start, end - start))
                        return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
                    id = tk_smap_get(&t->vocab, c->t1.d, c->t1.n);
                } else {
                    id = tk_smap_get(&t->vocab, w + start, end - start);
                }
                if (id >= 0) { cur = id; break; }
                do end--; while (end > start && ((unsigned char)w[end] & 0xC0) == 0x80);
            }
            if (cur < 0) { bad = true; break; }
            if (!tk_ids_push(out, cur)) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
            start = end;
        }
        if (!bad) return MX_OK;
    }
    out->n = start_n;
    if (t->unk_id < 0) return mx_errorf(MX_ERR_INVALID_ARG, "tokenizer: WordPiece needs its unk_token for this text but the vocab lacks it");
    return tk_ids_push(out, t->unk_id) ? MX_OK : mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
}

/* ---- Unigram (Viterbi over the vocab pieces) ---- */
static mx_status unigram_word(const mx_tokenizer *t, tk_ctx *c, const char *w, size_t n, tk_ids *out) {
    if (n == 0) return MX_OK;
    if (c->best_cap < n + 1) {
        size_t nc = n + 1;
        double *b = realloc(c->best, nc * sizeof *b); if (!b) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory"); c->best = b;
        int32_t *f = realloc(c->best_from, nc * sizeof *f); if (!f) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory"); c->best_from = f;
        int32_t *d = realloc(c->best_id, nc * sizeof *d); if (!d) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory"); c->best_id = d;
        c->best_cap = nc;
    }
    double *best = c->best; int32_t *from = c->best_from, *bid = c->best_id;
    for (size_t i = 0; i <= n; i++) { from[i] = -1; best[i] = 0; bid[i] = -1; }
    for (size_t s = 0; s < n;) {
        size_t mb = tk_utf8_len((unsigned char)w[s]);
        if (mb > n - s) mb = n - s;
        if (s > 0 && from[s] < 0) { s += mb; continue; }   /* unreachable (cannot happen: unk covers) */
        double base = best[s];
        bool single = false;
        for (size_t e = s + 1; e <= n && e - s <= t->max_piece_len; e++) {
            if (e < n && ((unsigned char)w[e] & 0xC0) == 0x80) continue;
            int32_t id = tk_smap_get(&t->vocab, w + s, e - s);
            if (id < 0) continue;
            double sc = base + t->scores[id];
            if (from[e] < 0 || sc > best[e]) { best[e] = sc; from[e] = (int32_t)s; bid[e] = id; }
            if (e - s == mb) single = true;
        }
        if (!single) {
            if (t->unk_id < 0) return mx_errorf(MX_ERR_INVALID_ARG, "tokenizer: Unigram model has no unk_id for an unknown character");
            double sc = base + t->unk_score;
            size_t e = s + mb;
            if (from[e] < 0 || sc > best[e]) { best[e] = sc; from[e] = (int32_t)s; bid[e] = t->unk_id; }
        }
        s += mb;
    }
    /* backtrack into (start,end,id) triples, fusing consecutive unknowns */
    size_t cnt = 0;
    for (size_t e = n; e > 0; e = (size_t)from[e]) { if (from[e] < 0) return mx_errorf(MX_ERR_INTERNAL, "tokenizer: Unigram lattice broken"); cnt++; }
    if (!sym_reserve(c, cnt + 1)) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
    size_t k = cnt;
    for (size_t e = n; e > 0; e = (size_t)from[e]) { k--; c->sym_id[k] = bid[e]; c->sym_prev[k] = from[e]; c->sym_next[k] = (int32_t)e; }
    for (size_t i = 0; i < cnt;) {
        size_t s = (size_t)c->sym_prev[i], e = (size_t)c->sym_next[i];
        int32_t id = c->sym_id[i];
        size_t j = i + 1;
        if (id == t->unk_id) {
            while (j < cnt && c->sym_id[j] == t->unk_id) { e = (size_t)c->sym_next[j]; j++; }
            id = tk_smap_get(&t->vocab, w + s, e - s);
            if (id < 0) {
                bool done = false;
                if (t->byte_fallback) {
                    bool all = true;
                    for (size_t b = s; b < e; b++) if (t->byte_tok[(unsigned char)w[b]] < 0) { all = false; break; }
                    if (all) {
                        for (size_t b = s; b < e; b++)
                            if (!tk_ids_push(out, t->byte_tok[(unsigned char)w[b]])) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
                        done = true;
                    }
                }
                if (done) { i = j; continue; }
                id = t->unk_id;
            }
        }
        if (!tk_ids_push(out, id)) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
        i = j;
    }
    return MX_OK;
}

mx_status tk_model_encode(const mx_tokenizer *t, tk_ctx *c, const char *w, size_t n, tk_ids *out) {
    switch (t->model) {
    case MODEL_BPE: return bpe_word(t, c, w, n, out);
    case MODEL_WORDPIECE: return wordpiece_word(t, c, w, n, out);
    default: return unigram_word(t, c, w, n, out);
    }
}
