/* cli/cmd_run.c: `mlxcel run`: an interactive chat on the terminal (or over a pipe): each input line
 * is a user message; the whole conversation goes through the model's chat template and the reply
 * streams back. Not a server: one conversation, one process. */
#include "cli/cli.h"
#include "cli/model_open.h"

#include "mlxcel/engine.h"
#include "mlxcel/model.h"
#include "mlxcel/template.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: mlxcel run -m MODEL [options]\n\n"
        "Chat with a model: each line on standard input is a user message, answered as it is\n"
        "generated. /reset starts a new conversation, /exit (or end of input) quits.\n\n"
        "  -m, --model MODEL        model directory (or owner/name in the store)\n"
        "      --system TEXT        system message at the start of the conversation\n"
        "  -n, --n-predict N        tokens per reply at most (default 512)\n"
        "  -c, --ctx-size N         conversation length in tokens (default: the model's, at most 4096)\n"
        "      --temp T, --top-k K, --top-p P, --min-p P, --repeat-penalty R, --seed S   as generate\n"
        "  -t, --threads N          CPU threads\n");
}

typedef struct run_ctx { mx_detok_stream *ds; mx_buf piece; } run_ctx;

static bool on_token(void *ud, int32_t id) {
    run_ctx *r = ud;
    r->piece.len = 0;
    mx_detok_stream_push(r->ds, id, &r->piece);
    if (r->piece.len) { fwrite(r->piece.data, 1, r->piece.len, stdout); fflush(stdout); }
    return true;
}

static json_t *new_conversation(const char *system) {
    json_t *m = json_array();
    if (m && system) json_array_append_new(m, json_pack("{s:s, s:s}", "role", "system", "content", system));
    return m;
}

int cmd_run(int argc, char **argv) {
    const char *model_arg = NULL, *system = NULL;
    long long n_predict = 512, ctx_arg = 0, threads = 0;
    cli_samp sf;
    cli_samp_default(&sf);
    for (int i = 1, sk; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) { fprintf(stderr, "mlxcel run: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); model_arg = v; }
        else if (!strcmp(a, "--system")) { NEED(); system = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { NEED(); if (!cli_parse_int(a, v, 1, 1 << 20, &n_predict)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { NEED(); if (!cli_parse_int(a, v, 16, 1 << 24, &ctx_arg)) return 2; }
        else if ((sk = cli_samp_flag(&sf, "run", argc, argv, &i)) != 0) { if (sk < 0) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { NEED(); if (!cli_parse_int(a, v, 1, 1024, &threads)) return 2; }
        else { fprintf(stderr, "mlxcel run: unknown option '%s' (see mlxcel run --help)\n", a); return 2; }
#undef NEED
    }
    if (!model_arg) { fprintf(stderr, "mlxcel run: -m MODEL is required (see --help)\n"); return 2; }
    if (threads > 0) mx_pool_global_set_threads((int)threads);

    int rc = 1;
    char *dir = NULL, *src = NULL, *bos = NULL, *eos = NULL, *line = NULL;
    size_t line_cap = 0;
    mx_backend be = {0};
    mx_model *m = NULL;
    mx_tokenizer *tok = NULL;
    mx_template *tpl = NULL;
    json_t *msgs = NULL;
    run_ctx rc_ = {0};
    if (cli_resolve_model(model_arg, &dir)) { rc = cli_fail("run", NULL); goto done; }
    if (cli_backend_init(&be)) { rc = cli_fail("run", "backend"); goto done; }
    if (mx_model_load(dir, &be, &m)) { rc = cli_fail("run", NULL); goto done; }
    if (mx_tokenizer_load(dir, &tok)) { rc = cli_fail("run", "tokenizer"); goto done; }
    if (mx_chat_template_find(dir, false, &src)) { rc = cli_fail("run", "chat template"); goto done; }
    if (mx_template_parse(src, &tpl) || mx_template_special_tokens(dir, &bos, &eos)) { rc = cli_fail("run", "chat template"); goto done; }
    const mx_model_config *c = mx_model_cfg(m);
    int ctx = (int)(ctx_arg > 0 ? ctx_arg : (c->max_position_embeddings < 4096 ? c->max_position_embeddings : 4096));
    if (ctx > c->max_position_embeddings) { fprintf(stderr, "mlxcel run: -c %d exceeds the model's context (%d)\n", ctx, c->max_position_embeddings); rc = 2; goto done; }
    if (mx_gen_prepare(m, ctx, 0)) { rc = cli_fail("run", NULL); goto done; }
    rc_.ds = mx_detok_stream_new(tok, true);
    msgs = new_conversation(system);
    if (!rc_.ds || !msgs) { fprintf(stderr, "mlxcel run: out of memory\n"); goto done; }
    mx_gen_opts o = {0};
    cli_sampling(&o.sampling, &sf);
    bool tty = isatty(0);
    if (tty) fprintf(stderr, "mlxcel: chatting with %s (%s); /reset, /exit\n", dir, c->model_type);
    for (;;) {
        if (tty) { fputs("> ", stdout); fflush(stdout); }
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) { json_decref(msgs); msgs = new_conversation(system); printf("(new conversation)\n"); continue; }
        json_t *um = json_pack("{s:s, s:s%}", "role", "user", "content", line, (size_t)n);
        if (!um) { fprintf(stderr, "mlxcel run: the input is not valid UTF-8; ignored\n"); continue; }
        json_array_append_new(msgs, um);
        char *prompt = NULL;
        int32_t *ids = NULL, *out = NULL;
        int n_ids = 0, n_out = 0;
        mx_gen_stats gs;
        if (mx_template_render_chat(tpl, msgs, NULL, true, bos, eos, NULL, &prompt) ||
            mx_tokenizer_encode(tok, prompt, strlen(prompt), false, &ids, &n_ids)) {
            cli_fail("run", "prompt");
            json_array_remove(msgs, json_array_size(msgs) - 1);
            free(prompt); free(ids);
            continue;
        }
        free(prompt);
        int room = ctx - n_ids;
        if (room < 1) {
            fprintf(stderr, "mlxcel run: the conversation (%d tokens) fills the context (%d); /reset to start over\n", n_ids, ctx);
            json_array_remove(msgs, json_array_size(msgs) - 1);
            free(ids);
            continue;
        }
        o.n_predict = (int)(n_predict < room ? n_predict : room);
        mx_status st = mx_generate(m, ids, n_ids, &o, on_token, &rc_, &out, &n_out, &gs);
        rc_.piece.len = 0;
        mx_detok_stream_flush(rc_.ds, &rc_.piece);
        if (rc_.piece.len) fwrite(rc_.piece.data, 1, rc_.piece.len, stdout);
        printf("\n");
        fflush(stdout);
        if (st) { cli_fail("run", NULL); free(ids); free(out); goto done; }
        char *reply = NULL;
        if (mx_tokenizer_decode(tok, out, n_out, true, &reply) == MX_OK) {
            json_t *am = json_pack("{s:s, s:s}", "role", "assistant", "content", reply);
            if (am) json_array_append_new(msgs, am);
        }
        free(reply); free(ids); free(out);
        o.sampling.seed++;
    }
    rc = 0;
done:
    free(line);
    json_decref(msgs);
    mx_buf_free(&rc_.piece);
    mx_detok_stream_free(rc_.ds);
    mx_template_free(tpl);
    free(src); free(bos); free(eos);
    mx_model_free(m);
    if (be.i) cli_backend_free(&be);
    mx_tokenizer_free(tok);
    free(dir);
    return rc;
}
