/* tests/unit/test_tokenizer.c: the tokenizer against Hugging Face `tokenizers` goldens
 * (tests/fixtures/goldens/tokenizers/NAME.json: ids without and with special tokens, and the decode)
 * for the six real tokenizers; streaming detokenization and concurrent encoding on them;
 * tokenizer_config.json handling; the tiny model fixtures' and the demo model's tokenizers against
 * their golden.safetensors. Synthetic component tests and bad files: test_tokenizer_components.c. */
#include "test.h"
#include "mlxcel/tokenizer.h"
#include "tokenizer/tk_internal.h"   /* to switch off the U+2581 word cutting for an equivalence check */

#include <dirent.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

static const char *g_names[] = { "qwen3", "llama3_1", "llama2", "deepseek_v3", "gemma3", "gptoss" };
static mx_tokenizer *g_tok;      /* the tokenizer under test (loaded without tokenizer_config.json) */
static json_t *g_cases;          /* its golden cases */
static const char *g_name;

static void fmt_ids(char *buf, size_t n, const int32_t *ids, int k) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < k && o + 16 < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%d", i ? "," : "", ids[i]);
}

static bool ids_equal(const int32_t *a, int na, const json_t *arr) {
    if ((size_t)na != json_array_size(arr)) return false;
    for (int i = 0; i < na; i++) if (json_integer_value(json_array_get(arr, (size_t)i)) != a[i]) return false;
    return true;
}

static int32_t *json_ids(const json_t *arr, int *n) {
    size_t gn = json_array_size(arr);
    int32_t *v = malloc((gn + 1) * sizeof *v);
    for (size_t k = 0; k < gn; k++) v[k] = (int32_t)json_integer_value(json_array_get(arr, k));
    *n = (int)gn;
    return v;
}

static bool utf8_ok(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++) if ((p[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

/* ids (no special), ids_with_special and decode of ids, for every case */
static void t_golden(const char *what) {
    bool special = !strcmp(what, "special"), dec = !strcmp(what, "decode");
    size_t nc = json_array_size(g_cases), bad = 0;
    char first[1024] = "";
    for (size_t i = 0; i < nc; i++) {
        json_t *c = json_array_get(g_cases, i);
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t tl = json_string_length(json_object_get(c, "text"));
        if (dec) {
            int gn; int32_t *gv = json_ids(json_object_get(c, "ids"), &gn);
            char *out = NULL;
            mx_status st = mx_tokenizer_decode(g_tok, gv, gn, false, &out);
            const char *want = json_string_value(json_object_get(c, "decoded"));
            size_t wl = json_string_length(json_object_get(c, "decoded"));
            if (st || strlen(out) > wl || memcmp(out, want, wl + 1)) {
                bad++;
                if (!first[0]) snprintf(first, sizeof first, "case %zu: got '%.60s' want '%.60s'", i, out ? out : "(null)", want);
            }
            free(out); free(gv);
            continue;
        }
        int32_t *ids = NULL; int n = 0;
        mx_status st = mx_tokenizer_encode(g_tok, text, tl, special, &ids, &n);
        if (st || !ids_equal(ids, n, json_object_get(c, special ? "ids_with_special" : "ids"))) {
            bad++;
            if (!first[0]) { char b[600]; fmt_ids(b, sizeof b, ids, n); snprintf(first, sizeof first, "case %zu '%.40s': got [%s] %s", i, text, b, st ? mx_last_error() : ""); }
        }
        free(ids);
    }
    TCHECK(nc >= 80, "only %zu cases", nc);
    TCHECK(bad == 0, "%s %s: %zu of %zu cases wrong; first: %s", g_name, what, bad, nc, first);
}

/* Push ids one at a time: every chunk is valid UTF-8 and the concatenation equals the decode. */
static void stream_check(const int32_t *ids, int n, bool skip, char *why, size_t whyn) {
    why[0] = 0;
    char *full = NULL; size_t fl = 0;
    if (mx_tokenizer_decode_n(g_tok, ids, n, skip, &full, &fl)) { snprintf(why, whyn, "decode failed"); return; }
    mx_detok_stream *s = mx_detok_stream_new(g_tok, skip);
    mx_buf all = {0}, chunk = {0};
    for (int i = 0; i < n && !why[0]; i++) {
        chunk.len = 0;
        if (mx_detok_stream_push(s, ids[i], &chunk)) { snprintf(why, whyn, "push %d failed: %s", i, mx_last_error()); break; }
        if (!utf8_ok(chunk.data ? chunk.data : "", chunk.len)) snprintf(why, whyn, "chunk %d is not valid UTF-8", i);
        mx_buf_append(&all, chunk.data ? chunk.data : "", chunk.len);
    }
    chunk.len = 0;
    mx_detok_stream_flush(s, &chunk);
    mx_buf_append(&all, chunk.data ? chunk.data : "", chunk.len);
    if (!why[0] && (all.len != fl || memcmp(all.data, full, fl)))
        snprintf(why, whyn, "stream '%.50s' != decode '%.50s'", all.data ? all.data : "", full);
    mx_buf_free(&all); mx_buf_free(&chunk);
    mx_detok_stream_free(s);
    free(full);
}

static void t_stream(const char *unused) {
    (void)unused;
    size_t nc = json_array_size(g_cases), bad = 0;
    char why[256], first[400] = "";
    for (size_t i = 0; i < nc; i++) {
        json_t *c = json_array_get(g_cases, i);
        for (int skip = 0; skip < 2; skip++) {
            int n; int32_t *ids = json_ids(json_object_get(c, "ids_with_special"), &n);
            stream_check(ids, n, skip, why, sizeof why);
            if (why[0]) { bad++; if (!first[0]) snprintf(first, sizeof first, "case %zu skip=%d: %s", i, skip, why); }
            free(ids);
        }
    }
    /* a multi-byte character split across byte-level / byte-fallback tokens is held back until complete */
    int32_t *ids; int n;
    const char *emoji = "x \xF0\x9F\x98\x80\xF0\x9F\x9A\x80 \xE4\xBD\xA0\xE5\xA5\xBD";
    if (mx_tokenizer_encode(g_tok, emoji, strlen(emoji), false, &ids, &n) == MX_OK) {
        stream_check(ids, n, false, why, sizeof why);
        if (why[0]) { bad++; if (!first[0]) snprintf(first, sizeof first, "emoji: %s", why); }
        free(ids);
    }
    /* random ids (broken byte sequences, specials, byte-fallback pieces in any order) */
    uint64_t r = 0x2545F4914F6CDD1Dull;
    int vs = mx_tokenizer_vocab_size(g_tok);
    for (int rep = 0; rep < 20 && vs > 0; rep++) {
        int32_t rid[64];
        for (int i = 0; i < 64; i++) {
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            /* half from the low ids (bytes, byte-fallback tokens, specials), half anywhere */
            rid[i] = (int32_t)((i & 1) ? r % (uint64_t)vs : r % 600);
        }
        stream_check(rid, 64, rep & 1, why, sizeof why);
        if (why[0]) { bad++; if (!first[0]) snprintf(first, sizeof first, "random ids rep %d: %s", rep, why); }
    }
    TCHECK(bad == 0, "%s: %zu streaming failures; first: %s", g_name, bad, first);
}

/* SentencePiece-style tokenizers cut long words before U+2581 (an optimization); the ids must equal
 * those of BPE over the whole text. */
static void t_ms_split(const char *unused) {
    (void)unused;
    mx_buf text = {0};
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < json_array_size(g_cases); i++) {
            json_t *c = json_array_get(g_cases, i);
            mx_buf_append(&text, json_string_value(json_object_get(c, "text")), json_string_length(json_object_get(c, "text")));
            mx_buf_append(&text, rep == 1 ? "\n" : " ", 1);
        }
    int32_t *a, *b; int na, nb;
    mx_status s1 = mx_tokenizer_encode(g_tok, text.data, text.len, false, &a, &na);
    bool was = g_tok->ms_split;
    g_tok->ms_split = false;
    mx_status s2 = mx_tokenizer_encode(g_tok, text.data, text.len, false, &b, &nb);
    g_tok->ms_split = was;
    TCHECK(s1 == MX_OK && s2 == MX_OK, "encode");
    int first = -1;
    for (int i = 0; i < na && i < nb; i++) if (a[i] != b[i]) { first = i; break; }
    TCHECK(na == nb && first < 0, "%s: cut %d ids, whole %d ids, first difference at %d", g_name, na, nb, first);
    free(a); free(b); mx_buf_free(&text);
}

typedef struct { int from, step; int bad; } thr_arg;
static void *thr_main(void *p) {
    thr_arg *a = p;
    size_t nc = json_array_size(g_cases);
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = (size_t)a->from; i < nc; i += (size_t)a->step) {
            json_t *c = json_array_get(g_cases, i);
            int32_t *ids; int n;
            if (mx_tokenizer_encode(g_tok, json_string_value(json_object_get(c, "text")), json_string_length(json_object_get(c, "text")), true, &ids, &n)) { a->bad++; continue; }
            if (!ids_equal(ids, n, json_object_get(c, "ids_with_special"))) a->bad++;
            char *d;
            if (mx_tokenizer_decode(g_tok, ids, n, true, &d)) a->bad++; else free(d);
            free(ids);
        }
    return NULL;
}

static void t_threads(const char *unused) {
    (void)unused;
    pthread_t th[4]; thr_arg a[4];
    for (int i = 0; i < 4; i++) { a[i] = (thr_arg){ i % 2, 1 + i % 2, 0 }; pthread_create(&th[i], NULL, thr_main, &a[i]); }
    int bad = 0;
    for (int i = 0; i < 4; i++) { pthread_join(th[i], NULL); bad += a[i].bad; }
    TCHECK(bad == 0, "%s: %d wrong results from concurrent encodes", g_name, bad);
}

/* ---- tokenizer_config.json: bos/eos strings and ids, add_bos_token ---- */
static void t_config(void) {
    char p[400];
    struct { const char *name, *bos, *eos; bool add_bos; int32_t bos_id; } want[] = {
        { "qwen3", NULL, "<|im_end|>", false, -1 },
        { "llama3_1", "<|begin_of_text|>", "<|eot_id|>", false, 128000 },
        { "llama2", "<s>", "</s>", true, 1 },
        { "deepseek_v3", "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", true, 0 },
        { "gemma3", "<bos>", "<end_of_turn>", true, 2 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/fixtures/tokenizers/%s", want[i].name);
        mx_tokenizer *t;
        { mx_status _st = mx_tokenizer_load(t_path(p, sizeof p, rel), &t); TREQUIRE(_st == MX_OK, "%.100s: %.300s", rel, mx_last_error()); }
        const char *b = mx_tokenizer_bos_str(t), *e = mx_tokenizer_eos_str(t);
        TCHECK((!b && !want[i].bos) || (b && want[i].bos && !strcmp(b, want[i].bos)), "%s bos '%s'", want[i].name, b ? b : "(null)");
        TCHECK(e && !strcmp(e, want[i].eos), "%s eos '%s'", want[i].name, e ? e : "(null)");
        TCHECK(mx_tokenizer_bos_id(t) == want[i].bos_id, "%s bos id %d", want[i].name, mx_tokenizer_bos_id(t));
        TCHECK(mx_tokenizer_eos_id(t) == mx_tokenizer_token_id(t, want[i].eos) && mx_tokenizer_eos_id(t) >= 0, "%s eos id", want[i].name);
        TCHECK(mx_tokenizer_add_bos(t) == want[i].add_bos, "%s add_bos", want[i].name);
        TCHECK(mx_tokenizer_is_special(t, mx_tokenizer_eos_id(t)), "%s eos not special", want[i].name);
        /* with add_special, exactly one BOS leads when add_bos_token (deepseek's post-processor adds none) */
        int32_t *ids; int n;
        { mx_status _st = mx_tokenizer_encode(t, "Hello world", 11, true, &ids, &n); TREQUIRE(_st == MX_OK, "encode"); }
        if (want[i].add_bos || want[i].bos_id >= 0) TCHECK(n >= 2 && ids[0] == want[i].bos_id && ids[1] != want[i].bos_id, "%s: no single leading BOS (%d %d)", want[i].name, ids[0], n > 1 ? ids[1] : -1);
        else TCHECK(n >= 1 && ids[0] != mx_tokenizer_eos_id(t), "%s", want[i].name);
        free(ids);
        /* a BOS written in the text is kept, and add_special adds one more (as transformers does) */
        if (want[i].bos) {
            char txt[128];
            snprintf(txt, sizeof txt, "%sHi", want[i].bos);
            { mx_status _st = mx_tokenizer_encode(t, txt, strlen(txt), true, &ids, &n); TREQUIRE(_st == MX_OK, "encode"); }
            TCHECK(n >= 3 && ids[0] == want[i].bos_id && ids[1] == want[i].bos_id && ids[2] != want[i].bos_id, "%s: BOS in text: %d %d %d", want[i].name, ids[0], n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1);
            free(ids);
        }
        { mx_status _st = mx_tokenizer_encode(t, "Hello world", 11, false, &ids, &n); TREQUIRE(_st == MX_OK, "encode"); }
        TCHECK(n >= 1 && ids[0] != want[i].bos_id, "%s: BOS without add_special", want[i].name);
        free(ids);
        mx_tokenizer_free(t);
    }
}

/* ---- lookups on qwen3 ---- */
static void t_lookups(void) {
    char p[400];
    mx_tokenizer *t;
    { mx_status _st = mx_tokenizer_load(t_path(p, sizeof p, "tests/fixtures/tokenizers/qwen3"), &t); TREQUIRE(_st == MX_OK, "%s", mx_last_error()); }
    TCHECK(mx_tokenizer_token_id(t, "<|im_start|>") == 151644, "im_start");
    TCHECK(mx_tokenizer_token_id(t, "Hello") == 9707, "Hello");
    TCHECK(mx_tokenizer_token_id(t, "no such token at all") == -1, "absent");
    TCHECK(mx_tokenizer_token_str(t, 9707) && !strcmp(mx_tokenizer_token_str(t, 9707), "Hello"), "str 9707");
    TCHECK(mx_tokenizer_token_str(t, 21927) && !strcmp(mx_tokenizer_token_str(t, 21927), "\xC4\xA0Hello"), "str 21927 (raw byte-level)");
    TCHECK(mx_tokenizer_token_str(t, 151644) && !strcmp(mx_tokenizer_token_str(t, 151644), "<|im_start|>"), "added str");
    TCHECK(mx_tokenizer_token_str(t, -1) == NULL && mx_tokenizer_token_str(t, 1 << 30) == NULL, "out of range");
    TCHECK(mx_tokenizer_is_special(t, 151645) && !mx_tokenizer_is_special(t, 9707), "is_special");
    TCHECK(mx_tokenizer_vocab_size(t) == 151669, "vocab size %d", mx_tokenizer_vocab_size(t));
    /* skip_special drops special tokens; ids outside the vocab are ignored */
    int32_t ids[] = { 151644, 9707, 151645, 1 << 28, -5 };
    char *s;
    { mx_status _st = mx_tokenizer_decode(t, ids, 5, true, &s); TREQUIRE(_st == MX_OK, "decode"); }
    TCHECK(!strcmp(s, "Hello"), "skip_special '%s'", s);
    free(s);
    { mx_status _st = mx_tokenizer_decode(t, ids, 5, false, &s); TREQUIRE(_st == MX_OK, "decode"); }
    TCHECK(!strcmp(s, "<|im_start|>Hello<|im_end|>"), "keep special '%s'", s);
    free(s);
    /* MX_TOK_SPLIT_SPECIAL: special tokens in the text are plain text (qwen3 golden case 51 shape) */
    {
        int32_t *v2; int n2;
        const char *txt = "<|im_start|>user";
        TCHECK(mx_tokenizer_encode_ex(t, txt, strlen(txt), MX_TOK_SPLIT_SPECIAL, &v2, &n2) == MX_OK, "encode_ex");
        bool has = false;
        for (int i = 0; i < n2; i++) if (v2[i] == 151644) has = true;
        TCHECK(!has && n2 > 3, "special matched despite MX_TOK_SPLIT_SPECIAL (%d ids)", n2);
        char *back;
        TCHECK(mx_tokenizer_decode(t, v2, n2, true, &back) == MX_OK && !strcmp(back, txt), "split special round trip");
        free(back); free(v2);
    }
    /* invalid UTF-8 input is an error, not a crash */
    int32_t *v; int n;
    TCHECK(mx_tokenizer_encode(t, "a\xFF", 2, false, &v, &n) == MX_ERR_INVALID_ARG, "invalid UTF-8 accepted");
    TCHECK(mx_tokenizer_encode(t, "", 0, true, &v, &n) == MX_OK && n == 0, "empty");
    free(v);
    /* a long single word (no pre-tokenizer split) stays exact and fast: 64k letters */
    size_t L = 65536;
    char *big = malloc(L);
    for (size_t i = 0; i < L; i++) big[i] = "abcdefghij"[(i * 7 + i / 3) % 10];
    TCHECK(mx_tokenizer_encode(t, big, L, false, &v, &n) == MX_OK && n > 0, "long word");
    char *back;
    TCHECK(mx_tokenizer_decode(t, v, n, false, &back) == MX_OK && strlen(back) == L && !memcmp(back, big, L), "long word round trip");
    free(back); free(v); free(big);
    mx_tokenizer_free(t);
}

/* ---- safetensors I32 tensors (tiny reader for the goldens) ---- */
static int32_t *st_ids(const char *path, const char *name, int *n) {
    size_t len;
    char *b = mx_read_file(path, &len);
    if (!b || len < 8) { free(b); return NULL; }
    uint64_t hl; memcpy(&hl, b, 8);
    if (hl > len - 8) { free(b); return NULL; }
    json_t *h = json_loadb(b + 8, (size_t)hl, 0, NULL);
    json_t *e = json_object_get(h, name);
    int32_t *out = NULL;
    if (e && !strcmp(json_string_value(json_object_get(e, "dtype")), "I32")) {
        json_t *o = json_object_get(e, "data_offsets");
        size_t s = (size_t)json_integer_value(json_array_get(o, 0)), f = (size_t)json_integer_value(json_array_get(o, 1));
        if (f >= s && 8 + hl + f <= len) {
            *n = (int)((f - s) / 4);
            out = malloc((size_t)*n * 4 + 4);
            memcpy(out, b + 8 + hl + s, (size_t)*n * 4);
        }
    }
    json_decref(h);
    free(b);
    return out;
}

static void t_fixtures(void) {
    char p[400], d[700], g[800];
    DIR *dd = opendir(t_path(p, sizeof p, "tests/fixtures/models"));
    TREQUIRE(dd, "no fixtures dir");
    struct dirent *de;
    int checked = 0;
    while ((de = readdir(dd))) {
        if (de->d_name[0] == '.') continue;
        snprintf(d, sizeof d, "%s/%s", p, de->d_name);
        snprintf(g, sizeof g, "%s/golden.safetensors", d);
        int gn = 0;
        int32_t *want = st_ids(g, "text_prompt_ids", &gn);
        if (!want) continue;
        mx_tokenizer *t;
        mx_status st = mx_tokenizer_load(d, &t);
        TCHECK(st == MX_OK, "%.200s: %.200s", d, mx_last_error());
        if (st) { free(want); continue; }
        int32_t *ids; int n;
        TCHECK(mx_tokenizer_encode(t, "Once upon a time", 16, true, &ids, &n) == MX_OK, "encode");
        bool eq = n == gn && !memcmp(ids, want, (size_t)n * 4);
        char a[200], b[200];
        fmt_ids(a, sizeof a, ids, n); fmt_ids(b, sizeof b, want, gn);
        TCHECK(eq, "%s: got [%s] want [%s]", de->d_name, a, b);
        char *s;
        TCHECK(mx_tokenizer_decode(t, ids, n, true, &s) == MX_OK && !strcmp(s, "Once upon a time"), "%s decode", de->d_name);
        free(s); free(ids); free(want);
        mx_tokenizer_free(t);
        checked++;
    }
    closedir(dd);
    TCHECK(checked >= 16, "only %d fixtures checked", checked);
}

static void t_fortune(void) {
    char p[400], g[500], j[500];
    t_path(p, sizeof p, "models/fortune-6m");
    snprintf(g, sizeof g, "%s/golden.safetensors", p);
    snprintf(j, sizeof j, "%s/golden.json", p);
    mx_tokenizer *t;
    { mx_status _st = mx_tokenizer_load(p, &t); TREQUIRE(_st == MX_OK, "%s", mx_last_error()); }
    json_t *doc = json_load_file(j, 0, NULL);
    TREQUIRE(doc, "golden.json");
    json_t *prompts = json_object_get(doc, "prompts");
    TCHECK(json_array_size(prompts) == 3, "prompts");
    for (size_t i = 0; i < json_array_size(prompts); i++) {
        json_t *pr = json_array_get(prompts, i);
        char nm[64];
        snprintf(nm, sizeof nm, "prompt%zu_ids", i);
        int gn; int32_t *want = st_ids(g, nm, &gn);
        TREQUIRE(want, "%s missing", nm);
        const char *text = json_string_value(json_object_get(pr, "prompt"));
        int32_t *ids; int n;
        TCHECK(mx_tokenizer_encode(t, text, strlen(text), true, &ids, &n) == MX_OK, "encode");
        char a[300], b[300];
        fmt_ids(a, sizeof a, ids, n); fmt_ids(b, sizeof b, want, gn);
        TCHECK(n == gn && !memcmp(ids, want, (size_t)n * 4), "prompt %zu: got [%s] want [%s]", i, a, b);
        free(ids); free(want);
        /* the golden greedy text is the decode of the greedy ids */
        snprintf(nm, sizeof nm, "prompt%zu_greedy_ids", i);
        int32_t *gid = st_ids(g, nm, &gn);
        TREQUIRE(gid, "%s missing", nm);
        char *s;
        TCHECK(mx_tokenizer_decode(t, gid, gn, false, &s) == MX_OK, "decode");
        const char *gt = json_string_value(json_object_get(pr, "greedy_text"));
        TCHECK(!strcmp(s, gt), "greedy %zu: '%s' != '%s'", i, s, gt);
        free(s); free(gid);
    }
    json_decref(doc);
    mx_tokenizer_free(t);
}

int main(void) {
    char nm[96], p[400], g[400], rel[200];
    for (size_t i = 0; i < sizeof g_names / sizeof g_names[0]; i++) {
        g_name = g_names[i];
        snprintf(rel, sizeof rel, "tests/fixtures/tokenizers/%s/tokenizer.json.xz", g_name);
        t_path(p, sizeof p, rel);
        snprintf(rel, sizeof rel, "tests/fixtures/goldens/tokenizers/%s.json", g_name);
        t_path(g, sizeof g, rel);
        mx_status st = mx_tokenizer_load_files(p, NULL, &g_tok);
        json_t *doc = json_load_file(g, JSON_ALLOW_NUL, NULL);
        if (st || !doc) {
            printf("FAIL load_%s: %s\n", g_name, st ? mx_last_error() : "golden unreadable");
            t_total_failed++;
            json_decref(doc); mx_tokenizer_free(g_tok);
            continue;
        }
        g_cases = json_object_get(doc, "cases");
        snprintf(nm, sizeof nm, "golden_%s_ids", g_name); RUN_NAMED(nm, t_golden, "ids");
        snprintf(nm, sizeof nm, "golden_%s_ids_with_special", g_name); RUN_NAMED(nm, t_golden, "special");
        snprintf(nm, sizeof nm, "golden_%s_decode", g_name); RUN_NAMED(nm, t_golden, "decode");
        snprintf(nm, sizeof nm, "stream_detok_%s", g_name); RUN_NAMED(nm, t_stream, NULL);
        snprintf(nm, sizeof nm, "concurrent_encode_%s", g_name); RUN_NAMED(nm, t_threads, NULL);
        if (g_tok->ms_split) { snprintf(nm, sizeof nm, "metaspace_cut_exact_%s", g_name); RUN_NAMED(nm, t_ms_split, NULL); }
        json_decref(doc);
        mx_tokenizer_free(g_tok);
        g_tok = NULL;
    }
    RUN(t_config);
    RUN(t_lookups);
    RUN(t_fixtures);
    RUN(t_fortune);
    TEST_EXIT();
}
