/* models/granite.c: the Granite (3.x dense) family: a Llama block with embedding_multiplier on the
 * embeddings, attention_multiplier as the attention scale, residual_multiplier on each block's
 * output before the residual add and logits divided by logits_scaling. Only configuration lives
 * here; the forward pass is models/decoder.c. Not granitemoe. */
#include "models/decoder.h"

/* A positive number, `def` when absent. */
static mx_status pos_number(json_t *config, const char *dir, const char *key, double def, double *out) {
    json_t *v = json_object_get(config, key);
    *out = def;
    if (!v || json_is_null(v)) return MX_OK;
    if (!json_is_number(v) || !(json_number_value(v) > 0))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"%s\" must be a positive number", dir, key);
    *out = json_number_value(v);
    return MX_OK;
}

static mx_status granite_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    mx_status st = mx_decoder_act(config, dir, "hidden_act", &o->act);
    if (st) return st;
    o->qkv_bias = o->o_bias = json_is_true(json_object_get(config, "attention_bias"));
    o->mlp_bias = json_is_true(json_object_get(config, "mlp_bias"));
    double em, am, rm, ls;
    if ((st = pos_number(config, dir, "embedding_multiplier", 1.0, &em))) return st;
    if ((st = pos_number(config, dir, "attention_multiplier", 1.0, &am))) return st;
    if ((st = pos_number(config, dir, "residual_multiplier", 1.0, &rm))) return st;
    if ((st = pos_number(config, dir, "logits_scaling", 1.0, &ls))) return st;
    o->embed_scale = (float)em;
    o->attn_scale = (float)am;
    o->residual_scale = (float)rm;
    o->logits_scale = (float)(1.0 / ls);
    (void)cfg;
    return MX_OK;
}

const mx_family mx_family_granite = {{"granite", "GraniteForCausalLM", "embedding/attention/residual/logits multipliers"}, granite_config};
