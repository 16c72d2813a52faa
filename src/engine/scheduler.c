/* engine/scheduler.c: the continuous-batching scheduler (see mlxcel/scheduler.h). One engine
 * thread owns the model and the slots; every step it builds one mx_batch from the next token of
 * each decoding sequence plus prompt chunks of sequences still in prefill (bounded per step),
 * runs the forward once (mx_model_forward_topk: only each logit row's top-k candidates come back;
 * a full row is read only when the sampler cannot decide from them), samples each sequence,
 * detokenizes, matches stop strings and hands text to the request's consumer. It is not the HTTP
 * layer and does not parse requests.
 *
 * Locking: s->mu guards the queue, the stats and the published slot summaries; each request's
 * g->mu guards its pending output. The slot internals are touched by the engine thread only. */
#include "mlxcel/scheduler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct mx_gen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                    /* engine + consumer */
    atomic_bool cancelled;
    unsigned long id;
    /* parameters (immutable once submitted) */
    int32_t *prompt; int n_prompt;
    int n_predict;
    bool ignore_eos;
    bool cache_prompt;
    bool logprobs;
    int n_logprobs;
    mx_sampler *sampler;
    char **stops; int n_stops;
    /* pending output (g->mu) */
    mx_gen_update out;
    bool done;
    struct mx_gen *next;         /* queue link (s->mu) */
};

typedef struct slot {
    mx_gen *g;                   /* NULL: free */
    int32_t *table; int n_blocks;
    int32_t *hist; int n_hist;   /* prompt + generated ids */
    int n_past;                  /* positions written to the KV cache */
    int n_cached;                /* free slot: hist[0, n_cached) are prompt positions still valid in
                                  * its KV blocks (computed as prompt rows, as a fresh prefill would) */
    int n_gen;
    bool decoding;               /* prompt done; hist[n_hist-1] is the next token to feed */
    mx_detok_stream *detok;
    mx_stop *stop;
    double t_start, t_first;
    mx_buf piece, text;          /* scratch */
    /* published summary (s->mu) */
    mx_slot_info info;
} slot;

struct mx_sched {
    mx_model *model;
    const mx_tokenizer *tok;
    mx_sched_params p;
    int vocab, block_size, max_blocks;
    mx_kv_alloc *kv;
    slot *slots;
    /* batch buffers */
    int32_t *b_tok, *b_pos, *b_seq, *b_tables, *b_rows;
    int *row_slot;               /* logits row -> slot */
    float *logits;               /* [vocab] one full row, for the sampler's exact fallback */
    float *cand_v, *cand_lse;    /* [n_parallel * MX_TOPK_MAX], [n_parallel]: top-k per logits row */
    int32_t *cand_id;            /* [n_parallel * MX_TOPK_MAX] */
    mx_token_logprob top[MX_MAX_TOP_LOGPROBS];
    int32_t eos[MX_MAX_EOS + 16]; int n_eos;   /* end-of-generation ids: config EOS + end-of-turn tokens */

    pthread_t thread; bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    mx_gen *q_head, *q_tail; int n_queued;
    int n_active;
    unsigned long next_id;
    mx_sched_stats st;
    uint64_t n_draws, n_full_rows;   /* draws, and those that needed the full logit row (logged at free, debug level) */
};

/* ---- updates --------------------------------------------------------------------------------- */
void mx_gen_update_clear(mx_gen_update *u) {
    u->text.len = 0;
    if (u->text.data) u->text.data[0] = 0;
    u->n_toks = 0;
}

void mx_gen_update_free(mx_gen_update *u) {
    mx_buf_free(&u->text);
    free(u->toks);
    memset(u, 0, sizeof *u);
}

static bool push_tok(mx_gen_update *u, const mx_gen_token *t) {
    if (u->n_toks == u->cap_toks) {
        int nc = u->cap_toks ? u->cap_toks * 2 : 16;
        mx_gen_token *n = realloc(u->toks, (size_t)nc * sizeof *n);
        if (!n) return false;
        u->toks = n; u->cap_toks = nc;
    }
    u->toks[u->n_toks++] = *t;
    return true;
}

/* ---- request objects --------------------------------------------------------------------------- */
static void gen_free(mx_gen *g) {
    if (!g) return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->prompt);
    mx_sampler_free(g->sampler);
    for (int i = 0; i < g->n_stops; i++) free(g->stops[i]);
    free(g->stops);
    mx_gen_update_free(&g->out);
    free(g);
}

static void gen_unref(mx_gen *g) {
    pthread_mutex_lock(&g->mu);
    int r = --g->refs;
    pthread_mutex_unlock(&g->mu);
    if (r == 0) gen_free(g);
}

bool mx_gen_take(mx_gen *g, int timeout_ms, mx_gen_update *u) {
    pthread_mutex_lock(&g->mu);
    if (!g->done && g->out.text.len == 0 && g->out.n_toks == 0 && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        while (!g->done && g->out.text.len == 0 && g->out.n_toks == 0)
            if (pthread_cond_timedwait(&g->cv, &g->mu, &ts)) break;
    }
    bool changed = g->out.text.len || g->out.n_toks || (g->done && !u->done);
    if (g->out.text.len) mx_buf_append(&u->text, g->out.text.data, g->out.text.len);
    for (int i = 0; i < g->out.n_toks; i++) push_tok(u, &g->out.toks[i]);
    g->out.text.len = 0; g->out.n_toks = 0;
    u->done = g->done;
    u->finish = g->out.finish;
    memcpy(u->stop_word, g->out.stop_word, sizeof u->stop_word);
    memcpy(u->error, g->out.error, sizeof u->error);
    u->n_prompt = g->out.n_prompt; u->n_gen = g->out.n_gen; u->slot = g->out.slot; u->n_cached = g->out.n_cached;
    u->t_prompt_ms = g->out.t_prompt_ms; u->t_gen_ms = g->out.t_gen_ms;
    pthread_mutex_unlock(&g->mu);
    return changed;
}

void mx_gen_cancel(mx_gen *g) { atomic_store(&g->cancelled, true); }

void mx_gen_release(mx_gen *g) {
    if (!g) return;
    atomic_store(&g->cancelled, true);
    gen_unref(g);
}

/* ---- submit ----------------------------------------------------------------------------------- */
mx_status mx_sched_submit(mx_sched *s, const mx_gen_params *p, mx_gen **out) {
    *out = NULL;
    if (p->n_prompt <= 0) return mx_errorf(MX_ERR_INVALID_ARG, "the prompt is empty");
    if (p->n_prompt >= s->p.n_ctx)
        return mx_errorf(MX_ERR_RANGE, "the prompt has %d tokens, the context holds %d (prompt + at least one generated token)",
                         p->n_prompt, s->p.n_ctx);
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= s->vocab)
            return mx_errorf(MX_ERR_INVALID_ARG, "prompt token %d (id %d) is outside the vocabulary [0, %d)",
                             i, p->prompt[i], s->vocab);
    if (p->sampling.n_logprobs > MX_MAX_TOP_LOGPROBS)
        return mx_errorf(MX_ERR_INVALID_ARG, "at most %d top logprobs", MX_MAX_TOP_LOGPROBS);
    mx_gen *g = calloc(1, sizeof *g);
    if (!g) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->refs = 2;
    g->n_prompt = p->n_prompt;
    g->n_predict = p->n_predict;
    g->ignore_eos = p->ignore_eos;
    g->cache_prompt = p->cache_prompt;
    g->n_logprobs = p->sampling.n_logprobs;
    g->logprobs = p->logprobs || p->sampling.n_logprobs > 0;
    g->out.slot = -1;
    g->out.n_prompt = p->n_prompt;
    g->prompt = malloc((size_t)p->n_prompt * sizeof *g->prompt);
    g->sampler = mx_sampler_new(&p->sampling, s->vocab);
    if (!g->prompt || !g->sampler) goto nomem;
    memcpy(g->prompt, p->prompt, (size_t)p->n_prompt * sizeof *g->prompt);
    if (p->n_stops > 0) {
        g->stops = calloc((size_t)p->n_stops, sizeof *g->stops);
        if (!g->stops) goto nomem;
        for (int i = 0; i < p->n_stops; i++) {
            g->stops[i] = mx_strdup(p->stops[i] ? p->stops[i] : "");
            if (!g->stops[i]) goto nomem;
            g->n_stops = i + 1;
        }
    }
    pthread_mutex_lock(&s->mu);
    int n_free = s->p.n_parallel - s->n_active;
    if (s->stop || s->n_queued - n_free >= s->p.max_queue) {
        pthread_mutex_unlock(&s->mu);
        gen_free(g);
        return mx_errorf(MX_ERR_BUSY, "the server is busy: %d requests are waiting (--max-queue %d)",
                         s->n_queued, s->p.max_queue);
    }
    g->id = s->next_id++;
    if (s->q_tail) s->q_tail->next = g; else s->q_head = g;
    s->q_tail = g;
    s->n_queued++;
    s->st.n_deferred = s->n_queued;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *out = g;
    return MX_OK;
nomem:
    gen_free(g);
    return mx_errorf(MX_ERR_NOMEM, "out of memory");
}

/* ---- engine ----------------------------------------------------------------------------------- */
static void publish(mx_sched *s, slot *sl) {
    sl->info.processing = sl->g != NULL;
    sl->info.n_prompt = sl->g ? sl->g->n_prompt : 0;
    sl->info.n_gen = sl->n_gen;
    sl->info.n_past = sl->n_past;
    sl->info.task_id = sl->g ? sl->g->id : 0;
}

/* The request's end as its consumer sees it (g->mu held). */
static void gen_finish(mx_gen *g, mx_finish fin, const char *stop_word, const char *err) {
    g->out.finish = fin;
    if (stop_word) snprintf(g->out.stop_word, sizeof g->out.stop_word, "%s", stop_word);
    if (err) snprintf(g->out.error, sizeof g->out.error, "%s", err);
    g->done = true;
}

/* Hand text / a token / the end to the consumer. */
static void emit(mx_sched *s, slot *sl, const char *text, size_t len, const mx_gen_token *tok,
                 mx_finish fin, const char *stop_word, const char *err) {
    mx_gen *g = sl->g;
    double now = mx_time_s();
    pthread_mutex_lock(&g->mu);
    if (len) mx_buf_append(&g->out.text, text, len);
    if (tok) push_tok(&g->out, tok);
    g->out.n_gen = sl->n_gen;
    g->out.slot = (int)(sl - s->slots);
    g->out.t_prompt_ms = sl->t_first > 0 ? (sl->t_first - sl->t_start) * 1e3 : (now - sl->t_start) * 1e3;
    g->out.t_gen_ms = sl->t_first > 0 ? (now - sl->t_first) * 1e3 : 0;
    if (fin != MX_FINISH_NONE) gen_finish(g, fin, stop_word, err);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* End a slot's request: flush held text unless a stop string ended it, free the slot, then tell
 * the consumer (so a client that sees its answer end finds the slot free). */
static void retire(mx_sched *s, slot *sl, mx_finish fin, const char *stop_word, const char *err) {
    if (fin != MX_FINISH_STOP && fin != MX_FINISH_ERROR && fin != MX_FINISH_CANCELLED) {
        sl->text.len = 0;
        sl->piece.len = 0;
        mx_detok_stream_flush(sl->detok, &sl->piece);
        if (sl->piece.len) mx_stop_feed(sl->stop, sl->piece.data, sl->piece.len, &sl->text);
        mx_stop_flush(sl->stop, &sl->text);
    }
    /* last text and final counts/timings (not yet the end) */
    emit(s, sl, sl->text.data, fin == MX_FINISH_STOP || fin == MX_FINISH_ERROR || fin == MX_FINISH_CANCELLED ? 0 : sl->text.len,
         NULL, MX_FINISH_NONE, NULL, NULL);
    sl->text.len = 0;
    double now = mx_time_s();
    mx_gen *g = sl->g;
    pthread_mutex_lock(&s->mu);
    s->st.n_gen_tokens_total += (uint64_t)sl->n_gen;
    if (sl->t_first > 0) s->st.t_gen_total_s += now - sl->t_first;
    /* Keep the blocks and the prompt's KV for a later request with the same prefix. The pool holds
     * n_ctx positions per slot, so blocks kept here never starve another slot. Generated positions
     * are not reused: they were computed on the decode path, a fresh prefill would differ. */
    sl->n_cached = g->cache_prompt && fin != MX_FINISH_ERROR ? (g->n_prompt < sl->n_past ? g->n_prompt : sl->n_past) : 0;
    mx_detok_stream_free(sl->detok); sl->detok = NULL;
    mx_stop_free(sl->stop); sl->stop = NULL;
    sl->g = NULL;
    sl->n_gen = 0; sl->n_past = 0; sl->n_hist = sl->n_cached; sl->decoding = false;
    s->n_active--;
    s->st.n_processing = s->n_active;
    publish(s, sl);
    s->st.kv_used_blocks = s->st.kv_total_blocks - mx_kv_alloc_n_free(s->kv);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&g->mu);
    gen_finish(g, fin, stop_word, err);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    gen_unref(g);
}

/* Move queued requests into free slots (s->mu held). */
static void admit(mx_sched *s) {
    while (s->q_head) {
        mx_gen *g = s->q_head;
        if (atomic_load(&g->cancelled)) {
            s->q_head = g->next;
            if (!s->q_head) s->q_tail = NULL;
            s->n_queued--;
            pthread_mutex_lock(&g->mu);
            g->out.finish = MX_FINISH_CANCELLED; g->done = true;
            pthread_cond_broadcast(&g->cv);
            pthread_mutex_unlock(&g->mu);
            gen_unref(g);
            continue;
        }
        if (s->n_active >= s->p.n_parallel) break;
        slot *sl = NULL;
        int best = -1;
        for (int i = 0; i < s->p.n_parallel; i++) {
            slot *c = &s->slots[i];
            if (c->g) continue;
            int k = 0;
            if (g->cache_prompt)
                while (k < c->n_cached && k < g->n_prompt && c->hist[k] == g->prompt[k]) k++;
            if (k > best) { best = k; sl = c; }
        }
        if (!sl) break;
        if (best > g->n_prompt - 1) best = g->n_prompt - 1;   /* the last prompt row gives the logits */
        s->q_head = g->next;
        if (!s->q_head) s->q_tail = NULL;
        g->next = NULL;
        s->n_queued--;
        sl->detok = mx_detok_stream_new(s->tok, true);
        sl->stop = mx_stop_new((const char *const *)g->stops, g->n_stops);
        if (!sl->detok || !sl->stop) {
            mx_detok_stream_free(sl->detok); sl->detok = NULL;
            mx_stop_free(sl->stop); sl->stop = NULL;
            pthread_mutex_lock(&g->mu);
            g->out.finish = MX_FINISH_ERROR; g->done = true;
            snprintf(g->out.error, sizeof g->out.error, "out of memory");
            pthread_cond_broadcast(&g->cv);
            pthread_mutex_unlock(&g->mu);
            gen_unref(g);
            continue;
        }
        sl->g = g;
        memcpy(sl->hist, g->prompt, (size_t)g->n_prompt * sizeof *sl->hist);
        sl->n_hist = g->n_prompt;
        sl->n_past = best; sl->n_cached = 0; sl->n_gen = 0; sl->decoding = false;
        pthread_mutex_lock(&g->mu);
        g->out.n_cached = best;
        pthread_mutex_unlock(&g->mu);
        sl->t_start = mx_time_s(); sl->t_first = 0;
        s->n_active++;
        publish(s, sl);
    }
    s->st.n_deferred = s->n_queued;
    s->st.n_processing = s->n_active;
}

static bool is_eos(const mx_sched *s, int32_t id) {
    for (int i = 0; i < s->n_eos; i++) if (s->eos[i] == id) return true;
    return false;
}

/* Sample the next token of slot i from logits row r (its candidates, or the full row when they
 * do not decide) and hand out what it produced. */
static void after_logits(mx_sched *s, int i, int r) {
    slot *sl = &s->slots[i];
    mx_gen *g = sl->g;
    double now = mx_time_s();
    if (sl->t_first <= 0) {
        sl->t_first = now;
        pthread_mutex_lock(&s->mu);
        s->st.t_prompt_total_s += now - sl->t_start;
        pthread_mutex_unlock(&s->mu);
    }
    if (g->n_predict == 0) { retire(s, sl, MX_FINISH_LENGTH, NULL, NULL); return; }
    mx_gen_token t;
    memset(&t, 0, sizeof t);
    float lp = 0;
    bool need_full = false;
    s->n_draws++;
    int32_t id = mx_sampler_sample_topk(g->sampler, s->cand_v + (size_t)r * MX_TOPK_MAX, s->cand_id + (size_t)r * MX_TOPK_MAX,
                                        MX_TOPK_MAX, s->cand_lse[r], sl->hist, sl->n_hist, g->logprobs ? &lp : NULL,
                                        g->n_logprobs > 0 ? s->top : NULL, &need_full);
    if (need_full) {
        if (mx_model_read_logits(s->model, r, s->logits) != MX_OK) {
            char err[256];
            snprintf(err, sizeof err, "reading logits failed: %s", mx_last_error());
            retire(s, sl, MX_FINISH_ERROR, NULL, err);
            return;
        }
        s->n_full_rows++;
        id = mx_sampler_sample(g->sampler, s->logits, sl->hist, sl->n_hist, g->logprobs ? &lp : NULL,
                               g->n_logprobs > 0 ? s->top : NULL);
    }
    t.id = id;
    t.logprob = lp;
    if (g->n_logprobs > 0) {
        t.n_top = g->n_logprobs;
        memcpy(t.top, s->top, (size_t)g->n_logprobs * sizeof *s->top);
    }
    sl->hist[sl->n_hist++] = id;
    sl->decoding = true;
    sl->n_gen++;
    if (!g->ignore_eos && is_eos(s, id)) {
        emit(s, sl, NULL, 0, &t, MX_FINISH_NONE, NULL, NULL);
        retire(s, sl, MX_FINISH_EOS, NULL, NULL);
        return;
    }
    sl->piece.len = 0; sl->text.len = 0;
    bool stopped = false;
    if (mx_detok_stream_push(sl->detok, id, &sl->piece) == MX_OK && sl->piece.len)
        stopped = mx_stop_feed(sl->stop, sl->piece.data, sl->piece.len, &sl->text);
    emit(s, sl, sl->text.data, sl->text.len, &t, MX_FINISH_NONE, NULL, NULL);
    if (stopped) {
        retire(s, sl, MX_FINISH_STOP, g->n_stops == 1 ? g->stops[0] : NULL, NULL);
        return;
    }
    if ((g->n_predict > 0 && sl->n_gen >= g->n_predict) || sl->n_past >= s->p.n_ctx) {
        retire(s, sl, MX_FINISH_LENGTH, NULL, NULL);
        return;
    }
}

static void step(mx_sched *s) {
    const int P = s->p.n_parallel, MB = s->max_blocks;
    int nt = 0, nl = 0, n_prefill = 0, n_seqs = 0;
    int chunk_of[256];  /* tokens this step per slot (n_parallel <= 256) */
    for (int i = 0; i < P; i++) {
        chunk_of[i] = 0;
        slot *sl = &s->slots[i];
        if (!sl->g || !sl->decoding) continue;
        if (!mx_kv_alloc_reserve(s->kv, sl->table, &sl->n_blocks, MB, s->block_size, sl->n_past + 1)) {
            retire(s, sl, MX_FINISH_LENGTH, NULL, NULL);
            continue;
        }
        s->b_tok[nt] = sl->hist[sl->n_hist - 1];
        s->b_pos[nt] = sl->n_past;
        s->b_seq[nt] = i;
        s->b_rows[nl] = nt; s->row_slot[nl] = i; nl++;
        nt++;
        chunk_of[i] = 1;
    }
    const int n_dec = nt;   /* decode tokens come first: they run on the exact path */
    for (int i = 0; i < P && nt < s->p.max_step_tokens; i++) {
        slot *sl = &s->slots[i];
        if (!sl->g || sl->decoding) continue;
        int remaining = sl->g->n_prompt - sl->n_past;
        int chunk = remaining < s->p.max_step_tokens - nt ? remaining : s->p.max_step_tokens - nt;
        if (chunk <= 0) continue;
        if (!mx_kv_alloc_reserve(s->kv, sl->table, &sl->n_blocks, MB, s->block_size, sl->n_past + chunk)) {
            retire(s, sl, MX_FINISH_ERROR, NULL, "out of KV cache blocks");
            continue;
        }
        for (int k = 0; k < chunk; k++) {
            s->b_tok[nt] = sl->hist[sl->n_past + k];
            s->b_pos[nt] = sl->n_past + k;
            s->b_seq[nt] = i;
            nt++;
        }
        if (chunk == remaining) { s->b_rows[nl] = nt - 1; s->row_slot[nl] = i; nl++; }
        chunk_of[i] = chunk;
        n_prefill += chunk;
    }
    if (nt == 0) return;
    for (int i = 0; i < P; i++) {
        if (!chunk_of[i]) continue;
        n_seqs++;
        memcpy(s->b_tables + (size_t)i * MB, s->slots[i].table, (size_t)MB * sizeof *s->b_tables);
    }
    mx_batch b = {
        .n_tokens = nt, .tokens = s->b_tok, .pos = s->b_pos, .seq = s->b_seq,
        .n_seqs = P, .max_blocks = MB, .block_tables = s->b_tables,
        .n_logits = nl, .logit_rows = s->b_rows, .n_decode = n_dec,
    };
    mx_status st = mx_model_forward_topk(s->model, &b, MX_TOPK_MAX, s->cand_v, s->cand_id, s->cand_lse);
    if (st != MX_OK) {
        char err[256];
        snprintf(err, sizeof err, "forward pass failed: %s", mx_last_error());
        MX_LOGE("scheduler: %s", err);
        for (int i = 0; i < P; i++)
            if (chunk_of[i] && s->slots[i].g) retire(s, &s->slots[i], MX_FINISH_ERROR, NULL, err);
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->st.n_decode_total++;
    s->st.n_busy_slots_total += (uint64_t)n_seqs;
    s->st.n_prompt_tokens_total += (uint64_t)n_prefill;
    for (int i = 0; i < P; i++) {
        if (!chunk_of[i]) continue;
        s->slots[i].n_past += chunk_of[i];
        if (s->slots[i].n_past > s->st.n_past_max) s->st.n_past_max = s->slots[i].n_past;
        publish(s, &s->slots[i]);
    }
    s->st.kv_used_blocks = s->st.kv_total_blocks - mx_kv_alloc_n_free(s->kv);
    pthread_mutex_unlock(&s->mu);
    for (int r = 0; r < nl; r++) {
        int i = s->row_slot[r];
        if (s->slots[i].g) after_logits(s, i, r);
    }
}

static void *engine_main(void *arg) {
    mx_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stop) {
            admit(s);
            if (s->n_active > 0) break;
            pthread_cond_wait(&s->cv, &s->mu);
        }
        bool stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        for (int i = 0; i < s->p.n_parallel; i++) {
            slot *sl = &s->slots[i];
            if (sl->g && atomic_load(&sl->g->cancelled)) retire(s, sl, MX_FINISH_CANCELLED, NULL, NULL);
        }
        step(s);
    }
    for (int i = 0; i < s->p.n_parallel; i++)
        if (s->slots[i].g) retire(s, &s->slots[i], MX_FINISH_CANCELLED, NULL, NULL);
    pthread_mutex_lock(&s->mu);
    while (s->q_head) {
        mx_gen *g = s->q_head;
        s->q_head = g->next;
        s->n_queued--;
        pthread_mutex_lock(&g->mu);
        g->out.finish = MX_FINISH_CANCELLED; g->done = true;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        gen_unref(g);
    }
    s->q_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------------------------- */
mx_status mx_sched_new(mx_model *m, const mx_tokenizer *tok, const mx_sched_params *p, mx_sched **out) {
    *out = NULL;
    if (p->n_parallel < 1 || p->n_parallel > 256) return mx_errorf(MX_ERR_INVALID_ARG, "n_parallel %d is out of range [1, 256]", p->n_parallel);
    if (p->n_ctx < 2) return mx_errorf(MX_ERR_INVALID_ARG, "context size %d is too small", p->n_ctx);
    mx_sched *s = calloc(1, sizeof *s);
    if (!s) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->model = m; s->tok = tok; s->p = *p;
    if (s->p.max_step_tokens <= 0) s->p.max_step_tokens = 512;
    if (s->p.max_step_tokens < s->p.n_parallel + 16) s->p.max_step_tokens = s->p.n_parallel + 16;
    if (s->p.max_queue < 0) s->p.max_queue = 0;
    const mx_model_config *cfg = mx_model_cfg(m);
    s->vocab = cfg->vocab_size;
    for (int i = 0; i < cfg->n_eos && i < MX_MAX_EOS; i++) s->eos[s->n_eos++] = cfg->eos_ids[i];
    int32_t te = tok ? mx_tokenizer_eos_id(tok) : -1;
    if (te >= 0 && !is_eos(s, te)) s->eos[s->n_eos++] = te;
    /* End-of-turn tokens end generation too (llama.cpp's end-of-generation set): a chat model that
     * closes its turn with one that config.json does not list as EOS would otherwise run on into
     * the next turn. Only special added tokens count. */
    static const char *const eot[] = {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                      "<|end_of_text|>", "<|return|>", "<|eom_id|>", "<\uff5cend\u2581of\u2581sentence\uff5c>"};
    for (size_t i = 0; tok && i < sizeof eot / sizeof eot[0] && s->n_eos < (int)(sizeof s->eos / sizeof s->eos[0]); i++) {
        int32_t id = mx_tokenizer_token_id(tok, eot[i]);
        if (id >= 0 && id < s->vocab && mx_tokenizer_is_special(tok, id) && !is_eos(s, id)) s->eos[s->n_eos++] = id;
    }
    s->block_size = 16;
    s->max_blocks = (s->p.n_ctx + s->block_size - 1) / s->block_size;
    int n_blocks = s->max_blocks * s->p.n_parallel;
    mx_status st = mx_model_prepare(m, n_blocks, s->block_size, s->p.max_step_tokens);
    if (st) goto fail;
    s->block_size = mx_model_block_size(m);
    s->kv = mx_kv_alloc_new(n_blocks);
    s->slots = calloc((size_t)p->n_parallel, sizeof *s->slots);
    size_t T = (size_t)s->p.max_step_tokens;
    s->b_tok = malloc(T * sizeof *s->b_tok);
    s->b_pos = malloc(T * sizeof *s->b_pos);
    s->b_seq = malloc(T * sizeof *s->b_seq);
    s->b_rows = malloc((size_t)p->n_parallel * sizeof *s->b_rows);
    s->row_slot = malloc((size_t)p->n_parallel * sizeof *s->row_slot);
    s->b_tables = calloc((size_t)p->n_parallel * (size_t)s->max_blocks, sizeof *s->b_tables);
    s->logits = malloc((size_t)s->vocab * sizeof *s->logits);
    s->cand_v = malloc((size_t)p->n_parallel * MX_TOPK_MAX * sizeof *s->cand_v);
    s->cand_id = malloc((size_t)p->n_parallel * MX_TOPK_MAX * sizeof *s->cand_id);
    s->cand_lse = malloc((size_t)p->n_parallel * sizeof *s->cand_lse);
    if (!s->kv || !s->slots || !s->b_tok || !s->b_pos || !s->b_seq || !s->b_rows || !s->row_slot ||
        !s->b_tables || !s->logits || !s->cand_v || !s->cand_id || !s->cand_lse) { st = mx_errorf(MX_ERR_NOMEM, "out of memory for the scheduler"); goto fail; }
    for (int i = 0; i < p->n_parallel; i++) {
        slot *sl = &s->slots[i];
        sl->table = calloc((size_t)s->max_blocks, sizeof *sl->table);
        sl->hist = malloc(((size_t)s->p.n_ctx + 1) * sizeof *sl->hist);
        if (!sl->table || !sl->hist) { st = mx_errorf(MX_ERR_NOMEM, "out of memory for the scheduler"); goto fail; }
        sl->info.id = i;
    }
    s->st.kv_total_blocks = n_blocks;
    if (pthread_create(&s->thread, NULL, engine_main, s)) { st = mx_errorf(MX_ERR_INTERNAL, "cannot start the engine thread"); goto fail; }
    s->thread_started = true;
    *out = s;
    return MX_OK;
fail:
    mx_sched_free(s);
    return st;
}

void mx_sched_shutdown(mx_sched *s) {
    if (!s || !s->thread_started) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->thread_started = false;
}

void mx_sched_free(mx_sched *s) {
    if (!s) return;
    mx_sched_shutdown(s);
    if (s->n_draws) MX_LOGD("scheduler: %llu of %llu draws read the full logit row", (unsigned long long)s->n_full_rows, (unsigned long long)s->n_draws);
    if (s->slots) {
        for (int i = 0; i < s->p.n_parallel; i++) {
            free(s->slots[i].table); free(s->slots[i].hist);
            mx_buf_free(&s->slots[i].piece); mx_buf_free(&s->slots[i].text);
        }
    }
    free(s->slots);
    mx_kv_alloc_free(s->kv);
    free(s->b_tok); free(s->b_pos); free(s->b_seq); free(s->b_rows); free(s->row_slot);
    free(s->b_tables); free(s->logits); free(s->cand_v); free(s->cand_id); free(s->cand_lse);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

void mx_sched_stats_get(mx_sched *s, mx_sched_stats *st) {
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->n_processing = s->n_active;
    st->n_deferred = s->n_queued;
    pthread_mutex_unlock(&s->mu);
}

int mx_sched_slots(mx_sched *s, mx_slot_info *out, int n) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->p.n_parallel && i < n; i++) out[i] = s->slots[i].info;
    pthread_mutex_unlock(&s->mu);
    return s->p.n_parallel;
}
