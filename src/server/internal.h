/* server/internal.h: what the server's files share: the server state, the per-request context,
 * and helpers to answer with JSON, errors and streams. Not a public interface. */
#ifndef MLXCEL_SERVER_INTERNAL_H
#define MLXCEL_SERVER_INTERNAL_H

#include "mlxcel/server.h"
#include "mlxcel/model.h"
#include "mlxcel/engine.h"
#include "mlxcel/scheduler.h"
#include "mlxcel/tokenizer.h"
#include "mlxcel/template.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

typedef struct mx_srv {
    const mx_server_params *p;
    atomic_int ready;                 /* 0 loading, 1 ready */
    char model_path[4096];
    char model_id[256];
    mx_backend be; bool be_init;
    mx_model *model;
    mx_tokenizer *tok;
    mx_template *tmpl; char *tmpl_src;
    char *bos, *eos;                  /* template's bos_token / eos_token strings */
    mx_sched *sched;
    int n_ctx;                        /* positions per sequence */
    int n_predict_default;
    time_t created;
    atomic_ulong next_req_id;
    struct MHD_Daemon *daemon;
    int listen_fd;
    char unix_path[256];
} mx_srv;

/* Per-HTTP-request state (MHD's con_cls). */
typedef struct mx_hreq {
    mx_buf body;
    bool too_big;
    bool answered;
    unsigned long id;
} mx_hreq;

/* Error kinds with llama-server's "type" strings. */
typedef enum {
    MX_E_INVALID = 0,     /* 400 invalid_request_error */
    MX_E_AUTH,            /* 401 authentication_error */
    MX_E_NOT_FOUND,       /* 404 not_found_error */
    MX_E_TOO_LARGE,       /* 413 invalid_request_error */
    MX_E_SERVER,          /* 500 server_error */
    MX_E_NOT_SUPPORTED,   /* 501 not_supported_error */
    MX_E_UNAVAILABLE,     /* 503 unavailable_error */
    MX_E_CONTEXT,         /* 400 exceed_context_size_error */
} mx_err_kind;

enum MHD_Result mx_send_json(struct MHD_Connection *c, unsigned status, json_t *j); /* steals j */
enum MHD_Result mx_send_text(struct MHD_Connection *c, unsigned status, const char *ctype, const char *text);
enum MHD_Result mx_send_error(struct MHD_Connection *c, mx_err_kind k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
json_t *mx_error_json(mx_err_kind k, const char *msg);
unsigned mx_err_status(mx_err_kind k);
void mx_add_common_headers(struct MHD_Response *r);

/* True when the peer of this connection has closed its end (checked without blocking). */
bool mx_conn_closed(struct MHD_Connection *c);

/* Routes (api.c, gen.c). body is NUL-terminated, len bytes. */
enum MHD_Result mx_api_health(mx_srv *s, struct MHD_Connection *c);
enum MHD_Result mx_api_models(mx_srv *s, struct MHD_Connection *c);
enum MHD_Result mx_api_props(mx_srv *s, struct MHD_Connection *c);
enum MHD_Result mx_api_slots(mx_srv *s, struct MHD_Connection *c);
enum MHD_Result mx_api_metrics(mx_srv *s, struct MHD_Connection *c);
enum MHD_Result mx_api_tokenize(mx_srv *s, struct MHD_Connection *c, const char *body, size_t len);
enum MHD_Result mx_api_detokenize(mx_srv *s, struct MHD_Connection *c, const char *body, size_t len);
enum MHD_Result mx_api_apply_template(mx_srv *s, struct MHD_Connection *c, const char *body, size_t len);

typedef enum { MX_GEN_CHAT = 0, MX_GEN_OAI_COMPLETION, MX_GEN_LLAMA_COMPLETION } mx_gen_kind;
enum MHD_Result mx_api_generate(mx_srv *s, struct MHD_Connection *c, mx_gen_kind kind,
                                const char *body, size_t len, unsigned long req_id);

/* Parse a request body as a JSON object; on failure answers 400 and returns NULL (*res set). */
json_t *mx_parse_body(struct MHD_Connection *c, const char *body, size_t len, enum MHD_Result *res);
/* A JSON string of n bytes; invalid UTF-8 bytes become U+FFFD. */
json_t *mx_json_str_lossy(const char *s, size_t n);
/* The raw text of one token (malloc'ed; may be a partial UTF-8 character). */
char *mx_token_text(mx_srv *s, int32_t id, size_t *len);
/* One token's text as a JSON string, or its bytes as an array when not valid UTF-8. */
json_t *mx_token_piece_json(mx_srv *s, int32_t id);
/* Render messages (+tools) through the chat template; NULL + message in err on failure. */
char *mx_render_chat(mx_srv *s, json_t *req, char *err, size_t errn);

#endif
