/* engine/generate.c: one sequence at a time: chunked prefill, then decode with the sampler
 * chain until EOS or n_predict (the CLI's generate, bench and logits). Each step brings back only
 * the top-k candidates of the logit row (mx_model_forward_topk); the full row is read only when
 * the sampler cannot decide from them. The server's continuous batching is engine/scheduler.c. */
#include "mlxcel/engine.h"

#include <stdlib.h>
#include <string.h>

#define GEN_BLOCK 16

mx_status mx_gen_prepare(mx_model *m, int max_ctx, int prefill_chunk) {
    if (max_ctx < 1) return mx_errorf(MX_ERR_INVALID_ARG, "context of %d positions", max_ctx);
    if (mx_model_n_blocks(m)) return MX_OK;
    int chunk = prefill_chunk > 0 ? prefill_chunk : 512;
    if (chunk > max_ctx) chunk = max_ctx;
    int n_blocks = (max_ctx + GEN_BLOCK - 1) / GEN_BLOCK;
    return mx_model_prepare(m, n_blocks, GEN_BLOCK, chunk);
}

typedef struct seq_state {
    int32_t *table;
    int max_blocks;
    int32_t *tok, *pos, *seq;
    int cap;
} seq_state;

static mx_status seq_init(mx_model *m, seq_state *s, int cap) {
    memset(s, 0, sizeof *s);
    s->max_blocks = mx_model_n_blocks(m);
    s->table = malloc((size_t)s->max_blocks * sizeof *s->table);
    s->tok = malloc((size_t)cap * sizeof *s->tok);
    s->pos = malloc((size_t)cap * sizeof *s->pos);
    s->seq = calloc((size_t)cap, sizeof *s->seq);
    s->cap = cap;
    if (!s->table || !s->tok || !s->pos || !s->seq) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < s->max_blocks; i++) s->table[i] = i;   /* one sequence owns all blocks */
    return MX_OK;
}
static void seq_free(seq_state *s) { free(s->table); free(s->tok); free(s->pos); free(s->seq); }

/* Where the last token's candidates go (mx_model_forward_topk), instead of its full row. */
typedef struct topk_out { int k; float *vals; int32_t *ids; float *lse; } topk_out;

/* Forward ids[0..n) at positions start..; logits for the last token (or all when all_logits),
 * or, with tk, the last token's top-k candidates. */
static mx_status run_chunked(mx_model *m, seq_state *s, const int32_t *ids, int n, int start,
                             int chunk, float *logits, bool all_logits, bool decode, const topk_out *tk) {
    const int V = mx_model_cfg(m)->vocab_size;
    for (int off = 0; off < n; off += chunk) {
        int k = n - off < chunk ? n - off : chunk;
        for (int i = 0; i < k; i++) { s->tok[i] = ids[off + i]; s->pos[i] = start + off + i; }
        int32_t rows[1];
        int32_t *rowp = rows;
        int n_logits = 0;
        int32_t *all = NULL;
        if (all_logits) {
            all = malloc((size_t)k * sizeof *all);
            if (!all) return mx_errorf(MX_ERR_NOMEM, "out of memory");
            for (int i = 0; i < k; i++) all[i] = i;
            rowp = all; n_logits = k;
        } else if (off + k == n) {
            rows[0] = k - 1; n_logits = 1;
        }
        /* a lone token after the prompt is a decode step */
        mx_batch b = {k, s->tok, s->pos, s->seq, 1, s->max_blocks, s->table, n_logits, rowp, decode ? 1 : 0};
        mx_status st = tk && !all_logits ? mx_model_forward_topk(m, &b, tk->k, tk->vals, tk->ids, tk->lse)
                                         : mx_model_forward(m, &b, all_logits ? logits + (size_t)off * V : logits);
        free(all);
        if (st) return st;
    }
    return MX_OK;
}

/* Launch the greedy decode step at `pos` for token *id, or (id NULL) for the token the device
 * picked in the last launched step. */
static mx_status greedy_step(mx_model *m, seq_state *s, const int32_t *id, int pos) {
    static const int32_t row0[1] = {0};
    if (id) s->tok[0] = *id;
    s->pos[0] = pos;
    mx_batch b = {1, id ? s->tok : NULL, s->pos, s->seq, 1, s->max_blocks, s->table, 1, row0, 1};
    return mx_model_greedy_launch(m, &b, id == NULL);
}

mx_status mx_generate(mx_model *m, const int32_t *prompt, int n_prompt, const mx_gen_opts *o,
                      mx_gen_cb cb, void *ud, int32_t **out, int *n_out, mx_gen_stats *stats) {
    const mx_model_config *c = mx_model_cfg(m);
    const int V = c->vocab_size;
    mx_status st = MX_OK;
    memset(stats, 0, sizeof *stats);
    *out = NULL; *n_out = 0;
    if (n_prompt < 1) return mx_errorf(MX_ERR_INVALID_ARG, "empty prompt");
    int max_ctx = mx_model_n_blocks(m) * mx_model_block_size(m);
    if (n_prompt + o->n_predict > max_ctx)
        return mx_errorf(MX_ERR_RANGE, "prompt (%d tokens) + %d new tokens exceed the context (%d)", n_prompt, o->n_predict, max_ctx);
    seq_state s;
    float *logits = malloc((size_t)V * sizeof *logits);
    int32_t *hist = malloc((size_t)(n_prompt + o->n_predict + 1) * sizeof *hist);
    mx_sampler *smp = mx_sampler_new(&o->sampling, V);
    if ((st = seq_init(m, &s, n_prompt < 512 ? (n_prompt > 1 ? n_prompt : 1) : 512))) goto done;
    if (!logits || !hist || !smp) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    int chunk = o->prefill_chunk > 0 ? o->prefill_chunk : 512;
    if (chunk > s.cap) chunk = s.cap;
    if (chunk > mx_model_max_tokens(m)) chunk = mx_model_max_tokens(m);
    double t0 = mx_time_s();
    float cand_v[MX_TOPK_MAX], cand_lse = 0;
    int32_t cand_id[MX_TOPK_MAX];
    const topk_out tk = {MX_TOPK_MAX, cand_v, cand_id, &cand_lse};
    if ((st = run_chunked(m, &s, prompt, n_prompt, 0, chunk, logits, false, false, &tk))) goto done;
    double t1 = mx_time_s();
    stats->prompt_tokens = n_prompt;
    stats->prompt_s = t1 - t0;
    int n_hist = n_prompt, n_full = 0, kc = tk.k;
    /* greedy: the device picks each token and the next step is launched before it is read
     * (`inflight`: the step for the last drawn token is launched, its candidates come from the
     * chain: k = 1) */
    bool chain = mx_sampling_top1_decides(&o->sampling), inflight = false;
    for (int i = 0; i < o->n_predict; i++) {
        bool need_full = false;
        int32_t id = mx_sampler_sample_topk(smp, cand_v, cand_id, kc, cand_lse, hist, n_hist, NULL, NULL, &need_full);
        if (need_full && inflight) {
            /* (a row of NaNs) the step launched after this one on the device may have had another
             * token: drop it, run this step again, and go on without the chain */
            mx_model_greedy_drain(m);
            inflight = chain = false;
            kc = tk.k;
            if ((st = run_chunked(m, &s, hist + n_hist - 1, 1, n_hist - 1, 1, logits, false, true, &tk))) goto done;
            id = mx_sampler_sample_topk(smp, cand_v, cand_id, kc, cand_lse, hist, n_hist, NULL, NULL, &need_full);
        }
        if (need_full) {   /* the candidates do not decide it: the exact path on the full row */
            n_full++;
            if ((st = mx_model_read_logits(m, 0, logits))) goto done;
            id = mx_sampler_sample(smp, logits, hist, n_hist, NULL, NULL);
        }
        hist[n_hist++] = id;
        stats->gen_tokens++;
        bool eos = false;
        for (int e = 0; e < c->n_eos; e++) if (c->eos_ids[e] == id) eos = true;
        if (cb && !cb(ud, id)) break;
        if (eos && !o->ignore_eos) { stats->hit_eos = true; break; }
        if (i + 1 == o->n_predict) break;
        if (chain && !inflight) {   /* the step for this token, launched with it */
            st = greedy_step(m, &s, &id, n_hist - 1);
            if (st == MX_ERR_UNSUPPORTED) { mx_clear_error(); chain = false; st = MX_OK; }
            else if (st) goto done;
            else inflight = true;
        }
        if (chain) {
            /* the step after it (unless no draw will need it), fed on the device, then this one's top-1 */
            if (i + 2 < o->n_predict && (st = greedy_step(m, &s, NULL, n_hist))) goto done;
            if ((st = mx_model_greedy_wait(m, cand_v, cand_id, &cand_lse))) goto done;
            kc = 1;
            inflight = i + 2 < o->n_predict;
            continue;
        }
        if ((st = run_chunked(m, &s, &id, 1, n_hist - 1, 1, logits, false, true, &tk))) goto done;
        kc = tk.k;
    }
    mx_model_greedy_drain(m);
    stats->decode_s = mx_time_s() - t1;
    MX_LOGD("generate: %d of %d draws read the full logit row", n_full, stats->gen_tokens);
    *n_out = n_hist - n_prompt;
    *out = malloc((size_t)(*n_out > 0 ? *n_out : 1) * sizeof **out);
    if (!*out) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    memcpy(*out, hist + n_prompt, (size_t)*n_out * sizeof **out);
done:
    mx_model_greedy_drain(m);
    seq_free(&s);
    free(logits);
    free(hist);
    mx_sampler_free(smp);
    return st;
}

mx_status mx_teacher_logits(mx_model *m, const int32_t *ids, int n, int chunk, float **logits) {
    const int V = mx_model_cfg(m)->vocab_size;
    *logits = NULL;
    if (n < 1) return mx_errorf(MX_ERR_INVALID_ARG, "no token ids");
    if (n > mx_model_n_blocks(m) * mx_model_block_size(m)) return mx_errorf(MX_ERR_RANGE, "%d ids exceed the context", n);
    seq_state s;
    int cap = chunk > 0 ? chunk : 512;
    if (cap > n) cap = n;
    if (cap > mx_model_max_tokens(m)) cap = mx_model_max_tokens(m);
    mx_status st = seq_init(m, &s, cap);
    float *l = malloc((size_t)n * V * sizeof *l);
    if (!st && !l) st = mx_errorf(MX_ERR_NOMEM, "out of memory");
    if (!st) st = run_chunked(m, &s, ids, n, 0, cap, l, true, false, NULL);
    seq_free(&s);
    if (st) { free(l); return st; }
    *logits = l;
    return MX_OK;
}
