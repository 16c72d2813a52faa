/* server/api.c: the endpoints that do not generate: /health, /v1/models, /props, /slots,
 * /metrics (Prometheus text with llama-server's llamacpp: names), /tokenize, /detokenize,
 * /apply-template, and the chat rendering shared with gen.c. Not the HTTP plumbing (http.c). */
#include "server/internal.h"
#include "mlxcel/backend_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 helpers ------------------------------------------------------------------------------ */
/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t len; uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

json_t *mx_json_str_lossy(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) { size_t l = utf8_seq(u + i, n - i); if (!l || u[i] == 0) break; i += l; }
    if (i == n) return json_stringn(s, n);
    mx_buf b = {0};
    for (i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (l && u[i] != 0) { mx_buf_append(&b, s + i, l); i += l; }
        else { mx_buf_append(&b, "\xEF\xBF\xBD", 3); i++; }
    }
    json_t *j = json_stringn(b.data ? b.data : "", b.len);
    mx_buf_free(&b);
    return j;
}

/* ---- simple endpoints --------------------------------------------------------------------------- */
enum MHD_Result mx_api_health(mx_srv *s, struct MHD_Connection *c) {
    if (!atomic_load(&s->ready)) return mx_send_error(c, MX_E_UNAVAILABLE, "Loading model");
    return mx_send_json(c, 200, json_pack("{s:s}", "status", "ok"));
}

enum MHD_Result mx_api_models(mx_srv *s, struct MHD_Connection *c) {
    const mx_model_config *cfg = mx_model_cfg(s->model);
    json_t *meta = json_pack("{s:i,s:i,s:i,s:I,s:I}", "n_vocab", cfg->vocab_size, "n_ctx_train",
                             cfg->max_position_embeddings, "n_embd", cfg->hidden_size,
                             "size", (json_int_t)mx_model_weight_bytes(s->model), "n_ctx", (json_int_t)s->n_ctx);
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", s->model_id, "object", "model", "created",
                          (json_int_t)s->created, "owned_by", "mlxcel", "meta", meta);
    json_t *m2 = json_pack("{s:s,s:s,s:s,s:[s]}", "name", s->model_id, "model", s->model_id, "type", "model",
                           "capabilities", "completion");
    return mx_send_json(c, 200, json_pack("{s:s,s:[o],s:[o]}", "object", "list", "data", m, "models", m2));
}

static json_t *gen_settings(mx_srv *s) {
    mx_sampling d;
    mx_sampling_default(&d);
    return json_pack("{s:i,s:{s:i,s:f,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:b}}", "n_ctx", s->n_ctx, "params",
                     "n_predict", s->p->n_predict, "temperature", (double)d.temperature, "top_k", d.top_k,
                     "top_p", (double)d.top_p, "min_p", (double)d.min_p, "repeat_penalty", (double)d.repeat_penalty,
                     "repeat_last_n", d.repeat_last_n, "presence_penalty", 0.0, "frequency_penalty", 0.0,
                     "stream", 0);
}

enum MHD_Result mx_api_props(mx_srv *s, struct MHD_Connection *c) {
    json_t *j = json_pack("{s:o,s:i,s:s,s:s,s:s?,s:s?,s:s,s:{s:b,s:b},s:b}",
                          "default_generation_settings", gen_settings(s),
                          "total_slots", s->p->n_parallel,
                          "model_path", s->model_path,
                          "chat_template", s->tmpl_src,
                          "bos_token", s->bos, "eos_token", s->eos,
                          "build_info", "mlxcel " MX_VERSION,
                          "modalities", "vision", 0, "audio", 0,
                          "endpoint_metrics", s->p->metrics);
    if (j) {
        json_object_set_new(j, "model_alias", json_string(s->model_id));
        /* (mlxcel's own: where the forward passes run; clients and tests that compare greedy text
         * across batch sizes need it, since the GPU's kernels for 1 and many rows round differently) */
        json_object_set_new(j, "device", json_string(mx_backend_is_gpu(&s->be) ? "gpu" : "cpu"));
    }
    return mx_send_json(c, 200, j);
}

enum MHD_Result mx_api_slots(mx_srv *s, struct MHD_Connection *c) {
    mx_slot_info info[256];
    int n = mx_sched_slots(s->sched, info, 256);
    json_t *a = json_array();
    for (int i = 0; i < n && i < 256; i++)
        json_array_append_new(a, json_pack("{s:i,s:I,s:i,s:b,s:b,s:i,s:i,s:i}", "id", info[i].id,
                                           "id_task", info[i].processing ? (json_int_t)info[i].task_id : (json_int_t)-1,
                                           "n_ctx", s->n_ctx, "speculative", 0, "is_processing", info[i].processing,
                                           "n_prompt_tokens", info[i].n_prompt, "n_decoded", info[i].n_gen,
                                           "n_past", info[i].n_past));
    return mx_send_json(c, 200, a);
}

enum MHD_Result mx_api_metrics(mx_srv *s, struct MHD_Connection *c) {
    mx_sched_stats st;
    mx_sched_stats_get(s->sched, &st);
    mx_buf b = {0};
#define M(name, type, help, fmt, val) mx_buf_printf(&b, "# HELP llamacpp:" name " " help "\n# TYPE llamacpp:" name " " type "\nllamacpp:" name " " fmt "\n", val)
    M("prompt_tokens_total", "counter", "Number of prompt tokens processed.", "%llu", (unsigned long long)st.n_prompt_tokens_total);
    M("prompt_seconds_total", "counter", "Prompt process time", "%.6f", st.t_prompt_total_s);
    M("tokens_predicted_total", "counter", "Number of generation tokens processed.", "%llu", (unsigned long long)st.n_gen_tokens_total);
    M("tokens_predicted_seconds_total", "counter", "Predict process time", "%.6f", st.t_gen_total_s);
    M("n_decode_total", "counter", "Total number of llama_decode() calls", "%llu", (unsigned long long)st.n_decode_total);
    M("n_busy_slots_per_decode", "counter", "Average number of busy slots per llama_decode() call", "%.6f",
      st.n_decode_total ? (double)st.n_busy_slots_total / (double)st.n_decode_total : 0.0);
    M("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.", "%.6f",
      st.t_prompt_total_s > 0 ? (double)st.n_prompt_tokens_total / st.t_prompt_total_s : 0.0);
    M("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.", "%.6f",
      st.t_gen_total_s > 0 ? (double)st.n_gen_tokens_total / st.t_gen_total_s : 0.0);
    M("kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.", "%.6f",
      st.kv_total_blocks ? (double)st.kv_used_blocks / st.kv_total_blocks : 0.0);
    M("kv_cache_tokens", "gauge", "KV-cache tokens.", "%lld", (long long)st.kv_used_blocks * mx_model_block_size(s->model));
    M("requests_processing", "gauge", "Number of requests processing.", "%d", st.n_processing);
    M("requests_deferred", "gauge", "Number of requests deferred.", "%d", st.n_deferred);
    M("n_past_max", "counter", "Largest observed n_past.", "%d", st.n_past_max);
#undef M
    if (!b.data) return mx_send_error(c, MX_E_SERVER, "out of memory");
    enum MHD_Result r = mx_send_text(c, 200, "text/plain; version=0.0.4", b.data);
    mx_buf_free(&b);
    return r;
}

/* ---- tokenizer endpoints ------------------------------------------------------------------------ */
static json_t *bytes_array(const char *s, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

/* The text of one token (raw UTF-8 bytes; may be a partial character). */
char *mx_token_text(mx_srv *s, int32_t id, size_t *len) {
    char *t = NULL;
    if (mx_tokenizer_decode(s->tok, &id, 1, false, &t) != MX_OK || !t) { *len = 0; return mx_strdup(""); }
    *len = strlen(t);
    return t;
}

json_t *mx_token_piece_json(mx_srv *s, int32_t id) {
    size_t n;
    char *t = mx_token_text(s, id, &n);
    json_t *j = NULL;
    bool valid = true;
    for (size_t i = 0; i < n;) { size_t l = utf8_seq((const unsigned char *)t + i, n - i); if (!l) { valid = false; break; } i += l; }
    j = valid ? json_stringn(t, n) : bytes_array(t, n);
    free(t);
    return j;
}

enum MHD_Result mx_api_tokenize(mx_srv *s, struct MHD_Connection *c, const char *body, size_t len) {
    enum MHD_Result res;
    json_t *req = mx_parse_body(c, body, len, &res);
    if (!req) return res;
    json_t *content = json_object_get(req, "content");
    json_t *as = json_object_get(req, "add_special"), *wp = json_object_get(req, "with_pieces");
    if (!json_is_string(content)) { json_decref(req); return mx_send_error(c, MX_E_INVALID, "'content' must be a string"); }
    if ((as && !json_is_boolean(as)) || (wp && !json_is_boolean(wp))) {
        json_decref(req); return mx_send_error(c, MX_E_INVALID, "'add_special' and 'with_pieces' must be booleans");
    }
    int32_t *ids = NULL; int n = 0;
    mx_status st = mx_tokenizer_encode(s->tok, json_string_value(content), json_string_length(content),
                                       as && json_is_true(as), &ids, &n);
    if (st) { json_decref(req); free(ids); return mx_send_error(c, MX_E_INVALID, "cannot tokenize: %s", mx_last_error()); }
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        if (wp && json_is_true(wp)) json_array_append_new(a, json_pack("{s:i,s:o}", "id", ids[i], "piece", mx_token_piece_json(s, ids[i])));
        else json_array_append_new(a, json_integer(ids[i]));
    }
    free(ids);
    json_decref(req);
    return mx_send_json(c, 200, json_pack("{s:o}", "tokens", a));
}

enum MHD_Result mx_api_detokenize(mx_srv *s, struct MHD_Connection *c, const char *body, size_t len) {
    enum MHD_Result res;
    json_t *req = mx_parse_body(c, body, len, &res);
    if (!req) return res;
    json_t *toks = json_object_get(req, "tokens");
    if (!json_is_array(toks)) { json_decref(req); return mx_send_error(c, MX_E_INVALID, "'tokens' must be an array of token ids"); }
    size_t n = json_array_size(toks);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) { json_decref(req); return mx_send_error(c, MX_E_SERVER, "out of memory"); }
    int vocab = mx_tokenizer_vocab_size(s->tok);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(toks, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
            free(ids); json_decref(req);
            return mx_send_error(c, MX_E_INVALID, "'tokens'[%zu] must be a token id in [0, %d)", i, vocab);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    char *text = NULL;
    mx_status st = mx_tokenizer_decode(s->tok, ids, (int)n, false, &text);
    free(ids);
    json_decref(req);
    if (st) return mx_send_error(c, MX_E_INVALID, "cannot detokenize: %s", mx_last_error());
    json_t *j = json_pack("{s:o}", "content", mx_json_str_lossy(text, strlen(text)));
    free(text);
    return mx_send_json(c, 200, j);
}

/* ---- chat rendering ----------------------------------------------------------------------------- */
/* A copy of the messages with every content flattened to a string (text parts joined). */
static json_t *normalize_messages(json_t *msgs, char *err, size_t errn) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        snprintf(err, errn, "'messages' must be a non-empty array");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) { snprintf(err, errn, "'messages'[%zu] must be an object", i); goto fail; }
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) { snprintf(err, errn, "'messages'[%zu].role must be a string", i); goto fail; }
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool") &&
            strcmp(r, "developer") && strcmp(r, "function")) {
            snprintf(err, errn, "'messages'[%zu].role '%.40s' is not one of system, user, assistant, tool", i, r);
            goto fail;
        }
        json_t *copy = json_deep_copy(m);
        json_t *content = json_object_get(m, "content");
        if (json_is_array(content)) {
            mx_buf b = {0};
            size_t k; json_t *part;
            json_array_foreach(content, k, part) {
                json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
                if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") ||
                    !json_is_string(text)) {
                    mx_buf_free(&b); json_decref(copy);
                    snprintf(err, errn, "'messages'[%zu].content[%zu] must be a {\"type\": \"text\", \"text\": ...} part", i, k);
                    goto fail;
                }
                mx_buf_append(&b, json_string_value(text), json_string_length(text));
            }
            json_object_set_new(copy, "content", json_stringn(b.data ? b.data : "", b.len));
            mx_buf_free(&b);
        } else if (json_is_null(content) || !content) {
            if (strcmp(r, "assistant") || !json_object_get(m, "tool_calls")) {
                if (content == NULL && strcmp(r, "assistant")) {
                    json_decref(copy);
                    snprintf(err, errn, "'messages'[%zu].content is missing", i);
                    goto fail;
                }
            }
            json_object_set_new(copy, "content", json_string(""));
        } else if (!json_is_string(content)) {
            json_decref(copy);
            snprintf(err, errn, "'messages'[%zu].content must be a string or an array of text parts", i);
            goto fail;
        }
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_array(tc) && !json_is_null(tc)) {
            json_decref(copy);
            snprintf(err, errn, "'messages'[%zu].tool_calls must be an array", i);
            goto fail;
        }
        if (json_is_array(tc)) {   /* templates read tool_call.function.arguments as a mapping or string */
            size_t k; json_t *call;
            json_array_foreach(json_object_get(copy, "tool_calls"), k, call) {
                json_t *fn = json_object_get(call, "function");
                json_t *args = fn ? json_object_get(fn, "arguments") : NULL;
                if (json_is_string(args)) {
                    json_t *parsed = json_loads(json_string_value(args), 0, NULL);
                    if (json_is_object(parsed)) json_object_set_new(fn, "arguments", parsed);
                    else json_decref(parsed);
                }
            }
        }
        json_array_append_new(out, copy);
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

char *mx_render_chat(mx_srv *s, json_t *req, char *err, size_t errn) {
    json_t *msgs = normalize_messages(json_object_get(req, "messages"), err, errn);
    if (!msgs) return NULL;
    json_t *tools = json_object_get(req, "tools");
    json_t *choice = json_object_get(req, "tool_choice");
    json_t *kwargs = json_object_get(req, "chat_template_kwargs");
    json_t *agp = json_object_get(req, "add_generation_prompt");
    char *out = NULL;
    if (tools && !json_is_null(tools) && !json_is_array(tools)) { snprintf(err, errn, "'tools' must be an array"); goto done; }
    if (json_is_array(tools)) {
        size_t i; json_t *t;
        json_array_foreach(tools, i, t) {
            if (!json_is_object(t)) { snprintf(err, errn, "'tools'[%zu] must be an object", i); goto done; }
        }
        if (json_array_size(tools) == 0) tools = NULL;
    } else {
        tools = NULL;
    }
    if (choice && !json_is_null(choice)) {
        if (json_is_string(choice)) {
            const char *v = json_string_value(choice);
            if (strcmp(v, "none") && strcmp(v, "auto") && strcmp(v, "required")) {
                snprintf(err, errn, "'tool_choice' must be \"none\", \"auto\", \"required\" or an object"); goto done;
            }
            if (!strcmp(v, "none")) tools = NULL;
        } else if (!json_is_object(choice)) {
            snprintf(err, errn, "'tool_choice' must be \"none\", \"auto\", \"required\" or an object"); goto done;
        }
    }
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) { snprintf(err, errn, "'chat_template_kwargs' must be an object"); goto done; }
    if (agp && !json_is_boolean(agp)) { snprintf(err, errn, "'add_generation_prompt' must be a boolean"); goto done; }
    mx_status st = mx_template_render_chat(s->tmpl, msgs, tools, agp ? json_is_true(agp) : true, s->bos, s->eos,
                                           json_is_object(kwargs) ? kwargs : NULL, &out);
    if (st) { snprintf(err, errn, "chat template: %s", mx_last_error()); out = NULL; }
done:
    json_decref(msgs);
    return out;
}

enum MHD_Result mx_api_apply_template(mx_srv *s, struct MHD_Connection *c, const char *body, size_t len) {
    enum MHD_Result res;
    json_t *req = mx_parse_body(c, body, len, &res);
    if (!req) return res;
    char err[512];
    char *prompt = mx_render_chat(s, req, err, sizeof err);
    json_decref(req);
    if (!prompt) return mx_send_error(c, MX_E_INVALID, "%s", err);
    json_t *j = json_pack("{s:o}", "prompt", mx_json_str_lossy(prompt, strlen(prompt)));
    free(prompt);
    return mx_send_json(c, 200, j);
}
