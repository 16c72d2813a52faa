/* models/starcoder2.c: the StarCoder2 family: LayerNorm with bias (norm_epsilon), biases on
 * q/k/v/o and the MLP (use_bias), a non-gated MLP (mlp.c_fc -> GELU -> mlp.c_proj), optional
 * sliding window. Only configuration lives here; the forward pass is models/decoder.c. */
#include "models/decoder.h"

static mx_status starcoder2_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    mx_status st = mx_decoder_act(config, dir, "hidden_act", &o->act);
    if (st) return st;
    json_t *ub = json_object_get(config, "use_bias");
    bool bias = !ub || json_is_null(ub) || json_is_true(ub);   /* transformers' default: true */
    o->qkv_bias = o->o_bias = o->mlp_bias = bias;
    o->layer_norm = o->plain_mlp = true;
    json_t *e = json_object_get(config, "norm_epsilon");
    if (e && !json_is_null(e)) {
        if (!json_is_number(e) || !(json_number_value(e) >= 0 && json_number_value(e) < 1))
            return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"norm_epsilon\" must be a number in [0, 1)", dir);
        cfg->norm_eps = (float)json_number_value(e);
    } else {
        cfg->norm_eps = 1e-5f;
    }
    json_t *w = json_object_get(config, "sliding_window");
    if (w && !json_is_null(w) && (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > (1 << 30)))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"sliding_window\" must be a positive integer", dir);
    o->sliding_window = json_is_integer(w) ? (int)json_integer_value(w) : 0;
    return MX_OK;
}

const mx_family mx_family_starcoder2 = {{"starcoder2", "Starcoder2ForCausalLM", "LayerNorm with bias, non-gated GELU MLP, biases"}, starcoder2_config};
