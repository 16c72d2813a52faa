/* mlxcel/scheduler.h: the continuous-batching scheduler. One engine thread owns the model: each
 * step it gathers the next token of every decoding sequence plus chunks of pending prompts into
 * one mx_batch, runs one forward pass, samples per sequence, turns tokens into text (streaming
 * detokenizer, stop strings) and hands the text to each request's consumer. It knows nothing of
 * HTTP or JSON.
 *
 * Ownership: mx_sched borrows the model and tokenizer (they must outlive it). A request (mx_gen)
 * is shared by the engine and its consumer; mx_gen_release drops the consumer's reference.
 * Thread safety: mx_sched_submit, mx_gen_* and mx_sched_stats may be called from any thread. */
#ifndef MLXCEL_SCHEDULER_H
#define MLXCEL_SCHEDULER_H

#include "mlxcel/core.h"
#include "mlxcel/engine.h"
#include "mlxcel/model.h"
#include "mlxcel/tokenizer.h"

#define MX_MAX_TOP_LOGPROBS 20

typedef struct mx_sched_params {
    int n_parallel;       /* sequences processed together (slots) */
    int n_ctx;            /* positions per sequence: prompt + generated */
    int max_queue;        /* requests waiting for a slot; one more -> MX_ERR_BUSY */
    int max_step_tokens;  /* tokens per forward pass (decode tokens + prefill chunks); 0: 512 */
} mx_sched_params;

typedef enum {
    MX_FINISH_NONE = 0,   /* still running */
    MX_FINISH_EOS,        /* end-of-sequence token */
    MX_FINISH_STOP,       /* a stop string matched */
    MX_FINISH_LENGTH,     /* n_predict reached or the context is full */
    MX_FINISH_CANCELLED,  /* mx_gen_cancel */
    MX_FINISH_ERROR,      /* forward pass failed (message in mx_gen_update.error) */
} mx_finish;

typedef struct mx_gen_params {
    const int32_t *prompt; int n_prompt;   /* copied */
    int n_predict;                         /* max generated tokens; -1: until the context is full */
    bool ignore_eos;
    bool cache_prompt;                     /* reuse a free slot's KV for a common prompt prefix */
    bool logprobs;                         /* report each token's logprob (top n: sampling.n_logprobs) */
    mx_sampling sampling;                  /* logit_bias array copied */
    const char *const *stops; int n_stops; /* copied */
} mx_gen_params;

typedef struct mx_gen mx_gen;

/* One generated token, for logprobs and token-id outputs. */
typedef struct mx_gen_token {
    int32_t id;
    float logprob;
    int n_top;
    mx_token_logprob top[MX_MAX_TOP_LOGPROBS];
} mx_gen_token;

/* What a consumer takes from a request: everything since its previous take. Reset with
 * mx_gen_update_clear; free with mx_gen_update_free. */
typedef struct mx_gen_update {
    mx_buf text;                 /* released text: complete UTF-8, stop strings removed */
    mx_gen_token *toks; int n_toks, cap_toks;  /* generated tokens since the last take */
    bool done;
    mx_finish finish;
    char stop_word[256];         /* the stop string that matched (MX_FINISH_STOP) */
    char error[256];
    int n_prompt, n_gen;         /* totals so far */
    int n_cached;                /* prompt tokens whose KV came from an earlier request (not recomputed) */
    int slot;                    /* slot id, -1 while queued */
    double t_prompt_ms, t_gen_ms;/* prompt processing time, generation time so far */
} mx_gen_update;
void mx_gen_update_clear(mx_gen_update *u);
void mx_gen_update_free(mx_gen_update *u);

typedef struct mx_sched mx_sched;

/* Prepare the model's KV cache for n_parallel sequences of n_ctx positions and start the engine
 * thread. */
mx_status mx_sched_new(mx_model *m, const mx_tokenizer *tok, const mx_sched_params *p, mx_sched **out);
/* Stop the engine thread: requests still running or queued end as cancelled and later submits
 * answer MX_ERR_BUSY; the object stays valid until mx_sched_free. */
void mx_sched_shutdown(mx_sched *s);
/* Shuts down (if not done yet) and frees. */
void mx_sched_free(mx_sched *s);

/* Queue a request. MX_ERR_BUSY: the queue is full; MX_ERR_RANGE: the prompt does not fit the
 * context; MX_ERR_INVALID_ARG: empty prompt or bad ids. */
mx_status mx_sched_submit(mx_sched *s, const mx_gen_params *p, mx_gen **out);
/* Wait up to timeout_ms for output (or the end) and move it into u. Returns true if u changed. */
bool mx_gen_take(mx_gen *g, int timeout_ms, mx_gen_update *u);
/* Stop generating; the slot is freed at the next step. */
void mx_gen_cancel(mx_gen *g);
/* Drop the consumer's reference (cancels the request if it is still running). */
void mx_gen_release(mx_gen *g);

typedef struct mx_slot_info {
    int id;
    bool processing;
    int n_prompt, n_gen, n_past;
    unsigned long task_id;
} mx_slot_info;

typedef struct mx_sched_stats {
    uint64_t n_prompt_tokens_total;      /* prompt tokens processed */
    double t_prompt_total_s;             /* time spent on prompts (per request, summed) */
    uint64_t n_gen_tokens_total;         /* tokens generated */
    double t_gen_total_s;                /* time spent generating (per request, summed) */
    uint64_t n_decode_total;             /* forward passes */
    uint64_t n_busy_slots_total;         /* sum over forward passes of sequences in the batch */
    int n_processing, n_deferred;        /* now: in slots, waiting in the queue */
    int n_past_max;                      /* largest position reached by a sequence */
    int kv_used_blocks, kv_total_blocks;
} mx_sched_stats;
void mx_sched_stats_get(mx_sched *s, mx_sched_stats *st);
/* Copy up to n slots' state; returns the number of slots. */
int mx_sched_slots(mx_sched *s, mx_slot_info *out, int n);

#endif
