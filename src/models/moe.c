/* models/moe.c: the Mixture-of-Experts families: qwen3_moe (Qwen3 attention with q/k RMSNorm,
 * router softmax over all experts then top-k, optional renormalization (norm_topk_prob), dense
 * MLP layers listed in mlp_only_layers or off the decoder_sparse_step) and mixtral (Mistral
 * attention, softmax over the top-k router logits). Experts are read per expert (HF layout) or
 * stacked (mlx-lm switch_mlp). Only configuration lives here; the forward pass is
 * models/decoder.c. */
#include "models/decoder.h"

#include <stdlib.h>
#include <string.h>

static int sliding_window(json_t *config) {
    json_t *use = json_object_get(config, "use_sliding_window");
    if (use && json_is_false(use)) return 0;
    json_t *w = json_object_get(config, "sliding_window");
    return json_is_integer(w) && json_integer_value(w) > 0 ? (int)json_integer_value(w) : 0;
}

/* Experts, top-k and the expert intermediate size. */
static mx_status moe_common(json_t *config, const char *dir, const char *inter_key, mx_decoder_opts *o, int inter_default) {
    mx_status st;
    if ((st = mx_cfg_count(config, dir, "num_experts", "num_local_experts", 1, 1 << 16, &o->n_experts))) return st;
    if ((st = mx_cfg_count(config, dir, "num_experts_per_tok", NULL, 1, 64, &o->top_k))) return st;
    if (o->top_k > o->n_experts)
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"num_experts_per_tok\" (%d) exceeds the number of experts (%d)", dir, o->top_k, o->n_experts);
    json_t *v = json_object_get(config, inter_key);
    if (!v || json_is_null(v)) o->moe_inter = inter_default;
    else if ((st = mx_cfg_count(config, dir, inter_key, NULL, 1, 1 << 22, &o->moe_inter))) return st;
    return MX_OK;
}

static mx_status qwen3_moe_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    mx_status st;
    json_t *ab = json_object_get(config, "attention_bias");
    o->qkv_bias = o->o_bias = ab && json_is_true(ab);
    o->qk_norm = true;
    o->sliding_window = sliding_window(config);
    if ((st = moe_common(config, dir, "moe_intermediate_size", o, cfg->intermediate_size))) return st;
    json_t *nt = json_object_get(config, "norm_topk_prob");
    if (nt && !json_is_boolean(nt)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"norm_topk_prob\" must be true or false", dir);
    o->norm_topk = nt && json_is_true(nt);
    o->moe_prefix = "mlp";
    o->expert_names[0] = "gate_proj"; o->expert_names[1] = "up_proj"; o->expert_names[2] = "down_proj";
    int step = 1;
    json_t *ds = json_object_get(config, "decoder_sparse_step");
    if (ds && !json_is_null(ds) && (st = mx_cfg_count(config, dir, "decoder_sparse_step", NULL, 1, 4096, &step))) return st;
    json_t *only = json_object_get(config, "mlp_only_layers");
    if (only && !json_is_null(only) && !json_is_array(only))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"mlp_only_layers\" must be a list of layer indices", dir);
    o->dense_layers = calloc((size_t)cfg->n_layers, 1);
    if (!o->dense_layers) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    for (int l = 0; l < cfg->n_layers; l++) o->dense_layers[l] = (l + 1) % step != 0;
    size_t i; json_t *e;
    if (json_is_array(only))
        json_array_foreach(only, i, e) {
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= cfg->n_layers)
                return mx_errorf(MX_ERR_FORMAT, "%s/config.json: mlp_only_layers[%zu] is not a layer index below %d", dir, i, cfg->n_layers);
            o->dense_layers[json_integer_value(e)] = 1;
        }
    return mx_decoder_act(config, dir, "hidden_act", &o->act);
}

static mx_status mixtral_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    mx_status st;
    o->sliding_window = sliding_window(config);
    if ((st = moe_common(config, dir, "intermediate_size", o, cfg->intermediate_size))) return st;
    o->norm_topk = true;   /* softmax over the top-k logits = top-k probabilities renormalized */
    o->moe_prefix = "block_sparse_moe";
    o->expert_names[0] = "w1"; o->expert_names[1] = "w3"; o->expert_names[2] = "w2";
    return mx_decoder_act(config, dir, "hidden_act", &o->act);
}

const mx_family mx_family_qwen3_moe = {{"qwen3_moe", "Qwen3MoeForCausalLM", "sparse MoE (softmax, top-k, norm_topk_prob); q/k RMSNorm"}, qwen3_moe_config};
const mx_family mx_family_mixtral = {{"mixtral", "MixtralForCausalLM", "sparse MoE (top-k, softmax); sliding window"}, mixtral_config};
