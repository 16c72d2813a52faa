/* template/eval.c: the Jinja2 evaluator: scopes, expressions with Python semantics, statements,
 * macros, loops, and the entry point that renders a parsed template with JSON variables. The
 * filters, tests, methods and global functions live in builtins.c. Not thread-shared: each render
 * has its own context and arena; the template it reads is never written. */
#include "template/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- errors */

bool tfail(tctx *c, int line, const char *fmt, ...) {
    if (c->failed) return false;
    c->failed = true;
    int n = line > 0 ? snprintf(c->err, sizeof c->err, "template line %d: ", line) : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + n, sizeof c->err - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}

bool toom(tctx *c, int line) { return tfail(c, line, "out of memory (template memory limit reached)"); }

bool undef_fail(tctx *c, int line, const tv *u) {
    if (u->u.s.p) return tfail(c, line, "%.*s", (int)u->u.s.n, u->u.s.p);
    return tfail(c, line, "undefined value");
}

/* ---------------------------------------------------------------- value constructors */

tv tv_undef(tctx *c, const char *fmt, ...) {
    tv v = {0};
    v.t = TV_UNDEF;
    if (fmt) {
        char buf[256];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        if (n < 0) n = 0;
        if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
        v.u.s.p = ta_strndup(&c->ar, buf, (size_t)n);
        v.u.s.n = v.u.s.p ? (size_t)n : 0;
    }
    return v;
}
tv tv_none(void) { tv v = {0}; v.t = TV_NONE; return v; }
tv tv_bool(bool b) { tv v = {0}; v.t = TV_BOOL; v.u.b = b; return v; }
tv tv_int(int64_t i) { tv v = {0}; v.t = TV_INT; v.u.i = i; return v; }
tv tv_float(double f) { tv v = {0}; v.t = TV_FLOAT; v.u.f = f; return v; }
tv tv_strref(const char *p, size_t n) { tv v = {0}; v.t = TV_STR; v.u.s.p = p; v.u.s.n = n; return v; }

bool tv_str_copy(tctx *c, const char *p, size_t n, tv *out) {
    char *s = ta_strndup(&c->ar, p, n);
    if (!s) return toom(c, 0);
    *out = tv_strref(s, n);
    return true;
}

bool tv_from_sb(tctx *c, tpl_sb *b, tv *out) {
    if (b->oom) { sb_free(b); return toom(c, 0); }
    bool ok = tv_str_copy(c, b->p ? b->p : "", b->n, out);
    sb_free(b);
    return ok;
}

tv_list *list_new(tctx *c, size_t cap) {
    tv_list *l = ta_alloc(&c->ar, sizeof *l);
    if (!l) return NULL;
    if (cap) {
        l->v = ta_alloc(&c->ar, cap * sizeof *l->v);
        if (!l->v) return NULL;
        l->cap = cap;
    }
    return l;
}

bool list_push(tctx *c, tv_list *l, tv x) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tv *nv = ta_alloc(&c->ar, cap * sizeof *nv);
        if (!nv) return toom(c, 0);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}

tv tv_list_of(tv_list *l) { tv v = {0}; v.t = TV_LIST; v.u.l = l; return v; }

tv_dict *dict_new(tctx *c) { return ta_alloc(&c->ar, sizeof(tv_dict)); }

tv *dict_get(tv_dict *d, const tv *k) {
    for (size_t i = 0; i < d->n; i++) if (tv_eq(&d->k[i], k)) return &d->v[i];
    return NULL;
}
tv *dict_gets(tv_dict *d, const char *k, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == TV_STR && d->k[i].u.s.n == n && !memcmp(d->k[i].u.s.p, k, n)) return &d->v[i];
    return NULL;
}

bool dict_set(tctx *c, tv_dict *d, tv k, tv v) {
    tv *e = dict_get(d, &k);
    if (e) { *e = v; return true; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        tv *nk = ta_alloc(&c->ar, cap * sizeof *nk), *nv = ta_alloc(&c->ar, cap * sizeof *nv);
        if (!nk || !nv) return toom(c, 0);
        if (d->n) { memcpy(nk, d->k, d->n * sizeof *nk); memcpy(nv, d->v, d->n * sizeof *nv); }
        d->k = nk; d->v = nv; d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return true;
}

bool dict_sets(tctx *c, tv_dict *d, const char *k, tv v) { return dict_set(c, d, tv_strref(k, strlen(k)), v); }

/* ---------------------------------------------------------------- equality / ordering */

static bool is_num(const tv *v) { return v->t == TV_INT || v->t == TV_FLOAT || v->t == TV_BOOL; }
static double num_f(const tv *v) { return v->t == TV_FLOAT ? v->u.f : v->t == TV_INT ? (double)v->u.i : (double)v->u.b; }
static int64_t num_i(const tv *v) { return v->t == TV_INT ? v->u.i : (int64_t)v->u.b; }

static bool eq_d(const tv *a, const tv *b, int depth) {
    if (depth > 100) return false;   /* self-referential containers */
    if (is_num(a) && is_num(b)) {
        if (a->t != TV_FLOAT && b->t != TV_FLOAT) return num_i(a) == num_i(b);
        return num_f(a) == num_f(b);
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case TV_UNDEF: case TV_NONE: return true;
    case TV_STR: return a->u.s.n == b->u.s.n && !memcmp(a->u.s.p, b->u.s.p, a->u.s.n);
    case TV_LIST:
        if (a->u.l == b->u.l) return true;
        if (a->u.l->gen || b->u.l->gen) return false;
        if (a->u.l->n != b->u.l->n || a->u.l->tuple != b->u.l->tuple) return false;
        for (size_t i = 0; i < a->u.l->n; i++) if (!eq_d(&a->u.l->v[i], &b->u.l->v[i], depth + 1)) return false;
        return true;
    case TV_DICT: case TV_NS:
        if (a->u.d == b->u.d) return true;
        if (a->t == TV_NS) return false;
        if (a->u.d->n != b->u.d->n) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            tv *o = dict_get(b->u.d, &a->u.d->k[i]);
            if (!o || !eq_d(o, &a->u.d->v[i], depth + 1)) return false;
        }
        return true;
    case TV_FUNC: return a->u.fn == b->u.fn;
    case TV_LOOP: return a->u.lp == b->u.lp;
    }
    return false;
}

bool tv_eq(const tv *a, const tv *b) { return eq_d(a, b, 0); }

/* -1/0/1 into *r; false (not an error yet) when the types do not order */
static bool order_d(const tv *a, const tv *b, int *r, int depth) {
    if (depth > 100) return false;
    if (is_num(a) && is_num(b)) {
        if (a->t != TV_FLOAT && b->t != TV_FLOAT) { int64_t x = num_i(a), y = num_i(b); *r = x < y ? -1 : x > y; return true; }
        double x = num_f(a), y = num_f(b);
        *r = x < y ? -1 : x > y;
        return true;
    }
    if (a->t == TV_STR && b->t == TV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int k = memcmp(a->u.s.p, b->u.s.p, n);
        *r = k ? (k < 0 ? -1 : 1) : (a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n);
        return true;
    }
    if (a->t == TV_LIST && b->t == TV_LIST && a->u.l->tuple == b->u.l->tuple && !a->u.l->gen && !b->u.l->gen) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (tv_eq(&a->u.l->v[i], &b->u.l->v[i])) continue;
            return order_d(&a->u.l->v[i], &b->u.l->v[i], r, depth + 1);
        }
        *r = a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
        return true;
    }
    return false;
}

bool tv_order(const tv *a, const tv *b, int *r) { return order_d(a, b, r, 0); }

/* ---------------------------------------------------------------- strings */

bool tv_to_str(tctx *c, const tv *v, tv *out) {
    if (v->t == TV_STR) { *out = *v; return true; }
    if (v->t == TV_UNDEF) { *out = tv_strref("", 0); return true; }
    tpl_sb b = {0};
    tv_write_str(&b, v);
    return tv_from_sb(c, &b, out);
}

/* ---------------------------------------------------------------- scopes */

scope *scope_new(tctx *c, scope *parent) {
    scope *s = ta_alloc(&c->ar, sizeof *s);
    if (!s) { toom(c, 0); return NULL; }
    s->parent = parent;
    return s;
}

static tv *scope_find(scope *s, const char *name) {
    size_t n = strlen(name);
    for (; s; s = s->parent) {
        tv *v = dict_gets(&s->vars, name, n);
        if (v) return v;
    }
    return NULL;
}

bool scope_set(tctx *c, scope *s, const char *name, tv v) { return dict_set(c, &s->vars, tv_strref(name, strlen(name)), v); }

/* ---------------------------------------------------------------- output */

static bool out_put(tctx *c, const char *p, size_t n) {
    sb_put(c->out, p, n);
    if (c->out->oom || c->out->n > c->max_out) return tfail(c, 0, "template output too large");
    return true;
}

static bool out_val(tctx *c, const tv *v) {
    if (v->t == TV_STR) return out_put(c, v->u.s.p, v->u.s.n);
    size_t before = c->out->n;
    (void)before;
    tv_write_str(c->out, v);
    if (c->out->oom || c->out->n > c->max_out) return tfail(c, 0, "template output too large");
    return true;
}

/* ---------------------------------------------------------------- attribute / item access */

static int64_t py_index(int64_t i, size_t n, bool *ok) {
    if (i < 0) i += (int64_t)n;
    *ok = i >= 0 && (uint64_t)i < n;
    return i;
}

/* byte offset of code point index k in s (k <= code points) */
static size_t u8_off(const char *p, size_t n, size_t k) {
    size_t i = 0;
    while (k > 0 && i < n) { size_t a; u8_next(p + i, n - i, &a); i += a; k--; }
    return i;
}

static const char *const str_methods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith",
    "endswith", "upper", "lower", "title", "capitalize", "replace", "find", "rfind", "count", "join", "format",
    "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "index", "swapcase", "zfill", "center",
    "ljust", "rjust", "partition", "rpartition", NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", "copy", "pop", "setdefault", "update", NULL};
static const char *const list_methods[] = {"append", "extend", "pop", "insert", "index", "count", "copy", "reverse", "remove", NULL};

static bool in_list(const char *const *l, const char *n) {
    for (int i = 0; l[i]; i++) if (!strcmp(l[i], n)) return true;
    return false;
}

static tv bound(tctx *c, const tv *self, const char *name) {
    tv_func *f = ta_alloc(&c->ar, sizeof *f);
    if (!f) { toom(c, 0); return tv_undef(c, NULL); }
    f->kind = FK_METHOD;
    f->name = name;
    f->self = *self;
    tv v = {0};
    v.t = TV_FUNC;
    v.u.fn = f;
    return v;
}

static const char *obj_desc(const tv *v) {
    switch (v->t) {
    case TV_DICT: return "'dict object'";
    case TV_LIST: return v->u.l->tuple ? "'tuple object'" : "'list object'";
    case TV_STR: return "'str object'";
    case TV_INT: return "'int object'";
    case TV_FLOAT: return "'float object'";
    case TV_BOOL: return "'bool object'";
    case TV_NONE: return "'None'";
    case TV_NS: return "'jinja2.utils.Namespace object'";
    case TV_LOOP: return "'LoopContext object'";
    default: return "'function object'";
    }
}

static bool loop_attr(tctx *c, tv_loop *lp, const char *name, tv *out) {
    int64_t n = (int64_t)lp->items->n, i = (int64_t)lp->i;
    if (!strcmp(name, "index")) *out = tv_int(i + 1);
    else if (!strcmp(name, "index0")) *out = tv_int(i);
    else if (!strcmp(name, "revindex")) *out = tv_int(n - i);
    else if (!strcmp(name, "revindex0")) *out = tv_int(n - i - 1);
    else if (!strcmp(name, "first")) *out = tv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = tv_bool(i == n - 1);
    else if (!strcmp(name, "length")) *out = tv_int(n);
    else if (!strcmp(name, "depth")) *out = tv_int(lp->depth);
    else if (!strcmp(name, "depth0")) *out = tv_int(lp->depth - 1);
    else if (!strcmp(name, "previtem")) *out = i > 0 ? lp->items->v[i - 1] : tv_undef(c, "there is no previous item");
    else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? lp->items->v[i + 1] : tv_undef(c, "there is no next item");
    else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) { tv self = {0}; self.t = TV_LOOP; self.u.lp = lp; *out = bound(c, &self, !strcmp(name, "cycle") ? "cycle" : "changed"); }
    else { *out = tv_undef(c, "'LoopContext object' has no attribute '%s'", name); }
    return !c->failed;
}

bool get_attr(tctx *c, const tv *obj, const char *name, tv *out) {
    switch (obj->t) {
    case TV_DICT:
        if (in_list(dict_methods, name)) { *out = bound(c, obj, name); return !c->failed; }
        /* fallthrough */
    case TV_NS: {
        tv *v = dict_gets(obj->u.d, name, strlen(name));
        if (v) { *out = *v; return true; }
        break;
    }
    case TV_STR:
        if (in_list(str_methods, name)) { *out = bound(c, obj, name); return !c->failed; }
        break;
    case TV_LIST:
        if (in_list(list_methods, name)) { *out = bound(c, obj, name); return !c->failed; }
        break;
    case TV_LOOP: return loop_attr(c, obj->u.lp, name, out);
    default: break;
    }
    *out = tv_undef(c, "%s has no attribute '%s'", obj_desc(obj), name);
    return !c->failed;
}

bool get_item(tctx *c, const tv *obj, const tv *key, tv *out) {
    switch (obj->t) {
    case TV_DICT: case TV_NS: {
        tv *v = dict_get(obj->u.d, key);
        if (v) { *out = *v; return true; }
        break;
    }
    case TV_LIST:
        if (obj->u.l->gen) { *out = tv_undef(c, "'generator' object is not subscriptable"); return !c->failed; }
        if (key->t == TV_INT || key->t == TV_BOOL) {
            bool ok;
            int64_t i = py_index(num_i(key), obj->u.l->n, &ok);
            if (ok) { *out = obj->u.l->v[i]; return true; }
            *out = tv_undef(c, "%s has no element %lld", obj_desc(obj), (long long)num_i(key));
            return !c->failed;
        }
        break;
    case TV_STR:
        if (key->t == TV_INT || key->t == TV_BOOL) {
            size_t len = u8_len(obj->u.s.p, obj->u.s.n);
            bool ok;
            int64_t i = py_index(num_i(key), len, &ok);
            if (ok) {
                size_t off = u8_off(obj->u.s.p, obj->u.s.n, (size_t)i), a;
                u8_next(obj->u.s.p + off, obj->u.s.n - off, &a);
                *out = tv_strref(obj->u.s.p + off, a);
                return true;
            }
            *out = tv_undef(c, "%s has no element %lld", obj_desc(obj), (long long)num_i(key));
            return !c->failed;
        }
        break;
    default: break;
    }
    if (key->t == TV_STR) {
        char *nm = ta_strndup(&c->ar, key->u.s.p, key->u.s.n);
        if (!nm) return toom(c, 0);
        if (obj->t == TV_DICT || obj->t == TV_NS) {   /* key missing: only methods remain */
            if (obj->t == TV_DICT && in_list(dict_methods, nm)) { *out = bound(c, obj, nm); return !c->failed; }
            *out = tv_undef(c, "%s has no attribute '%s'", obj_desc(obj), nm);
            return !c->failed;
        }
        return get_attr(c, obj, nm, out);
    }
    tpl_sb b = {0};
    tv_write_repr(&b, key);
    *out = tv_undef(c, "%s has no element %.*s", obj_desc(obj), (int)(b.n > 60 ? 60 : b.n), b.p ? b.p : "");
    sb_free(&b);
    return !c->failed;
}

/* Python slice index adjustment */
static void slice_adjust(int64_t len, const tv *st, const tv *sp, int64_t step, int64_t *start, int64_t *stop) {
    if (step > 0) {
        *start = st ? num_i(st) : 0;
        *stop = sp ? num_i(sp) : len;
        if (*start < 0) { *start += len; if (*start < 0) *start = 0; } else if (*start > len) *start = len;
        if (*stop < 0) { *stop += len; if (*stop < 0) *stop = 0; } else if (*stop > len) *stop = len;
    } else {
        *start = st ? num_i(st) : len - 1;
        *stop = sp ? num_i(sp) : -1 - len;
        if (*start < 0) { *start += len; if (*start < 0) *start = -1; } else if (*start >= len) *start = len - 1;
        if (*stop < 0) { *stop += len; if (*stop < 0) *stop = -1; } else if (*stop >= len) *stop = len - 1;
    }
}

static bool do_slice(tctx *c, int line, const tv *obj, const tv *st, const tv *sp, const tv *stp, tv *out) {
    const tv *args[3] = {st, sp, stp};
    for (int i = 0; i < 3; i++) {
        if (args[i] && args[i]->t == TV_NONE) args[i] = NULL;
        if (args[i] && args[i]->t != TV_INT && args[i]->t != TV_BOOL)
            return tfail(c, line, "slice indices must be integers or None");
    }
    st = args[0]; sp = args[1]; stp = args[2];
    int64_t step = stp ? num_i(stp) : 1;
    if (step == 0) return tfail(c, line, "slice step cannot be zero");
    if (obj->t == TV_UNDEF) return undef_fail(c, line, obj);
    if (obj->t == TV_LIST && !obj->u.l->gen) {
        int64_t len = (int64_t)obj->u.l->n, a, b;
        slice_adjust(len, st, sp, step, &a, &b);
        tv_list *l = list_new(c, 0);
        if (!l) return toom(c, line);
        l->tuple = obj->u.l->tuple;
        for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
            if (!list_push(c, l, obj->u.l->v[i])) return false;
        *out = tv_list_of(l);
        return true;
    }
    if (obj->t == TV_STR) {
        const char *p = obj->u.s.p;
        size_t n = obj->u.s.n;
        size_t len = u8_len(p, n);
        size_t *offs = malloc((len + 1) * sizeof *offs);
        if (!offs) return toom(c, line);
        size_t i = 0, k = 0;
        while (i < n) { offs[k++] = i; size_t a; u8_next(p + i, n - i, &a); i += a; }
        offs[k] = n;
        int64_t a, b;
        slice_adjust((int64_t)len, st, sp, step, &a, &b);
        tpl_sb sb = {0};
        if (step == 1) { if (b > a) sb_put(&sb, p + offs[a], offs[b] - offs[a]); }
        else for (int64_t j = a; step > 0 ? j < b : j > b; j += step) sb_put(&sb, p + offs[j], offs[j + 1] - offs[j]);
        free(offs);
        return tv_from_sb(c, &sb, out);
    }
    return tfail(c, line, "'%s' object is not subscriptable", obj->t == TV_LIST ? "generator" : tv_type_name(obj));
}

/* ---------------------------------------------------------------- iteration */

/* Materialize an iterable as a list (dict -> keys, str -> characters, undefined -> empty). */
bool tv_iter_list(tctx *c, int line, const tv *v, tv_list **out) {
    tv_list *l;
    switch (v->t) {
    case TV_LIST:
        if (v->u.l->gen) {   /* a generator is consumed by iterating it */
            l = list_new(c, v->u.l->n);
            if (!l) return toom(c, line);
            if (v->u.l->n) memcpy(l->v, v->u.l->v, v->u.l->n * sizeof(tv));
            l->n = v->u.l->n;
            v->u.l->n = 0;
            *out = l;
            return true;
        }
        *out = v->u.l;
        return true;
    case TV_UNDEF: *out = list_new(c, 0); return *out ? true : toom(c, line);
    case TV_DICT: case TV_NS:
        l = list_new(c, v->u.d->n);
        if (!l) return toom(c, line);
        for (size_t i = 0; i < v->u.d->n; i++) l->v[i] = v->u.d->k[i];
        l->n = v->u.d->n;
        *out = l;
        return true;
    case TV_STR: {
        l = list_new(c, 0);
        if (!l) return toom(c, line);
        size_t i = 0;
        while (i < v->u.s.n) {
            size_t a;
            u8_next(v->u.s.p + i, v->u.s.n - i, &a);
            if (!list_push(c, l, tv_strref(v->u.s.p + i, a))) return false;
            i += a;
        }
        *out = l;
        return true;
    }
    default:
        return tfail(c, line, "'%s' object is not iterable", tv_type_name(v));
    }
}

/* ---------------------------------------------------------------- arithmetic */

static bool binop(tctx *c, int line, int op, const tv *a, const tv *b, tv *out) {
    static const char *opn[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    if (op == OP_CONCAT) {
        tpl_sb sb = {0};
        tv_write_str(&sb, a);
        tv_write_str(&sb, b);
        return tv_from_sb(c, &sb, out);
    }
    if (a->t == TV_UNDEF) return undef_fail(c, line, a);
    if (b->t == TV_UNDEF) return undef_fail(c, line, b);
    if (is_num(a) && is_num(b)) {
        bool ints = a->t != TV_FLOAT && b->t != TV_FLOAT;
        if (ints) {
            int64_t x = num_i(a), y = num_i(b), r;
            switch (op) {
            case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto ovf; *out = tv_int(r); return true;
            case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto ovf; *out = tv_int(r); return true;
            case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto ovf; *out = tv_int(r); return true;
            case OP_DIV: if (y == 0) return tfail(c, line, "division by zero"); *out = tv_float((double)x / (double)y); return true;
            case OP_FLOORDIV:
                if (y == 0) return tfail(c, line, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) goto ovf;
                r = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) r--;
                *out = tv_int(r);
                return true;
            case OP_MOD:
                if (y == 0) return tfail(c, line, "integer division or modulo by zero");
                if (y == -1) { *out = tv_int(0); return true; }
                r = x % y;
                if (r != 0 && ((r < 0) != (y < 0))) r += y;
                *out = tv_int(r);
                return true;
            case OP_POW:
                if (y >= 0) {
                    int64_t acc = 1, base = x;
                    int64_t e = y;
                    while (e > 0) {
                        if (e & 1) { if (__builtin_mul_overflow(acc, base, &acc)) goto ovf; }
                        e >>= 1;
                        if (e && __builtin_mul_overflow(base, base, &base)) goto ovf;
                    }
                    *out = tv_int(acc);
                    return true;
                }
                if (x == 0) return tfail(c, line, "0.0 cannot be raised to a negative power");
                *out = tv_float(pow((double)x, (double)y));
                return true;
            }
        }
        double x = num_f(a), y = num_f(b);
        switch (op) {
        case OP_ADD: *out = tv_float(x + y); return true;
        case OP_SUB: *out = tv_float(x - y); return true;
        case OP_MUL: *out = tv_float(x * y); return true;
        case OP_DIV: if (y == 0) return tfail(c, line, "float division by zero"); *out = tv_float(x / y); return true;
        case OP_FLOORDIV: if (y == 0) return tfail(c, line, "float floor division by zero"); *out = tv_float(floor(x / y)); return true;
        case OP_MOD: {
            if (y == 0) return tfail(c, line, "float modulo");
            double r = fmod(x, y);
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            *out = tv_float(r);
            return true;
        }
        case OP_POW: *out = tv_float(pow(x, y)); return true;
        }
    }
    if (op == OP_ADD && a->t == TV_STR && b->t == TV_STR) {
        size_t n = a->u.s.n + b->u.s.n;
        char *s = ta_alloc(&c->ar, n + 1);
        if (!s) return toom(c, line);
        memcpy(s, a->u.s.p, a->u.s.n);
        memcpy(s + a->u.s.n, b->u.s.p, b->u.s.n);
        *out = tv_strref(s, n);
        return true;
    }
    if (op == OP_ADD && a->t == TV_LIST && b->t == TV_LIST && a->u.l->tuple == b->u.l->tuple && !a->u.l->gen && !b->u.l->gen) {
        tv_list *l = list_new(c, a->u.l->n + b->u.l->n);
        if (!l) return toom(c, line);
        if (a->u.l->n) memcpy(l->v, a->u.l->v, a->u.l->n * sizeof(tv));
        if (b->u.l->n) memcpy(l->v + a->u.l->n, b->u.l->v, b->u.l->n * sizeof(tv));
        l->n = a->u.l->n + b->u.l->n;
        l->tuple = a->u.l->tuple;
        *out = tv_list_of(l);
        return true;
    }
    if (op == OP_MUL && ((a->t == TV_STR || (a->t == TV_LIST && !a->u.l->gen)) && (b->t == TV_INT || b->t == TV_BOOL))) {
        int64_t k = num_i(b);
        if (k < 0) k = 0;
        if (a->t == TV_STR) {
            if (a->u.s.n && (uint64_t)k > (uint64_t)(c->max_mem / a->u.s.n)) return toom(c, line);
            size_t n = a->u.s.n * (size_t)k;
            char *s = ta_alloc(&c->ar, n + 1);
            if (!s) return toom(c, line);
            for (int64_t i = 0; i < k; i++) memcpy(s + (size_t)i * a->u.s.n, a->u.s.p, a->u.s.n);
            *out = tv_strref(s, n);
            return true;
        }
        if (a->u.l->n && (uint64_t)k > (uint64_t)(c->max_mem / (a->u.l->n * sizeof(tv)))) return toom(c, line);
        tv_list *l = list_new(c, a->u.l->n * (size_t)k);
        if (!l) return toom(c, line);
        for (int64_t i = 0; i < k; i++) for (size_t j = 0; j < a->u.l->n; j++) l->v[l->n++] = a->u.l->v[j];
        l->tuple = a->u.l->tuple;
        *out = tv_list_of(l);
        return true;
    }
    if (op == OP_MUL && (b->t == TV_STR || b->t == TV_LIST) && (a->t == TV_INT || a->t == TV_BOOL))
        return binop(c, line, op, b, a, out);
    if (op == OP_MOD && a->t == TV_STR) return py_percent_format(c, line, a, b, out);
    return tfail(c, line, "unsupported operand type(s) for %s: '%s' and '%s'", opn[op], tv_type_name(a), tv_type_name(b));
ovf:
    return tfail(c, line, "integer overflow in '%s'", opn[op]);
}

bool tv_contains(tctx *c, int line, const tv *container, const tv *x, bool *res) {
    switch (container->t) {
    case TV_STR:
        if (x->t != TV_STR) return tfail(c, line, "'in <string>' requires string as left operand, not %s", tv_type_name(x));
        if (x->u.s.n == 0) { *res = true; return true; }
        *res = x->u.s.n <= container->u.s.n && memmem(container->u.s.p, container->u.s.n, x->u.s.p, x->u.s.n) != NULL;
        return true;
    case TV_LIST:
        *res = false;
        for (size_t i = 0; i < container->u.l->n; i++) if (tv_eq(&container->u.l->v[i], x)) { *res = true; break; }
        return true;
    case TV_DICT: case TV_NS:
        if ((x->t == TV_LIST && !x->u.l->tuple) || x->t == TV_DICT || x->t == TV_NS)
            return tfail(c, line, "unhashable type: '%s'", tv_type_name(x));
        *res = dict_get(container->u.d, x) != NULL;
        return true;
    case TV_UNDEF: *res = false; return true;
    default: return tfail(c, line, "argument of type '%s' is not iterable", tv_type_name(container));
    }
}

static bool compare(tctx *c, int line, int op, const tv *a, const tv *b, bool *res) {
    static const char *opn[] = {"==", "!=", "<", "<=", ">", ">="};
    switch (op) {
    case CMP_EQ: *res = tv_eq(a, b); return true;
    case CMP_NE: *res = !tv_eq(a, b); return true;
    case CMP_IN: return tv_contains(c, line, b, a, res);
    case CMP_NOTIN: if (!tv_contains(c, line, b, a, res)) return false; *res = !*res; return true;
    default: {
        if (a->t == TV_UNDEF) return undef_fail(c, line, a);
        if (b->t == TV_UNDEF) return undef_fail(c, line, b);
        int r;
        if (!tv_order(a, b, &r))
            return tfail(c, line, "'%s' not supported between instances of '%s' and '%s'", opn[op], tv_type_name(a), tv_type_name(b));
        *res = op == CMP_LT ? r < 0 : op == CMP_LE ? r <= 0 : op == CMP_GT ? r > 0 : r >= 0;
        return true;
    }
    }
}

/* ---------------------------------------------------------------- expressions */

static bool eval_args(tctx *c, scope *sc, const tpl_args *a, cargs *out) {
    memset(out, 0, sizeof *out);
    out->np = a->np;
    out->nk = a->nk;
    if (a->np) { out->pos = ta_alloc(&c->ar, (size_t)a->np * sizeof(tv)); if (!out->pos) return toom(c, 0); }
    if (a->nk) { out->kv = ta_alloc(&c->ar, (size_t)a->nk * sizeof(tv)); if (!out->kv) return toom(c, 0); }
    out->kn = a->kn;
    for (int i = 0; i < a->np; i++) if (!tpl_eval(c, sc, a->pos[i], &out->pos[i])) return false;
    for (int i = 0; i < a->nk; i++) if (!tpl_eval(c, sc, a->kv[i], &out->kv[i])) return false;
    return true;
}

bool tpl_eval(tctx *c, scope *sc, const tpl_ex *e, tv *out) {
    if (++c->steps > c->max_steps) return tfail(c, e->line, "template exceeded its step limit");
    if (c->failed) return false;
    switch (e->k) {
    case E_LIT: *out = e->lit; return true;
    case E_PLACEHOLDER: *out = c->placeholder; return true;
    case E_NAME: {
        tv *v = scope_find(sc, e->name);
        if (v) { *out = *v; return true; }
        if (builtin_global(c, e->name, out)) return true;
        *out = tv_undef(c, "'%s' is undefined", e->name);
        return !c->failed;
    }
    case E_LIST: case E_TUPLE: {
        tv_list *l = list_new(c, (size_t)e->n);
        if (!l) return toom(c, e->line);
        l->tuple = e->k == E_TUPLE;
        for (int i = 0; i < e->n; i++) if (!tpl_eval(c, sc, e->items[i], &l->v[i])) return false;
        l->n = (size_t)e->n;
        *out = tv_list_of(l);
        return true;
    }
    case E_DICT: {
        tv_dict *d = dict_new(c);
        if (!d) return toom(c, e->line);
        for (int i = 0; i < e->n; i++) {
            tv k, v;
            if (!tpl_eval(c, sc, e->items[i], &k) || !tpl_eval(c, sc, e->vals[i], &v)) return false;
            if (k.t == TV_LIST && !k.u.l->tuple) return tfail(c, e->line, "unhashable type: 'list'");
            if (k.t == TV_DICT) return tfail(c, e->line, "unhashable type: 'dict'");
            if (!dict_set(c, d, k, v)) return false;
        }
        out->t = TV_DICT;
        out->u.d = d;
        return true;
    }
    case E_ATTR: {
        tv o;
        if (!tpl_eval(c, sc, e->a, &o)) return false;
        if (o.t == TV_UNDEF) return undef_fail(c, e->line, &o);
        return get_attr(c, &o, e->name, out);
    }
    case E_ITEM: {
        tv o, k;
        if (!tpl_eval(c, sc, e->a, &o) || !tpl_eval(c, sc, e->b, &k)) return false;
        if (o.t == TV_UNDEF) return undef_fail(c, e->line, &o);
        return get_item(c, &o, &k, out);
    }
    case E_SLICE: {
        tv o, x[3];
        const tv *p[3] = {NULL, NULL, NULL};
        if (!tpl_eval(c, sc, e->a, &o)) return false;
        const tpl_ex *parts[3] = {e->b, e->c, e->d};
        for (int i = 0; i < 3; i++) if (parts[i]) { if (!tpl_eval(c, sc, parts[i], &x[i])) return false; p[i] = &x[i]; }
        return do_slice(c, e->line, &o, p[0], p[1], p[2], out);
    }
    case E_CALL: {
        tv f;
        if (!tpl_eval(c, sc, e->a, &f)) return false;
        if (f.t == TV_UNDEF) return undef_fail(c, e->line, &f);
        if (f.t != TV_FUNC && f.t != TV_LOOP) return tfail(c, e->line, "'%s' object is not callable", tv_type_name(&f));
        cargs a;
        if (!eval_args(c, sc, &e->args, &a)) return false;
        if (f.t == TV_LOOP) {
            if (!f.u.lp->forst->recursive) return tfail(c, e->line, "loop() can only be called in a loop marked 'recursive'");
            return call_loop_recurse(c, e->line, f.u.lp, &a, out);
        }
        return call_func(c, e->line, f.u.fn, &a, NULL, out);
    }
    case E_FILTER: {
        tv v;
        if (!tpl_eval(c, sc, e->a, &v)) return false;
        cargs a;
        if (!eval_args(c, sc, &e->args, &a)) return false;
        return apply_filter(c, e->line, sc, e->name, &v, &a, out);
    }
    case E_TEST: {
        tv v;
        if (!tpl_eval(c, sc, e->a, &v)) return false;
        cargs a;
        if (!eval_args(c, sc, &e->args, &a)) return false;
        bool r;
        if (!apply_test(c, e->line, e->name, &v, &a, &r)) return false;
        *out = tv_bool(e->op ? !r : r);
        return true;
    }
    case E_NEG: case E_POS: {
        tv v;
        if (!tpl_eval(c, sc, e->a, &v)) return false;
        if (v.t == TV_UNDEF) return undef_fail(c, e->line, &v);
        if (!is_num(&v)) return tfail(c, e->line, "bad operand type for unary %s: '%s'", e->k == E_NEG ? "-" : "+", tv_type_name(&v));
        if (e->k == E_POS) { *out = v.t == TV_BOOL ? tv_int(v.u.b) : v; return true; }
        if (v.t == TV_FLOAT) *out = tv_float(-v.u.f);
        else if (num_i(&v) == INT64_MIN) return tfail(c, e->line, "integer overflow");
        else *out = tv_int(-num_i(&v));
        return true;
    }
    case E_NOT: {
        tv v;
        if (!tpl_eval(c, sc, e->a, &v)) return false;
        *out = tv_bool(!tv_truthy(&v));
        return true;
    }
    case E_AND: case E_OR: {
        tv v;
        if (!tpl_eval(c, sc, e->a, &v)) return false;
        bool t = tv_truthy(&v);
        if ((e->k == E_AND && !t) || (e->k == E_OR && t)) { *out = v; return true; }
        return tpl_eval(c, sc, e->b, out);
    }
    case E_BIN: {
        tv a, b;
        if (!tpl_eval(c, sc, e->a, &a) || !tpl_eval(c, sc, e->b, &b)) return false;
        return binop(c, e->line, e->op, &a, &b, out);
    }
    case E_CMP: {
        tv a, b;
        if (!tpl_eval(c, sc, e->items[0], &a)) return false;
        for (int i = 1; i < e->n; i++) {
            if (!tpl_eval(c, sc, e->items[i], &b)) return false;
            bool r;
            if (!compare(c, e->line, e->ops[i - 1], &a, &b, &r)) return false;
            if (!r) { *out = tv_bool(false); return true; }
            a = b;
        }
        *out = tv_bool(true);
        return true;
    }
    case E_COND: {
        tv v;
        if (!tpl_eval(c, sc, e->c, &v)) return false;
        if (tv_truthy(&v)) return tpl_eval(c, sc, e->a, out);
        if (e->b) return tpl_eval(c, sc, e->b, out);
        *out = tv_undef(c, "the inline if-expression on line %d evaluated to false and no else section was defined.", e->line);
        return !c->failed;
    }
    }
    return tfail(c, e->line, "internal error: bad expression node");
}

/* ---------------------------------------------------------------- statements */

enum { X_OK = 0, X_BREAK, X_CONT, X_ERR };

static int exec_body(tctx *c, scope *sc, const tpl_body *b);

/* Render a body into a string with output captured. */
bool capture(tctx *c, scope *sc, const tpl_body *b, tv *out, int line) {
    tpl_sb sb = {0}, *saved = c->out;
    c->out = &sb;
    int r = exec_body(c, sc, b);
    c->out = saved;
    if (r == X_ERR) { sb_free(&sb); return false; }
    if (r != X_OK) { sb_free(&sb); return tfail(c, line, "'break' or 'continue' outside of a loop"); }
    return tv_from_sb(c, &sb, out);
}

static bool assign_targets(tctx *c, int line, scope *sc, const char *const *names, int nn, const tv *v) {
    if (nn == 1) return scope_set(c, sc, names[0], *v);
    tv_list *l;
    if (v->t == TV_LIST) l = v->u.l;
    else if (v->t == TV_STR || v->t == TV_DICT) { if (!tv_iter_list(c, line, v, &l)) return false; }
    else return tfail(c, line, "cannot unpack non-iterable %s object", tv_type_name(v));
    if ((int)l->n != nn)
        return tfail(c, line, l->n < (size_t)nn ? "not enough values to unpack (expected %d, got %zu)" : "too many values to unpack (expected %d, got %zu)", nn, l->n);
    for (int i = 0; i < nn; i++) if (!scope_set(c, sc, names[i], l->v[i])) return false;
    return true;
}

static bool run_loop(tctx *c, scope *outer, const tpl_st *s, const tv *iterable, int depth, tv *captured);

bool call_loop_recurse(tctx *c, int line, tv_loop *lp, const cargs *a, tv *out) {
    if (a->np != 1) return tfail(c, line, "loop() takes exactly one argument");
    if (++c->depth > MAX_CALL_DEPTH) return tfail(c, line, "recursion too deep");
    bool ok = run_loop(c, lp->sc, lp->forst, &a->pos[0], lp->depth + 1, out);
    c->depth--;
    return ok;
}

/* Runs a for statement. captured != NULL: output goes into a string (recursive loop() calls). */
static bool run_loop(tctx *c, scope *outer, const tpl_st *s, const tv *iterable, int depth, tv *captured) {
    tv_list *src;
    if (!tv_iter_list(c, s->line, iterable, &src)) return false;
    scope *ls = scope_new(c, outer);   /* for the filter; each iteration gets its own scope */
    if (!ls) return false;
    tv_list *items = src;
    if (s->cond) {
        items = list_new(c, 0);
        if (!items) return toom(c, s->line);
        for (size_t i = 0; i < src->n; i++) {
            tv r;
            if (!assign_targets(c, s->line, ls, s->names, s->nn, &src->v[i]) || !tpl_eval(c, ls, s->cond, &r)) return false;
            if (tv_truthy(&r) && !list_push(c, items, src->v[i])) return false;
        }
    }
    tpl_sb sb = {0}, *saved = c->out;
    if (captured) c->out = &sb;
    tv_loop *lp = ta_alloc(&c->ar, sizeof *lp);
    if (!lp) { c->out = saved; sb_free(&sb); return toom(c, s->line); }
    lp->items = items;
    lp->depth = depth;
    lp->forst = s;
    lp->sc = outer;
    tv lv = {0};
    lv.t = TV_LOOP;
    lv.u.lp = lp;
    bool ok = true;
    /* the body may append to the list it iterates: iterate over the items present at the start */
    size_t n0 = items->n;
    scope *is = scope_new(c, outer);   /* emptied each iteration: sets in the body do not carry over */
    if (!is) ok = false;
    for (size_t i = 0; ok && i < n0 && i < items->n; i++) {
        if (++c->steps > c->max_steps) { ok = tfail(c, s->line, "template exceeded its step limit"); break; }
        lp->i = i;
        is->vars.n = 0;
        if (!assign_targets(c, s->line, is, s->names, s->nn, &items->v[i]) || !scope_set(c, is, "loop", lv)) { ok = false; break; }
        int r = exec_body(c, is, &s->body);
        if (r == X_ERR) ok = false;
        else if (r == X_BREAK) break;
    }
    if (ok && items->n == 0 && s->else_body.n) {
        int r = exec_body(c, ls, &s->else_body);
        if (r == X_ERR) ok = false;
        else if (r != X_OK) ok = tfail(c, s->line, "'break' or 'continue' outside of a loop");
    }
    if (captured) {
        c->out = saved;
        if (!ok) { sb_free(&sb); return false; }
        return tv_from_sb(c, &sb, captured);
    }
    return ok;
}

bool call_macro(tctx *c, int line, const tv_func *f, const cargs *a, const tv_func *caller, tv *out) {
    const tpl_st *m = f->macro;
    if (++c->depth > MAX_CALL_DEPTH) return tfail(c, line, "macro recursion too deep");
    scope *ms = scope_new(c, f->closure);
    if (!ms) return false;
    tv_list *varargs = list_new(c, 0);
    tv_dict *kwargs = dict_new(c);
    if (!varargs || !kwargs) return toom(c, line);
    varargs->tuple = true;
    for (int i = 0; i < a->np; i++) {
        if (i < m->nn) { if (!scope_set(c, ms, m->names[i], a->pos[i])) return false; }
        else if (!list_push(c, varargs, a->pos[i])) return false;
    }
    for (int k = 0; k < a->nk; k++) {
        int idx = -1;
        for (int i = 0; i < m->nn; i++) if (!strcmp(m->names[i], a->kn[k])) { idx = i; break; }
        if (idx >= 0 && idx < a->np)
            return tfail(c, line, "macro '%s' got multiple values for argument '%s'", m->name, a->kn[k]);
        if (idx >= 0) { if (!scope_set(c, ms, m->names[idx], a->kv[k])) return false; }
        else if (!dict_sets(c, kwargs, a->kn[k], a->kv[k])) return false;
    }
    for (int i = a->np; i < m->nn; i++) {
        if (dict_gets(&ms->vars, m->names[i], strlen(m->names[i]))) continue;
        tv d;
        if (m->defaults && m->defaults[i]) { if (!tpl_eval(c, ms, m->defaults[i], &d)) return false; }
        else d = tv_undef(c, "parameter '%s' was not provided", m->names[i]);
        if (!scope_set(c, ms, m->names[i], d)) return false;
    }
    tv vl = tv_list_of(varargs), kd = {0};
    kd.t = TV_DICT;
    kd.u.d = kwargs;
    if (!scope_set(c, ms, "varargs", vl) || !scope_set(c, ms, "kwargs", kd)) return false;
    if (caller) {
        tv cv = {0};
        cv.t = TV_FUNC;
        cv.u.fn = (tv_func *)caller;
        if (!scope_set(c, ms, "caller", cv)) return false;
    }
    bool ok = capture(c, ms, &m->body, out, line);
    c->depth--;
    return ok;
}

static int exec_st(tctx *c, scope *sc, const tpl_st *s) {
    if (++c->steps > c->max_steps) { tfail(c, s->line, "template exceeded its step limit"); return X_ERR; }
    switch (s->k) {
    case S_TEXT: return out_put(c, s->text, s->tlen) ? X_OK : X_ERR;
    case S_OUT: {
        tv v;
        if (!tpl_eval(c, sc, s->e, &v)) return X_ERR;
        return out_val(c, &v) ? X_OK : X_ERR;
    }
    case S_IF:
        for (int i = 0; i < s->nc; i++) {
            tv v;
            if (!tpl_eval(c, sc, s->conds[i], &v)) return X_ERR;
            if (tv_truthy(&v)) return exec_body(c, sc, &s->bodies[i]);
        }
        return exec_body(c, sc, &s->else_body);
    case S_FOR: {
        tv it;
        if (!tpl_eval(c, sc, s->e, &it)) return X_ERR;
        return run_loop(c, sc, s, &it, 1, NULL) ? X_OK : X_ERR;
    }
    case S_SET: {
        tv v;
        if (!tpl_eval(c, sc, s->e, &v)) return X_ERR;
        if (s->attr) {
            tv *ns = scope_find(sc, s->names[0]);
            if (!ns || ns->t != TV_NS) { tfail(c, s->line, "cannot assign attribute on non-namespace object"); return X_ERR; }
            return dict_sets(c, ns->u.d, s->attr, v) ? X_OK : X_ERR;
        }
        return assign_targets(c, s->line, sc, s->names, s->nn, &v) ? X_OK : X_ERR;
    }
    case S_SETBLOCK: {
        tv v;
        if (!capture(c, sc, &s->body, &v, s->line)) return X_ERR;
        if (s->e) {
            tv saved = c->placeholder;
            c->placeholder = v;
            bool ok = tpl_eval(c, sc, s->e, &v);
            c->placeholder = saved;
            if (!ok) return X_ERR;
        }
        return scope_set(c, sc, s->names[0], v) ? X_OK : X_ERR;
    }
    case S_MACRO: {
        tv_func *f = ta_alloc(&c->ar, sizeof *f);
        if (!f) { toom(c, s->line); return X_ERR; }
        f->kind = FK_MACRO;
        f->name = s->name;
        f->macro = s;
        f->closure = sc;
        tv v = {0};
        v.t = TV_FUNC;
        v.u.fn = f;
        return scope_set(c, sc, s->name, v) ? X_OK : X_ERR;
    }
    case S_CALLBLOCK: {
        tv_func *cf = ta_alloc(&c->ar, sizeof *cf);
        if (!cf) { toom(c, s->line); return X_ERR; }
        cf->kind = FK_MACRO;
        cf->name = "caller";
        cf->macro = s->caller;
        cf->closure = sc;
        tv f;
        if (!tpl_eval(c, sc, s->e->a, &f)) return X_ERR;
        if (f.t == TV_UNDEF) { undef_fail(c, s->line, &f); return X_ERR; }
        if (f.t != TV_FUNC) { tfail(c, s->line, "'%s' object is not callable", tv_type_name(&f)); return X_ERR; }
        cargs a;
        if (!eval_args(c, sc, &s->e->args, &a)) return X_ERR;
        tv r;
        if (!call_func(c, s->line, f.u.fn, &a, cf, &r)) return X_ERR;
        return out_val(c, &r) ? X_OK : X_ERR;
    }
    case S_FILTERBLOCK: {
        tv v;
        if (!capture(c, sc, &s->body, &v, s->line)) return X_ERR;
        tv saved = c->placeholder;
        c->placeholder = v;
        bool ok = tpl_eval(c, sc, s->e, &v);
        c->placeholder = saved;
        if (!ok) return X_ERR;
        return out_val(c, &v) ? X_OK : X_ERR;
    }
    case S_BREAK: return X_BREAK;
    case S_CONTINUE: return X_CONT;
    case S_WITH: {
        scope *ws = scope_new(c, sc);
        if (!ws) return X_ERR;
        for (int i = 0; i < s->nn; i++) {
            tv v;
            if (!tpl_eval(c, sc, s->defaults[i], &v) || !scope_set(c, ws, s->names[i], v)) return X_ERR;
        }
        return exec_body(c, ws, &s->body);
    }
    case S_BLOCK: return exec_body(c, sc, &s->body);
    }
    tfail(c, s->line, "internal error: bad statement node");
    return X_ERR;
}

static int exec_body(tctx *c, scope *sc, const tpl_body *b) {
    for (int i = 0; i < b->n; i++) {
        int r = exec_st(c, sc, b->v[i]);
        if (r != X_OK) return r;
    }
    return X_OK;
}

/* ---------------------------------------------------------------- JSON in */

static bool from_json(tctx *c, json_t *j, tv *out, int depth) {
    if (depth > 512) return tfail(c, 0, "input JSON nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: *out = tv_none(); return true;
    case JSON_TRUE: *out = tv_bool(true); return true;
    case JSON_FALSE: *out = tv_bool(false); return true;
    case JSON_INTEGER: *out = tv_int((int64_t)json_integer_value(j)); return true;
    case JSON_REAL: *out = tv_float(json_real_value(j)); return true;
    case JSON_STRING: *out = tv_strref(json_string_value(j), json_string_length(j)); return true;
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        tv_list *l = list_new(c, n);
        if (!l) return toom(c, 0);
        for (size_t i = 0; i < n; i++) if (!from_json(c, json_array_get(j, i), &l->v[i], depth + 1)) return false;
        l->n = n;
        *out = tv_list_of(l);
        return true;
    }
    case JSON_OBJECT: {
        tv_dict *d = dict_new(c);
        if (!d) return toom(c, 0);
        size_t n = json_object_size(j);
        if (n) {
            d->k = ta_alloc(&c->ar, n * sizeof(tv));
            d->v = ta_alloc(&c->ar, n * sizeof(tv));
            if (!d->k || !d->v) return toom(c, 0);
            d->cap = n;
        }
        const char *key;
        json_t *val;
        void *it = json_object_iter(j);
        while (it) {
            key = json_object_iter_key(it);
            val = json_object_iter_value(it);
            tv v;
            if (!from_json(c, val, &v, depth + 1)) return false;
            /* keys are unique in a jansson object: append directly */
            d->k[d->n] = tv_strref(key, strlen(key));
            d->v[d->n] = v;
            d->n++;
            it = json_object_iter_next(j, it);
        }
        out->t = TV_DICT;
        out->u.d = d;
        return true;
    }
    }
    return tfail(c, 0, "unsupported JSON value");
}

bool tpl_json_to_tv(tctx *c, json_t *j, tv *out) { return from_json(c, j, out, 0); }

/* ---------------------------------------------------------------- entry */

mx_status tpl_render_ex(const mx_template *t, json_t *vars, long max_steps, size_t max_mem, char **out) {
    *out = NULL;
    tctx *c = calloc(1, sizeof *c);
    if (!c) return mx_errorf(MX_ERR_NOMEM, "template: out of memory");
    c->ar.limit = max_mem;
    c->max_mem = max_mem;
    c->max_steps = max_steps;
    c->max_out = max_mem;
    tpl_sb sb = {0};
    c->out = &sb;
    mx_status st = MX_OK;
    size_t saved_limit = tpl_sb_limit;
    tpl_sb_limit = max_mem;
    scope *g = scope_new(c, NULL);
    if (!g) goto fail;
    if (vars && json_is_object(vars)) {
        const char *key;
        json_t *val;
        json_object_foreach(vars, key, val) {
            tv v;
            if (!tpl_json_to_tv(c, val, &v) || !scope_set(c, g, key, v)) goto fail;
        }
    }
    scope *top = scope_new(c, g);
    if (!top) goto fail;
    int r = exec_body(c, top, &((mx_template *)t)->root);
    if (r == X_ERR) goto fail;
    if (r != X_OK) { tfail(c, 0, "'break' or 'continue' outside of a loop"); goto fail; }
    if (sb.oom) { toom(c, 0); goto fail; }
    *out = sb.p ? sb.p : strdup("");
    if (!*out) { st = mx_errorf(MX_ERR_NOMEM, "template: out of memory"); *out = NULL; }
    ta_free(&c->ar);
    free(c);
    tpl_sb_limit = saved_limit;
    return st;
fail:
    st = mx_errorf(MX_ERR_INVALID_ARG, "%s", c->err[0] ? c->err : "template rendering failed");
    sb_free(&sb);
    ta_free(&c->ar);
    free(c);
    tpl_sb_limit = saved_limit;
    return st;
}
