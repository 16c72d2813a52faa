/* tokenizer/tk_util.c: small building blocks of the tokenizer layer: growable buffers, string
 * and pair hash maps (open addressing), the GPT-2 byte-level alphabet, PCRE2 helpers and Unicode
 * character classes. No tokenizer logic lives here. */
#include "tokenizer/tk_internal.h"

#include <stdlib.h>
#include <utf8proc.h>

bool tk_buf_reserve(tk_buf *b, size_t extra) {
    if (b->cap - b->n >= extra) return true;
    size_t nc = b->cap ? b->cap : 256;
    while (nc - b->n < extra) { if (nc > SIZE_MAX / 2) return false; nc *= 2; }
    char *d = realloc(b->d, nc);
    if (!d) return false;
    b->d = d; b->cap = nc;
    return true;
}

bool tk_plist_push(tk_plist *l, uint32_t off, uint32_t len, int32_t id, uint32_t flags) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        tk_piece *p = realloc(l->p, nc * sizeof *p);
        if (!p) return false;
        l->p = p; l->cap = nc;
    }
    l->p[l->n++] = (tk_piece){ off, len, id, flags };
    return true;
}

bool tk_ids_reserve(tk_ids *a, size_t extra) {
    if (a->cap - a->n >= extra) return true;
    size_t nc = a->cap ? a->cap : 64;
    while (nc - a->n < extra) nc *= 2;
    int32_t *v = realloc(a->v, nc * sizeof *v);
    if (!v) return false;
    a->v = v; a->cap = nc;
    return true;
}

bool tk_ids_push(tk_ids *a, int32_t id) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, nc * sizeof *v);
        if (!v) return false;
        a->v = v; a->cap = nc;
    }
    a->v[a->n++] = id;
    return true;
}

/* ---- hashing ---- */
uint64_t tk_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x243F6A8885A308D3ull ^ (n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t w; memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8; n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w ^ ((uint64_t)n << 56)) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
    return h;
}

static uint32_t pow2_at_least(size_t n) {
    uint32_t c = 16;
    while (c < n && c < (1u << 31)) c <<= 1;
    return c;
}

bool tk_smap_init(tk_smap *m, size_t expect) {
    memset(m, 0, sizeof *m);
    uint32_t slots = pow2_at_least(expect + expect / 3 + 1);   /* load factor <= 0.75 */
    m->slot = calloc(slots, sizeof *m->slot);
    if (!m->slot) return false;
    m->mask = slots - 1;
    return true;
}

void tk_smap_free(tk_smap *m) {
    free(m->slot);
    memset(m, 0, sizeof *m);
}

static inline const char *skey(const tk_sslot *e) { return e->len <= TK_SINLINE ? e->k.in : e->k.p; }

static inline uint32_t hh_of(uint64_t h) { uint32_t x = (uint32_t)(h >> 32); return x ? x : 1; }

static bool smap_grow(tk_smap *m) {
    uint32_t slots = (m->mask + 1) * 2;
    tk_sslot *ns = calloc(slots, sizeof *ns);
    if (!ns) return false;
    for (uint32_t i = 0; i <= m->mask; i++) {
        const tk_sslot *e = &m->slot[i];
        if (!e->hh) continue;
        uint32_t j = (uint32_t)tk_hash(skey(e), e->len) & (slots - 1);
        while (ns[j].hh) j = (j + 1) & (slots - 1);
        ns[j] = *e;
    }
    free(m->slot);
    m->slot = ns; m->mask = slots - 1;
    return true;
}

bool tk_smap_put(tk_smap *m, const char *k, size_t len, int32_t val) {
    if (len > UINT32_MAX) return false;
    uint64_t h = tk_hash(k, len);
    uint32_t i = (uint32_t)h & m->mask, hh = hh_of(h);
    while (m->slot[i].hh) {
        tk_sslot *e = &m->slot[i];
        if (e->hh == hh && e->len == len && !memcmp(skey(e), k, len)) { e->val = val; return true; }
        i = (i + 1) & m->mask;
    }
    tk_sslot *e = &m->slot[i];
    e->hh = hh; e->val = val; e->len = (uint32_t)len;
    if (len <= TK_SINLINE) { if (len) memcpy(e->k.in, k, len); }
    else e->k.p = k;
    m->n++;
    if ((size_t)m->n * 4 > (size_t)(m->mask + 1) * 3) return smap_grow(m);
    return true;
}

int32_t tk_smap_get(const tk_smap *m, const char *k, size_t len) {
    if (!m->slot) return -1;
    uint64_t h = tk_hash(k, len);
    uint32_t i = (uint32_t)h & m->mask, hh = hh_of(h);
    for (;;) {
        const tk_sslot *e = &m->slot[i];
        if (!e->hh) return -1;
        if (e->hh == hh && e->len == len && !memcmp(skey(e), k, len)) return e->val;
        i = (i + 1) & m->mask;
    }
}

bool tk_pmap_init(tk_pmap *m, size_t expect) {
    memset(m, 0, sizeof *m);
    uint32_t slots = pow2_at_least(expect + expect / 3 + 1);
    m->s = malloc(slots * sizeof *m->s);
    if (!m->s) return false;
    for (uint32_t i = 0; i < slots; i++) m->s[i].key = UINT64_MAX;
    m->mask = slots - 1;
    return true;
}

void tk_pmap_free(tk_pmap *m) {
    free(m->s);
    memset(m, 0, sizeof *m);
}

bool tk_pmap_put(tk_pmap *m, int32_t a, int32_t b, int32_t rank, int32_t newid) {
    if ((size_t)(m->n + 1) * 4 > (size_t)(m->mask + 1) * 3) {
        tk_pmap o = *m;
        if (!tk_pmap_init(m, (size_t)o.n * 2 + 16)) { *m = o; return false; }
        for (uint32_t i = 0; i <= o.mask; i++)
            if (o.s[i].key != UINT64_MAX)
                tk_pmap_put(m, (int32_t)(o.s[i].key >> 32), (int32_t)(uint32_t)o.s[i].key, o.s[i].rank, o.s[i].newid);
        tk_pmap_free(&o);
    }
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t i = (uint32_t)(h >> 32) & m->mask;
    while (m->s[i].key != UINT64_MAX) {
        if (m->s[i].key == key) { m->s[i].rank = rank; m->s[i].newid = newid; return true; }   /* last wins, as HF's HashMap collect */
        i = (i + 1) & m->mask;
    }
    m->s[i] = (tk_pslot){ key, rank, newid };
    m->n++;
    return true;
}

/* ---- GPT-2 byte-level alphabet ---- */
const uint16_t tk_byte2cp[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271,
    272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287,
    288, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
    48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
    80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
    96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289,
    290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305,
    306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321,
    322, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175,
    176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191,
    192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207,
    208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223,
    224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
    240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255,
};

int tk_cp2byte(uint32_t cp) {
    if (cp >= 33 && cp <= 126) return (int)cp;
    if (cp >= 161 && cp <= 255 && cp != 173) return (int)cp;
    /* 256.. map, in order, to the bytes that are not printable: 0-32, 127-160, 173 */
    if (cp >= 256 && cp <= 288) return (int)(cp - 256);
    if (cp >= 289 && cp <= 322) return (int)(cp - 289 + 127);
    if (cp == 323) return 173;
    return -1;
}

/* ---- PCRE2 ---- */
mx_status tk_regex_compile(const char *pat, size_t len, const char *what, pcre2_code **out) {
    int err; PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return mx_errorf(MX_ERR_FORMAT, "%s: bad regex at offset %zu: %s", what, (size_t)off, (char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* falls back to the interpreter if JIT is unavailable */
    *out = re;
    return MX_OK;
}

int tk_regex_next(tk_ctx *c, const pcre2_code *re, const char *s, size_t n, size_t from, size_t *ms, size_t *me) {
    if (!c->md) {
        c->md = pcre2_match_data_create(32, NULL);
        if (!c->md) return -1;
    }
    for (;;) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, c->md, c->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !c->jst) {
            c->jst = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, NULL);
            c->mctx = pcre2_match_context_create(NULL);
            if (!c->jst || !c->mctx) return -1;
            pcre2_jit_stack_assign(c->mctx, NULL, c->jst);
            continue;
        }
        if (rc < 0) return rc;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        *ms = ov[0]; *me = ov[1];
        return 1;
    }
}

void tk_ctx_free(tk_ctx *c) {
    for (int i = 0; i < 4; i++) { free(c->b[i].d); free(c->l[i].p); }
    free(c->nb.d); free(c->t1.d); free(c->t2.d);
    if (c->md) pcre2_match_data_free(c->md);
    if (c->mctx) pcre2_match_context_free(c->mctx);
    if (c->jst) pcre2_jit_stack_free(c->jst);
    free(c->sym_id); free(c->sym_prev); free(c->sym_next); free(c->sym_len);
    free(c->heap);
    free(c->best); free(c->best_from); free(c->best_id);
}

/* ---- Unicode classes ---- */
bool tk_is_whitespace(uint32_t cp) {
    /* Unicode White_Space, as Rust's char::is_whitespace */
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return true;
    if (cp < 0x85) return false;
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

bool tk_is_punct(uint32_t cp) {
    if (cp < 0x80) return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool tk_is_numeric(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool tk_is_word(uint32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    /* Rust regex \w: alphabetic, marks, decimal numbers, connector punctuation, join controls */
    if (cp == 0x200C || cp == 0x200D) return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
           k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC;
}
