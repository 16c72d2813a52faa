/* mlxcel/server.h: the HTTP server (`mlxcel-server`, `mlxcel serve`): flags, routes for the
 * OpenAI API and llama-server's native API, SSE streaming, auth, metrics. It drives the
 * continuous-batching scheduler (mlxcel/scheduler.h); it is not the engine and knows no kernels.
 *
 * Ownership: mx_server_params owns its strings (free with mx_server_params_free).
 * Thread safety: mx_server_run blocks the calling thread until *stop becomes non-zero. */
#ifndef MLXCEL_SERVER_H
#define MLXCEL_SERVER_H

#include "mlxcel/core.h"
#include <signal.h>

typedef struct mx_server_params {
    char *model;             /* -m: checkpoint directory; NULL: the bundled demo model */
    char *alias;             /* -a: model id reported by /v1/models (default: directory name) */
    char *host;              /* address, or a path ending in ".sock" (Unix socket) */
    int port;                /* 0: any free port */
    int n_ctx;               /* positions per sequence (prompt + generated); 0: from the model */
    int n_parallel;          /* sequences decoded together */
    int n_predict;           /* default max tokens per request; -1: until the context is full */
    char **api_keys; int n_api_keys;
    bool metrics;            /* GET /metrics */
    bool slots;              /* GET /slots */
    int timeout_s;           /* read/write timeout of a connection */
    char *chat_template_file;
    int n_threads;           /* CPU threads; 0: all */
    int max_queue;           /* requests waiting for a slot beyond n_parallel; more -> 503 */
    size_t max_body;         /* request body limit in bytes (413 past it) */
    char *random_config;     /* dev: random weights of this config.json's shape */
    int q_bits;              /* dev: with random_config, MLX affine bits (0: bf16) */
    /* Called once the server listens (url like "http://127.0.0.1:8080" or "unix:/path.sock"). */
    void (*on_listen)(const char *url, void *ud);
    void *ud;
} mx_server_params;

void mx_server_params_default(mx_server_params *p);
void mx_server_params_free(mx_server_params *p);
/* Parse flags (argv[0] is the program or subcommand name) after applying LLAMA_ARG_* environment
 * variables. *help is set for -h/--help. Errors name the flag (mx_last_error). */
mx_status mx_server_parse_args(int argc, char **argv, mx_server_params *p, bool *help);
/* The flag list for --help (static text). */
const char *mx_server_usage(void);
/* Find the bundled demo model (models/fortune-6m-mlx-q4) next to the executable (../models,
 * ../../models) or under MLXCEL_ROOT; false + mx_errorf if absent. */
bool mx_server_find_demo_model(char *buf, size_t n);

/* Start listening, load the model (GET /health answers 503 until loaded), serve until *stop. */
mx_status mx_server_run(const mx_server_params *p, volatile sig_atomic_t *stop);

#endif
