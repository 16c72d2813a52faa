/* models/common.h: what every model family file shares: building mx_weight/mx_vec from
 * checkpoint tensors with shape checks, random weights for benchmarks, config.json parsing of the
 * common fields, RoPE frequency tables. Internal to src/models. */
#ifndef MLXCEL_MODELS_COMMON_H
#define MLXCEL_MODELS_COMMON_H

#include "mlxcel/io.h"
#include "mlxcel/model.h"

/* Where weights come from: a checkpoint, or random data of the right shape. */
typedef struct mx_wsrc {
    mx_checkpoint *ck;          /* NULL for random */
    int q_bits, q_group;        /* random: quantization (0 = dense) */
    mx_dtype dtype;             /* random: dense dtype */
    uint64_t rng;
    void **owned; int n_owned, cap_owned;   /* random: buffers to free */
} mx_wsrc;

/* Linear weight `<prefix>.weight` (+ `.scales`/`.biases` when quantized, + `.bias` if present or
 * required) of shape [rows, cols]. want_bias: 0 no, 1 required, 2 optional. */
mx_status mx_wsrc_linear(mx_wsrc *s, const char *prefix, int64_t rows, int64_t cols, int want_bias, mx_weight *w);
/* Stacked expert weights (mlx-lm's switch_mlp layout): `<prefix>.weight` of shape
 * [n_experts, rows, cols] (+ `.scales`/`.biases` [n_experts, rows, groups] when quantized); fills
 * w[0..n_experts) with 2-D views of each expert. Random: n_experts independent weights. */
mx_status mx_wsrc_experts(mx_wsrc *s, const char *prefix, int n_experts, int64_t rows, int64_t cols, mx_weight *w);
/* Experts stored for x @ W (gpt-oss): `<name>` [n_experts, in, out * n_parts] whose columns
 * interleave the parts (column o * n_parts + p is part p's output o) and `<name>_bias`
 * [n_experts, out * n_parts]; fills w[p * n_experts + e] with transposed [out, in] copies (owned
 * by s) with their biases. Random: n_parts * n_experts weights with biases. */
mx_status mx_wsrc_experts_t(mx_wsrc *s, const char *name, int n_experts, int64_t in, int64_t out, int n_parts, mx_weight *w);
/* Vector `<name>` of n elements; random: filled with `fill`. */
mx_status mx_wsrc_vec(mx_wsrc *s, const char *name, int64_t n, float fill, mx_vec *v);
/* The same as a malloc'ed f32 array (for values the host uses: router biases, attention sinks). */
mx_status mx_wsrc_vec_f32(mx_wsrc *s, const char *name, int64_t n, float fill, float **out);
bool mx_wsrc_has(mx_wsrc *s, const char *name);
void mx_wsrc_free(mx_wsrc *s);

/* Common config fields. Fills cfg; returns MX_ERR_FORMAT with a message on missing/bad fields. */
mx_status mx_parse_common_config(json_t *cfg, const char *dir, mx_model_config *out);
/* RoPE inverse frequencies for rot_dim dims with rope_theta and rope scaling from config
 * ("rope_parameters" or "rope_scaling": default, linear, llama3). malloc'ed [rot_dim/2]. */
mx_status mx_rope_inv_freq(json_t *cfg, int rot_dim, float **out);
/* The cos/sin scale of the rope scaling in cfg: YaRN's attention factor (attention_factor, or
 * 0.1 ln(factor) + 1, or the mscale / mscale_all_dim ratio), else 1. */
float mx_rope_attn_factor(json_t *cfg);

#endif
