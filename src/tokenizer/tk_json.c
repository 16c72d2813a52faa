/* tokenizer/tk_json.c: a small, fast, strict JSON reader for tokenizer files (tokenizer.json is
 * 10-30 MB; a general DOM library spends most of the load time hashing object keys). It builds
 * an immutable tree in an arena: objects keep their keys in order (lookup is linear, which suits
 * the small objects of tokenizer.json; the vocab is iterated, never searched here). Strings are
 * validated as UTF-8 and unescaped (NUL-terminated, length kept). Non-recursive, depth-limited.
 * It is not a JSON writer and not a general-purpose library (see jansson for that). */
#include "tokenizer/tk_internal.h"

#include <stdlib.h>
#include <string.h>

#define TJ_MAX_DEPTH 256
#define TJ_CHUNK (1u << 20)

typedef struct tj_chunk { struct tj_chunk *next; size_t used, cap; char data[]; } tj_chunk;

static void *arena_alloc(tj_doc *d, size_t n) {
    n = (n + 7) & ~(size_t)7;
    tj_chunk *c = d->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > TJ_CHUNK ? n : TJ_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = d->chunks; c->used = 0; c->cap = cap;
        d->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void tj_free(tj_doc *d) {
    tj_chunk *c = d->chunks;
    while (c) { tj_chunk *n = c->next; free(c); c = n; }
    d->chunks = NULL;
}

/* Length of the valid UTF-8 sequence at p (1..4), 0 if invalid. */
size_t tk_utf8_valid_seq(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) { if (n < 2 || (p[1] & 0xC0) != 0x80) return 0; return 2; }
    if (c < 0xF0) {
        if (n < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;
        if (c == 0xED && p[1] >= 0xA0) return 0;
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

bool tk_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        while (i + 8 <= n) {
            uint64_t w; memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (p[i] < 0x80) { i++; continue; }
        size_t k = tk_utf8_valid_seq(p + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

size_t tk_utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

typedef struct {
    const char *s, *end, *name;
    tj_doc *doc;
    tj *vals; size_t nv, capv;
} tj_p;

static mx_status perr(tj_p *p, const char *at, const char *what) {
    /* line number for the message */
    size_t line = 1;
    const char *begin = p->end - 0; (void)begin;
    for (const char *q = p->s; q < at && q < p->end; q++) if (*q == '\n') line++;
    return mx_errorf(MX_ERR_FORMAT, "%s: invalid JSON at line %zu: %s", p->name, line, what);
}

static bool push_val(tj_p *p, tj v) {
    if (p->nv == p->capv) {
        size_t nc = p->capv ? p->capv * 2 : 1024;
        tj *nvp = realloc(p->vals, nc * sizeof *nvp);
        if (!nvp) return false;
        p->vals = nvp; p->capv = nc;
    }
    p->vals[p->nv++] = v;
    return true;
}

static unsigned hexv(char c) {
    if (c >= '0' && c <= '9') return (unsigned)(c - '0');
    if (c >= 'a' && c <= 'f') return (unsigned)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (unsigned)(c - 'A' + 10);
    return 16;
}

/* *pp points after the opening quote. */
static mx_status parse_string(tj_p *p, const char **pp, tj *out) {
    const char *q = *pp, *start = q;
    bool esc = false;
    /* find the end and whether there are escapes */
    while (q < p->end) {
        unsigned char c = (unsigned char)*q;
        if (c == '"') break;
        if (c == '\\') { esc = true; q += 2; continue; }
        if (c < 0x20) return perr(p, q, "control character in string");
        q++;
    }
    if (q >= p->end) return perr(p, start, "unterminated string");
    size_t raw = (size_t)(q - start);
    char *dst = arena_alloc(p->doc, raw + 1);
    if (!dst) return mx_errorf(MX_ERR_NOMEM, "%s: out of memory", p->name);
    size_t n = 0;
    if (!esc) {
        if (!tk_utf8_valid(start, raw)) return perr(p, start, "invalid UTF-8 in string");
        memcpy(dst, start, raw); n = raw;
    } else {
        const char *r = start;
        while (r < q) {
            unsigned char c = (unsigned char)*r;
            if (c != '\\') {
                if (c < 0x80) { dst[n++] = (char)c; r++; continue; }
                size_t k = tk_utf8_valid_seq((const unsigned char *)r, (size_t)(q - r));
                if (!k) return perr(p, r, "invalid UTF-8 in string");
                memcpy(dst + n, r, k); n += k; r += k;
                continue;
            }
            r++;
            if (r >= q) return perr(p, r, "bad escape");
            char e = *r++;
            switch (e) {
            case '"': dst[n++] = '"'; break;
            case '\\': dst[n++] = '\\'; break;
            case '/': dst[n++] = '/'; break;
            case 'b': dst[n++] = '\b'; break;
            case 'f': dst[n++] = '\f'; break;
            case 'n': dst[n++] = '\n'; break;
            case 'r': dst[n++] = '\r'; break;
            case 't': dst[n++] = '\t'; break;
            case 'u': {
                if (q - r < 4) return perr(p, r, "bad \\u escape");
                unsigned cp = 0;
                for (int i = 0; i < 4; i++) { unsigned h = hexv(r[i]); if (h > 15) return perr(p, r, "bad \\u escape"); cp = cp * 16 + h; }
                r += 4;
                if (cp >= 0xD800 && cp < 0xDC00) {
                    if (q - r < 6 || r[0] != '\\' || r[1] != 'u') return perr(p, r, "lone surrogate in \\u escape");
                    unsigned lo = 0;
                    for (int i = 0; i < 4; i++) { unsigned h = hexv(r[2 + i]); if (h > 15) return perr(p, r, "bad \\u escape"); lo = lo * 16 + h; }
                    if (lo < 0xDC00 || lo >= 0xE000) return perr(p, r, "lone surrogate in \\u escape");
                    r += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp < 0xE000) {
                    return perr(p, r, "lone surrogate in \\u escape");
                }
                n += tk_utf8_put(dst + n, cp);
                break;
            }
            default: return perr(p, r - 1, "bad escape");
            }
        }
    }
    dst[n] = 0;
    out->type = TJ_STR; out->n = (uint32_t)n; out->u.s = dst;
    *pp = q + 1;
    return MX_OK;
}

static mx_status parse_number(tj_p *p, const char **pp, tj *out) {
    const char *q = *pp, *st = q;
    bool neg = false, isint = true;
    if (q < p->end && *q == '-') { neg = true; q++; }
    if (q >= p->end) return perr(p, st, "bad number");
    if (*q == '0') q++;
    else if (*q >= '1' && *q <= '9') { while (q < p->end && *q >= '0' && *q <= '9') q++; }
    else return perr(p, st, "bad number");
    if (q < p->end && *q == '.') {
        isint = false; q++;
        if (q >= p->end || *q < '0' || *q > '9') return perr(p, st, "bad number");
        while (q < p->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < p->end && (*q == 'e' || *q == 'E')) {
        isint = false; q++;
        if (q < p->end && (*q == '+' || *q == '-')) q++;
        if (q >= p->end || *q < '0' || *q > '9') return perr(p, st, "bad number");
        while (q < p->end && *q >= '0' && *q <= '9') q++;
    }
    size_t len = (size_t)(q - st);
    double v;
    if (isint && len - (neg ? 1 : 0) <= 15) {
        long long x = 0;
        for (const char *r = st + (neg ? 1 : 0); r < q; r++) x = x * 10 + (*r - '0');
        v = (double)(neg ? -x : x);
    } else {
        char tmp[128];
        if (len >= sizeof tmp) return perr(p, st, "number too long");
        memcpy(tmp, st, len); tmp[len] = 0;
        v = strtod(tmp, NULL);
    }
    out->type = TJ_NUM; out->n = 0; out->u.num = v;
    *pp = q;
    return MX_OK;
}

static inline const char *skip_ws(const char *q, const char *end) {
    while (q < end && (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t')) q++;
    return q;
}

/* An object member's key at *q (whitespace allowed before it) and its ':', the key pushed. */
static mx_status parse_key(tj_p *p, const char **pq) {
    const char *q = skip_ws(*pq, p->end);
    if (q >= p->end || *q != '"') return perr(p, q, "expected a key string");
    q++;
    tj k;
    mx_status st = parse_string(p, &q, &k);
    if (st) return st;
    if (!push_val(p, k)) return mx_errorf(MX_ERR_NOMEM, "%s: out of memory", p->name);
    q = skip_ws(q, p->end);
    if (q >= p->end || *q != ':') return perr(p, q, "expected ':'");
    *pq = q + 1;
    return MX_OK;
}

mx_status tj_parse(const char *src, size_t len, const char *name, tj_doc *doc) {
    doc->chunks = NULL;
    doc->root.type = TJ_NULL;
    tj_p p = { .s = src, .end = src + len, .name = name ? name : "JSON", .doc = doc };
    struct { size_t start; bool obj; } frames[TJ_MAX_DEPTH];
    int depth = 0;
    const char *q = src;
    mx_status st = MX_OK;
    /* state: expecting a value (after '[', ',' in array, ':' in object, or at top) */
    for (;;) {
        q = skip_ws(q, p.end);
        if (q >= p.end) { st = perr(&p, q, "unexpected end of input"); goto fail; }
        tj v = {0};
        char c = *q;
        bool pushed_container = false;
        if (c == '{' || c == '[') {
            if (depth >= TJ_MAX_DEPTH) { st = perr(&p, q, "nesting too deep"); goto fail; }
            frames[depth].start = p.nv; frames[depth].obj = (c == '{');
            depth++; q++;
            q = skip_ws(q, p.end);
            if (q < p.end && ((c == '{' && *q == '}') || (c == '[' && *q == ']'))) {
                depth--; q++;
                v.type = c == '{' ? TJ_OBJ : TJ_ARR; v.n = 0; v.u.a = NULL;
            } else {
                if (c == '{' && (st = parse_key(&p, &q))) goto fail;
                pushed_container = true;
            }
        } else if (c == '"') {
            q++;
            if ((st = parse_string(&p, &q, &v))) goto fail;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            if ((st = parse_number(&p, &q, &v))) goto fail;
        } else if (p.end - q >= 4 && !memcmp(q, "true", 4)) { v.type = TJ_TRUE; q += 4; }
        else if (p.end - q >= 5 && !memcmp(q, "false", 5)) { v.type = TJ_FALSE; q += 5; }
        else if (p.end - q >= 4 && !memcmp(q, "null", 4)) { v.type = TJ_NULL; q += 4; }
        else { st = perr(&p, q, "unexpected character"); goto fail; }
        if (pushed_container) continue;
        if (!push_val(&p, v)) { st = mx_errorf(MX_ERR_NOMEM, "%s: out of memory", p.name); goto fail; }
        /* after a value: close containers or expect ',' */
        for (;;) {
            q = skip_ws(q, p.end);
            if (depth == 0) {
                if (q != p.end) { st = perr(&p, q, "trailing characters after the document"); goto fail; }
                doc->root = p.vals[0];
                free(p.vals);
                return MX_OK;
            }
            if (q >= p.end) { st = perr(&p, q, "unexpected end of input"); goto fail; }
            bool obj = frames[depth - 1].obj;
            if (*q == ',') {
                q++;
                if (obj && (st = parse_key(&p, &q))) goto fail;
                break; /* expect a value */
            }
            if ((obj && *q == '}') || (!obj && *q == ']')) {
                q++;
                depth--;
                size_t start = frames[depth].start, cnt = p.nv - start;
                tj *items = arena_alloc(doc, cnt * sizeof(tj) + 1);
                if (!items) { st = mx_errorf(MX_ERR_NOMEM, "%s: out of memory", p.name); goto fail; }
                memcpy(items, p.vals + start, cnt * sizeof(tj));
                p.nv = start;
                tj cv = { .type = obj ? TJ_OBJ : TJ_ARR, .n = (uint32_t)(obj ? cnt / 2 : cnt) };
                cv.u.a = items;
                if (!push_val(&p, cv)) { st = mx_errorf(MX_ERR_NOMEM, "%s: out of memory", p.name); goto fail; }
                continue;
            }
            st = perr(&p, q, obj ? "expected ',' or '}'" : "expected ',' or ']'");
            goto fail;
        }
    }
fail:
    free(p.vals);
    tj_free(doc);
    return st;
}

const tj *tj_get(const tj *o, const char *key) {
    if (!o || o->type != TJ_OBJ) return NULL;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < o->n; i++) {
        const tj *k = &o->u.a[2 * i];
        if (k->n == kl && !memcmp(k->u.s, key, kl)) return &o->u.a[2 * i + 1];
    }
    return NULL;
}

const char *tj_str(const tj *v) { return v && v->type == TJ_STR ? v->u.s : NULL; }

bool tj_bool(const tj *v, bool dflt) {
    if (!v) return dflt;
    if (v->type == TJ_TRUE) return true;
    if (v->type == TJ_FALSE) return false;
    return dflt;
}
