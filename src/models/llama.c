/* models/llama.c: the Llama family and its close relatives that share its block layout:
 * llama (rope_scaling llama3/linear, tied or untied head, attention/mlp bias), mistral (sliding
 * window), qwen2 (q/k/v bias), qwen3 (q/k RMSNorm). Only configuration lives here; the forward
 * pass is models/decoder.c. */
#include "models/decoder.h"

#include <string.h>

static bool json_flag(json_t *config, const char *key) {
    json_t *v = json_object_get(config, key);
    return v && json_is_true(v);
}

static int sliding_window(json_t *config) {
    json_t *use = json_object_get(config, "use_sliding_window");
    if (use && json_is_false(use)) return 0;
    json_t *w = json_object_get(config, "sliding_window");
    return json_is_integer(w) && json_integer_value(w) > 0 ? (int)json_integer_value(w) : 0;
}

static mx_status llama_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    o->qkv_bias = o->o_bias = json_flag(config, "attention_bias");
    o->mlp_bias = json_flag(config, "mlp_bias");
    return mx_decoder_act(config, dir, "hidden_act", &o->act);
}

static mx_status mistral_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    o->sliding_window = sliding_window(config);
    return mx_decoder_act(config, dir, "hidden_act", &o->act);
}

static mx_status qwen2_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    o->qkv_bias = true;
    o->sliding_window = sliding_window(config);
    return mx_decoder_act(config, dir, "hidden_act", &o->act);
}

static mx_status qwen3_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    o->qkv_bias = o->o_bias = json_flag(config, "attention_bias");
    o->qk_norm = true;
    o->sliding_window = sliding_window(config);
    return mx_decoder_act(config, dir, "hidden_act", &o->act);
}

const mx_family mx_family_llama = {{"llama", "LlamaForCausalLM", "rope_scaling llama3/linear; tied or untied head"}, llama_config};
const mx_family mx_family_mistral = {{"mistral", "MistralForCausalLM", "sliding window attention"}, mistral_config};
const mx_family mx_family_qwen2 = {{"qwen2", "Qwen2ForCausalLM", "q/k/v bias"}, qwen2_config};
const mx_family mx_family_qwen3 = {{"qwen3", "Qwen3ForCausalLM", "q/k RMSNorm"}, qwen3_config};
