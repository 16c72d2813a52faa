/* cli/cmd_tokenize.c: `mlxcel tokenize` (text to ids, also a load/encode benchmark with --bench)
 * and `mlxcel detokenize` (ids to text). Thin wrappers over include/mlxcel/tokenizer.h; no
 * tokenizer logic lives here. */
#include "cli/cli.h"
#include "cli/model_open.h"

#include "mlxcel/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void tok_usage(FILE *f) {
    fprintf(f,
        "usage: mlxcel tokenize (-m DIR | --tokenizer DIR) (-p TEXT | -f FILE | --jsonl FILE) [--special] [--json]\n"
        "       mlxcel tokenize (-m DIR | --tokenizer DIR) --bench [-f FILE] [--repeat N]\n\n"
        "Encodes text with the tokenizer.json (or tokenizer.json.xz) in DIR and prints the token ids.\n\n"
        "  -m, --model MODEL   model directory (or store name) holding tokenizer.json [+ tokenizer_config.json]\n"
        "  --tokenizer DIR     same, for a directory with only tokenizer files\n"
        "  -p, --prompt TEXT   text to encode\n"
        "  -f, --file FILE     encode the whole file's contents (- for standard input)\n"
        "  --jsonl FILE        each line a JSON string; prints one JSON array of ids per line (- for stdin)\n"
        "  --special           add special tokens (post-processor, add_bos_token), as add_special_tokens=True\n"
        "  --json              print a JSON array instead of space-separated ids\n"
        "  --bench             time loading and single-thread encoding (of FILE, or built-in English prose)\n"
        "  --repeat N          bench: encode the text N times (default 3), report the best\n");
}

static void detok_usage(FILE *f) {
    fprintf(f,
        "usage: mlxcel detokenize (-m DIR | --tokenizer DIR) --ids 1,2,3 [--skip-special] [--json]\n\n"
        "Decodes token ids to text with the tokenizer in DIR and prints it.\n\n"
        "  -m, --model MODEL   model directory (or store name) holding tokenizer.json\n"
        "  --tokenizer DIR     same, for a directory with only tokenizer files\n"
        "  --ids LIST          comma-separated token ids\n"
        "  --skip-special      drop special tokens (skip_special_tokens=True)\n"
        "  --json              print the text as a JSON string\n");
}

static void print_ids(const int32_t *ids, int n, bool json) {
    if (json) putchar('[');
    for (int i = 0; i < n; i++) printf("%s%d", i ? (json ? ", " : " ") : "", ids[i]);
    if (json) putchar(']');
    putchar('\n');
}

/* Deterministic English-like prose for --bench without a file. */
static char *bench_text(size_t target, size_t *len) {
    static const char *const words[] = {
        "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
        "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
        "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will",
        "would", "who", "so", "no", "people", "time", "year", "government", "world", "system", "water", "house",
        "small", "number", "always", "morning", "between", "important", "children", "question", "development",
        "understanding", "remembered", "quickly", "although", "everything", "language", "history", "evening",
        "mountain", "river", "village", "library", "science", "machine", "learning", "information", "weather",
        "beautiful", "different", "political", "economic", "national", "particular", "especially", "nothing",
        "whatever", "community", "experience", "education", "yesterday", "tomorrow", "president", "company",
        "Monday", "London", "Europe", "American", "Shakespeare", "October", "twenty", "hundred", "1984", "42",
    };
    size_t nw = sizeof words / sizeof words[0];
    char *s = malloc(target + 64);
    if (!s) return NULL;
    size_t n = 0;
    uint64_t r = 0x9E3779B97F4A7C15ull;
    bool cap = true;
    while (n < target) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        const char *w = words[r % nw];
        size_t wl = strlen(w);
        if (n) s[n++] = ' ';
        memcpy(s + n, w, wl);
        if (cap && s[n] >= 'a' && s[n] <= 'z') s[n] = (char)(s[n] - 32);
        n += wl;
        cap = false;
        unsigned p = (unsigned)(r >> 40) % 16;
        if (p == 0) { s[n++] = '.'; cap = true; }
        else if (p == 1) s[n++] = ',';
        else if (p == 2 && (r >> 50) % 4 == 0) { s[n++] = '.'; s[n++] = '\n'; cap = true; }
    }
    s[n] = 0;
    *len = n;
    return s;
}

/* CPU seconds of this thread: the figures stay meaningful on a busy machine */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int run_bench(const char *dir, const char *file, int repeat) {
    double t0 = mx_time_s(), c0 = cpu_s();
    mx_tokenizer *t;
    if (mx_tokenizer_load(dir, &t)) return cli_fail("tokenize", "cannot load the tokenizer");
    double load_s = mx_time_s() - t0, load_cpu = cpu_s() - c0;
    size_t len = 0;
    char *text = file ? mx_read_file(file, &len) : bench_text(8u << 20, &len);
    if (!text) { mx_tokenizer_free(t); return cli_fail("tokenize", file ? "cannot read the bench file" : "out of memory"); }
    double best = 1e30, dbest = 1e30, cbest = 1e30;
    int ntok = 0;
    for (int r = 0; r < repeat; r++) {
        int32_t *ids; int n;
        double a = mx_time_s(), ca = cpu_s();
        if (mx_tokenizer_encode(t, text, len, false, &ids, &n)) { free(text); mx_tokenizer_free(t); return cli_fail("tokenize", "encode failed"); }
        double e = mx_time_s() - a, ce = cpu_s() - ca;
        if (e < best) best = e;
        if (ce < cbest) cbest = ce;
        ntok = n;
        char *dec;
        a = mx_time_s();
        if (mx_tokenizer_decode(t, ids, n, false, &dec) == MX_OK) {
            double d = mx_time_s() - a;
            if (d < dbest) dbest = d;
            free(dec);
        }
        free(ids);
    }
    printf("tokenizer   %s\n", dir);
    printf("load        %.3f s (%.3f s CPU)\n", load_s, load_cpu);
    printf("text        %s, %zu bytes, %d tokens\n", file ? file : "built-in prose", len, ntok);
    printf("encode      %.1f MB/s, %.2f M tokens/s (1 thread, best of %d; %.1f MB/s by CPU time)\n",
           (double)len / best / 1e6, ntok / best / 1e6, repeat, (double)len / cbest / 1e6);
    printf("decode      %.1f MB/s\n", (double)len / dbest / 1e6);
    free(text);
    mx_tokenizer_free(t);
    return 0;
}

/* Whole file, or standard input for "-" (NUL-terminated, length in *len). */
static char *read_input(const char *path, size_t *len) {
    if (strcmp(path, "-")) return mx_read_file(path, len);
    mx_buf b = {0};
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, stdin)) > 0)
        if (!mx_buf_append(&b, tmp, n)) { mx_buf_free(&b); return NULL; }
    if (!b.data && !mx_buf_append(&b, "", 0)) return NULL;
    *len = b.len;
    return b.data;
}

/* Flag value helper: returns NULL (and prints) when missing. */
static const char *val(int argc, char **argv, int *i, const char *cmd) {
    if (*i + 1 >= argc) { fprintf(stderr, "mlxcel %s: %s needs a value\n", cmd, argv[*i]); return NULL; }
    return argv[++*i];
}

int cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL, *prompt = NULL, *file = NULL, *jsonl = NULL;
    bool special = false, json = false, bench = false, resolve = false;
    long long repeat = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { tok_usage(stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(dir = val(argc, argv, &i, "tokenize"))) return 2; resolve = true; }
        else if (!strcmp(a, "--tokenizer")) { if (!(dir = val(argc, argv, &i, "tokenize"))) return 2; resolve = false; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!(prompt = val(argc, argv, &i, "tokenize"))) return 2; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!(file = val(argc, argv, &i, "tokenize"))) return 2; }
        else if (!strcmp(a, "--jsonl")) { if (!(jsonl = val(argc, argv, &i, "tokenize"))) return 2; }
        else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--bench")) bench = true;
        else if (!strcmp(a, "--repeat")) { const char *v = val(argc, argv, &i, "tokenize"); if (!v || !cli_parse_int("--repeat", v, 1, 1000, &repeat)) return 2; }
        else { fprintf(stderr, "mlxcel tokenize: unknown option '%s' (see mlxcel tokenize --help)\n", a); return 2; }
    }
    if (!dir) { fprintf(stderr, "mlxcel tokenize: -m DIR or --tokenizer DIR is required\n"); return 2; }
    if (bench && (prompt || jsonl)) { fprintf(stderr, "mlxcel tokenize: --bench takes -f FILE only\n"); return 2; }
    if (!bench && (prompt != NULL) + (file != NULL) + (jsonl != NULL) != 1) {
        fprintf(stderr, "mlxcel tokenize: give exactly one of -p TEXT, -f FILE, --jsonl FILE\n");
        return 2;
    }
    char *rdir = NULL;
    if (resolve && cli_resolve_model(dir, &rdir)) return cli_fail("tokenize", "cannot find the model");
    if (rdir) dir = rdir;
    if (bench) { int brc = run_bench(dir, file, (int)repeat); free(rdir); return brc; }
    mx_tokenizer *t;
    if (mx_tokenizer_load(dir, &t)) { free(rdir); return cli_fail("tokenize", "cannot load the tokenizer"); }
    int rc = 0;
    if (jsonl) {
        FILE *f = strcmp(jsonl, "-") ? fopen(jsonl, "rb") : stdin;
        if (!f) { mx_tokenizer_free(t); free(rdir); fprintf(stderr, "mlxcel tokenize: %s: cannot open\n", jsonl); return 1; }
        char *line = NULL; size_t cap = 0; ssize_t n; long lineno = 0;
        while ((n = getline(&line, &cap, f)) > 0) {
            lineno++;
            while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
            if (n == 0) continue;
            json_error_t je;
            json_t *v = json_loadb(line, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            if (!v || !json_is_string(v)) {
                fprintf(stderr, "mlxcel tokenize: %s:%ld: not a JSON string\n", jsonl, lineno);
                json_decref(v); rc = 1; break;
            }
            int32_t *ids; int k;
            if (mx_tokenizer_encode(t, json_string_value(v), json_string_length(v), special, &ids, &k)) {
                json_decref(v); rc = cli_fail("tokenize", "encode failed"); break;
            }
            print_ids(ids, k, true);
            free(ids);
            json_decref(v);
        }
        free(line);
        if (f != stdin) fclose(f);
    } else {
        size_t len;
        char *text = NULL;
        if (file) {
            text = read_input(file, &len);
            if (!text) { mx_tokenizer_free(t); free(rdir); return cli_fail("tokenize", "cannot read the input file"); }
        }
        int32_t *ids; int k;
        if (mx_tokenizer_encode(t, text ? text : prompt, text ? len : strlen(prompt), special, &ids, &k)) rc = cli_fail("tokenize", "encode failed");
        else { print_ids(ids, k, json); free(ids); }
        free(text);
    }
    mx_tokenizer_free(t);
    free(rdir);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    const char *dir = NULL, *ids_s = NULL;
    bool skip = false, json = false, resolve = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { detok_usage(stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(dir = val(argc, argv, &i, "detokenize"))) return 2; resolve = true; }
        else if (!strcmp(a, "--tokenizer")) { if (!(dir = val(argc, argv, &i, "detokenize"))) return 2; resolve = false; }
        else if (!strcmp(a, "--ids")) { if (!(ids_s = val(argc, argv, &i, "detokenize"))) return 2; }
        else if (!strcmp(a, "--skip-special")) skip = true;
        else if (!strcmp(a, "--json")) json = true;
        else { fprintf(stderr, "mlxcel detokenize: unknown option '%s' (see mlxcel detokenize --help)\n", a); return 2; }
    }
    if (!dir) { fprintf(stderr, "mlxcel detokenize: -m DIR or --tokenizer DIR is required\n"); return 2; }
    if (!ids_s) { fprintf(stderr, "mlxcel detokenize: --ids is required\n"); return 2; }
    int32_t *ids; int n;
    if (!cli_parse_ids("--ids", ids_s, &ids, &n)) return 2;
    char *rdir = NULL;
    if (resolve && cli_resolve_model(dir, &rdir)) { free(ids); return cli_fail("detokenize", "cannot find the model"); }
    if (rdir) dir = rdir;
    mx_tokenizer *t;
    mx_status lst = mx_tokenizer_load(dir, &t);
    free(rdir);
    if (lst) { free(ids); return cli_fail("detokenize", "cannot load the tokenizer"); }
    int vs = mx_tokenizer_vocab_size(t);
    for (int i = 0; i < n; i++)
        if (ids[i] >= vs) {
            fprintf(stderr, "mlxcel detokenize: id %d is outside the vocabulary (size %d)\n", ids[i], vs);
            free(ids); mx_tokenizer_free(t); return 1;
        }
    char *text;
    int rc = 0;
    if (mx_tokenizer_decode(t, ids, n, skip, &text)) rc = cli_fail("detokenize", "decode failed");
    else {
        if (json) {
            json_t *s = json_stringn(text, strlen(text));
            char *d = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
            printf("%s\n", d ? d : "null");
            free(d); json_decref(s);
        } else printf("%s\n", text);
        free(text);
    }
    free(ids);
    mx_tokenizer_free(t);
    return rc;
}
