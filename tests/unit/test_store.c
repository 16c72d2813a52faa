/* test_store.c: repository ids, store paths, the HF cache lookup, the -m resolver (no network:
 * offline and store/cache hits only), store listing and removal, and MLX affine quantization
 * (hand-checked groups, every bit width's packing, dequantization error bounds). */
#include "mlxcel/io.h"
#include "mlxcel/store.h"
#include "io/internal.h"
#include "test.h"

#include <ftw.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[256];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static void mkdir_p(const char *path) {
    char b[1024];
    snprintf(b, sizeof b, "%s", path);
    for (char *s = b + 1; *s; s++) if (*s == '/') { *s = 0; mkdir(b, 0755); *s = '/'; }
    mkdir(b, 0755);
}

static void touch(const char *dir, const char *name, const char *text) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) { fputs(text, f); fclose(f); }
}

static void t_repo_parse(void) {
    char *o, *n;
    TCHECK(mx_repo_parse("Qwen/Qwen3-0.6B", &o, &n) == MX_OK && !strcmp(o, "Qwen") && !strcmp(n, "Qwen3-0.6B"), "owner/name");
    free(o); free(n);
    TCHECK(mx_repo_parse("Llama-3.2-1B-Instruct-4bit", &o, &n) == MX_OK && !strcmp(o, "mlx-community"), "bare name");
    free(o); free(n);
    const char *bad[] = {"", "../x", "a/../b", "a/..", "/abs/path", "a/b/c", "a b/c", "a/", "/a", ".hidden/x", "a/-x",
                         "a/b\n", "a\\b/c", "a/b?c"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mx_status st = mx_repo_parse(bad[i], &o, &n);
        TCHECK(st == MX_ERR_INVALID_ARG && o == NULL && n == NULL, "'%s' accepted", bad[i]);
    }
    TCHECK(mx_repo_parse("../x", NULL, NULL) && strstr(mx_last_error(), ".."), "message names ..: %s", mx_last_error());
}

static void t_store_paths(void) {
    char root[512], *p = NULL;
    snprintf(root, sizeof root, "%s/cache", g_tmp);
    setenv("MLXCEL_CACHE_DIR", root, 1);
    TCHECK(mx_store_path(NULL, "org/model", &p) == MX_OK, "path");
    char want[600];
    snprintf(want, sizeof want, "%s/models/org/model", root);
    TCHECK(p && !strcmp(p, want), "got %s", p ? p : "(null)");
    free(p);
    TCHECK(mx_store_path("/x/y", "tiny", &p) == MX_OK && !strcmp(p, "/x/y/mlx-community/tiny"), "models_dir override");
    free(p);
    TCHECK(mx_store_path(NULL, "../../etc", &p) == MX_ERR_INVALID_ARG && p == NULL, "escape rejected");
    unsetenv("MLXCEL_CACHE_DIR");
    setenv("HOME", "/home/someone", 1);
    TCHECK(mx_store_root(&p) == MX_OK && !strcmp(p, "/home/someone/.cache/mlxcel/models"), "HOME default: %s", p);
    free(p);
    setenv("MLXCEL_CACHE_DIR", root, 1);
}

static void t_resolve(void) {
    char d[1024], *out = NULL;
    /* an existing directory is used as is */
    snprintf(d, sizeof d, "%s/plain", g_tmp);
    mkdir_p(d);
    TCHECK(mx_model_resolve(d, false, &out) == MX_OK && out && !strcmp(out, d), "dir");
    free(out); out = NULL;
    /* a store hit */
    snprintf(d, sizeof d, "%s/cache/models/org/stored", g_tmp);
    mkdir_p(d);
    touch(d, "config.json", "{}");
    TCHECK(mx_model_resolve("org/stored", false, &out) == MX_OK && out && !strcmp(out, d), "store: %s", out ? out : mx_last_error());
    free(out); out = NULL;
    /* the HF cache, through refs/main; the store wins over it */
    char hub[512];
    snprintf(hub, sizeof hub, "%s/hf", g_tmp);
    setenv("HF_HUB_CACHE", hub, 1);
    snprintf(d, sizeof d, "%s/models--org--cached/snapshots/deadbeef", hub);
    mkdir_p(d);
    touch(d, "config.json", "{}");
    snprintf(d, sizeof d, "%s/models--org--cached/snapshots/0ld", hub);
    mkdir_p(d);
    touch(d, "config.json", "{}");
    snprintf(d, sizeof d, "%s/models--org--cached/refs", hub);
    mkdir_p(d);
    touch(d, "main", "deadbeef\n");
    TCHECK(mx_model_resolve("org/cached", false, &out) == MX_OK && out && strstr(out, "snapshots/deadbeef"), "hf cache: %s", out ? out : mx_last_error());
    free(out); out = NULL;
    /* HF_HOME/hub is used when HF_HUB_CACHE is unset */
    unsetenv("HF_HUB_CACHE");
    char home[512];
    snprintf(home, sizeof home, "%s/hfhome", g_tmp);
    setenv("HF_HOME", home, 1);
    snprintf(d, sizeof d, "%s/hub/models--a--b/snapshots/x1", home);
    mkdir_p(d);
    touch(d, "config.json", "{}");
    TCHECK(mx_model_resolve("a/b", false, &out) == MX_OK && out && strstr(out, "snapshots/x1"), "HF_HOME: %s", out ? out : mx_last_error());
    free(out); out = NULL;
    setenv("HF_HUB_CACHE", hub, 1);
    /* not found, downloads off or offline: a clear error, no network */
    TCHECK(mx_model_resolve("org/absent", false, &out) == MX_ERR_IO && out == NULL && strstr(mx_last_error(), "mlxcel download org/absent"), "absent: %s", mx_last_error());
    setenv("HF_HUB_OFFLINE", "1", 1);
    TCHECK(mx_model_resolve("org/absent", true, &out) == MX_ERR_IO && strstr(mx_last_error(), "HF_HUB_OFFLINE"), "offline: %s", mx_last_error());
    unsetenv("HF_HUB_OFFLINE");
    TCHECK(mx_model_resolve("org/../evil", true, &out) == MX_ERR_INVALID_ARG && strstr(mx_last_error(), ".."), "dotdot: %s", mx_last_error());
    TCHECK(mx_model_resolve("../evil", true, &out) == MX_ERR_IO && strstr(mx_last_error(), "no such model directory"), "dotdot path: %s", mx_last_error());
    TCHECK(mx_model_resolve("/no/such/dir", true, &out) == MX_ERR_IO && strstr(mx_last_error(), "no such model directory"), "abs: %s", mx_last_error());
    TCHECK(mx_model_resolve("", true, &out) == MX_ERR_INVALID_ARG, "empty");
}

static void t_list_remove(void) {
    char models[600], d[700];
    snprintf(models, sizeof models, "%s/lr", g_tmp);
    snprintf(d, sizeof d, "%s/o1/m1", models); mkdir_p(d); touch(d, "config.json", "{\"a\":1}");
    snprintf(d, sizeof d, "%s/o1/m2/sub", models); mkdir_p(d); touch(d, "x.json", "12345");
    snprintf(d, sizeof d, "%s/.partial/o1--m3", models); mkdir_p(d); touch(d, "y.incomplete", "zz");
    mx_store_entry *e = NULL;
    int n = 0;
    { mx_status _rs = mx_store_list(models, &e, &n); TCHECK(_rs == MX_OK, "list: %s", mx_last_error()); if (_rs) return; }
    TCHECK(n == 2, "n %d", n);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += e[i].bytes;
    TCHECK(total == 7 + 5, "bytes %llu", (unsigned long long)total);
    mx_store_list_free(e, n);
    TCHECK(mx_store_remove(models, "o1/m1") == MX_OK, "remove: %s", mx_last_error());
    snprintf(d, sizeof d, "%s/o1/m1", models);
    TCHECK(access(d, F_OK) != 0, "still there");
    TCHECK(mx_store_remove(models, "o1/m1") == MX_ERR_IO, "twice");
    TCHECK(mx_store_remove(models, "o1/../o1/m2") == MX_ERR_INVALID_ARG, "dotdot");
    snprintf(d, sizeof d, "%s/o1/m2/sub/x.json", models);
    TCHECK(access(d, F_OK) == 0, "other model untouched");
    TCHECK(mx_store_list(g_tmp, &e, &n) == MX_OK, "list elsewhere");
    mx_store_list_free(e, n);
    char none[700];
    snprintf(none, sizeof none, "%s/does-not-exist", g_tmp);
    TCHECK(mx_store_list(none, &e, &n) == MX_OK && n == 0, "missing store is empty");
}

static float bf16r(float x) { return mx_bf16_to_f32(mx_f32_to_bf16(x)); }

static void t_quantize_known(void) {
    /* one group of 32: values 0..31 scaled; 4 bits: n_bins 15 */
    float w[32];
    for (int i = 0; i < 32; i++) w[i] = (float)i * 0.5f - 1.0f; /* -1 .. 14.5 */
    uint32_t q[8];
    float s, b;
    { mx_status _rs = mx_quantize_affine(w, 1, 32, 4, 32, q, &s, &b); TCHECK(_rs == MX_OK, "quantize"); if (_rs) return; }
    /* |max| > |min|: edge is max (14.5), scale negative: -(15.5/15); q0 = rint(14.5 / scale) = -14 */
    float sc = -(15.5f / 15.0f);
    float q0 = rintf(14.5f / sc);
    TCHECK(q0 == -14.0f, "q0 %g", q0);
    TCHECK(s == 14.5f / q0 && b == 14.5f, "scale %g bias %g", s, b);
    /* the first value packs in the low 4 bits */
    uint32_t v0 = q[0] & 15u;
    float want0 = fminf(fmaxf(rintf((w[0] - b) / s), 0.f), 15.f);
    TCHECK(v0 == (uint32_t)want0, "v0 %u want %g", v0, want0);
    /* all-zero group: scale is eps-signed, bias 0, everything 0 */
    float z[32] = {0};
    { mx_status _rs = mx_quantize_affine(z, 1, 32, 8, 32, q, &s, &b); TCHECK(_rs == MX_OK, "zeros"); if (_rs) return; }
    TCHECK(b == 0.0f && fabsf(s) == 1e-7f, "zero group scale %g bias %g", s, b);
    TCHECK(mx_quantize_affine(w, 1, 32, 7, 32, q, &s, &b) == MX_ERR_UNSUPPORTED, "7 bits");
    TCHECK(mx_quantize_affine(w, 1, 32, 4, 48, q, &s, &b) == MX_ERR_UNSUPPORTED, "group 48");
    TCHECK(mx_quantize_affine(w, 1, 31, 4, 32, q, &s, &b) == MX_ERR_INVALID_ARG, "31 columns");
}

/* Every bit width: unpack the bitstream and check the dequantized error is within half a step. */
static void t_quantize_bits(void) {
    const int bits_list[] = {2, 3, 4, 5, 6, 8};
    const int64_t rows = 3, cols = 128;
    float w[3 * 128];
    uint32_t seed = 12345;
    for (int i = 0; i < rows * cols; i++) {
        seed = seed * 1664525u + 1013904223u;
        w[i] = bf16r(((float)(seed >> 8) / 16777216.0f - 0.3f) * 2.0f);
    }
    for (size_t k = 0; k < sizeof bits_list / sizeof *bits_list; k++) {
        int bits = bits_list[k];
        for (int gs = 32; gs <= 128; gs *= 2) {
            uint32_t packed[3 * 128];
            float sc[3 * 4], bi[3 * 4];
            { mx_status _rs = mx_quantize_affine(w, rows, cols, bits, gs, packed, sc, bi); TCHECK(_rs == MX_OK, "bits %d", bits); if (_rs) return; }
            int64_t words = cols * bits / 32;
            float maxerr = 0;
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t j = 0; j < cols; j++) {
                    uint64_t bit = (uint64_t)j * (uint64_t)bits;
                    const uint32_t *rw = packed + r * words;
                    uint64_t two = rw[bit / 32] | ((bit / 32 + 1 < (uint64_t)words) ? (uint64_t)rw[bit / 32 + 1] << 32 : 0);
                    uint32_t qv = (uint32_t)(two >> (bit % 32)) & ((1u << bits) - 1u);
                    int64_t g = r * (cols / gs) + j / gs;
                    float deq = sc[g] * (float)qv + bi[g];
                    float err = fabsf(deq - w[r * cols + j]) / fabsf(sc[g]);
                    if (err > maxerr) maxerr = err;
                }
            }
            /* the far end of a group can be up to one step off: MLX makes the larger-magnitude edge
             * exact by adjusting the scale */
            TCHECK(maxerr <= 1.0001f, "bits %d gs %d: error %g steps", bits, gs, maxerr);
        }
    }
}

static void t_sha256(void) {
    char hex[65];
    mx_sha256 s;
    mx_sha256_init(&s);
    mx_sha256_hex(&s, hex);
    TCHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "empty: %s", hex);
    mx_sha256_init(&s);
    mx_sha256_update(&s, "abc", 3);
    mx_sha256_hex(&s, hex);
    TCHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "abc: %s", hex);
    /* a million 'a' fed in uneven pieces */
    static char a[1000];
    memset(a, 'a', sizeof a);
    mx_sha256_init(&s);
    for (int i = 0, k = 1; i < 1000000; i += k, k = k % 997 + 1)
        mx_sha256_update(&s, a, (size_t)(i + k > 1000000 ? 1000000 - i : k));
    mx_sha256_hex(&s, hex);
    TCHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "million a: %s", hex);
}

static void t_hub_listing(void) {
    const char *ok = "{\"siblings\":[{\"rfilename\":\"config.json\",\"size\":12},{\"rfilename\":\"sub/a.safetensors\","
                     "\"lfs\":{\"size\":99,\"sha256\":\"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"}},"
                     "{\"rfilename\":\"neg\",\"size\":-4},{\"nope\":1}]}";
    mx_hub_file *f = NULL;
    int n = 0;
    { mx_status _rs = mx_hub_parse_listing(ok, strlen(ok), "o/r", &f, &n); TCHECK(_rs == MX_OK, "parse: %s", mx_last_error()); if (_rs) return; }
    TCHECK(n == 3, "n %d", n);
    TCHECK(!strcmp(f[0].name, "config.json") && f[0].size == 12 && !f[0].sha[0], "first");
    TCHECK(!strcmp(f[1].name, "sub/a.safetensors") && f[1].size == 99 && f[1].sha[0] == 'b', "lfs size and sha");
    TCHECK(f[2].size == -1, "negative size is unknown");
    mx_hub_files_free(f, n);
    const char *bad[] = {"../x", "a/../b", "/etc/passwd", "a/", "a//b", "./a", "a\\b", "..", "a/.."};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"siblings\":[{\"rfilename\":\"%s\"}]}", bad[i]);
        TCHECK(mx_hub_parse_listing(body, strlen(body), "o/r", &f, &n) == MX_ERR_FORMAT && strstr(mx_last_error(), "unsafe"), "'%s' accepted", bad[i]);
    }
    TCHECK(mx_hub_parse_listing("{}", 2, "o/r", &f, &n) == MX_ERR_FORMAT && strstr(mx_last_error(), "siblings"), "no siblings");
    TCHECK(mx_hub_parse_listing("<html>", 6, "o/r", &f, &n) == MX_ERR_FORMAT, "not json");
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/mlxcel-test-store-XXXXXX");
    if (!mkdtemp(g_tmp)) { printf("FAIL mkdtemp\n"); return 1; }
    unsetenv("HF_HUB_OFFLINE");
    unsetenv("HF_HOME");
    RUN(t_repo_parse);
    RUN(t_store_paths);
    RUN(t_resolve);
    RUN(t_list_remove);
    RUN(t_quantize_known);
    RUN(t_quantize_bits);
    RUN(t_sha256);
    RUN(t_hub_listing);
    nftw(g_tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    TEST_EXIT();
}
