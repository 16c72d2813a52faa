/* models/gpt_oss.c: the gpt-oss family: attention with q/k/v/o biases and learned attention sinks
 * (a per-head logit in the softmax denominator), sliding-window and full layers (layer_types,
 * else alternating from a sliding layer 0), YaRN RoPE (models/common.c), and a sparse MoE on
 * every layer: router with bias, softmax over the top-k router logits, experts stored for x @ W
 * with biases and interleaved gate/up columns, clamped SwiGLU (alpha 1.702, swiglu_limit).
 * Only configuration lives here; the forward pass is models/decoder.c. */
#include "models/decoder.h"

#include <stdlib.h>
#include <string.h>

static mx_status gpt_oss_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    mx_status st;
    json_t *ab = json_object_get(config, "attention_bias");
    if (ab && !json_is_null(ab) && !json_is_boolean(ab)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"attention_bias\" must be true or false", dir);
    o->qkv_bias = o->o_bias = !ab || json_is_null(ab) || json_is_true(ab);
    o->attn_sinks = true;
    json_t *w = json_object_get(config, "sliding_window");
    if (w && !json_is_null(w) && (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > (1 << 30)))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"sliding_window\" must be a positive integer", dir);
    o->sliding_window = json_is_integer(w) ? (int)json_integer_value(w) : 0;
    if (!(o->layer_flags = calloc((size_t)cfg->n_layers, 1))) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    json_t *types = json_object_get(config, "layer_types");
    if (types && !json_is_null(types) && (!json_is_array(types) || (int)json_array_size(types) != cfg->n_layers))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"layer_types\" must list %d layer types", dir, cfg->n_layers);
    for (int l = 0; l < cfg->n_layers; l++) {
        bool sliding = l % 2 == 0;
        if (json_is_array(types)) {
            const char *t = json_string_value(json_array_get(types, (size_t)l));
            if (!t || (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")))
                return mx_errorf(MX_ERR_FORMAT, "%s/config.json: layer_types[%d] must be \"sliding_attention\" or \"full_attention\"", dir, l);
            sliding = !strcmp(t, "sliding_attention");
        }
        o->layer_flags[l] = sliding && o->sliding_window ? MX_LAYER_SLIDING : 0;
    }
    if ((st = mx_cfg_count(config, dir, "num_local_experts", "num_experts", 1, 1 << 16, &o->n_experts))) return st;
    if ((st = mx_cfg_count(config, dir, "num_experts_per_tok", "experts_per_token", 1, 64, &o->top_k))) return st;
    if (o->top_k > o->n_experts)
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"num_experts_per_tok\" (%d) exceeds the number of experts (%d)", dir, o->top_k, o->n_experts);
    o->moe_inter = cfg->intermediate_size;
    o->norm_topk = true;   /* softmax over the top-k logits = top-k probabilities renormalized */
    o->moe_prefix = "mlp";
    o->oss_experts = true;
    o->swiglu_alpha = 1.702f;
    o->swiglu_limit = 7.0f;
    json_t *lim = json_object_get(config, "swiglu_limit");
    if (lim && !json_is_null(lim)) {
        if (!json_is_number(lim) || !(json_number_value(lim) > 0))
            return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"swiglu_limit\" must be a positive number", dir);
        o->swiglu_limit = (float)json_number_value(lim);
    }
    o->act = MX_ACT_SILU;
    return MX_OK;
}

const mx_family mx_family_gpt_oss = {{"gpt_oss", "GptOssForCausalLM", "attention sinks; sliding/full layers; YaRN; MoE (router bias, clamped SwiGLU)"}, gpt_oss_config};
