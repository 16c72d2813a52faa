/* tokenizer/tk_internal.h: internal structures of the tokenizer layer shared by its files
 * (JSON reader, hash maps, normalizers, pre-tokenizers, models, decoders). Not a public API. */
#ifndef MLXCEL_TK_INTERNAL_H
#define MLXCEL_TK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <string.h>

#include "mlxcel/tokenizer.h"

/* ---- JSON (tk_json.c) ---- */
typedef enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ } tj_type;
typedef struct tj {
    uint32_t type;   /* tj_type */
    uint32_t n;      /* string length, array items, object pairs */
    union { double num; const char *s; struct tj *a; /* obj: key,value,key,value... */ } u;
} tj;
typedef struct { tj root; struct tj_chunk *chunks; } tj_doc;
mx_status tj_parse(const char *src, size_t len, const char *name, tj_doc *doc);
void tj_free(tj_doc *doc);
const tj *tj_get(const tj *obj, const char *key);  /* NULL if absent or not an object */
const char *tj_str(const tj *v);                   /* NULL unless a string */
bool tj_bool(const tj *v, bool dflt);

bool tk_utf8_valid(const char *s, size_t n);
size_t tk_utf8_valid_seq(const unsigned char *p, size_t n);
size_t tk_utf8_put(char *o, uint32_t cp);
/* Decode one code point from valid UTF-8; returns its byte length. */
static inline size_t tk_utf8_get(const char *s, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    if (p[0] < 0x80) { *cp = p[0]; return 1; }
    if (p[0] < 0xE0) { *cp = ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F); return 2; }
    if (p[0] < 0xF0) { *cp = ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F); return 3; }
    *cp = ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    return 4;
}
static inline size_t tk_utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* ---- byte buffers and piece lists ---- */
typedef struct { char *d; size_t n, cap; } tk_buf;
bool tk_buf_reserve(tk_buf *b, size_t extra);
static inline bool tk_buf_add(tk_buf *b, const void *p, size_t n) {
    if (b->cap - b->n < n + 1 && !tk_buf_reserve(b, n + 1)) return false;
    if (n) memcpy(b->d + b->n, p, n);
    b->n += n;
    return true;
}
typedef struct { uint32_t off, len; int32_t id; uint32_t flags; } tk_piece;  /* id >= 0: a token already */
#define TK_PIECE_AT_START 1u   /* piece begins at offset 0 of the original text */
typedef struct { tk_piece *p; size_t n, cap; } tk_plist;
bool tk_plist_push(tk_plist *l, uint32_t off, uint32_t len, int32_t id, uint32_t flags);
typedef struct { int32_t *v; size_t n, cap; } tk_ids;
bool tk_ids_push(tk_ids *a, int32_t id);
bool tk_ids_reserve(tk_ids *a, size_t extra);

/* ---- hash maps (tk_map.c) ---- */
/* One 32-byte slot per key: a lookup usually touches one cache line (keys up to TK_SINLINE bytes
 * are stored in the slot; longer ones by pointer, memory owned by the caller). */
#define TK_SINLINE 20
typedef struct {
    uint32_t hh;       /* high hash bits; 0 = empty slot (real values are forced non-zero) */
    int32_t val;
    uint32_t len;
    union { char in[TK_SINLINE]; const char *p; } k;
} tk_sslot;
typedef struct { tk_sslot *slot; uint32_t mask, n; } tk_smap;  /* bytes -> int32 */
bool tk_smap_init(tk_smap *m, size_t expect);
void tk_smap_free(tk_smap *m);
/* key memory (for keys over TK_SINLINE bytes) must outlive the map; false on OOM. An existing key
 * gets the new value. */
bool tk_smap_put(tk_smap *m, const char *k, size_t len, int32_t val);
int32_t tk_smap_get(const tk_smap *m, const char *k, size_t len);  /* -1 if absent */
uint64_t tk_hash(const void *p, size_t n);

typedef struct { uint64_t key; int32_t rank, newid; } tk_pslot;   /* key UINT64_MAX = empty */
typedef struct { tk_pslot *s; uint32_t mask, n; } tk_pmap;        /* (a,b) -> rank,new */
bool tk_pmap_init(tk_pmap *m, size_t expect);
void tk_pmap_free(tk_pmap *m);
bool tk_pmap_put(tk_pmap *m, int32_t a, int32_t b, int32_t rank, int32_t newid);  /* replaces */
static inline bool tk_pmap_get(const tk_pmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *newid) {
    if (!m->n) return false;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t i = (uint32_t)(h >> 32) & m->mask;
    for (;;) {
        const tk_pslot *e = &m->s[i];
        if (e->key == key) { *rank = e->rank; *newid = e->newid; return true; }
        if (e->key == UINT64_MAX) return false;
        i = (i + 1) & m->mask;
    }
}

/* ---- patterns (literal or PCRE2 regex) ---- */
typedef struct { bool regex; char *lit; size_t lit_len; pcre2_code *re; } tk_pattern;

/* ---- normalizers (tk_norm.c) ---- */
enum { NORM_SEQ, NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_LOWER, NORM_STRIP, NORM_STRIP_ACCENTS,
       NORM_REPLACE, NORM_PREPEND, NORM_BERT };
typedef struct tk_norm {
    int type;
    tk_pattern pat;            /* Replace */
    char *str; size_t str_len; /* Replace content, Prepend */
    bool left, right;          /* Strip */
    bool clean_text, chinese, lowercase; int strip_accents; /* Bert; strip_accents -1 = follow lowercase */
} tk_norm;

/* ---- pre-tokenizers (tk_pretok.c) ---- */
enum { PT_BYTELEVEL, PT_SPLIT, PT_METASPACE, PT_WHITESPACE, PT_WSSPLIT, PT_PUNCT, PT_DIGITS, PT_BERT, PT_CHARDELIM };
enum { BH_REMOVED, BH_ISOLATED, BH_MERGED_PREV, BH_MERGED_NEXT, BH_CONTIGUOUS };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };
typedef struct tk_pretok {
    int type;
    tk_pattern pat; int behavior; bool invert;   /* Split, Punctuation (behavior) */
    bool add_prefix_space, use_regex;            /* ByteLevel */
    bool individual_digits;                      /* Digits */
    bool split; int prepend_scheme;              /* Metaspace */
    char repl[8]; size_t repl_len; uint32_t repl_cp; /* Metaspace replacement, CharDelimiterSplit */
} tk_pretok;

/* ---- decoders ---- */
enum { DEC_BYTELEVEL, DEC_METASPACE, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_WORDPIECE, DEC_BPE, DEC_CTC };
typedef struct tk_dec {
    int type;
    tk_pattern pat; char *str; size_t str_len;  /* Replace (pattern -> str); WordPiece/BPE prefix/suffix in str */
    uint32_t cp; int start, stop;               /* Strip: content char, counts; Metaspace: replacement cp */
    int prepend_scheme; bool cleanup;
} tk_dec;

/* ---- post-processors ---- */
#define TK_SEQ_A INT32_MIN
typedef struct { int32_t *items; int n; } tk_post;   /* flattened single-sequence template */

/* ---- models ---- */
enum { MODEL_BPE, MODEL_WORDPIECE, MODEL_UNIGRAM };

typedef struct tk_cache tk_cache;

typedef struct {
    char *content; size_t len;
    char *ncontent; size_t nlen;   /* normalized content (normalized=true tokens) */
    int32_t id;
    bool special, lstrip, rstrip, normalized, single_word;
} tk_added;

typedef struct { int32_t child, sibling, added; uint8_t byte; } tk_trie_node;
typedef struct { tk_trie_node *nodes; int n, cap; int32_t root[256]; } tk_trie;  /* root[b]: child node or -1 */

struct mx_tokenizer {
    /* vocab: id -> string (into `strings`), string -> id */
    char *strings; size_t strings_len;
    uint32_t *tok_off, *tok_len; int32_t n_tok;   /* indexed by id; tok_len UINT32_MAX = none */
    tk_smap vocab;                  /* model vocab: string -> id */
    int model;
    /* BPE */
    tk_pmap merges;
    int32_t unk_id;
    bool byte_fallback, fuse_unk, ignore_merges;
    char *cont_prefix; size_t cont_prefix_len;    /* BPE continuing_subword_prefix, WordPiece prefix */
    char *eow_suffix; size_t eow_suffix_len;
    int32_t byte_tok[256];          /* <0xXX> ids or -1 */
    bool ms_split;                  /* cut words before U+2581 (see tk_model.c) */
    uint32_t ms_bad[64]; int n_ms_bad;
    /* WordPiece */
    int max_input_chars;
    /* Unigram */
    double *scores; double unk_score; size_t max_piece_len;
    /* pipeline */
    tk_norm *norm; int n_norm;      /* flattened sequence */
    tk_pretok *pre; int n_pre;      /* flattened sequence */
    tk_dec *dec; int n_dec; bool has_decoder;
    tk_post post;                   /* single template; n == 0 with items NULL: none */
    bool has_post;
    /* added tokens */
    tk_added *added; int n_added;
    int32_t *added_by_id;          /* id -> index into added or -1, size n_tok */
    tk_smap added_map;              /* content -> id */
    tk_trie trie_raw, trie_norm;
    /* tokenizer_config.json */
    char *bos_str, *eos_str; int32_t bos_id, eos_id;
    bool add_bos, add_eos;
    bool post_bos, post_eos;       /* the post-processor template already adds them */
    /* regexes */
    pcre2_code *bl_re;              /* GPT-2 ByteLevel regex when needed */
    tk_cache *cache;
};

/* encode scratch, one per call */
typedef struct {
    tk_buf b[4];
    tk_plist l[4];
    tk_buf nb;         /* normalizer output */
    tk_buf t1, t2;     /* normalizer scratch */
    pcre2_match_data *md;
    pcre2_jit_stack *jst; pcre2_match_context *mctx;
    /* model scratch */
    int32_t *sym_id; int32_t *sym_prev, *sym_next; uint32_t *sym_len; size_t sym_cap;
    void *heap; size_t heap_cap;
    double *best; int32_t *best_from, *best_id; size_t best_cap;
} tk_ctx;

void tk_ctx_free(tk_ctx *c);

/* regex helpers: compile (UTF|UCP, JIT); iterate matches */
mx_status tk_regex_compile(const char *pat, size_t len, const char *what, pcre2_code **out);
/* Find the next match at or after `from`. Returns 1 found (start/end set), 0 none, <0 error. */
int tk_regex_next(tk_ctx *c, const pcre2_code *re, const char *s, size_t n, size_t from, size_t *ms, size_t *me);

/* normalizers: c->nb receives normalized(s); s must not point into c->nb, c->t1 */
mx_status tk_normalize(const mx_tokenizer *t, tk_ctx *c, const char *s, size_t n);
mx_status tk_norm_parse(const tj *j, tk_norm **arr, int *n, int *cap);
void tk_norm_free_one(tk_norm *nm);
void tk_pattern_free(tk_pattern *p);

/* pre-tokenizers: flattens sequences into an array */
mx_status tk_pretok_parse(const tj *j, tk_pretok **arr, int *n, int *cap);
void tk_pretok_free_one(tk_pretok *p);
/* Pre-tokenize one string; the words are left in c->b[*which] / c->l[*which]. */
mx_status tk_pretokenize(const mx_tokenizer *t, tk_ctx *c, const char *s, size_t n, bool at_start, int *which);

/* decoders */
mx_status tk_dec_parse(const tj *j, tk_dec **arr, int *n, int *cap);
void tk_dec_free_one(tk_dec *d);
/* token strings (pieces over buf) -> text appended to out; c is scratch (reused across calls) */
mx_status tk_decode_tokens(const mx_tokenizer *t, tk_ctx *c, tk_buf *buf, tk_plist *toks, tk_buf *out);

/* models */
mx_status tk_model_encode(const mx_tokenizer *t, tk_ctx *c, const char *w, size_t n, tk_ids *out);
mx_status tk_cache_new(tk_cache **out);
void tk_cache_free(tk_cache *c);

/* byte-level map */
extern const uint16_t tk_byte2cp[256];
int tk_cp2byte(uint32_t cp);   /* -1 if not a byte-level char */

/* unicode helpers (utf8proc) */
bool tk_is_whitespace(uint32_t cp);   /* Rust char::is_whitespace */
bool tk_is_punct(uint32_t cp);        /* ASCII punctuation or Unicode P* */
bool tk_is_numeric(uint32_t cp);      /* Unicode N* */
bool tk_is_word(uint32_t cp);         /* alnum or '_' */

#endif
