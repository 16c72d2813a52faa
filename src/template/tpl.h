/* template/tpl.h: internals of the Jinja2 interpreter shared by its files: the arena, runtime
 * values, the AST, and the parser/evaluator entry points. Not a public API (see
 * include/mlxcel/template.h); nothing here is visible outside src/template/. */
#ifndef MLXCEL_TPL_H
#define MLXCEL_TPL_H

#include "mlxcel/template.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* ---- arena: every allocation of a parse or a render lives here and is freed at once ---- */
typedef struct tpl_chunk {
    struct tpl_chunk *next;
    size_t used, cap;
    max_align_t data[];
} tpl_chunk;
typedef struct {
    tpl_chunk *head;
    size_t total, limit;   /* bytes held; limit 0 = none */
} tpl_arena;
void *ta_alloc(tpl_arena *a, size_t n);                 /* zeroed; NULL on OOM or over limit */
char *ta_strndup(tpl_arena *a, const char *s, size_t n); /* NUL-terminated copy */
void ta_free(tpl_arena *a);

/* ---- runtime values ---- */
enum { TV_UNDEF = 0, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT, TV_NS, TV_FUNC, TV_LOOP };

typedef struct tv_list tv_list;
typedef struct tv_dict tv_dict;
typedef struct tv_func tv_func;
typedef struct tv_loop tv_loop;

typedef struct tv {
    uint8_t t;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;   /* TV_STR (not NUL-terminated); TV_UNDEF: hint or NULL */
        tv_list *l;
        tv_dict *d;                               /* TV_DICT and TV_NS */
        tv_func *fn;
        tv_loop *lp;
    } u;
} tv;

struct tv_list { size_t n, cap; tv *v; bool tuple, gen; };   /* gen: a jinja generator (select, map, ...): always truthy, no len, single use */
struct tv_dict { size_t n, cap; tv *k, *v; };

/* ---- AST ---- */
typedef struct tpl_ex tpl_ex;
typedef struct tpl_st tpl_st;

typedef struct {
    int np, nk;
    tpl_ex **pos;
    const char **kn;
    tpl_ex **kv;
} tpl_args;

enum {
    E_LIT, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_NEG, E_POS, E_NOT, E_AND, E_OR, E_BIN, E_CMP, E_COND, E_PLACEHOLDER
};
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT };
enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

struct tpl_ex {
    int k, line;
    int op;               /* E_BIN op; E_TEST: negated */
    tv lit;               /* E_LIT */
    const char *name;     /* E_NAME, E_ATTR, E_FILTER, E_TEST */
    tpl_ex *a, *b, *c, *d;/* operands: E_ATTR/E_ITEM/E_FILTER/E_TEST/E_CALL object a; E_ITEM key b;
                             E_SLICE a[b:c:d]; E_COND: c ? a : b */
    tpl_ex **items;       /* E_LIST/E_TUPLE elements, E_DICT keys, E_CMP operands (n of them) */
    tpl_ex **vals;        /* E_DICT values */
    int *ops;             /* E_CMP: n-1 operators */
    int n;
    tpl_args args;        /* E_CALL, E_FILTER, E_TEST */
};

typedef struct { tpl_st **v; int n; } tpl_body;

enum {
    S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK, S_FILTERBLOCK, S_BREAK,
    S_CONTINUE, S_WITH, S_BLOCK
};

struct tpl_st {
    int k, line;
    const char *text; size_t tlen;  /* S_TEXT */
    tpl_ex *e;           /* S_OUT/S_SET value, S_FOR iterable, S_CALLBLOCK call, S_FILTERBLOCK/S_SETBLOCK filters */
    tpl_ex *cond;        /* S_FOR filter */
    const char **names;  /* S_FOR/S_SET/S_SETBLOCK targets, S_MACRO params, S_WITH names */
    tpl_ex **defaults;   /* S_MACRO defaults (NULL entries), S_WITH values */
    int nn;
    const char *attr;    /* S_SET target `name.attr` (names[0] is the namespace) */
    const char *name;    /* S_MACRO name */
    tpl_ex **conds;      /* S_IF: nc conditions, bodies[i] */
    tpl_body *bodies;
    int nc;
    tpl_body body, else_body;
    bool recursive;
    tpl_st *caller;      /* S_CALLBLOCK: the caller macro */
};

struct mx_template {
    tpl_arena ar;
    tpl_body root;
};

/* parse.c */
mx_status tpl_parse(const char *src, mx_template *t);

/* eval.c: render with explicit limits (steps: evaluated nodes; mem: arena and output bytes) */
mx_status tpl_render_ex(const mx_template *t, json_t *vars, long max_steps, size_t max_mem, char **out);
/* builtins.c: names the parser accepts after '|' and 'is' */
bool tpl_filter_exists(const char *name);
bool tpl_test_exists(const char *name);

/* value.c: conversions shared by the evaluator */
typedef struct {
    char *p; size_t n, cap;
    bool oom;
} tpl_sb;   /* malloc'ed string builder */
/* Largest string a builder may grow to on this thread (0: 1 GiB); tpl_render_ex sets it to its
 * memory budget so that no single intermediate string outgrows the render's limit. */
extern _Thread_local size_t tpl_sb_limit;
void sb_put(tpl_sb *b, const char *s, size_t n);
void sb_puts(tpl_sb *b, const char *s);
void sb_printf(tpl_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_free(tpl_sb *b);

void tv_fmt_float(double f, char *buf, size_t n);      /* Python repr(float) */
void tv_write_str(tpl_sb *b, const tv *v);              /* Python str() as jinja prints it */
void tv_write_repr(tpl_sb *b, const tv *v);             /* Python repr() */
void tv_write_pystr_repr(tpl_sb *b, const char *p, size_t n);
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys); false with *why on unserializable */
bool tv_write_json(tpl_sb *b, const tv *v, bool ensure_ascii, const char *indent, int level,
                   const char *item_sep, const char *key_sep, bool sort_keys, const char **why);
bool tv_truthy(const tv *v);
const char *tv_type_name(const tv *v);                  /* Python-ish type name for messages */

/* utf-8 helpers */
uint32_t u8_next(const char *p, size_t n, size_t *adv);  /* decodes one code point (lenient) */
size_t u8_len(const char *p, size_t n);                   /* code points */
bool py_isspace(uint32_t c);

#endif
