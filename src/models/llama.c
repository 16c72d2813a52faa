/* models/llama.c: the Llama family and its close relatives that share its block layout:
 * llama (rope_scaling llama3/linear, tied or untied head, attention/mlp bias), mistral (sliding
 * window), qwen2 (q/k/v bias), qwen3 (q/k RMSNorm). Only configuration lives here; the forward
 * pass is models/decoder.c. */
#include "models/decoder.h"

#include <string.h>

static mx_status act_from_config(json_t *config, const char *dir, mx_act *act) {
    json_t *a = json_object_get(config, "hidden_act");
    if (!a) a = json_object_get(config, "hidden_activation");
    const char *s = json_is_string(a) ? json_string_value(a) : "silu";
    if (!strcmp(s, "silu") || !strcmp(s, "swish")) *act = MX_ACT_SILU;
    else if (!strcmp(s, "gelu_pytorch_tanh") || !strcmp(s, "gelu_new")) *act = MX_ACT_GELU_TANH;
    else if (!strcmp(s, "gelu")) *act = MX_ACT_GELU;
    else if (!strcmp(s, "relu")) *act = MX_ACT_RELU;
    else return mx_errorf(MX_ERR_UNSUPPORTED, "%s/config.json: hidden_act \"%s\" is not supported", dir, s);
    return MX_OK;
}

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
    return act_from_config(config, dir, &o->act);
}

static mx_status mistral_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    o->sliding_window = sliding_window(config);
    return act_from_config(config, dir, &o->act);
}

static mx_status qwen2_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    o->qkv_bias = true;
    o->sliding_window = sliding_window(config);
    return act_from_config(config, dir, &o->act);
}

static mx_status qwen3_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    o->qkv_bias = o->o_bias = json_flag(config, "attention_bias");
    o->qk_norm = true;
    o->sliding_window = sliding_window(config);
    return act_from_config(config, dir, &o->act);
}

const mx_family mx_family_llama = {{"llama", "LlamaForCausalLM", "rope_scaling llama3/linear; tied or untied head"}, llama_config};
const mx_family mx_family_mistral = {{"mistral", "MistralForCausalLM", "sliding window attention"}, mistral_config};
const mx_family mx_family_qwen2 = {{"qwen2", "Qwen2ForCausalLM", "q/k/v bias"}, qwen2_config};
const mx_family mx_family_qwen3 = {{"qwen3", "Qwen3ForCausalLM", "q/k RMSNorm"}, qwen3_config};
