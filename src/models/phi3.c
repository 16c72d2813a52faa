/* models/phi3.c: the Phi-3 family: a Llama block with fused self_attn.qkv_proj (rows q | k | v)
 * and mlp.gate_up_proj (rows gate | up), partial rotary (partial_rotary_factor) and an optional
 * sliding window. Only configuration lives here; the forward pass is models/decoder.c. Not the
 * longrope/su RoPE scaling of the 128k models (rejected by the RoPE table builder). */
#include "models/decoder.h"

static mx_status phi3_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    mx_status st = mx_decoder_act(config, dir, "hidden_act", &o->act);
    if (st) return st;
    o->fused_qkv = o->fused_gate_up = true;
    json_t *w = json_object_get(config, "sliding_window");
    if (w && !json_is_null(w) && (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > (1 << 30)))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"sliding_window\" must be a positive integer", dir);
    o->sliding_window = json_is_integer(w) ? (int)json_integer_value(w) : 0;
    json_t *rp = json_object_get(config, "rope_parameters");
    json_t *f = json_is_object(rp) ? json_object_get(rp, "partial_rotary_factor") : NULL;
    if (!f) f = json_object_get(config, "partial_rotary_factor");
    if (f && !json_is_null(f)) {
        double x = json_is_number(f) ? json_number_value(f) : -1;
        if (!(x > 0 && x <= 1)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"partial_rotary_factor\" must be in (0, 1]", dir);
        o->rot_dim = (int)(cfg->head_dim * x);
    }
    return MX_OK;
}

const mx_family mx_family_phi3 = {{"phi3", "Phi3ForCausalLM", "fused qkv and gate/up projections, partial rotary"}, phi3_config};
