/* template/value.c: the interpreter's memory arena, string builder, and value conversions that
 * must match Python byte for byte: str(), repr(), float repr and json.dumps as transformers calls
 * it. It does not evaluate anything (see eval.c). */
#include "template/tpl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */

void *ta_alloc(tpl_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    tpl_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->limit && a->total + cap > a->limit) return NULL;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->total += cap;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *ta_strndup(tpl_arena *a, const char *s, size_t n) {
    char *p = ta_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void ta_free(tpl_arena *a) {
    tpl_chunk *c = a->head;
    while (c) { tpl_chunk *nx = c->next; free(c); c = nx; }
    a->head = NULL;
    a->total = 0;
}

/* ---------------------------------------------------------------- string builder */

_Thread_local size_t tpl_sb_limit;

void sb_put(tpl_sb *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    size_t lim = tpl_sb_limit ? tpl_sb_limit : ((size_t)1 << 30);
    if (n > lim || b->n > lim - n) { b->oom = true; return; }
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n + 1) {
            if (cap > ((size_t)1 << 40)) { b->oom = true; return; }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void sb_puts(tpl_sb *b, const char *s) { sb_put(b, s, strlen(s)); }

void sb_printf(tpl_sb *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { sb_put(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = true; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}

void sb_free(tpl_sb *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }

/* ---------------------------------------------------------------- utf-8 */

uint32_t u8_next(const char *s, size_t n, size_t *adv) {
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0) { *adv = 0; return 0; }
    unsigned c = p[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (len > n) len = 1;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) { *adv = 1; return c; }
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    *adv = len;
    return cp;
}

size_t u8_len(const char *p, size_t n) {
    size_t k = 0, i = 0;
    while (i < n) { size_t a; u8_next(p + i, n - i, &a); i += a; k++; }
    return k;
}

bool py_isspace(uint32_t c) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return true;
    if (c < 0x80) return false;
    return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
           c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* ---------------------------------------------------------------- numbers */

void tv_fmt_float(double f, char *buf, size_t n) {
    if (isnan(f)) { snprintf(buf, n, "nan"); return; }
    if (isinf(f)) { snprintf(buf, n, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { snprintf(buf, n, signbit(f) ? "-0.0" : "0.0"); return; }
    char e[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    char digits[40];
    int nd = 0;
    const char *p = e;
    bool neg = false;
    if (*p == '-') { neg = true; p++; }
    for (; *p && *p != 'e'; p++) if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char out[80];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -5 + 1 && exp < 16) {   /* Python repr: fixed when -4 <= exp < 16 */
        if (exp < 0) {
            out[o++] = '0'; out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1) for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
            else out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) { out[o++] = '.'; for (int i = 1; i < nd; i++) out[o++] = digits[i]; }
        o += snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(buf, n, "%s", out);
}

/* ---------------------------------------------------------------- str / repr */

const char *tv_type_name(const tv *v) {
    switch (v->t) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST: return v->u.l->tuple ? "tuple" : "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_FUNC: return "function";
    case TV_LOOP: return "LoopContext";
    }
    return "object";
}

bool tv_truthy(const tv *v) {
    switch (v->t) {
    case TV_UNDEF: case TV_NONE: return false;
    case TV_BOOL: return v->u.b;
    case TV_INT: return v->u.i != 0;
    case TV_FLOAT: return v->u.f != 0;
    case TV_STR: return v->u.s.n != 0;
    case TV_LIST: return v->u.l->gen || v->u.l->n != 0;
    case TV_DICT: return v->u.d->n != 0;
    default: return true;
    }
}

void tv_write_pystr_repr(tpl_sb *b, const char *p, size_t n) {
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    sb_put(b, &q, 1);
    size_t i = 0;
    while (i < n) {
        size_t a;
        uint32_t c = u8_next(p + i, n - i, &a);
        if (c == (uint32_t)q || c == '\\') { sb_put(b, "\\", 1); sb_put(b, p + i, 1); }
        else if (c == '\n') sb_puts(b, "\\n");
        else if (c == '\r') sb_puts(b, "\\r");
        else if (c == '\t') sb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0)) sb_printf(b, "\\x%02x", c);
        else sb_put(b, p + i, a);
        i += a;
    }
    sb_put(b, &q, 1);
}

static void write_str_d(tpl_sb *b, const tv *v, int depth);
static void write_repr_d(tpl_sb *b, const tv *v, int depth) {
    if (v->t == TV_STR) tv_write_pystr_repr(b, v->u.s.p, v->u.s.n);
    else if (v->t == TV_UNDEF) sb_puts(b, "Undefined");
    else write_str_d(b, v, depth);
}

/* depth guards self-referential containers (a list appended to itself) */
static void write_seq(tpl_sb *b, const tv *v, int depth) {
    if (depth > 100) { sb_puts(b, v->t == TV_LIST ? "[...]" : "{...}"); return; }
    if (v->t == TV_LIST) {
        tv_list *l = v->u.l;
        sb_puts(b, l->tuple ? "(" : "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) sb_puts(b, ", ");
            write_repr_d(b, &l->v[i], depth + 1);
        }
        if (l->tuple && l->n == 1) sb_puts(b, ",");
        sb_puts(b, l->tuple ? ")" : "]");
    } else {
        tv_dict *d = v->u.d;
        sb_puts(b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) sb_puts(b, ", ");
            write_repr_d(b, &d->k[i], depth + 1);
            sb_puts(b, ": ");
            write_repr_d(b, &d->v[i], depth + 1);
        }
        sb_puts(b, "}");
    }
}

static void write_str_d(tpl_sb *b, const tv *v, int depth) {
    char tmp[64];
    switch (v->t) {
    case TV_UNDEF: return;
    case TV_NONE: sb_puts(b, "None"); return;
    case TV_BOOL: sb_puts(b, v->u.b ? "True" : "False"); return;
    case TV_INT: sb_printf(b, "%lld", (long long)v->u.i); return;
    case TV_FLOAT: tv_fmt_float(v->u.f, tmp, sizeof tmp); sb_puts(b, tmp); return;
    case TV_STR: sb_put(b, v->u.s.p, v->u.s.n); return;
    case TV_LIST: if (v->u.l->gen) { sb_puts(b, "<generator object>"); return; } /* fallthrough */
    case TV_DICT: write_seq(b, v, depth); return;
    case TV_NS: sb_puts(b, "<Namespace "); { tv d = *v; d.t = TV_DICT; write_seq(b, &d, depth); } sb_puts(b, ">"); return;
    case TV_FUNC: sb_puts(b, "<function>"); return;
    case TV_LOOP: sb_puts(b, "<LoopContext>"); return;
    }
}

void tv_write_str(tpl_sb *b, const tv *v) { write_str_d(b, v, 0); }
void tv_write_repr(tpl_sb *b, const tv *v) { write_repr_d(b, v, 0); }

/* ---------------------------------------------------------------- json.dumps */

static void json_str(tpl_sb *b, const char *p, size_t n, bool ensure_ascii) {
    sb_put(b, "\"", 1);
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char tmp[16];
        size_t adv = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) { snprintf(tmp, sizeof tmp, "\\u%04x", c); esc = tmp; }
        else if (c >= 0x80 && ensure_ascii) {
            uint32_t cp = u8_next(p + i, n - i, &adv);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            esc = tmp;
        }
        if (esc) {
            sb_put(b, p + i - run, run);
            run = 0;
            sb_puts(b, esc);
        } else run += adv;
        i += adv;
    }
    sb_put(b, p + n - run, run);
    sb_put(b, "\"", 1);
}

static void json_newline(tpl_sb *b, const char *indent, int level) {
    sb_put(b, "\n", 1);
    for (int i = 0; i < level; i++) sb_puts(b, indent);
}

static int key_cmp(const void *x, const void *y) {
    const tv *a = *(const tv *const *)x, *b = *(const tv *const *)y;
    size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
    int c = memcmp(a->u.s.p, b->u.s.p, n);
    if (c) return c;
    return a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
}

bool tv_write_json(tpl_sb *b, const tv *v, bool ensure_ascii, const char *indent, int level,
                   const char *item_sep, const char *key_sep, bool sort_keys, const char **why) {
    char tmp[64];
    if (level > 200) { *why = "nesting too deep for tojson"; return false; }
    switch (v->t) {
    case TV_NONE: sb_puts(b, "null"); return true;
    case TV_BOOL: sb_puts(b, v->u.b ? "true" : "false"); return true;
    case TV_INT: sb_printf(b, "%lld", (long long)v->u.i); return true;
    case TV_FLOAT:
        if (isnan(v->u.f)) sb_puts(b, "NaN");
        else if (isinf(v->u.f)) sb_puts(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else { tv_fmt_float(v->u.f, tmp, sizeof tmp); sb_puts(b, tmp); }
        return true;
    case TV_STR: json_str(b, v->u.s.p, v->u.s.n, ensure_ascii); return true;
    case TV_LIST: {
        tv_list *l = v->u.l;
        if (l->gen) { *why = "Object of type generator is not JSON serializable"; return false; }
        if (l->n == 0) { sb_puts(b, "[]"); return true; }
        sb_puts(b, "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) sb_puts(b, item_sep);
            if (indent) json_newline(b, indent, level + 1);
            if (!tv_write_json(b, &l->v[i], ensure_ascii, indent, level + 1, item_sep, key_sep, sort_keys, why)) return false;
        }
        if (indent) json_newline(b, indent, level);
        sb_puts(b, "]");
        return true;
    }
    case TV_DICT: {
        tv_dict *d = v->u.d;
        if (d->n == 0) { sb_puts(b, "{}"); return true; }
        size_t *order = malloc(d->n * sizeof *order);
        if (!order) { *why = "out of memory"; return false; }
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        bool all_str = true;
        for (size_t i = 0; i < d->n; i++) if (d->k[i].t != TV_STR) all_str = false;
        if (sort_keys && all_str && d->n > 1) {
            const tv **ks = malloc(d->n * sizeof *ks);
            if (!ks) { free(order); *why = "out of memory"; return false; }
            for (size_t i = 0; i < d->n; i++) ks[i] = &d->k[i];
            qsort(ks, d->n, sizeof *ks, key_cmp);
            for (size_t i = 0; i < d->n; i++) order[i] = (size_t)(ks[i] - d->k);
            free(ks);
        }
        sb_puts(b, "{");
        bool ok = true;
        for (size_t j = 0; j < d->n && ok; j++) {
            size_t i = order[j];
            if (j) sb_puts(b, item_sep);
            if (indent) json_newline(b, indent, level + 1);
            const tv *k = &d->k[i];
            if (k->t == TV_STR) json_str(b, k->u.s.p, k->u.s.n, ensure_ascii);
            else if (k->t == TV_INT || k->t == TV_FLOAT || k->t == TV_BOOL || k->t == TV_NONE) {
                tpl_sb kb = {0};
                if (!tv_write_json(&kb, k, ensure_ascii, NULL, 0, ", ", ": ", false, why)) { sb_free(&kb); ok = false; break; }
                sb_puts(b, "\"");
                if (kb.p) sb_put(b, kb.p, kb.n);
                sb_puts(b, "\"");
                sb_free(&kb);
            } else { *why = "keys must be str, int, float, bool or None"; ok = false; break; }
            sb_puts(b, key_sep);
            ok = tv_write_json(b, &d->v[i], ensure_ascii, indent, level + 1, item_sep, key_sep, sort_keys, why);
        }
        free(order);
        if (!ok) return false;
        if (indent) json_newline(b, indent, level);
        sb_puts(b, "}");
        return true;
    }
    default:
        *why = v->t == TV_UNDEF ? "Object of type Undefined is not JSON serializable"
             : v->t == TV_NS ? "Object of type Namespace is not JSON serializable"
                             : "object is not JSON serializable";
        return false;
    }
}
