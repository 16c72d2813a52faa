/* mlxcel/backend.h: the op set a model's forward pass is written in, behind a vtable
 * (mx_backend_i) with one implementation per device (backend/cpu, backend/cuda). It knows nothing
 * of model families, requests or HTTP.
 *
 * Memory: activations are `float` buffers allocated by the backend (device memory on a GPU);
 * ops take and return backend pointers and may run asynchronously on the backend's stream until
 * `sync` or a `read` to the host. Weights (mx_weight) point at host memory (mmap'ed checkpoint);
 * `weight_prepare` lets a backend copy them to the device once at load.
 *
 * Quantized weights use MLX affine quantization: each row of `cols` values is split in groups
 * of `group_size`; value = scale[g] * q + bias[g], q an unsigned `bits`-bit integer packed low bits
 * first into little-endian u32 words (a row occupies cols*bits/32 words; bits in {2,3,4,5,6,8}).
 *
 * Thread safety: a backend instance is used by one thread at a time. */
#ifndef MLXCEL_BACKEND_H
#define MLXCEL_BACKEND_H

#include "mlxcel/core.h"

/* A linear layer weight, y = x W^T (+ bias), W: [rows = out features, cols = in features]. */
typedef struct mx_weight {
    int64_t rows, cols;
    mx_dtype dtype;         /* F32, F16, BF16 for dense; U32 when quantized (bits > 0) */
    int bits, group_size;   /* 0, 0 for dense */
    const void *w;          /* dense: [rows, cols] of dtype; quantized: u32 [rows, cols*bits/32] */
    const void *scales;     /* quantized: [rows, cols/group_size] of scale_dtype */
    const void *biases;     /* quantized: [rows, cols/group_size] of scale_dtype */
    mx_dtype scale_dtype;   /* F32, F16 or BF16 */
    const void *bias;       /* optional linear bias [rows] of bias_dtype, NULL if none */
    mx_dtype bias_dtype;
    void *dev;              /* backend-private copy/handle set by weight_prepare, or NULL */
} mx_weight;

/* A 1-D vector parameter (norm gamma): [n] of dtype F32/F16/BF16. */
typedef struct mx_vec {
    int64_t n;
    mx_dtype dtype;
    const void *data;
    void *dev;
} mx_vec;

/* Paged KV cache geometry for one model. Each layer owns K and V pools of
 * n_blocks * block_size slots; a slot holds n_kv_heads * head_dim values (K) and the same (V).
 * A sequence's slots are listed by its block table: position p lives in slot
 * block_table[p / block_size] * block_size + p % block_size. */
typedef struct mx_kv_desc {
    int n_layers, n_kv_heads, head_dim, block_size, n_blocks;
    mx_dtype dtype;         /* storage type chosen by the backend (F32 on CPU) */
} mx_kv_desc;

/* Per-token attention metadata for one forward call (host arrays; the backend copies them). */
typedef struct mx_attn_meta {
    int n_tokens;
    const int32_t *pos;         /* [n_tokens] absolute position of each token */
    const int32_t *slot;        /* [n_tokens] KV slot to write each token's K/V to */
    const int32_t *seq;         /* [n_tokens] sequence index (row of block_tables) */
    int n_seqs, max_blocks;     /* block_tables: [n_seqs, max_blocks] */
    const int32_t *block_tables;
} mx_attn_meta;

/* The host inputs of one repeated step (step_replay): its attention metadata, the token ids of
 * its embedding lookup and the rows gathered for its logits. */
typedef struct mx_step_inputs {
    const mx_attn_meta *meta;
    const int32_t *tokens;      /* [n_tokens] */
    int n_tokens;
    const int32_t *rows;        /* [n_rows] */
    int n_rows;
} mx_step_inputs;

/* Attention parameters shared by all tokens of one layer call. */
typedef struct mx_attn_params {
    int n_heads, n_kv_heads, head_dim;
    float scale;                /* usually 1/sqrt(head_dim) */
    int sliding_window;         /* 0: full attention; else attend to the last `sliding_window` positions */
    float softcap;              /* 0: none; else logits = softcap * tanh(logits / softcap) */
    const float *sinks;         /* NULL: none; else host array [n_heads] of learned logits that join
                                 * each head's softmax denominator (gpt-oss attention sinks) */
} mx_attn_params;

/* RoPE: rotate pairs (x[i], x[i + rot_dim/2]) (the "NeoX"/HF half-split layout) for
 * i < rot_dim/2, by angle pos * inv_freq[i]. Dims past rot_dim are left as they are. */
typedef struct mx_rope {
    int rot_dim;
    const float *inv_freq;      /* [rot_dim/2] host array, already scaled (llama3 etc.) */
    float attn_factor;          /* multiply cos/sin by this (YaRN), 1.0 otherwise */
} mx_rope;

typedef enum { MX_ACT_SILU = 0, MX_ACT_GELU_TANH, MX_ACT_GELU, MX_ACT_RELU } mx_act;

/* A stack of plain pre-norm decoder layers for the optional decode_layers op. Layer l, on the
 * residual row x [hidden]:
 *   a = rmsnorm(x, ln1); q, k, v = a Wq^T, a Wk^T, a Wv^T (+ biases)
 *   q, k per head: rmsnorm(q_norm / k_norm) when given, then RoPE (rot_dim == head_dim)
 *   h = x + attention(q, k, v) Wo^T        (causal, GQA, `attn_scale`, no window/softcap/sinks)
 *   x = h + (act(b Wg^T) * b Wu^T) Wd^T     with b = rmsnorm(h, ln2)
 * Every RMSNorm is x / rms(x) * (g + add_one) with `eps`. The ops it replaces are exactly the
 * backend ops the model would call for such a layer; a backend may fuse them in any way. */
typedef struct mx_dlayer {
    const mx_weight *q, *k, *v, *o, *gate, *up, *down;
    const mx_vec *ln1, *ln2;
    const mx_vec *q_norm, *k_norm;   /* per-head RMSNorm of q and k before RoPE; NULL: none */
} mx_dlayer;
typedef struct mx_dstack {
    int n_layers;
    const mx_dlayer *layers;         /* [n_layers] */
    int hidden, n_heads, n_kv_heads, head_dim, inter;
    float eps, add_one;
    mx_act act;
    const float *inv_freq;           /* host [head_dim / 2] RoPE frequencies (already scaled) */
    float rope_factor;               /* mx_rope.attn_factor */
    float attn_scale;
    /* optional final part: logits[vocab] = lm_head(rmsnorm(x, final_norm)); NULL: layers only */
    const mx_vec *final_norm;
    const mx_weight *lm_head;
} mx_dstack;

typedef struct mx_backend_i {
    const char *name;
    /* --- memory ------------------------------------------------------------------------- */
    void *(*alloc)(void *ctx, size_t bytes);                 /* NULL on failure */
    void (*free)(void *ctx, void *p);
    void (*write)(void *ctx, void *dst, const void *src_host, size_t bytes);
    void (*read)(void *ctx, void *dst_host, const void *src, size_t bytes); /* waits for ops */
    void (*sync)(void *ctx);
    mx_status (*weight_prepare)(void *ctx, mx_weight *w);    /* may set w->dev */
    mx_status (*vec_prepare)(void *ctx, mx_vec *v);
    /* --- KV cache ----------------------------------------------------------------------- */
    mx_status (*kv_init)(void *ctx, mx_kv_desc *desc);       /* allocate pools; sets desc->dtype */
    void (*kv_free)(void *ctx);
    /* --- ops (all buffers are backend pointers; n = number of tokens/rows) ---------------- */
    /* y[n, w.rows] = x[n, w.cols] W^T (+ bias) */
    void (*matmul)(void *ctx, const mx_weight *w, const float *x, float *y, int n);
    /* out[n, w.cols] = row ids[i] of an embedding table stored like a weight ([vocab, dim]) */
    void (*embed)(void *ctx, const mx_weight *w, const int32_t *ids_host, int n, float *out);
    /* y[n, d] = x / rms(x) * (g + add_one); g may be NULL (no scale). y may equal x. */
    void (*rmsnorm)(void *ctx, const float *x, const mx_vec *g, float eps, float add_one, float *y, int n, int d);
    /* layernorm with optional gamma/beta */
    void (*layernorm)(void *ctx, const float *x, const mx_vec *g, const mx_vec *b, float eps, float *y, int n, int d);
    /* In-place RoPE on x[n, n_heads, head_dim] at positions meta->pos. */
    void (*rope)(void *ctx, float *x, int n, int n_heads, int head_dim, const mx_rope *rope, const mx_attn_meta *meta);
    /* Write k, v [n, n_kv_heads*head_dim] to layer's cache at meta->slot, then
     * out[n, n_heads*head_dim] = causal attention of q [n, n_heads*head_dim] over each token's
     * sequence positions 0..pos (GQA: head h uses kv head h / (n_heads/n_kv_heads)). */
    void (*attention)(void *ctx, int layer, const float *q, const float *k, const float *v, float *out,
                      const mx_attn_params *p, const mx_attn_meta *meta);
    /* y[n, d] = act(gate[n, d]) * up[n, d]; gate/up may be the two halves of one [n, 2d] buffer
     * via strides: gate row i at gate + i*stride, up row i at up + i*stride. */
    void (*act_mul)(void *ctx, mx_act act, const float *gate, const float *up, int64_t stride, float *y, int n, int d);
    void (*act)(void *ctx, mx_act act, const float *x, float *y, int64_t count);
    /* y = a + b (count elements); y may equal a */
    void (*add)(void *ctx, const float *a, const float *b, float *y, int64_t count);
    /* y = x * s */
    void (*scale)(void *ctx, const float *x, float s, float *y, int64_t count);
    /* copy rows: dst[i, :] = src[rows[i], :] for i < n (row length d); rows host array */
    void (*gather_rows)(void *ctx, const float *src, const int32_t *rows_host, int n, int d, float *dst);
    /* y = softcap * tanh(x / softcap) */
    void (*softcap)(void *ctx, float *x, float cap, int64_t count);
    /* Precision of the following matmuls (optional, may be NULL): MX_PREC_EXACT for decode rows
     * (f32 math, results independent of the batch), MX_PREC_FAST for prompt rows (a backend may
     * round activations, e.g. int8/bf16, but each row's result must not depend on the other rows
     * of the call), MX_PREC_AUTO to go back to the backend's default. A backend told to be exact
     * everywhere (MLXCEL_PRECISE=1, mx_backend_cpu_set_precise) ignores MX_PREC_FAST. */
    void (*set_precision)(void *ctx, int mode);
    /* Repeated steps (optional, may be NULL): the ops between step_begin(key) and step_end form
     * one decode step that a backend may record and replay (CUDA graphs). The key must fix the op
     * sequence and sizes. Only ops may run inside (no alloc/free/write/read/sync). If step_end
     * fails, the step's ops did not run: run them again outside a step. */
    mx_status (*step_begin)(void *ctx, uint64_t key);
    mx_status (*step_end)(void *ctx);
    /* Optional (may be NULL): ys[k][n, ws[k].rows] = x[n, cols] W_k^T for nw (<= 4) weights of the
     * same input, e.g. q/k/v or gate/up, in one pass (results as nw matmul calls). */
    void (*matmul_multi)(void *ctx, int nw, const mx_weight *const *ws, const float *x, float *const *ys, int n);
    /* Optional (may be NULL): reduce each logit row to sampling candidates, so the full rows
     * need not travel to the host. For row r of logits[n_rows, vocab] (a backend buffer): the k
     * (1 <= k <= MX_TOPK_MAX) largest values sorted descending, ties lower id first, into
     * vals_host[r*k ..] and their ids into ids_host[r*k ..]; lse_host[r] = log(sum_i exp(l_i))
     * over the whole row (stable, with the row max). NaN entries are never candidates (and make
     * lse NaN); when fewer than k entries qualify (vocab < k) the rest is -INFINITY / id -1.
     * Results are on the host when it returns (like read). Callers fall back to reading rows
     * when it is NULL (mx_topk_host is the reference). */
    void (*topk)(void *ctx, const float *logits, int n_rows, int vocab, int k, float *vals_host,
                 int32_t *ids_host, float *lse_host);
    /* Optional (may be NULL): the layers of s for ONE decode token (meta->n_tokens == 1) on the
     * residual row x [hidden] (updated in place), writing each layer's K/V to the cache like the
     * attention op. Returns 0 when it did nothing (this stack, format or batch is not one it
     * takes: the caller runs the ops), 1 when x holds the result of the layers, 2 when also
     * logits[vocab] = lm_head(rmsnorm(x, final_norm)) (only when s has them). Like the ops it
     * replaces, it may run asynchronously and reports failures through the backend's status. */
    int (*decode_layers)(void *ctx, const mx_dstack *s, float *x, float *logits, const mx_attn_meta *meta);
    /* Optional (may be NULL): run the recorded step of `key` (step_begin/step_end) with new host
     * inputs without the ops being called again: MX_OK when the step was launched, its results
     * as if its ops had been called with these inputs; anything else (no error message set): it
     * did nothing, and the caller runs the step as usual (step_begin, the ops, step_end). A
     * backend takes this only for a key whose recorded step, when it was recorded, read no host
     * input but these, each equal to what the ops were given (it may keep `in` until that
     * step's step_end to compare them, and upload them at that step's start: inputs other than
     * the ops' then fail that step's step_end, and the caller runs it op by op); a caller must
     * pass every host input of its step here. */
    mx_status (*step_replay)(void *ctx, uint64_t key, const mx_step_inputs *in);
    /* Optional (all three or none; may be NULL): greedy decode steps chained on the device, so
     * that the next step is launched before this step's token is read (mx_model_greedy_launch).
     * top1_launch: the topk op with k = 1 for logits' n_rows rows (the same values, ids and lse,
     *   ties lower id first), left in result slot `slot` (0 or 1) without waiting for it; MX_OK
     *   when launched, anything else (no error message set): nothing was done.
     * top1_wait: waits for slot's results and copies its n_rows values, ids and lse to the host.
     * step_chain: step_replay for a decode step whose token ids (in->tokens is not read) are
     *   the ids of the last top1_launch, row i the token of row i (in->rows[i] == i, n_rows ==
     *   n_tokens <= MX_CHAIN_MAX); launched after that top-1 on the device, without the host
     *   seeing the ids. An id outside the vocabulary (a row of NaNs) is fed as 0: the caller
     *   must discard such a step. MX_OK when launched; anything else (no error message set): it
     *   did nothing, and the caller waits for the ids and runs the step as usual. */
    mx_status (*top1_launch)(void *ctx, const float *logits, int n_rows, int vocab, int slot);
    mx_status (*top1_wait)(void *ctx, int slot, int n_rows, float *vals_host, int32_t *ids_host, float *lse_host);
    mx_status (*step_chain)(void *ctx, uint64_t key, const mx_step_inputs *in);
} mx_backend_i;

/* Most tokens of a step that step_chain takes. */
#define MX_CHAIN_MAX 32

/* Most candidates the topk op returns per row. */
#define MX_TOPK_MAX 64

/* Host reference of the topk op for one row (backend/cpu/topk.c; any thread): row[vocab] ->
 * vals[k], ids[k], *lse as the op describes; k may be 0 (only lse). mx_lse_host(row, n) is
 * the same lse alone; both give the same bits for the same row (the sampler uses it so that
 * log-probabilities from candidates and from full rows agree exactly). */
void mx_topk_host(const float *row, int vocab, int k, float *vals, int32_t *ids, float *lse);
float mx_lse_host(const float *row, int n);

enum { MX_PREC_AUTO = 0, MX_PREC_EXACT = 1, MX_PREC_FAST = 2 };

typedef struct mx_backend {
    const mx_backend_i *i;
    void *ctx;
} mx_backend;

/* CPU backend: uses the global thread pool (mx_pool_global). */
mx_status mx_backend_cpu_init(mx_backend *out);
void mx_backend_cpu_free(mx_backend *b);
/* Precise mode: every op uses exact f32 arithmetic (for logits parity tests). Off by default,
 * where matmuls over many tokens may round activations to int8/bf16 for speed. The environment
 * variable MLXCEL_PRECISE=1 turns it on at init. No-op on a non-CPU backend. */
void mx_backend_cpu_set_precise(mx_backend *b, bool precise);

#endif
