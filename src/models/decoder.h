/* models/decoder.h: the shared transformer decoder (embedding, N blocks of attention + MLP with
 * residuals, final norm, LM head) that family files configure through mx_decoder_opts: pre-norm
 * Llama blocks by default; sandwich/post norms, (1 + w) RMSNorm, LayerNorm, fused projections,
 * non-gated MLP, multipliers, softcapping and per-layer sliding window / RoPE table / NoPE for the
 * other families; sparse MoE blocks (host-side routing) for qwen3_moe, mixtral, gpt_oss (attention
 * sinks, clamped SwiGLU) and deepseek_v3 (with multi-head latent attention). Internal. */
#ifndef MLXCEL_MODELS_DECODER_H
#define MLXCEL_MODELS_DECODER_H

#include "models/common.h"

typedef struct mx_decoder_opts {
    bool qkv_bias;          /* q/k/v projections have a bias (qwen2; llama attention_bias) */
    bool o_bias;            /* o_proj has a bias (llama attention_bias) */
    bool mlp_bias;          /* gate/up/down have a bias (llama mlp_bias) */
    bool qk_norm;           /* RMSNorm over head_dim on q and k before RoPE (qwen3) */
    int sliding_window;     /* 0: none */
    mx_act act;
    /* Extensions for the Gemma-like families; zero keeps the Llama behaviour. */
    float norm_add_one;     /* RMSNorms scale by (add_one + weight): 1 for gemma */
    float embed_scale;      /* 0: none; else the embeddings are multiplied by it (gemma: sqrt(hidden)) */
    bool sandwich_norms;    /* gemma2/3: post_attention_layernorm on the attention output,
                             * pre_feedforward_layernorm before and post_feedforward_layernorm after the MLP */
    float attn_scale;       /* 0: 1/sqrt(head_dim) */
    float attn_softcap;     /* 0: none (gemma2 attn_logit_softcapping) */
    float final_softcap;    /* 0: none (gemma2 final_logit_softcapping) */
    unsigned char *layer_flags;   /* NULL, or [n_layers] of MX_LAYER_* malloc'ed by configure; the
                                   * model frees it. When set, only MX_LAYER_SLIDING layers use
                                   * sliding_window, and they use local_rope_cfg. */
    json_t *rope_cfg;       /* NULL: RoPE from config.json; else a config-like object (owned ref) */
    json_t *local_rope_cfg; /* RoPE of sliding layers; NULL: as the others (owned ref) */
    int rot_dim;            /* rotated dims per head (partial rotary); 0: head_dim */
    bool fused_qkv;         /* phi3: one self_attn.qkv_proj, rows q | k | v */
    bool fused_gate_up;     /* phi3: one mlp.gate_up_proj, rows gate | up */
    float residual_scale;   /* granite residual_multiplier: blocks add out * this; 0: 1 */
    float logits_scale;     /* granite: logits times this (1 / logits_scaling); 0: 1 */
    bool no_pre_norms;      /* olmo2 (with sandwich_norms): only the norms after attention and MLP */
    bool qk_norm_full;      /* olmo2: q/k RMSNorm over the whole projection, not per head */
    bool layer_norm;        /* starcoder2: LayerNorm with weight and bias instead of RMSNorm */
    bool plain_mlp;         /* starcoder2: mlp.c_fc -> act -> mlp.c_proj (no gate) */
    /* Mixture of experts (qwen3_moe, mixtral); n_experts 0: dense MLP everywhere. */
    int n_experts;          /* experts of each sparse layer */
    int top_k;              /* experts per token */
    int moe_inter;          /* each expert's intermediate size */
    bool norm_topk;         /* renormalize the top-k router probabilities to sum 1 */
    const char *moe_prefix; /* module of the sparse block: "mlp" or "block_sparse_moe" */
    const char *expert_names[3];   /* HF per-expert names of gate, up, down ("gate_proj" or "w1"...) */
    unsigned char *dense_layers;   /* NULL, or [n_layers] malloc'ed by configure (the model frees
                                    * it): nonzero for layers with a dense MLP (mlp_only_layers) */
    /* gpt-oss: attention sinks and its MoE (router "mlp.router" with bias, experts stacked for
     * x @ W with biases and gate/up interleaved in mlp.experts.gate_up_proj, clamped SwiGLU
     * (up + 1) * gate * sigmoid(alpha * gate) with gate <= limit, |up| <= limit). */
    /* deepseek_v3: multi-head latent attention (cfg head_dim = qk_nope + qk_rope, n_kv_heads =
     * n_heads; per-head K and V are expanded from the latent, V padded to head_dim for the
     * attention op and the padding dropped after), sigmoid group-limited routing with
     * e_score_correction_bias, routed_scaling_factor and shared experts. */
    bool mla;
    int q_lora, kv_lora, qk_nope, qk_rope, v_dim;   /* q_lora 0: a plain q_proj */
    bool rope_interleave;   /* the rope dims pair (2i, 2i+1): de-interleaved before the NeoX rope */
    bool ds_route;          /* sigmoid + correction bias, n_group / topk_group, routed scaling */
    int n_group, topk_group;
    float routed_scale;
    int shared_inter;       /* 0: no shared experts; else mlp.shared_experts of this size */
    bool attn_sinks;        /* per-layer self_attn.sinks [n_heads] */
    bool oss_experts;
    float swiglu_alpha, swiglu_limit;
} mx_decoder_opts;

enum { MX_LAYER_SLIDING = 1, MX_LAYER_NO_ROPE = 2 };

/* hidden_act / hidden_activation of config.json (`first` is looked up first). */
mx_status mx_decoder_act(json_t *config, const char *dir, const char *first, mx_act *act);

/* A family's loader: read family-specific config into opts (cfg already has the common fields). */
typedef mx_status (*mx_family_config_fn)(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *opts);

typedef struct mx_family {
    mx_arch_info info;
    mx_family_config_fn configure;
} mx_family;

/* A required integer in [lo, hi] from config.json under `key` (or `alt` when key is absent or
 * null); MX_ERR_FORMAT naming the key otherwise. */
mx_status mx_cfg_count(json_t *config, const char *dir, const char *key, const char *alt, int lo, int hi, int *out);

/* Registry (registry.c). */
const mx_family *mx_family_find(const char *model_type);

/* Build the decoder from weights in `src` (checkpoint or random). Takes ownership of src's
 * owned buffers. */
mx_status mx_decoder_build(json_t *config, const char *dir, mx_wsrc *src, mx_backend *be, mx_model **out);

#endif
