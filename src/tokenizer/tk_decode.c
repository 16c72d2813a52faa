/* tokenizer/tk_decode.c: decoders of tokenizer.json (ByteLevel, Metaspace, Replace, ByteFallback,
 * Fuse, Strip, WordPiece, BPEDecoder; Sequence flattened at load) applied to a list of token
 * strings, HF's decode_chain semantics, plus the streaming detokenizer. Not the id -> token
 * lookup (tokenizer.c). */
#include "tokenizer/tk_internal.h"

#include <stdlib.h>

#define NOMEM mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory")

void tk_dec_free_one(tk_dec *d) { tk_pattern_free(&d->pat); free(d->str); }

static mx_status getstr(const tj *v, const char *what, char **out, size_t *len) {
    if (!v || v->type != TJ_STR) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: %s must be a string", what);
    *out = malloc(v->n + 1);
    if (!*out) return NOMEM;
    memcpy(*out, v->u.s, v->n + 1); *len = v->n;
    return MX_OK;
}

static mx_status one_char(const char *s, const char *what, uint32_t *cp) {
    if (!s || !*s || tk_utf8_len((unsigned char)s[0]) != strlen(s))
        return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: %s must be one character", what);
    tk_utf8_get(s, cp);
    return MX_OK;
}

mx_status tk_dec_parse(const tj *j, tk_dec **arr, int *n, int *cap) {
    if (!j || j->type == TJ_NULL) return MX_OK;
    const char *type = tj_str(tj_get(j, "type"));
    if (!type) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: decoder without a type");
    if (!strcmp(type, "Sequence")) {
        const tj *l = tj_get(j, "decoders");
        if (!l || l->type != TJ_ARR) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: decoder Sequence without a decoders list");
        for (uint32_t i = 0; i < l->n; i++) {
            mx_status st = tk_dec_parse(&l->u.a[i], arr, n, cap);
            if (st) return st;
        }
        return MX_OK;
    }
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        tk_dec *na = realloc(*arr, (size_t)nc * sizeof *na);
        if (!na) return NOMEM;
        *arr = na; *cap = nc;
    }
    tk_dec *d = &(*arr)[*n];
    memset(d, 0, sizeof *d);
    (*n)++;
    mx_status st = MX_OK;
    if (!strcmp(type, "ByteLevel")) d->type = DEC_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback")) d->type = DEC_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse")) d->type = DEC_FUSE;
    else if (!strcmp(type, "Metaspace")) {
        d->type = DEC_METASPACE;
        const char *r = tj_str(tj_get(j, "replacement"));
        if ((st = one_char(r ? r : "\xE2\x96\x81", "Metaspace decoder replacement", &d->cp))) return st;
        const char *ps = tj_str(tj_get(j, "prepend_scheme"));
        if (ps) d->prepend_scheme = !strcmp(ps, "never") ? PREPEND_NEVER : !strcmp(ps, "first") ? PREPEND_FIRST : PREPEND_ALWAYS;
        else d->prepend_scheme = tj_bool(tj_get(j, "add_prefix_space"), true) ? PREPEND_ALWAYS : PREPEND_NEVER;
    } else if (!strcmp(type, "Replace")) {
        d->type = DEC_REPLACE;
        const tj *pat = tj_get(j, "pattern");
        const tj *s = tj_get(pat, "String"), *r = tj_get(pat, "Regex");
        if (s && s->type == TJ_STR) st = getstr(s, "Replace decoder pattern", &d->pat.lit, &d->pat.lit_len);
        else if (r && r->type == TJ_STR) { d->pat.regex = true; st = tk_regex_compile(r->u.s, r->n, "Replace decoder", &d->pat.re); }
        else st = mx_errorf(MX_ERR_FORMAT, "tokenizer.json: Replace decoder needs a String or Regex pattern");
        if (st) return st;
        st = getstr(tj_get(j, "content"), "Replace decoder content", &d->str, &d->str_len);
    } else if (!strcmp(type, "Strip")) {
        d->type = DEC_STRIP;
        if ((st = one_char(tj_str(tj_get(j, "content")), "Strip decoder content", &d->cp))) return st;
        const tj *a = tj_get(j, "start"), *b = tj_get(j, "stop");
        d->start = a && a->type == TJ_NUM && a->u.num >= 0 && a->u.num < 1e6 ? (int)a->u.num : 0;
        d->stop = b && b->type == TJ_NUM && b->u.num >= 0 && b->u.num < 1e6 ? (int)b->u.num : 0;
    } else if (!strcmp(type, "WordPiece")) {
        d->type = DEC_WORDPIECE;
        const tj *p = tj_get(j, "prefix");
        if (p) st = getstr(p, "WordPiece decoder prefix", &d->str, &d->str_len);
        else { d->str = malloc(3); if (!d->str) return NOMEM; memcpy(d->str, "##", 3); d->str_len = 2; }
        d->cleanup = tj_bool(tj_get(j, "cleanup"), true);
    } else if (!strcmp(type, "BPEDecoder")) {
        d->type = DEC_BPE;
        const tj *p = tj_get(j, "suffix");
        if (p) st = getstr(p, "BPEDecoder suffix", &d->str, &d->str_len);
        else { d->str = malloc(5); if (!d->str) return NOMEM; memcpy(d->str, "</w>", 5); d->str_len = 4; }
    } else {
        return mx_errorf(MX_ERR_UNSUPPORTED, "tokenizer.json: unknown decoder type '%s'", type);
    }
    return st;
}

/* Append bytes as UTF-8, replacing each maximal invalid subpart with U+FFFD (Rust's from_utf8_lossy). */
static bool lossy_append(tk_buf *o, const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        while (i < n) {
            if (p[i] < 0x80) { i++; continue; }
            size_t k = tk_utf8_valid_seq(p + i, n - i);
            if (!k) break;
            i += k;
        }
        if (i > st && !tk_buf_add(o, p + st, i - st)) return false;
        if (i >= n) break;
        unsigned c = p[i];
        size_t len = 1, need = 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        for (size_t k = 0; k < need && i + len < n; k++) {
            unsigned b = p[i + len];
            if (k == 0 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
            len++;
        }
        if (!tk_buf_add(o, "\xEF\xBF\xBD", 3)) return false;
        i += len;
    }
    return true;
}

static bool push_tok(tk_buf *b, tk_plist *l, const void *s, size_t n) {
    uint32_t off = (uint32_t)b->n;
    return tk_buf_add(b, s, n) && tk_plist_push(l, off, (uint32_t)n, -1, 0);
}

/* literal/regex replace of one token into o */
static mx_status replace_into(tk_ctx *c, const tk_pattern *pat, const char *rep, size_t rl, const char *s, size_t n, tk_buf *o) {
    size_t prev = 0;
    if (!pat->regex) {
        size_t ll = pat->lit_len, i = 0;
        if (ll) while (i + ll <= n) {
            const char *f = memmem(s + i, n - i, pat->lit, ll);
            if (!f) break;
            size_t ms = (size_t)(f - s);
            if (!tk_buf_add(o, s + prev, ms - prev) || !tk_buf_add(o, rep, rl)) return NOMEM;
            prev = i = ms + ll;
        }
    } else {
        size_t from = 0;
        while (from <= n) {
            size_t ms, me;
            int rc = tk_regex_next(c, pat->re, s, n, from, &ms, &me);
            if (rc < 0) return mx_errorf(MX_ERR_INTERNAL, "tokenizer: regex match failed (%d)", rc);
            if (rc == 0) break;
            if (me == ms) { if (me >= n) break; from = me + tk_utf8_len((unsigned char)s[me]); continue; }
            if (!tk_buf_add(o, s + prev, ms - prev) || !tk_buf_add(o, rep, rl)) return NOMEM;
            prev = from = me;
        }
    }
    return tk_buf_add(o, s + prev, n - prev) ? MX_OK : NOMEM;
}

static int hexd(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xXX>" -> byte, else -1 */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int a = hexd(s[3]), b = hexd(s[4]);
    if (a < 0 || b < 0) return -1;
    return a * 16 + b;
}

static mx_status dec_step(const tk_dec *d, tk_ctx *c, const tk_buf *ib, const tk_plist *il, tk_buf *ob, tk_plist *ol) {
    ob->n = 0; ol->n = 0;
    size_t nt = il->n;
    switch (d->type) {
    case DEC_BYTELEVEL: {
        tk_buf *raw = &c->t1;
        raw->n = 0;
        for (size_t i = 0; i < nt; i++) {
            const char *s = ib->d + il->p[i].off; size_t n = il->p[i].len;
            size_t mark = raw->n;
            bool ok = true;
            for (size_t k = 0; k < n;) {
                uint32_t cp; size_t cl = tk_utf8_get(s + k, &cp);
                int b = tk_cp2byte(cp);
                if (b < 0) { ok = false; break; }
                char ch = (char)b;
                if (!tk_buf_add(raw, &ch, 1)) return NOMEM;
                k += cl;
            }
            if (!ok) { raw->n = mark; if (!tk_buf_add(raw, s, n)) return NOMEM; }
        }
        uint32_t off = (uint32_t)ob->n;
        if (!lossy_append(ob, (const unsigned char *)raw->d, raw->n)) return NOMEM;
        return tk_plist_push(ol, off, (uint32_t)(ob->n - off), -1, 0) ? MX_OK : NOMEM;
    }
    case DEC_FUSE: {
        uint32_t off = 0;
        for (size_t i = 0; i < nt; i++) if (!tk_buf_add(ob, ib->d + il->p[i].off, il->p[i].len)) return NOMEM;
        return tk_plist_push(ol, off, (uint32_t)ob->n, -1, 0) ? MX_OK : NOMEM;
    }
    case DEC_BYTEFALLBACK: {
        tk_buf *bytes = &c->t1;
        bytes->n = 0;
        for (size_t i = 0; i <= nt; i++) {
            int b = i < nt ? byte_token(ib->d + il->p[i].off, il->p[i].len) : -1;
            if (b >= 0) { char ch = (char)b; if (!tk_buf_add(bytes, &ch, 1)) return NOMEM; continue; }
            if (bytes->n) {
                uint32_t off = (uint32_t)ob->n;
                if (tk_utf8_valid(bytes->d, bytes->n)) {
                    if (!tk_buf_add(ob, bytes->d, bytes->n)) return NOMEM;
                    if (!tk_plist_push(ol, off, (uint32_t)bytes->n, -1, 0)) return NOMEM;
                } else {
                    for (size_t k = 0; k < bytes->n; k++) if (!push_tok(ob, ol, "\xEF\xBF\xBD", 3)) return NOMEM;
                }
                bytes->n = 0;
            }
            if (i < nt && !push_tok(ob, ol, ib->d + il->p[i].off, il->p[i].len)) return NOMEM;
        }
        return MX_OK;
    }
    case DEC_REPLACE:
        for (size_t i = 0; i < nt; i++) {
            uint32_t off = (uint32_t)ob->n;
            mx_status st = replace_into(c, &d->pat, d->str, d->str_len, ib->d + il->p[i].off, il->p[i].len, ob);
            if (st) return st;
            if (!tk_plist_push(ol, off, (uint32_t)(ob->n - off), -1, 0)) return NOMEM;
        }
        return MX_OK;
    case DEC_STRIP:
        for (size_t i = 0; i < nt; i++) {
            const char *s = ib->d + il->p[i].off; size_t n = il->p[i].len;
            size_t a = 0, b = n;
            for (int k = 0; k < d->start && a < n; k++) {
                uint32_t cp; size_t cl = tk_utf8_get(s + a, &cp);
                if (cp != d->cp) break;
                a += cl;
            }
            for (int k = 0; k < d->stop && b > a; k++) {
                size_t q = b - 1;
                while (q > a && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
                uint32_t cp; tk_utf8_get(s + q, &cp);
                if (cp != d->cp) break;
                b = q;
            }
            if (!push_tok(ob, ol, s + a, b - a)) return NOMEM;
        }
        return MX_OK;
    case DEC_METASPACE:
        for (size_t i = 0; i < nt; i++) {
            const char *s = ib->d + il->p[i].off; size_t n = il->p[i].len;
            uint32_t off = (uint32_t)ob->n;
            for (size_t k = 0; k < n;) {
                uint32_t cp; size_t cl = tk_utf8_get(s + k, &cp);
                if (cp == d->cp) {
                    if (!(i == 0 && d->prepend_scheme != PREPEND_NEVER) && !tk_buf_add(ob, " ", 1)) return NOMEM;
                } else if (!tk_buf_add(ob, s + k, cl)) return NOMEM;
                k += cl;
            }
            if (!tk_plist_push(ol, off, (uint32_t)(ob->n - off), -1, 0)) return NOMEM;
        }
        return MX_OK;
    case DEC_BPE:
        for (size_t i = 0; i < nt; i++) {
            tk_pattern lit = { .lit = d->str, .lit_len = d->str_len };
            uint32_t off = (uint32_t)ob->n;
            mx_status st = replace_into(c, &lit, i + 1 == nt ? "" : " ", i + 1 == nt ? 0 : 1, ib->d + il->p[i].off, il->p[i].len, ob);
            if (st) return st;
            if (!tk_plist_push(ol, off, (uint32_t)(ob->n - off), -1, 0)) return NOMEM;
        }
        return MX_OK;
    case DEC_WORDPIECE: {
        static const char *const from[] = { " .", " ?", " !", " ,", " ' ", " n't", " 'm", " do not", " 's", " 've", " 're" };
        static const char *const to[] = { ".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re" };
        for (size_t i = 0; i < nt; i++) {
            const char *s = ib->d + il->p[i].off; size_t n = il->p[i].len;
            tk_buf *a = &c->t1;
            a->n = 0;
            if (i != 0) {
                if (n >= d->str_len && !memcmp(s, d->str, d->str_len)) { if (!tk_buf_add(a, s + d->str_len, n - d->str_len)) return NOMEM; }
                else if (!tk_buf_add(a, " ", 1) || !tk_buf_add(a, s, n)) return NOMEM;
            } else if (!tk_buf_add(a, s, n)) return NOMEM;
            if (d->cleanup) {
                tk_buf *b2 = &c->t2;
                for (size_t r = 0; r < sizeof from / sizeof from[0]; r++) {
                    tk_pattern lit = { .lit = (char *)from[r], .lit_len = strlen(from[r]) };
                    b2->n = 0;
                    mx_status st = replace_into(c, &lit, to[r], strlen(to[r]), a->d ? a->d : "", a->n, b2);
                    if (st) return st;
                    tk_buf sw = *a; *a = *b2; *b2 = sw;
                }
            }
            if (!push_tok(ob, ol, a->d ? a->d : "", a->n)) return NOMEM;
        }
        return MX_OK;
    }
    }
    return MX_OK;
}

mx_status tk_decode_tokens(const mx_tokenizer *t, tk_ctx *c, tk_buf *buf, tk_plist *toks, tk_buf *out) {
    tk_buf *ib = buf; tk_plist *il = toks;
    int w = 0;
    if (!t->has_decoder) {
        for (size_t i = 0; i < il->n; i++) {
            if (i && !tk_buf_add(out, " ", 1)) return NOMEM;
            if (!tk_buf_add(out, ib->d + il->p[i].off, il->p[i].len)) return NOMEM;
        }
        return MX_OK;
    }
    for (int k = 0; k < t->n_dec; k++) {
        mx_status st = dec_step(&t->dec[k], c, ib, il, &c->b[w], &c->l[w]);
        if (st) return st;
        ib = &c->b[w]; il = &c->l[w];
        w ^= 1;
    }
    for (size_t i = 0; i < il->n; i++)
        if (!tk_buf_add(out, ib->d + il->p[i].off, il->p[i].len)) return NOMEM;
    return MX_OK;
}
