/* cli/cmd_arch.c: `mlxcel arch`: the architectures this build runs, from the models layer's own
 * registry, with backends and quantization modes. */
#include "cli/cli.h"

#include "mlxcel/model.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_quant[] = {"f32", "f16", "bf16", "mlx-affine-2", "mlx-affine-3", "mlx-affine-4",
                                     "mlx-affine-5", "mlx-affine-6", "mlx-affine-8"};

int cmd_arch(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: mlxcel arch [--json]\n\nLists the model architectures (config.json model_type) this build runs,\nwith the backends and weight formats for each.\n");
            return 0;
        } else { fprintf(stderr, "mlxcel arch: unknown option '%s'\n", argv[i]); return 2; }
    }
    int n;
    const mx_arch_info *a = mx_model_archs(&n);
#ifdef MLXCEL_HAVE_CUDA
    const char *backends[] = {"cpu", "cuda"};
    int nb = 2;
#else
    const char *backends[] = {"cpu"};
    int nb = 1;
#endif
    int nq = (int)(sizeof g_quant / sizeof g_quant[0]);
    if (json) {
        json_t *arr = json_array();
        for (int i = 0; i < n; i++) {
            json_t *b = json_array(), *q = json_array();
            for (int k = 0; k < nb; k++) json_array_append_new(b, json_string(backends[k]));
            for (int k = 0; k < nq; k++) json_array_append_new(q, json_string(g_quant[k]));
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:o, s:o, s:[i,i,i]}", "model_type", a[i].model_type,
                "class", a[i].hf_class, "notes", a[i].notes, "backends", b, "quantization", q, "group_sizes", 32, 64, 128));
        }
        char *s = json_dumps(arr, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
        json_decref(arr);
        return 0;
    }
    printf("%-12s %-22s %-10s %s\n", "model_type", "class", "backends", "notes");
    for (int i = 0; i < n; i++) {
        char b[64] = "";
        for (int k = 0; k < nb; k++) { strcat(b, k ? "," : ""); strcat(b, backends[k]); }
        printf("%-12s %-22s %-10s %s\n", a[i].model_type, a[i].hf_class, b, a[i].notes);
    }
    printf("\nweights: f32, f16, bf16; MLX affine quantization with bits 2, 3, 4, 5, 6, 8 and group size 32, 64, 128\n");
    return 0;
}
