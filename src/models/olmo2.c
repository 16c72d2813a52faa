/* models/olmo2.c: the OLMo 2 family: no norms before attention or MLP, RMSNorm after each
 * (post_attention_layernorm, post_feedforward_layernorm) before the residual add, and q/k RMSNorm
 * over the whole q and k projections (not per head) before RoPE. Only configuration lives here;
 * the forward pass is models/decoder.c. Not OLMo 1 (non-parametric LayerNorm) or OLMoE. */
#include "models/decoder.h"

static mx_status olmo2_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    (void)cfg;
    o->qkv_bias = o->o_bias = json_is_true(json_object_get(config, "attention_bias"));
    o->sandwich_norms = o->no_pre_norms = true;
    o->qk_norm = o->qk_norm_full = true;
    return mx_decoder_act(config, dir, "hidden_act", &o->act);
}

const mx_family mx_family_olmo2 = {{"olmo2", "Olmo2ForCausalLM", "post-norms, q/k norm over the full projection"}, olmo2_config};
