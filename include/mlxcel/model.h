/* mlxcel/model.h: load a checkpoint into a model of a supported family and run its forward pass
 * over a batch of tokens (mixed prefill and decode of several sequences, each with a KV block
 * table: the vLLM shape). It knows which tensors a family has and how they connect; it does not
 * know which device runs the ops (mx_backend), nor requests, sampling or HTTP.
 *
 * Ownership: the model keeps the checkpoint open (weights stay mmap'ed, never expanded).
 * Thread safety: one forward at a time per model. */
#ifndef MLXCEL_MODEL_H
#define MLXCEL_MODEL_H

#include "mlxcel/backend.h"
#include "mlxcel/core.h"
#include <jansson.h>

#define MX_MAX_EOS 8

typedef struct mx_model_config {
    char model_type[32];
    int vocab_size, hidden_size, n_layers, n_heads, n_kv_heads, head_dim, intermediate_size;
    float norm_eps;
    int max_position_embeddings;
    bool tie_word_embeddings;
    int32_t bos_id;                 /* -1 if none */
    int32_t eos_ids[MX_MAX_EOS];    /* from config.json and generation_config.json */
    int n_eos;
    int q_bits, q_group_size;       /* default quantization (0 if not quantized) */
} mx_model_config;

typedef struct mx_model mx_model;

/* One supported architecture, for `mlxcel arch` and error messages. */
typedef struct mx_arch_info {
    const char *model_type;         /* config.json "model_type" */
    const char *hf_class;           /* e.g. "LlamaForCausalLM" */
    const char *notes;
} mx_arch_info;
const mx_arch_info *mx_model_archs(int *n);
/* "llama, qwen2, ..." (static buffer) */
const char *mx_model_arch_names(void);

/* Load DIR (config.json + safetensors) onto backend `be` (borrowed; must outlive the model). */
mx_status mx_model_load(const char *dir, mx_backend *be, mx_model **out);
/* Build a model of config.json's shape with random weights in memory (for `bench --random`):
 * q_bits 0 -> dense `dtype` (BF16/F16/F32), else MLX affine q_bits/q_group_size. */
mx_status mx_model_load_random(json_t *config, int q_bits, int q_group_size, mx_dtype dtype,
                               uint64_t seed, mx_backend *be, mx_model **out);
void mx_model_free(mx_model *m);
const mx_model_config *mx_model_cfg(const mx_model *m);
mx_backend *mx_model_backend(mx_model *m);
/* Bytes of weight data the forward pass reads per token (for bandwidth figures). */
size_t mx_model_weight_bytes(const mx_model *m);

/* Allocate the paged KV cache (n_blocks of block_size positions per layer) and the compute
 * arena for batches of up to max_tokens tokens. Call once before forward. */
mx_status mx_model_prepare(mx_model *m, int n_blocks, int block_size, int max_tokens);
int mx_model_block_size(const mx_model *m);
int mx_model_n_blocks(const mx_model *m);
int mx_model_max_tokens(const mx_model *m);   /* batch size limit set by prepare */

typedef struct mx_batch {
    int n_tokens;
    const int32_t *tokens;      /* [n_tokens] */
    const int32_t *pos;         /* [n_tokens] */
    const int32_t *seq;         /* [n_tokens] row of block_tables */
    int n_seqs, max_blocks;
    const int32_t *block_tables;/* [n_seqs, max_blocks] */
    int n_logits;
    const int32_t *logit_rows;  /* [n_logits] token rows whose logits are wanted */
    int n_decode;               /* the first n_decode tokens are decode steps (one per sequence):
                                 * their matmuls run exact; the other (prompt) rows may take the
                                 * backend's fast path. Either way a row's result never depends on
                                 * the rest of the batch, so greedy output is batch-independent. */
} mx_batch;

/* Run the batch; write logits [n_logits, vocab] (f32, host) to `logits`. KV slots follow from
 * pos and the block tables. */
mx_status mx_model_forward(mx_model *m, const mx_batch *b, float *logits);
/* The same forward, but the logits stay on the device: each of the n_logits rows is reduced to
 * its k (1..MX_TOPK_MAX) largest values vals[r*k..] (descending, ties lower id first), their ids
 * ids[r*k..] and the row's log-sum-exp lse[r] (the backend's topk op; on the host, a row at a
 * time, when the backend has none). For mx_sampler_sample_topk. */
mx_status mx_model_forward_topk(mx_model *m, const mx_batch *b, int k, float *vals, int32_t *ids, float *lse);
/* Copy logit row `row` (< n_logits) of the last forward or forward_topk to dst[vocab] (host):
 * the exact fallback when the candidates do not decide a draw. Valid until the next forward. */
mx_status mx_model_read_logits(mx_model *m, int row, float *dst);

/* Greedy decoding with the steps chained on the device (a backend with step_chain; CUDA): each
 * step's top-1 (k = 1 of mx_model_forward_topk: the same value, id and lse) stays on the device,
 * and the next step can be launched, taking its tokens from there, before the host reads them,
 * so that the GPU does not wait for the host between steps.
 * mx_model_greedy_launch: forward the decode batch b (n_decode == n_logits == n_tokens <=
 *   MX_CHAIN_MAX, logit_rows[i] == i) and launch its top-1 without waiting. When `chained`, b's
 *   tokens are not read: token i is the id of row i of the last launched step (the backend
 *   chains it on the device when it can; else this waits for those ids and runs the step with
 *   them). At most two launched steps may be waiting; MX_ERR_UNSUPPORTED when the backend or
 *   the batch cannot take this (nothing done; use mx_model_forward_topk).
 * mx_model_greedy_wait: the oldest launched step's n rows of top-1 results (vals, ids, lse).
 *   An id the host rejects (an lse that is NaN) means the chained step after it ran with
 *   another token: call mx_model_greedy_drain and run the rest without chaining.
 * mx_model_greedy_drain: waits for the launched steps and drops their results (the KV cache
 *   keeps what they wrote at their positions); a chained launch then has no step to take its
 *   tokens from. Every other forward, and mx_model_read_logits, does it first. */
mx_status mx_model_greedy_launch(mx_model *m, const mx_batch *b, bool chained);
mx_status mx_model_greedy_wait(mx_model *m, float *vals, int32_t *ids, float *lse);
void mx_model_greedy_drain(mx_model *m);
/* Steps mx_model_greedy_launch chained on the device since the model was made (tests). */
long mx_model_greedy_chained(const mx_model *m);

#endif
