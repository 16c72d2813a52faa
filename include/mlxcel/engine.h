/* mlxcel/engine.h: what turns a model into generated text: the KV block allocator, the sampler
 * chain, stop-string matching and a single-sequence generation loop (used by the CLI). The
 * continuous-batching scheduler for the server lives here too (engine/scheduler.c, see
 * include/mlxcel/scheduler.h). It knows nothing of HTTP or JSON wire formats.
 * Thread safety: each object is used by one thread at a time unless stated. */
#ifndef MLXCEL_ENGINE_H
#define MLXCEL_ENGINE_H

#include "mlxcel/core.h"
#include "mlxcel/model.h"

/* ---- KV blocks ----------------------------------------------------------------------------- */
typedef struct mx_kv_alloc mx_kv_alloc;
mx_kv_alloc *mx_kv_alloc_new(int n_blocks);
void mx_kv_alloc_free(mx_kv_alloc *a);
int mx_kv_alloc_n_free(const mx_kv_alloc *a);
/* Grow a sequence's block table so it covers n_positions; returns false if out of blocks
 * (the table is left as it was). table has room for max_blocks entries; *n_blocks in/out. */
bool mx_kv_alloc_reserve(mx_kv_alloc *a, int32_t *table, int *n_blocks, int max_blocks,
                         int block_size, int n_positions);
void mx_kv_alloc_release(mx_kv_alloc *a, int32_t *table, int *n_blocks);

/* ---- sampling ------------------------------------------------------------------------------ */
typedef struct mx_logit_bias { int32_t id; float bias; } mx_logit_bias;

typedef struct mx_sampling {
    float temperature;          /* 0: greedy */
    int top_k;                  /* 0: off */
    float top_p;                /* 1: off */
    float min_p;                /* 0: off */
    float repeat_penalty;       /* 1: off (llama.cpp style, over the last repeat_last_n tokens) */
    int repeat_last_n;          /* 64 by default; -1: whole history */
    float presence_penalty, frequency_penalty;  /* OpenAI style, 0: off */
    uint64_t seed;
    const mx_logit_bias *logit_bias; int n_logit_bias;
    int n_logprobs;             /* top logprobs wanted (0: none) */
} mx_sampling;
void mx_sampling_default(mx_sampling *s);
/* Whether a row's top-1 alone decides every draw with these parameters: greedy, with no logit
 * bias, no penalties and no log-probabilities (then the device may pick the token itself). */
bool mx_sampling_top1_decides(const mx_sampling *p);

typedef struct mx_sampler mx_sampler;
mx_sampler *mx_sampler_new(const mx_sampling *params, int vocab_size);
void mx_sampler_free(mx_sampler *s);
typedef struct mx_token_logprob { int32_t id; float logprob; } mx_token_logprob;
/* Pick the next token from logits [vocab] (modified in place) given the history of ids seen so
 * far (prompt + generated). If params->n_logprobs > 0 (or chosen_logprob non-NULL), reports the
 * chosen token's log-probability and the top n alternatives under the unmodified distribution
 * (top must have room for n_logprobs). */
int32_t mx_sampler_sample(mx_sampler *s, float *logits, const int32_t *history, int n_history,
                          float *chosen_logprob, mx_token_logprob *top);
/* The same draw from a row's candidates (mx_model_forward_topk / the backend's topk op): vals[k]
 * sorted descending (ties lower id first) with their ids, lse the log-sum-exp of the whole row.
 * Returns exactly what mx_sampler_sample would on the full row (token, logprobs, RNG use), or
 * sets *need_full, returns -1 and changes nothing (no RNG drawn) when the candidates cannot
 * decide it exactly: sampling with top_k 0 or > k, n_logprobs > k, a NaN in the row, or logit
 * bias / penalties that could lift a token from outside the candidates into the kept set. Then
 * read the full row and call mx_sampler_sample. Greedy without bias/penalties never needs it. */
int32_t mx_sampler_sample_topk(mx_sampler *s, const float *vals, const int32_t *ids, int k, float lse,
                               const int32_t *history, int n_history, float *chosen_logprob,
                               mx_token_logprob *top, bool *need_full);

/* ---- stop strings --------------------------------------------------------------------------- */
/* Incremental stop-string matcher: feed generated text; it releases text that can no longer be
 * the start of a stop string, and holds back a possible partial match. */
typedef struct mx_stop mx_stop;
mx_stop *mx_stop_new(const char *const *stops, int n);
void mx_stop_free(mx_stop *s);
/* Append `text`; safe text is appended to out. Returns true when a stop string matched (the
 * text before it is released, the stop string and anything after is dropped). */
bool mx_stop_feed(mx_stop *s, const char *text, size_t len, mx_buf *out);
/* End of generation without a match: release what was held back. */
void mx_stop_flush(mx_stop *s, mx_buf *out);

/* ---- single-sequence generation (CLI) ------------------------------------------------------- */
typedef struct mx_gen_opts {
    int n_predict;              /* tokens to generate at most */
    bool ignore_eos;
    mx_sampling sampling;
    int prefill_chunk;          /* tokens per prefill forward (0: 512) */
} mx_gen_opts;

typedef struct mx_gen_stats {
    int prompt_tokens, gen_tokens;
    double prompt_s, decode_s;  /* wall time of prefill, and of the decode steps */
    bool hit_eos;
} mx_gen_stats;

/* Called for each generated token; return false to stop. */
typedef bool (*mx_gen_cb)(void *ud, int32_t id);

/* Prepare `m` (if not yet) for one sequence of up to max_ctx positions. */
mx_status mx_gen_prepare(mx_model *m, int max_ctx, int prefill_chunk);
/* Generate after `prompt` (n_prompt >= 1). Generated ids are appended to *out (malloc'ed). */
mx_status mx_generate(mx_model *m, const int32_t *prompt, int n_prompt, const mx_gen_opts *o,
                      mx_gen_cb cb, void *ud, int32_t **out, int *n_out, mx_gen_stats *stats);
/* Teacher-forced logits of every position: logits[n, vocab] (malloc'ed). */
mx_status mx_teacher_logits(mx_model *m, const int32_t *ids, int n, int chunk, float **logits);

#endif
