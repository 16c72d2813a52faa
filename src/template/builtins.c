/* template/builtins.c: what templates call by name: global functions (range, dict, namespace,
 * raise_exception, strftime_now, cycler-less subset), methods of str/dict/list/loop, jinja2's
 * filters (with transformers' tojson) and tests. Semantics follow Python/jinja2 3.1; names not
 * listed here are reported as unknown at parse time. Not the evaluator (eval.c). */
#include "template/eval.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#define MAX_RANGE 100000

static const tv *arg(const cargs *a, int i, const char *name) {
    if (i >= 0 && i < a->np) return &a->pos[i];
    if (name) for (int k = 0; k < a->nk; k++) if (!strcmp(a->kn[k], name)) return &a->kv[k];
    return NULL;
}
static bool arg_true(const cargs *a, int i, const char *name, bool dflt) {
    const tv *v = arg(a, i, name);
    return v ? tv_truthy(v) : dflt;
}
static bool need_str(tctx *c, int line, const tv *v, const char *what) {
    if (v->t == TV_STR) return true;
    if (v->t == TV_UNDEF) return undef_fail(c, line, v);
    return tfail(c, line, "%s: expected a string, got '%s'", what, tv_type_name(v));
}
static bool need_int(tctx *c, int line, const tv *v, const char *what, int64_t *out) {
    *out = 0;
    if (v->t == TV_INT) { *out = v->u.i; return true; }
    if (v->t == TV_BOOL) { *out = v->u.b; return true; }
    return tfail(c, line, "%s: expected an integer, got '%s'", what, tv_type_name(v));
}

static tv mkfunc(tctx *c, const char *name) {
    tv_func *f = ta_alloc(&c->ar, sizeof *f);
    tv v = {0};
    if (!f) { toom(c, 0); return v; }
    f->kind = FK_BUILTIN;
    f->name = name;
    v.t = TV_FUNC;
    v.u.fn = f;
    return v;
}

static const char *const globals[] = {"range", "dict", "namespace", "raise_exception", "strftime_now", NULL};

bool builtin_global(tctx *c, const char *name, tv *out) {
    for (int i = 0; globals[i]; i++)
        if (!strcmp(globals[i], name)) { *out = mkfunc(c, globals[i]); return !c->failed; }
    return false;
}

/* ---------------------------------------------------------------- string helpers */

static bool is_in_chars(uint32_t cp, const tv *chars) {
    size_t i = 0;
    while (i < chars->u.s.n) {
        size_t a;
        if (u8_next(chars->u.s.p + i, chars->u.s.n - i, &a) == cp) return true;
        i += a;
    }
    return false;
}

/* Python str.strip family; chars NULL/None = whitespace */
static void strip_span(const char *p, size_t n, const tv *chars, bool left, bool right, size_t *b, size_t *e) {
    size_t i = 0, j = n;
    if (left) {
        while (i < n) {
            size_t a;
            uint32_t cp = u8_next(p + i, n - i, &a);
            if (chars ? !is_in_chars(cp, chars) : !py_isspace(cp)) break;
            i += a;
        }
    }
    if (right) {
        while (j > i) {
            size_t k = j - 1;
            while (k > i && ((unsigned char)p[k] & 0xc0) == 0x80) k--;
            size_t a;
            uint32_t cp = u8_next(p + k, j - k, &a);
            if (chars ? !is_in_chars(cp, chars) : !py_isspace(cp)) break;
            j = k;
        }
    }
    *b = i;
    *e = j;
}

static bool do_strip(tctx *c, int line, const tv *s, const tv *chars, bool l, bool r, tv *out) {
    if (!need_str(c, line, s, "strip")) return false;
    if (chars && chars->t == TV_NONE) chars = NULL;
    if (chars && !need_str(c, line, chars, "strip")) return false;
    size_t b, e;
    strip_span(s->u.s.p, s->u.s.n, chars, l, r, &b, &e);
    *out = tv_strref(s->u.s.p + b, e - b);
    return true;
}

typedef enum { CASE_UPPER, CASE_LOWER, CASE_TITLE_PY, CASE_CAPITALIZE, CASE_SWAP } casemode;

static bool is_cased(uint32_t cp) {
    return utf8proc_toupper((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp ||
           utf8proc_tolower((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp;
}

/* Append code point r, the case mapping of cp (whose a bytes are at src): the original bytes
 * when unchanged, else r's UTF-8. */
static void put_mapped(tpl_sb *b, const char *src, size_t a, uint32_t cp, utf8proc_int32_t r) {
    if ((uint32_t)r == cp) { sb_put(b, src, a); return; }
    utf8proc_uint8_t tmp[8];
    utf8proc_ssize_t k = utf8proc_encode_char(r, tmp);
    sb_put(b, (const char *)tmp, (size_t)k);
}

static bool do_case(tctx *c, const tv *s, casemode m, tv *out) {
    tpl_sb b = {0};
    size_t i = 0;
    bool prev_cased = false, first = true;
    while (i < s->u.s.n) {
        size_t a;
        uint32_t cp = u8_next(s->u.s.p + i, s->u.s.n - i, &a);
        utf8proc_int32_t r = (utf8proc_int32_t)cp;
        switch (m) {
        case CASE_UPPER: r = utf8proc_toupper(r); break;
        case CASE_LOWER: r = utf8proc_tolower(r); break;
        case CASE_CAPITALIZE: r = first ? utf8proc_totitle(r) : utf8proc_tolower(r); break;
        case CASE_SWAP: r = utf8proc_toupper(r) != r ? utf8proc_toupper(r) : utf8proc_tolower(r); break;
        case CASE_TITLE_PY: {
            bool cased = is_cased(cp);
            r = prev_cased ? utf8proc_tolower(r) : utf8proc_totitle(r);
            prev_cased = cased;
            break;
        }
        }
        first = false;
        if (cp == 0xdf && (m == CASE_UPPER || m == CASE_SWAP)) {
            sb_puts(&b, "SS");   /* Python's full case mapping of U+00DF */
            i += a;
            continue;
        }
        put_mapped(&b, s->u.s.p + i, a, cp, r);
        i += a;
    }
    if (!b.p) { *out = tv_strref("", 0); return true; }
    return tv_from_sb(c, &b, out);
}

/* jinja's title filter: capitalize each word after [-\s({\[<]+ */
static bool do_title_filter(tctx *c, const tv *s, tv *out) {
    tpl_sb b = {0};
    size_t i = 0;
    bool at_start = true;
    while (i < s->u.s.n) {
        size_t a;
        uint32_t cp = u8_next(s->u.s.p + i, s->u.s.n - i, &a);
        bool sep = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        utf8proc_int32_t r = (utf8proc_int32_t)cp;
        if (sep) at_start = true;
        else { r = at_start ? utf8proc_toupper(r) : utf8proc_tolower(r); at_start = false; }
        put_mapped(&b, s->u.s.p + i, a, cp, r);
        i += a;
    }
    if (!b.p) { *out = tv_strref("", 0); return true; }
    return tv_from_sb(c, &b, out);
}

static bool do_replace(tctx *c, int line, const tv *s, const tv *old, const tv *nw, const tv *count, tv *out) {
    if (!need_str(c, line, s, "replace") || !need_str(c, line, old, "replace") || !need_str(c, line, nw, "replace")) return false;
    int64_t cnt = -1;
    if (count && count->t != TV_NONE && !need_int(c, line, count, "replace", &cnt)) return false;
    tpl_sb b = {0};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0;
    int64_t done = 0;
    if (old->u.s.n == 0) {
        while (i <= n) {
            if (cnt < 0 || done < cnt) { sb_put(&b, nw->u.s.p, nw->u.s.n); done++; }
            if (i == n) break;
            size_t a;
            u8_next(p + i, n - i, &a);
            sb_put(&b, p + i, a);
            i += a;
        }
    } else {
        while (i < n) {
            const char *f = (cnt < 0 || done < cnt) ? memmem(p + i, n - i, old->u.s.p, old->u.s.n) : NULL;
            if (!f) { sb_put(&b, p + i, n - i); break; }
            sb_put(&b, p + i, (size_t)(f - (p + i)));
            sb_put(&b, nw->u.s.p, nw->u.s.n);
            i = (size_t)(f - p) + old->u.s.n;
            done++;
        }
    }
    if (!b.p) { *out = tv_strref("", 0); return true; }
    return tv_from_sb(c, &b, out);
}

static bool do_split(tctx *c, int line, const tv *s, const tv *sep, const tv *maxs, bool right, tv *out) {
    if (!need_str(c, line, s, "split")) return false;
    if (sep && sep->t == TV_NONE) sep = NULL;
    if (sep && !need_str(c, line, sep, "split")) return false;
    if (sep && sep->u.s.n == 0) return tfail(c, line, "empty separator");
    int64_t maxsplit = -1;
    if (maxs && !need_int(c, line, maxs, "split", &maxsplit)) return false;
    tv_list *l = list_new(c, 0);
    if (!l) return toom(c, line);
    const char *p = s->u.s.p;
    size_t n = s->u.s.n;
    if (!right || maxsplit < 0) {
        if (sep) {
            size_t i = 0;
            int64_t k = 0;
            for (;;) {
                const char *f = (maxsplit < 0 || k < maxsplit) ? memmem(p + i, n - i, sep->u.s.p, sep->u.s.n) : NULL;
                if (!f) { if (!list_push(c, l, tv_strref(p + i, n - i))) return false; break; }
                if (!list_push(c, l, tv_strref(p + i, (size_t)(f - (p + i))))) return false;
                i = (size_t)(f - p) + sep->u.s.n;
                k++;
            }
        } else {
            size_t i = 0;
            int64_t k = 0;
            for (;;) {
                while (i < n) { size_t a; if (!py_isspace(u8_next(p + i, n - i, &a))) break; i += a; }
                if (i >= n) break;
                if (maxsplit >= 0 && k >= maxsplit) {
                    size_t b, e;
                    strip_span(p + i, n - i, NULL, false, true, &b, &e);
                    if (!list_push(c, l, tv_strref(p + i, e))) return false;
                    break;
                }
                size_t j = i;
                while (j < n) { size_t a; if (py_isspace(u8_next(p + j, n - j, &a))) break; j += a; }
                if (!list_push(c, l, tv_strref(p + i, j - i))) return false;
                k++;
                i = j;
            }
        }
    } else {
        /* rsplit with a limit: split from the right, then reverse */
        if (!sep) return tfail(c, line, "rsplit with maxsplit needs a separator");
        size_t j = n;
        int64_t k = 0;
        for (;;) {
            const char *f = NULL;
            if (k < maxsplit && j >= sep->u.s.n)
                for (size_t q = j - sep->u.s.n + 1; q-- > 0;)
                    if (!memcmp(p + q, sep->u.s.p, sep->u.s.n)) { f = p + q; break; }
            if (!f) { if (!list_push(c, l, tv_strref(p, j))) return false; break; }
            if (!list_push(c, l, tv_strref(f + sep->u.s.n, j - (size_t)(f - p) - sep->u.s.n))) return false;
            j = (size_t)(f - p);
            k++;
        }
        for (size_t a = 0, b = l->n ? l->n - 1 : 0; a < b; a++, b--) { tv t = l->v[a]; l->v[a] = l->v[b]; l->v[b] = t; }
    }
    *out = tv_list_of(l);
    return true;
}

/* Python str.splitlines() */
static bool do_splitlines(tctx *c, const tv *s, bool keepends, tv_list **out) {
    tv_list *l = list_new(c, 0);
    if (!l) return toom(c, 0);
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0, start = 0;
    while (i < n) {
        size_t a;
        uint32_t cp = u8_next(p + i, n - i, &a);
        bool br = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
                  cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (br) {
            size_t end = i, next = i + a;
            if (cp == '\r' && next < n && p[next] == '\n') next++;
            if (!list_push(c, l, tv_strref(p + start, (keepends ? next : end) - start))) return false;
            start = i = next;
        } else i += a;
    }
    if (start < n && !list_push(c, l, tv_strref(p + start, n - start))) return false;
    *out = l;
    return true;
}

static bool str_pred(const tv *s, int kind) {
    if (s->u.s.n == 0) return false;
    size_t i = 0;
    bool any_cased = false;
    while (i < s->u.s.n) {
        size_t a;
        uint32_t cp = u8_next(s->u.s.p + i, s->u.s.n - i, &a);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        switch (kind) {
        case 0: if (!digit) return false; break;
        case 1: if (!alpha) return false; break;
        case 2: if (!alpha && !digit && cat != UTF8PROC_CATEGORY_NL && cat != UTF8PROC_CATEGORY_NO) return false; break;
        case 3: if (!py_isspace(cp)) return false; break;
        case 4: if (utf8proc_toupper((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp) { if (cat == UTF8PROC_CATEGORY_LL) any_cased = true; } else if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return false; break;
        case 5: if (utf8proc_tolower((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp) { if (cat == UTF8PROC_CATEGORY_LU) any_cased = true; } else if (cat == UTF8PROC_CATEGORY_LL) return false; break;
        }
        i += a;
    }
    return kind >= 4 ? any_cased : true;
}

/* str.format: {} {0} {name}, {{ }} escapes; no format specs beyond none/!s/!r */
static bool str_format(tctx *c, int line, const tv *fmt, const cargs *a, tv *out) {
    tpl_sb b = {0};
    const char *p = fmt->u.s.p;
    size_t n = fmt->u.s.n, i = 0;
    int autoi = 0;
    while (i < n) {
        if (p[i] == '{' && i + 1 < n && p[i + 1] == '{') { sb_put(&b, "{", 1); i += 2; continue; }
        if (p[i] == '}' && i + 1 < n && p[i + 1] == '}') { sb_put(&b, "}", 1); i += 2; continue; }
        if (p[i] == '}') { sb_free(&b); return tfail(c, line, "Single '}' encountered in format string"); }
        if (p[i] != '{') { sb_put(&b, p + i, 1); i++; continue; }
        size_t j = i + 1;
        while (j < n && p[j] != '}') j++;
        if (j >= n) { sb_free(&b); return tfail(c, line, "Single '{' encountered in format string"); }
        const char *f = p + i + 1;
        size_t fl = j - i - 1, nl = 0;
        while (nl < fl && f[nl] != '!' && f[nl] != ':') nl++;
        bool repr = nl + 1 < fl && f[nl] == '!' && f[nl + 1] == 'r';
        if (nl < fl && f[nl] == ':' && fl - nl > 1) { sb_free(&b); return tfail(c, line, "format specs are not supported in str.format"); }
        const tv *v = NULL;
        if (nl == 0) v = arg(a, autoi++, NULL);
        else if (f[0] >= '0' && f[0] <= '9') v = arg(a, atoi(f), NULL);
        else {
            for (int k = 0; k < a->nk; k++) if (strlen(a->kn[k]) == nl && !memcmp(a->kn[k], f, nl)) v = &a->kv[k];
        }
        if (!v) { sb_free(&b); return tfail(c, line, "str.format: missing argument for '{%.*s}'", (int)(fl > 40 ? 40 : fl), f); }
        if (repr) tv_write_repr(&b, v); else tv_write_str(&b, v);
        i = j + 1;
    }
    if (!b.p) { *out = tv_strref("", 0); return true; }
    return tv_from_sb(c, &b, out);
}

bool py_percent_format(tctx *c, int line, const tv *fmt, const tv *args, tv *out) {
    tpl_sb b = {0};
    const char *p = fmt->u.s.p;
    size_t n = fmt->u.s.n, i = 0;
    size_t ai = 0;
    const tv_list *al = (args->t == TV_LIST && args->u.l->tuple) ? args->u.l : NULL;
    const tv_dict *ad = args->t == TV_DICT ? args->u.d : NULL;
    bool used_single = false;
    while (i < n) {
        if (p[i] != '%') { sb_put(&b, p + i, 1); i++; continue; }
        i++;
        if (i < n && p[i] == '%') { sb_put(&b, "%", 1); i++; continue; }
        const tv *v = NULL;
        if (i < n && p[i] == '(') {
            size_t j = i + 1;
            while (j < n && p[j] != ')') j++;
            if (j >= n || !ad) { sb_free(&b); return tfail(c, line, "format requires a mapping"); }
            v = dict_gets((tv_dict *)ad, p + i + 1, j - i - 1);
            if (!v) { sb_free(&b); return tfail(c, line, "format: missing key '%.*s'", (int)(j - i - 1), p + i + 1); }
            i = j + 1;
        }
        char spec[32];
        size_t sl = 0;
        spec[sl++] = '%';
        while (i < n && p[i] && strchr("-+ #0", p[i]) && sl < 10) spec[sl++] = p[i++];
        int wd = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9') { if (++wd > 4) { sb_free(&b); return tfail(c, line, "format width too large"); } spec[sl++] = p[i++]; }
        if (i < n && p[i] == '.') {
            spec[sl++] = p[i++];
            wd = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9') { if (++wd > 3) { sb_free(&b); return tfail(c, line, "format precision too large"); } spec[sl++] = p[i++]; }
        }
        if (i >= n) { sb_free(&b); return tfail(c, line, "incomplete format"); }
        char conv = p[i++];
        if (!v) {
            if (al) { if (ai >= al->n) { sb_free(&b); return tfail(c, line, "not enough arguments for format string"); } v = &al->v[ai++]; }
            else { if (used_single) { sb_free(&b); return tfail(c, line, "not enough arguments for format string"); } v = args; used_single = true; }
        }
        switch (conv) {
        case 's': case 'r': {
            tpl_sb t = {0};
            if (conv == 'r') tv_write_repr(&t, v); else tv_write_str(&t, v);
            spec[sl++] = 's'; spec[sl] = 0;
            if (sl == 2) sb_put(&b, t.p ? t.p : "", t.n);
            else sb_printf(&b, spec, t.p ? t.p : "");
            sb_free(&t);
            break;
        }
        case 'd': case 'i': case 'x': case 'X': case 'o': {
            int64_t iv;
            if (v->t == TV_FLOAT) iv = (int64_t)v->u.f;
            else if (v->t == TV_INT || v->t == TV_BOOL) iv = v->t == TV_INT ? v->u.i : v->u.b;
            else { sb_free(&b); return tfail(c, line, "%%%c format: a number is required, not %s", conv, tv_type_name(v)); }
            spec[sl++] = 'l'; spec[sl++] = 'l'; spec[sl++] = conv == 'i' ? 'd' : conv; spec[sl] = 0;
            sb_printf(&b, spec, (long long)iv);
            break;
        }
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
            if (v->t != TV_FLOAT && v->t != TV_INT && v->t != TV_BOOL) { sb_free(&b); return tfail(c, line, "%%%c format: a number is required, not %s", conv, tv_type_name(v)); }
            double f = v->t == TV_FLOAT ? v->u.f : v->t == TV_INT ? (double)v->u.i : v->u.b;
            spec[sl++] = conv; spec[sl] = 0;
            sb_printf(&b, spec, f);
            break;
        }
        default:
            sb_free(&b);
            return tfail(c, line, "unsupported format character '%c'", conv);
        }
    }
    /* Python skips the leftover check for mapping-like arguments (dicts, lists) */
    if ((al && ai < al->n) || (!al && !ad && !used_single && !(args->t == TV_LIST && !args->u.l->tuple))) { sb_free(&b); return tfail(c, line, "not all arguments converted during string formatting"); }
    if (!b.p) { *out = tv_strref("", 0); return true; }
    return tv_from_sb(c, &b, out);
}

/* ---------------------------------------------------------------- sorting (stable merge sort) */

typedef struct { tctx *c; int line; bool ci; bool failed; } sortctx;

static int key_cmp(sortctx *s, const tv *a, const tv *b) {
    if (s->failed) return 0;
    tv x = *a, y = *b;
    if (s->ci) {
        if (x.t == TV_STR && !do_case(s->c, a, CASE_LOWER, &x)) { s->failed = true; return 0; }
        if (y.t == TV_STR && !do_case(s->c, b, CASE_LOWER, &y)) { s->failed = true; return 0; }
    }
    int r;
    if (!tv_order(&x, &y, &r)) {
        if (x.t == TV_NONE && y.t == TV_NONE) return 0;
        tfail(s->c, s->line, "'<' not supported between instances of '%s' and '%s'", tv_type_name(&x), tv_type_name(&y));
        s->failed = true;
        return 0;
    }
    return r;
}

static void msort(sortctx *s, tv *keys, tv *vals, tv *tk, tv *tvl, size_t n) {
    if (n < 2 || s->failed) return;
    size_t m = n / 2;
    msort(s, keys, vals, tk, tvl, m);
    msort(s, keys + m, vals + m, tk, tvl, n - m);
    size_t i = 0, j = m, k = 0;
    while (i < m && j < n) {
        if (key_cmp(s, &keys[j], &keys[i]) < 0) { tk[k] = keys[j]; tvl[k++] = vals[j++]; }
        else { tk[k] = keys[i]; tvl[k++] = vals[i++]; }
    }
    while (i < m) { tk[k] = keys[i]; tvl[k++] = vals[i++]; }
    while (j < n) { tk[k] = keys[j]; tvl[k++] = vals[j++]; }
    memcpy(keys, tk, n * sizeof *keys);
    memcpy(vals, tvl, n * sizeof *vals);
}

/* attribute getter: "a.b.0" as jinja's make_attrgetter */
static bool attr_path(tctx *c, const tv *item, const tv *attr, tv *out) {
    if (attr->t == TV_INT) return get_item(c, item, attr, out);
    if (attr->t != TV_STR) return tfail(c, 0, "attribute name must be a string");
    tv cur = *item;
    const char *p = attr->u.s.p;
    size_t n = attr->u.s.n, i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && p[j] != '.') j++;
        tv key;
        bool digits = j > i;
        for (size_t k = i; k < j; k++) if (p[k] < '0' || p[k] > '9') digits = false;
        if (digits) key = tv_int(strtoll(p + i, NULL, 10));
        else key = tv_strref(p + i, j - i);
        if (cur.t == TV_UNDEF) return undef_fail(c, 0, &cur);
        tv nx;
        if (!get_item(c, &cur, &key, &nx)) return false;
        cur = nx;
        i = j + 1;
        if (j >= n) break;
    }
    *out = cur;
    return true;
}

static bool sorted(tctx *c, int line, tv_list *src, const tv *attr, bool ci, bool reverse, tv_list **out) {
    size_t n = src->n;
    tv_list *l = list_new(c, n);
    tv *keys = ta_alloc(&c->ar, (n + 1) * sizeof(tv)), *tk = ta_alloc(&c->ar, (n + 1) * sizeof(tv)), *tvl = ta_alloc(&c->ar, (n + 1) * sizeof(tv));
    if (!l || !keys || !tk || !tvl) return toom(c, line);
    for (size_t i = 0; i < n; i++) {
        l->v[i] = src->v[i];
        if (attr && attr->t != TV_NONE) { if (!attr_path(c, &src->v[i], attr, &keys[i])) return false; }
        else keys[i] = src->v[i];
    }
    l->n = n;
    if (reverse) {   /* Python's reverse sort keeps stability: reverse, sort, reverse */
        for (size_t a = 0, b = n ? n - 1 : 0; a < b; a++, b--) { tv t = l->v[a]; l->v[a] = l->v[b]; l->v[b] = t; t = keys[a]; keys[a] = keys[b]; keys[b] = t; }
    }
    sortctx s = {c, line, ci, false};
    msort(&s, keys, l->v, tk, tvl, n);
    if (s.failed || c->failed) return false;
    if (reverse) for (size_t a = 0, b = n ? n - 1 : 0; a < b; a++, b--) { tv t = l->v[a]; l->v[a] = l->v[b]; l->v[b] = t; }
    *out = l;
    return true;
}

/* ---------------------------------------------------------------- calls */

static bool make_dict_from_kwargs(tctx *c, const cargs *a, tv_dict **out) {
    tv_dict *d = dict_new(c);
    if (!d) return toom(c, 0);
    if (a->np > 0) {
        const tv *m = &a->pos[0];
        if (m->t == TV_DICT || m->t == TV_NS) {
            for (size_t i = 0; i < m->u.d->n; i++) if (!dict_set(c, d, m->u.d->k[i], m->u.d->v[i])) return false;
        } else if (m->t == TV_LIST) {
            for (size_t i = 0; i < m->u.l->n; i++) {
                const tv *p = &m->u.l->v[i];
                if (p->t != TV_LIST || p->u.l->n != 2) return tfail(c, 0, "dictionary update sequence element has wrong length");
                if (!dict_set(c, d, p->u.l->v[0], p->u.l->v[1])) return false;
            }
        } else if (m->t != TV_UNDEF) return tfail(c, 0, "'%s' object is not iterable", tv_type_name(m));
    }
    for (int k = 0; k < a->nk; k++) if (!dict_sets(c, d, a->kn[k], a->kv[k])) return false;
    *out = d;
    return true;
}

static bool call_builtin(tctx *c, int line, const char *name, const cargs *a, tv *out) {
    if (!strcmp(name, "range")) {
        int64_t st = 0, sp, step = 1;
        if (a->np < 1 || a->np > 3) return tfail(c, line, "range expected 1 to 3 arguments, got %d", a->np);
        if (a->np == 1) { if (!need_int(c, line, &a->pos[0], "range", &sp)) return false; }
        else {
            if (!need_int(c, line, &a->pos[0], "range", &st) || !need_int(c, line, &a->pos[1], "range", &sp)) return false;
            if (a->np == 3 && !need_int(c, line, &a->pos[2], "range", &step)) return false;
        }
        if (step == 0) return tfail(c, line, "range() arg 3 must not be zero");
        double cnt = step > 0 ? ceil(((double)sp - (double)st) / (double)step) : ceil(((double)st - (double)sp) / (double)-step);
        if (cnt < 0) cnt = 0;
        if (cnt > MAX_RANGE) return tfail(c, line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
        tv_list *l = list_new(c, (size_t)cnt);
        if (!l) return toom(c, line);
        for (int64_t i = 0; i < (int64_t)cnt; i++) l->v[i] = tv_int(st + i * step);
        l->n = (size_t)cnt;
        *out = tv_list_of(l);
        return true;
    }
    if (!strcmp(name, "dict") || !strcmp(name, "namespace")) {
        tv_dict *d;
        if (!make_dict_from_kwargs(c, a, &d)) return false;
        out->t = name[0] == 'd' ? TV_DICT : TV_NS;
        out->u.d = d;
        return true;
    }
    if (!strcmp(name, "raise_exception")) {
        const tv *m = arg(a, 0, "message");
        tpl_sb b = {0};
        if (m) tv_write_str(&b, m);
        if (c->failed) { sb_free(&b); return false; }
        c->failed = true;
        snprintf(c->err, sizeof c->err, "%s", b.p ? b.p : "");
        sb_free(&b);
        return false;
    }
    if (!strcmp(name, "strftime_now")) {
        const tv *f = arg(a, 0, "format");
        if (!f || !need_str(c, line, f, "strftime_now")) return f ? false : tfail(c, line, "strftime_now needs a format");
        char *fmt = ta_strndup(&c->ar, f->u.s.p, f->u.s.n);
        if (!fmt) return toom(c, line);
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        char buf[512];
        size_t k = fmt[0] ? strftime(buf, sizeof buf, fmt, &tmv) : 0;
        return tv_str_copy(c, buf, k, out);
    }
    return tfail(c, line, "'%s' is not callable here", name);
}

static bool call_method(tctx *c, int line, const tv *self, const char *m, const cargs *a, tv *out) {
    if (self->t == TV_STR) {
        if (!strcmp(m, "strip")) return do_strip(c, line, self, arg(a, 0, "chars"), true, true, out);
        if (!strcmp(m, "lstrip")) return do_strip(c, line, self, arg(a, 0, "chars"), true, false, out);
        if (!strcmp(m, "rstrip")) return do_strip(c, line, self, arg(a, 0, "chars"), false, true, out);
        if (!strcmp(m, "split")) return do_split(c, line, self, arg(a, 0, "sep"), arg(a, 1, "maxsplit"), false, out);
        if (!strcmp(m, "rsplit")) return do_split(c, line, self, arg(a, 0, "sep"), arg(a, 1, "maxsplit"), true, out);
        if (!strcmp(m, "splitlines")) {
            tv_list *l;
            if (!do_splitlines(c, self, arg_true(a, 0, "keepends", false), &l)) return false;
            *out = tv_list_of(l);
            return true;
        }
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
            const tv *x = arg(a, 0, NULL);
            if (!x) return tfail(c, line, "%s() takes at least 1 argument", m);
            const tv *cands = x;
            size_t nc = 1;
            if (x->t == TV_LIST) { cands = x->u.l->v; nc = x->u.l->n; }
            *out = tv_bool(false);
            for (size_t i = 0; i < nc; i++) {
                if (!need_str(c, line, &cands[i], m)) return false;
                size_t k = cands[i].u.s.n;
                if (k > self->u.s.n) continue;
                const char *at = m[0] == 's' ? self->u.s.p : self->u.s.p + self->u.s.n - k;
                if (!memcmp(at, cands[i].u.s.p, k)) { *out = tv_bool(true); break; }
            }
            return true;
        }
        if (!strcmp(m, "upper")) return do_case(c, self, CASE_UPPER, out);
        if (!strcmp(m, "lower")) return do_case(c, self, CASE_LOWER, out);
        if (!strcmp(m, "title")) return do_case(c, self, CASE_TITLE_PY, out);
        if (!strcmp(m, "capitalize")) return do_case(c, self, CASE_CAPITALIZE, out);
        if (!strcmp(m, "swapcase")) return do_case(c, self, CASE_SWAP, out);
        if (!strcmp(m, "replace")) {
            const tv *o = arg(a, 0, NULL), *nw = arg(a, 1, NULL);
            if (!o || !nw) return tfail(c, line, "replace() takes at least 2 arguments");
            return do_replace(c, line, self, o, nw, arg(a, 2, NULL), out);
        }
        if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "count")) {
            const tv *x = arg(a, 0, NULL);
            if (!x || !need_str(c, line, x, m)) return x ? false : tfail(c, line, "%s() takes at least 1 argument", m);
            const char *p = self->u.s.p;
            size_t n = self->u.s.n;
            if (!strcmp(m, "count")) {
                int64_t k = 0;
                if (x->u.s.n == 0) k = (int64_t)u8_len(p, n) + 1;
                else for (size_t i = 0; i + x->u.s.n <= n;) {
                    const char *f = memmem(p + i, n - i, x->u.s.p, x->u.s.n);
                    if (!f) break;
                    k++;
                    i = (size_t)(f - p) + x->u.s.n;
                }
                *out = tv_int(k);
                return true;
            }
            const char *f = NULL;
            if (m[0] == 'r') {
                if (x->u.s.n <= n)
                    for (size_t q = n - x->u.s.n + 1; q-- > 0;) if (!memcmp(p + q, x->u.s.p, x->u.s.n)) { f = p + q; break; }
            } else f = x->u.s.n == 0 ? p : memmem(p, n, x->u.s.p, x->u.s.n);
            if (!f && !strcmp(m, "index")) return tfail(c, line, "substring not found");
            *out = tv_int(f ? (int64_t)u8_len(p, (size_t)(f - p)) : -1);
            return true;
        }
        if (!strcmp(m, "join")) {
            const tv *x = arg(a, 0, NULL);
            if (!x) return tfail(c, line, "join() takes exactly one argument");
            tv_list *l;
            if (!tv_iter_list(c, line, x, &l)) return false;
            tpl_sb b = {0};
            for (size_t i = 0; i < l->n; i++) {
                if (l->v[i].t != TV_STR) { sb_free(&b); return tfail(c, line, "sequence item %zu: expected str instance, %s found", i, tv_type_name(&l->v[i])); }
                if (i) sb_put(&b, self->u.s.p, self->u.s.n);
                sb_put(&b, l->v[i].u.s.p, l->v[i].u.s.n);
            }
            if (!b.p) { *out = tv_strref("", 0); return true; }
            return tv_from_sb(c, &b, out);
        }
        if (!strcmp(m, "format")) return str_format(c, line, self, a, out);
        if (!strcmp(m, "isdigit")) { *out = tv_bool(str_pred(self, 0)); return true; }
        if (!strcmp(m, "isalpha")) { *out = tv_bool(str_pred(self, 1)); return true; }
        if (!strcmp(m, "isalnum")) { *out = tv_bool(str_pred(self, 2)); return true; }
        if (!strcmp(m, "isspace")) { *out = tv_bool(str_pred(self, 3)); return true; }
        if (!strcmp(m, "islower")) { *out = tv_bool(str_pred(self, 4)); return true; }
        if (!strcmp(m, "isupper")) { *out = tv_bool(str_pred(self, 5)); return true; }
        if (!strcmp(m, "zfill") || !strcmp(m, "center") || !strcmp(m, "ljust") || !strcmp(m, "rjust")) {
            int64_t w;
            const tv *wv = arg(a, 0, "width");
            if (!wv || !need_int(c, line, wv, m, &w)) return wv ? false : tfail(c, line, "%s() takes a width", m);
            int64_t len = (int64_t)u8_len(self->u.s.p, self->u.s.n);
            if (w <= len) { *out = *self; return true; }
            if (w > 1000000) return tfail(c, line, "%s: width too large", m);
            const tv *fc = arg(a, 1, "fillchar");
            const char *fill = fc && fc->t == TV_STR && fc->u.s.n ? fc->u.s.p : (m[0] == 'z' ? "0" : " ");
            size_t fl = fc && fc->t == TV_STR && fc->u.s.n ? fc->u.s.n : 1;
            int64_t pad = w - len, left = 0;
            if (m[0] == 'c') left = pad / 2 + (pad & w & 1);
            else if (m[0] == 'r' || m[0] == 'z') left = pad;
            tpl_sb b = {0};
            size_t start = 0;
            if (m[0] == 'z' && self->u.s.n && (self->u.s.p[0] == '-' || self->u.s.p[0] == '+')) { sb_put(&b, self->u.s.p, 1); start = 1; }
            for (int64_t i = 0; i < left; i++) sb_put(&b, fill, fl);
            sb_put(&b, self->u.s.p + start, self->u.s.n - start);
            for (int64_t i = 0; i < pad - left; i++) sb_put(&b, fill, fl);
            return tv_from_sb(c, &b, out);
        }
        if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
            const tv *x = arg(a, 0, NULL);
            if (!x || !need_str(c, line, x, m)) return x ? false : tfail(c, line, "%s() takes exactly one argument", m);
            if (x->u.s.n == 0) return tfail(c, line, "empty separator");
            const char *p = self->u.s.p, *f = NULL;
            size_t n = self->u.s.n;
            if (m[0] == 'r') { if (x->u.s.n <= n) for (size_t q = n - x->u.s.n + 1; q-- > 0;) if (!memcmp(p + q, x->u.s.p, x->u.s.n)) { f = p + q; break; } }
            else f = memmem(p, n, x->u.s.p, x->u.s.n);
            tv_list *l = list_new(c, 3);
            if (!l) return toom(c, line);
            l->tuple = true;
            l->n = 3;
            if (!f) {
                tv e = tv_strref("", 0);
                if (m[0] == 'r') { l->v[0] = e; l->v[1] = e; l->v[2] = *self; }
                else { l->v[0] = *self; l->v[1] = e; l->v[2] = e; }
            } else {
                l->v[0] = tv_strref(p, (size_t)(f - p));
                l->v[1] = *x;
                l->v[2] = tv_strref(f + x->u.s.n, n - (size_t)(f - p) - x->u.s.n);
            }
            *out = tv_list_of(l);
            return true;
        }
    } else if (self->t == TV_DICT) {
        tv_dict *d = self->u.d;
        if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
            tv_list *l = list_new(c, d->n);
            if (!l) return toom(c, line);
            for (size_t i = 0; i < d->n; i++) {
                if (m[0] == 'k') l->v[i] = d->k[i];
                else if (m[0] == 'v') l->v[i] = d->v[i];
                else {
                    tv_list *p = list_new(c, 2);
                    if (!p) return toom(c, line);
                    p->tuple = true;
                    p->v[0] = d->k[i]; p->v[1] = d->v[i]; p->n = 2;
                    l->v[i] = tv_list_of(p);
                }
            }
            l->n = d->n;
            *out = tv_list_of(l);
            return true;
        }
        if (!strcmp(m, "get") || !strcmp(m, "pop") || !strcmp(m, "setdefault")) {
            const tv *k = arg(a, 0, NULL), *dflt = arg(a, 1, NULL);
            if (!k) return tfail(c, line, "%s() takes at least 1 argument", m);
            tv *v = dict_get(d, k);
            if (v) {
                *out = *v;
                if (m[0] == 'p') {
                    size_t i = (size_t)(v - d->v);
                    memmove(&d->k[i], &d->k[i + 1], (d->n - i - 1) * sizeof(tv));
                    memmove(&d->v[i], &d->v[i + 1], (d->n - i - 1) * sizeof(tv));
                    d->n--;
                }
                return true;
            }
            if (m[0] == 'p' && !dflt) return tfail(c, line, "dict.pop: key not found");
            *out = dflt ? *dflt : tv_none();
            if (m[0] == 's') return dict_set(c, d, *k, *out);
            return true;
        }
        if (!strcmp(m, "copy")) {
            cargs ca = {1, 0, (tv *)self, NULL, NULL};
            tv_dict *nd;
            if (!make_dict_from_kwargs(c, &ca, &nd)) return false;
            out->t = TV_DICT;
            out->u.d = nd;
            return true;
        }
        if (!strcmp(m, "update")) {
            tv_dict *nd;
            if (!make_dict_from_kwargs(c, a, &nd)) return false;
            for (size_t i = 0; i < nd->n; i++) if (!dict_set(c, d, nd->k[i], nd->v[i])) return false;
            *out = tv_none();
            return true;
        }
    } else if (self->t == TV_LIST) {
        tv_list *l = self->u.l;
        bool mut = !strcmp(m, "append") || !strcmp(m, "extend") || !strcmp(m, "pop") || !strcmp(m, "insert") ||
                   !strcmp(m, "reverse") || !strcmp(m, "remove");
        if (mut && l->tuple) return tfail(c, line, "'tuple' object has no attribute '%s'", m);
        if (!strcmp(m, "append")) {
            const tv *x = arg(a, 0, NULL);
            if (!x) return tfail(c, line, "append() takes exactly one argument");
            if (!list_push(c, l, *x)) return false;
            *out = tv_none();
            return true;
        }
        if (!strcmp(m, "extend")) {
            const tv *x = arg(a, 0, NULL);
            tv_list *src;
            if (!x) return tfail(c, line, "extend() takes exactly one argument");
            if (!tv_iter_list(c, line, x, &src)) return false;
            size_t n = src->n;
            for (size_t i = 0; i < n; i++) if (!list_push(c, l, src->v[i])) return false;
            *out = tv_none();
            return true;
        }
        if (!strcmp(m, "pop")) {
            int64_t i = -1;
            const tv *x = arg(a, 0, NULL);
            if (x && !need_int(c, line, x, "pop", &i)) return false;
            if (i < 0) i += (int64_t)l->n;
            if (i < 0 || (size_t)i >= l->n) return tfail(c, line, "pop index out of range");
            *out = l->v[i];
            memmove(&l->v[i], &l->v[i + 1], (l->n - (size_t)i - 1) * sizeof(tv));
            l->n--;
            return true;
        }
        if (!strcmp(m, "insert")) {
            int64_t i;
            const tv *x = arg(a, 1, NULL);
            if (!x || !need_int(c, line, &a->pos[0], "insert", &i)) return x ? false : tfail(c, line, "insert() takes exactly 2 arguments");
            if (i < 0) { i += (int64_t)l->n; if (i < 0) i = 0; }
            if ((size_t)i > l->n) i = (int64_t)l->n;
            if (!list_push(c, l, *x)) return false;
            memmove(&l->v[i + 1], &l->v[i], (l->n - 1 - (size_t)i) * sizeof(tv));
            l->v[i] = *x;
            *out = tv_none();
            return true;
        }
        if (!strcmp(m, "reverse")) {
            for (size_t x = 0, y = l->n ? l->n - 1 : 0; x < y; x++, y--) { tv t = l->v[x]; l->v[x] = l->v[y]; l->v[y] = t; }
            *out = tv_none();
            return true;
        }
        if (!strcmp(m, "index") || !strcmp(m, "count") || !strcmp(m, "remove")) {
            const tv *x = arg(a, 0, NULL);
            if (!x) return tfail(c, line, "%s() takes exactly one argument", m);
            int64_t k = 0, first = -1;
            for (size_t i = 0; i < l->n; i++) if (tv_eq(&l->v[i], x)) { if (first < 0) first = (int64_t)i; k++; }
            if (m[0] == 'c') { *out = tv_int(k); return true; }
            if (first < 0) return tfail(c, line, "list.%s(x): x not in list", m);
            if (m[0] == 'i') { *out = tv_int(first); return true; }
            memmove(&l->v[first], &l->v[first + 1], (l->n - (size_t)first - 1) * sizeof(tv));
            l->n--;
            *out = tv_none();
            return true;
        }
        if (!strcmp(m, "copy")) {
            tv_list *n = list_new(c, l->n);
            if (!n) return toom(c, line);
            if (l->n) memcpy(n->v, l->v, l->n * sizeof(tv));
            n->n = l->n;
            *out = tv_list_of(n);
            return true;
        }
    } else if (self->t == TV_LOOP) {
        tv_loop *lp = self->u.lp;
        if (!strcmp(m, "cycle")) {
            if (a->np == 0) return tfail(c, line, "no items for cycling given");
            *out = a->pos[lp->i % (size_t)a->np];
            return true;
        }
        if (!strcmp(m, "changed")) {
            tv_list *l = list_new(c, (size_t)a->np);
            if (!l) return toom(c, line);
            for (int i = 0; i < a->np; i++) l->v[i] = a->pos[i];
            l->n = (size_t)a->np;
            tv now = tv_list_of(l);
            bool ch = !lp->has_changed || !tv_eq(&now, &lp->last_changed);
            lp->last_changed = now;
            lp->has_changed = true;
            *out = tv_bool(ch);
            return true;
        }
    }
    return tfail(c, line, "'%s' object has no method '%s'", tv_type_name(self), m);
}

bool call_func(tctx *c, int line, const tv_func *f, const cargs *a, const tv_func *caller, tv *out) {
    switch (f->kind) {
    case FK_MACRO: return call_macro(c, line, f, a, caller, out);
    case FK_METHOD:
        if (f->self.t == TV_LOOP && !strcmp(f->name, "__call__")) return call_loop_recurse(c, line, f->self.u.lp, a, out);
        return call_method(c, line, &f->self, f->name, a, out);
    default: return call_builtin(c, line, f->name, a, out);
    }
}

/* ---------------------------------------------------------------- tests */

static const char *const test_names[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
    "mapping", "iterable", "sequence", "boolean", "true", "false", "callable", "eq", "equalto", "==", "ne", "!=",
    "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "odd", "even", "divisibleby", "in",
    "sameas", "lower", "upper", "escaped", "filter", "test", NULL};

bool tpl_test_exists(const char *name) {
    for (int i = 0; test_names[i]; i++) if (!strcmp(test_names[i], name)) return true;
    return false;
}

static bool base_test(tctx *c, int line, const char *n, const tv *v, const cargs *a, bool *r) {
    const tv *x = arg(a, 0, NULL);
    if (!strcmp(n, "defined")) { *r = v->t != TV_UNDEF; return true; }
    if (!strcmp(n, "undefined")) { *r = v->t == TV_UNDEF; return true; }
    if (!strcmp(n, "none")) { *r = v->t == TV_NONE; return true; }
    if (!strcmp(n, "string")) { *r = v->t == TV_STR; return true; }
    if (!strcmp(n, "number")) { *r = v->t == TV_INT || v->t == TV_FLOAT || v->t == TV_BOOL; return true; }
    if (!strcmp(n, "integer")) { *r = v->t == TV_INT; return true; }
    if (!strcmp(n, "float")) { *r = v->t == TV_FLOAT; return true; }
    if (!strcmp(n, "mapping")) { *r = v->t == TV_DICT; return true; }
    if (!strcmp(n, "iterable")) { *r = v->t == TV_STR || v->t == TV_LIST || v->t == TV_DICT || v->t == TV_UNDEF; return true; }
    if (!strcmp(n, "sequence")) { *r = v->t == TV_STR || (v->t == TV_LIST && !v->u.l->gen) || v->t == TV_DICT; return true; }
    if (!strcmp(n, "boolean")) { *r = v->t == TV_BOOL; return true; }
    if (!strcmp(n, "true")) { *r = v->t == TV_BOOL && v->u.b; return true; }
    if (!strcmp(n, "false")) { *r = v->t == TV_BOOL && !v->u.b; return true; }
    if (!strcmp(n, "callable")) { *r = v->t == TV_FUNC || v->t == TV_UNDEF || v->t == TV_LOOP; return true; }
    if (!strcmp(n, "escaped")) { *r = false; return true; }
    if (!strcmp(n, "lower") || !strcmp(n, "upper")) {   /* str(value).islower() */
        tv s;
        if (!tv_to_str(c, v, &s)) return false;
        *r = str_pred(&s, n[0] == 'l' ? 4 : 5);
        return true;
    }
    if (!strcmp(n, "filter")) { *r = v->t == TV_STR && tpl_filter_exists(ta_strndup(&c->ar, v->u.s.p, v->u.s.n) ? ta_strndup(&c->ar, v->u.s.p, v->u.s.n) : ""); return true; }
    if (!strcmp(n, "test")) { *r = v->t == TV_STR && tpl_test_exists(ta_strndup(&c->ar, v->u.s.p, v->u.s.n) ? ta_strndup(&c->ar, v->u.s.p, v->u.s.n) : ""); return true; }
    if (!x) return tfail(c, line, "test '%s' needs an argument", n);
    if (!strcmp(n, "eq") || !strcmp(n, "equalto") || !strcmp(n, "==")) { *r = tv_eq(v, x); return true; }
    if (!strcmp(n, "ne") || !strcmp(n, "!=")) { *r = !tv_eq(v, x); return true; }
    if (!strcmp(n, "sameas")) {
        if (v->t != x->t) { *r = false; return true; }
        if (v->t == TV_NONE || v->t == TV_UNDEF) { *r = true; return true; }
        if (v->t == TV_BOOL) { *r = v->u.b == x->u.b; return true; }
        if (v->t == TV_LIST) { *r = v->u.l == x->u.l; return true; }
        if (v->t == TV_DICT || v->t == TV_NS) { *r = v->u.d == x->u.d; return true; }
        *r = tv_eq(v, x);
        return true;
    }
    if (!strcmp(n, "in")) return tv_contains(c, line, x, v, r);
    int ord = -1;
    if (!strcmp(n, "lt") || !strcmp(n, "lessthan") || !strcmp(n, "<")) ord = 0;
    else if (!strcmp(n, "le") || !strcmp(n, "<=")) ord = 1;
    else if (!strcmp(n, "gt") || !strcmp(n, "greaterthan") || !strcmp(n, ">")) ord = 2;
    else if (!strcmp(n, "ge") || !strcmp(n, ">=")) ord = 3;
    if (ord >= 0) {
        int k;
        if (v->t == TV_UNDEF) return undef_fail(c, line, v);
        if (!tv_order(v, x, &k)) return tfail(c, line, "'%s' not supported between instances of '%s' and '%s'", n, tv_type_name(v), tv_type_name(x));
        *r = ord == 0 ? k < 0 : ord == 1 ? k <= 0 : ord == 2 ? k > 0 : k >= 0;
        return true;
    }
    (void)0;
    return tfail(c, line, "no test named '%s'", n);
}

/* odd/even/divisibleby take the value only (+ divisor) */
static bool num_test(tctx *c, int line, const char *n, const tv *v, const cargs *a, bool *r) {
    int64_t i;
    if (v->t == TV_UNDEF) return undef_fail(c, line, v);
    if (v->t == TV_FLOAT) {
        double f = v->u.f;
        if (!strcmp(n, "divisibleby")) {
            const tv *x = arg(a, 0, "num");
            if (!x) return tfail(c, line, "divisibleby needs a number");
            double d = x->t == TV_FLOAT ? x->u.f : (double)(x->t == TV_INT ? x->u.i : x->u.b);
            if (d == 0) return tfail(c, line, "float modulo");
            *r = fmod(f, d) == 0;
            return true;
        }
        *r = fmod(f, 2) == (!strcmp(n, "odd") ? 1 : 0);
        return true;
    }
    if (!need_int(c, line, v, n, &i)) return false;
    if (!strcmp(n, "odd")) { *r = (i % 2) != 0; return true; }
    if (!strcmp(n, "even")) { *r = (i % 2) == 0; return true; }
    const tv *x = arg(a, 0, "num");
    int64_t d;
    if (!x || !need_int(c, line, x, "divisibleby", &d)) return x ? false : tfail(c, line, "divisibleby needs a number");
    if (d == 0) return tfail(c, line, "integer division or modulo by zero");
    *r = d == -1 || i % d == 0;
    return true;
}

bool apply_test(tctx *c, int line, const char *n, const tv *v, const cargs *a, bool *r) {
    if (!strcmp(n, "odd") || !strcmp(n, "even") || !strcmp(n, "divisibleby")) return num_test(c, line, n, v, a, r);
    return base_test(c, line, n, v, a, r);
}
#define run_test apply_test

/* ---------------------------------------------------------------- filters */

static const char *const filter_names[] = {"abs", "attr", "capitalize", "center", "count", "d", "default",
    "dictsort", "e", "escape", "first", "float", "forceescape", "format", "indent", "int", "items", "join", "last",
    "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round", "safe",
    "select", "selectattr", "sort", "split", "string", "sum", "title", "tojson", "trim", "unique", "upper",
    "wordcount", "truncate", "batch", "pprint", "striptags", "urlencode", NULL};

bool tpl_filter_exists(const char *name) {
    for (int i = 0; filter_names[i]; i++) if (!strcmp(filter_names[i], name)) return true;
    return false;
}

/* value as a str (jinja's soft_str) */
static bool sstr(tctx *c, const tv *v, tv *out) { return tv_to_str(c, v, out); }

static bool do_select(tctx *c, int line, const tv *v, const cargs *a, bool attr, bool keep, tv *out) {
    tv_list *src;
    tv none = {0};
    if (!tv_truthy(v)) v = &none;   /* jinja: `if value:` before iterating */
    if (!tv_iter_list(c, line, v, &src)) return false;
    int base = 0;
    const tv *at = NULL;
    if (attr) {
        at = arg(a, 0, NULL);
        if (!at) return tfail(c, line, "selectattr/rejectattr need an attribute name");
        base = 1;
    }
    const tv *tn = arg(a, base, NULL);
    char *tname = NULL;
    if (tn) {
        if (!need_str(c, line, tn, "select")) return false;
        tname = ta_strndup(&c->ar, tn->u.s.p, tn->u.s.n);
        if (!tname) return toom(c, line);
        if (!tpl_test_exists(tname)) return tfail(c, line, "no test named '%s'", tname);
    }
    cargs ta = {0};
    if (a->np > base + 1) { ta.np = a->np - base - 1; ta.pos = a->pos + base + 1; }
    tv_list *l = list_new(c, 0);
    if (!l) return toom(c, line);
    for (size_t i = 0; i < src->n; i++) {
        tv item = src->v[i], x = item;
        if (at && !attr_path(c, &item, at, &x)) return false;
        bool r;
        if (tname) { if (!run_test(c, line, tname, &x, &ta, &r)) return false; }
        else r = tv_truthy(&x);
        if (r == keep && !list_push(c, l, item)) return false;
    }
    l->gen = true;
    *out = tv_list_of(l);
    return true;
}

static bool do_indent(tctx *c, int line, const tv *v, const cargs *a, tv *out) {
    tv s;
    if (v->t != TV_STR) return v->t == TV_UNDEF ? undef_fail(c, line, v) : tfail(c, line, "indent: expected a string, got '%s'", tv_type_name(v));
    s = *v;
    const tv *w = arg(a, 0, "width");
    tpl_sb ind = {0};
    if (!w) sb_puts(&ind, "    ");
    else if (w->t == TV_STR) sb_put(&ind, w->u.s.p, w->u.s.n);
    else {
        int64_t k;
        if (!need_int(c, line, w, "indent", &k)) return false;
        if (k > 10000) return tfail(c, line, "indent: width too large");
        for (int64_t i = 0; i < k; i++) sb_put(&ind, " ", 1);
    }
    bool first = arg_true(a, 1, "first", false), blank = arg_true(a, 2, "blank", false);
    /* s += "\n"; lines = s.splitlines() */
    tpl_sb t = {0};
    sb_put(&t, s.u.s.p, s.u.s.n);
    sb_put(&t, "\n", 1);
    tv ts;
    if (!tv_from_sb(c, &t, &ts)) { sb_free(&ind); return false; }
    tv_list *lines;
    if (!do_splitlines(c, &ts, false, &lines)) { sb_free(&ind); return false; }
    tpl_sb b = {0};
    if (first) sb_put(&b, ind.p ? ind.p : "", ind.n);
    for (size_t i = 0; i < lines->n; i++) {
        if (i) {
            sb_put(&b, "\n", 1);
            if (blank || lines->v[i].u.s.n) sb_put(&b, ind.p ? ind.p : "", ind.n);
        }
        sb_put(&b, lines->v[i].u.s.p, lines->v[i].u.s.n);
    }
    sb_free(&ind);
    if (!b.p) { *out = tv_strref("", 0); return true; }
    return tv_from_sb(c, &b, out);
}

static bool to_int(tctx *c, int line, const tv *v, const cargs *a, tv *out) {
    if (v->t == TV_UNDEF) return undef_fail(c, line, v);
    const tv *dv = arg(a, 0, "default");
    tv dflt = dv ? *dv : tv_int(0);
    int64_t base = 10;
    const tv *bv = arg(a, 1, "base");
    if (bv && !need_int(c, line, bv, "int", &base)) return false;
    switch (v->t) {
    case TV_INT: *out = *v; return true;
    case TV_BOOL: *out = tv_int(v->u.b); return true;
    case TV_FLOAT:
        if (!isfinite(v->u.f) || fabs(v->u.f) > 9.2e18) { *out = dflt; return true; }
        *out = tv_int((int64_t)v->u.f);
        return true;
    case TV_STR: {
        char buf[128];
        size_t b, e;
        strip_span(v->u.s.p, v->u.s.n, NULL, true, true, &b, &e);
        if (e - b == 0 || e - b >= sizeof buf) { *out = dflt; return true; }
        size_t k = 0;
        for (size_t i = b; i < e; i++) if (v->u.s.p[i] != '_') buf[k++] = v->u.s.p[i];
        buf[k] = 0;
        char *end;
        errno = 0;
        long long x = strtoll(buf, &end, (int)(base >= 2 && base <= 36 ? base : 10));
        if (!*end && !errno) { *out = tv_int(x); return true; }
        if (base == 10) {
            double f = strtod(buf, &end);
            if (!*end && isfinite(f) && fabs(f) < 9.2e18) { *out = tv_int((int64_t)f); return true; }
        }
        *out = dflt;
        return true;
    }
    default: *out = dflt; return true;
    }
}

static bool to_float(tctx *c, const tv *v, const cargs *a, tv *out) {
    const tv *dv = arg(a, 0, "default");
    tv dflt = dv ? *dv : tv_float(0.0);
    (void)c;
    switch (v->t) {
    case TV_FLOAT: *out = *v; return true;
    case TV_INT: *out = tv_float((double)v->u.i); return true;
    case TV_BOOL: *out = tv_float(v->u.b); return true;
    case TV_STR: {
        char buf[128];
        size_t b, e;
        strip_span(v->u.s.p, v->u.s.n, NULL, true, true, &b, &e);
        if (e - b == 0 || e - b >= sizeof buf) { *out = dflt; return true; }
        memcpy(buf, v->u.s.p + b, e - b);
        buf[e - b] = 0;
        char *end;
        double f = strtod(buf, &end);
        *out = *end ? dflt : tv_float(f);
        return true;
    }
    default: *out = dflt; return true;
    }
}

static double py_round(double x, int64_t nd) {
    if (!isfinite(x)) return x;
    if (nd > 300 || nd < -300) return nd > 0 ? x : 0.0;
    char buf[1024];
    if (nd >= 0) {
        /* format with correct rounding of the exact binary value (half-even on exact ties) */
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    double p = pow(10.0, (double)-nd);
    return nearbyint(x / p) * p;
}

bool apply_filter(tctx *c, int line, scope *sc, const char *n, const tv *v, const cargs *a, tv *out) {
    (void)sc;
    const tv *a0 = arg(a, 0, NULL);
    if (!strcmp(n, "default") || !strcmp(n, "d")) {
        const tv *dv = arg(a, 0, "default_value");
        bool boolean = arg_true(a, 1, "boolean", false);
        if (v->t == TV_UNDEF || (boolean && !tv_truthy(v))) *out = dv ? *dv : tv_strref("", 0);
        else *out = *v;
        return true;
    }
    if (!strcmp(n, "string")) return sstr(c, v, out);
    if (!strcmp(n, "length") || !strcmp(n, "count")) {
        switch (v->t) {
        case TV_STR: *out = tv_int((int64_t)u8_len(v->u.s.p, v->u.s.n)); return true;
        case TV_LIST:
            if (v->u.l->gen) return tfail(c, line, "object of type 'generator' has no len()");
            *out = tv_int((int64_t)v->u.l->n);
            return true;
        case TV_DICT: case TV_NS: *out = tv_int((int64_t)v->u.d->n); return true;
        case TV_UNDEF: *out = tv_int(0); return true;
        default: return tfail(c, line, "object of type '%s' has no len()", tv_type_name(v));
        }
    }
    if (!strcmp(n, "tojson")) {
        const tv *ind = arg(a, 1, "indent");
        char indent[64];
        const char *ip = NULL;
        if (ind && ind->t == TV_INT) {
            if (ind->u.i < 0 || ind->u.i > 32) return tfail(c, line, "tojson: indent out of range");
            memset(indent, ' ', (size_t)ind->u.i);
            indent[ind->u.i] = 0;
            ip = indent;
        } else if (ind && ind->t == TV_STR) {
            snprintf(indent, sizeof indent, "%.*s", (int)(ind->u.s.n > 63 ? 63 : ind->u.s.n), ind->u.s.p);
            ip = indent;
        } else if (ind && ind->t != TV_NONE) return tfail(c, line, "tojson: indent must be an integer or a string");
        const char *isep = ip ? "," : ", ", *ksep = ": ";
        char s1[32], s2[32];
        const tv *seps = arg(a, 2, "separators");
        if (seps && seps->t == TV_LIST && seps->u.l->n == 2 && seps->u.l->v[0].t == TV_STR && seps->u.l->v[1].t == TV_STR) {
            snprintf(s1, sizeof s1, "%.*s", (int)(seps->u.l->v[0].u.s.n > 31 ? 31 : seps->u.l->v[0].u.s.n), seps->u.l->v[0].u.s.p);
            snprintf(s2, sizeof s2, "%.*s", (int)(seps->u.l->v[1].u.s.n > 31 ? 31 : seps->u.l->v[1].u.s.n), seps->u.l->v[1].u.s.p);
            isep = s1;
            ksep = s2;
        }
        bool ensure_ascii = arg_true(a, 0, "ensure_ascii", false);
        bool sort_keys = arg_true(a, 3, "sort_keys", false);
        tpl_sb b = {0};
        const char *why = NULL;
        if (!tv_write_json(&b, v, ensure_ascii, ip, 0, isep, ksep, sort_keys, &why)) {
            sb_free(&b);
            if (v->t == TV_UNDEF) return undef_fail(c, line, v);
            return tfail(c, line, "tojson: %s", why ? why : "cannot serialize");
        }
        return tv_from_sb(c, &b, out);
    }
    if (!strcmp(n, "trim")) {
        tv s;
        if (!sstr(c, v, &s)) return false;
        return do_strip(c, line, &s, arg(a, 0, "chars"), true, true, out);
    }
    if (!strcmp(n, "upper") || !strcmp(n, "lower") || !strcmp(n, "capitalize") || !strcmp(n, "title")) {
        tv s;
        if (!sstr(c, v, &s)) return false;
        if (n[0] == 't') return do_title_filter(c, &s, out);
        return do_case(c, &s, n[0] == 'u' ? CASE_UPPER : n[0] == 'l' ? CASE_LOWER : CASE_CAPITALIZE, out);
    }
    if (!strcmp(n, "replace")) {
        tv s;
        if (!sstr(c, v, &s)) return false;
        const tv *o = arg(a, 0, "old"), *nw = arg(a, 1, "new");
        if (!o || !nw) return tfail(c, line, "replace needs old and new");
        tv os, ns;
        if (!sstr(c, o, &os) || !sstr(c, nw, &ns)) return false;
        return do_replace(c, line, &s, &os, &ns, arg(a, 2, "count"), out);
    }
    if (!strcmp(n, "split")) {
        tv s;
        if (!sstr(c, v, &s)) return false;
        return do_split(c, line, &s, arg(a, 0, "sep"), arg(a, 1, "maxsplit"), false, out);
    }
    if (!strcmp(n, "indent")) return do_indent(c, line, v, a, out);
    if (!strcmp(n, "int")) return to_int(c, line, v, a, out);
    if (!strcmp(n, "float")) { if (v->t == TV_UNDEF) return undef_fail(c, line, v); return to_float(c, v, a, out); }
    if (!strcmp(n, "abs")) {
        if (v->t == TV_INT) { if (v->u.i == INT64_MIN) return tfail(c, line, "integer overflow"); *out = tv_int(v->u.i < 0 ? -v->u.i : v->u.i); return true; }
        if (v->t == TV_BOOL) { *out = tv_int(v->u.b); return true; }
        if (v->t == TV_FLOAT) { *out = tv_float(fabs(v->u.f)); return true; }
        return tfail(c, line, "bad operand type for abs(): '%s'", tv_type_name(v));
    }
    if (!strcmp(n, "round")) {
        int64_t prec = 0;
        const tv *pv = arg(a, 0, "precision"), *mv = arg(a, 1, "method");
        if (pv && !need_int(c, line, pv, "round", &prec)) return false;
        if (v->t != TV_INT && v->t != TV_FLOAT && v->t != TV_BOOL) return tfail(c, line, "round: expected a number, got '%s'", tv_type_name(v));
        double x = v->t == TV_FLOAT ? v->u.f : (double)(v->t == TV_INT ? v->u.i : v->u.b);
        const char *method = "common";
        char mb[16];
        if (mv) {
            if (!need_str(c, line, mv, "round")) return false;
            snprintf(mb, sizeof mb, "%.*s", (int)(mv->u.s.n > 15 ? 15 : mv->u.s.n), mv->u.s.p);
            method = mb;
        }
        if (!strcmp(method, "common")) {
            if (v->t != TV_FLOAT) { *out = v->t == TV_BOOL ? tv_int(v->u.b) : *v; if (prec >= 0) return true; *out = tv_int((int64_t)py_round(x, prec)); return true; }
            *out = tv_float(py_round(x, prec));
            return true;
        }
        if (strcmp(method, "ceil") && strcmp(method, "floor")) return tfail(c, line, "method must be common, ceil or floor");
        double p = pow(10.0, (double)prec);
        double r = method[0] == 'c' ? ceil(x * p) / p : floor(x * p) / p;
        *out = tv_float(r);
        return true;
    }
    if (!strcmp(n, "first") || !strcmp(n, "last")) {
        tv_list *l;
        if (n[0] == 'l' && v->t == TV_LIST && v->u.l->gen) return tfail(c, line, "'generator' object is not reversible");
        if (!tv_iter_list(c, line, v, &l)) return false;
        if (l->n == 0) { *out = tv_undef(c, "No %s item, sequence was empty.", n); return !c->failed; }
        *out = n[0] == 'f' ? l->v[0] : l->v[l->n - 1];
        return true;
    }
    if (!strcmp(n, "list")) {
        tv_list *l, *cp;
        if (!tv_iter_list(c, line, v, &l)) return false;
        cp = list_new(c, l->n);
        if (!cp) return toom(c, line);
        if (l->n) memcpy(cp->v, l->v, l->n * sizeof(tv));
        cp->n = l->n;
        *out = tv_list_of(cp);
        return true;
    }
    if (!strcmp(n, "items")) {
        if (v->t == TV_UNDEF) { tv_list *l = list_new(c, 0); if (!l) return toom(c, line); *out = tv_list_of(l); return true; }
        if (v->t != TV_DICT && v->t != TV_NS) return tfail(c, line, "Can only get item pairs from a mapping.");
        tv d = *v;
        d.t = TV_DICT;
        cargs none = {0};
        if (!call_method(c, line, &d, "items", &none, out)) return false;
        out->u.l->gen = true;
        return true;
    }
    if (!strcmp(n, "join")) {
        tv_list *l;
        if (!tv_iter_list(c, line, v, &l)) return false;
        const tv *sep = arg(a, 0, "d"), *at = arg(a, 1, "attribute");
        tv ss = tv_strref("", 0);
        if (sep && !sstr(c, sep, &ss)) return false;
        tpl_sb b = {0};
        for (size_t i = 0; i < l->n; i++) {
            tv x = l->v[i];
            if (at && at->t != TV_NONE && !attr_path(c, &l->v[i], at, &x)) { sb_free(&b); return false; }
            if (i) sb_put(&b, ss.u.s.p, ss.u.s.n);
            tv_write_str(&b, &x);
        }
        if (!b.p) { *out = tv_strref("", 0); return true; }
        return tv_from_sb(c, &b, out);
    }
    if (!strcmp(n, "selectattr")) return do_select(c, line, v, a, true, true, out);
    if (!strcmp(n, "rejectattr")) return do_select(c, line, v, a, true, false, out);
    if (!strcmp(n, "select")) return do_select(c, line, v, a, false, true, out);
    if (!strcmp(n, "reject")) return do_select(c, line, v, a, false, false, out);
    if (!strcmp(n, "map")) {
        tv_list *src;
        tv none = {0};
        if (!tv_iter_list(c, line, tv_truthy(v) ? v : &none, &src)) return false;
        tv_list *l = list_new(c, src->n);
        if (!l) return toom(c, line);
        const tv *at = arg(a, -1, "attribute");
        if (at) {
            const tv *dflt = arg(a, -1, "default");
            for (size_t i = 0; i < src->n; i++) {
                tv x;
                if (!attr_path(c, &src->v[i], at, &x)) return false;
                if (x.t == TV_UNDEF && dflt) x = *dflt;
                l->v[l->n++] = x;
            }
        } else {
            if (!a0 || !need_str(c, line, a0, "map")) return a0 ? false : tfail(c, line, "map needs a filter name or attribute=");
            char *fname = ta_strndup(&c->ar, a0->u.s.p, a0->u.s.n);
            if (!fname) return toom(c, line);
            if (!tpl_filter_exists(fname)) return tfail(c, line, "no filter named '%s'", fname);
            cargs fa = {0};
            fa.np = a->np - 1; fa.pos = a->pos + 1; fa.nk = a->nk; fa.kn = a->kn; fa.kv = a->kv;
            for (size_t i = 0; i < src->n; i++) {
                tv x;
                if (!apply_filter(c, line, sc, fname, &src->v[i], &fa, &x)) return false;
                l->v[l->n++] = x;
            }
        }
        l->gen = true;
        *out = tv_list_of(l);
        return true;
    }
    if (!strcmp(n, "sort")) {
        tv_list *src, *l;
        if (!tv_iter_list(c, line, v, &src)) return false;
        if (!sorted(c, line, src, arg(a, 2, "attribute"), !arg_true(a, 1, "case_sensitive", false), arg_true(a, 0, "reverse", false), &l)) return false;
        *out = tv_list_of(l);
        return true;
    }
    if (!strcmp(n, "dictsort")) {
        if (v->t != TV_DICT) return tfail(c, line, "dictsort: expected a mapping");
        cargs none = {0};
        tv items;
        if (!call_method(c, line, v, "items", &none, &items)) return false;
        const tv *by = arg(a, 1, "by");
        bool by_value = by && by->t == TV_STR && by->u.s.n == 5 && !memcmp(by->u.s.p, "value", 5);
        tv attr = tv_int(by_value ? 1 : 0);
        tv_list *l;
        if (!sorted(c, line, items.u.l, &attr, !arg_true(a, 0, "case_sensitive", false), arg_true(a, 2, "reverse", false), &l)) return false;
        *out = tv_list_of(l);
        return true;
    }
    if (!strcmp(n, "unique")) {
        tv_list *src;
        if (!tv_iter_list(c, line, v, &src)) return false;
        bool cs = arg_true(a, 0, "case_sensitive", false);
        const tv *at = arg(a, 1, "attribute");
        tv_list *l = list_new(c, 0), *seen = list_new(c, 0);
        if (!l || !seen) return toom(c, line);
        for (size_t i = 0; i < src->n; i++) {
            tv k = src->v[i];
            if (at && at->t != TV_NONE && !attr_path(c, &src->v[i], at, &k)) return false;
            if (!cs && k.t == TV_STR && !do_case(c, &k, CASE_LOWER, &k)) return false;
            bool dup = false;
            for (size_t j = 0; j < seen->n && !dup; j++) dup = tv_eq(&seen->v[j], &k);
            if (dup) continue;
            if (!list_push(c, seen, k) || !list_push(c, l, src->v[i])) return false;
        }
        l->gen = true;
        *out = tv_list_of(l);
        return true;
    }
    if (!strcmp(n, "reverse")) {
        if (v->t == TV_STR) {
            tv_list *chars;
            if (!tv_iter_list(c, line, v, &chars)) return false;
            tpl_sb b = {0};
            for (size_t i = chars->n; i-- > 0;) sb_put(&b, chars->v[i].u.s.p, chars->v[i].u.s.n);
            if (!b.p) { *out = tv_strref("", 0); return true; }
            return tv_from_sb(c, &b, out);
        }
        tv_list *src;
        if (!tv_iter_list(c, line, v, &src)) return false;
        tv_list *l = list_new(c, src->n);
        if (!l) return toom(c, line);
        for (size_t i = 0; i < src->n; i++) l->v[i] = src->v[src->n - 1 - i];
        l->n = src->n;
        l->gen = true;   /* reversed(...) iterator */
        *out = tv_list_of(l);
        return true;
    }
    if (!strcmp(n, "sum")) {
        tv_list *src;
        if (!tv_iter_list(c, line, v, &src)) return false;
        const tv *at = arg(a, 0, "attribute"), *st = arg(a, 1, "start");
        tv acc = st ? *st : tv_int(0);
        for (size_t i = 0; i < src->n; i++) {
            tv x = src->v[i];
            if (at && at->t != TV_NONE && !attr_path(c, &src->v[i], at, &x)) return false;
            tpl_ex dummy;
            (void)dummy;
            if (!((x.t == TV_INT || x.t == TV_FLOAT || x.t == TV_BOOL) && (acc.t == TV_INT || acc.t == TV_FLOAT || acc.t == TV_BOOL)))
                return tfail(c, line, "unsupported operand type(s) for +: '%s' and '%s'", tv_type_name(&acc), tv_type_name(&x));
            if (acc.t == TV_FLOAT || x.t == TV_FLOAT) {
                double fa = acc.t == TV_FLOAT ? acc.u.f : (double)(acc.t == TV_INT ? acc.u.i : acc.u.b);
                double fx = x.t == TV_FLOAT ? x.u.f : (double)(x.t == TV_INT ? x.u.i : x.u.b);
                acc = tv_float(fa + fx);
            } else {
                int64_t r, ia = acc.t == TV_INT ? acc.u.i : acc.u.b, ix = x.t == TV_INT ? x.u.i : x.u.b;
                if (__builtin_add_overflow(ia, ix, &r)) return tfail(c, line, "integer overflow in sum");
                acc = tv_int(r);
            }
        }
        *out = acc;
        return true;
    }
    if (!strcmp(n, "min") || !strcmp(n, "max")) {
        tv_list *src, *l;
        if (!tv_iter_list(c, line, v, &src)) return false;
        if (src->n == 0) { *out = tv_undef(c, "No aggregated item, sequence was empty."); return !c->failed; }
        if (!sorted(c, line, src, arg(a, 1, "attribute"), !arg_true(a, 0, "case_sensitive", false), false, &l)) return false;
        *out = n[1] == 'i' ? l->v[0] : l->v[l->n - 1];
        return true;
    }
    if (!strcmp(n, "attr")) {
        if (!a0 || !need_str(c, line, a0, "attr")) return a0 ? false : tfail(c, line, "attr needs a name");
        char *nm = ta_strndup(&c->ar, a0->u.s.p, a0->u.s.n);
        if (!nm) return toom(c, line);
        if (v->t == TV_UNDEF) return undef_fail(c, line, v);
        return get_attr(c, v, nm, out);
    }
    if (!strcmp(n, "e") || !strcmp(n, "escape") || !strcmp(n, "forceescape")) {
        tv s;
        if (!sstr(c, v, &s)) return false;
        tpl_sb b = {0};
        for (size_t i = 0; i < s.u.s.n; i++) {
            char ch = s.u.s.p[i];
            if (ch == '&') sb_puts(&b, "&amp;");
            else if (ch == '<') sb_puts(&b, "&lt;");
            else if (ch == '>') sb_puts(&b, "&gt;");
            else if (ch == '"') sb_puts(&b, "&#34;");
            else if (ch == '\'') sb_puts(&b, "&#39;");
            else sb_put(&b, &ch, 1);
        }
        if (!b.p) { *out = tv_strref("", 0); return true; }
        return tv_from_sb(c, &b, out);
    }
    if (!strcmp(n, "format")) {
        tv s;
        if (!sstr(c, v, &s)) return false;
        if (a->nk) {
            tv_dict *d = dict_new(c);
            if (!d) return toom(c, line);
            for (int k = 0; k < a->nk; k++) if (!dict_sets(c, d, a->kn[k], a->kv[k])) return false;
            tv dv = {0};
            dv.t = TV_DICT;
            dv.u.d = d;
            return py_percent_format(c, line, &s, &dv, out);
        }
        tv_list *l = list_new(c, (size_t)a->np);
        if (!l) return toom(c, line);
        l->tuple = true;
        for (int i = 0; i < a->np; i++) l->v[i] = a->pos[i];
        l->n = (size_t)a->np;
        tv tl = tv_list_of(l);
        return py_percent_format(c, line, &s, &tl, out);
    }
    if (!strcmp(n, "center")) {
        tv s;
        if (!sstr(c, v, &s)) return false;
        cargs ca = *a;
        if (!a->np) { static tv w80 = {TV_INT, {.i = 80}}; ca.np = 1; ca.pos = &w80; }
        return call_method(c, line, &s, "center", &ca, out);
    }
    if (!strcmp(n, "wordcount")) {   /* len(re.findall(r"\w+", str(value))) */
        tv s;
        if (!sstr(c, v, &s)) return false;
        int64_t words = 0;
        bool in_word = false;
        for (size_t i = 0; i < s.u.s.n;) {
            size_t adv;
            uint32_t cp = u8_next(s.u.s.p + i, s.u.s.n - i, &adv);
            utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
            bool w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                     (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
            if (w && !in_word) words++;
            in_word = w;
            i += adv;
        }
        *out = tv_int(words);
        return true;
    }
    if (!strcmp(n, "truncate")) {
        tv s;
        int64_t len = 255, leeway = 5;
        const tv *lv = arg(a, 0, "length"), *kw = arg(a, 1, "killwords"), *endv = arg(a, 2, "end"), *lw = arg(a, 3, "leeway");
        if (lv && !need_int(c, line, lv, "truncate", &len)) return false;
        if (lw && !need_int(c, line, lw, "truncate", &leeway)) return false;
        if (v->t == TV_LIST || v->t == TV_DICT) {
            size_t vl = v->t == TV_LIST ? v->u.l->n : v->u.d->n;
            if ((int64_t)vl <= len + leeway) { *out = *v; return true; }
            return tfail(c, line, "truncate: expected a string");
        }
        if (v->t != TV_STR) return v->t == TV_UNDEF ? undef_fail(c, line, v) : tfail(c, line, "object of type '%s' has no len()", tv_type_name(v));
        s = *v;
        tv endt = tv_strref("...", 3);
        if (endv && !sstr(c, endv, &endt)) return false;
        int64_t slen = (int64_t)u8_len(s.u.s.p, s.u.s.n), elen = (int64_t)u8_len(endt.u.s.p, endt.u.s.n);
        if (slen <= len + leeway) { *out = s; return true; }
        int64_t keep = len - elen;
        if (keep < 0) keep = 0;
        tv k = tv_int(keep), head;
        tv_list *chars;
        if (!tv_iter_list(c, line, &s, &chars)) return false;
        (void)k;
        size_t bytes = 0;
        for (int64_t i = 0; i < keep && (size_t)i < chars->n; i++) bytes += chars->v[i].u.s.n;
        head = tv_strref(s.u.s.p, bytes);
        if (!(kw && tv_truthy(kw))) {
            /* rsplit(" ", 1)[0] */
            const char *sp = NULL;
            for (size_t q = bytes; q-- > 0;) if (head.u.s.p[q] == ' ') { sp = head.u.s.p + q; break; }
            if (sp) head.u.s.n = (size_t)(sp - head.u.s.p);
        }
        tpl_sb b = {0};
        sb_put(&b, head.u.s.p, head.u.s.n);
        sb_put(&b, endt.u.s.p, endt.u.s.n);
        return tv_from_sb(c, &b, out);
    }
    if (!strcmp(n, "batch")) {
        tv_list *src;
        int64_t k;
        if (!a0 || !need_int(c, line, a0, "batch", &k)) return a0 ? false : tfail(c, line, "batch needs a size");
        if (k <= 0) return tfail(c, line, "batch size must be positive");
        if (!tv_iter_list(c, line, v, &src)) return false;
        const tv *fill = arg(a, 1, "fill_with");
        tv_list *l = list_new(c, 0), *curl = NULL;
        if (!l) return toom(c, line);
        for (size_t i = 0; i < src->n; i++) {
            if (!curl) { curl = list_new(c, 0); if (!curl || !list_push(c, l, tv_list_of(curl))) return toom(c, line); }
            if (!list_push(c, curl, src->v[i])) return false;
            if ((int64_t)curl->n == k) curl = NULL;
        }
        if (curl && fill && fill->t != TV_NONE) while ((int64_t)curl->n < k) if (!list_push(c, curl, *fill)) return false;
        l->gen = true;
        *out = tv_list_of(l);
        return true;
    }
    if (!strcmp(n, "pprint")) {
        tpl_sb b = {0};
        tv_write_repr(&b, v);
        if (!b.p) { *out = tv_strref("", 0); return true; }
        return tv_from_sb(c, &b, out);
    }
    if (!strcmp(n, "striptags") || !strcmp(n, "urlencode")) {
        tv s;
        if (!sstr(c, v, &s)) return false;
        tpl_sb b = {0};
        if (n[0] == 's') {
            /* remove <...> and collapse whitespace */
            bool in_tag = false, pending_space = false, any = false;
            for (size_t i = 0; i < s.u.s.n; i++) {
                char ch = s.u.s.p[i];
                if (in_tag) { if (ch == '>') in_tag = false; continue; }
                if (ch == '<') { in_tag = true; continue; }
                if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') { pending_space = any; continue; }
                if (pending_space) { sb_put(&b, " ", 1); pending_space = false; }
                sb_put(&b, &ch, 1);
                any = true;
            }
        } else {
            for (size_t i = 0; i < s.u.s.n; i++) {
                unsigned char ch = (unsigned char)s.u.s.p[i];
                if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("_.-~/", ch)) sb_put(&b, (const char *)&ch, 1);
                else sb_printf(&b, "%%%02X", ch);
            }
        }
        if (!b.p) { *out = tv_strref("", 0); return true; }
        return tv_from_sb(c, &b, out);
    }
    if (!strcmp(n, "safe")) return sstr(c, v, out);   /* Markup(str(value)) */
    return tfail(c, line, "no filter named '%s'", n);
}
