/* template/eval.h: the evaluator's context, scopes and the functions shared between eval.c
 * (expressions, statements) and builtins.c (filters, tests, methods, globals). Internal. */
#ifndef MLXCEL_TPL_EVAL_H
#define MLXCEL_TPL_EVAL_H

#include "template/tpl.h"

#define MAX_CALL_DEPTH 64

typedef struct scope {
    struct scope *parent;
    tv_dict vars;
} scope;

enum { FK_BUILTIN, FK_METHOD, FK_MACRO };

struct tv_func {
    int kind;
    const char *name;        /* builtin/method name */
    tv self;                 /* FK_METHOD: the bound object */
    const tpl_st *macro;     /* FK_MACRO: S_MACRO node */
    scope *closure;          /* FK_MACRO: defining scope */
};

struct tv_loop {
    tv_list *items;
    size_t i;
    int depth;               /* 1 for the outermost loop of a recursive chain */
    const tpl_st *forst;     /* for loop(...) recursion */
    scope *sc;
    tv last_changed;
    bool has_changed;
    size_t cycle_unused;
};

typedef struct {
    tpl_arena ar;
    tpl_sb *out;
    char err[512];
    bool failed;
    long steps, max_steps;
    size_t max_mem, max_out;
    int depth;
    tv placeholder;
} tctx;

/* evaluated call arguments */
typedef struct {
    int np, nk;
    tv *pos;
    const char *const *kn;
    tv *kv;
} cargs;

bool tfail(tctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool toom(tctx *c, int line);
bool undef_fail(tctx *c, int line, const tv *u);

tv tv_undef(tctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
tv tv_none(void);
tv tv_bool(bool b);
tv tv_int(int64_t i);
tv tv_float(double f);
tv tv_strref(const char *p, size_t n);
tv tv_list_of(tv_list *l);
bool tv_str_copy(tctx *c, const char *p, size_t n, tv *out);
bool tv_from_sb(tctx *c, tpl_sb *b, tv *out);   /* copies into the arena and frees b */
bool tv_to_str(tctx *c, const tv *v, tv *out);
tv_list *list_new(tctx *c, size_t cap);
bool list_push(tctx *c, tv_list *l, tv x);
tv_dict *dict_new(tctx *c);
tv *dict_get(tv_dict *d, const tv *k);
tv *dict_gets(tv_dict *d, const char *k, size_t n);
bool dict_set(tctx *c, tv_dict *d, tv k, tv v);
bool dict_sets(tctx *c, tv_dict *d, const char *k, tv v);
bool tv_eq(const tv *a, const tv *b);
bool tv_order(const tv *a, const tv *b, int *r);
bool tv_contains(tctx *c, int line, const tv *container, const tv *x, bool *res);
bool tv_iter_list(tctx *c, int line, const tv *v, tv_list **out);
bool get_attr(tctx *c, const tv *obj, const char *name, tv *out);
bool get_item(tctx *c, const tv *obj, const tv *key, tv *out);

scope *scope_new(tctx *c, scope *parent);
bool scope_set(tctx *c, scope *s, const char *name, tv v);

bool tpl_eval(tctx *c, scope *sc, const tpl_ex *e, tv *out);
bool capture(tctx *c, scope *sc, const tpl_body *b, tv *out, int line);
bool call_macro(tctx *c, int line, const tv_func *f, const cargs *a, const tv_func *caller, tv *out);
bool call_loop_recurse(tctx *c, int line, tv_loop *lp, const cargs *a, tv *out);

/* builtins.c */
bool builtin_global(tctx *c, const char *name, tv *out);   /* range, dict, namespace, ... */
bool call_func(tctx *c, int line, const tv_func *f, const cargs *a, const tv_func *caller, tv *out);
bool apply_filter(tctx *c, int line, scope *sc, const char *name, const tv *v, const cargs *a, tv *out);
bool apply_test(tctx *c, int line, const char *name, const tv *v, const cargs *a, bool *out);
bool py_percent_format(tctx *c, int line, const tv *fmt, const tv *args, tv *out);

#endif
