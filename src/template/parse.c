/* template/parse.c: Jinja2 lexer and parser. Turns template source into the AST of tpl.h with
 * transformers' environment settings (trim_blocks, lstrip_blocks, newline normalization, one
 * trailing newline dropped) and jinja2's operator precedence. It does not evaluate (eval.c). */
#include "template/tpl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_TEXT, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF };

typedef struct {
    int t, line;
    const char *p;   /* T_TEXT/T_NAME/T_OP/T_STR: text (T_STR decoded) */
    size_t n;
    int64_t i;
    double f;
} tok;

typedef struct {
    tpl_arena *ar;
    tok *tk;
    int ntk, cap, pos;
    int depth;
    char err[300];
    bool failed;
} parser;

#define MAX_DEPTH 200

static bool perr(parser *P, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool perr(parser *P, int line, const char *fmt, ...) {
    if (P->failed) return false;
    P->failed = true;
    int n = snprintf(P->err, sizeof P->err, "template line %d: ", line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->err + n, sizeof P->err - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}

static bool emit(parser *P, int t, int line, const char *p, size_t n) {
    if (P->ntk == P->cap) {
        int cap = P->cap ? P->cap * 2 : 256;
        tok *nt = realloc(P->tk, (size_t)cap * sizeof *nt);
        if (!nt) return perr(P, line, "out of memory");
        P->tk = nt;
        P->cap = cap;
    }
    tok *k = &P->tk[P->ntk++];
    memset(k, 0, sizeof *k);
    k->t = t; k->line = line; k->p = p; k->n = n;
    return true;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Python str.rstrip()/lstrip() on whitespace */
static size_t rstrip_ws(const char *p, size_t n) {
    while (n > 0) {
        /* step back one code point */
        size_t k = n - 1;
        while (k > 0 && ((unsigned char)p[k] & 0xc0) == 0x80) k--;
        size_t a;
        uint32_t c = u8_next(p + k, n - k, &a);
        if (!py_isspace(c)) break;
        n = k;
    }
    return n;
}
static size_t lstrip_ws(const char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t a;
        uint32_t c = u8_next(p + i, n - i, &a);
        if (!py_isspace(c)) break;
        i += a;
    }
    return i;
}

static int count_nl(const char *p, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += p[i] == '\n';
    return k;
}

static void put_utf8(char *out, size_t *o, uint32_t cp) {
    if (cp < 0x80) out[(*o)++] = (char)cp;
    else if (cp < 0x800) { out[(*o)++] = (char)(0xc0 | (cp >> 6)); out[(*o)++] = (char)(0x80 | (cp & 0x3f)); }
    else if (cp < 0x10000) {
        out[(*o)++] = (char)(0xe0 | (cp >> 12)); out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*o)++] = (char)(0xf0 | (cp >> 18)); out[(*o)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f)); out[(*o)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Lex a string literal starting at s[*i] (the quote). Python unicode-escape rules. */
static bool lex_string(parser *P, const char *s, size_t n, size_t *i, int *line) {
    char q = s[*i];
    size_t j = *i + 1;
    int start_line = *line;
    while (j < n && s[j] != q) {
        if (s[j] == '\\' && j + 1 < n) j++;
        j++;
    }
    if (j >= n) return perr(P, start_line, "unterminated string literal");
    size_t rawn = j - (*i + 1);
    const char *raw = s + *i + 1;
    char *out = ta_alloc(P->ar, rawn * 2 + 1);
    if (!out) return perr(P, start_line, "out of memory");
    size_t o = 0;
    for (size_t k = 0; k < rawn; k++) {
        char c = raw[k];
        if (c != '\\' || k + 1 >= rawn) { out[o++] = c; continue; }
        char e = raw[++k];
        int w = 0;
        switch (e) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case 'a': out[o++] = '\a'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'v': out[o++] = '\v'; break;
        case '\n': break;
        case 'x': w = 2; break;
        case 'u': w = 4; break;
        case 'U': w = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = 0;
                int m = 0;
                while (m < 3 && k < rawn && raw[k] >= '0' && raw[k] <= '7') { cp = cp * 8 + (uint32_t)(raw[k] - '0'); k++; m++; }
                k--;
                put_utf8(out, &o, cp);
            } else { out[o++] = '\\'; out[o++] = e; }
        }
        if (w) {
            uint32_t cp = 0;
            if (k + (size_t)w >= rawn) return perr(P, *line, "truncated \\%c escape in string", e);
            for (int m = 1; m <= w; m++) {
                int h = hexv(raw[k + (size_t)m]);
                if (h < 0) return perr(P, *line, "truncated \\%c escape in string", e);
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10ffff) return perr(P, *line, "illegal Unicode character in string");
            k += (size_t)w;
            put_utf8(out, &o, cp);
        }
    }
    out[o] = 0;
    if (!emit(P, T_STR, start_line, out, o)) return false;
    *line += count_nl(raw, rawn);
    *i = j + 1;
    return true;
}

/* Lex the inside of a tag up to its end; returns the position after the end marker, sets
 * *strip_after when the end had '-', *plus when '+' (block end only). */
static bool lex_tag(parser *P, const char *s, size_t n, size_t *pi, int *line, bool block,
                    bool *strip_after, bool *plus) {
    size_t i = *pi;
    int depth = 0;
    char stack[256];
    *strip_after = false;
    *plus = false;
    for (;;) {
        while (i < n && is_ws(s[i])) { if (s[i] == '\n') (*line)++; i++; }
        if (i >= n) return perr(P, *line, "unexpected end of template: missing '%s'", block ? "%}" : "}}");
        const char *endm = block ? "%}" : "}}";
        if (depth == 0) {
            if ((s[i] == '-' || (block && s[i] == '+')) && i + 3 <= n && strncmp(s + i + 1, endm, 2) == 0) {
                if (s[i] == '-') *strip_after = true; else *plus = true;
                *pi = i + 3;
                return emit(P, block ? T_BEND : T_VEND, *line, NULL, 0);
            }
            if (i + 2 <= n && strncmp(s + i, endm, 2) == 0) {
                *pi = i + 2;
                return emit(P, block ? T_BEND : T_VEND, *line, NULL, 0);
            }
        }
        char c = s[i];
        if (is_name0(c)) {
            size_t j = i + 1;
            while (j < n && (is_name0(s[j]) || is_digit(s[j]))) j++;
            if (!emit(P, T_NAME, *line, s + i, j - i)) return false;
            i = j;
        } else if (is_digit(c)) {
            size_t j = i;
            bool isf = false;
            while (j < n && (is_digit(s[j]) || s[j] == '_')) j++;
            if (j + 1 < n && s[j] == '.' && is_digit(s[j + 1])) {
                isf = true; j++;
                while (j < n && (is_digit(s[j]) || s[j] == '_')) j++;
            }
            if (j < n && (s[j] == 'e' || s[j] == 'E')) {
                size_t k = j + 1;
                if (k < n && (s[k] == '+' || s[k] == '-')) k++;
                if (k < n && is_digit(s[k])) { isf = true; j = k; while (j < n && is_digit(s[j])) j++; }
            }
            char buf[128];
            size_t bn = 0;
            for (size_t k = i; k < j && bn < sizeof buf - 1; k++) if (s[k] != '_') buf[bn++] = s[k];
            buf[bn] = 0;
            if (!emit(P, isf ? T_FLOAT : T_INT, *line, s + i, j - i)) return false;
            tok *t = &P->tk[P->ntk - 1];
            errno = 0;
            if (isf) t->f = strtod(buf, NULL);
            else {
                t->i = strtoll(buf, NULL, 10);
                if (errno == ERANGE) return perr(P, *line, "integer literal too large");
            }
            i = j;
        } else if (c == '\'' || c == '"') {
            if (!lex_string(P, s, n, &i, line)) return false;
        } else {
            static const char *two[] = {"**", "//", "==", "!=", "<=", ">="};
            size_t len = 0;
            for (size_t k = 0; k < sizeof two / sizeof *two; k++)
                if (i + 1 < n && s[i] == two[k][0] && s[i + 1] == two[k][1]) { len = 2; break; }
            if (!len) {
                if (!strchr("+-*/%~<>=()[]{},.:|", c) || c == 0)
                    return perr(P, *line, "unexpected character '%c'", c);
                len = 1;
                if (c == '(' || c == '[' || c == '{') {
                    if (depth >= (int)sizeof stack) return perr(P, *line, "brackets nested too deeply");
                    stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
                }
                if (c == ')' || c == ']' || c == '}') {
                    if (depth == 0) return perr(P, *line, "unexpected '%c'", c);
                    if (stack[depth - 1] != c) return perr(P, *line, "unexpected '%c', expected '%c'", c, stack[depth - 1]);
                    depth--;
                }
            }
            if (!emit(P, T_OP, *line, s + i, len)) return false;
            i += len;
        }
    }
}

static bool lex(parser *P, const char *src0) {
    /* normalize newlines, drop one trailing newline (keep_trailing_newline=False) */
    size_t n0 = strlen(src0);
    char *s = ta_alloc(P->ar, n0 + 1);
    if (!s) return perr(P, 1, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < n0; i++) {
        if (src0[i] == '\r') { s[n++] = '\n'; if (i + 1 < n0 && src0[i + 1] == '\n') i++; }
        else s[n++] = src0[i];
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;

    size_t pos = 0;
    int line = 1;
    bool strip_next = false, line_starting = true;
    while (pos <= n) {
        size_t i = pos;
        while (i + 1 < n && !(s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#'))) i++;
        bool has_tag = i + 1 < n;
        if (!has_tag) i = n;
        const char *text = s + pos;
        size_t tn = i - pos;
        int text_line = line;
        if (strip_next) {
            size_t k = lstrip_ws(text, tn);
            text_line += count_nl(text, k);
            text += k; tn -= k;
        }
        char kind = has_tag ? s[i + 1] : 0;
        char mod = has_tag && i + 2 < n ? s[i + 2] : 0;
        if (has_tag) {
            if (mod == '-') tn = rstrip_ws(text, tn);
            else if (mod != '+' && kind != '{') {   /* lstrip_blocks */
                size_t lp = 0;
                for (size_t k = tn; k > 0; k--) if (text[k - 1] == '\n') { lp = k; break; }
                if (lp > 0 || line_starting) {
                    bool allws = tn > lp;
                    for (size_t k = lp; k < tn; k++) if (!(text[k] == ' ' || text[k] == '\t' || text[k] == '\f' || text[k] == '\v')) { allws = false; break; }
                    if (allws) tn = lp;
                }
            }
        }
        if (tn > 0 && !emit(P, T_TEXT, text_line, text, tn)) return false;
        line += count_nl(s + pos, i - pos);
        if (!has_tag) break;
        size_t j = i + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
        bool strip_after = false, plus = false;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t k = j; k + 1 < n; k++) if (s[k] == '#' && s[k + 1] == '}') { e = s + k; break; }
            if (!e) return perr(P, line, "unclosed comment");
            size_t k = (size_t)(e - s);
            if (k > j && s[k - 1] == '-') strip_after = true;
            line += count_nl(s + j, k - j);
            j = k + 2;
        } else if (kind == '%') {
            /* raw block? */
            size_t k = j;
            while (k < n && is_ws(s[k])) k++;
            if (k + 3 <= n && strncmp(s + k, "raw", 3) == 0 && !(k + 3 < n && (is_name0(s[k + 3]) || is_digit(s[k + 3])))) {
                k += 3;
                while (k < n && is_ws(s[k])) k++;
                bool rs = false;
                if (k < n && s[k] == '-') { rs = true; k++; }
                if (!(k + 2 <= n && s[k] == '%' && s[k + 1] == '}')) return perr(P, line, "expected '%%}' after raw");
                k += 2;   /* jinja keeps the newline right after {% raw %} */
                size_t cstart = k;
                if (rs) cstart += lstrip_ws(s + k, n - k);
                /* find {% endraw %} */
                size_t m = cstart, cend = 0, after = 0;
                bool found = false;
                for (; m + 1 < n; m++) {
                    if (s[m] != '{' || s[m + 1] != '%') continue;
                    size_t q = m + 2;
                    bool ls = false;
                    if (q < n && (s[q] == '-' || s[q] == '+')) { ls = s[q] == '-'; q++; }
                    while (q < n && is_ws(s[q])) q++;
                    if (!(q + 6 <= n && strncmp(s + q, "endraw", 6) == 0)) continue;
                    q += 6;
                    while (q < n && is_ws(s[q])) q++;
                    bool ts = false;
                    if (q < n && s[q] == '-') { ts = true; q++; }
                    if (!(q + 2 <= n && s[q] == '%' && s[q + 1] == '}')) continue;
                    q += 2;
                    cend = ls ? cstart + rstrip_ws(s + cstart, m - cstart) : m;
                    strip_after = ts;
                    after = q;
                    found = true;
                    break;
                }
                if (!found) return perr(P, line, "missing {%% endraw %%}");
                if (cend > cstart && !emit(P, T_TEXT, line, s + cstart, cend - cstart)) return false;
                line += count_nl(s + j, after - j);
                j = after;
                if (!strip_after && j < n && s[j] == '\n') { j++; line++; line_starting = true; }
                else line_starting = false;
                pos = j;
                strip_next = strip_after;
                if (strip_after) { size_t w = lstrip_ws(s + pos, n - pos); line_starting = w > 0 && s[pos + w - 1] == '\n'; }
                continue;
            }
            if (!emit(P, T_BBEGIN, line, NULL, 0)) return false;
            if (!lex_tag(P, s, n, &j, &line, true, &strip_after, &plus)) return false;
        } else {
            if (!emit(P, T_VBEGIN, line, NULL, 0)) return false;
            if (!lex_tag(P, s, n, &j, &line, false, &strip_after, &plus)) return false;
        }
        line_starting = false;
        if (strip_after) {
            size_t w = lstrip_ws(s + j, n - j);
            line_starting = w > 0 && s[j + w - 1] == '\n';
        } else if (kind != '{' && !plus && j < n && s[j] == '\n') {   /* trim_blocks */
            j++;
            line++;
            line_starting = true;
        }
        strip_next = strip_after;
        pos = j;
    }
    return emit(P, T_EOF, line, NULL, 0);
}

/* ---------------------------------------------------------------- parser helpers */

static tok *cur(parser *P) { return &P->tk[P->pos]; }
static tok *peekn(parser *P, int k) { int i = P->pos + k; return &P->tk[i < P->ntk ? i : P->ntk - 1]; }
static void adv(parser *P) { if (P->pos < P->ntk - 1) P->pos++; }
static bool is_op(tok *t, const char *op) { return t->t == T_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n); }
static bool is_name(tok *t, const char *nm) { return t->t == T_NAME && t->n == strlen(nm) && !memcmp(t->p, nm, t->n); }
static bool skip_op(parser *P, const char *op) { if (is_op(cur(P), op)) { adv(P); return true; } return false; }
static bool skip_name(parser *P, const char *nm) { if (is_name(cur(P), nm)) { adv(P); return true; } return false; }

static const char *tok_desc(tok *t, char *buf, size_t n) {
    switch (t->t) {
    case T_EOF: return "end of template";
    case T_BEND: return "end of statement block";
    case T_VEND: return "end of print statement";
    case T_TEXT: return "template data";
    case T_STR: return "string";
    case T_INT: case T_FLOAT: return "number";
    default: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    }
}

static bool expect_op(parser *P, const char *op) {
    if (skip_op(P, op)) return true;
    char b[64];
    return perr(P, cur(P)->line, "expected '%s', got %s", op, tok_desc(cur(P), b, sizeof b));
}
static bool expect_bend(parser *P) {
    if (cur(P)->t == T_BEND) { adv(P); return true; }
    char b[64];
    return perr(P, cur(P)->line, "expected end of statement block, got %s", tok_desc(cur(P), b, sizeof b));
}
static const char *tok_name(parser *P, tok *t) { return ta_strndup(P->ar, t->p, t->n); }

static tpl_ex *mk(parser *P, int k, int line) {
    tpl_ex *e = ta_alloc(P->ar, sizeof *e);
    if (!e) { perr(P, line, "out of memory"); return NULL; }
    e->k = k; e->line = line;
    return e;
}

/* growable pointer arrays in the arena */
typedef struct { void **v; int n, cap; } pvec;
static bool pv_push(parser *P, pvec *pv, void *x) {
    if (pv->n == pv->cap) {
        int cap = pv->cap ? pv->cap * 2 : 4;
        void **nv = ta_alloc(P->ar, (size_t)cap * sizeof *nv);
        if (!nv) return perr(P, cur(P)->line, "out of memory");
        if (pv->n) memcpy(nv, pv->v, (size_t)pv->n * sizeof *nv);
        pv->v = nv;
        pv->cap = cap;
    }
    pv->v[pv->n++] = x;
    return true;
}

static tpl_ex *parse_expr(parser *P);
static tpl_ex *parse_or(parser *P);
static tpl_ex *parse_unary(parser *P, bool with_filter);
static tpl_ex *parse_primary(parser *P);
static tpl_ex *parse_postfix(parser *P, tpl_ex *e);

static bool parse_args(parser *P, tpl_args *a) {
    /* after '(' */
    pvec pos = {0}, kn = {0}, kv = {0};
    while (!is_op(cur(P), ")")) {
        if (pos.n + kn.n > 0 && !expect_op(P, ",")) return false;
        if (is_op(cur(P), ")")) break;
        if (cur(P)->t == T_NAME && is_op(peekn(P, 1), "=")) {
            if (!pv_push(P, &kn, (void *)tok_name(P, cur(P)))) return false;
            adv(P); adv(P);
            tpl_ex *v = parse_expr(P);
            if (!v || !pv_push(P, &kv, v)) return false;
        } else {
            if (kn.n) return perr(P, cur(P)->line, "positional argument follows keyword argument");
            tpl_ex *v = parse_expr(P);
            if (!v || !pv_push(P, &pos, v)) return false;
        }
    }
    adv(P);
    a->np = pos.n; a->pos = (tpl_ex **)pos.v;
    a->nk = kn.n; a->kn = (const char **)kn.v; a->kv = (tpl_ex **)kv.v;
    return true;
}

/* tuple without parentheses: a, b, c (used by {{ }}, set, for) */
static tpl_ex *parse_tuple(parser *P, bool condexpr) {
    int line = cur(P)->line;
    tpl_ex *first = condexpr ? parse_expr(P) : parse_or(P);
    if (!first) return NULL;
    if (!is_op(cur(P), ",")) return first;
    pvec it = {0};
    if (!pv_push(P, &it, first)) return NULL;
    while (skip_op(P, ",")) {
        tok *t = cur(P);
        if (t->t == T_BEND || t->t == T_VEND || is_op(t, ")") || is_name(t, "recursive") || is_name(t, "if")) break;
        tpl_ex *x = condexpr ? parse_expr(P) : parse_or(P);
        if (!x || !pv_push(P, &it, x)) return NULL;
    }
    tpl_ex *e = mk(P, E_TUPLE, line);
    if (!e) return NULL;
    e->items = (tpl_ex **)it.v; e->n = it.n;
    return e;
}

static tpl_ex *parse_expr(parser *P) {
    if (++P->depth > MAX_DEPTH) { perr(P, cur(P)->line, "expression nested too deeply"); return NULL; }
    tpl_ex *a = parse_or(P);
    while (a && is_name(cur(P), "if")) {
        int line = cur(P)->line;
        adv(P);
        tpl_ex *c = parse_or(P);
        if (!c) return NULL;
        tpl_ex *b = NULL;
        if (skip_name(P, "else")) { b = parse_expr(P); if (!b) return NULL; }
        tpl_ex *e = mk(P, E_COND, line);
        if (!e) return NULL;
        e->a = a; e->b = b; e->c = c;
        a = e;
    }
    P->depth--;
    return a;
}

static tpl_ex *parse_not(parser *P);
static tpl_ex *parse_and(parser *P) {
    tpl_ex *a = parse_not(P);
    while (a && is_name(cur(P), "and")) {
        int line = cur(P)->line;
        adv(P);
        tpl_ex *b = parse_not(P);
        if (!b) return NULL;
        tpl_ex *e = mk(P, E_AND, line);
        if (!e) return NULL;
        e->a = a; e->b = b; a = e;
    }
    return a;
}
static tpl_ex *parse_or(parser *P) {
    tpl_ex *a = parse_and(P);
    while (a && is_name(cur(P), "or")) {
        int line = cur(P)->line;
        adv(P);
        tpl_ex *b = parse_and(P);
        if (!b) return NULL;
        tpl_ex *e = mk(P, E_OR, line);
        if (!e) return NULL;
        e->a = a; e->b = b; a = e;
    }
    return a;
}

static tpl_ex *parse_math1(parser *P);
static tpl_ex *parse_compare(parser *P) {
    int line = cur(P)->line;
    tpl_ex *a = parse_math1(P);
    if (!a) return NULL;
    pvec ops = {0}, xs = {0};
    if (!pv_push(P, &xs, a)) return NULL;
    for (;;) {
        tok *t = cur(P);
        int op = -1;
        if (is_op(t, "==")) op = CMP_EQ;
        else if (is_op(t, "!=")) op = CMP_NE;
        else if (is_op(t, "<")) op = CMP_LT;
        else if (is_op(t, "<=")) op = CMP_LE;
        else if (is_op(t, ">")) op = CMP_GT;
        else if (is_op(t, ">=")) op = CMP_GE;
        else if (is_name(t, "in")) op = CMP_IN;
        else if (is_name(t, "not") && is_name(peekn(P, 1), "in")) { op = CMP_NOTIN; adv(P); }
        if (op < 0) break;
        adv(P);
        tpl_ex *b = parse_math1(P);
        if (!b || !pv_push(P, &ops, (void *)(intptr_t)op) || !pv_push(P, &xs, b)) return NULL;
    }
    if (xs.n == 1) return a;
    tpl_ex *e = mk(P, E_CMP, line);
    if (!e) return NULL;
    e->items = (tpl_ex **)xs.v; e->n = xs.n;
    e->ops = ta_alloc(P->ar, (size_t)ops.n * sizeof(int));
    if (!e->ops) { perr(P, line, "out of memory"); return NULL; }
    for (int i = 0; i < ops.n; i++) e->ops[i] = (int)(intptr_t)ops.v[i];
    return e;
}
static tpl_ex *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        int line = cur(P)->line;
        adv(P);
        if (++P->depth > MAX_DEPTH) { perr(P, line, "expression nested too deeply"); return NULL; }
        tpl_ex *a = parse_not(P);
        P->depth--;
        if (!a) return NULL;
        tpl_ex *e = mk(P, E_NOT, line);
        if (!e) return NULL;
        e->a = a;
        return e;
    }
    return parse_compare(P);
}

static tpl_ex *binop(parser *P, int op, tpl_ex *a, tpl_ex *b, int line) {
    tpl_ex *e = mk(P, E_BIN, line);
    if (!e) return NULL;
    e->op = op; e->a = a; e->b = b;
    return e;
}
static tpl_ex *parse_pow(parser *P) {
    tpl_ex *a = parse_unary(P, true);
    while (a && is_op(cur(P), "**")) {
        int line = cur(P)->line;
        adv(P);
        tpl_ex *b = parse_unary(P, true);
        if (!b) return NULL;
        a = binop(P, OP_POW, a, b, line);
    }
    return a;
}
static tpl_ex *parse_math2(parser *P) {
    tpl_ex *a = parse_pow(P);
    for (;;) {
        if (!a) return NULL;
        int op = is_op(cur(P), "*") ? OP_MUL : is_op(cur(P), "/") ? OP_DIV : is_op(cur(P), "//") ? OP_FLOORDIV
               : is_op(cur(P), "%") ? OP_MOD : -1;
        if (op < 0) return a;
        int line = cur(P)->line;
        adv(P);
        tpl_ex *b = parse_pow(P);
        if (!b) return NULL;
        a = binop(P, op, a, b, line);
    }
}
static tpl_ex *parse_concat(parser *P) {
    tpl_ex *a = parse_math2(P);
    while (a && is_op(cur(P), "~")) {
        int line = cur(P)->line;
        adv(P);
        tpl_ex *b = parse_math2(P);
        if (!b) return NULL;
        a = binop(P, OP_CONCAT, a, b, line);
    }
    return a;
}
static tpl_ex *parse_math1(parser *P) {
    tpl_ex *a = parse_concat(P);
    for (;;) {
        if (!a) return NULL;
        int op = is_op(cur(P), "+") ? OP_ADD : is_op(cur(P), "-") ? OP_SUB : -1;
        if (op < 0) return a;
        int line = cur(P)->line;
        adv(P);
        tpl_ex *b = parse_concat(P);
        if (!b) return NULL;
        a = binop(P, op, a, b, line);
    }
}

static const char *parse_dotted_name(parser *P) {
    if (cur(P)->t != T_NAME) {
        char b[64];
        perr(P, cur(P)->line, "expected a name, got %s", tok_desc(cur(P), b, sizeof b));
        return NULL;
    }
    tok *t = cur(P);
    adv(P);
    const char *s = tok_name(P, t);
    while (s && is_op(cur(P), ".") && peekn(P, 1)->t == T_NAME) {
        adv(P);
        tok *u = cur(P);
        adv(P);
        size_t n = strlen(s);
        char *c = ta_alloc(P->ar, n + u->n + 2);
        if (!c) return NULL;
        memcpy(c, s, n); c[n] = '.'; memcpy(c + n + 1, u->p, u->n);
        s = c;
    }
    return s;
}

static tpl_ex *parse_filter(parser *P, tpl_ex *a) {
    /* after '|' */
    int line = cur(P)->line;
    const char *nm = parse_dotted_name(P);
    if (!nm) return NULL;
    if (!tpl_filter_exists(nm)) { perr(P, line, "no filter named '%s'", nm); return NULL; }
    tpl_ex *e = mk(P, E_FILTER, line);
    if (!e) return NULL;
    e->a = a; e->name = nm;
    if (skip_op(P, "(") && !parse_args(P, &e->args)) return NULL;
    return e;
}

static tpl_ex *parse_filter_expr(parser *P, tpl_ex *a) {
    for (;;) {
        if (!a) return NULL;
        tok *t = cur(P);
        if (is_op(t, "|")) {
            adv(P);
            a = parse_filter(P, a);
        } else if (is_name(t, "is")) {
            int line = t->line;
            adv(P);
            bool neg = skip_name(P, "not");
            const char *nm = parse_dotted_name(P);
            if (!nm) return NULL;
            if (!tpl_test_exists(nm)) { perr(P, line, "no test named '%s'", nm); return NULL; }
            tpl_ex *e = mk(P, E_TEST, line);
            if (!e) return NULL;
            e->a = a; e->name = nm; e->op = neg;
            tok *u = cur(P);
            if (is_op(u, "(")) {
                adv(P);
                if (!parse_args(P, &e->args)) return NULL;
            } else if ((u->t == T_NAME || u->t == T_STR || u->t == T_INT || u->t == T_FLOAT || is_op(u, "[") ||
                        is_op(u, "{")) &&
                       !(is_name(u, "else") || is_name(u, "or") || is_name(u, "and") || is_name(u, "if") ||
                         is_name(u, "is") || is_name(u, "in") || is_name(u, "not"))) {
                tpl_ex *x = parse_primary(P);
                x = x ? parse_postfix(P, x) : NULL;
                if (!x) return NULL;
                e->args.np = 1;
                e->args.pos = ta_alloc(P->ar, sizeof(tpl_ex *));
                if (!e->args.pos) { perr(P, line, "out of memory"); return NULL; }
                e->args.pos[0] = x;
            }
            a = e;
        } else if (is_op(t, "(")) {
            int line = t->line;
            adv(P);
            tpl_ex *e = mk(P, E_CALL, line);
            if (!e) return NULL;
            e->a = a;
            if (!parse_args(P, &e->args)) return NULL;
            a = e;
        } else return a;
    }
}

static tpl_ex *parse_unary(parser *P, bool with_filter) {
    tok *t = cur(P);
    int line = t->line;
    if (++P->depth > MAX_DEPTH) { perr(P, line, "expression nested too deeply"); return NULL; }
    tpl_ex *e;
    if (is_op(t, "-") || is_op(t, "+")) {
        adv(P);
        tpl_ex *a = parse_unary(P, false);
        if (!a) return NULL;
        e = mk(P, is_op(t, "-") ? E_NEG : E_POS, line);
        if (!e) return NULL;
        e->a = a;
    } else {
        e = parse_primary(P);
        if (!e) return NULL;
    }
    e = parse_postfix(P, e);
    if (e && with_filter) e = parse_filter_expr(P, e);
    P->depth--;
    return e;
}

static tpl_ex *parse_primary(parser *P) {
    tok *t = cur(P);
    int line = t->line;
    char b[64];
    tpl_ex *e;
    switch (t->t) {
    case T_NAME:
        adv(P);
        e = mk(P, E_LIT, line);
        if (!e) return NULL;
        if (is_name(t, "true") || is_name(t, "True")) { e->lit.t = TV_BOOL; e->lit.u.b = true; }
        else if (is_name(t, "false") || is_name(t, "False")) { e->lit.t = TV_BOOL; e->lit.u.b = false; }
        else if (is_name(t, "none") || is_name(t, "None")) e->lit.t = TV_NONE;
        else { e->k = E_NAME; e->name = tok_name(P, t); }
        return e;
    case T_STR: {
        /* adjacent string literals concatenate */
        size_t total = 0;
        int k = 0;
        while (peekn(P, k)->t == T_STR) total += peekn(P, k++)->n;
        char *s = ta_alloc(P->ar, total + 1);
        e = mk(P, E_LIT, line);
        if (!s || !e) return NULL;
        size_t o = 0;
        while (cur(P)->t == T_STR) { memcpy(s + o, cur(P)->p, cur(P)->n); o += cur(P)->n; adv(P); }
        e->lit.t = TV_STR; e->lit.u.s.p = s; e->lit.u.s.n = o;
        return e;
    }
    case T_INT:
        adv(P);
        e = mk(P, E_LIT, line);
        if (e) { e->lit.t = TV_INT; e->lit.u.i = t->i; }
        return e;
    case T_FLOAT:
        adv(P);
        e = mk(P, E_LIT, line);
        if (e) { e->lit.t = TV_FLOAT; e->lit.u.f = t->f; }
        return e;
    case T_OP:
        if (is_op(t, "(")) {
            adv(P);
            if (skip_op(P, ")")) { e = mk(P, E_TUPLE, line); return e; }
            tpl_ex *x = parse_expr(P);
            if (!x) return NULL;
            if (is_op(cur(P), ",")) {
                pvec it = {0};
                if (!pv_push(P, &it, x)) return NULL;
                while (skip_op(P, ",")) {
                    if (is_op(cur(P), ")")) break;
                    tpl_ex *y = parse_expr(P);
                    if (!y || !pv_push(P, &it, y)) return NULL;
                }
                x = mk(P, E_TUPLE, line);
                if (!x) return NULL;
                x->items = (tpl_ex **)it.v; x->n = it.n;
            }
            if (!expect_op(P, ")")) return NULL;
            return x;
        }
        if (is_op(t, "[")) {
            adv(P);
            pvec it = {0};
            while (!is_op(cur(P), "]")) {
                if (it.n && !expect_op(P, ",")) return NULL;
                if (is_op(cur(P), "]")) break;
                tpl_ex *y = parse_expr(P);
                if (!y || !pv_push(P, &it, y)) return NULL;
            }
            adv(P);
            e = mk(P, E_LIST, line);
            if (!e) return NULL;
            e->items = (tpl_ex **)it.v; e->n = it.n;
            return e;
        }
        if (is_op(t, "{")) {
            adv(P);
            pvec ks = {0}, vs = {0};
            while (!is_op(cur(P), "}")) {
                if (ks.n && !expect_op(P, ",")) return NULL;
                if (is_op(cur(P), "}")) break;
                tpl_ex *k = parse_expr(P);
                if (!k || !expect_op(P, ":")) return NULL;
                tpl_ex *v = parse_expr(P);
                if (!v || !pv_push(P, &ks, k) || !pv_push(P, &vs, v)) return NULL;
            }
            adv(P);
            e = mk(P, E_DICT, line);
            if (!e) return NULL;
            e->items = (tpl_ex **)ks.v; e->vals = (tpl_ex **)vs.v; e->n = ks.n;
            return e;
        }
        /* fallthrough */
    default:
        perr(P, line, "unexpected %s", tok_desc(t, b, sizeof b));
        return NULL;
    }
}

static tpl_ex *parse_postfix(parser *P, tpl_ex *e) {
    for (;;) {
        if (!e) return NULL;
        tok *t = cur(P);
        int line = t->line;
        if (is_op(t, ".")) {
            adv(P);
            tok *u = cur(P);
            if (u->t == T_NAME) {
                adv(P);
                tpl_ex *x = mk(P, E_ATTR, line);
                if (!x) return NULL;
                x->a = e; x->name = tok_name(P, u);
                e = x;
            } else if (u->t == T_INT) {
                adv(P);
                tpl_ex *k = mk(P, E_LIT, line), *x = mk(P, E_ITEM, line);
                if (!k || !x) return NULL;
                k->lit.t = TV_INT; k->lit.u.i = u->i;
                x->a = e; x->b = k;
                e = x;
            } else {
                char b[64];
                perr(P, line, "expected attribute name after '.', got %s", tok_desc(u, b, sizeof b));
                return NULL;
            }
        } else if (is_op(t, "[")) {
            adv(P);
            tpl_ex *parts[3] = {0};
            bool slice = false;
            int k = 0;
            for (;;) {
                if (is_op(cur(P), ":")) {
                    slice = true;
                    if (++k > 2) { perr(P, line, "bad slice"); return NULL; }
                    adv(P);
                    continue;
                }
                if (is_op(cur(P), "]")) break;
                if (parts[k]) { char b[64]; perr(P, line, "expected ']', got %s", tok_desc(cur(P), b, sizeof b)); return NULL; }
                parts[k] = parse_expr(P);
                if (!parts[k]) return NULL;
            }
            adv(P);
            tpl_ex *x = mk(P, slice ? E_SLICE : E_ITEM, line);
            if (!x) return NULL;
            x->a = e;
            if (slice) { x->b = parts[0]; x->c = parts[1]; x->d = parts[2]; }
            else {
                if (!parts[0]) { perr(P, line, "empty subscript"); return NULL; }
                x->b = parts[0];
            }
            e = x;
        } else if (is_op(t, "(")) {
            adv(P);
            tpl_ex *x = mk(P, E_CALL, line);
            if (!x) return NULL;
            x->a = e;
            if (!parse_args(P, &x->args)) return NULL;
            e = x;
        } else return e;
    }
}

/* ---------------------------------------------------------------- statements */

static bool parse_body(parser *P, tpl_body *body, const char *const *ends, const char *opener, int opener_line,
                       int *which);

static tpl_st *mkst(parser *P, int k, int line) {
    tpl_st *s = ta_alloc(P->ar, sizeof *s);
    if (!s) perr(P, line, "out of memory");
    else { s->k = k; s->line = line; }
    return s;
}

static bool parse_targets(parser *P, tpl_st *s) {
    pvec nm = {0};
    bool paren = skip_op(P, "(");
    do {
        if (cur(P)->t != T_NAME) { char b[64]; return perr(P, cur(P)->line, "expected a variable name, got %s", tok_desc(cur(P), b, sizeof b)); }
        if (!pv_push(P, &nm, (void *)tok_name(P, cur(P)))) return false;
        adv(P);
    } while (skip_op(P, ","));
    if (paren && !expect_op(P, ")")) return false;
    s->names = (const char **)nm.v; s->nn = nm.n;
    return true;
}

static bool parse_filter_chain(parser *P, tpl_ex **out, int line) {
    tpl_ex *e = mk(P, E_PLACEHOLDER, line);
    if (!e) return false;
    do {
        e = parse_filter(P, e);
        if (!e) return false;
    } while (skip_op(P, "|"));
    *out = e;
    return true;
}

static bool parse_params(parser *P, tpl_st *s) {
    pvec nm = {0}, df = {0};
    if (skip_op(P, "(")) {
        while (!is_op(cur(P), ")")) {
            if (nm.n && !expect_op(P, ",")) return false;
            if (is_op(cur(P), ")")) break;
            if (cur(P)->t != T_NAME) { char b[64]; return perr(P, cur(P)->line, "expected a parameter name, got %s", tok_desc(cur(P), b, sizeof b)); }
            if (!pv_push(P, &nm, (void *)tok_name(P, cur(P)))) return false;
            adv(P);
            tpl_ex *d = NULL;
            if (skip_op(P, "=")) { d = parse_expr(P); if (!d) return false; }
            else if (df.n && df.v[df.n - 1]) return perr(P, cur(P)->line, "parameter without a default follows one with a default");
            if (!pv_push(P, &df, d)) return false;
        }
        adv(P);
    }
    s->names = (const char **)nm.v; s->defaults = (tpl_ex **)df.v; s->nn = nm.n;
    return true;
}

static tpl_st *parse_stmt(parser *P) {
    tok *t = cur(P);
    int line = t->line;
    if (t->t != T_NAME) { char b[64]; perr(P, line, "expected a statement name, got %s", tok_desc(t, b, sizeof b)); return NULL; }
    adv(P);
    int which;
    tpl_st *s;
    if (is_name(t, "if")) {
        s = mkst(P, S_IF, line);
        if (!s) return NULL;
        pvec cs = {0};
        tpl_body *bodies = NULL;
        int nb = 0, cap = 0;
        for (;;) {
            tpl_ex *c = parse_tuple(P, true);
            if (!c || !expect_bend(P) || !pv_push(P, &cs, c)) return NULL;
            if (nb == cap) {
                cap = cap ? cap * 2 : 4;
                tpl_body *nbd = ta_alloc(P->ar, (size_t)cap * sizeof *nbd);
                if (!nbd) { perr(P, line, "out of memory"); return NULL; }
                if (nb) memcpy(nbd, bodies, (size_t)nb * sizeof *nbd);
                bodies = nbd;
            }
            static const char *const ends[] = {"elif", "else", "endif", NULL};
            if (!parse_body(P, &bodies[nb++], ends, "if", line, &which)) return NULL;
            if (which == 0) continue;
            if (which == 1) {
                if (!expect_bend(P)) return NULL;
                static const char *const e2[] = {"endif", NULL};
                if (!parse_body(P, &s->else_body, e2, "if", line, &which)) return NULL;
            }
            break;
        }
        s->conds = (tpl_ex **)cs.v; s->bodies = bodies; s->nc = cs.n;
    } else if (is_name(t, "for")) {
        s = mkst(P, S_FOR, line);
        if (!s || !parse_targets(P, s)) return NULL;
        if (!skip_name(P, "in")) { char b[64]; perr(P, cur(P)->line, "expected 'in', got %s", tok_desc(cur(P), b, sizeof b)); return NULL; }
        s->e = parse_tuple(P, false);
        if (!s->e) return NULL;
        if (skip_name(P, "if")) { s->cond = parse_expr(P); if (!s->cond) return NULL; }
        if (skip_name(P, "recursive")) s->recursive = true;
        if (!expect_bend(P)) return NULL;
        static const char *const ends[] = {"else", "endfor", NULL};
        if (!parse_body(P, &s->body, ends, "for", line, &which)) return NULL;
        if (which == 0) {
            if (!expect_bend(P)) return NULL;
            static const char *const e2[] = {"endfor", NULL};
            if (!parse_body(P, &s->else_body, e2, "for", line, &which)) return NULL;
        }
    } else if (is_name(t, "set")) {
        s = mkst(P, S_SET, line);
        if (!s) return NULL;
        if (cur(P)->t == T_NAME && is_op(peekn(P, 1), ".") && peekn(P, 2)->t == T_NAME) {
            s->names = ta_alloc(P->ar, sizeof(char *));
            if (!s->names) { perr(P, line, "out of memory"); return NULL; }
            s->names[0] = tok_name(P, cur(P));
            s->nn = 1;
            adv(P); adv(P);
            s->attr = tok_name(P, cur(P));
            adv(P);
        } else if (!parse_targets(P, s)) return NULL;
        if (skip_op(P, "=")) {
            s->e = parse_tuple(P, true);
            if (!s->e) return NULL;
        } else {
            if (s->attr || s->nn != 1) { perr(P, line, "block set needs exactly one variable name"); return NULL; }
            s->k = S_SETBLOCK;
            if (skip_op(P, "|") && !parse_filter_chain(P, &s->e, line)) return NULL;
            if (!expect_bend(P)) return NULL;
            static const char *const ends[] = {"endset", NULL};
            if (!parse_body(P, &s->body, ends, "set", line, &which)) return NULL;
        }
    } else if (is_name(t, "macro")) {
        s = mkst(P, S_MACRO, line);
        if (!s) return NULL;
        if (cur(P)->t != T_NAME) { perr(P, line, "expected macro name"); return NULL; }
        s->name = tok_name(P, cur(P));
        adv(P);
        if (!is_op(cur(P), "(")) { perr(P, line, "expected '(' after macro name"); return NULL; }
        if (!parse_params(P, s) || !expect_bend(P)) return NULL;
        static const char *const ends[] = {"endmacro", NULL};
        if (!parse_body(P, &s->body, ends, "macro", line, &which)) return NULL;
    } else if (is_name(t, "call")) {
        s = mkst(P, S_CALLBLOCK, line);
        tpl_st *m = mkst(P, S_MACRO, line);
        if (!s || !m) return NULL;
        m->name = "caller";
        if (is_op(cur(P), "(") && !parse_params(P, m)) return NULL;
        s->e = parse_expr(P);
        if (!s->e) return NULL;
        if (s->e->k != E_CALL) { perr(P, line, "expected a macro call after 'call'"); return NULL; }
        if (!expect_bend(P)) return NULL;
        static const char *const ends[] = {"endcall", NULL};
        if (!parse_body(P, &m->body, ends, "call", line, &which)) return NULL;
        s->caller = m;
    } else if (is_name(t, "filter")) {
        s = mkst(P, S_FILTERBLOCK, line);
        if (!s || !parse_filter_chain(P, &s->e, line) || !expect_bend(P)) return NULL;
        static const char *const ends[] = {"endfilter", NULL};
        if (!parse_body(P, &s->body, ends, "filter", line, &which)) return NULL;
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        s = mkst(P, is_name(t, "break") ? S_BREAK : S_CONTINUE, line);
        if (!s) return NULL;
    } else if (is_name(t, "with")) {
        s = mkst(P, S_WITH, line);
        if (!s) return NULL;
        pvec nm = {0}, vs = {0};
        while (cur(P)->t == T_NAME) {
            if (!pv_push(P, &nm, (void *)tok_name(P, cur(P)))) return NULL;
            adv(P);
            if (!expect_op(P, "=")) return NULL;
            tpl_ex *v = parse_expr(P);
            if (!v || !pv_push(P, &vs, v)) return NULL;
            if (!skip_op(P, ",")) break;
        }
        s->names = (const char **)nm.v; s->defaults = (tpl_ex **)vs.v; s->nn = nm.n;
        if (!expect_bend(P)) return NULL;
        static const char *const ends[] = {"endwith", NULL};
        if (!parse_body(P, &s->body, ends, "with", line, &which)) return NULL;
    } else if (is_name(t, "generation") || is_name(t, "block")) {
        bool gen = is_name(t, "generation");
        s = mkst(P, S_BLOCK, line);
        if (!s) return NULL;
        if (!gen) { if (cur(P)->t != T_NAME) { perr(P, line, "expected block name"); return NULL; } adv(P); }
        if (!expect_bend(P)) return NULL;
        static const char *const eg[] = {"endgeneration", NULL}, *const eb[] = {"endblock", NULL};
        if (!parse_body(P, &s->body, gen ? eg : eb, gen ? "generation" : "block", line, &which)) return NULL;
    } else {
        perr(P, line, "unknown tag '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p);
        return NULL;
    }
    return s;
}

/* Parses statements until a block tag named in `ends` (then *which = its index, and the tokens
 * after the end tag's name are next: the caller consumes the rest of that tag). ends == NULL:
 * until end of template. */
static bool parse_body(parser *P, tpl_body *body, const char *const *ends, const char *opener, int opener_line,
                       int *which) {
    if (++P->depth > MAX_DEPTH) return perr(P, cur(P)->line, "blocks nested too deeply");
    pvec v = {0};
    for (;;) {
        tok *t = cur(P);
        if (t->t == T_EOF) {
            if (ends) {
                return perr(P, t->line, "unexpected end of template: '%s' block opened at line %d was never closed (expected '%s')",
                            opener, opener_line, ends[ends[1] ? (ends[2] ? 2 : 1) : 0]);
            }
            break;
        }
        if (t->t == T_TEXT) {
            tpl_st *s = mkst(P, S_TEXT, t->line);
            if (!s) return false;
            s->text = t->p; s->tlen = t->n;
            if (!pv_push(P, &v, s)) return false;
            adv(P);
        } else if (t->t == T_VBEGIN) {
            adv(P);
            tpl_st *s = mkst(P, S_OUT, t->line);
            if (!s) return false;
            s->e = parse_tuple(P, true);
            if (!s->e) return false;
            if (cur(P)->t != T_VEND) { char b[64]; return perr(P, cur(P)->line, "expected '}}', got %s", tok_desc(cur(P), b, sizeof b)); }
            adv(P);
            if (!pv_push(P, &v, s)) return false;
        } else if (t->t == T_BBEGIN) {
            tok *nm = peekn(P, 1);
            if (ends && nm->t == T_NAME) {
                int k = -1;
                for (int i = 0; ends[i]; i++) if (is_name(nm, ends[i])) { k = i; break; }
                if (k >= 0) {
                    adv(P); adv(P);
                    *which = k;
                    if (!strncmp(ends[k], "end", 3) && !expect_bend(P)) return false;
                    break;
                }
            }
            if (nm->t == T_NAME && ((nm->n >= 3 && !strncmp(nm->p, "end", 3)) || is_name(nm, "elif") || is_name(nm, "else"))) {
                if (ends)
                    return perr(P, nm->line, "unexpected '%.*s' inside '%s' block opened at line %d", (int)(nm->n > 40 ? 40 : nm->n), nm->p, opener, opener_line);
                return perr(P, nm->line, "unexpected '%.*s' outside any block", (int)(nm->n > 40 ? 40 : nm->n), nm->p);
            }
            adv(P);
            tpl_st *s = parse_stmt(P);
            if (!s) return false;
            if (s->k != S_IF && s->k != S_FOR && s->k != S_SETBLOCK && s->k != S_MACRO && s->k != S_CALLBLOCK &&
                s->k != S_FILTERBLOCK && s->k != S_WITH && s->k != S_BLOCK && !expect_bend(P))
                return false;
            if (!pv_push(P, &v, s)) return false;
        } else {
            char b[64];
            return perr(P, t->line, "unexpected %s", tok_desc(t, b, sizeof b));
        }
    }
    body->v = (tpl_st **)v.v;
    body->n = v.n;
    P->depth--;
    return true;
}

mx_status tpl_parse(const char *src, mx_template *t) {
    parser P = {0};
    P.ar = &t->ar;
    int which;
    bool ok = lex(&P, src) && parse_body(&P, &t->root, NULL, NULL, 0, &which);
    free(P.tk);
    if (!ok) return mx_errorf(MX_ERR_FORMAT, "%s", P.err[0] ? P.err : "template syntax error");
    return MX_OK;
}
