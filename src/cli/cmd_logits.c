/* cli/cmd_logits.c: `mlxcel logits`: teacher-forced logits of every position of a token id list,
 * written as an F32 tensor "logits" [n, vocab] (plus "input_ids") to a safetensors file, for
 * parity work against other implementations. Uses the backend's exact (f32) kernels. */
#include "cli/cli.h"
#include "cli/model_open.h"

#include "mlxcel/engine.h"
#include "mlxcel/io.h"
#include "mlxcel/model.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: mlxcel logits -m MODEL --ids 1,2,3 -o FILE.safetensors [-t THREADS]\n\n"
        "Writes the teacher-forced logits of every position as F32 \"logits\" [n, vocab] and the\n"
        "ids as I32 \"input_ids\" [n], computed with exact f32 kernels.\n");
}

int cmd_logits(int argc, char **argv) {
    const char *model_arg = NULL, *ids_s = NULL, *out_path = NULL;
    long long threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) { fprintf(stderr, "mlxcel logits: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); model_arg = v; }
        else if (!strcmp(a, "--ids")) { NEED(); ids_s = v; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) { NEED(); out_path = v; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { NEED(); if (!cli_parse_int(a, v, 1, 1024, &threads)) return 2; }
        else { fprintf(stderr, "mlxcel logits: unknown option '%s' (see mlxcel logits --help)\n", a); return 2; }
#undef NEED
    }
    if (!model_arg || !ids_s || !out_path) { fprintf(stderr, "mlxcel logits: -m, --ids and -o are required (see --help)\n"); return 2; }
    if (threads > 0) mx_pool_global_set_threads((int)threads);
    int rc = 1;
    char *dir = NULL;
    int32_t *ids = NULL;
    int n = 0;
    float *logits = NULL;
    mx_backend be = {0};
    mx_model *m = NULL;
    mx_st_writer *w = NULL;
    if (!cli_parse_ids("--ids", ids_s, &ids, &n)) { rc = 2; goto done; }
    if (cli_resolve_model(model_arg, &dir)) { rc = cli_fail("logits", NULL); goto done; }
    if (cli_backend_init(&be)) { rc = cli_fail("logits", "backend"); goto done; }
    if (!strcmp(be.i->name, "cpu")) mx_backend_cpu_set_precise(&be, true);
    if (mx_model_load(dir, &be, &m)) { rc = cli_fail("logits", NULL); goto done; }
    const int V = mx_model_cfg(m)->vocab_size;
    for (int i = 0; i < n; i++)
        if (ids[i] >= V) { fprintf(stderr, "mlxcel logits: token id %d is outside the vocabulary (%d)\n", ids[i], V); rc = 2; goto done; }
    if (n > mx_model_cfg(m)->max_position_embeddings) { fprintf(stderr, "mlxcel logits: %d ids exceed the model's context (%d)\n", n, mx_model_cfg(m)->max_position_embeddings); rc = 2; goto done; }
    if (mx_gen_prepare(m, n, 512) || mx_teacher_logits(m, ids, n, 512, &logits)) { rc = cli_fail("logits", NULL); goto done; }
    w = mx_st_writer_new();
    int64_t shape[2] = {n, V}, ishape[1] = {n};
    if (!w || mx_st_writer_add(w, "logits", MX_DTYPE_F32, 2, shape, logits, (size_t)n * V * sizeof(float)) ||
        mx_st_writer_add(w, "input_ids", MX_DTYPE_I32, 1, ishape, ids, (size_t)n * sizeof(int32_t)) ||
        mx_st_writer_save(w, out_path)) { rc = cli_fail("logits", out_path); goto done; }
    fprintf(stderr, "mlxcel logits: wrote %s: logits [%d, %d]\n", out_path, n, V);
    rc = 0;
done:
    mx_st_writer_free(w);
    free(logits);
    mx_model_free(m);
    if (be.i) cli_backend_free(&be);
    free(ids);
    free(dir);
    return rc;
}
