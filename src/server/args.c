/* server/args.c: the server's command-line flags and their LLAMA_ARG_* environment variables
 * (llama-server's names), and the lookup of the bundled demo model. It does not print: errors go
 * through mx_errorf and the CLI reports them. */
#include "mlxcel/server.h"

#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/stat.h>

void mx_server_params_default(mx_server_params *p) {
    memset(p, 0, sizeof *p);
    p->port = 8080;
    p->n_parallel = 4;
    p->n_predict = -1;
    p->slots = true;
    p->timeout_s = 600;
    p->max_queue = 64;
    p->max_body = 8u << 20;
    p->q_bits = 4;
}

static void free_keys(mx_server_params *p) {
    for (int i = 0; i < p->n_api_keys; i++) free(p->api_keys[i]);
    free(p->api_keys);
    p->api_keys = NULL; p->n_api_keys = 0;
}

void mx_server_params_free(mx_server_params *p) {
    free(p->model); free(p->alias); free(p->host); free(p->chat_template_file);
    free(p->random_config);
    free_keys(p);
    memset(p, 0, sizeof *p);
}

const char *mx_server_usage(void) {
    return
    "options (environment variable in brackets):\n"
    "  -m, --model DIR            model directory (default: the bundled demo model) [LLAMA_ARG_MODEL]\n"
    "  -a, --alias NAME           model id shown by /v1/models [LLAMA_ARG_ALIAS]\n"
    "  --host ADDR|PATH.sock      listen address, or a Unix socket path (default 127.0.0.1) [LLAMA_ARG_HOST]\n"
    "  --port N                   port (default 8080; 0: any free port) [LLAMA_ARG_PORT]\n"
    "  -c, --ctx-size N           context per sequence (default: model's, at most 4096) [LLAMA_ARG_CTX_SIZE]\n"
    "  -np, --parallel N          sequences decoded together (default 4) [LLAMA_ARG_N_PARALLEL]\n"
    "  -n, --n-predict N          default max tokens per request (-1: until context full) [LLAMA_ARG_N_PREDICT]\n"
    "  --api-key KEY              require this API key (repeatable, or comma-separated) [LLAMA_API_KEY]\n"
    "  --api-key-file FILE        read API keys from FILE, one per line [LLAMA_ARG_API_KEY_FILE]\n"
    "  --metrics                  enable GET /metrics (Prometheus) [LLAMA_ARG_ENDPOINT_METRICS]\n"
    "  --no-slots                 disable GET /slots [LLAMA_ARG_NO_ENDPOINT_SLOTS]\n"
    "  -to, --timeout N           connection read/write timeout in seconds (default 600) [LLAMA_ARG_TIMEOUT]\n"
    "  --chat-template-file FILE  Jinja chat template overriding the model's [LLAMA_ARG_CHAT_TEMPLATE_FILE]\n"
    "  -t, --threads N            CPU threads (default: all) [LLAMA_ARG_THREADS]\n"
    "  --max-queue N              requests waiting for a slot before 503 (default 64) [MLXCEL_MAX_QUEUE]\n"
    "  --max-body BYTES           request body limit before 413 (default 8388608) [MLXCEL_MAX_BODY]\n"
    "  --random-config FILE       dev: random weights shaped like this config.json (benchmarks); the\n"
    "                             tokenizer and chat template then come from -m (default: demo model)\n"
    "  --q-bits N                 dev: with --random-config, MLX affine bits (0: bf16; default 4)\n"
    "  -h, --help                 this text\n";
}

static mx_status parse_ll(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return mx_errorf(MX_ERR_INVALID_ARG, "%s needs a value", flag);
    char *end; errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s) return mx_errorf(MX_ERR_INVALID_ARG, "%s: '%s' is not an integer", flag, s);
    if (v < lo || v > hi) return mx_errorf(MX_ERR_INVALID_ARG, "%s: %lld is out of range [%lld, %lld]", flag, v, lo, hi);
    *out = v;
    return MX_OK;
}

static mx_status set_str(char **dst, const char *v) {
    free(*dst);
    *dst = mx_strdup(v);
    return *dst ? MX_OK : mx_errorf(MX_ERR_NOMEM, "out of memory");
}

static mx_status add_keys(mx_server_params *p, const char *list, char sep) {
    const char *s = list;
    while (*s) {
        const char *e = strchr(s, sep);
        size_t n = e ? (size_t)(e - s) : strlen(s);
        while (n && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
        while (n && (*s == ' ' || *s == '\t')) { s++; n--; }
        if (n) {
            char **k = realloc(p->api_keys, (size_t)(p->n_api_keys + 1) * sizeof *k);
            if (!k) return mx_errorf(MX_ERR_NOMEM, "out of memory");
            p->api_keys = k;
            k[p->n_api_keys] = malloc(n + 1);
            if (!k[p->n_api_keys]) return mx_errorf(MX_ERR_NOMEM, "out of memory");
            memcpy(k[p->n_api_keys], s, n); k[p->n_api_keys][n] = 0;
            p->n_api_keys++;
        }
        if (!e) break;
        s = e + 1;
    }
    return MX_OK;
}

static mx_status add_key_file(mx_server_params *p, const char *flag, const char *path) {
    size_t len;
    char *txt = mx_read_file(path, &len);
    if (!txt) return mx_errorf(MX_ERR_IO, "%s: cannot read '%s'", flag, path);
    int before = p->n_api_keys;
    mx_status st = add_keys(p, txt, '\n');
    free(txt);
    if (st) return st;
    if (p->n_api_keys == before) return mx_errorf(MX_ERR_INVALID_ARG, "%s: '%s' holds no keys", flag, path);
    return MX_OK;
}

static bool env_true(const char *v) {
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "on") ||
                 !strcasecmp(v, "yes") || !strcasecmp(v, "enabled"));
}

/* One option: names, environment variable, and whether it takes a value. */
enum { O_MODEL, O_ALIAS, O_HOST, O_PORT, O_CTX, O_NP, O_NPRED, O_KEY, O_KEYFILE, O_METRICS,
       O_NOSLOTS, O_SLOTS, O_TIMEOUT, O_TMPL, O_THREADS, O_QUEUE, O_BODY, O_RANDOM, O_QBITS, O_HELP };
static const struct { int id; const char *s, *l, *env; bool val; } g_opts[] = {
    {O_MODEL, "-m", "--model", "LLAMA_ARG_MODEL", true},
    {O_ALIAS, "-a", "--alias", "LLAMA_ARG_ALIAS", true},
    {O_HOST, NULL, "--host", "LLAMA_ARG_HOST", true},
    {O_PORT, NULL, "--port", "LLAMA_ARG_PORT", true},
    {O_CTX, "-c", "--ctx-size", "LLAMA_ARG_CTX_SIZE", true},
    {O_NP, "-np", "--parallel", "LLAMA_ARG_N_PARALLEL", true},
    {O_NPRED, "-n", "--n-predict", "LLAMA_ARG_N_PREDICT", true},
    {O_KEY, NULL, "--api-key", "LLAMA_API_KEY", true},
    {O_KEYFILE, NULL, "--api-key-file", "LLAMA_ARG_API_KEY_FILE", true},
    {O_METRICS, NULL, "--metrics", "LLAMA_ARG_ENDPOINT_METRICS", false},
    {O_NOSLOTS, NULL, "--no-slots", "LLAMA_ARG_NO_ENDPOINT_SLOTS", false},
    {O_SLOTS, NULL, "--slots", "LLAMA_ARG_ENDPOINT_SLOTS", false},
    {O_TIMEOUT, "-to", "--timeout", "LLAMA_ARG_TIMEOUT", true},
    {O_TMPL, NULL, "--chat-template-file", "LLAMA_ARG_CHAT_TEMPLATE_FILE", true},
    {O_THREADS, "-t", "--threads", "LLAMA_ARG_THREADS", true},
    {O_QUEUE, NULL, "--max-queue", "MLXCEL_MAX_QUEUE", true},
    {O_BODY, NULL, "--max-body", "MLXCEL_MAX_BODY", true},
    {O_RANDOM, NULL, "--random-config", NULL, true},
    {O_QBITS, NULL, "--q-bits", NULL, true},
    {O_HELP, "-h", "--help", NULL, false},
};
#define N_OPTS ((int)(sizeof g_opts / sizeof g_opts[0]))

static mx_status apply(mx_server_params *p, int id, const char *flag, const char *v, bool from_env, bool *help) {
    long long x;
    mx_status st = MX_OK;
    switch (id) {
    case O_MODEL: return set_str(&p->model, v);
    case O_ALIAS: return set_str(&p->alias, v);
    case O_HOST:
        if (!*v) return mx_errorf(MX_ERR_INVALID_ARG, "%s needs a value", flag);
        return set_str(&p->host, v);
    case O_PORT: if ((st = parse_ll(flag, v, 0, 65535, &x))) return st; p->port = (int)x; return MX_OK;
    case O_CTX: if ((st = parse_ll(flag, v, 0, 1 << 22, &x))) return st; p->n_ctx = (int)x; return MX_OK;
    case O_NP: if ((st = parse_ll(flag, v, 1, 256, &x))) return st; p->n_parallel = (int)x; return MX_OK;
    case O_NPRED: if ((st = parse_ll(flag, v, -1, 1 << 22, &x))) return st; p->n_predict = (int)x; return MX_OK;
    case O_KEY: return add_keys(p, v, ',');
    case O_KEYFILE: return add_key_file(p, flag, v);
    case O_METRICS: p->metrics = from_env ? env_true(v) : true; return MX_OK;
    case O_NOSLOTS: p->slots = from_env ? !env_true(v) : false; return MX_OK;
    case O_SLOTS: p->slots = from_env ? env_true(v) : true; return MX_OK;
    case O_TIMEOUT: if ((st = parse_ll(flag, v, 1, 86400, &x))) return st; p->timeout_s = (int)x; return MX_OK;
    case O_TMPL: return set_str(&p->chat_template_file, v);
    case O_THREADS: if ((st = parse_ll(flag, v, -1, 1024, &x))) return st; p->n_threads = x < 0 ? 0 : (int)x; return MX_OK;
    case O_QUEUE: if ((st = parse_ll(flag, v, 0, 100000, &x))) return st; p->max_queue = (int)x; return MX_OK;
    case O_BODY: if ((st = parse_ll(flag, v, 1024, 1LL << 32, &x))) return st; p->max_body = (size_t)x; return MX_OK;
    case O_RANDOM: return set_str(&p->random_config, v);
    case O_QBITS:
        if ((st = parse_ll(flag, v, 0, 8, &x))) return st;
        if (x != 0 && x != 2 && x != 3 && x != 4 && x != 5 && x != 6 && x != 8)
            return mx_errorf(MX_ERR_INVALID_ARG, "%s: %lld bits is not supported (0, 2-6, 8)", flag, x);
        p->q_bits = (int)x; return MX_OK;
    case O_HELP: *help = true; return MX_OK;
    }
    return mx_errorf(MX_ERR_INTERNAL, "unhandled option %s", flag);
}

mx_status mx_server_parse_args(int argc, char **argv, mx_server_params *p, bool *help) {
    *help = false;
    mx_status st;
    for (int i = 0; i < N_OPTS; i++) {
        if (!g_opts[i].env) continue;
        const char *v = getenv(g_opts[i].env);
        if (!v) continue;
        if (g_opts[i].id == O_KEY) { free_keys(p); }
        if ((st = apply(p, g_opts[i].id, g_opts[i].env, v, true, help))) return st;
    }
    bool keys_from_flags = false;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        const char *val = NULL;
        char name[64];
        const char *eq = !strncmp(arg, "--", 2) ? strchr(arg, '=') : NULL;
        if (eq && (size_t)(eq - arg) < sizeof name) {
            memcpy(name, arg, (size_t)(eq - arg)); name[eq - arg] = 0;
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", arg);
        }
        int k = -1;
        for (int i = 0; i < N_OPTS; i++)
            if ((g_opts[i].s && !strcmp(name, g_opts[i].s)) || !strcmp(name, g_opts[i].l)) { k = i; break; }
        if (k < 0) return mx_errorf(MX_ERR_INVALID_ARG, "unknown flag '%s' (see --help)", arg);
        if (g_opts[k].val && !val) {
            if (a + 1 >= argc) return mx_errorf(MX_ERR_INVALID_ARG, "%s needs a value", name);
            val = argv[++a];
        } else if (!g_opts[k].val && val) {
            return mx_errorf(MX_ERR_INVALID_ARG, "%s takes no value", name);
        }
        if (g_opts[k].id == O_KEY && !keys_from_flags) { free_keys(p); keys_from_flags = true; }
        if ((st = apply(p, g_opts[k].id, name, val ? val : "", false, help))) return st;
    }
    return MX_OK;
}

static bool is_model_dir(const char *d) {
    char cfg[PATH_MAX + 512];
    if ((size_t)snprintf(cfg, sizeof cfg, "%s/config.json", d) >= sizeof cfg) return false;
    struct stat st;
    return stat(cfg, &st) == 0 && S_ISREG(st.st_mode);
}

bool mx_server_find_demo_model(char *buf, size_t n) {
    static const char *rel = "models/fortune-6m-mlx-q4";
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        static const char *ups[] = {"", "/..", "/../..", "/../share/mlxcel"};
        for (size_t i = 0; i < sizeof ups / sizeof ups[0]; i++) {
            char cand[PATH_MAX + 256];
            snprintf(cand, sizeof cand, "%s%s/%s", exe, ups[i], rel);
            if (is_model_dir(cand)) {
                char real[PATH_MAX];
                snprintf(buf, n, "%s", realpath(cand, real) ? real : cand);
                return true;
            }
        }
    }
    const char *root = getenv("MLXCEL_ROOT");
    if (root && *root) {
        char cand[PATH_MAX + 256];
        snprintf(cand, sizeof cand, "%s/%s", root, rel);
        if (is_model_dir(cand)) { snprintf(buf, n, "%s", cand); return true; }
    }
    mx_errorf(MX_ERR_IO, "no -m given and the bundled demo model (%s) was not found next to the "
              "executable or under MLXCEL_ROOT; pass -m DIR", rel);
    return false;
}
