/* models/decoder.h: the shared pre-norm transformer decoder (embedding, N blocks of attention +
 * gated MLP with residuals, final norm, LM head) that family files configure. Internal. */
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
} mx_decoder_opts;

/* A family's loader: read family-specific config into opts (cfg already has the common fields). */
typedef mx_status (*mx_family_config_fn)(json_t *config, const char *dir, mx_model_config *cfg, mx_decoder_opts *opts);

typedef struct mx_family {
    mx_arch_info info;
    mx_family_config_fn configure;
} mx_family;

/* Registry (registry.c). */
const mx_family *mx_family_find(const char *model_type);

/* Build the decoder from weights in `src` (checkpoint or random). Takes ownership of src's
 * owned buffers. */
mx_status mx_decoder_build(json_t *config, const char *dir, mx_wsrc *src, mx_backend *be, mx_model **out);

#endif
