/* tokenizer/tokenizer.c: loading tokenizer.json[.xz] + tokenizer_config.json into an immutable
 * mx_tokenizer, added-token matching (leftmost-longest, lstrip/rstrip/single_word/normalized),
 * the encode pipeline (added tokens -> normalizer -> pre-tokenizer -> model -> post-processor),
 * decode, lookups and the streaming detokenizer. The components themselves live in tk_norm.c,
 * tk_pretok.c, tk_model.c, tk_decode.c. */
#include "tokenizer/tk_internal.h"

#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define NOMEM mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory")
#define MAX_ID (1 << 24)

/* ---- file reading ---- */
static mx_status read_xz(const char *path, char **out, size_t *out_len) {
    size_t clen;
    char *comp = mx_read_file(path, &clen);
    if (!comp) return mx_errorf(MX_ERR_IO, "%s: cannot read", path);
    lzma_stream s = LZMA_STREAM_INIT;
    mx_status st = MX_OK;
    char *buf = NULL;
    size_t cap = clen * 8 + 4096, n = 0;
    if (lzma_stream_decoder(&s, UINT64_MAX, 0) != LZMA_OK) { st = mx_errorf(MX_ERR_INTERNAL, "%s: cannot start the xz decoder", path); goto fail; }
    buf = malloc(cap + 1);
    if (!buf) { st = NOMEM; goto fail; }
    s.next_in = (const uint8_t *)comp; s.avail_in = clen;
    for (;;) {
        if (n == cap) {
            if (cap > ((size_t)1 << 31)) { st = mx_errorf(MX_ERR_FORMAT, "%s: decompressed size over 2 GiB", path); goto fail; }
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) { st = NOMEM; goto fail; }
            buf = nb; cap *= 2;
        }
        s.next_out = (uint8_t *)buf + n; s.avail_out = cap - n;
        lzma_ret r = lzma_code(&s, LZMA_FINISH);
        n = cap - s.avail_out;
        if (r == LZMA_STREAM_END) break;
        if (r != LZMA_OK && r != LZMA_BUF_ERROR) { st = mx_errorf(MX_ERR_FORMAT, "%s: corrupt xz data (code %d)", path, (int)r); goto fail; }
        if (r == LZMA_BUF_ERROR && s.avail_out) { st = mx_errorf(MX_ERR_FORMAT, "%s: truncated xz data", path); goto fail; }
    }
    lzma_end(&s);
    free(comp);
    buf[n] = 0;
    *out = buf; *out_len = n;
    return MX_OK;
fail:
    lzma_end(&s);
    free(comp); free(buf);
    return st;
}

static mx_status read_any(const char *path, char **out, size_t *len) {
    size_t pl = strlen(path);
    if (pl > 3 && !strcmp(path + pl - 3, ".xz")) return read_xz(path, out, len);
    *out = mx_read_file(path, len);
    if (!*out) return mx_errorf(MX_ERR_IO, "%s: cannot read", path);
    return MX_OK;
}

/* ---- trie of added tokens ---- */
static bool trie_add(tk_trie *tr, const char *s, size_t n, int32_t added_idx) {
    int32_t node = -1;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t child;
        if (node < 0) child = tr->root[b];
        else {
            child = tr->nodes[node].child;
            while (child >= 0 && tr->nodes[child].byte != b) child = tr->nodes[child].sibling;
        }
        if (child < 0) {
            if (tr->n == tr->cap) {
                int nc = tr->cap ? tr->cap * 2 : 64;
                tk_trie_node *nn = realloc(tr->nodes, (size_t)nc * sizeof *nn);
                if (!nn) return false;
                tr->nodes = nn; tr->cap = nc;
            }
            child = tr->n++;
            tr->nodes[child] = (tk_trie_node){ .child = -1, .sibling = -1, .added = -1, .byte = b };
            if (node < 0) tr->root[b] = child;
            else { tr->nodes[child].sibling = tr->nodes[node].child; tr->nodes[node].child = child; }
        }
        node = child;
    }
    if (node >= 0) tr->nodes[node].added = added_idx;
    return true;
}

static bool ends_with_word(const char *s, size_t n) {
    if (!n) return false;
    size_t q = n - 1;
    while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
    uint32_t cp; tk_utf8_get(s + q, &cp);
    return tk_is_word(cp);
}

static bool starts_with_word(const char *s, size_t n) {
    if (!n) return false;
    uint32_t cp; tk_utf8_get(s, &cp);
    return tk_is_word(cp);
}

/* Split s on added tokens of trie tr (HF AddedVocabulary::find_matches). */
static bool split_added(const mx_tokenizer *t, const tk_trie *tr, const char *s, size_t n, bool skip_special, tk_plist *out) {
    size_t start_off = 0, i = 0;
    if (tr->n) {
        while (i < n) {
            int32_t node = tr->root[(unsigned char)s[i]];
            if (node < 0) { i++; continue; }
            int32_t best = -1; size_t blen = 0;
            for (size_t j = i;;) {
                if (tr->nodes[node].added >= 0) { best = tr->nodes[node].added; blen = j + 1 - i; }
                if (++j >= n) break;
                int32_t ch = tr->nodes[node].child;
                while (ch >= 0 && tr->nodes[ch].byte != (uint8_t)s[j]) ch = tr->nodes[ch].sibling;
                if (ch < 0) break;
                node = ch;
            }
            if (best < 0) { i++; continue; }
            const tk_added *a = &t->added[best];
            size_t start = i, stop = i + blen;
            if (skip_special && a->special) { i = stop; continue; }
            if (a->single_word) {
                bool sp = start == 0 || !ends_with_word(s, start);
                bool ep = stop == n || !starts_with_word(s + stop, n - stop);
                if (!sp || !ep) { i = stop; continue; }
            }
            if (a->lstrip) {
                size_t ns = start;
                while (ns > 0) {
                    size_t q = ns - 1;
                    while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
                    uint32_t cp; tk_utf8_get(s + q, &cp);
                    if (!tk_is_whitespace(cp)) break;
                    ns = q;
                }
                start = ns > start_off ? ns : start_off;
            }
            if (a->rstrip) {
                while (stop < n) {
                    uint32_t cp; size_t k = tk_utf8_get(s + stop, &cp);
                    if (!tk_is_whitespace(cp)) break;
                    stop += k;
                }
            }
            if (start_off < start && !tk_plist_push(out, (uint32_t)start_off, (uint32_t)(start - start_off), -1, 0)) return false;
            if (!tk_plist_push(out, (uint32_t)start, (uint32_t)(stop - start), a->id, 0)) return false;
            start_off = i = stop;
        }
    }
    if (start_off < n && !tk_plist_push(out, (uint32_t)start_off, (uint32_t)(n - start_off), -1, 0)) return false;
    return true;
}

/* ---- loading ---- */
static mx_status getint(const tj *v, const char *what, int32_t *out) {
    if (!v || v->type != TJ_NUM || v->u.num < 0 || v->u.num >= MAX_ID || v->u.num != (double)(int32_t)v->u.num)
        return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: %s must be a token id (integer in [0, %d))", what, MAX_ID);
    *out = (int32_t)v->u.num;
    return MX_OK;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = 0; }
    return d;
}

static mx_status load_vocab(mx_tokenizer *t, const tj *model, const tj *added) {
    const tj *vocab = tj_get(model, "vocab");
    bool unigram = t->model == MODEL_UNIGRAM;
    if (!vocab || vocab->type != (unigram ? TJ_ARR : TJ_OBJ))
        return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: model.vocab must be %s", unigram ? "a list of [piece, score]" : "an object of token -> id");
    size_t total = 0;
    int32_t max_id = -1;
    for (uint32_t i = 0; i < vocab->n; i++) {
        const tj *k;
        if (unigram) {
            const tj *e = &vocab->u.a[i];
            if (e->type != TJ_ARR || e->n != 2 || e->u.a[0].type != TJ_STR || e->u.a[1].type != TJ_NUM)
                return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: Unigram vocab entry %u must be [piece, score]", i);
            k = &e->u.a[0];
            max_id = (int32_t)i;
        } else {
            k = &vocab->u.a[2 * i];
            int32_t id = 0;
            mx_status st = getint(&vocab->u.a[2 * i + 1], "vocab value", &id);
            if (st) return st;
            if (id > max_id) max_id = id;
        }
        total += k->n + 1;
    }
    if (unigram && vocab->n >= MAX_ID) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: vocab too large");
    if (added && added->type == TJ_ARR) {
        for (uint32_t i = 0; i < added->n; i++) {
            int32_t id = 0;
            mx_status st = getint(tj_get(&added->u.a[i], "id"), "added_tokens[].id", &id);
            if (st) return st;
            if (id > max_id) max_id = id;
        }
    }
    t->n_tok = max_id + 1;
    t->strings = malloc(total + 1);
    t->tok_off = malloc(((size_t)t->n_tok + 1) * sizeof *t->tok_off);
    t->tok_len = malloc(((size_t)t->n_tok + 1) * sizeof *t->tok_len);
    t->added_by_id = malloc(((size_t)t->n_tok + 1) * sizeof *t->added_by_id);
    if (unigram) t->scores = malloc(((size_t)t->n_tok + 1) * sizeof *t->scores);
    if (!t->strings || !t->tok_off || !t->tok_len || !t->added_by_id || (unigram && !t->scores)) return NOMEM;
    for (int32_t i = 0; i < t->n_tok; i++) { t->tok_len[i] = UINT32_MAX; t->tok_off[i] = 0; t->added_by_id[i] = -1; }
    if (!tk_smap_init(&t->vocab, vocab->n + 16)) return NOMEM;
    size_t off = 0;
    double min_score = 0;
    for (uint32_t i = 0; i < vocab->n; i++) {
        const tj *k; int32_t id = 0;
        if (unigram) {
            k = &vocab->u.a[i].u.a[0]; id = (int32_t)i;
            double sc = vocab->u.a[i].u.a[1].u.num;
            t->scores[i] = sc;
            if (i == 0 || sc < min_score) min_score = sc;
        } else {
            k = &vocab->u.a[2 * i]; id = (int32_t)vocab->u.a[2 * i + 1].u.num;
        }
        memcpy(t->strings + off, k->u.s, k->n + 1);
        t->tok_off[id] = (uint32_t)off; t->tok_len[id] = k->n;
        if (!tk_smap_put(&t->vocab, t->strings + off, k->n, id)) return NOMEM;
        off += k->n + 1;
    }
    t->strings_len = off;
    t->unk_score = min_score - 10.0;
    return MX_OK;
}

static mx_status load_model(mx_tokenizer *t, const tj *model, const tj *added) {
    if (!model || model->type != TJ_OBJ) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: missing model object");
    const char *type = tj_str(tj_get(model, "type"));
    if (!type) {
        const tj *v = tj_get(model, "vocab");
        if (tj_get(model, "merges")) type = "BPE";
        else if (v && v->type == TJ_ARR) type = "Unigram";
        else if (tj_get(model, "max_input_chars_per_word")) type = "WordPiece";
        else return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: model has no type");
    }
    if (!strcmp(type, "BPE")) t->model = MODEL_BPE;
    else if (!strcmp(type, "WordPiece")) t->model = MODEL_WORDPIECE;
    else if (!strcmp(type, "Unigram")) t->model = MODEL_UNIGRAM;
    else return mx_errorf(MX_ERR_UNSUPPORTED, "tokenizer.json: unknown model type '%s'", type);
    mx_status st = load_vocab(t, model, added);
    if (st) return st;
    t->unk_id = -1;
    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    if (t->model == MODEL_BPE) {
        const tj *d = tj_get(model, "dropout");
        if (d && d->type == TJ_NUM && d->u.num > 0 && d->u.num < 1)
            MX_LOGW("tokenizer.json: BPE dropout %g ignored (inference encodes deterministically)", d->u.num);
        t->byte_fallback = tj_bool(tj_get(model, "byte_fallback"), false);
        t->fuse_unk = tj_bool(tj_get(model, "fuse_unk"), false);
        t->ignore_merges = tj_bool(tj_get(model, "ignore_merges"), false);
        const char *u = tj_str(tj_get(model, "unk_token"));
        if (u) t->unk_id = tk_smap_get(&t->vocab, u, strlen(u));
        const tj *p = tj_get(model, "continuing_subword_prefix");
        if (p && p->type == TJ_STR && p->n) { if (!(t->cont_prefix = dupn(p->u.s, p->n))) return NOMEM; t->cont_prefix_len = p->n; }
        p = tj_get(model, "end_of_word_suffix");
        if (p && p->type == TJ_STR && p->n) { if (!(t->eow_suffix = dupn(p->u.s, p->n))) return NOMEM; t->eow_suffix_len = p->n; }
        const tj *m = tj_get(model, "merges");
        if (m && m->type != TJ_ARR) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: model.merges must be a list");
        if (!tk_pmap_init(&t->merges, m ? m->n : 0)) return NOMEM;
        char tmp[1024];
        for (uint32_t i = 0; m && i < m->n; i++) {
            const tj *e = &m->u.a[i];
            const char *a, *b; size_t al, bl;
            if (e->type == TJ_STR) {
                const char *sp = memchr(e->u.s, ' ', e->n);
                if (!sp || memchr(sp + 1, ' ', e->n - (size_t)(sp + 1 - e->u.s)))
                    return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: merges[%u] '%.60s' is not two tokens separated by one space", i, e->u.s);
                a = e->u.s; al = (size_t)(sp - a); b = sp + 1; bl = e->n - al - 1;
            } else if (e->type == TJ_ARR && e->n == 2 && e->u.a[0].type == TJ_STR && e->u.a[1].type == TJ_STR) {
                a = e->u.a[0].u.s; al = e->u.a[0].n; b = e->u.a[1].u.s; bl = e->u.a[1].n;
            } else return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: merges[%u] must be \"a b\" or [a, b]", i);
            int32_t ia = tk_smap_get(&t->vocab, a, al), ib = tk_smap_get(&t->vocab, b, bl);
            if (ia < 0 || ib < 0)
                return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: merges[%u]: token '%.*s' is not in the vocab", i,
                                 (int)(ia < 0 ? (al > 60 ? 60 : al) : (bl > 60 ? 60 : bl)), ia < 0 ? a : b);
            if (t->cont_prefix_len && bl >= t->cont_prefix_len && !memcmp(b, t->cont_prefix, t->cont_prefix_len)) { b += t->cont_prefix_len; bl -= t->cont_prefix_len; }
            if (al + bl > sizeof tmp) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: merges[%u] too long", i);
            memcpy(tmp, a, al); memcpy(tmp + al, b, bl);
            int32_t nid = tk_smap_get(&t->vocab, tmp, al + bl);
            if (nid < 0) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: merges[%u]: merged token '%.*s' is not in the vocab", i, (int)((al + bl) > 60 ? 60 : al + bl), tmp);
            if (!tk_pmap_put(&t->merges, ia, ib, (int32_t)i, nid)) return NOMEM;
        }
    } else if (t->model == MODEL_WORDPIECE) {
        const char *u = tj_str(tj_get(model, "unk_token"));
        if (!u) u = "[UNK]";
        t->unk_id = tk_smap_get(&t->vocab, u, strlen(u));
        const tj *p = tj_get(model, "continuing_subword_prefix");
        const char *ps = p && p->type == TJ_STR ? p->u.s : "##";
        size_t pl = p && p->type == TJ_STR ? p->n : 2;
        if (!(t->cont_prefix = dupn(ps, pl))) return NOMEM;
        t->cont_prefix_len = pl;
        const tj *mx = tj_get(model, "max_input_chars_per_word");
        t->max_input_chars = mx && mx->type == TJ_NUM && mx->u.num >= 0 && mx->u.num < 1e9 ? (int)mx->u.num : 100;
    } else {
        const tj *u = tj_get(model, "unk_id");
        if (u && u->type == TJ_NUM) {
            if (u->u.num < 0 || u->u.num >= t->n_tok || u->u.num != (double)(int32_t)u->u.num)
                return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: Unigram unk_id out of range");
            t->unk_id = (int32_t)u->u.num;
        }
        t->byte_fallback = tj_bool(tj_get(model, "byte_fallback"), false);
        t->fuse_unk = true;
    }
    for (int32_t i = 0; i < t->n_tok; i++)   /* longest vocab entry: bounds the substring searches */
        if (t->tok_len[i] != UINT32_MAX && t->tok_len[i] > t->max_piece_len) t->max_piece_len = t->tok_len[i];
    if (t->model == MODEL_BPE && !t->ignore_merges && !t->cont_prefix_len && !t->eow_suffix_len &&
        tk_smap_get(&t->vocab, "\xE2\x96\x81", 3) >= 0) {
        /* characters c such that some token contains "c\u2581" (c itself not U+2581) */
        t->ms_split = true;
        for (int32_t id = 0; id < t->n_tok && t->ms_split; id++) {
            if (t->tok_len[id] == UINT32_MAX) continue;
            const char *s = t->strings + t->tok_off[id];
            size_t n = t->tok_len[id];
            uint32_t prev = 0x2581;
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t k = tk_utf8_get(s + i, &cp);
                if (cp == 0x2581 && prev != 0x2581) {
                    bool known = false;
                    for (int q = 0; q < t->n_ms_bad; q++) if (t->ms_bad[q] == prev) known = true;
                    if (!known) {
                        if (t->n_ms_bad == 64) { t->ms_split = false; break; }
                        t->ms_bad[t->n_ms_bad++] = prev;
                    }
                }
                prev = cp;
                i += k;
            }
        }
    }
    if (t->byte_fallback) {
        for (int b = 0; b < 256; b++) {
            char nm[8];
            snprintf(nm, sizeof nm, "<0x%02X>", b);
            t->byte_tok[b] = tk_smap_get(&t->vocab, nm, 6);
        }
    }
    return MX_OK;
}

static mx_status load_added(mx_tokenizer *t, const tj *added) {
    if (!added || added->type == TJ_NULL) return MX_OK;
    if (added->type != TJ_ARR) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: added_tokens must be a list");
    t->added = calloc(added->n + 1, sizeof *t->added);
    if (!t->added || !tk_smap_init(&t->added_map, added->n + 1)) return NOMEM;
    for (int b = 0; b < 256; b++) { t->trie_raw.root[b] = -1; t->trie_norm.root[b] = -1; }
    tk_ctx c = {0};
    mx_status st = MX_OK;
    for (uint32_t i = 0; i < added->n; i++) {
        const tj *e = &added->u.a[i];
        const tj *ct = tj_get(e, "content");
        if (!ct || ct->type != TJ_STR) { st = mx_errorf(MX_ERR_FORMAT, "tokenizer.json: added_tokens[%u] has no content string", i); goto done; }
        tk_added *a = &t->added[t->n_added];
        if ((st = getint(tj_get(e, "id"), "added_tokens[].id", &a->id))) goto done;
        if (!(a->content = dupn(ct->u.s, ct->n))) { st = NOMEM; goto done; }
        a->len = ct->n;
        t->n_added++;
        a->special = tj_bool(tj_get(e, "special"), false);
        a->lstrip = tj_bool(tj_get(e, "lstrip"), false);
        a->rstrip = tj_bool(tj_get(e, "rstrip"), false);
        a->single_word = tj_bool(tj_get(e, "single_word"), false);
        a->normalized = tj_bool(tj_get(e, "normalized"), !a->special);
        t->added_by_id[a->id] = t->n_added - 1;
        if (!tk_smap_put(&t->added_map, a->content, a->len, a->id)) { st = NOMEM; goto done; }
        if (!a->len) continue;
        if (a->normalized) {
            if ((st = tk_normalize(t, &c, a->content, a->len))) goto done;
            if (!(a->ncontent = dupn(c.nb.d ? c.nb.d : "", c.nb.n))) { st = NOMEM; goto done; }
            a->nlen = c.nb.n;
            if (a->nlen && !trie_add(&t->trie_norm, a->ncontent, a->nlen, t->n_added - 1)) { st = NOMEM; goto done; }
        } else if (!trie_add(&t->trie_raw, a->content, a->len, t->n_added - 1)) { st = NOMEM; goto done; }
    }
done:
    tk_ctx_free(&c);
    return st;
}

static mx_status compose_post(tk_post *cur, const int32_t *items, int n) {
    /* new = items with TK_SEQ_A replaced by cur */
    int total = 0;
    for (int i = 0; i < n; i++) total += items[i] == TK_SEQ_A ? cur->n : 1;
    int32_t *v = malloc(((size_t)total + 1) * sizeof *v);
    if (!v) return NOMEM;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (items[i] == TK_SEQ_A) { memcpy(v + k, cur->items, (size_t)cur->n * sizeof *v); k += cur->n; }
        else v[k++] = items[i];
    }
    free(cur->items);
    cur->items = v; cur->n = total;
    return MX_OK;
}

static mx_status load_post(mx_tokenizer *t, const tj *j, tk_post *cur) {
    if (!j || j->type == TJ_NULL) return MX_OK;
    const char *type = tj_str(tj_get(j, "type"));
    if (!type) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: post_processor without a type");
    if (!strcmp(type, "Sequence")) {
        const tj *l = tj_get(j, "processors");
        if (!l || l->type != TJ_ARR) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: post_processor Sequence without a processors list");
        for (uint32_t i = 0; i < l->n; i++) {
            mx_status st = load_post(t, &l->u.a[i], cur);
            if (st) return st;
        }
        return MX_OK;
    }
    if (!strcmp(type, "ByteLevel")) return MX_OK;
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        const tj *cls = tj_get(j, "cls"), *sep = tj_get(j, "sep");
        int32_t it[3];
        if (!cls || cls->type != TJ_ARR || cls->n != 2 || !sep || sep->type != TJ_ARR || sep->n != 2)
            return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: %s needs cls and sep as [token, id]", type);
        mx_status st = getint(&cls->u.a[1], "post_processor cls id", &it[0]);
        if (!st) st = getint(&sep->u.a[1], "post_processor sep id", &it[2]);
        if (st) return st;
        it[1] = TK_SEQ_A;
        return compose_post(cur, it, 3);
    }
    if (!strcmp(type, "TemplateProcessing")) {
        const tj *single = tj_get(j, "single"), *sp = tj_get(j, "special_tokens");
        if (!single || single->type != TJ_ARR) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: TemplateProcessing needs a single template list");
        size_t cap = 0;
        for (uint32_t i = 0; i < single->n; i++) {   /* mirrors the filling loop below */
            const tj *stok = tj_get(&single->u.a[i], "SpecialToken");
            if (tj_get(&single->u.a[i], "Sequence") || !stok) { cap++; continue; }
            const char *name = tj_str(tj_get(stok, "id"));
            const tj *ids = name ? tj_get(tj_get(sp, name), "ids") : NULL;
            cap += ids && ids->type == TJ_ARR ? ids->n : 1;
        }
        int32_t *it = malloc((cap + 1) * sizeof *it);
        if (!it) return NOMEM;
        int k = 0;
        for (uint32_t i = 0; i < single->n; i++) {
            const tj *e = &single->u.a[i];
            const tj *stok = tj_get(e, "SpecialToken"), *seq = tj_get(e, "Sequence");
            if (seq) { it[k++] = TK_SEQ_A; continue; }
            const char *name = tj_str(tj_get(stok, "id"));
            if (!name) { free(it); return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: TemplateProcessing item %u is neither SpecialToken nor Sequence", i); }
            const tj *ids = tj_get(tj_get(sp, name), "ids");
            if (!ids || ids->type != TJ_ARR) { free(it); return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: TemplateProcessing: special token '%s' missing from special_tokens", name); }
            for (uint32_t q = 0; q < ids->n; q++) {
                mx_status st = getint(&ids->u.a[q], "TemplateProcessing special token id", &it[k]);
                if (st) { free(it); return st; }
                k++;
            }
        }
        mx_status st = compose_post(cur, it, k);
        free(it);
        return st;
    }
    return mx_errorf(MX_ERR_UNSUPPORTED, "tokenizer.json: unknown post_processor type '%s'", type);
}

static const char *config_token(const tj *cfg, const char *key) {
    const tj *v = tj_get(cfg, key);
    if (!v) return NULL;
    if (v->type == TJ_STR) return v->u.s;
    return tj_str(tj_get(v, "content"));
}

static mx_status load_config(mx_tokenizer *t, const char *cfg, size_t len) {
    tj_doc d;
    mx_status st = tj_parse(cfg, len, "tokenizer_config.json", &d);
    if (st) return st;
    if (d.root.type != TJ_OBJ) { tj_free(&d); return mx_errorf(MX_ERR_FORMAT, "tokenizer_config.json: not a JSON object"); }
    const char *b = config_token(&d.root, "bos_token"), *e = config_token(&d.root, "eos_token");
    if (b && !(t->bos_str = mx_strdup(b))) st = NOMEM;
    if (e && !(t->eos_str = mx_strdup(e))) st = NOMEM;
    t->add_bos = tj_bool(tj_get(&d.root, "add_bos_token"), false);
    t->add_eos = tj_bool(tj_get(&d.root, "add_eos_token"), false);
    tj_free(&d);
    if (st) return st;
    t->bos_id = t->bos_str ? mx_tokenizer_token_id(t, t->bos_str) : -1;
    t->eos_id = t->eos_str ? mx_tokenizer_token_id(t, t->eos_str) : -1;
    /* transformers honours add_bos_token/add_eos_token by rebuilding the post-processor; when
     * tokenizer.json's own template already puts them there, nothing is added twice */
    bool before = true;
    for (int i = 0; t->has_post && i < t->post.n; i++) {
        int32_t v = t->post.items[i];
        if (v == TK_SEQ_A) { before = false; continue; }
        if (before && v == t->bos_id) t->post_bos = true;
        if (!before && v == t->eos_id) t->post_eos = true;
    }
    return MX_OK;
}

mx_status mx_tokenizer_load_mem(const char *json, size_t len, const char *config_json, size_t config_len, mx_tokenizer **out) {
    *out = NULL;
    mx_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NOMEM;
    t->bos_id = t->eos_id = -1;
    tj_doc d;
    mx_status st = tj_parse(json, len, "tokenizer.json", &d);
    if (st) { free(t); return st; }
    const tj *root = &d.root;
    if (root->type != TJ_OBJ) { st = mx_errorf(MX_ERR_FORMAT, "tokenizer.json: not a JSON object"); goto fail; }
    const tj *trunc = tj_get(root, "truncation"), *pad = tj_get(root, "padding");
    if ((trunc && trunc->type != TJ_NULL) || (pad && pad->type != TJ_NULL))
        MX_LOGD("tokenizer.json: truncation/padding settings ignored");
    const tj *added = tj_get(root, "added_tokens");
    if ((st = load_model(t, tj_get(root, "model"), added))) goto fail;
    int cap = 0;
    if ((st = tk_norm_parse(tj_get(root, "normalizer"), &t->norm, &t->n_norm, &cap))) goto fail;
    cap = 0;
    if ((st = tk_pretok_parse(tj_get(root, "pre_tokenizer"), &t->pre, &t->n_pre, &cap))) goto fail;
    cap = 0;
    const tj *dec = tj_get(root, "decoder");
    t->has_decoder = dec && dec->type != TJ_NULL;
    if ((st = tk_dec_parse(dec, &t->dec, &t->n_dec, &cap))) goto fail;
    const tj *post = tj_get(root, "post_processor");
    if (post && post->type != TJ_NULL) {
        t->has_post = true;
        t->post.items = malloc(sizeof(int32_t));
        if (!t->post.items) { st = NOMEM; goto fail; }
        t->post.items[0] = TK_SEQ_A; t->post.n = 1;
        if ((st = load_post(t, post, &t->post))) goto fail;
    }
    if ((st = load_added(t, added))) goto fail;
    /* word cache for real vocabularies (tiny synthetic ones are cheaper without it) */
    if (t->model == MODEL_BPE && t->n_tok >= 1000 && (st = tk_cache_new(&t->cache))) goto fail;
    tj_free(&d);
    if (config_json && (st = load_config(t, config_json, config_len))) { mx_tokenizer_free(t); return st; }
    *out = t;
    return MX_OK;
fail:
    tj_free(&d);
    mx_tokenizer_free(t);
    return st;
}

mx_status mx_tokenizer_load_files(const char *json_path, const char *config_path, mx_tokenizer **out) {
    *out = NULL;
    char *js = NULL, *cfg = NULL;
    size_t jl = 0, cl = 0;
    mx_status st = read_any(json_path, &js, &jl);
    if (st) return st;
    if (config_path && !(cfg = mx_read_file(config_path, &cl))) { free(js); return mx_errorf(MX_ERR_IO, "%s: cannot read", config_path); }
    st = mx_tokenizer_load_mem(js, jl, cfg, cl, out);
    if (st && mx_last_error()[0] && strncmp(mx_last_error(), json_path, strlen(json_path)) &&
        strncmp(mx_last_error(), "tokenizer_config.json", 21)) {
        char msg[512];
        const char *e = mx_last_error();
        if (!strncmp(e, "tokenizer.json: ", 16)) e += 16;
        snprintf(msg, sizeof msg, "%s", e);
        mx_errorf(st, "%s: %s", json_path, msg);
    }
    free(js); free(cfg);
    return st;
}

static bool file_exists(const char *p) { struct stat sb; return stat(p, &sb) == 0 && S_ISREG(sb.st_mode); }

mx_status mx_tokenizer_load(const char *dir, mx_tokenizer **out) {
    *out = NULL;
    size_t dl = strlen(dir);
    char *jp = malloc(dl + 32), *cp = malloc(dl + 32);
    if (!jp || !cp) { free(jp); free(cp); return NOMEM; }
    snprintf(jp, dl + 32, "%s/tokenizer.json", dir);
    if (!file_exists(jp)) snprintf(jp, dl + 32, "%s/tokenizer.json.xz", dir);
    snprintf(cp, dl + 32, "%s/tokenizer_config.json", dir);
    mx_status st;
    if (!file_exists(jp)) st = mx_errorf(MX_ERR_IO, "%s: no tokenizer.json or tokenizer.json.xz", dir);
    else st = mx_tokenizer_load_files(jp, file_exists(cp) ? cp : NULL, out);
    free(jp); free(cp);
    return st;
}

void mx_tokenizer_free(mx_tokenizer *t) {
    if (!t) return;
    free(t->strings); free(t->tok_off); free(t->tok_len); free(t->added_by_id); free(t->scores);
    tk_smap_free(&t->vocab);
    tk_smap_free(&t->added_map);
    tk_pmap_free(&t->merges);
    free(t->cont_prefix); free(t->eow_suffix);
    for (int i = 0; i < t->n_norm; i++) tk_norm_free_one(&t->norm[i]);
    free(t->norm);
    for (int i = 0; i < t->n_pre; i++) tk_pretok_free_one(&t->pre[i]);
    free(t->pre);
    for (int i = 0; i < t->n_dec; i++) tk_dec_free_one(&t->dec[i]);
    free(t->dec);
    free(t->post.items);
    for (int i = 0; i < t->n_added; i++) { free(t->added[i].content); free(t->added[i].ncontent); }
    free(t->added);
    free(t->trie_raw.nodes); free(t->trie_norm.nodes);
    free(t->bos_str); free(t->eos_str);
    tk_cache_free(t->cache);
    free(t);
}

/* ---- encode ---- */
mx_status mx_tokenizer_encode(const mx_tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids, int *n_ids) {
    return mx_tokenizer_encode_ex(t, text, len, add_special ? MX_TOK_ADD_SPECIAL : 0, ids, n_ids);
}

mx_status mx_tokenizer_encode_ex(const mx_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids, int *n_ids) {
    *ids = NULL; *n_ids = 0;
    bool add_special = flags & MX_TOK_ADD_SPECIAL, split_special = flags & MX_TOK_SPLIT_SPECIAL;
    if (!text && len) return mx_errorf(MX_ERR_INVALID_ARG, "tokenizer: NULL text");
    if (len > INT32_MAX / 2) return mx_errorf(MX_ERR_INVALID_ARG, "tokenizer: text too long (%zu bytes)", len);
    if (!text) text = "";
    if (!tk_utf8_valid(text, len)) return mx_errorf(MX_ERR_INVALID_ARG, "tokenizer: text is not valid UTF-8");
    tk_ctx c = {0};
    tk_plist pa = {0}, pb = {0};
    tk_ids out = {0};
    mx_status st = MX_OK;
    if (!tk_ids_reserve(&out, len / 3 + 8)) { st = NOMEM; goto done; }
    if (!split_added(t, &t->trie_raw, text, len, split_special, &pa)) { st = NOMEM; goto done; }
    for (size_t i = 0; i < pa.n; i++) {
        tk_piece p = pa.p[i];
        if (p.id >= 0) { if (!tk_ids_push(&out, p.id)) { st = NOMEM; goto done; } continue; }
        const char *ns = text + p.off; size_t nn = p.len;
        if (t->n_norm) {
            if ((st = tk_normalize(t, &c, ns, nn))) goto done;
            ns = c.nb.d; nn = c.nb.n;
        }
        pb.n = 0;
        if (!split_added(t, &t->trie_norm, ns, nn, split_special, &pb)) { st = NOMEM; goto done; }
        for (size_t k = 0; k < pb.n; k++) {
            tk_piece q = pb.p[k];
            if (q.id >= 0) { if (!tk_ids_push(&out, q.id)) { st = NOMEM; goto done; } continue; }
            int w;
            if ((st = tk_pretokenize(t, &c, ns + q.off, q.len, p.off == 0 && q.off == 0, &w))) goto done;
            for (size_t m = 0; m < c.l[w].n; m++) {
                tk_piece x = c.l[w].p[m];
                if ((st = tk_model_encode(t, &c, c.b[w].d + x.off, x.len, &out))) goto done;
            }
        }
    }
    if (add_special) {
        if (t->has_post && !(t->post.n == 1 && t->post.items[0] == TK_SEQ_A)) {
            size_t na = 0;
            for (int i = 0; i < t->post.n; i++) na += t->post.items[i] == TK_SEQ_A;
            size_t extra = (size_t)t->post.n - na;
            if (na > 1 && out.n > SIZE_MAX / 4 / na) { st = NOMEM; goto done; }
            int32_t *v = malloc((out.n * na + extra + 1) * sizeof *v);
            if (!v) { st = NOMEM; goto done; }
            size_t k = 0;
            for (int i = 0; i < t->post.n; i++) {
                if (t->post.items[i] == TK_SEQ_A) { memcpy(v + k, out.v, out.n * sizeof *v); k += out.n; }
                else v[k++] = t->post.items[i];
            }
            free(out.v);
            out.v = v; out.n = k; out.cap = k + 1;
        }
        if (t->add_bos && t->bos_id >= 0 && !t->post_bos) {
            if (!tk_ids_push(&out, 0)) { st = NOMEM; goto done; }
            memmove(out.v + 1, out.v, (out.n - 1) * sizeof *out.v);
            out.v[0] = t->bos_id;
        }
        if (t->add_eos && t->eos_id >= 0 && !t->post_eos)
            if (!tk_ids_push(&out, t->eos_id)) { st = NOMEM; goto done; }
    }
    if (out.n > INT32_MAX) { st = mx_errorf(MX_ERR_RANGE, "tokenizer: too many tokens"); goto done; }
    if (!out.v && !(out.v = malloc(sizeof(int32_t)))) { st = NOMEM; goto done; }
    *ids = out.v; *n_ids = (int)out.n;
    out.v = NULL;
done:
    free(out.v);
    free(pa.p); free(pb.p);
    tk_ctx_free(&c);
    return st;
}

/* ---- decode ---- */
static bool id_token(const mx_tokenizer *t, int32_t id, bool skip_special, const char **s, size_t *n) {
    if (id < 0 || id >= t->n_tok) return false;
    int32_t a = t->added_by_id[id];
    if (a >= 0) {
        if (skip_special && t->added[a].special) return false;
        *s = t->added[a].content; *n = t->added[a].len;
        return true;
    }
    if (t->tok_len[id] == UINT32_MAX) return false;
    *s = t->strings + t->tok_off[id]; *n = t->tok_len[id];
    return true;
}

/* decode scratch: kept by streams so that steady-state pushes do not allocate */
typedef struct { tk_buf b; tk_plist l; tk_ctx c; } tk_dscratch;

static void dscratch_free(tk_dscratch *d) { free(d->b.d); free(d->l.p); tk_ctx_free(&d->c); }

static mx_status decode_buf(const mx_tokenizer *t, tk_dscratch *d, const int32_t *ids, size_t n, bool skip_special, tk_buf *out) {
    d->b.n = 0; d->l.n = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s; size_t sl;
        if (!id_token(t, ids[i], skip_special, &s, &sl)) continue;
        uint32_t off = (uint32_t)d->b.n;
        if (!tk_buf_add(&d->b, s, sl) || !tk_plist_push(&d->l, off, (uint32_t)sl, -1, 0)) return NOMEM;
    }
    return tk_decode_tokens(t, &d->c, &d->b, &d->l, out);
}

mx_status mx_tokenizer_decode(const mx_tokenizer *t, const int32_t *ids, int n, bool skip_special, char **text) {
    size_t len;
    return mx_tokenizer_decode_n(t, ids, n, skip_special, text, &len);
}

mx_status mx_tokenizer_decode_n(const mx_tokenizer *t, const int32_t *ids, int n, bool skip_special, char **text, size_t *len) {
    *text = NULL; *len = 0;
    if (n < 0 || (n && !ids)) return mx_errorf(MX_ERR_INVALID_ARG, "tokenizer: bad id array");
    tk_buf out = {0};
    tk_dscratch d = {0};
    mx_status st = decode_buf(t, &d, ids, (size_t)n, skip_special, &out);
    dscratch_free(&d);
    if (st) { free(out.d); return st; }
    if (!tk_buf_reserve(&out, 1)) { free(out.d); return NOMEM; }
    out.d[out.n] = 0;
    *text = out.d; *len = out.n;
    return MX_OK;
}

/* ---- lookups ---- */
int mx_tokenizer_vocab_size(const mx_tokenizer *t) { return t->n_tok; }

int32_t mx_tokenizer_token_id(const mx_tokenizer *t, const char *token) {
    if (!token) return -1;
    size_t n = strlen(token);
    int32_t id = tk_smap_get(&t->added_map, token, n);
    return id >= 0 ? id : tk_smap_get(&t->vocab, token, n);
}

const char *mx_tokenizer_token_str(const mx_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_tok) return NULL;
    if (t->tok_len[id] != UINT32_MAX) return t->strings + t->tok_off[id];
    int32_t a = t->added_by_id[id];
    return a >= 0 ? t->added[a].content : NULL;
}

bool mx_tokenizer_is_special(const mx_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_tok) return false;
    int32_t a = t->added_by_id[id];
    return a >= 0 && t->added[a].special;
}

const char *mx_tokenizer_bos_str(const mx_tokenizer *t) { return t->bos_str; }
const char *mx_tokenizer_eos_str(const mx_tokenizer *t) { return t->eos_str; }
int32_t mx_tokenizer_bos_id(const mx_tokenizer *t) { return t->bos_id; }
int32_t mx_tokenizer_eos_id(const mx_tokenizer *t) { return t->eos_id; }
bool mx_tokenizer_add_bos(const mx_tokenizer *t) { return t->add_bos; }
bool mx_tokenizer_add_eos(const mx_tokenizer *t) { return t->add_eos; }

/* ---- streaming detokenizer (HF DecodeStream) ---- */
struct mx_detok_stream {
    const mx_tokenizer *t;
    bool skip;
    int32_t *ids; size_t n, cap;
    size_t prefix_index;
    tk_buf prefix;
    tk_buf cur;
    tk_dscratch d;
};

mx_detok_stream *mx_detok_stream_new(const mx_tokenizer *t, bool skip_special) {
    mx_detok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t; s->skip = skip_special;
    return s;
}

void mx_detok_stream_free(mx_detok_stream *s) {
    if (!s) return;
    free(s->ids); free(s->prefix.d); free(s->cur.d);
    dscratch_free(&s->d);
    free(s);
}

static bool ends_with_fffd(const tk_buf *b) {
    return b->n >= 3 && !memcmp(b->d + b->n - 3, "\xEF\xBF\xBD", 3);
}

mx_status mx_detok_stream_push(mx_detok_stream *s, int32_t id, mx_buf *out) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        int32_t *v = realloc(s->ids, nc * sizeof *v);
        if (!v) return NOMEM;
        s->ids = v; s->cap = nc;
    }
    s->ids[s->n++] = id;
    s->cur.n = 0;
    mx_status st = decode_buf(s->t, &s->d, s->ids, s->n, s->skip, &s->cur);
    if (st) { s->n--; return st; }
    if (s->cur.n > s->prefix.n && !ends_with_fffd(&s->cur)) {
        if (s->prefix.n && memcmp(s->cur.d, s->prefix.d, s->prefix.n))
            return mx_errorf(MX_ERR_INTERNAL, "tokenizer: streaming decode lost its prefix");
        if (!mx_buf_append(out, s->cur.d + s->prefix.n, s->cur.n - s->prefix.n)) return NOMEM;
        size_t new_pi = s->n - s->prefix_index;
        memmove(s->ids, s->ids + s->prefix_index, (s->n - s->prefix_index) * sizeof *s->ids);
        s->n -= s->prefix_index;
        s->prefix.n = 0;
        if ((st = decode_buf(s->t, &s->d, s->ids, s->n, s->skip, &s->prefix))) return st;
        s->prefix_index = new_pi;
    }
    return MX_OK;
}

void mx_detok_stream_flush(mx_detok_stream *s, mx_buf *out) {
    s->cur.n = 0;
    if (s->n && decode_buf(s->t, &s->d, s->ids, s->n, s->skip, &s->cur) == MX_OK && s->cur.n > s->prefix.n &&
        (!s->prefix.n || !memcmp(s->cur.d, s->prefix.d, s->prefix.n)))
        mx_buf_append(out, s->cur.d + s->prefix.n, s->cur.n - s->prefix.n);
    s->n = 0; s->prefix_index = 0; s->prefix.n = 0;
}
