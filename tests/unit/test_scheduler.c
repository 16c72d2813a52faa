/* tests/unit/test_scheduler.c: the continuous-batching scheduler on the demo model, without HTTP:
 * greedy text of a request alone equals the text it gets beside others (mixed prefill and decode
 * in one batch), n_predict / EOS / stop-string endings, cancellation freeing the slot, the bounded
 * queue (MX_ERR_BUSY), prompt validation (empty, too long, bad ids) and stats. */
#include "test.h"
#include "mlxcel/backend.h"
#include "mlxcel/scheduler.h"

#include <string.h>
#include <time.h>

static mx_backend g_be;
static mx_model *g_model;
static mx_tokenizer *g_tok;

static void encode(const char *text, int32_t **ids, int *n) {
    *ids = NULL; *n = 0;
    mx_tokenizer_encode(g_tok, text, strlen(text), false, ids, n);
}

static mx_gen_params greedy(const int32_t *ids, int n, int n_predict) {
    mx_gen_params p;
    memset(&p, 0, sizeof p);
    p.prompt = ids; p.n_prompt = n; p.n_predict = n_predict; p.ignore_eos = true; p.cache_prompt = true;
    mx_sampling_default(&p.sampling);
    p.sampling.temperature = 0;
    return p;
}

/* Run a request to the end; returns its text (malloc'ed) and fills u. */
static char *finish(mx_gen *g, mx_gen_update *u) {
    memset(u, 0, sizeof *u);
    while (!u->done) mx_gen_take(g, 1000, u);
    char *t = mx_strdup(u->text.data ? u->text.data : "");
    return t;
}

static const char *k_prompts[6] = {
    "A wise man once said", "The computer", "Love is", "Never trust a",
    "Fortune favors the", "In the beginning there was a very long sentence about cookies and",
};

/* A model can be prepared once: each case loads its own (the demo model loads in milliseconds). */
static void fresh_model(void) {
    char dir[4096];
    mx_model_free(g_model);
    g_model = NULL;
    if (mx_model_load(t_path(dir, sizeof dir, "models/fortune-6m-mlx-q4"), &g_be, &g_model))
        printf("model load: %s\n", mx_last_error());
}

static void test_batched_equals_alone(void) {
    fresh_model();
    mx_sched_params sp = {.n_parallel = 6, .n_ctx = 256, .max_queue = 8, .max_step_tokens = 16};
    mx_sched *s = NULL;
    TREQUIRE(mx_sched_new(g_model, g_tok, &sp, &s) == MX_OK, "sched: %s", mx_last_error());
    char *alone[6] = {0}, *together[6] = {0};
    int32_t *ids[6]; int n[6];
    for (int i = 0; i < 6; i++) encode(k_prompts[i], &ids[i], &n[i]);
    for (int i = 0; i < 6; i++) {
        mx_gen_params p = greedy(ids[i], n[i], 20);
        mx_gen *g;
        TREQUIRE(mx_sched_submit(s, &p, &g) == MX_OK, "submit: %s", mx_last_error());
        mx_gen_update u;
        alone[i] = finish(g, &u);
        TCHECK(u.finish == MX_FINISH_LENGTH && u.n_gen == 20 && u.n_toks == 20, "alone %d: finish %d n_gen %d toks %d",
               i, u.finish, u.n_gen, u.n_toks);
        mx_gen_update_free(&u);
        mx_gen_release(g);
    }
    /* all at once: a 16-token step budget forces chunked prefill next to decodes */
    mx_gen *gs[6];
    for (int i = 0; i < 6; i++) {
        mx_gen_params p = greedy(ids[i], n[i], 20);
        TREQUIRE(mx_sched_submit(s, &p, &gs[i]) == MX_OK, "submit: %s", mx_last_error());
    }
    for (int i = 0; i < 6; i++) {
        mx_gen_update u;
        together[i] = finish(gs[i], &u);
        mx_gen_update_free(&u);
        mx_gen_release(gs[i]);
        TCHECK(alone[i] && together[i] && !strcmp(alone[i], together[i]), "prompt %d: alone '%s' vs together '%s'",
               i, alone[i], together[i]);
    }
    mx_sched_stats st;
    mx_sched_stats_get(s, &st);
    TCHECK(st.n_decode_total > 0 && st.n_busy_slots_total > st.n_decode_total, "no shared batches: %llu seqs over %llu passes",
           (unsigned long long)st.n_busy_slots_total, (unsigned long long)st.n_decode_total);
    TCHECK(st.n_gen_tokens_total == 240, "generated %llu tokens, want 240", (unsigned long long)st.n_gen_tokens_total);
    TCHECK(st.n_processing == 0 && st.n_deferred == 0, "after: %d processing, %d waiting", st.n_processing, st.n_deferred);
    /* free slots keep only their prompts' blocks (prompt cache): at most 6 prompts of < 32 tokens */
    TCHECK(st.kv_used_blocks <= 6 * 2, "%d KV blocks still held", st.kv_used_blocks);
    for (int i = 0; i < 6; i++) { free(alone[i]); free(together[i]); free(ids[i]); }
    mx_sched_free(s);
}

static void test_endings(void) {
    fresh_model();
    mx_sched_params sp = {.n_parallel = 2, .n_ctx = 64, .max_queue = 4};
    mx_sched *s = NULL;
    TREQUIRE(mx_sched_new(g_model, g_tok, &sp, &s) == MX_OK, "sched: %s", mx_last_error());
    int32_t *ids; int n;
    encode("A wise man once said", &ids, &n);
    /* EOS ends the demo prompt's greedy text (golden: "... Lady Berkeley<|endoftext|>") */
    mx_gen_params p = greedy(ids, n, 40);
    p.ignore_eos = false;
    mx_gen *g; mx_gen_update u;
    TREQUIRE(mx_sched_submit(s, &p, &g) == MX_OK, "submit");
    char *full = finish(g, &u);
    TCHECK(u.finish == MX_FINISH_EOS, "finish %d, want EOS", u.finish);
    TCHECK(!strcmp(full, " the company is a beautiful world.\n\t\t-- Lady Berkeley"), "text '%s'", full);
    mx_gen_update_free(&u); mx_gen_release(g);
    /* stop string spanning tokens: text before it, finish STOP */
    const char *stops[2] = {"zzz", "beautiful w"};
    p.stops = stops; p.n_stops = 2;
    TREQUIRE(mx_sched_submit(s, &p, &g) == MX_OK, "submit");
    char *t = finish(g, &u);
    TCHECK(u.finish == MX_FINISH_STOP && !strcmp(t, " the company is a "), "stop: finish %d text '%s'", u.finish, t);
    free(t); mx_gen_update_free(&u); mx_gen_release(g);
    /* n_predict 0: nothing generated */
    p = greedy(ids, n, 0);
    TREQUIRE(mx_sched_submit(s, &p, &g) == MX_OK, "submit");
    t = finish(g, &u);
    TCHECK(u.finish == MX_FINISH_LENGTH && u.n_gen == 0 && !*t, "n_predict 0: finish %d n_gen %d", u.finish, u.n_gen);
    free(t); mx_gen_update_free(&u); mx_gen_release(g);
    /* the context ends generation: 64 positions */
    p = greedy(ids, n, -1);
    TREQUIRE(mx_sched_submit(s, &p, &g) == MX_OK, "submit");
    t = finish(g, &u);
    TCHECK(u.finish == MX_FINISH_LENGTH && u.n_prompt + u.n_gen == 65, "context: finish %d, %d + %d", u.finish, u.n_prompt, u.n_gen);
    free(t); mx_gen_update_free(&u); mx_gen_release(g);
    /* logprobs: chosen id first among the top when greedy */
    p = greedy(ids, n, 3);
    p.logprobs = true; p.sampling.n_logprobs = 3;
    TREQUIRE(mx_sched_submit(s, &p, &g) == MX_OK, "submit");
    t = finish(g, &u);
    TCHECK(u.n_toks == 3, "%d token records", u.n_toks);
    for (int i = 0; i < u.n_toks; i++)
        TCHECK(u.toks[i].n_top == 3 && u.toks[i].top[0].id == u.toks[i].id && u.toks[i].logprob <= 0 &&
               u.toks[i].top[0].logprob >= u.toks[i].top[1].logprob, "token %d logprobs", i);
    free(t); mx_gen_update_free(&u); mx_gen_release(g);
    /* bad prompts */
    int32_t bad[2] = {1, 999999};
    p = greedy(bad, 2, 4);
    TCHECK(mx_sched_submit(s, &p, &g) == MX_ERR_INVALID_ARG, "bad id accepted");
    p = greedy(ids, 0, 4);
    TCHECK(mx_sched_submit(s, &p, &g) == MX_ERR_INVALID_ARG, "empty prompt accepted");
    int32_t longp[64] = {0};
    p = greedy(longp, 64, 4);
    TCHECK(mx_sched_submit(s, &p, &g) == MX_ERR_RANGE, "prompt of n_ctx tokens accepted");
    free(full); free(ids);
    mx_sched_free(s);
}

static void test_cancel_and_queue(void) {
    fresh_model();
    mx_sched_params sp = {.n_parallel = 1, .n_ctx = 1024, .max_queue = 1};
    mx_sched *s = NULL;
    TREQUIRE(mx_sched_new(g_model, g_tok, &sp, &s) == MX_OK, "sched: %s", mx_last_error());
    int32_t *ids; int n;
    encode("The computer", &ids, &n);
    mx_gen_params p = greedy(ids, n, 1000);
    mx_gen *a, *b, *c;
    TREQUIRE(mx_sched_submit(s, &p, &a) == MX_OK, "submit a");
    mx_gen_update u;
    memset(&u, 0, sizeof u);
    while (u.n_gen == 0) mx_gen_take(a, 1000, &u);            /* a is running */
    TREQUIRE(mx_sched_submit(s, &p, &b) == MX_OK, "submit b (queued)");
    TCHECK(mx_sched_submit(s, &p, &c) == MX_ERR_BUSY, "third request not refused");
    mx_gen_cancel(a);
    while (!u.done) mx_gen_take(a, 1000, &u);
    TCHECK(u.finish == MX_FINISH_CANCELLED && u.n_gen < 1000, "cancel: finish %d after %d tokens", u.finish, u.n_gen);
    mx_gen_update_free(&u);
    mx_gen_release(a);
    /* b gets the slot; releasing it mid-way (a client gone) frees it too */
    memset(&u, 0, sizeof u);
    while (u.n_gen == 0) mx_gen_take(b, 1000, &u);
    mx_gen_update_free(&u);
    mx_gen_release(b);
    for (int i = 0; i < 200; i++) {
        mx_sched_stats st;
        mx_sched_stats_get(s, &st);
        if (st.n_processing == 0 && st.n_deferred == 0) break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    mx_sched_stats st;
    mx_sched_stats_get(s, &st);
    /* (the freed slot keeps its blocks for its next request's prefix: as many as b reached before the
     * release took effect, which depends on the machine's speed, but fewer than its 1,000 tokens need) */
    TCHECK(st.n_processing == 0 && st.kv_used_blocks >= 1 && st.kv_used_blocks * 16 < n + 1000,
           "slot not freed: %d processing, %d blocks", st.n_processing, st.kv_used_blocks);
    /* shutdown with a request running: it ends cancelled, later submits are refused */
    p = greedy(ids, n, 1000);
    TREQUIRE(mx_sched_submit(s, &p, &a) == MX_OK, "submit");
    mx_sched_shutdown(s);
    memset(&u, 0, sizeof u);
    while (!u.done) mx_gen_take(a, 1000, &u);
    TCHECK(u.finish == MX_FINISH_CANCELLED, "after shutdown: finish %d", u.finish);
    TCHECK(mx_sched_submit(s, &p, &b) == MX_ERR_BUSY, "submit after shutdown accepted");
    mx_gen_update_free(&u);
    mx_gen_release(a);
    free(ids);
    mx_sched_free(s);
}

/* A free slot keeps its prompt's KV: a request with the same prefix reuses it (only prompt
 * positions, never generated ones) and gets the same greedy text as without the cache. */
static void test_prompt_cache(void) {
    fresh_model();
    mx_sched_params sp = {.n_parallel = 2, .n_ctx = 256, .max_queue = 4};
    mx_sched *s = NULL;
    TREQUIRE(mx_sched_new(g_model, g_tok, &sp, &s) == MX_OK, "sched: %s", mx_last_error());
    int32_t *a, *b; int na, nb;
    encode("In the beginning there was a very long sentence about cookies", &a, &na);
    encode("In the beginning there was a very long sentence about cookies and a cat", &b, &nb);
    char *texts[4];
    int cached[4];
    /* b without cache, a (fills a slot), a again (cached up to its last token), b (cached prefix a) */
    const int32_t *pr[4] = {b, a, a, b};
    int np[4] = {nb, na, na, nb};
    bool use[4] = {false, true, true, true};
    for (int i = 0; i < 4; i++) {
        mx_gen_params p = greedy(pr[i], np[i], 12);
        p.cache_prompt = use[i];
        mx_gen *g; mx_gen_update u;
        TREQUIRE(mx_sched_submit(s, &p, &g) == MX_OK, "submit %d", i);
        texts[i] = finish(g, &u);
        cached[i] = u.n_cached;
        mx_gen_update_free(&u);
        mx_gen_release(g);
    }
    TCHECK(cached[0] == 0, "no-cache request reused %d", cached[0]);
    TCHECK(cached[2] == na - 1, "same prompt: %d cached, want %d", cached[2], na - 1);
    TCHECK(cached[3] >= na - 1 && cached[3] <= na, "longer prompt: %d cached, want about %d", cached[3], na);
    TCHECK(!strcmp(texts[1], texts[2]), "a: '%s' vs cached '%s'", texts[1], texts[2]);
    TCHECK(!strcmp(texts[0], texts[3]), "b: '%s' vs cached '%s'", texts[0], texts[3]);
    for (int i = 0; i < 4; i++) free(texts[i]);
    free(a); free(b);
    mx_sched_free(s);
}

int main(void) {
    char dir[4096];
    t_path(dir, sizeof dir, "models/fortune-6m-mlx-q4");
    if (mx_backend_cpu_init(&g_be) || mx_model_load(dir, &g_be, &g_model) || mx_tokenizer_load(dir, &g_tok)) {
        printf("FAIL setup: %s\n", mx_last_error());
        return 1;
    }
    RUN(test_batched_equals_alone);
    RUN(test_endings);
    RUN(test_cancel_and_queue);
    RUN(test_prompt_cache);
    mx_tokenizer_free(g_tok);
    mx_model_free(g_model);
    mx_backend_cpu_free(&g_be);
    TEST_EXIT();
}
