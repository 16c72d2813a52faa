/* tokenizer/tk_norm.c: normalizers of tokenizer.json (NFC, NFD, NFKC, NFKD via utf8proc,
 * Lowercase, Strip, StripAccents, Replace, Prepend, BertNormalizer; Sequence is flattened at
 * load). String to string; alignments are not tracked. Not the pre-tokenizers (tk_pretok.c). */
#include "tokenizer/tk_internal.h"

#include <stdlib.h>
#include <utf8proc.h>

#define NOMEM mx_errorf(MX_ERR_NOMEM, "tokenizer: out of memory")

void tk_norm_free_one(tk_norm *nm) {
    tk_pattern_free(&nm->pat);
    free(nm->str);
}

static mx_status dup_str(const tj *v, const char *what, char **out, size_t *len) {
    if (!v || v->type != TJ_STR) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: %s must be a string", what);
    *out = malloc(v->n + 1);
    if (!*out) return NOMEM;
    memcpy(*out, v->u.s, v->n + 1);
    *len = v->n;
    return MX_OK;
}

mx_status tk_norm_parse(const tj *j, tk_norm **arr, int *n, int *cap) {
    if (!j || j->type == TJ_NULL) return MX_OK;
    const char *type = tj_str(tj_get(j, "type"));
    if (!type) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: normalizer without a type");
    if (!strcmp(type, "Sequence")) {
        const tj *l = tj_get(j, "normalizers");
        if (!l || l->type != TJ_ARR) return mx_errorf(MX_ERR_FORMAT, "tokenizer.json: normalizer Sequence without a normalizers list");
        for (uint32_t i = 0; i < l->n; i++) {
            mx_status st = tk_norm_parse(&l->u.a[i], arr, n, cap);
            if (st) return st;
        }
        return MX_OK;
    }
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        tk_norm *na = realloc(*arr, (size_t)nc * sizeof *na);
        if (!na) return NOMEM;
        *arr = na; *cap = nc;
    }
    tk_norm *p = &(*arr)[*n];
    memset(p, 0, sizeof *p);
    mx_status st = MX_OK;
    if (!strcmp(type, "NFC")) p->type = NORM_NFC;
    else if (!strcmp(type, "NFD")) p->type = NORM_NFD;
    else if (!strcmp(type, "NFKC")) p->type = NORM_NFKC;
    else if (!strcmp(type, "NFKD")) p->type = NORM_NFKD;
    else if (!strcmp(type, "Lowercase")) p->type = NORM_LOWER;
    else if (!strcmp(type, "StripAccents")) p->type = NORM_STRIP_ACCENTS;
    else if (!strcmp(type, "Strip")) {
        p->type = NORM_STRIP;
        p->left = tj_bool(tj_get(j, "strip_left"), true);
        p->right = tj_bool(tj_get(j, "strip_right"), true);
    } else if (!strcmp(type, "Replace")) {
        p->type = NORM_REPLACE;
        const tj *pat = tj_get(j, "pattern");
        const tj *s = tj_get(pat, "String"), *r = tj_get(pat, "Regex");
        if (s && s->type == TJ_STR) { st = dup_str(s, "Replace pattern", &p->pat.lit, &p->pat.lit_len); }
        else if (r && r->type == TJ_STR) { p->pat.regex = true; st = tk_regex_compile(r->u.s, r->n, "Replace normalizer", &p->pat.re); }
        else st = mx_errorf(MX_ERR_FORMAT, "tokenizer.json: Replace normalizer needs a String or Regex pattern");
        if (st) { (*n)++; return st; }
        st = dup_str(tj_get(j, "content"), "Replace normalizer content", &p->str, &p->str_len);
    } else if (!strcmp(type, "Prepend")) {
        p->type = NORM_PREPEND;
        st = dup_str(tj_get(j, "prepend"), "Prepend normalizer prepend", &p->str, &p->str_len);
    } else if (!strcmp(type, "BertNormalizer")) {
        p->type = NORM_BERT;
        p->clean_text = tj_bool(tj_get(j, "clean_text"), true);
        p->chinese = tj_bool(tj_get(j, "handle_chinese_chars"), true);
        p->lowercase = tj_bool(tj_get(j, "lowercase"), true);
        const tj *sa = tj_get(j, "strip_accents");
        p->strip_accents = (!sa || sa->type == TJ_NULL) ? -1 : tj_bool(sa, false);
    } else {
        return mx_errorf(MX_ERR_UNSUPPORTED, "tokenizer.json: unknown normalizer type '%s'", type);
    }
    (*n)++;   /* counted even on error so that free releases what was allocated */
    return st;
}

static bool is_ascii(const char *s, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { uint64_t w; memcpy(&w, s + i, 8); if (w & 0x8080808080808080ull) return false; }
    for (; i < n; i++) if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

static mx_status unicode_norm(int type, const char *s, size_t n, tk_buf *out) {
    if (is_ascii(s, n)) return tk_buf_add(out, s, n) ? MX_OK : NOMEM;
    utf8proc_option_t o = UTF8PROC_STABLE;
    if (type == NORM_NFC) o |= UTF8PROC_COMPOSE;
    else if (type == NORM_NFD) o |= UTF8PROC_DECOMPOSE;
    else if (type == NORM_NFKC) o |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    else o |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, o);
    if (r < 0) { free(dst); return mx_errorf(MX_ERR_INVALID_ARG, "tokenizer: Unicode normalization failed: %s", utf8proc_errmsg(r)); }
    bool ok = tk_buf_add(out, dst, (size_t)r);
    free(dst);
    return ok ? MX_OK : NOMEM;
}

static bool put_cp(tk_buf *o, uint32_t cp) {
    char tmp[4];
    return tk_buf_add(o, tmp, tk_utf8_put(tmp, cp));
}

static bool lower(const char *s, size_t n, tk_buf *o) {
    for (size_t i = 0; i < n;) {
        uint32_t cp; size_t k = tk_utf8_get(s + i, &cp);
        i += k;
        if (cp < 0x80) { char ch = (char)(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp); if (!tk_buf_add(o, &ch, 1)) return false; continue; }
        if (cp == 0x130) { if (!tk_buf_add(o, "i\xCC\x87", 3)) return false; continue; }
        if (!put_cp(o, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp))) return false;
    }
    return true;
}

static bool strip_accents(const char *s, size_t n, tk_buf *o) {
    for (size_t i = 0; i < n;) {
        uint32_t cp; size_t k = tk_utf8_get(s + i, &cp);
        if (cp < 0x300 || utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_MN)
            if (!tk_buf_add(o, s + i, k)) return false;
        i += k;
    }
    return true;
}

static bool is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static bool is_other(uint32_t cp) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CN ||
           k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CS;
}

static mx_status norm_one(const tk_norm *p, tk_ctx *c, const char *s, size_t n, tk_buf *o) {
    o->n = 0;
    switch (p->type) {
    case NORM_NFC: case NORM_NFD: case NORM_NFKC: case NORM_NFKD:
        return unicode_norm(p->type, s, n, o);
    case NORM_LOWER:
        return lower(s, n, o) ? MX_OK : NOMEM;
    case NORM_STRIP_ACCENTS:
        return strip_accents(s, n, o) ? MX_OK : NOMEM;
    case NORM_STRIP: {
        size_t a = 0, b = n;
        if (p->left) while (a < b) { uint32_t cp; size_t k = tk_utf8_get(s + a, &cp); if (!tk_is_whitespace(cp)) break; a += k; }
        if (p->right) while (b > a) {
            size_t q = b - 1;
            while (q > a && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
            uint32_t cp; tk_utf8_get(s + q, &cp);
            if (!tk_is_whitespace(cp)) break;
            b = q;
        }
        return tk_buf_add(o, s + a, b - a) ? MX_OK : NOMEM;
    }
    case NORM_PREPEND:
        if (n && !tk_buf_add(o, p->str, p->str_len)) return NOMEM;
        return tk_buf_add(o, s, n) ? MX_OK : NOMEM;
    case NORM_REPLACE: {
        size_t prev = 0;
        if (!p->pat.regex) {
            size_t ll = p->pat.lit_len, i = 0;
            if (ll) while (i + ll <= n) {
                const char *f = memmem(s + i, n - i, p->pat.lit, ll);
                if (!f) break;
                size_t ms = (size_t)(f - s);
                if (!tk_buf_add(o, s + prev, ms - prev) || !tk_buf_add(o, p->str, p->str_len)) return NOMEM;
                prev = i = ms + ll;
            }
        } else {
            size_t from = 0;
            while (from <= n) {
                size_t ms, me;
                int rc = tk_regex_next(c, p->pat.re, s, n, from, &ms, &me);
                if (rc < 0) return mx_errorf(MX_ERR_INTERNAL, "tokenizer: regex match failed (%d)", rc);
                if (rc == 0) break;
                if (me == ms) { if (me >= n) break; from = me + tk_utf8_len((unsigned char)s[me]); continue; }
                if (!tk_buf_add(o, s + prev, ms - prev) || !tk_buf_add(o, p->str, p->str_len)) return NOMEM;
                prev = from = me;
            }
        }
        return tk_buf_add(o, s + prev, n - prev) ? MX_OK : NOMEM;
    }
    case NORM_BERT: {
        tk_buf *a = &c->t2;
        a->n = 0;
        for (size_t i = 0; i < n;) {
            uint32_t cp; size_t k = tk_utf8_get(s + i, &cp);
            i += k;
            if (p->clean_text) {
                if (cp == 0 || cp == 0xFFFD) continue;
                bool ws = cp == '\t' || cp == '\n' || cp == '\r' || tk_is_whitespace(cp);
                if (!ws && is_other(cp)) continue;
                if (ws) cp = ' ';
            }
            if (p->chinese && is_chinese(cp)) {
                if (!tk_buf_add(a, " ", 1) || !put_cp(a, cp) || !tk_buf_add(a, " ", 1)) return NOMEM;
            } else if (!put_cp(a, cp)) return NOMEM;
        }
        bool sa = p->strip_accents < 0 ? p->lowercase : p->strip_accents;
        const char *cur = a->d ? a->d : ""; size_t cn = a->n;
        tk_buf tmp = {0};
        if (sa) {
            mx_status st = unicode_norm(NORM_NFD, cur, cn, &tmp);
            if (st) { free(tmp.d); return st; }
            if (!p->lowercase) { bool ok = strip_accents(tmp.d ? tmp.d : "", tmp.n, o); free(tmp.d); return ok ? MX_OK : NOMEM; }
            a->n = 0;
            if (!strip_accents(tmp.d ? tmp.d : "", tmp.n, a)) { free(tmp.d); return NOMEM; }
            free(tmp.d);
            cur = a->d ? a->d : ""; cn = a->n;
        }
        if (p->lowercase) return lower(cur, cn, o) ? MX_OK : NOMEM;
        return tk_buf_add(o, cur, cn) ? MX_OK : NOMEM;
    }
    }
    return MX_OK;
}

mx_status tk_normalize(const mx_tokenizer *t, tk_ctx *c, const char *s, size_t n) {
    c->nb.n = 0;
    if (!tk_buf_add(&c->nb, s, n)) return NOMEM;
    for (int i = 0; i < t->n_norm; i++) {
        mx_status st = norm_one(&t->norm[i], c, c->nb.d, c->nb.n, &c->t1);
        if (st) return st;
        tk_buf sw = c->nb; c->nb = c->t1; c->t1 = sw;
    }
    return MX_OK;
}
