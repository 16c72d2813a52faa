/* server/gen.c: the generating endpoints: POST /v1/chat/completions, /v1/completions and
 * llama-server's native /completion. Validates the request (types, ranges, context size), turns it
 * into token ids, submits it to the scheduler and answers with one JSON body or an SSE stream
 * (data: chunks, OpenAI's ending data: [DONE]). A client that goes away cancels its generation.
 * Not the scheduler (engine/scheduler.c) and not the routing (http.c). */
#include "server/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_STOPS 16

typedef struct gen_req {
    mx_gen_kind kind;
    bool stream, include_usage;
    int n_predict;
    bool ignore_eos, cache_prompt;
    mx_sampling samp;
    mx_logit_bias *bias; int n_bias;
    char *stops[MAX_STOPS]; int n_stops;
    bool logprobs; int n_top;
    int32_t *prompt; int n_prompt;
    char *prompt_text;
    char id[64];
    long long created;
    unsigned long req_id;
} gen_req;

static void gen_req_free(gen_req *r) {
    free(r->bias);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->prompt);
    free(r->prompt_text);
}

/* A number field: 0 absent (or null), 1 read, -1 wrong type/range (err filled). */
static int get_num(json_t *req, const char *key, double lo, double hi, double *out, char *err, size_t errn) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) { snprintf(err, errn, "'%s' must be a number", key); return -1; }
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) { snprintf(err, errn, "'%s' must be in [%g, %g], got %g", key, lo, hi, x); return -1; }
    *out = x;
    return 1;
}

static int get_int(json_t *req, const char *key, long long lo, long long hi, long long *out, char *err, size_t errn) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
        *out = (long long)json_real_value(v);
    } else if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else {
        snprintf(err, errn, "'%s' must be an integer", key);
        return -1;
    }
    if (*out < lo || *out > hi) { snprintf(err, errn, "'%s' must be in [%lld, %lld], got %lld", key, lo, hi, *out); return -1; }
    return 1;
}

static int get_bool(json_t *req, const char *key, bool *out, char *err, size_t errn) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) { snprintf(err, errn, "'%s' must be a boolean", key); return -1; }
    *out = json_is_true(v);
    return 1;
}

static bool add_bias(gen_req *r, int vocab, long long id, double bias, char *err, size_t errn) {
    if (id < 0 || id >= vocab) { snprintf(err, errn, "'logit_bias': token id %lld is outside [0, %d)", id, vocab); return false; }
    mx_logit_bias *n = realloc(r->bias, (size_t)(r->n_bias + 1) * sizeof *n);
    if (!n) { snprintf(err, errn, "out of memory"); return false; }
    r->bias = n;
    r->bias[r->n_bias].id = (int32_t)id;
    r->bias[r->n_bias].bias = (float)bias;
    r->n_bias++;
    return true;
}

static bool parse_logit_bias(gen_req *r, json_t *lb, int vocab, char *err, size_t errn) {
    if (!lb || json_is_null(lb)) return true;
    if (json_is_object(lb)) {
        const char *k; json_t *v;
        json_object_foreach(lb, k, v) {
            char *end;
            long long id = strtoll(k, &end, 10);
            if (!*k || *end) { snprintf(err, errn, "'logit_bias' keys must be token ids, got '%.40s'", k); return false; }
            double b;
            if (json_is_false(v)) b = -INFINITY;
            else if (json_is_number(v)) b = json_number_value(v);
            else { snprintf(err, errn, "'logit_bias' values must be numbers"); return false; }
            if (isfinite(b) && (b < -100 || b > 100)) { snprintf(err, errn, "'logit_bias' values must be in [-100, 100]"); return false; }
            if (!add_bias(r, vocab, id, b, err, errn)) return false;
        }
        return true;
    }
    if (json_is_array(lb)) {
        size_t i; json_t *pair;
        json_array_foreach(lb, i, pair) {
            json_t *a = json_array_get(pair, 0), *b = json_array_get(pair, 1);
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_integer(a) ||
                !(json_is_number(b) || json_is_false(b))) {
                snprintf(err, errn, "'logit_bias'[%zu] must be [token_id, bias]", i);
                return false;
            }
            double bv = json_is_false(b) ? -INFINITY : json_number_value(b);
            if (isfinite(bv) && (bv < -100 || bv > 100)) { snprintf(err, errn, "'logit_bias' values must be in [-100, 100]"); return false; }
            if (!add_bias(r, vocab, json_integer_value(a), bv, err, errn)) return false;
        }
        return true;
    }
    snprintf(err, errn, "'logit_bias' must be an object or an array of [token_id, bias]");
    return false;
}

static bool parse_stops(gen_req *r, json_t *stop, char *err, size_t errn) {
    if (!stop || json_is_null(stop)) return true;
    if (json_is_string(stop)) {
        r->stops[r->n_stops++] = mx_strdup(json_string_value(stop));
        return true;
    }
    if (!json_is_array(stop)) { snprintf(err, errn, "'stop' must be a string or an array of strings"); return false; }
    if (json_array_size(stop) > MAX_STOPS) { snprintf(err, errn, "'stop' may hold at most %d strings", MAX_STOPS); return false; }
    size_t i; json_t *v;
    json_array_foreach(stop, i, v) {
        if (!json_is_string(v)) { snprintf(err, errn, "'stop'[%zu] must be a string", i); return false; }
        r->stops[r->n_stops++] = mx_strdup(json_string_value(v));
    }
    return true;
}

/* Token ids from a prompt value: a string, or an array of token ids, or an array of one string. */
static bool parse_prompt(mx_srv *s, gen_req *r, json_t *p, bool add_special, char *err, size_t errn) {
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (json_is_string(p)) {
        r->prompt_text = mx_strdup(json_string_value(p));
        if (mx_tokenizer_encode(s->tok, json_string_value(p), json_string_length(p), add_special, &r->prompt, &r->n_prompt)) {
            snprintf(err, errn, "cannot tokenize the prompt: %s", mx_last_error());
            return false;
        }
        return true;
    }
    if (json_is_array(p)) {
        size_t n = json_array_size(p);
        int vocab = mx_tokenizer_vocab_size(s->tok);
        const mx_model_config *cfg = mx_model_cfg(s->model);
        if (cfg->vocab_size > vocab) vocab = cfg->vocab_size;
        r->prompt = malloc((n ? n : 1) * sizeof *r->prompt);
        if (!r->prompt) { snprintf(err, errn, "out of memory"); return false; }
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_array_get(p, i);
            if (!json_is_integer(v)) {
                snprintf(err, errn, "'prompt' must be a string, an array of token ids or an array of one string");
                return false;
            }
            long long id = json_integer_value(v);
            if (id < 0 || id >= vocab) { snprintf(err, errn, "'prompt'[%zu]: token id %lld is outside [0, %d)", i, id, vocab); return false; }
            r->prompt[i] = (int32_t)id;
        }
        r->n_prompt = (int)n;
        r->prompt_text = mx_strdup("");
        return true;
    }
    snprintf(err, errn, "'prompt' must be a string, an array of token ids or an array of one string");
    return false;
}

/* Fill r from the request JSON; false with a 400 message in err. */
static bool parse_request(mx_srv *s, json_t *req, gen_req *r, char *err, size_t errn, mx_err_kind *kind) {
    *kind = MX_E_INVALID;
    int vocab = mx_model_cfg(s->model)->vocab_size;
    mx_sampling_default(&r->samp);
    r->n_predict = s->p->n_predict;
    double d; long long i; int k;
    if (get_bool(req, "stream", &r->stream, err, errn) < 0) return false;
    json_t *so = json_object_get(req, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) { snprintf(err, errn, "'stream_options' must be an object"); return false; }
        if (get_bool(so, "include_usage", &r->include_usage, err, errn) < 0) return false;
    }
    static const char *const max_keys[] = {"max_completion_tokens", "max_tokens", "n_predict"};
    for (int m = 0; m < 3; m++) {
        long long lo = strcmp(max_keys[m], "n_predict") ? 0 : -1;
        if ((k = get_int(req, max_keys[m], lo, 1 << 24, &i, err, errn)) < 0) return false;
        if (k) { r->n_predict = (int)i; break; }
    }
    if ((k = get_num(req, "temperature", 0, 100, &d, err, errn)) < 0) return false;
    if (k) r->samp.temperature = (float)d;
    if ((k = get_num(req, "top_p", 0, 1, &d, err, errn)) < 0) return false;
    if (k) r->samp.top_p = (float)d;
    if ((k = get_int(req, "top_k", 0, 1 << 30, &i, err, errn)) < 0) return false;
    if (k) r->samp.top_k = (int)i;
    if ((k = get_num(req, "min_p", 0, 1, &d, err, errn)) < 0) return false;
    if (k) r->samp.min_p = (float)d;
    if ((k = get_num(req, "presence_penalty", -2, 2, &d, err, errn)) < 0) return false;
    if (k) r->samp.presence_penalty = (float)d;
    if ((k = get_num(req, "frequency_penalty", -2, 2, &d, err, errn)) < 0) return false;
    if (k) r->samp.frequency_penalty = (float)d;
    if ((k = get_num(req, "repeat_penalty", 0, 10, &d, err, errn)) < 0) return false;
    if (k) r->samp.repeat_penalty = (float)d;
    if ((k = get_int(req, "repeat_last_n", -1, 1 << 24, &i, err, errn)) < 0) return false;
    if (k) r->samp.repeat_last_n = (int)i;
    if ((k = get_int(req, "seed", INT64_MIN, INT64_MAX, &i, err, errn)) < 0) return false;
    if (k && i >= 0) r->samp.seed = (uint64_t)i;
    else r->samp.seed = (uint64_t)(mx_time_s() * 1e9) ^ ((uint64_t)r->req_id * 0x9E3779B97F4A7C15ull);
    if ((k = get_int(req, "n", 1, 1, &i, err, errn)) < 0) { snprintf(err, errn, "'n' must be 1 (one choice per request)"); return false; }
    if (get_bool(req, "ignore_eos", &r->ignore_eos, err, errn) < 0) return false;
    r->cache_prompt = true;
    if (get_bool(req, "cache_prompt", &r->cache_prompt, err, errn) < 0) return false;
    if ((k = get_int(req, "id_slot", -1, s->p->n_parallel - 1, &i, err, errn)) < 0) return false;
    if (!parse_logit_bias(r, json_object_get(req, "logit_bias"), vocab, err, errn)) return false;
    r->samp.logit_bias = r->bias; r->samp.n_logit_bias = r->n_bias;
    if (!parse_stops(r, json_object_get(req, "stop"), err, errn)) return false;

    /* logprobs */
    if (r->kind == MX_GEN_CHAT) {
        if (get_bool(req, "logprobs", &r->logprobs, err, errn) < 0) return false;
        if ((k = get_int(req, "top_logprobs", 0, MX_MAX_TOP_LOGPROBS, &i, err, errn)) < 0) return false;
        if (k) {
            if (!r->logprobs) { snprintf(err, errn, "'top_logprobs' needs 'logprobs': true"); return false; }
            r->n_top = (int)i;
        }
    } else if (r->kind == MX_GEN_OAI_COMPLETION) {
        if ((k = get_int(req, "logprobs", 0, 5, &i, err, errn)) < 0) return false;
        if (k) { r->logprobs = true; r->n_top = (int)i; }
    } else {
        if ((k = get_int(req, "n_probs", 0, MX_MAX_TOP_LOGPROBS, &i, err, errn)) < 0) return false;
        if (k && i > 0) { r->logprobs = true; r->n_top = (int)i; }
    }
    r->samp.n_logprobs = r->n_top;

    /* prompt */
    if (r->kind == MX_GEN_CHAT) {
        char *text = mx_render_chat(s, req, err, errn);
        if (!text) return false;
        r->prompt_text = text;
        if (mx_tokenizer_encode(s->tok, text, strlen(text), false, &r->prompt, &r->n_prompt)) {
            snprintf(err, errn, "cannot tokenize the prompt: %s", mx_last_error());
            return false;
        }
    } else {
        json_t *p = json_object_get(req, "prompt");
        if (!p) { snprintf(err, errn, "'prompt' is required"); return false; }
        if (!parse_prompt(s, r, p, true, err, errn)) return false;
    }
    if (r->n_prompt == 0) {
        int32_t bos = mx_model_cfg(s->model)->bos_id;
        if (bos < 0) bos = mx_tokenizer_bos_id(s->tok);
        if (bos < 0) { snprintf(err, errn, "the prompt is empty"); return false; }
        free(r->prompt);
        r->prompt = malloc(sizeof *r->prompt);
        if (!r->prompt) { snprintf(err, errn, "out of memory"); return false; }
        r->prompt[0] = bos; r->n_prompt = 1;
    }
    if (r->n_prompt >= s->n_ctx) {
        *kind = MX_E_CONTEXT;
        snprintf(err, errn, "the request exceeds the available context size: the prompt has %d tokens, the context holds %d",
                 r->n_prompt, s->n_ctx);
        return false;
    }
    return true;
}

/* ---- response pieces ---------------------------------------------------------------------------- */
static const char *finish_str(mx_finish f) {
    return f == MX_FINISH_LENGTH ? "length" : "stop";
}

static json_t *timings_json(const mx_gen_update *u) {
    double pms = u->t_prompt_ms, gms = u->t_gen_ms;
    int pn = u->n_prompt - u->n_cached;   /* prompt tokens processed (the rest came from the cache) */
    return json_pack("{s:i,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f}",
                     "cache_n", u->n_cached, "prompt_n", pn, "prompt_ms", pms,
                     "prompt_per_token_ms", pn ? pms / pn : 0.0,
                     "prompt_per_second", pms > 0 ? 1e3 * pn / pms : 0.0,
                     "predicted_n", u->n_gen, "predicted_ms", gms,
                     "predicted_per_token_ms", u->n_gen ? gms / u->n_gen : 0.0,
                     "predicted_per_second", gms > 0 ? 1e3 * u->n_gen / gms : 0.0);
}

static json_t *usage_json(const mx_gen_update *u) {
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", u->n_prompt, "completion_tokens", u->n_gen,
                     "total_tokens", u->n_prompt + u->n_gen, "prompt_tokens_details", "cached_tokens", u->n_cached);
}

static json_t *bytes_of(const char *t, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)t[i]));
    return a;
}

/* One token's entry: {"id" (llama-server only), "token", "logprob", "bytes"}. */
static json_t *prob_entry(mx_srv *s, int32_t id, float logprob, bool with_id) {
    size_t n;
    char *txt = mx_token_text(s, id, &n);
    json_t *o = json_object();
    if (with_id) json_object_set_new(o, "id", json_integer(id));
    json_object_set_new(o, "token", mx_json_str_lossy(txt, n));
    json_object_set_new(o, "logprob", json_real(logprob));
    json_object_set_new(o, "bytes", bytes_of(txt, n));
    free(txt);
    return o;
}

/* Entries of tokens [from, to), each with its "top_logprobs" alternatives: OpenAI chat logprobs
 * content (with_id false) or llama-server completion_probabilities (with_id true). */
static json_t *prob_entries(mx_srv *s, const mx_gen_update *u, int from, int to, bool with_id) {
    json_t *a = json_array();
    for (int i = from; i < to; i++) {
        const mx_gen_token *t = &u->toks[i];
        json_t *e = prob_entry(s, t->id, t->logprob, with_id), *tops = json_array();
        for (int k = 0; k < t->n_top; k++) json_array_append_new(tops, prob_entry(s, t->top[k].id, t->top[k].logprob, with_id));
        json_object_set_new(e, "top_logprobs", tops);
        json_array_append_new(a, e);
    }
    return a;
}

static json_t *chat_logprobs(mx_srv *s, const mx_gen_update *u, int from, int to) {
    return json_pack("{s:o}", "content", prob_entries(s, u, from, to, false));
}

/* OpenAI completions logprobs for tokens [from, to). */
static json_t *cmpl_logprobs(mx_srv *s, const mx_gen_update *u, int from, int to) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = from; i < to; i++) {
        const mx_gen_token *t = &u->toks[i];
        size_t n;
        char *txt = mx_token_text(s, t->id, &n);
        json_array_append_new(toks, mx_json_str_lossy(txt, n));
        free(txt);
        json_array_append_new(lps, json_real(t->logprob));
        json_t *o = json_object();
        for (int k = 0; k < t->n_top; k++) {
            size_t m;
            char *tt = mx_token_text(s, t->top[k].id, &m);
            json_t *key = mx_json_str_lossy(tt, m);
            json_object_set_new(o, json_string_value(key), json_real(t->top[k].logprob));
            json_decref(key);
            free(tt);
        }
        json_array_append_new(tops, o);
        json_array_append_new(offs, json_integer(0));
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset", offs);
}

static json_t *llama_probs(mx_srv *s, const mx_gen_update *u, int from, int to) {
    return prob_entries(s, u, from, to, true);
}

static json_t *ids_json(const mx_gen_update *u, int from, int to) {
    json_t *a = json_array();
    for (int i = from; i < to; i++) json_array_append_new(a, json_integer(u->toks[i].id));
    return a;
}

static const char *stop_type(mx_finish f) {
    switch (f) {
    case MX_FINISH_EOS: return "eos";
    case MX_FINISH_STOP: return "word";
    case MX_FINISH_LENGTH: return "limit";
    default: return "none";
    }
}

/* The final llama-server /completion object (also its last stream event). */
static json_t *llama_final(mx_srv *s, const gen_req *r, const mx_gen_update *u, const char *content, size_t clen,
                           int tok_from) {
    json_t *j = json_pack("{s:i,s:o,s:o,s:i,s:b,s:s,s:i,s:i,s:s,s:s,s:b,s:i,s:o,s:o}",
                          "index", 0, "content", mx_json_str_lossy(content, clen),
                          "tokens", ids_json(u, tok_from, u->n_toks), "id_slot", u->slot < 0 ? 0 : u->slot,
                          "stop", 1, "model", s->model_id, "tokens_predicted", u->n_gen,
                          "tokens_evaluated", u->n_prompt, "stop_type", stop_type(u->finish),
                          "stopping_word", u->finish == MX_FINISH_STOP ? u->stop_word : "",
                          "truncated", 0, "tokens_cached", u->n_cached,
                          "timings", timings_json(u),
                          "generation_settings", json_pack("{s:i,s:f,s:i,s:f,s:f,s:I}", "n_predict", r->n_predict,
                                                           "temperature", (double)r->samp.temperature, "top_k", r->samp.top_k,
                                                           "top_p", (double)r->samp.top_p, "min_p", (double)r->samp.min_p,
                                                           "seed", (json_int_t)(r->samp.seed & 0x7fffffffffffffffull)));
    if (j) {
        json_object_set_new(j, "prompt", mx_json_str_lossy(r->prompt_text ? r->prompt_text : "", r->prompt_text ? strlen(r->prompt_text) : 0));
        json_object_set_new(j, "has_new_line", json_boolean(memchr(content, '\n', clen) != NULL));
        if (r->logprobs) json_object_set_new(j, "completion_probabilities", llama_probs(s, u, tok_from, u->n_toks));
    }
    return j;
}

/* ---- streaming ---------------------------------------------------------------------------------- */
typedef struct stream_ctx {
    mx_srv *s;
    struct MHD_Connection *c;
    mx_gen *g;
    gen_req r;
    mx_gen_update u;
    mx_buf out; size_t off;
    size_t text_sent; int toks_sent;
    bool role_sent, finished;
    size_t all_text_len; bool newline_seen;
    double last_take;   /* when the engine's output was last taken (see take_paced) */
} stream_ctx;

static void sse(mx_buf *b, json_t *j) {
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!t) return;
    mx_buf_puts(b, "data: ");
    mx_buf_puts(b, t);
    mx_buf_puts(b, "\n\n");
    free(t);
}

static json_t *chat_chunk(stream_ctx *x, json_t *delta, json_t *logprobs, const char *finish) {
    json_t *choice = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "delta", delta, "logprobs",
                               logprobs ? logprobs : json_null(), "finish_reason",
                               finish ? json_string(finish) : json_null());
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o]}", "id", x->r.id, "object", "chat.completion.chunk",
                     "created", (json_int_t)x->r.created, "model", x->s->model_id, "system_fingerprint",
                     "mlxcel-" MX_VERSION, "choices", choice);
}

static json_t *cmpl_chunk(stream_ctx *x, const char *text, size_t n, json_t *logprobs, const char *finish) {
    json_t *choice = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "text", mx_json_str_lossy(text, n), "logprobs",
                               logprobs ? logprobs : json_null(), "finish_reason",
                               finish ? json_string(finish) : json_null());
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o]}", "id", x->r.id, "object", "text_completion",
                     "created", (json_int_t)x->r.created, "model", x->s->model_id, "system_fingerprint",
                     "mlxcel-" MX_VERSION, "choices", choice);
}

/* Turn what arrived since the last call into SSE events in x->out. */
static void stream_format(stream_ctx *x) {
    mx_gen_update *u = &x->u;
    const char *text = u->text.data ? u->text.data + x->text_sent : "";
    size_t tn = u->text.len - x->text_sent;
    int t0 = x->toks_sent, t1 = u->n_toks;
    bool have = tn > 0 || (x->r.logprobs && t1 > t0) || (x->r.kind == MX_GEN_LLAMA_COMPLETION && t1 > t0);
    if (x->r.kind == MX_GEN_CHAT && !x->role_sent) {
        sse(&x->out, chat_chunk(x, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL, NULL));
        x->role_sent = true;
    }
    if (u->done && u->finish == MX_FINISH_ERROR) {
        json_t *e = mx_error_json(MX_E_SERVER, u->error[0] ? u->error : "generation failed");
        sse(&x->out, e);
        x->finished = true;
        return;
    }
    if (u->done && u->finish == MX_FINISH_CANCELLED) {
        sse(&x->out, mx_error_json(MX_E_UNAVAILABLE, "the server is shutting down"));
        x->finished = true;
        return;
    }
    if (have && !(u->done && x->r.kind == MX_GEN_LLAMA_COMPLETION)) {
        if (x->r.kind == MX_GEN_CHAT) {
            json_t *lp = x->r.logprobs ? chat_logprobs(x->s, u, t0, t1) : NULL;
            sse(&x->out, chat_chunk(x, json_pack("{s:o}", "content", mx_json_str_lossy(text, tn)), lp, NULL));
        } else if (x->r.kind == MX_GEN_OAI_COMPLETION) {
            json_t *lp = x->r.logprobs ? cmpl_logprobs(x->s, u, t0, t1) : NULL;
            sse(&x->out, cmpl_chunk(x, text, tn, lp, NULL));
        } else {
            json_t *j = json_pack("{s:i,s:o,s:o,s:b,s:i,s:i,s:i}", "index", 0, "content", mx_json_str_lossy(text, tn),
                                  "tokens", ids_json(u, t0, t1), "stop", 0, "id_slot", u->slot < 0 ? 0 : u->slot,
                                  "tokens_predicted", u->n_gen, "tokens_evaluated", u->n_prompt);
            if (j && x->r.logprobs) json_object_set_new(j, "completion_probabilities", llama_probs(x->s, u, t0, t1));
            sse(&x->out, j);
        }
        x->text_sent = u->text.len;
        x->toks_sent = t1;
        text = ""; tn = 0; t0 = t1;
    }
    if (!u->done) return;
    const char *fin = finish_str(u->finish);
    if (x->r.kind == MX_GEN_CHAT) {
        sse(&x->out, chat_chunk(x, json_object(), NULL, fin));
    } else if (x->r.kind == MX_GEN_OAI_COMPLETION) {
        sse(&x->out, cmpl_chunk(x, "", 0, NULL, fin));
    } else {
        sse(&x->out, llama_final(x->s, &x->r, u, text, tn, t0));
        x->finished = true;
        return;   /* llama-server's native stream has no [DONE] */
    }
    if (x->r.include_usage) {
        json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[],s:o,s:o}", "id", x->r.id, "object",
                              x->r.kind == MX_GEN_CHAT ? "chat.completion.chunk" : "text_completion",
                              "created", (json_int_t)x->r.created, "model", x->s->model_id,
                              "system_fingerprint", "mlxcel-" MX_VERSION, "choices", "usage", usage_json(u),
                              "timings", timings_json(u));
        sse(&x->out, j);
    }
    mx_buf_puts(&x->out, "data: [DONE]\n\n");
    x->finished = true;
}

/* Take the engine's output at most every 2 ms: a fast model produces a token every few hundred
 * microseconds, and waking this thread for each one costs the compute threads CPU time on small
 * machines. Text that arrives meanwhile is sent in one chunk; latency grows by 2 ms at most. */
#define TAKE_PERIOD_S 0.002
static bool take_paced(mx_gen *g, double *last, mx_gen_update *u) {
    double since = mx_time_s() - *last;
    if (since >= 0 && since < TAKE_PERIOD_S) usleep((useconds_t)((TAKE_PERIOD_S - since) * 1e6));
    bool changed = mx_gen_take(g, 50, u);
    *last = mx_time_s();
    return changed;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *x = cls;
    for (;;) {
        if (x->off < x->out.len) {
            size_t n = x->out.len - x->off;
            if (n > max) n = max;
            memcpy(buf, x->out.data + x->off, n);
            x->off += n;
            if (x->off == x->out.len) { x->off = 0; x->out.len = 0; }
            return (ssize_t)n;
        }
        if (x->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!x->role_sent && x->r.kind == MX_GEN_CHAT) { stream_format(x); continue; }
        bool changed = take_paced(x->g, &x->last_take, &x->u);
        if (changed) { stream_format(x); continue; }
        if (mx_conn_closed(x->c)) {
            MX_LOGI("req %lu: client went away; cancelling", x->r.req_id);
            mx_gen_cancel(x->g);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls) {
    stream_ctx *x = cls;
    if (!x->finished) MX_LOGI("req %lu: stream ended early; cancelling", x->r.req_id);
    mx_gen_release(x->g);
    mx_gen_update_free(&x->u);
    mx_buf_free(&x->out);
    gen_req_free(&x->r);
    free(x);
}

/* ---- entry point --------------------------------------------------------------------------------- */
static enum MHD_Result respond_whole(mx_srv *s, struct MHD_Connection *c, gen_req *r, mx_gen *g) {
    mx_gen_update u;
    memset(&u, 0, sizeof u);
    double last = 0;
    while (!u.done) {
        if (!take_paced(g, &last, &u) && mx_conn_closed(c)) {
            MX_LOGI("req %lu: client went away; cancelling", r->req_id);
            mx_gen_release(g);
            mx_gen_update_free(&u);
            gen_req_free(r);
            return MHD_NO;
        }
    }
    mx_gen_release(g);
    enum MHD_Result res;
    if (u.finish == MX_FINISH_ERROR) {
        res = mx_send_error(c, MX_E_SERVER, "%s", u.error[0] ? u.error : "generation failed");
    } else if (u.finish == MX_FINISH_CANCELLED) {
        res = mx_send_error(c, MX_E_UNAVAILABLE, "the server is shutting down");
    } else {
        const char *text = u.text.data ? u.text.data : "";
        json_t *j;
        if (r->kind == MX_GEN_CHAT) {
            json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content", mx_json_str_lossy(text, u.text.len));
            json_t *choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "message", msg, "logprobs",
                                       r->logprobs ? chat_logprobs(s, &u, 0, u.n_toks) : json_null(),
                                       "finish_reason", finish_str(u.finish));
            j = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o],s:o,s:o}", "id", r->id, "object", "chat.completion",
                          "created", (json_int_t)r->created, "model", s->model_id, "system_fingerprint",
                          "mlxcel-" MX_VERSION, "choices", choice, "usage", usage_json(&u), "timings", timings_json(&u));
        } else if (r->kind == MX_GEN_OAI_COMPLETION) {
            json_t *choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "text", mx_json_str_lossy(text, u.text.len),
                                       "logprobs", r->logprobs ? cmpl_logprobs(s, &u, 0, u.n_toks) : json_null(),
                                       "finish_reason", finish_str(u.finish));
            j = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o],s:o,s:o}", "id", r->id, "object", "text_completion",
                          "created", (json_int_t)r->created, "model", s->model_id, "system_fingerprint",
                          "mlxcel-" MX_VERSION, "choices", choice, "usage", usage_json(&u), "timings", timings_json(&u));
        } else {
            j = llama_final(s, r, &u, text, u.text.len, 0);
        }
        res = mx_send_json(c, 200, j);
    }
    MX_LOGI("req %lu: done, %d prompt + %d generated tokens", r->req_id, u.n_prompt, u.n_gen);
    mx_gen_update_free(&u);
    gen_req_free(r);
    return res;
}

enum MHD_Result mx_api_generate(mx_srv *s, struct MHD_Connection *c, mx_gen_kind kind, const char *body,
                                size_t len, unsigned long req_id) {
    enum MHD_Result res;
    json_t *req = mx_parse_body(c, body, len, &res);
    if (!req) return res;
    gen_req r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    r.req_id = req_id;
    r.created = (long long)time(NULL);
    snprintf(r.id, sizeof r.id, "%s%08lx%08lx", kind == MX_GEN_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long)((uint64_t)(mx_time_s() * 1e6) & 0xffffffffu), req_id);
    char err[768];
    mx_err_kind ek;
    bool ok = parse_request(s, req, &r, err, sizeof err, &ek);
    json_decref(req);
    if (!ok) {
        gen_req_free(&r);
        if (ek == MX_E_CONTEXT) {
            json_t *e = mx_error_json(ek, err);
            return mx_send_json(c, 400, e);
        }
        return mx_send_error(c, ek, "%s", err);
    }
    mx_gen_params gp = {
        .prompt = r.prompt, .n_prompt = r.n_prompt, .n_predict = r.n_predict, .ignore_eos = r.ignore_eos, .cache_prompt = r.cache_prompt,
        .logprobs = r.logprobs, .sampling = r.samp, .stops = (const char *const *)r.stops, .n_stops = r.n_stops,
    };
    mx_gen *g = NULL;
    mx_status st = mx_sched_submit(s->sched, &gp, &g);
    if (st) {
        gen_req_free(&r);
        if (st == MX_ERR_BUSY) return mx_send_error(c, MX_E_UNAVAILABLE, "%s", mx_last_error());
        if (st == MX_ERR_RANGE) return mx_send_error(c, MX_E_CONTEXT, "%s", mx_last_error());
        if (st == MX_ERR_INVALID_ARG) return mx_send_error(c, MX_E_INVALID, "%s", mx_last_error());
        return mx_send_error(c, MX_E_SERVER, "%s", mx_last_error());
    }
    MX_LOGI("req %lu: %d prompt tokens, n_predict %d, %s", req_id, r.n_prompt, r.n_predict, r.stream ? "stream" : "whole");
    if (!r.stream) return respond_whole(s, c, &r, g);

    stream_ctx *x = calloc(1, sizeof *x);
    if (!x) { mx_gen_release(g); gen_req_free(&r); return mx_send_error(c, MX_E_SERVER, "out of memory"); }
    x->s = s; x->c = c; x->g = g; x->r = r;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, x, stream_free);
    if (!resp) { stream_free(x); return MHD_NO; }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    mx_add_common_headers(resp);
    res = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return res;
}
