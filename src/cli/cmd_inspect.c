/* cli/cmd_inspect.c: `mlxcel inspect -m MODEL [-n CTX] [--batch B] [--json]`: a model's memory needs
 * (weights, KV cache, activations, headroom) against the memory available, and whether it fits.
 * The estimate itself is io/memplan.c. */
#include "cli/cli.h"
#include "mlxcel/backend_cuda.h"
#include "mlxcel/io.h"
#include "mlxcel/store.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void gb(char *out, size_t n, uint64_t b) {
    if (b >= (1ull << 30)) snprintf(out, n, "%.2f GiB", (double)b / (double)(1ull << 30));
    else snprintf(out, n, "%.1f MiB", (double)b / (double)(1ull << 20));
}

int cmd_inspect(int argc, char **argv) {
    const char *model = NULL;
    long long ctx = 0, batch = 1;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: mlxcel inspect -m MODEL [-n CTX] [--batch B] [--json]\n"
                   "  MODEL: a directory, owner/name (store, HF cache, else downloaded) or a bare mlx-community name\n");
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) goto missing; model = v; i++; }
        else if (!strcmp(a, "-n") || !strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!cli_parse_int(a, v, 1, 1ll << 24, &ctx)) return 2; i++; }
        else if (!strcmp(a, "--batch") || !strcmp(a, "-b")) { if (!cli_parse_int(a, v, 1, 65536, &batch)) return 2; i++; }
        else if (!strcmp(a, "--json")) json = true;
        else { fprintf(stderr, "mlxcel inspect: unknown option '%s'\n", a); return 2; }
        continue;
    missing:
        fprintf(stderr, "mlxcel inspect: %s needs a value\n", a);
        return 2;
    }
    if (!model) { fprintf(stderr, "mlxcel inspect: -m MODEL is required\n"); return 2; }
    char *dir = NULL;
    if (mx_model_resolve(model, true, &dir) != MX_OK) return cli_fail("inspect", NULL);
    mx_checkpoint *c = NULL;
    if (mx_ckpt_open(dir, &c) != MX_OK) { free(dir); return cli_fail("inspect", NULL); }
    mx_mem_estimate m;
    if (mx_mem_estimate_ckpt(c, ctx, batch, &m) != MX_OK) { mx_ckpt_close(c); free(dir); return cli_fail("inspect", NULL); }
    uint64_t gfree = 0, gtotal = 0;
    bool gpu = mx_backend_gpu_memory(&gfree, &gtotal);
    if (gpu) mx_mem_estimate_retarget(&m, "gpu", gfree, 2);   /* CUDA keeps K/V in bf16 */
    int bits = 0, gs = 0;
    json_t *q = json_object_get(mx_ckpt_config(c), "quantization");
    if (json_is_object(q)) { int64_t v; if (mx_json_int(q, "bits", 0, &v)) bits = (int)v; if (mx_json_int(q, "group_size", 0, &v)) gs = (int)v; }
    const char *mt = json_string_value(json_object_get(mx_ckpt_config(c), "model_type"));
    if (json) {
        json_t *o = json_pack("{ss ss* sI sI sI sI sI sI sI sb ss sI sI sI sI sI si si}",
                              "model", dir, "model_type", mt,
                              "weights_bytes", (json_int_t)m.weights_bytes, "kv_bytes_total", (json_int_t)m.kv_bytes_total,
                              "kv_bytes_per_token", (json_int_t)m.kv_bytes_per_token,
                              "activation_bytes", (json_int_t)m.activation_bytes, "headroom_bytes", (json_int_t)m.headroom_bytes,
                              "budget_bytes", (json_int_t)m.budget_bytes, "total_bytes", (json_int_t)m.total_bytes,
                              "fits", m.fits, "device", m.device, "ctx", (json_int_t)m.ctx, "batch", (json_int_t)m.batch,
                              "layers", (json_int_t)m.layers, "kv_heads", (json_int_t)m.kv_heads, "head_dim", (json_int_t)m.head_dim,
                              "bits", bits, "group_size", gs);
        json_object_set_new(o, "kv_dtype", json_string(gpu ? "bf16" : "f32"));
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (s) printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        char a[32], b[32], cc[32], d[32], e[32], f[32];
        gb(a, sizeof a, m.weights_bytes); gb(b, sizeof b, m.kv_bytes_total); gb(cc, sizeof cc, m.activation_bytes);
        gb(d, sizeof d, m.headroom_bytes); gb(e, sizeof e, m.total_bytes); gb(f, sizeof f, m.budget_bytes);
        printf("model       %s (%s%s%s)\n", dir, mt ? mt : "?", bits ? ", quantized " : "", bits ? (bits == 4 ? "4-bit" : bits == 8 ? "8-bit" : "n-bit") : "");
        printf("context     %lld tokens x batch %lld; %lld layers, %lld KV heads, head_dim %lld\n", (long long)m.ctx,
               (long long)m.batch, (long long)m.layers, (long long)m.kv_heads, (long long)m.head_dim);
        printf("weights     %12s\n", a);
        printf("kv cache    %12s  (%s, K and V)\n", b, gpu ? "bf16" : "f32");
        printf("activations %12s\n", cc);
        printf("headroom    %12s\n", d);
        printf("total       %12s\n", e);
        printf("available   %12s  (%s, %s)\n", f, m.device, gpu ? "free GPU memory" : "MemAvailable");
        printf("fits        %s\n", m.fits ? "yes" : "no");
    }
    mx_ckpt_close(c);
    free(dir);
    return 0;
}
