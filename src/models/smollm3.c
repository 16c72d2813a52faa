/* models/smollm3.c: the SmolLM3 family: a Llama block where the layers marked 0 in no_rope_layers
 * (or every no_rope_layer_interval-th layer) skip RoPE (NoPE); optional sliding-window layers
 * (use_sliding_window with layer_types). Only configuration lives here; the forward pass is
 * models/decoder.c. */
#include "models/decoder.h"

#include <stdlib.h>
#include <string.h>

static mx_status smollm3_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    mx_status st = mx_decoder_act(config, dir, "hidden_act", &o->act);
    if (st) return st;
    o->qkv_bias = o->o_bias = json_is_true(json_object_get(config, "attention_bias"));
    o->mlp_bias = json_is_true(json_object_get(config, "mlp_bias"));
    int n = cfg->n_layers;
    o->layer_flags = calloc((size_t)n, 1);
    if (!o->layer_flags) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    json_t *nr = json_object_get(config, "no_rope_layers");
    if (nr && !json_is_null(nr)) {
        if (!json_is_array(nr) || (int)json_array_size(nr) != n)
            return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"no_rope_layers\" must list %d flags", dir, n);
        for (int l = 0; l < n; l++) {
            json_t *f = json_array_get(nr, (size_t)l);
            if (!json_is_integer(f) || (json_integer_value(f) != 0 && json_integer_value(f) != 1))
                return mx_errorf(MX_ERR_FORMAT, "%s/config.json: no_rope_layers[%d] must be 0 or 1", dir, l);
            if (!json_integer_value(f)) o->layer_flags[l] |= MX_LAYER_NO_ROPE;
        }
    } else {
        json_t *iv = json_object_get(config, "no_rope_layer_interval");
        json_int_t k = json_is_integer(iv) ? json_integer_value(iv) : 4;
        if (k < 1) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"no_rope_layer_interval\" must be positive", dir);
        for (int l = 0; l < n; l++) if ((l + 1) % k == 0) o->layer_flags[l] |= MX_LAYER_NO_ROPE;
    }
    json_t *use = json_object_get(config, "use_sliding_window"), *w = json_object_get(config, "sliding_window");
    if (json_is_true(use) && w && !json_is_null(w)) {
        if (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > (1 << 30))
            return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"sliding_window\" must be a positive integer", dir);
        o->sliding_window = (int)json_integer_value(w);
        json_t *types = json_object_get(config, "layer_types");
        if (!json_is_array(types) || (int)json_array_size(types) != n)
            return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"layer_types\" must list %d layer types", dir, n);
        for (int l = 0; l < n; l++) {
            const char *t = json_string_value(json_array_get(types, (size_t)l));
            if (t && !strcmp(t, "sliding_attention")) o->layer_flags[l] |= MX_LAYER_SLIDING;
            else if (!t || strcmp(t, "full_attention"))
                return mx_errorf(MX_ERR_FORMAT, "%s/config.json: layer_types[%d] must be \"sliding_attention\" or \"full_attention\"", dir, l);
        }
    }
    return MX_OK;
}

const mx_family mx_family_smollm3 = {{"smollm3", "SmolLM3ForCausalLM", "NoPE layers (no_rope_layers)"}, smollm3_config};
