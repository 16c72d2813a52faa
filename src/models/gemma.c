/* models/gemma.c: the Gemma 2 and Gemma 3 (text) families: embeddings scaled by sqrt(hidden),
 * RMSNorm with (1 + weight), sandwich norms around attention and MLP, GELU-tanh gated MLP,
 * attention scale from query_pre_attn_scalar, sliding-window layers (layer_types or the
 * sliding window pattern); gemma2 adds attention and final logit softcapping, gemma3 q/k norms and
 * a separate RoPE base for the sliding layers. Only configuration lives here; the forward pass is
 * models/decoder.c. Not the multimodal gemma3 wrapper (model_type "gemma3"). */
#include "models/decoder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A non-negative number, or 0 when absent/null. */
static mx_status opt_number(json_t *config, const char *dir, const char *key, double *out) {
    json_t *v = json_object_get(config, key);
    *out = 0;
    if (!v || json_is_null(v)) return MX_OK;
    if (!json_is_number(v) || !(json_number_value(v) >= 0))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"%s\" must be a non-negative number", dir, key);
    *out = json_number_value(v);
    return MX_OK;
}

/* Which layers use the sliding window: layer_types, else the pattern (every pattern-th layer is
 * global), else `alternate` (even layers sliding, as gemma2). */
static mx_status sliding_layers(json_t *config, const char *dir, const mx_model_config *cfg, mx_decoder_opts *o) {
    json_t *w = json_object_get(config, "sliding_window");
    if (w && !json_is_null(w) && (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > (1 << 30)))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"sliding_window\" must be a positive integer", dir);
    o->sliding_window = json_is_integer(w) ? (int)json_integer_value(w) : 0;
    o->layer_flags = calloc((size_t)cfg->n_layers, 1);
    if (!o->layer_flags) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    json_t *types = json_object_get(config, "layer_types");
    json_t *pat = json_object_get(config, "sliding_window_pattern");
    if (!json_is_integer(pat)) pat = json_object_get(config, "_sliding_window_pattern");
    if (types && !json_is_null(types)) {
        if (!json_is_array(types) || (int)json_array_size(types) != cfg->n_layers)
            return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"layer_types\" must list %d layer types", dir, cfg->n_layers);
        for (int l = 0; l < cfg->n_layers; l++) {
            const char *t = json_string_value(json_array_get(types, (size_t)l));
            if (t && !strcmp(t, "sliding_attention")) o->layer_flags[l] = MX_LAYER_SLIDING;
            else if (!t || strcmp(t, "full_attention"))
                return mx_errorf(MX_ERR_FORMAT, "%s/config.json: layer_types[%d] must be \"sliding_attention\" or \"full_attention\"", dir, l);
        }
    } else if (json_is_integer(pat)) {
        json_int_t p = json_integer_value(pat);
        if (p < 1) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"sliding_window_pattern\" must be positive", dir);
        for (int l = 0; l < cfg->n_layers; l++) o->layer_flags[l] = (l + 1) % p ? MX_LAYER_SLIDING : 0;
    } else {
        for (int l = 0; l < cfg->n_layers; l++) o->layer_flags[l] = l % 2 ? 0 : MX_LAYER_SLIDING;
    }
    if (!o->sliding_window)
        for (int l = 0; l < cfg->n_layers; l++) o->layer_flags[l] = 0;
    return MX_OK;
}

static mx_status gemma_common(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    mx_status st;
    if ((st = mx_decoder_act(config, dir, "hidden_activation", &o->act))) return st;
    o->norm_add_one = 1.0f;
    /* transformers rounds sqrt(hidden) to the activation dtype; ours is f32 (as the goldens) */
    o->embed_scale = sqrtf((float)cfg->hidden_size);
    o->sandwich_norms = true;
    o->qkv_bias = o->o_bias = json_is_true(json_object_get(config, "attention_bias"));
    double qs, sc;
    if ((st = opt_number(config, dir, "query_pre_attn_scalar", &qs))) return st;
    o->attn_scale = 1.0f / sqrtf(qs > 0 ? (float)qs : (float)cfg->head_dim);
    if ((st = opt_number(config, dir, "attn_logit_softcapping", &sc))) return st;
    o->attn_softcap = (float)sc;
    if ((st = opt_number(config, dir, "final_logit_softcapping", &sc))) return st;
    o->final_softcap = (float)sc;
    return sliding_layers(config, dir, cfg, o);
}

static mx_status gemma2_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    return gemma_common(config, dir, cfg, o);
}

/* {"rope_parameters": p} */
static mx_status wrap_rope(json_t *p, json_t **out) {
    json_t *o = json_object();
    if (!o || json_object_set(o, "rope_parameters", p)) { if (o) json_decref(o); return mx_errorf(MX_ERR_NOMEM, "out of memory"); }
    *out = o;
    return MX_OK;
}

static mx_status gemma3_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    mx_status st = gemma_common(config, dir, cfg, o);
    if (st) return st;
    o->qk_norm = true;
    /* RoPE: transformers 5 nests one table per layer type in rope_parameters; older configs have
     * rope_theta (+ rope_scaling) for global layers and rope_local_base_freq for sliding ones. */
    json_t *rp = json_object_get(config, "rope_parameters");
    json_t *full = json_is_object(rp) ? json_object_get(rp, "full_attention") : NULL;
    json_t *slide = json_is_object(rp) ? json_object_get(rp, "sliding_attention") : NULL;
    if (json_is_object(full) || json_is_object(slide)) {
        if (!json_is_object(full) || !json_is_object(slide))
            return mx_errorf(MX_ERR_FORMAT, "%s/config.json: rope_parameters needs both \"full_attention\" and \"sliding_attention\"", dir);
        if ((st = wrap_rope(full, &o->rope_cfg))) return st;
        return wrap_rope(slide, &o->local_rope_cfg);
    }
    double base;
    if ((st = opt_number(config, dir, "rope_local_base_freq", &base))) return st;
    o->local_rope_cfg = json_pack("{s:f}", "rope_theta", base > 0 ? base : 10000.0);
    if (!o->local_rope_cfg) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    return MX_OK;
}

const mx_family mx_family_gemma2 = {{"gemma2", "Gemma2ForCausalLM", "sandwich norms, attention/final softcapping, alternating sliding window"}, gemma2_config};
const mx_family mx_family_gemma3 = {{"gemma3_text", "Gemma3ForCausalLM", "sandwich norms, q/k norm, sliding layers with local RoPE base"}, gemma3_config};
