/* tokenizer/tk_pretok.c: pre-tokenizers of tokenizer.json (ByteLevel, Split with every behavior,
 * Metaspace, Whitespace, WhitespaceSplit, Punctuation, Digits, BertPreTokenizer,
 * CharDelimiterSplit; Sequence is flattened at load). Each works on byte strings and produces
 * word pieces; offsets are not tracked (mlxcel needs ids only). Not the model (tk_model.c). */
#include "tokenizer/tk_internal.h"

#include <stdio.h>
#include <stdlib.h>

static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char WS_RE[] = "\\w+|[^\\w\\s]+";

/* ---- parsing ---- */
static mx_status parse_pattern(const tj *j, const char *what, tk_pattern *out) {
    memset(out, 0, sizeof *out);
    const tj *s = tj_get(j, "String"), *r = tj_get(j, "Regex");
    if (s && s->type == TJ_STR) {
        out->lit = malloc(s->n + 1);
        if (!out->lit) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
        memcpy(out->lit, s->u.s, s->n + 1); out->lit_len = s->n;
        return MX_OK;
    }
    if (r && r->type == TJ_STR) {
        out->regex = true;
        return tk_regex_compile(r->u.s, r->n, what, &out->re);
    }
    return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: %s: pattern must be {\"String\": ...} or {\"Regex\": ...}", what);
}

void tk_pattern_free(tk_pattern *p) {
    free(p->lit);
    if (p->re) pcre2_code_free(p->re);
    memset(p, 0, sizeof *p);
}

static int parse_behavior(const char *s) {
    if (!s) return BH_ISOLATED;
    if (!strcmp(s, "Removed")) return BH_REMOVED;
    if (!strcmp(s, "Isolated")) return BH_ISOLATED;
    if (!strcmp(s, "MergedWithPrevious")) return BH_MERGED_PREV;
    if (!strcmp(s, "MergedWithNext")) return BH_MERGED_NEXT;
    if (!strcmp(s, "Contiguous")) return BH_CONTIGUOUS;
    return -1;
}

void tk_pretok_free_one(tk_pretok *p) { tk_pattern_free(&p->pat); }

mx_status tk_pretok_parse(const tj *j, tk_pretok **arr, int *n, int *cap) {
    if (!j || j->type == TJ_NULL) return MX_OK;
    const char *type = tj_str(tj_get(j, "type"));
    if (!type) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: pre_tokenizer without a type");
    if (!strcmp(type, "Sequence")) {
        const tj *l = tj_get(j, "pretokenizers");
        if (!l || l->type != TJ_ARR) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: pre_tokenizer Sequence without a pretokenizers list");
        for (uint32_t i = 0; i < l->n; i++) {
            mx_status st = tk_pretok_parse(&l->u.a[i], arr, n, cap);
            if (st) return st;
        }
        return MX_OK;
    }
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        tk_pretok *na = realloc(*arr, (size_t)nc * sizeof *na);
        if (!na) return mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory");
        *arr = na; *cap = nc;
    }
    tk_pretok *p = &(*arr)[*n];
    memset(p, 0, sizeof *p);
    if (!strcmp(type, "ByteLevel")) {
        p->type = PT_BYTELEVEL;
        p->add_prefix_space = tj_bool(tj_get(j, "add_prefix_space"), true);
        p->use_regex = tj_bool(tj_get(j, "use_regex"), true);
    } else if (!strcmp(type, "Split")) {
        p->type = PT_SPLIT;
        p->behavior = parse_behavior(tj_str(tj_get(j, "behavior")));
        if (p->behavior < 0) return mx_errorf(MX_ERR_UNSUPPORTED, "tokenizer.json: Split pre_tokenizer: unknown behavior '%s'", tj_str(tj_get(j, "behavior")));
        p->invert = tj_bool(tj_get(j, "invert"), false);
        mx_status st = parse_pattern(tj_get(j, "pattern"), "Split pre_tokenizer", &p->pat);
        if (st) return st;
    } else if (!strcmp(type, "Metaspace")) {
        p->type = PT_METASPACE;
        const char *r = tj_str(tj_get(j, "replacement"));
        if (!r) r = "\xE2\x96\x81";
        size_t rl = strlen(r);
        if (rl == 0 || rl > 4 || tk_utf8_len((unsigned char)r[0]) != rl)
            return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: Metaspace replacement must be one character");
        memcpy(p->repl, r, rl); p->repl_len = rl; tk_utf8_get(r, &p->repl_cp);
        p->split = tj_bool(tj_get(j, "split"), true);
        const char *ps = tj_str(tj_get(j, "prepend_scheme"));
        if (ps) {
            if (!strcmp(ps, "always")) p->prepend_scheme = PREPEND_ALWAYS;
            else if (!strcmp(ps, "first")) p->prepend_scheme = PREPEND_FIRST;
            else if (!strcmp(ps, "never")) p->prepend_scheme = PREPEND_NEVER;
            else return mx_errorf(MX_ERR_UNSUPPORTED, "tokenizer.json: Metaspace: unknown prepend_scheme '%s'", ps);
        } else {
            p->prepend_scheme = tj_bool(tj_get(j, "add_prefix_space"), true) ? PREPEND_ALWAYS : PREPEND_NEVER;
        }
    } else if (!strcmp(type, "Whitespace")) {
        p->type = PT_WHITESPACE;
        mx_status st = tk_regex_compile(WS_RE, sizeof WS_RE - 1, "Whitespace pre_tokenizer", &p->pat.re);
        if (st) return st;
        p->pat.regex = true;
    } else if (!strcmp(type, "WhitespaceSplit")) {
        p->type = PT_WSSPLIT;
    } else if (!strcmp(type, "Punctuation")) {
        p->type = PT_PUNCT;
        p->behavior = parse_behavior(tj_str(tj_get(j, "behavior")));
        if (p->behavior < 0) return mx_errorf(MX_ERR_UNSUPPORTED, "tokenizer.json: Punctuation pre_tokenizer: unknown behavior");
    } else if (!strcmp(type, "Digits")) {
        p->type = PT_DIGITS;
        p->individual_digits = tj_bool(tj_get(j, "individual_digits"), false);
    } else if (!strcmp(type, "BertPreTokenizer")) {
        p->type = PT_BERT;
    } else if (!strcmp(type, "CharDelimiterSplit")) {
        p->type = PT_CHARDELIM;
        const char *d = tj_str(tj_get(j, "delimiter"));
        if (!d || !*d || tk_utf8_len((unsigned char)d[0]) != strlen(d))
            return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: CharDelimiterSplit needs a one-character delimiter");
        tk_utf8_get(d, &p->repl_cp);
    } else {
        return mx_errorf(MX_ERR_UNSUPPORTED, "tokenizer.json: unknown pre_tokenizer type '%s'", type);
    }
    if (p->type == PT_BYTELEVEL && p->use_regex) {
        mx_status st = tk_regex_compile(GPT2_RE, sizeof GPT2_RE - 1, "ByteLevel pre_tokenizer", &p->pat.re);
        if (st) return st;
        p->pat.regex = true;
    }
    (*n)++;
    return MX_OK;
}

/* ---- spans and behaviors ---- */
typedef struct {
    tk_ctx *c;
    tk_plist spans;       /* off, len, id = is_match */
} span_st;

#define NOMEM mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory")

/* Emit s[a..b) as an output piece (non-empty only). */
static bool emit(tk_buf *ob, tk_plist *ol, const char *s, size_t a, size_t b, uint32_t flags) {
    if (b <= a) return true;
    uint32_t off = (uint32_t)ob->n;
    if (!tk_buf_add(ob, s + a, b - a)) return false;
    return tk_plist_push(ol, off, (uint32_t)(b - a), -1, a == 0 ? flags : 0);
}

/* spans cover [0,n) in order; apply behavior and emit. */
static bool apply_behavior(tk_plist *sp, int behavior, bool invert, const char *s, uint32_t flags, tk_buf *ob, tk_plist *ol) {
    if (invert) for (size_t i = 0; i < sp->n; i++) sp->p[i].id = !sp->p[i].id;
    size_t na = 0;   /* compact the merged list in place: off,len,id */
    tk_piece *a = sp->p;
    switch (behavior) {
    case BH_REMOVED:
        for (size_t i = 0; i < sp->n; i++) if (!a[i].id) a[na++] = a[i];
        break;
    case BH_ISOLATED:
        na = sp->n;
        break;
    case BH_MERGED_PREV: {
        bool prevm = false;
        for (size_t i = 0; i < sp->n; i++) {
            tk_piece x = a[i];
            if (x.id && !prevm && na) a[na - 1].len = x.off + x.len - a[na - 1].off;
            else a[na++] = x;
            prevm = x.id;
        }
        break;
    }
    case BH_MERGED_NEXT: {
        bool prevm = false;
        size_t w = sp->n;   /* build from the back, then shift */
        for (size_t i = sp->n; i-- > 0;) {
            tk_piece x = a[i];
            if (x.id && !prevm && w < sp->n) { a[w].len = a[w].off + a[w].len - x.off; a[w].off = x.off; }
            else a[--w] = x;
            prevm = x.id;
        }
        na = sp->n - w;
        memmove(a, a + w, na * sizeof *a);
        break;
    }
    case BH_CONTIGUOUS: {
        bool prevm = false;
        for (size_t i = 0; i < sp->n; i++) {
            tk_piece x = a[i];
            if ((bool)x.id == prevm && na) a[na - 1].len = x.off + x.len - a[na - 1].off;
            else a[na++] = x;
            prevm = x.id;
        }
        break;
    }
    }
    for (size_t i = 0; i < na; i++)
        if (!emit(ob, ol, s, a[i].off, a[i].off + a[i].len, flags)) return false;
    return true;
}

static bool span_add(tk_plist *sp, size_t a, size_t b, bool m) {
    return tk_plist_push(sp, (uint32_t)a, (uint32_t)(b - a), m, 0);
}

static mx_status spans_regex(tk_ctx *c, const pcre2_code *re, const char *s, size_t n, tk_plist *sp) {
    size_t prev = 0, from = 0;
    while (from <= n) {
        size_t ms, me;
        int rc = tk_regex_next(c, re, s, n, from, &ms, &me);
        if (rc < 0) return mx_errorf(MX_ERR_INTERNAL, "tokenizer: regex match failed (%d)", rc);
        if (rc == 0) break;
        if (prev != ms && !span_add(sp, prev, ms, false)) return NOMEM;
        if (!span_add(sp, ms, me, true)) return NOMEM;
        prev = me;
        if (me == ms) { if (me >= n) break; from = me + tk_utf8_len((unsigned char)s[me]); }
        else from = me;
    }
    if (prev != n && !span_add(sp, prev, n, false)) return NOMEM;
    return MX_OK;
}

static mx_status spans_literal(const char *lit, size_t ll, const char *s, size_t n, tk_plist *sp) {
    size_t prev = 0, i = 0;
    if (ll) {
        while (i + ll <= n) {
            const char *f = memmem(s + i, n - i, lit, ll);
            if (!f) break;
            size_t ms = (size_t)(f - s);
            if (prev != ms && !span_add(sp, prev, ms, false)) return NOMEM;
            if (!span_add(sp, ms, ms + ll, true)) return NOMEM;
            prev = i = ms + ll;
        }
    }
    if (prev != n && !span_add(sp, prev, n, false)) return NOMEM;
    return MX_OK;
}

typedef bool (*char_pred)(uint32_t cp, uint32_t arg);
static bool pred_ws(uint32_t cp, uint32_t arg) { (void)arg; return tk_is_whitespace(cp); }
static bool pred_punct(uint32_t cp, uint32_t arg) { (void)arg; return tk_is_punct(cp); }
static bool pred_num(uint32_t cp, uint32_t arg) { (void)arg; return tk_is_numeric(cp); }
static bool pred_eq(uint32_t cp, uint32_t arg) { return cp == arg; }

/* each matching char is its own match span; runs of others are one gap span */
static mx_status spans_chars(char_pred f, uint32_t arg, const char *s, size_t n, tk_plist *sp) {
    size_t prev = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp; size_t k = tk_utf8_get(s + i, &cp);
        if (f(cp, arg)) {
            if (prev != i && !span_add(sp, prev, i, false)) return NOMEM;
            if (!span_add(sp, i, i + k, true)) return NOMEM;
            prev = i + k;
        }
        i += k;
    }
    if (prev != n && !span_add(sp, prev, n, false)) return NOMEM;
    return MX_OK;
}

/* ---- leaves ---- */
static mx_status bytelevel_map(const char *s, size_t n, uint32_t flags, tk_buf *ob, tk_plist *ol) {
    if (!n) return MX_OK;
    if (!tk_buf_reserve(ob, 2 * n + 1)) return NOMEM;
    uint32_t off = (uint32_t)ob->n;
    char *o = ob->d + ob->n;
    for (size_t i = 0; i < n; i++) {
        uint16_t cp = tk_byte2cp[(unsigned char)s[i]];
        if (cp < 0x80) *o++ = (char)cp;
        else { *o++ = (char)(0xC0 | (cp >> 6)); *o++ = (char)(0x80 | (cp & 0x3F)); }
    }
    size_t len = (size_t)(o - (ob->d + ob->n));
    ob->n += len;
    return tk_plist_push(ol, off, (uint32_t)len, -1, flags) ? MX_OK : NOMEM;
}

static mx_status leaf(const tk_pretok *p, tk_ctx *c, tk_plist *sp, const char *s, size_t n, uint32_t flags,
                      tk_buf *ob, tk_plist *ol) {
    sp->n = 0;
    mx_status st = MX_OK;
    switch (p->type) {
    case PT_BYTELEVEL: {
        tk_buf *tb = &c->t2;
        if (p->add_prefix_space && n > 0 && s[0] != ' ') {   /* HF's prepend is a no-op on empty text */
            tb->n = 0;
            if (!tk_buf_add(tb, " ", 1) || !tk_buf_add(tb, s, n)) return NOMEM;
            s = tb->d; n = tb->n;
        }
        if (p->use_regex) {
            if ((st = spans_regex(c, p->pat.re, s, n, sp))) return st;
            for (size_t i = 0; i < sp->n; i++)
                if ((st = bytelevel_map(s + sp->p[i].off, sp->p[i].len, sp->p[i].off == 0 ? flags : 0, ob, ol))) return st;
            return MX_OK;
        }
        return bytelevel_map(s, n, flags, ob, ol);
    }
    case PT_SPLIT:
        if (p->pat.regex) st = spans_regex(c, p->pat.re, s, n, sp);
        else st = spans_literal(p->pat.lit, p->pat.lit_len, s, n, sp);
        if (st) return st;
        return apply_behavior(sp, p->behavior, p->invert, s, flags, ob, ol) ? MX_OK : NOMEM;
    case PT_WHITESPACE:
        if ((st = spans_regex(c, p->pat.re, s, n, sp))) return st;
        return apply_behavior(sp, BH_REMOVED, true, s, flags, ob, ol) ? MX_OK : NOMEM;
    case PT_WSSPLIT:
        if ((st = spans_chars(pred_ws, 0, s, n, sp))) return st;
        return apply_behavior(sp, BH_REMOVED, false, s, flags, ob, ol) ? MX_OK : NOMEM;
    case PT_PUNCT:
        if ((st = spans_chars(pred_punct, 0, s, n, sp))) return st;
        return apply_behavior(sp, p->behavior, false, s, flags, ob, ol) ? MX_OK : NOMEM;
    case PT_DIGITS:
        if ((st = spans_chars(pred_num, 0, s, n, sp))) return st;
        return apply_behavior(sp, p->individual_digits ? BH_ISOLATED : BH_CONTIGUOUS, false, s, flags, ob, ol) ? MX_OK : NOMEM;
    case PT_CHARDELIM:
        if ((st = spans_chars(pred_eq, p->repl_cp, s, n, sp))) return st;
        return apply_behavior(sp, BH_REMOVED, false, s, flags, ob, ol) ? MX_OK : NOMEM;
    case PT_BERT: {
        /* whitespace split (removed), then punctuation (isolated) inside each word */
        if ((st = spans_chars(pred_ws, 0, s, n, sp))) return st;
        size_t nw = sp->n;
        for (size_t i = 0; i < nw; i++) {
            if (sp->p[i].id) continue;
            size_t a = sp->p[i].off, b = a + sp->p[i].len;
            for (size_t k = a; k < b;) {
                uint32_t cp; size_t cl = tk_utf8_get(s + k, &cp);
                if (tk_is_punct(cp)) {
                    if (k > a && !emit(ob, ol, s, a, k, flags)) return NOMEM;
                    if (!emit(ob, ol, s, k, k + cl, flags)) return NOMEM;
                    a = k + cl;
                }
                k += cl;
            }
            if (!emit(ob, ol, s, a, b, flags)) return NOMEM;
        }
        return MX_OK;
    }
    case PT_METASPACE: {
        tk_buf *tb = &c->t2;
        tb->n = 0;
        bool starts = n >= p->repl_len && !memcmp(s, p->repl, p->repl_len);
        bool starts_space = n > 0 && s[0] == ' ';
        bool prepend = n > 0 && !(starts || starts_space) &&
                       (p->prepend_scheme == PREPEND_ALWAYS ||
                        (p->prepend_scheme == PREPEND_FIRST && (flags & TK_PIECE_AT_START)));
        /* HF replaces ' ' first, then checks starts_with(replacement) */
        if (prepend && !tk_buf_add(tb, p->repl, p->repl_len)) return NOMEM;
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ') { if (!tk_buf_add(tb, p->repl, p->repl_len)) return NOMEM; }
            else if (!tk_buf_add(tb, s + i, 1)) return NOMEM;
        }
        if (!p->split) return emit(ob, ol, tb->d, 0, tb->n, flags) ? MX_OK : NOMEM;
        if ((st = spans_literal(p->repl, p->repl_len, tb->d, tb->n, sp))) return st;
        return apply_behavior(sp, BH_MERGED_NEXT, false, tb->d, flags, ob, ol) ? MX_OK : NOMEM;
    }
    }
    return MX_OK;
}

mx_status tk_pretokenize(const mx_tokenizer *t, tk_ctx *c, const char *s, size_t n, bool at_start, int *which) {
    int w = 0;
    c->b[0].n = 0; c->l[0].n = 0;
    if (!tk_buf_add(&c->b[0], s, n) || !tk_plist_push(&c->l[0], 0, (uint32_t)n, -1, at_start ? TK_PIECE_AT_START : 0))
        return NOMEM;
    for (int k = 0; k < t->n_pre; k++) {
        int o = w ^ 1;
        c->b[o].n = 0; c->l[o].n = 0;
        for (size_t i = 0; i < c->l[w].n; i++) {
            tk_piece pc = c->l[w].p[i];
            mx_status st = leaf(&t->pre[k], c, &c->l[2], c->b[w].d + pc.off, pc.len, pc.flags, &c->b[o], &c->l[o]);
            if (st) return st;
        }
        w = o;
    }
    *which = w;
    return MX_OK;
}
