/* server/http.c: the HTTP side of the server: the listening socket (TCP or Unix), libmicrohttpd in
 * thread-per-connection mode, request bodies (size limit -> 413), API keys, CORS, routing, error
 * bodies in llama-server's shape, and mx_server_run (load the model behind a 503 /health, then
 * serve). Endpoint bodies live in api.c and gen.c. Not the engine. */
#include "server/internal.h"
#include "mlxcel/backend_cuda.h"
#include "mlxcel/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>

/* ---- responses -------------------------------------------------------------------------------- */
void mx_add_common_headers(struct MHD_Response *r) {
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Server", "mlxcel/" MX_VERSION);
}

enum MHD_Result mx_send_text(struct MHD_Connection *c, unsigned status, const char *ctype, const char *text) {
    size_t n = strlen(text);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    mx_add_common_headers(r);
    enum MHD_Result res = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return res;
}

enum MHD_Result mx_send_json(struct MHD_Connection *c, unsigned status, json_t *j) {
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!txt) return mx_send_text(c, 500, "application/json; charset=utf-8",
                                  "{\"error\":{\"code\":500,\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(txt); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", "application/json; charset=utf-8");
    mx_add_common_headers(r);
    enum MHD_Result res = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return res;
}

unsigned mx_err_status(mx_err_kind k) {
    switch (k) {
    case MX_E_INVALID: case MX_E_CONTEXT: return 400;
    case MX_E_AUTH: return 401;
    case MX_E_NOT_FOUND: return 404;
    case MX_E_TOO_LARGE: return 413;
    case MX_E_SERVER: return 500;
    case MX_E_NOT_SUPPORTED: return 501;
    case MX_E_UNAVAILABLE: return 503;
    }
    return 500;
}

static const char *err_type(mx_err_kind k) {
    switch (k) {
    case MX_E_INVALID: case MX_E_TOO_LARGE: return "invalid_request_error";
    case MX_E_CONTEXT: return "exceed_context_size_error";
    case MX_E_AUTH: return "authentication_error";
    case MX_E_NOT_FOUND: return "not_found_error";
    case MX_E_SERVER: return "server_error";
    case MX_E_NOT_SUPPORTED: return "not_supported_error";
    case MX_E_UNAVAILABLE: return "unavailable_error";
    }
    return "server_error";
}

json_t *mx_error_json(mx_err_kind k, const char *msg) {
    /* The message may quote request text: keep it valid UTF-8 for jansson. */
    json_t *m = json_string(msg);
    if (!m) m = json_string("invalid request");
    return json_pack("{s:{s:i,s:o,s:s}}", "error", "code", (int)mx_err_status(k), "message", m,
                     "type", err_type(k));
}

enum MHD_Result mx_send_error(struct MHD_Connection *c, mx_err_kind k, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mx_send_json(c, mx_err_status(k), mx_error_json(k, msg));
}

json_t *mx_parse_body(struct MHD_Connection *c, const char *body, size_t len, enum MHD_Result *res) {
    json_error_t je;
    json_t *j = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        *res = mx_send_error(c, MX_E_INVALID, "request body is not valid JSON: %s (line %d, column %d)",
                             je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        *res = mx_send_error(c, MX_E_INVALID, "request body must be a JSON object");
        return NULL;
    }
    return j;
}

bool mx_conn_closed(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    int fd = ci->connect_fd;
    struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pf, 1, 0) <= 0) return false;
    if (pf.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
    if (pf.revents & POLLIN) {
        char b;
        ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0) return true;
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
    return false;
}

/* ---- routing ---------------------------------------------------------------------------------- */
static bool is_public(const char *url) {
    return !strcmp(url, "/health") || !strcmp(url, "/v1/health") || !strcmp(url, "/models") ||
           !strcmp(url, "/v1/models");
}

static bool key_ok(const mx_srv *s, const char *k) {
    if (!k) return false;
    size_t n = strlen(k);
    bool ok = false;
    for (int i = 0; i < s->p->n_api_keys; i++) {   /* compare all keys, no early exit */
        const char *want = s->p->api_keys[i];
        size_t m = strlen(want);
        unsigned diff = (unsigned)(n ^ m);
        for (size_t j = 0; j < m; j++) diff |= (unsigned)(unsigned char)want[j] ^ (unsigned)(unsigned char)(j < n ? k[j] : 0);
        ok |= diff == 0;
    }
    return ok;
}

static bool authorized(mx_srv *s, struct MHD_Connection *c) {
    if (s->p->n_api_keys == 0) return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7)) {
        a += 7;
        while (*a == ' ') a++;
        if (key_ok(s, a)) return true;
    }
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    return key_ok(s, x);
}

static enum MHD_Result dispatch(mx_srv *s, struct MHD_Connection *c, const char *url, const char *method,
                                mx_hreq *h) {
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        mx_add_common_headers(r);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "*");
        enum MHD_Result res = MHD_queue_response(c, 204, r);
        MHD_destroy_response(r);
        return res;
    }
    if (!is_public(url) && !authorized(s, c)) return mx_send_error(c, MX_E_AUTH, "Invalid API Key");

    static const struct { const char *path; int get; int id; } routes[] = {
        {"/health", 1, 0}, {"/v1/health", 1, 0}, {"/models", 1, 1}, {"/v1/models", 1, 1},
        {"/props", 1, 2}, {"/slots", 1, 3}, {"/metrics", 1, 4},
        {"/tokenize", 0, 5}, {"/detokenize", 0, 6}, {"/apply-template", 0, 7},
        {"/chat/completions", 0, 8}, {"/v1/chat/completions", 0, 8},
        {"/completions", 0, 9}, {"/v1/completions", 0, 9}, {"/completion", 0, 10},
        {"/embedding", 0, 20}, {"/embeddings", 0, 20}, {"/v1/embeddings", 0, 20}, {"/rerank", 0, 20},
        {"/reranking", 0, 20}, {"/v1/rerank", 0, 20}, {"/infill", 0, 20},
    };
    int id = -1, want_get = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) { id = routes[i].id; want_get = routes[i].get; break; }
    if (id < 0) return mx_send_error(c, MX_E_NOT_FOUND, "File Not Found");
    if ((want_get && !get) || (!want_get && !post)) {
        json_t *e = mx_error_json(MX_E_INVALID, want_get ? "this endpoint expects GET" : "this endpoint expects POST");
        json_object_set_new(json_object_get(e, "error"), "code", json_integer(405));
        return mx_send_json(c, 405, e);
    }
    if (id == 0) return mx_api_health(s, c);
    if (id == 20) return mx_send_error(c, MX_E_NOT_SUPPORTED, "This server does not support embeddings or reranking");
    if (id == 4 && !s->p->metrics)
        return mx_send_error(c, MX_E_NOT_SUPPORTED, "This server does not support metrics endpoint. Start it with `--metrics`");
    if (id == 3 && !s->p->slots)
        return mx_send_error(c, MX_E_NOT_SUPPORTED, "This server does not support slots endpoint. Start it without `--no-slots`");
    if (!atomic_load(&s->ready)) return mx_send_error(c, MX_E_UNAVAILABLE, "Loading model");
    const char *b = h->body.data ? h->body.data : "";
    size_t n = h->body.len;
    switch (id) {
    case 1: return mx_api_models(s, c);
    case 2: return mx_api_props(s, c);
    case 3: return mx_api_slots(s, c);
    case 4: return mx_api_metrics(s, c);
    case 5: return mx_api_tokenize(s, c, b, n);
    case 6: return mx_api_detokenize(s, c, b, n);
    case 7: return mx_api_apply_template(s, c, b, n);
    case 8: return mx_api_generate(s, c, MX_GEN_CHAT, b, n, h->id);
    case 9: return mx_api_generate(s, c, MX_GEN_OAI_COMPLETION, b, n, h->id);
    case 10: return mx_api_generate(s, c, MX_GEN_LLAMA_COMPLETION, b, n, h->id);
    }
    return mx_send_error(c, MX_E_SERVER, "unrouted endpoint");
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    mx_srv *s = cls;
    mx_hreq *h = *con_cls;
    if (!h) {
        h = calloc(1, sizeof *h);
        if (!h) return MHD_NO;
        h->id = atomic_fetch_add(&s->next_req_id, 1) + 1;
        *con_cls = h;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end; errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (!errno && *end == 0 && v > s->p->max_body) {
                h->answered = true;
                return mx_send_error(c, MX_E_TOO_LARGE, "request body of %llu bytes exceeds the limit of %zu bytes",
                                     v, s->p->max_body);
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!h->too_big && !h->answered) {
            if (h->body.len + *upload_size > s->p->max_body) {
                h->too_big = true;
                mx_buf_free(&h->body);
            } else if (!mx_buf_append(&h->body, upload, *upload_size)) {
                return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (h->answered) return MHD_YES;
    h->answered = true;
    if (h->too_big) return mx_send_error(c, MX_E_TOO_LARGE, "request body exceeds the limit of %zu bytes", s->p->max_body);
    if (!mx_buf_append(&h->body, "", 1)) return MHD_NO;     /* NUL-terminate */
    h->body.len--;
    MX_LOGI("req %lu: %s %s (%zu bytes)", h->id, method, url, h->body.len);
    return dispatch(s, c, url, method, h);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    mx_hreq *h = *con_cls;
    if (!h) return;
    mx_buf_free(&h->body);
    free(h);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    if (mx_log_get_level() < MX_LOG_DEBUG) return;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n') buf[--n] = 0;
    MX_LOGD("http: %s", buf);
}

/* ---- listening socket --------------------------------------------------------------------------- */
static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static mx_status open_listener(mx_srv *s, char *url, size_t urln) {
    const char *host = s->p->host ? s->p->host : "127.0.0.1";
    if (ends_with(host, ".sock")) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof sa);
        sa.sun_family = AF_UNIX;
        if (strlen(host) >= sizeof sa.sun_path)
            return mx_errorf(MX_ERR_INVALID_ARG, "--host: socket path '%s' is too long (max %zu bytes)", host, sizeof sa.sun_path - 1);
        memcpy(sa.sun_path, host, strlen(host));
        struct stat st;
        if (lstat(host, &st) == 0) {
            if (!S_ISSOCK(st.st_mode)) return mx_errorf(MX_ERR_IO, "--host: '%s' exists and is not a socket", host);
            unlink(host);   /* a stale socket from an earlier run */
        }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return mx_errorf(MX_ERR_IO, "socket: %s", strerror(errno));
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 128)) {
            int e = errno; close(fd);
            return mx_errorf(MX_ERR_IO, "--host: cannot listen on '%s': %s", host, strerror(e));
        }
        s->listen_fd = fd;
        snprintf(s->unix_path, sizeof s->unix_path, "%s", host);
        snprintf(url, urln, "unix:%s", host);
        return MX_OK;
    }
    char port[16];
    snprintf(port, sizeof port, "%d", s->p->port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) return mx_errorf(MX_ERR_INVALID_ARG, "--host: cannot resolve '%s': %s", host, gai_strerror(rc));
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) { err = errno; continue; }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
        err = errno;
        close(fd); fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return mx_errorf(MX_ERR_IO, "cannot listen on %s:%d: %s", host, s->p->port, strerror(err));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int bound = s->p->port;
    char addr[INET6_ADDRSTRLEN] = "?";
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&ss;
            bound = ntohs(in->sin_port);
            inet_ntop(AF_INET, &in->sin_addr, addr, sizeof addr);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
            bound = ntohs(in6->sin6_port);
            inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof addr);
        }
    }
    s->listen_fd = fd;
    if (strchr(addr, ':')) snprintf(url, urln, "http://[%s]:%d", addr, bound);
    else snprintf(url, urln, "http://%s:%d", addr, bound);
    return MX_OK;
}

/* ---- model loading ------------------------------------------------------------------------------ */
static const char *k_chatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static mx_status load_all(mx_srv *s) {
    const mx_server_params *p = s->p;
    mx_status st;
    if (p->model) {   /* a directory, or a repository id from the store / HF cache (downloaded if absent) */
        char *dir = NULL;
        if ((st = mx_model_resolve(p->model, true, &dir))) return st;
        snprintf(s->model_path, sizeof s->model_path, "%s", dir);
        free(dir);
    } else if (!mx_server_find_demo_model(s->model_path, sizeof s->model_path)) return MX_ERR_IO;
    if (p->n_threads > 0) mx_pool_global_set_threads(p->n_threads);
    const char *delay = getenv("MLXCEL_TEST_LOAD_DELAY_MS");   /* test hook: a slow load (503 /health) */
    if (delay && atoi(delay) > 0) {
        int ms = atoi(delay) > 60000 ? 60000 : atoi(delay);
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if ((st = mx_backend_auto_init(&s->be))) return st;
    s->be_init = true;
    if (p->random_config) {
        size_t len;
        char *txt = mx_read_file(p->random_config, &len);
        if (!txt) return MX_ERR_IO;
        json_error_t je;
        json_t *cfg = json_loadb(txt, len, 0, &je);
        free(txt);
        if (!cfg) return mx_errorf(MX_ERR_FORMAT, "%s: %s (line %d)", p->random_config, je.text, je.line);
        st = mx_model_load_random(cfg, p->q_bits, 64, MX_DTYPE_BF16, 1234, &s->be, &s->model);
        json_decref(cfg);
        if (st) return st;
    } else if ((st = mx_model_load(s->model_path, &s->be, &s->model))) {
        return st;
    }
    if ((st = mx_tokenizer_load(s->model_path, &s->tok))) return st;
    if (p->chat_template_file) {
        size_t len;
        s->tmpl_src = mx_read_file(p->chat_template_file, &len);
        if (!s->tmpl_src) return mx_errorf(MX_ERR_IO, "--chat-template-file: cannot read '%s'", p->chat_template_file);
    } else {
        st = mx_chat_template_find(s->model_path, false, &s->tmpl_src);
        if (st == MX_ERR_IO) { s->tmpl_src = mx_strdup(k_chatml); mx_clear_error(); }
        else if (st) return st;
    }
    if (!s->tmpl_src) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    if ((st = mx_template_parse(s->tmpl_src, &s->tmpl))) return st;
    if ((st = mx_template_special_tokens(s->model_path, &s->bos, &s->eos))) return st;
    const mx_model_config *cfg = mx_model_cfg(s->model);
    int n_ctx = p->n_ctx;
    if (n_ctx <= 0) {
        n_ctx = cfg->max_position_embeddings > 0 ? cfg->max_position_embeddings : 4096;
        if (n_ctx > 4096) n_ctx = 4096;
    }
    s->n_ctx = n_ctx;
    mx_sched_params sp = {.n_parallel = p->n_parallel, .n_ctx = n_ctx, .max_queue = p->max_queue,
                          .max_step_tokens = 512};
    if ((st = mx_sched_new(s->model, s->tok, &sp, &s->sched))) return st;
    if (p->alias) snprintf(s->model_id, sizeof s->model_id, "%s", p->alias);
    else if (p->random_config) snprintf(s->model_id, sizeof s->model_id, "random:%s", p->random_config);
    else {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", s->model_path);
        size_t n = strlen(tmp);
        while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
        const char *b = strrchr(tmp, '/');
        snprintf(s->model_id, sizeof s->model_id, "%s", b ? b + 1 : tmp);
    }
    return MX_OK;
}

mx_status mx_server_run(const mx_server_params *p, volatile sig_atomic_t *stop) {
    mx_srv *s = calloc(1, sizeof *s);
    if (!s) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    s->p = p;
    s->listen_fd = -1;
    s->created = time(NULL);
    mx_status st;
    char url[512];
    if ((st = open_listener(s, url, sizeof url))) goto done;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s,
                                 MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->timeout_s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                                 MHD_OPTION_END);
    if (!s->daemon) { st = mx_errorf(MX_ERR_IO, "cannot start the HTTP server on %s", url); goto done; }
    if (p->on_listen) p->on_listen(url, p->ud);
    double t0 = mx_time_s();
    if ((st = load_all(s))) goto done;
    MX_LOGI("model %s loaded in %.2f s; context %d per sequence, %d parallel", s->model_id, mx_time_s() - t0,
            s->n_ctx, p->n_parallel);
    atomic_store(&s->ready, 1);
    while (!*stop) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    st = MX_OK;
done:
    atomic_store(&s->ready, 0);
    /* Stop the engine first: request threads blocked on a generation see it end (cancelled) and
     * new submits are refused; then the HTTP threads can be joined. */
    if (s->sched) mx_sched_shutdown(s->sched);
    if (s->daemon) MHD_stop_daemon(s->daemon);
    mx_sched_free(s->sched);
    s->sched = NULL;
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->unix_path[0]) unlink(s->unix_path);
    mx_template_free(s->tmpl);
    free(s->tmpl_src); free(s->bos); free(s->eos);
    mx_tokenizer_free(s->tok);
    mx_model_free(s->model);
    if (s->be_init) mx_backend_auto_free(&s->be);
    free(s);
    return st;
}
