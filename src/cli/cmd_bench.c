/* cli/cmd_bench.c: `mlxcel bench`, in the spirit of llama-bench: prompt processing (ppN: one
 * forward of N tokens) and token generation (tgN: N single-token steps, optionally for B
 * sequences at once) in tokens per second, mean and deviation over repetitions; with -d D both
 * start after D tokens already in each sequence's cache (llama-bench -d; llama-batched-bench's
 * decode figures have their prompts in the cache), those D tokens not timed.
 * Takes a model directory, or a config.json with --random to time a shape without its weights.
 * Each step brings back only the argmax of each logit row (the backend's topk op, k = 1), as the
 * generation loops do; --full-logits times the old full-row copy instead. --bandwidth adds, for
 * each tg test, the weight bytes a decode step reads over its time, against the device's
 * copy rate measured in the same run (GPU; on the CPU the copy rate is not measured). --split adds,
 * for each tg test on the GPU, the time split of a step: the GPU's time in the step's work (from
 * its graph launch to its end, for replayed steps), the host's time before that launch (the walk
 * of the model's ops, during which the GPU has nothing of the step to run) and the rest of the
 * step's wall time (the launch itself, the top-1 kernel, reading it back, the loop). */
#include "cli/cli.h"
#include "cli/model_open.h"

#include "mlxcel/model.h"
#ifdef MLXCEL_HAVE_CUDA
#include "mlxcel/backend_cuda.h"
#endif

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: mlxcel bench (-m MODEL | --config CONFIG.json --random [--q-bits B --q-group-size G | --dtype D])\n"
        "                    [-p N] [-n N] [-b B] [-d D] [-c N] [-t THREADS] [-r REPS] [--json]\n\n"
        "  -m, --model MODEL      model directory\n"
        "      --config FILE      config.json of the shape to time (with --random)\n"
        "      --random           random weights built in memory (no checkpoint needed)\n"
        "      --q-bits B         random weights: MLX affine bits (2,3,4,5,6,8); default dense\n"
        "      --q-group-size G   random weights: group size (32, 64, 128; default 64)\n"
        "      --dtype D          random dense weights: bf16 (default), f16, f32\n"
        "  -p, --n-prompt N       prompt tokens for the pp test (default 512; 0 skips it)\n"
        "  -n, --n-gen N          generated tokens for the tg test (default 128; 0 skips it)\n"
        "  -b, --batch B          sequences decoded together in the tg test (default 1)\n"
        "  -d, --depth D          tokens already in each sequence's cache before each test (default 0)\n"
        "  -c, --ctx N            positions the KV cache holds for each sequence (default, and at\n"
        "                         least: D + the larger of -p and -n); a larger cache times decode\n"
        "                         as a server's pool would hold it\n"
        "  -t, --threads N        CPU threads (default: all cores)\n"
        "  -r, --repetitions N    repetitions (default 3)\n"
        "      --full-logits      copy whole logit rows to the host each step (default: top-1 only)\n"
        "      --bandwidth        tg tests: weight bytes read a step over its time, against the\n"
        "                         device copy rate and the read-only rate measured in the\n"
        "                         same run (GPU)\n"
        "      --split            tg tests: the time split of a step (GPU work, the host's walk of\n"
        "                         the ops before the step's launch, the rest), the host's time in\n"
        "                         the graph launch call, and the steps chained on the device\n"
        "                         (MLXCEL_CUDA_CHAIN, on by default) (GPU)\n"
        "      --json             print results as JSON\n");
}

typedef struct result {
    char test[32];
    double mean, sd;
    int n_tokens, batch;
    bool has_split;       /* --split on the GPU: */
    double step_s;        /* wall time a step, all repetitions */
    long steps, replayed; /* steps timed, of them replayed as graphs */
    long chained;         /* decode steps launched before the last one's tokens were read */
    double gpu_s, walk_s; /* a step: GPU work, host walk (of the replayed steps when there are any) */
    double launch_s;      /* a replayed step: the host's time inside the graph launch call */
} result;

static void stats(const double *v, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

int cmd_bench(int argc, char **argv) {
    const char *model_arg = NULL, *config_path = NULL, *dtype_s = "bf16";
    bool random = false, json = false, full_logits = false, bandwidth = false, split = false;
    long long q_bits = 0, q_group = 64, n_prompt = 512, n_gen = 128, batch = 1, threads = 0, reps = 3, depth = 0, ctx_arg = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) { fprintf(stderr, "mlxcel bench: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); model_arg = v; }
        else if (!strcmp(a, "--config")) { NEED(); config_path = v; }
        else if (!strcmp(a, "--random")) random = true;
        else if (!strcmp(a, "--q-bits")) { NEED(); if (!cli_parse_int(a, v, 2, 8, &q_bits)) return 2; }
        else if (!strcmp(a, "--q-group-size")) { NEED(); if (!cli_parse_int(a, v, 32, 128, &q_group)) return 2; }
        else if (!strcmp(a, "--dtype")) { NEED(); dtype_s = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) { NEED(); if (!cli_parse_int(a, v, 0, 65536, &n_prompt)) return 2; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) { NEED(); if (!cli_parse_int(a, v, 0, 65536, &n_gen)) return 2; }
        else if (!strcmp(a, "-d") || !strcmp(a, "--depth")) { NEED(); if (!cli_parse_int(a, v, 0, 65536, &depth)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) { NEED(); if (!cli_parse_int(a, v, 1, 1048576, &ctx_arg)) return 2; }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) { NEED(); if (!cli_parse_int(a, v, 1, 4096, &batch)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { NEED(); if (!cli_parse_int(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) { NEED(); if (!cli_parse_int(a, v, 1, 1000, &reps)) return 2; }
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--full-logits")) full_logits = true;
        else if (!strcmp(a, "--bandwidth")) bandwidth = true;
        else if (!strcmp(a, "--split")) split = true;
        else { fprintf(stderr, "mlxcel bench: unknown option '%s' (see mlxcel bench --help)\n", a); return 2; }
#undef NEED
    }
    if (!model_arg == !config_path) { fprintf(stderr, "mlxcel bench: give -m MODEL or --config CONFIG.json --random\n"); return 2; }
    if (config_path && !random) { fprintf(stderr, "mlxcel bench: --config needs --random (weights are generated)\n"); return 2; }
    if (random && !config_path) { fprintf(stderr, "mlxcel bench: --random needs --config CONFIG.json\n"); return 2; }
    if (n_prompt == 0 && n_gen == 0) { fprintf(stderr, "mlxcel bench: nothing to do (-p 0 -n 0)\n"); return 2; }
    mx_dtype dtype;
    if (!strcmp(dtype_s, "bf16")) dtype = MX_DTYPE_BF16;
    else if (!strcmp(dtype_s, "f16")) dtype = MX_DTYPE_F16;
    else if (!strcmp(dtype_s, "f32")) dtype = MX_DTYPE_F32;
    else { fprintf(stderr, "mlxcel bench: --dtype must be bf16, f16 or f32\n"); return 2; }
    if (threads > 0) mx_pool_global_set_threads((int)threads);

    int rc = 1;
    char *dir = NULL;
    json_t *cfg = NULL;
    mx_backend be = {0};
    mx_model *m = NULL;
    int32_t *tok = NULL, *pos = NULL, *seq = NULL, *tables = NULL, *rows = NULL;
    float *logits = NULL, *top_v = NULL, *top_lse = NULL;
    int32_t *top_id = NULL;
    double *samples = NULL;
    result res[2];
    memset(res, 0, sizeof res);
    int n_res = 0;
    char label[256];
    if (cli_backend_init(&be)) { rc = cli_fail("bench", "backend"); goto done; }
    if (random) {
        json_error_t err;
        cfg = json_load_file(config_path, 0, &err);
        if (!cfg) { fprintf(stderr, "mlxcel bench: %s: %s (line %d)\n", config_path, err.text, err.line); rc = 2; goto done; }
        if (mx_model_load_random(cfg, (int)q_bits, (int)q_group, dtype, 1234, &be, &m)) { rc = cli_fail("bench", NULL); goto done; }
        if (q_bits) snprintf(label, sizeof label, "%s random q%lld/g%lld", mx_model_cfg(m)->model_type, q_bits, q_group);
        else snprintf(label, sizeof label, "%s random %s", mx_model_cfg(m)->model_type, dtype_s);
    } else {
        if (cli_resolve_model(model_arg, &dir)) { rc = cli_fail("bench", NULL); goto done; }
        if (mx_model_load(dir, &be, &m)) { rc = cli_fail("bench", NULL); goto done; }
        const mx_model_config *c = mx_model_cfg(m);
        const char *base = strrchr(dir, '/');
        base = base && base[1] ? base + 1 : dir;
        if (c->q_bits) snprintf(label, sizeof label, "%s (%s q%d/g%d)", base, c->model_type, c->q_bits, c->q_group_size);
        else snprintf(label, sizeof label, "%s (%s)", base, c->model_type);
    }
    const mx_model_config *c = mx_model_cfg(m);
    const int V = c->vocab_size;
    int B = (int)batch;
    int ctx = (int)depth + (int)(n_prompt > n_gen ? n_prompt : n_gen);
    if (ctx < 1) ctx = 1;
    if (ctx_arg > ctx) ctx = (int)ctx_arg;
    if (c->max_position_embeddings > 0 && ctx > c->max_position_embeddings) {
        fprintf(stderr, "mlxcel bench: %s = %d is past the model's %d positions\n", ctx_arg >= ctx ? "--ctx" : "depth + tokens", ctx,
                c->max_position_embeddings);
        rc = 2;
        goto done;
    }
    const int bs = 16;
    int blocks_per_seq = (ctx + bs - 1) / bs;
    /* (a forward's most tokens: the prompt test's, the batch's, and -d's fill in chunks of up to 512) */
    int max_tokens = (int)(n_prompt > B ? n_prompt : B);
    const long long fill = depth < 512 ? depth : 512;
    if (fill > max_tokens) max_tokens = (int)fill;
    if (max_tokens > 2048) max_tokens = 2048;
    if (mx_model_prepare(m, blocks_per_seq * B, bs, max_tokens)) { rc = cli_fail("bench", NULL); goto done; }
    tok = malloc((size_t)max_tokens * sizeof *tok);
    pos = malloc((size_t)max_tokens * sizeof *pos);
    seq = malloc((size_t)max_tokens * sizeof *seq);
    rows = malloc((size_t)max_tokens * sizeof *rows);
    tables = malloc((size_t)B * blocks_per_seq * sizeof *tables);
    logits = full_logits ? malloc((size_t)(B > 1 ? B : 1) * V * sizeof *logits) : NULL;
    top_v = malloc((size_t)B * sizeof *top_v);
    top_id = malloc((size_t)B * sizeof *top_id);
    top_lse = malloc((size_t)B * sizeof *top_lse);
    samples = malloc((size_t)reps * sizeof *samples);
    if (!tok || !pos || !seq || !rows || !tables || (full_logits && !logits) || !top_v || !top_id || !top_lse || !samples) { fprintf(stderr, "mlxcel bench: out of memory\n"); goto done; }
    for (int i = 0; i < B * blocks_per_seq; i++) tables[i] = i;
    uint64_t rng = 42;
#define RAND_TOK() ((int32_t)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % V)
#define FORWARD(b) (full_logits ? mx_model_forward(m, &(b), logits) : mx_model_forward_topk(m, &(b), 1, top_v, top_id, top_lse))
    /* warm-up: one prefill of the pp test's chunk size (16 tokens without a prompt test, but no
     * more than a forward's most tokens: a single token for `-p 0` at batch 1 without -d), so that
     * first-use costs (library kernels loaded for a new shape) stay out of the timings */
    for (int w = 0; w < 1; w++) {
        int k = n_prompt > 16 ? (int)n_prompt : 16;
        if (k > max_tokens) k = max_tokens;
        for (int i = 0; i < k; i++) { tok[i] = RAND_TOK(); pos[i] = i; seq[i] = 0; }
        rows[0] = k - 1;
        mx_batch b = {k, tok, pos, seq, B, blocks_per_seq, tables, 1, rows, 0};
        if (FORWARD(b)) { rc = cli_fail("bench", NULL); goto done; }
    }
    /* -d: the first `depth` positions of sequences [0, ns) filled by prompt forwards (not timed) */
#define FILL_DEPTH(ns) do { \
        for (int s_ = 0; s_ < (ns) && depth > 0; s_++) \
            for (int off = 0; off < depth; off += max_tokens) { \
                int k = (int)(depth - off < max_tokens ? depth - off : max_tokens); \
                for (int i = 0; i < k; i++) { tok[i] = RAND_TOK(); pos[i] = off + i; seq[i] = s_; } \
                rows[0] = k - 1; \
                mx_batch fb = {k, tok, pos, seq, B, blocks_per_seq, tables, 1, rows, 0}; \
                if (FORWARD(fb)) { rc = cli_fail("bench", NULL); goto done; } \
            } } while (0)
    char at[32] = "";
    if (depth > 0) snprintf(at, sizeof at, " @ d%lld", depth);
    if (ctx_arg > 0) snprintf(at + strlen(at), sizeof at - strlen(at), " c%d", ctx);
    if (n_prompt > 0) {
        FILL_DEPTH(1);
        for (int r = 0; r < reps; r++) {
            double t0 = mx_time_s();
            for (int off = 0; off < n_prompt; off += max_tokens) {
                int k = (int)(n_prompt - off < max_tokens ? n_prompt - off : max_tokens);
                for (int i = 0; i < k; i++) { tok[i] = RAND_TOK(); pos[i] = (int)depth + off + i; seq[i] = 0; }
                rows[0] = k - 1;
                mx_batch b = {k, tok, pos, seq, B, blocks_per_seq, tables, off + k == n_prompt ? 1 : 0, rows, 0};
                if (FORWARD(b)) { rc = cli_fail("bench", NULL); goto done; }
            }
            samples[r] = (double)n_prompt / (mx_time_s() - t0);
        }
        snprintf(res[n_res].test, sizeof res[n_res].test, "pp%lld%s", n_prompt, at);
        res[n_res].n_tokens = (int)n_prompt;
        res[n_res].batch = 0;   /* not a decode test */
        stats(samples, (int)reps, &res[n_res].mean, &res[n_res].sd);
        n_res++;
    }
    if (n_gen > 0) {
        FILL_DEPTH(B);
#ifdef MLXCEL_HAVE_CUDA
        const bool timing = split && !strcmp(be.i->name, "cuda");
        if (timing && mx_backend_cuda_step_timing(&be, true)) { rc = cli_fail("bench", NULL); goto done; }
#endif
        double tg_wall = 0;
        const long chained0 = mx_model_greedy_chained(m);
        for (int r = 0; r < reps; r++) {
            for (int s = 0; s < B; s++) tok[s] = RAND_TOK();
            double t0 = mx_time_s();
            /* greedy as `mlxcel generate` runs it: where the backend chains steps on the device,
             * each step is launched before the last one's tokens are read (mx_model_greedy_launch) */
            bool chain = !full_logits;
            for (int step = 0; step < n_gen; step++) {
                for (int s = 0; s < B; s++) { pos[s] = (int)depth + step; seq[s] = s; rows[s] = s; }
                mx_batch b = {B, tok, pos, seq, B, blocks_per_seq, tables, B, rows, B};
                if (chain && step == 0) {
                    mx_status st = mx_model_greedy_launch(m, &b, false);
                    if (st == MX_ERR_UNSUPPORTED) { mx_clear_error(); chain = false; }
                    else if (st) { rc = cli_fail("bench", NULL); goto done; }
                }
                if (chain) {   /* the next step, fed on the device; then this one's tokens */
                    if (step + 1 < n_gen) {
                        for (int s = 0; s < B; s++) pos[s] = (int)depth + step + 1;
                        if (mx_model_greedy_launch(m, &b, true)) { rc = cli_fail("bench", NULL); goto done; }
                    }
                    if (mx_model_greedy_wait(m, top_v, tok, top_lse)) { rc = cli_fail("bench", NULL); goto done; }
                    continue;
                }
                if (FORWARD(b)) { rc = cli_fail("bench", NULL); goto done; }
                for (int s = 0; s < B; s++) {   /* greedy next token */
                    if (!full_logits) { tok[s] = top_id[s]; continue; }
                    const float *l = logits + (size_t)s * V;
                    int best = 0;
                    for (int j = 1; j < V; j++) if (l[j] > l[best]) best = j;
                    tok[s] = best;
                }
            }
            const double dt = mx_time_s() - t0;
            tg_wall += dt;
            samples[r] = (double)n_gen * B / dt;
        }
#ifdef MLXCEL_HAVE_CUDA
        if (timing) {
            mx_cuda_step_split sp;
            mx_backend_cuda_step_split_get(&be, &sp);
            mx_backend_cuda_step_timing(&be, false);
            result *q = &res[n_res];
            q->has_split = sp.steps > 0;
            q->step_s = tg_wall / ((double)reps * (double)n_gen);
            q->steps = sp.steps; q->replayed = sp.graph_steps;
            q->chained = mx_model_greedy_chained(m) - chained0;
            if (sp.graph_steps > 0) {
                q->gpu_s = sp.graph_gpu_s / sp.graph_steps; q->walk_s = sp.graph_walk_s / sp.graph_steps;
                q->launch_s = sp.graph_launch_s / sp.graph_steps;
            }
            else if (sp.steps > 0) { q->gpu_s = sp.gpu_s / sp.steps; q->walk_s = sp.walk_s / sp.steps; }
        }
#else
        (void)tg_wall; (void)chained0;
#endif
        if (B > 1) snprintf(res[n_res].test, sizeof res[n_res].test, "tg%lld x%d%s", n_gen, B, at);
        else snprintf(res[n_res].test, sizeof res[n_res].test, "tg%lld%s", n_gen, at);
        res[n_res].n_tokens = (int)n_gen * B;
        res[n_res].batch = B;
        stats(samples, (int)reps, &res[n_res].mean, &res[n_res].sd);
        n_res++;
    }
    double mib = (double)mx_model_weight_bytes(m) / (1024.0 * 1024.0);
    int nthreads = mx_pool_size(mx_pool_global());
    /* --bandwidth: a decode step reads the weights once for its B sequences */
    const double step_gb = (double)mx_model_weight_bytes(m) / 1e9;
    double copy_gbs = 0, read_gbs = 0;   /* 0: not measured */
#ifdef MLXCEL_HAVE_CUDA
    if (bandwidth && !strcmp(be.i->name, "cuda")) {
        copy_gbs = mx_backend_cuda_bench_copy(&be, (size_t)1 << 30);
        /* the read-only rate, the better of loads and bulk copies: a step's weights are only read */
        const double r0 = mx_backend_cuda_bench_read(&be, (size_t)1 << 30, 0), r1 = mx_backend_cuda_bench_read(&be, (size_t)1 << 30, 1);
        read_gbs = r0 > r1 ? r0 : r1;
    }
#endif
    if (json) {
        json_t *arr = json_array();
        for (int i = 0; i < n_res; i++) {
            json_t *r = json_pack("{s:s, s:f, s:f, s:i}", "test", res[i].test, "tps", res[i].mean, "tps_sd", res[i].sd, "tokens", res[i].n_tokens);
            if (bandwidth && res[i].batch > 0) {
                const double gbs = step_gb * res[i].mean / res[i].batch;
                json_object_set_new(r, "weight_gb_per_step", json_real(step_gb));
                json_object_set_new(r, "weight_gbps", json_real(gbs));
                if (copy_gbs > 0) {
                    json_object_set_new(r, "copy_gbps", json_real(copy_gbs));
                    json_object_set_new(r, "copy_fraction", json_real(gbs / copy_gbs));
                }
                if (read_gbs > 0) {
                    json_object_set_new(r, "read_gbps", json_real(read_gbs));
                    json_object_set_new(r, "read_fraction", json_real(gbs / read_gbs));
                }
            }
            if (res[i].has_split) {
                json_object_set_new(r, "step_us", json_real(1e6 * res[i].step_s));
                json_object_set_new(r, "step_gpu_us", json_real(1e6 * res[i].gpu_s));
                json_object_set_new(r, "step_walk_us", json_real(1e6 * res[i].walk_s));
                json_object_set_new(r, "step_launch_us", json_real(1e6 * res[i].launch_s));
                json_object_set_new(r, "steps_timed", json_integer(res[i].steps));
                json_object_set_new(r, "steps_replayed", json_integer(res[i].replayed));
                json_object_set_new(r, "steps_chained", json_integer(res[i].chained));
            }
            json_array_append_new(arr, r);
        }
        json_t *o = json_pack("{s:s, s:f, s:s, s:i, s:i, s:i, s:i, s:i, s:o}", "model", label, "size_mib", mib,
                              "backend", be.i->name, "threads", nthreads, "batch", B, "depth", (int)depth, "ctx", ctx,
                              "repetitions", (int)reps, "results", arr);
        char *s = json_dumps(o, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        printf("| %-40s | %10s | %7s | %7s | %12s | %18s |\n", "model", "size", "backend", "threads", "test", "t/s");
        printf("| %-40s | %10s | %7s | %7s | %12s | %18s |\n", "----------------------------------------", "---------:", "------", "------:", "-----------:", "-----------------:");
        for (int i = 0; i < n_res; i++)
            printf("| %-40s | %6.1f MiB | %7s | %7d | %12s | %10.2f ± %5.2f |\n", label, mib, be.i->name, nthreads, res[i].test, res[i].mean, res[i].sd);
        for (int i = 0; bandwidth && i < n_res; i++) {
            if (res[i].batch <= 0) continue;
            const double gbs = step_gb * res[i].mean / res[i].batch;
            printf("bandwidth %s: %.3f GB of weights a step x %.2f steps/s = %.0f GB/s", res[i].test, step_gb,
                   res[i].mean / res[i].batch, gbs);
            if (copy_gbs > 0) {
                printf(" = %.0f%% of the device copy rate (%.0f GB/s, read + write)", 100.0 * gbs / copy_gbs, copy_gbs);
                if (read_gbs > 0) printf(", %.0f%% of the read-only rate (%.0f GB/s)", 100.0 * gbs / read_gbs, read_gbs);
                printf("\n");
            }
            else printf(" (copy rate not measured on this backend)\n");
        }
        for (int i = 0; split && i < n_res; i++) {
            if (res[i].batch <= 0) continue;
            const result *q = &res[i];
            if (!q->has_split) { printf("split %s: not measured (the step split is measured on the GPU backend)\n", q->test); continue; }
            const double us = 1e6, rest = q->step_s - q->gpu_s - q->walk_s;
            if (q->replayed > 0)
                printf("split %s: %.1f us a step = GPU %.1f us (the graph, from its launch to its end) + host %.1f us before "
                       "the launch (the walk of the ops) + %.1f us else (launch, top-1, read back, loop); %ld of %ld timed steps replayed, "
                       "%ld chained on the device; %.1f us a step in the graph launch call\n",
                       q->test, us * q->step_s, us * q->gpu_s, us * q->walk_s, us * rest, q->replayed, q->steps, q->chained,
                       us * q->launch_s);
            else
                printf("split %s: %.1f us a step, op by op: GPU %.1f us from the step's first op to its last (with the waits "
                       "for the host's launches), host %.1f us launching them; %ld steps timed\n",
                       q->test, us * q->step_s, us * q->gpu_s, us * q->walk_s, q->steps);
        }
    }
    rc = 0;
done:
    free(tok); free(pos); free(seq); free(rows); free(tables); free(logits); free(samples);
    free(top_v); free(top_id); free(top_lse);
    mx_model_free(m);
    if (be.i) cli_backend_free(&be);
    json_decref(cfg);
    free(dir);
    return rc;
}
