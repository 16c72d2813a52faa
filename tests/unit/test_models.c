/* test_models.c: golden parity of every supported fixture against Hugging Face transformers:
 * teacher-forced logits within 1e-4 of the golden relative to each row's largest |logit|, and
 * greedy continuations equal to the goldens (fixtures: greedy_ids, text_greedy_ids; the demo
 * model fortune-6m and its q4/q8 versions: prompt{0,1,2}_greedy_ids and logits). */
#include "mlxcel/backend_cuda.h"
#include "mlxcel/engine.h"
#include "mlxcel/io.h"
#include "mlxcel/model.h"
#include "test.h"

#include <math.h>

static mx_backend g_be;
static mx_backend g_cpu;     /* exact CPU reference for near-tie checks when g_be is the GPU */
static mx_backend g_gpu_f32; /* on the GPU: a second instance with f32 activations (MLXCEL_PRECISE=1) */
static bool g_gpu;
static double g_tol = 1e-4;
#define GPU_TOL 4e-2         /* int8 (per 32 values, as llama.cpp's q8_1) or bf16 activations and a
                              * bf16 KV cache on the GPU: the demo's q4 model reaches 0.030 */
static const char *g_dir;

static const mx_st_tensor *need(mx_safetensors *g, const char *name) {
    const mx_st_tensor *t = mx_st_find(g, name);
    return t;
}

/* max over rows of max|a-b| / max|golden| */
static double rel_err(const float *a, const float *gold, int rows, int V) {
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        double mx = 0, d = 0;
        for (int j = 0; j < V; j++) {
            double g = gold[(size_t)r * V + j];
            if (fabs(g) > mx) mx = fabs(g);
            double e = fabs(a[(size_t)r * V + j] - g);
            if (e > d) d = e;
        }
        if (mx > 0 && d / mx > worst) worst = d / mx;
    }
    return worst;
}

/* On the GPU: is the reference's step `i` (prompt + golden[0..i)) a near-tie, i.e. the margin
 * between its two best logits (exact CPU math) within GPU_TOL of the row's largest |logit|? */
static bool near_tie(const mx_st_tensor *prompt, const int32_t *gold, int i) {
    int np = (int)prompt->shape[0], n = np + i;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    mx_model *m = NULL;
    float *l = NULL;
    bool tie = false;
    if (!ids) return false;
    memcpy(ids, prompt->data, (size_t)np * sizeof *ids);
    memcpy(ids + np, gold, (size_t)i * sizeof *ids);
    mx_backend_cpu_set_precise(&g_cpu, true);
    if (mx_model_load(g_dir, &g_cpu, &m) == MX_OK && mx_gen_prepare(m, 128, 0) == MX_OK &&
        mx_teacher_logits(m, ids, n, 0, &l) == MX_OK) {
        int V = mx_model_cfg(m)->vocab_size;
        const float *row = l + (size_t)(n - 1) * V;
        float a = -1e30f, b = -1e30f, mx = 0;
        for (int j = 0; j < V; j++) {
            if (fabsf(row[j]) > mx) mx = fabsf(row[j]);
            if (row[j] > a) { b = a; a = row[j]; } else if (row[j] > b) b = row[j];
        }
        tie = (a - b) <= GPU_TOL * mx;
        fprintf(stderr, "near-tie check at step %d: margin %.4g, row max %.4g -> %s\n", i, a - b, mx, tie ? "allowed" : "not a tie");
    }
    free(l);
    mx_model_free(m);
    free(ids);
    return tie;
}

static void check_greedy(mx_model *m, const mx_st_tensor *prompt, const mx_st_tensor *gold, const char *what) {
    TREQUIRE(prompt && gold && prompt->dtype == MX_DTYPE_I32 && gold->dtype == MX_DTYPE_I32, "%s: golden tensors", what);
    mx_gen_opts o = {0};
    o.n_predict = (int)gold->shape[0];
    o.ignore_eos = true;
    mx_sampling_default(&o.sampling);
    o.sampling.temperature = 0;
    int32_t *out = NULL;
    int n_out = 0;
    mx_gen_stats gs;
    mx_status st = mx_generate(m, prompt->data, (int)prompt->shape[0], &o, NULL, NULL, &out, &n_out, &gs);
    TREQUIRE(st == MX_OK, "%s: generate: %s", what, mx_last_error());
    TCHECK(n_out == (int)gold->shape[0], "%s: %d tokens, expected %lld", what, n_out, (long long)gold->shape[0]);
    const int32_t *g = gold->data;
    for (int i = 0; i < n_out && i < (int)gold->shape[0]; i++) {
        if (out[i] == g[i]) continue;
        if (g_gpu && near_tie(prompt, g, i)) break;   /* allowed: the reference's top two are within tolerance */
        TCHECK(0, "%s: token %d is %d, golden %d", what, i, out[i], g[i]);
        break;
    }
    free(out);
}

static void check_logits(mx_model *m, const mx_st_tensor *ids, const mx_st_tensor *gold, const char *what) {
    TREQUIRE(ids && gold && gold->dtype == MX_DTYPE_F32, "%s: golden tensors", what);
    int n = (int)ids->shape[0], V = (int)gold->shape[1];
    TREQUIRE(V == mx_model_cfg(m)->vocab_size && gold->shape[0] == n, "%s: golden shape", what);
    float *l = NULL;
    mx_backend_cpu_set_precise(&g_be, true);   /* parity of the exact path, as `mlxcel logits` */
    mx_status st = mx_teacher_logits(m, ids->data, n, 0, &l);
    mx_backend_cpu_set_precise(&g_be, false);
    TREQUIRE(st == MX_OK, "%s: logits: %s", what, mx_last_error());
    double e = rel_err(l, gold->data, n, V);
    if (getenv("MLXCEL_TEST_VERBOSE")) fprintf(stderr, "%s: rel err %.3g\n", what, e);
    TCHECK(e < g_tol, "%s: logits differ by %.3g of the row max (limit %g)", what, e, g_tol);
    free(l);
}

static void fixture(const char *name) {
    char dir[1024], gpath[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", t_root(), name);
    snprintf(gpath, sizeof gpath, "%s/golden.safetensors", dir);
    g_dir = dir;
    mx_safetensors *g = NULL;
    TREQUIRE(mx_st_open(gpath, &g) == MX_OK, "golden: %s", mx_last_error());
    mx_model *m = NULL;
    mx_status st = mx_model_load(dir, &g_be, &m);
    if (st) { TCHECK(0, "load: %s", mx_last_error()); mx_st_close(g); return; }
    st = mx_gen_prepare(m, 64, 0);
    if (st) { TCHECK(0, "prepare: %s", mx_last_error()); goto done; }
    check_logits(m, need(g, "input_ids"), need(g, "logits"), "logits");
    /* The tiny random fixtures have near-ties between their best logits, so their greedy runs use
     * the exact path (MLXCEL_PRECISE): the default path rounds prompt activations to int8, which
     * moves logits slightly and flips some of those near-ties (llama-mlx-q4 token 11, qwen3-mlx-q4
     * token 5). The demo models below, trained, run the default path. */
    mx_backend_cpu_set_precise(&g_be, true);
    check_greedy(m, need(g, "prompt_ids"), need(g, "greedy_ids"), "greedy_ids");
    check_greedy(m, need(g, "text_prompt_ids"), need(g, "text_greedy_ids"), "text_greedy_ids");
    mx_backend_cpu_set_precise(&g_be, false);
done:
    mx_model_free(m);
    mx_st_close(g);
}

static void demo(const char *name) {
    char dir[1024], gpath[1200], nm[64];
    snprintf(dir, sizeof dir, "%s/models/%s", t_root(), name);
    snprintf(gpath, sizeof gpath, "%s/golden.safetensors", dir);
    g_dir = dir;
    mx_safetensors *g = NULL;
    TREQUIRE(mx_st_open(gpath, &g) == MX_OK, "golden: %s", mx_last_error());
    mx_model *m = NULL;
    mx_status st = mx_model_load(dir, &g_be, &m);
    if (st) { TCHECK(0, "load: %s", mx_last_error()); mx_st_close(g); return; }
    if ((st = mx_gen_prepare(m, 128, 0))) { TCHECK(0, "prepare: %s", mx_last_error()); goto done; }
    for (int i = 0; i < 3; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "prompt%d_ids", i);
        snprintf(b, sizeof b, "prompt%d_logits", i);
        snprintf(nm, sizeof nm, "prompt%d logits", i);
        check_logits(m, need(g, a), need(g, b), nm);
        snprintf(b, sizeof b, "prompt%d_greedy_ids", i);
        snprintf(nm, sizeof nm, "prompt%d greedy", i);
        check_greedy(m, need(g, a), need(g, b), nm);
    }
done:
    mx_model_free(m);
    mx_st_close(g);
}

#define TINY "\"vocab_size\": 64, \"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, " \
             "\"num_key_value_heads\": 1, \"head_dim\": 16, \"intermediate_size\": 64"

/* Bad family-specific config.json fields are errors naming the field, not crashes. */
static void bad_family_configs(void) {
    static const struct { const char *json, *want; } cases[] = {
        {"{\"model_type\": \"gemma3_text\", " TINY ", \"sliding_window\": 4, \"layer_types\": [\"sliding_attention\"]}", "layer_types"},
        {"{\"model_type\": \"gemma2\", " TINY ", \"sliding_window\": 4, \"layer_types\": [\"sliding_attention\", \"local\"]}", "layer_types[1]"},
        {"{\"model_type\": \"gemma2\", " TINY ", \"sliding_window\": -3}", "sliding_window"},
        {"{\"model_type\": \"gemma2\", " TINY ", \"query_pre_attn_scalar\": \"x\"}", "query_pre_attn_scalar"},
        {"{\"model_type\": \"gemma2\", " TINY ", \"final_logit_softcapping\": -1}", "final_logit_softcapping"},
        {"{\"model_type\": \"gemma3_text\", " TINY ", \"rope_parameters\": {\"full_attention\": {\"rope_theta\": 10000}}}", "sliding_attention"},
        {"{\"model_type\": \"gemma3_text\", " TINY ", \"hidden_activation\": \"mish\"}", "mish"},
        {"{\"model_type\": \"phi3\", " TINY ", \"partial_rotary_factor\": 2}", "partial_rotary_factor"},
        {"{\"model_type\": \"phi3\", " TINY ", \"rope_parameters\": {\"rope_type\": \"longrope\"}}", "longrope"},
        {"{\"model_type\": \"granite\", " TINY ", \"logits_scaling\": 0}", "logits_scaling"},
        {"{\"model_type\": \"granite\", " TINY ", \"residual_multiplier\": \"big\"}", "residual_multiplier"},
        {"{\"model_type\": \"smollm3\", " TINY ", \"no_rope_layers\": [1]}", "no_rope_layers"},
        {"{\"model_type\": \"smollm3\", " TINY ", \"no_rope_layers\": [1, 2]}", "no_rope_layers[1]"},
        {"{\"model_type\": \"smollm3\", " TINY ", \"use_sliding_window\": true, \"sliding_window\": 4}", "layer_types"},
        {"{\"model_type\": \"starcoder2\", " TINY ", \"norm_epsilon\": \"a\"}", "norm_epsilon"},
        {"{\"model_type\": \"qwen3_moe\", " TINY ", \"num_experts_per_tok\": 2}", "num_experts"},
        {"{\"model_type\": \"qwen3_moe\", " TINY ", \"num_experts\": 2, \"num_experts_per_tok\": 3}", "num_experts_per_tok"},
        {"{\"model_type\": \"qwen3_moe\", " TINY ", \"num_experts\": 4, \"num_experts_per_tok\": 2, \"mlp_only_layers\": [0, 2]}", "mlp_only_layers[1]"},
        {"{\"model_type\": \"qwen3_moe\", " TINY ", \"num_experts\": 4, \"num_experts_per_tok\": 2, \"norm_topk_prob\": 1}", "norm_topk_prob"},
        {"{\"model_type\": \"mixtral\", " TINY ", \"num_local_experts\": 0, \"num_experts_per_tok\": 1}", "num_local_experts"},
        {"{\"model_type\": \"gpt_oss\", " TINY ", \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"layer_types\": [\"full_attention\"]}", "layer_types"},
        {"{\"model_type\": \"deepseek_v3\", " TINY ", \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16}", "kv_lora_rank"},
        {"{\"model_type\": \"deepseek_v3\", " TINY ", \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"kv_lora_rank\": 8, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16, \"n_group\": 3}", "n_group"},
        {"{\"model_type\": \"deepseek_v3\", " TINY ", \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"kv_lora_rank\": 8, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, \"v_head_dim\": 40}", "v_head_dim"},
        {"{\"model_type\": \"gpt_oss\", " TINY ", \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"swiglu_limit\": -1}", "swiglu_limit"},
        {"{\"model_type\": \"gpt_oss\", " TINY ", \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"rope_parameters\": {\"rope_type\": \"yarn\"}}", "factor"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_error_t je;
        json_t *cfg = json_loads(cases[i].json, 0, &je);
        TREQUIRE(cfg, "case %zu: test json: %s", i, je.text);
        mx_model *m = NULL;
        mx_status st = mx_model_load_random(cfg, 0, 0, MX_DTYPE_F32, 1, &g_cpu, &m);
        json_decref(cfg);
        TCHECK(st != MX_OK && strstr(mx_last_error(), cases[i].want), "case %zu: got status %d \"%s\", want an error naming %s",
               i, (int)st, st ? mx_last_error() : "", cases[i].want);
        mx_model_free(m);
    }
}

/* Every new family also builds from random 4-bit weights (the benchmark path; for phi3 the
 * fused projections are then split as quantized rows) and gives finite logits. */
static void random_quantized_families(void) {
    static const char *types[] = {"gemma2", "gemma3_text", "phi3", "granite", "olmo2", "starcoder2", "smollm3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        char js[1280];
        /* the MoE keys (ignored by the dense families): 4 experts, 2 per token; qwen3_moe's layer 0
         * is dense (mlp_only_layers) so both MLP kinds run in one model */
        snprintf(js, sizeof js, "{\"model_type\": \"%s\", " TINY ", \"sliding_window\": 4, \"partial_rotary_factor\": 0.5, "
                 "\"num_experts\": 4, \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
                 "\"norm_topk_prob\": false, \"mlp_only_layers\": [0], "
                 /* deepseek_v3: MLA without q LoRA, one dense layer, shared experts, 2 groups */
                 "\"n_routed_experts\": 4, \"kv_lora_rank\": 32, \"q_lora_rank\": null, \"qk_nope_head_dim\": 16, "
                 "\"qk_rope_head_dim\": 8, \"v_head_dim\": 16, \"n_shared_experts\": 1, \"first_k_dense_replace\": 1, "
                 "\"n_group\": 2, \"topk_group\": 1, \"routed_scaling_factor\": 2.5}", types[i]);
        json_error_t je;
        json_t *cfg = json_loads(js, 0, &je);
        TREQUIRE(cfg, "%s: test json: %s", types[i], je.text);
        mx_model *m = NULL;
        float *l = NULL;
        mx_status st = mx_model_load_random(cfg, 4, 32, MX_DTYPE_BF16, 7, &g_cpu, &m);
        json_decref(cfg);
        TCHECK(st == MX_OK, "%s: load: %s", types[i], mx_last_error());
        if (st == MX_OK && (st = mx_gen_prepare(m, 32, 0)) == MX_OK) {
            const int32_t ids[10] = {1, 5, 9, 63, 0, 17, 33, 2, 8, 40};
            st = mx_teacher_logits(m, ids, 10, 0, &l);
        }
        TCHECK(st == MX_OK, "%s: logits: %s", types[i], mx_last_error());
        bool finite = l != NULL;
        for (int j = 0; l && j < 10 * 64; j++) finite = finite && isfinite(l[j]);
        TCHECK(finite, "%s: non-finite logits", types[i]);
        free(l);
        mx_model_free(m);
    }
}

/* A MoE decode row gives the same logits alone as in a batch with another sequence's prompt
 * (prompt rows on the fast path, routed to the same experts as the decode row): the expert
 * matmuls keep the gathered decode rows exact and per-row. */
static void moe_batch_independence(const char *name) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", t_root(), name);
    mx_model *m = NULL;
    TREQUIRE(mx_model_load(dir, &g_cpu, &m) == MX_OK, "load: %s", mx_last_error());
    mx_backend_cpu_set_precise(&g_cpu, false);
    int V = mx_model_cfg(m)->vocab_size;
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    mx_status st = mx_model_prepare(m, 4, 16, 16);
    if (st || !la || !lb) { TCHECK(0, "prepare: %s", mx_last_error()); goto done; }
    const int32_t bt[2] = {0, 1};
    const int32_t pa[5] = {3, 17, 99, 250, 7}, pa_pos[5] = {0, 1, 2, 3, 4}, zero[5] = {0};
    /* run 1: prefill A, then A's decode step alone */
    mx_batch b1 = {5, pa, pa_pos, zero, 2, 1, bt, 0, NULL, 0};
    const int32_t dt[1] = {42}, dp[1] = {5}, row0[1] = {0};
    mx_batch d1 = {1, dt, dp, zero, 2, 1, bt, 1, row0, 1};
    if ((st = mx_model_forward(m, &b1, NULL)) || (st = mx_model_forward(m, &d1, la))) { TCHECK(0, "forward: %s", mx_last_error()); goto done; }
    /* run 2: the same decode step batched with B's 15-token prompt (sequence 1; enough rows
     * per expert for the fast path) */
    int32_t tk[16], ps[16], sq[16];
    tk[0] = 42; ps[0] = 5; sq[0] = 0;
    for (int i = 1; i < 16; i++) { tk[i] = (i * 37 + 11) % V; ps[i] = i - 1; sq[i] = 1; }
    mx_batch d2 = {16, tk, ps, sq, 2, 1, bt, 1, row0, 1};
    if ((st = mx_model_forward(m, &b1, NULL)) || (st = mx_model_forward(m, &d2, lb))) { TCHECK(0, "forward: %s", mx_last_error()); goto done; }
    TCHECK(memcmp(la, lb, (size_t)V * sizeof *la) == 0, "%s: decode logits change when batched with a prompt", name);
done:
    free(la);
    free(lb);
    mx_model_free(m);
}

/* The decoder's use of step_replay (a backend op; the CUDA backend's replays a recorded decode step
 * from its host inputs): on a CPU backend wrapped with step hooks, a decode-only batch is offered
 * to step_replay with exactly its host inputs (tokens, the attention metadata with the KV slots,
 * the logit rows) before step_begin; when the hook launches the step (MX_OK) the ops are not
 * called; prompts and MoE models are never offered. */
static struct {
    int calls, begins, ret;
    uint64_t key;
    int n_tokens, n_rows, n_seqs, max_blocks;
    int32_t tok[4], pos[4], slot[4], seq[4], rows[4], bt[8];
} g_sr;
static mx_status sr_replay(void *ctx, uint64_t key, const mx_step_inputs *in) {
    (void)ctx;
    g_sr.calls++;
    g_sr.key = key;
    g_sr.n_tokens = in->n_tokens; g_sr.n_rows = in->n_rows;
    g_sr.n_seqs = in->meta->n_seqs; g_sr.max_blocks = in->meta->max_blocks;
    for (int i = 0; i < in->n_tokens && i < 4; i++) {
        g_sr.tok[i] = in->tokens[i]; g_sr.pos[i] = in->meta->pos[i];
        g_sr.slot[i] = in->meta->slot[i]; g_sr.seq[i] = in->meta->seq[i];
    }
    for (int i = 0; i < in->n_rows && i < 4; i++) g_sr.rows[i] = in->rows[i];
    for (int i = 0; i < in->meta->n_seqs * in->meta->max_blocks && i < 8; i++) g_sr.bt[i] = in->meta->block_tables[i];
    return g_sr.ret;
}
static mx_status sr_begin(void *ctx, uint64_t key) { (void)ctx; (void)key; g_sr.begins++; return MX_OK; }
static mx_status sr_end(void *ctx) { (void)ctx; return MX_OK; }
/* A model of config JSON js with random dense weights of dtype dt on be, prepared for nb blocks of
 * bs tokens and mt tokens a batch; NULL (the case failed, with the reason) on any error. */
static mx_model *random_prepared(const char *js, mx_dtype dt, uint64_t seed, mx_backend *be, int nb, int bs, int mt) {
    json_error_t je;
    json_t *cfg = json_loads(js, 0, &je);
    if (!cfg) { TCHECK(0, "test json: %s", je.text); return NULL; }
    mx_model *m = NULL;
    const mx_status st = mx_model_load_random(cfg, 0, 0, dt, seed, be, &m);
    json_decref(cfg);
    if (st != MX_OK) { TCHECK(0, "load: %s", mx_last_error()); return NULL; }
    if (mx_model_prepare(m, nb, bs, mt) != MX_OK) { TCHECK(0, "prepare: %s", mx_last_error()); mx_model_free(m); return NULL; }
    return m;
}
static int g_gathers;
static void (*g_gather_cpu)(void *, const float *, const int32_t *, int, int, float *);
static void gather_counted(void *ctx, const float *src, const int32_t *rows, int n, int d, float *dst) {
    g_gathers++;
    g_gather_cpu(ctx, src, rows, n, d, dst);
}
/* The final norm reads the hidden rows themselves when the logit rows are all of the batch's rows in
 * order (decode): no gather op then, the same logits. On the CPU backend with gather_rows counted:
 * prompts (the last row) gather, a one-token decode step and a two-sequence decode step with both
 * rows do not, the same step with its second row alone does, and that row's logits agree (within
 * 1e-4: the head's product of two rows and of one round differently; another row's would not). */
static void decoder_head_rows(void) {
    mx_backend_i wi = *g_cpu.i;
    g_gather_cpu = wi.gather_rows;
    wi.gather_rows = gather_counted;
    mx_backend w = {&wi, g_cpu.ctx};
    mx_backend_cpu_set_precise(&g_cpu, true);
    mx_model *m = random_prepared("{\"model_type\": \"llama\", " TINY "}", MX_DTYPE_F32, 5, &w, 6, 4, 8);
    if (!m) { mx_backend_cpu_set_precise(&g_cpu, false); return; }
    const int32_t bt[4] = {0, 3, 5, 2};
    /* prompts: 3 tokens in sequence 0, 5 in sequence 1 (the last row's logits) */
    const int32_t t0[3] = {3, 9, 27}, p0[3] = {0, 1, 2}, s0[3] = {0, 0, 0}, l0r[1] = {2};
    const int32_t t1[5] = {5, 7, 11, 13, 1}, p1[5] = {0, 1, 2, 3, 4}, s1[5] = {1, 1, 1, 1, 1}, l1r[1] = {4};
    float lg[2][64], a[2 * 64], b[64];
    g_gathers = 0;
    mx_batch pb0 = {3, t0, p0, s0, 2, 2, bt, 1, l0r, 0}, pb1 = {5, t1, p1, s1, 2, 2, bt, 1, l1r, 0};
    TCHECK(mx_model_forward(m, &pb0, lg[0]) == MX_OK && mx_model_forward(m, &pb1, lg[1]) == MX_OK, "prompts: %s", mx_last_error());
    TCHECK(g_gathers == 2, "prompts: %d gathers, expected 2", g_gathers);
    /* one token of sequence 1: no gather */
    const int32_t dt[2] = {44, 17}, dp[2] = {3, 5}, ds[2] = {0, 1}, r0[1] = {0}, r01[2] = {0, 1}, r1[1] = {1};
    g_gathers = 0;
    mx_batch d1 = {1, dt + 1, dp + 1, ds + 1, 2, 2, bt, 1, r0, 1};
    TCHECK(mx_model_forward(m, &d1, b) == MX_OK, "decode: %s", mx_last_error());
    TCHECK(g_gathers == 0, "one-token decode: %d gathers", g_gathers);
    /* both sequences (the second at the same position again: the same cache writes), both rows, then the second alone */
    mx_batch d2 = {2, dt, dp, ds, 2, 2, bt, 2, r01, 2}, d2b = {2, dt, dp, ds, 2, 2, bt, 1, r1, 2};
    TCHECK(mx_model_forward(m, &d2, a) == MX_OK, "decode of two: %s", mx_last_error());
    TCHECK(g_gathers == 0, "decode of two, both rows: %d gathers", g_gathers);
    double md = 0;
    for (int i = 0; i < 64; i++) md = fmax(md, fabs(a[64 + i] - b[i]));
    TCHECK(md < 1e-4, "sequence 1's logits: the one-token step and the step of two %g apart", md);
    TCHECK(mx_model_forward(m, &d2b, b) == MX_OK, "decode of two, one row: %s", mx_last_error());
    TCHECK(g_gathers == 1, "decode of two, second row alone: %d gathers, expected 1", g_gathers);
    md = 0;
    for (int i = 0; i < 64; i++) md = fmax(md, fabs(a[64 + i] - b[i]));
    TCHECK(md < 1e-4, "the second row's logits %g apart with and without the gather", md);
    mx_model_free(m);
    mx_backend_cpu_set_precise(&g_cpu, false);
}
static void decoder_step_replay(void) {
    mx_backend_i wi = *g_cpu.i;
    wi.step_begin = sr_begin; wi.step_end = sr_end; wi.step_replay = sr_replay;
    mx_backend w = {&wi, g_cpu.ctx};
    mx_backend_cpu_set_precise(&g_cpu, true);
    for (int moe = 0; moe < 2 && !t_case_failed; moe++) {
        char js[768];
        snprintf(js, sizeof js, "{\"model_type\": \"%s\", " TINY ", \"num_experts\": 4, \"num_experts_per_tok\": 2, "
                 "\"moe_intermediate_size\": 32, \"norm_topk_prob\": false}", moe ? "qwen3_moe" : "llama");
        mx_model *m = random_prepared(js, MX_DTYPE_F32, 3, &w, 6, 4, 8);
        if (!m) break;
        memset(&g_sr, 0, sizeof g_sr);
        g_sr.ret = MX_ERR_UNSUPPORTED;
        /* a prompt of 5 tokens in sequence 1 (blocks 5, 2 of 4 tokens): not a step */
        const int32_t bt[4] = {0, 3, 5, 2}, ptok[5] = {3, 9, 27, 50, 1}, ppos[5] = {0, 1, 2, 3, 4}, pseq[5] = {1, 1, 1, 1, 1}, last[1] = {4};
        mx_batch pb = {5, ptok, ppos, pseq, 2, 2, bt, 1, last, 0};
        float l0[64], l1[64], l2[64], l3[64];
        TCHECK(mx_model_forward(m, &pb, l0) == MX_OK, "prompt: %s", mx_last_error());
        TCHECK(g_sr.calls == 0 && g_sr.begins == 0, "a prompt offered as a step (%d, %d)", g_sr.calls, g_sr.begins);
        /* its decode step at position 5 (block 2, slot 2 * 4 + 1): offered, declined, the ops run */
        int32_t dtok[1] = {44}, dpos[1] = {5}, dseq[1] = {1}, row0[1] = {0};
        mx_batch db = {1, dtok, dpos, dseq, 2, 2, bt, 1, row0, 1};
        TCHECK(mx_model_forward(m, &db, l1) == MX_OK, "decode: %s", mx_last_error());
        if (moe) {
            TCHECK(g_sr.calls == 0 && g_sr.begins == 0, "a MoE step offered (%d, %d)", g_sr.calls, g_sr.begins);
        } else {
            TCHECK(g_sr.calls == 1 && g_sr.begins == 1, "step_replay %d, step_begin %d calls; expected 1, 1", g_sr.calls, g_sr.begins);
            TCHECK(g_sr.key == ((uint64_t)1 | 1ull << 16 | 2ull << 32 | 2ull << 48), "key %#llx", (unsigned long long)g_sr.key);
            TCHECK(g_sr.n_tokens == 1 && g_sr.tok[0] == 44 && g_sr.pos[0] == 5 && g_sr.seq[0] == 1 && g_sr.slot[0] == 2 * 4 + 1,
                   "inputs: %d tokens, id %d, pos %d, seq %d, slot %d", g_sr.n_tokens, g_sr.tok[0], g_sr.pos[0], g_sr.seq[0], g_sr.slot[0]);
            TCHECK(g_sr.n_rows == 1 && g_sr.rows[0] == 0 && g_sr.n_seqs == 2 && g_sr.max_blocks == 2 && !memcmp(g_sr.bt, bt, sizeof bt),
                   "inputs: %d rows (%d), tables %d x %d", g_sr.n_rows, g_sr.rows[0], g_sr.n_seqs, g_sr.max_blocks);
            /* the same step with the hook launching it: no op runs, so the logits buffer keeps the last
             * step's values even for another token, and they can be read */
            g_sr.ret = MX_OK;
            dtok[0] = 7;
            TCHECK(mx_model_forward(m, &db, l2) == MX_OK && g_sr.calls == 2 && g_sr.begins == 1, "replayed step: %s (%d, %d)",
                   mx_last_error(), g_sr.calls, g_sr.begins);
            TCHECK(!memcmp(l2, l1, sizeof l1), "a step the hook launched ran its ops too");
            /* declined again: the ops run for token 7 and give other logits */
            g_sr.ret = MX_ERR_UNSUPPORTED;
            TCHECK(mx_model_forward(m, &db, l3) == MX_OK && g_sr.calls == 3 && g_sr.begins == 2 && g_sr.tok[0] == 7, "step: %s",
                   mx_last_error());
            TCHECK(memcmp(l3, l1, sizeof l1) != 0, "token 7 gave token 44's logits");
        }
        mx_model_free(m);
    }
    mx_backend_cpu_set_precise(&g_cpu, false);
}

/* The decoder's and generate's use of the greedy chain (mx_model_greedy_*), on a CPU backend
 * wrapped with the three ops: top1_launch reduces the row on the host into a slot, top1_wait
 * hands it back (with a NaN lse once, when asked), step_chain records what it is offered and
 * declines, so each chained step is run by the decoder with the ids brought over. Greedy
 * generation gives the reference's ids, offers every step after the first to step_chain with no
 * token ids and the next position and slot; a NaN lse makes it drop the chained step, run that
 * step again and finish without the chain; sampling never chains; misuse is an error. (The CUDA
 * backend's chaining on the device: greedy_chain_gpu, on the GPU.) */
static struct {
    int launches, probes, waits, chains, bad_inputs, nan_at;
    float v[2]; int32_t id[2]; float l[2];
    int32_t last_pos;
} g_gc;
static mx_status gc_launch(void *ctx, const float *logits, int n_rows, int vocab, int slot) {
    (void)ctx;
    if (n_rows == 0) { g_gc.probes++; return MX_OK; }
    if (n_rows != 1 || slot < 0 || slot > 1) return MX_ERR_INVALID_ARG;
    mx_topk_host(logits, vocab, 1, &g_gc.v[slot], &g_gc.id[slot], &g_gc.l[slot]);   /* (CPU buffers are host memory) */
    g_gc.launches++;
    return MX_OK;
}
static mx_status gc_wait(void *ctx, int slot, int n_rows, float *v, int32_t *id, float *l) {
    (void)ctx;
    if (n_rows != 1 || slot < 0 || slot > 1) return MX_ERR_INVALID_ARG;
    g_gc.waits++;
    *v = g_gc.v[slot]; *id = g_gc.id[slot]; *l = g_gc.waits == g_gc.nan_at ? NAN : g_gc.l[slot];
    return MX_OK;
}
static mx_status gc_chain(void *ctx, uint64_t key, const mx_step_inputs *in) {
    (void)ctx; (void)key;
    g_gc.chains++;
    if (in->tokens || in->n_tokens != 1 || in->n_rows != 1 || in->rows[0] != 0 ||
        (g_gc.last_pos >= 0 && in->meta->pos[0] != g_gc.last_pos + 1) || in->meta->slot[0] != in->meta->pos[0])
        g_gc.bad_inputs++;
    g_gc.last_pos = in->meta->pos[0];
    return MX_ERR_UNSUPPORTED;
}
static void greedy_chain(void) {
    mx_backend_i wi = *g_cpu.i;
    wi.step_begin = sr_begin; wi.step_end = sr_end;
    wi.top1_launch = gc_launch; wi.top1_wait = gc_wait; wi.step_chain = gc_chain;
    mx_backend w = {&wi, g_cpu.ctx};
    mx_backend_cpu_set_precise(&g_cpu, true);
    json_error_t je;
    json_t *cfg = json_loads("{\"model_type\": \"llama\", " TINY "}", 0, &je);
    TREQUIRE(cfg, "test json: %s", je.text);
    mx_model *ref = NULL, *m = NULL;
    int32_t *want = NULL, *got = NULL;
    int n_want = 0, n_got = 0;
    mx_status st = mx_model_load_random(cfg, 0, 0, MX_DTYPE_F32, 5, &g_cpu, &ref);
    if (st == MX_OK) st = mx_model_load_random(cfg, 0, 0, MX_DTYPE_F32, 5, &w, &m);
    json_decref(cfg);
    if (st == MX_OK) st = mx_gen_prepare(ref, 64, 0);
    if (st == MX_OK) st = mx_gen_prepare(m, 64, 0);
    if (st) { TCHECK(0, "load: %s", mx_last_error()); goto done; }
    const int32_t prompt[3] = {3, 17, 42};
    mx_gen_opts o = {0};
    o.n_predict = 12;
    o.ignore_eos = true;
    mx_sampling_default(&o.sampling);
    o.sampling.temperature = 0;
    mx_gen_stats gs;
    TCHECK(mx_generate(ref, prompt, 3, &o, NULL, NULL, &want, &n_want, &gs) == MX_OK && n_want == 12, "reference: %s", mx_last_error());
    for (int run = 0; run < 3 && want && !t_case_failed; run++) {   /* plain; a NaN lse at the 5th wait; sampling */
        memset(&g_gc, 0, sizeof g_gc);
        g_gc.last_pos = -1;
        g_gc.nan_at = run == 1 ? 5 : 0;
        mx_gen_opts oo = o;
        if (run == 2) { oo.sampling.temperature = 0.7f; oo.sampling.seed = 9; }
        got = NULL;
        st = mx_generate(m, prompt, 3, &oo, NULL, NULL, &got, &n_got, &gs);
        TCHECK(st == MX_OK && n_got == 12, "run %d: %s (%d tokens)", run, st ? mx_last_error() : "", n_got);
        if (run < 2)
            for (int i = 0; i < 12 && st == MX_OK; i++) TCHECK(got[i] == want[i], "run %d: token %d is %d, want %d", run, i, got[i], want[i]);
        /* the 11 steps after the prompt: the first launched with its token, 10 offered to step_chain
         * (each declined: the ids of the step before it waited for), the last waited for; with the
         * NaN at the 5th wait: 5 offered and 6 launched, then the one in flight waited for and
         * dropped, the 5th step run again, and 6 more without the chain */
        const int want_chains = run == 0 ? 10 : run == 1 ? 5 : 0, want_launches = run == 0 ? 11 : run == 1 ? 6 : 0;
        TCHECK(g_gc.chains == want_chains && g_gc.waits == want_launches && g_gc.launches == want_launches && g_gc.bad_inputs == 0,
               "run %d: %d offered to step_chain (bad inputs %d), %d launches, %d waits; expected %d, %d, %d", run, g_gc.chains,
               g_gc.bad_inputs, g_gc.launches, g_gc.waits, want_chains, want_launches, want_launches);
        free(got);
    }
    TCHECK(mx_model_greedy_chained(m) == 0, "steps counted as chained on a backend that declined them");
    {   /* by hand, after the same greedy run on both (equal caches): token 5 at position 15 and
         * the step after it, chained, against forward_topk; then misuse */
        int32_t *a = NULL, *c = NULL;
        int na = 0, nc = 0;
        TCHECK(mx_generate(ref, prompt, 3, &o, NULL, NULL, &a, &na, &gs) == MX_OK && mx_generate(m, prompt, 3, &o, NULL, NULL, &c, &nc, &gs) == MX_OK,
               "generate: %s", mx_last_error());
        free(a); free(c);
        int32_t tok[2] = {5, 6}, pos[2] = {15, 16}, sq[2] = {0, 0}, rows[2] = {0, 1}, bt[4] = {0, 1, 2, 3};
        float rv[2], rl[2], v, l;
        int32_t ri[2], id;
        mx_batch r0 = {1, tok, pos, sq, 1, 4, bt, 1, rows, 1};
        TCHECK(mx_model_forward_topk(ref, &r0, 1, &rv[0], &ri[0], &rl[0]) == MX_OK, "forward: %s", mx_last_error());
        mx_batch r1 = {1, ri, pos + 1, sq, 1, 4, bt, 1, rows, 1};
        TCHECK(mx_model_forward_topk(ref, &r1, 1, &rv[1], &ri[1], &rl[1]) == MX_OK, "forward: %s", mx_last_error());
        TCHECK(mx_model_greedy_wait(m, &v, &id, &l) == MX_ERR_INVALID_ARG, "a wait with nothing launched");
        mx_batch b = {1, tok, pos, sq, 1, 4, bt, 1, rows, 1};
        TCHECK(mx_model_greedy_launch(m, &b, true) == MX_ERR_INVALID_ARG, "a chained launch with nothing before it");
        mx_batch b2 = {2, tok, pos, sq, 1, 4, bt, 1, rows + 1, 2};   /* its logit row 0 is token 1 */
        TCHECK(mx_model_greedy_launch(m, &b2, false) == MX_ERR_UNSUPPORTED, "a batch whose logit row 0 is token 1");
        mx_batch b3 = {1, tok, pos, sq, 1, 4, bt, 1, rows, 0};
        TCHECK(mx_model_greedy_launch(m, &b3, false) == MX_ERR_UNSUPPORTED, "a prompt batch (not a decode step)");
        TCHECK(mx_model_greedy_launch(m, &b, false) == MX_OK, "launch: %s", mx_last_error());
        mx_batch bn = {1, NULL, pos + 1, sq, 1, 4, bt, 1, rows, 1};
        TCHECK(mx_model_greedy_launch(m, &bn, true) == MX_OK, "chained launch: %s", mx_last_error());
        TCHECK(mx_model_greedy_launch(m, &bn, true) == MX_ERR_INVALID_ARG, "a third launch with two waiting");
        for (int i = 0; i < 2; i++) {
            TCHECK(mx_model_greedy_wait(m, &v, &id, &l) == MX_OK, "wait %d: %s", i, mx_last_error());
            TCHECK(id == ri[i] && !memcmp(&v, &rv[i], 4) && !memcmp(&l, &rl[i], 4), "step %d: id %d (%.9g, lse %.9g), forward_topk %d (%.9g, %.9g)",
                   i, id, v, l, ri[i], rv[i], rl[i]);
        }
        TCHECK(mx_model_greedy_wait(m, &v, &id, &l) == MX_ERR_INVALID_ARG, "a wait after both were taken");
        TCHECK(g_gc.chains >= 1, "the chained launch was not offered to step_chain");
    }
done:
    free(want);
    mx_model_free(m);
    mx_model_free(ref);
    mx_backend_cpu_set_precise(&g_cpu, false);
}

#ifdef MLXCEL_HAVE_CUDA
/* Decode steps on a fresh GPU backend with no prompt before them (as `mlxcel bench -p 0` runs
 * them): they run as graph launches, and their logits are those of the same steps op by op. (The
 * decoder issues no gather for such steps, so nothing made the logit rows' staging buffer before
 * the capture; uploading into it there broke every capture, and each step ran op by op.) */
static void decode_graphs_gpu(void) {
    mx_backend be[2];
    float lg[2][8][64];
    int launches = 0;
    for (int g = 0; g < 2 && !t_case_failed; g++) {
        TREQUIRE(mx_backend_cuda_init(&be[g]) == MX_OK, "cuda init: %s", mx_last_error());
        mx_backend_cuda_set_graphs(&be[g], g == 1 ? 1 : 0, 0);
        mx_model *m = random_prepared("{\"model_type\": \"llama\", " TINY "}", MX_DTYPE_BF16, 7, &be[g], 8, 4, 8);
        if (!m) { mx_backend_cuda_free(&be[g]); return; }
        const int32_t bt[8] = {0, 1, 2, 3, 4, 5, 6, 7}, row0[1] = {0}, seq[1] = {0};
        const int l0 = mx_backend_cuda_graph_launches(&be[g]);
        for (int t = 0; t < 8; t++) {
            const int32_t tok[1] = {(t * 7 + 3) % 64}, pos[1] = {t};
            mx_batch db = {1, tok, pos, seq, 1, 8, bt, 1, row0, 1};
            TCHECK(mx_model_forward(m, &db, lg[g][t]) == MX_OK, "step %d: %s", t, mx_last_error());
        }
        if (g == 1) launches = mx_backend_cuda_graph_launches(&be[g]) - l0;
        mx_model_free(m);
        mx_backend_cuda_free(&be[g]);
    }
    if (t_case_failed) return;
    TCHECK(launches >= 5, "%d of 8 decode steps ran as graph launches (expected all but the first ones)", launches);
    for (int t = 0; t < 8; t++) {
        double md = 0;
        for (int i = 0; i < 64; i++) md = fmax(md, fabs(lg[1][t][i] - lg[0][t][i]));
        TCHECK(md < 1e-3, "step %d: the graph's logits %g from the op-by-op ones", t, md);
    }
}
/* On the GPU: the CUDA backend chains greedy steps on the device (step_chain): the demo model's
 * greedy generation gives the same ids with the chain as without it (MLXCEL_CUDA_CHAIN=0), with
 * nearly every step chained; three sequences stepped by hand through mx_model_greedy_* give, bit
 * for bit, forward_topk's top-1 values, ids and lse. */
static void greedy_chain_gpu(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/fortune-6m-mlx-q4", t_root());
    mx_model *m = NULL;
    TREQUIRE(mx_model_load(dir, &g_be, &m) == MX_OK, "load: %s", mx_last_error());
    int32_t *out[2] = {NULL, NULL};
    int n[2] = {0, 0};
    long chained[2] = {0, 0}, by_model = 0;
    enum { NP = 120, S = 3, T = 16 };
    if (mx_gen_prepare(m, 256, 0)) { TCHECK(0, "prepare: %s", mx_last_error()); goto done; }
    const int32_t prompt[6] = {1, 40, 7, 91, 12, 5};
    mx_gen_opts o = {0};
    o.n_predict = NP;
    o.ignore_eos = true;
    mx_sampling_default(&o.sampling);
    o.sampling.temperature = 0;
    mx_gen_stats gs;
    /* (chained steps are launched as step_replay's are: on here whatever the variant's switches) */
    const bool was = mx_backend_cuda_set_chain(&g_be, false), was_fr = mx_backend_cuda_set_fast_replay(&g_be, true);
    for (int r = 0; r < 2; r++) {
        mx_backend_cuda_set_chain(&g_be, r == 1);
        const long c0 = mx_backend_cuda_chain_steps(&g_be), m0 = mx_model_greedy_chained(m);
        TCHECK(mx_generate(m, prompt, 6, &o, NULL, NULL, &out[r], &n[r], &gs) == MX_OK && n[r] == NP, "generate %d: %s", r, mx_last_error());
        chained[r] = mx_backend_cuda_chain_steps(&g_be) - c0;
        if (r == 1) by_model = mx_model_greedy_chained(m) - m0;
    }
    printf("# greedy generation of %d tokens: %ld steps chained on the device (off: %ld)\n", NP, chained[1], chained[0]);
    TCHECK(chained[0] == 0 && chained[1] >= NP - 8 && by_model == chained[1], "steps chained: %ld off, %ld on (the model counted %ld)",
           chained[0], chained[1], by_model);
    for (int i = 0; i < NP && out[0] && out[1]; i++)
        if (out[0][i] != out[1][i]) { TCHECK(0, "token %d: %d chained, %d not", i, out[1][i], out[0][i]); break; }
    {   /* three sequences (blocks 4s..4s+3), a prompt of 5 tokens each, then T steps twice */
        int32_t bt[S * 4], tok[S * 5], pos[S * 5], sq[S * 5], rows[S] = {0, 1, 2}, ids[2][T][S];
        float v[2][T][S], l[2][T][S];
        for (int i = 0; i < S * 4; i++) bt[i] = i;
        long c0 = mx_backend_cuda_chain_steps(&g_be);
        for (int r = 0; r < 2 && !t_case_failed; r++) {
            for (int i = 0; i < S * 5; i++) { tok[i] = (i * 29 + 3) % 200; pos[i] = i % 5; sq[i] = i / 5; }
            int32_t last[S] = {4, 9, 14};
            mx_batch pb = {S * 5, tok, pos, sq, S, 4, bt, S, last, 0};
            float pv[S], pl[S];
            int32_t pi[S];
            TCHECK(mx_model_forward_topk(m, &pb, 1, pv, pi, pl) == MX_OK, "prompt: %s", mx_last_error());
            int32_t cur[S], dp[S], ds[S] = {0, 1, 2};
            memcpy(cur, pi, sizeof cur);
            for (int t = 0; t < T && !t_case_failed; t++) {
                for (int s2 = 0; s2 < S; s2++) dp[s2] = 5 + t;
                mx_batch b = {S, cur, dp, ds, S, 4, bt, S, rows, S};
                if (r == 0) {
                    TCHECK(mx_model_forward_topk(m, &b, 1, v[0][t], ids[0][t], l[0][t]) == MX_OK, "step %d: %s", t, mx_last_error());
                    memcpy(cur, ids[0][t], sizeof cur);
                    continue;
                }
                if (t == 0) TCHECK(mx_model_greedy_launch(m, &b, false) == MX_OK, "launch: %s", mx_last_error());
                if (t + 1 < T) {
                    for (int s2 = 0; s2 < S; s2++) dp[s2] = 6 + t;
                    b.tokens = NULL;
                    TCHECK(mx_model_greedy_launch(m, &b, true) == MX_OK, "chained launch %d: %s", t + 1, mx_last_error());
                }
                TCHECK(mx_model_greedy_wait(m, v[1][t], ids[1][t], l[1][t]) == MX_OK, "wait %d: %s", t, mx_last_error());
            }
        }
        const long c = mx_backend_cuda_chain_steps(&g_be) - c0;
        TCHECK(c >= T - 6, "%ld of %d steps of three sequences chained", c, T - 1);
        TCHECK(!memcmp(ids[0], ids[1], sizeof ids[0]) && !memcmp(v[0], v[1], sizeof v[0]) && !memcmp(l[0], l[1], sizeof l[0]),
               "three sequences: chained top-1 results differ from forward_topk's (step 0 ids %d %d %d / %d %d %d)", ids[1][0][0],
               ids[1][0][1], ids[1][0][2], ids[0][0][0], ids[0][0][1], ids[0][0][2]);
    }
    mx_backend_cuda_set_chain(&g_be, was);
    mx_backend_cuda_set_fast_replay(&g_be, was_fr);
done:
    free(out[0]); free(out[1]);
    mx_model_free(m);
}
#endif

int main(void) {
    /* MLXCEL_DEVICE picks the backend (CPU by default on a machine without a GPU); on the GPU the
     * logits tolerance is GPU_TOL and a greedy mismatch is accepted only at a reference near-tie. */
    if (mx_backend_auto_init(&g_be) != MX_OK) { printf("FAIL backend: %s\n", mx_last_error()); return 1; }
    if (mx_backend_cpu_init(&g_cpu) != MX_OK) { printf("FAIL backend: %s\n", mx_last_error()); return 1; }
    g_gpu = mx_backend_is_gpu(&g_be);
    fprintf(stderr, "test_models: backend %s\n", g_be.i->name);
    const char *fx[] = {"llama", "llama-tied", "qwen2", "qwen3", "mistral", "llama-mlx-q4", "llama-mlx-q8", "qwen3-mlx-q4", "qwen3-mlx-q8",
                        "gemma3", "gemma3-mlx-q4", "gemma3-mlx-q8", "gemma2", "phi3", "granite", "olmo2",
                        "starcoder2", "smollm3", "qwen3_moe", "qwen3_moe-mlx-q4", "qwen3_moe-mlx-q8",
                        "mixtral", "mixtral-mlx-q4", "mixtral-mlx-q8", "gpt_oss", "deepseek_v3"};
    char name[96];
    /* MoE routing is discontinuous: on the GPU, int8/bf16 activation error flips the choice
     * between near-tied experts of these random fixtures (seen: logits 0.12-0.3 of the row max
     * apart). So on the GPU the MoE fixtures run on an instance with f32 activations everywhere
     * (MLXCEL_PRECISE=1; f32 KV cache), held to 1e-3. */
    bool have_f32 = false;
    if (g_gpu) {
        setenv("MLXCEL_PRECISE", "1", 1);
        have_f32 = mx_backend_auto_init(&g_gpu_f32) == MX_OK;
        unsetenv("MLXCEL_PRECISE");
        if (!have_f32) printf("FAIL backend_precise: %s\n", mx_last_error());
    }
    for (size_t i = 0; i < sizeof fx / sizeof *fx; i++) {
        snprintf(name, sizeof name, "parity_%s", fx[i]);
        g_tol = g_gpu ? GPU_TOL : 1e-4;
        bool moe = strstr(fx[i], "moe") || strstr(fx[i], "mixtral");
        if (g_gpu && moe && have_f32) {
            mx_backend keep = g_be;
            g_be = g_gpu_f32; g_tol = 1e-3;
            RUN_NAMED(name, fixture, fx[i]);
            g_be = keep;
            continue;
        }
        RUN_NAMED(name, fixture, fx[i]);
    }
    if (have_f32) mx_backend_auto_free(&g_gpu_f32);
    /* The demo goldens of the quantized versions come from transformers on weights dequantized
     * to bf16 (MLX's dequantize returns the scales' dtype), while mlxcel computes scale*q+bias in
     * f32 as MLX's quantized matmul does; that rounding moves logits by up to ~7e-4 of the row max
     * on this 6-layer model (the bf16 original stays within 1e-6). The issue asks greedy ids and
     * text equal for the demo; logits are held to 1e-3 here. */
    const char *dm[] = {"fortune-6m", "fortune-6m-mlx-q4", "fortune-6m-mlx-q8"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "parity_%s", dm[i]);
        g_tol = g_gpu ? GPU_TOL : i == 0 ? 1e-4 : 1e-3;
        RUN_NAMED(name, demo, dm[i]);
    }
    RUN_NAMED("moe_batch_independence_qwen3_moe", moe_batch_independence, "qwen3_moe-mlx-q4");
    RUN_NAMED("moe_batch_independence_mixtral", moe_batch_independence, "mixtral");
    RUN(bad_family_configs);
    RUN(random_quantized_families);
    RUN(decoder_head_rows);
    RUN(decoder_step_replay);
    RUN(greedy_chain);
#ifdef MLXCEL_HAVE_CUDA
    if (g_gpu) RUN(greedy_chain_gpu);
    if (g_gpu) RUN(decode_graphs_gpu);
#endif
    mx_backend_auto_free(&g_be);
    mx_backend_cpu_free(&g_cpu);
    TEST_EXIT();
}
