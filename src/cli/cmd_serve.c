/* cli/cmd_serve.c: `mlxcel serve [flags]`, the HTTP server; the `mlxcel-server` program
 * (server_main.c) runs the same function. Parses flags (server/args.c), installs signal handlers,
 * prints where it listens, and runs mx_server_run. The server itself lives in src/server/. */
#include "cli/cli.h"
#include "mlxcel/server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t g_serve_stop;

static void serve_on_signal(int sig) { (void)sig; g_serve_stop = 1; }

static void serve_on_listen(const char *url, void *ud) {
    const char *prog = ud;
    fprintf(stderr, "%s: listening on %s\n", prog, url);
    printf("listening on %s\n", url);
    fflush(stdout);
}

int cmd_serve(int argc, char **argv) {
    const char *prog = strcmp(argv[0], "serve") ? "mlxcel-server" : "mlxcel serve";
    mx_server_params p;
    mx_server_params_default(&p);
    bool help = false;
    if (mx_server_parse_args(argc, argv, &p, &help) != MX_OK) {
        fprintf(stderr, "%s: %s\n", prog, mx_last_error());
        mx_server_params_free(&p);
        return 2;
    }
    if (help) {
        printf("usage: %s [options]\n\nServe a model over HTTP: the OpenAI API (/v1/chat/completions, /v1/completions,\n"
               "/v1/models) and llama-server's native endpoints (/completion, /tokenize, /health, ...).\n\n%s",
               prog, mx_server_usage());
        mx_server_params_free(&p);
        return 0;
    }
    if (mx_log_get_level() < MX_LOG_INFO && !getenv("MLXCEL_LOG")) mx_log_set_level(MX_LOG_WARN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = serve_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    p.on_listen = serve_on_listen;
    p.ud = (void *)prog;
    mx_status st = mx_server_run(&p, &g_serve_stop);
    mx_server_params_free(&p);
    if (st != MX_OK) {
        fprintf(stderr, "%s: %s\n", prog, mx_last_error());
        return 1;
    }
    fprintf(stderr, "%s: stopped\n", prog);
    return 0;
}
