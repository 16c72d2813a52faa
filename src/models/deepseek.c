/* models/deepseek.c: the deepseek_v3 family: multi-head latent attention (optional q LoRA with
 * q_a_layernorm, kv_a_proj_with_mqa -> kv_a_layernorm -> kv_b_proj, per-head K = [k_rope, k_nope]
 * expanded from the latent, softmax scale over qk_nope + qk_rope, YaRN mscale), dense MLP on the
 * first first_k_dense_replace layers, then MoE with sigmoid group-limited routing
 * (e_score_correction_bias, n_group / topk_group, norm_topk_prob, routed_scaling_factor) and
 * shared experts. Only configuration lives here; the forward pass is models/decoder.c. */
#include "models/decoder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static mx_status get_int(json_t *config, const char *dir, const char *key, bool nullable, int def, int lo, int hi, int *out) {
    json_t *v = json_object_get(config, key);
    if (!v || json_is_null(v)) {
        if (def < 0 && !nullable) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: missing \"%s\"", dir, key);
        *out = def < 0 ? 0 : def;
        return MX_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"%s\" must be an integer in [%d, %d]", dir, key, lo, hi);
    *out = (int)json_integer_value(v);
    return MX_OK;
}

static mx_status deepseek_v3_config(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *o) {
    mx_status st;
    json_t *ab = json_object_get(config, "attention_bias");
    if (ab && !json_is_null(ab) && !json_is_boolean(ab)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"attention_bias\" must be true or false", dir);
    o->qkv_bias = o->o_bias = ab && json_is_true(ab);
    o->mla = true;
    if ((st = get_int(config, dir, "q_lora_rank", true, -1, 1, 1 << 16, &o->q_lora))) return st;
    if ((st = get_int(config, dir, "kv_lora_rank", false, -1, 1, 1 << 16, &o->kv_lora))) return st;
    if ((st = get_int(config, dir, "qk_nope_head_dim", false, -1, 1, 4096, &o->qk_nope))) return st;
    if ((st = get_int(config, dir, "qk_rope_head_dim", false, -1, 2, 4096, &o->qk_rope))) return st;
    if ((st = get_int(config, dir, "v_head_dim", false, -1, 1, 4096, &o->v_dim))) return st;
    if (o->qk_rope % 2) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"qk_rope_head_dim\" must be even", dir);
    if (o->v_dim > o->qk_nope + o->qk_rope)
        return mx_errorf(MX_ERR_UNSUPPORTED, "%s/config.json: \"v_head_dim\" %d larger than qk_nope_head_dim + qk_rope_head_dim is not supported", dir, o->v_dim);
    cfg->head_dim = o->qk_nope + o->qk_rope;
    cfg->n_kv_heads = cfg->n_heads;   /* K and V are expanded per head */
    json_t *ri = json_object_get(config, "rope_interleave");
    if (ri && !json_is_null(ri) && !json_is_boolean(ri)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"rope_interleave\" must be true or false", dir);
    o->rope_interleave = !ri || json_is_null(ri) || json_is_true(ri);
    /* softmax scale: qk_head_dim^-0.5, times mscale^2 under YaRN with mscale_all_dim */
    o->attn_scale = 1.0f / sqrtf((float)cfg->head_dim);
    json_t *rp = json_object_get(config, "rope_parameters");
    if (!json_is_object(rp)) rp = json_object_get(config, "rope_scaling");
    if (json_is_object(rp)) {
        json_t *ty = json_object_get(rp, "rope_type"), *ma = json_object_get(rp, "mscale_all_dim"), *fa = json_object_get(rp, "factor");
        if (!json_is_string(ty)) ty = json_object_get(rp, "type");
        if (json_is_string(ty) && !strcmp(json_string_value(ty), "yarn") && json_is_number(ma) && json_number_value(ma) != 0 &&
            json_is_number(fa) && json_number_value(fa) > 1) {
            double ms = 0.1 * json_number_value(ma) * log(json_number_value(fa)) + 1.0;
            o->attn_scale = (float)(o->attn_scale * ms * ms);
        }
    }
    /* MoE */
    int first_dense = 0, n_shared = 0;
    if ((st = get_int(config, dir, "n_routed_experts", false, -1, 1, 1024, &o->n_experts))) return st;
    if ((st = get_int(config, dir, "num_experts_per_tok", false, -1, 1, 64, &o->top_k))) return st;
    if ((st = get_int(config, dir, "moe_intermediate_size", false, -1, 1, 1 << 22, &o->moe_inter))) return st;
    if ((st = get_int(config, dir, "n_shared_experts", true, 0, 0, 64, &n_shared))) return st;
    if ((st = get_int(config, dir, "first_k_dense_replace", true, 0, 0, 1 << 16, &first_dense))) return st;
    if ((st = get_int(config, dir, "n_group", true, 1, 1, 1024, &o->n_group))) return st;
    if ((st = get_int(config, dir, "topk_group", true, 1, 1, 1024, &o->topk_group))) return st;
    if (o->n_experts % o->n_group) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"n_group\" %d does not divide n_routed_experts %d", dir, o->n_group, o->n_experts);
    if (o->topk_group > o->n_group) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"topk_group\" exceeds n_group", dir);
    if (o->top_k > o->topk_group * (o->n_experts / o->n_group))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"num_experts_per_tok\" %d exceeds the experts of the kept groups", dir, o->top_k);
    o->routed_scale = 1.0f;
    json_t *rs = json_object_get(config, "routed_scaling_factor");
    if (rs && !json_is_null(rs)) {
        if (!json_is_number(rs) || !(json_number_value(rs) > 0)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"routed_scaling_factor\" must be a positive number", dir);
        o->routed_scale = (float)json_number_value(rs);
    }
    json_t *nt = json_object_get(config, "norm_topk_prob");
    if (nt && !json_is_null(nt) && !json_is_boolean(nt)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"norm_topk_prob\" must be true or false", dir);
    o->norm_topk = nt && json_is_true(nt);
    o->ds_route = true;
    o->shared_inter = n_shared * o->moe_inter;
    o->moe_prefix = "mlp";
    o->expert_names[0] = "gate_proj"; o->expert_names[1] = "up_proj"; o->expert_names[2] = "down_proj";
    if (!(o->dense_layers = calloc((size_t)cfg->n_layers, 1))) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    for (int l = 0; l < cfg->n_layers; l++) o->dense_layers[l] = l < first_dense;
    return mx_decoder_act(config, dir, "hidden_act", &o->act);
}

const mx_family mx_family_deepseek_v3 = {{"deepseek_v3", "DeepseekV3ForCausalLM", "MLA attention; MoE (sigmoid group routing, shared experts)"}, deepseek_v3_config};
