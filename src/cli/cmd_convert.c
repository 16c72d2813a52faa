/* cli/cmd_convert.c: `mlxcel convert`: flags to mx_convert (io/convert.c). Not the conversion itself. */
#include "cli/cli.h"
#include "mlxcel/store.h"

#include <stdio.h>
#include <string.h>

static void convert_usage(FILE *f) {
    fprintf(f, "usage: mlxcel convert --hf-path DIR -o OUT [-q] [--q-bits 2..8] [--q-group-size 32|64|128]\n"
               "                      [--dtype bf16|f16|f32] [--shard-bytes N]\n"
               "  Writes an mlx-lm-compatible checkpoint: MoE experts stacked into switch_mlp, with -q the\n"
               "  Linear/Embedding weights quantized with MLX's affine algorithm (default 4 bits, group 64),\n"
               "  config.json with \"quantization\", tokenizer files copied, shards over 5 GB with an index.\n");
}

int cmd_convert(int argc, char **argv) {
    mx_convert_opts o = {.bits = 4, .group_size = 64, .dtype = -1, .progress = stderr};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { convert_usage(stdout); return 0; }
        else if (!strcmp(a, "--hf-path")) { if (!v) goto missing; o.hf_path = v; i++; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--mlx-path") || !strcmp(a, "--out")) { if (!v) goto missing; o.out_dir = v; i++; }
        else if (!strcmp(a, "-q") || !strcmp(a, "--quantize")) o.quantize = true;
        else if (!strcmp(a, "--q-bits")) {
            if (!cli_parse_int(a, v, 2, 8, &n)) return 2;
            if (n == 7) { fprintf(stderr, "mlxcel convert: --q-bits: 7 is not supported (2, 3, 4, 5, 6, 8)\n"); return 2; }
            o.bits = (int)n; i++;
        } else if (!strcmp(a, "--q-group-size")) {
            if (!cli_parse_int(a, v, 32, 128, &n)) return 2;
            if (n != 32 && n != 64 && n != 128) { fprintf(stderr, "mlxcel convert: --q-group-size: %lld is not 32, 64 or 128\n", n); return 2; }
            o.group_size = (int)n; i++;
        } else if (!strcmp(a, "--dtype")) {
            if (!v) goto missing;
            if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16")) o.dtype = MX_DTYPE_BF16;
            else if (!strcmp(v, "f16") || !strcmp(v, "float16")) o.dtype = MX_DTYPE_F16;
            else if (!strcmp(v, "f32") || !strcmp(v, "float32")) o.dtype = MX_DTYPE_F32;
            else { fprintf(stderr, "mlxcel convert: --dtype: '%s' is not bf16, f16 or f32\n", v); return 2; }
            i++;
        } else if (!strcmp(a, "--shard-bytes")) {
            if (!cli_parse_int(a, v, 1, (long long)1 << 50, &n)) return 2;
            o.shard_bytes = (uint64_t)n; i++;
        } else if (!strcmp(a, "--quiet")) o.progress = NULL;
        else { fprintf(stderr, "mlxcel convert: unknown option '%s'\n", a); convert_usage(stderr); return 2; }
        continue;
    missing:
        fprintf(stderr, "mlxcel convert: %s needs a value\n", a);
        return 2;
    }
    if (!o.hf_path || !o.out_dir) { fprintf(stderr, "mlxcel convert: --hf-path and -o are required\n"); convert_usage(stderr); return 2; }
    double t0 = mx_time_s();
    if (mx_convert(&o) != MX_OK) return cli_fail("convert", NULL);
    fprintf(stderr, "mlxcel convert: wrote %s in %.1f s\n", o.out_dir, mx_time_s() - t0);
    return 0;
}
