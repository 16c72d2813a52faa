/* cli/cmd_generate.c: `mlxcel generate`: prompt in, text out (streamed, or one JSON object). */
#include "cli/cli.h"
#include "cli/model_open.h"

#include "mlxcel/engine.h"
#include "mlxcel/model.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: mlxcel generate -m MODEL (-p TEXT | --prompt-ids 1,2,3) [options]\n\n"
        "  -m, --model MODEL        model directory (or owner/name in the store)\n"
        "  -p, --prompt TEXT        prompt text; goes through the model's chat template as a user\n"
        "                           message unless --no-chat-template\n"
        "      --prompt-ids IDS     prompt as token ids (no template, no special tokens added)\n"
        "  -n, --n-predict N        tokens to generate (default 128)\n"
        "      --temp T             temperature (default 0.8; 0 = greedy)\n"
        "      --top-k K            top-k (default 40; 0 = off)\n"
        "      --top-p P            top-p (default 0.95; 1 = off)\n"
        "      --min-p P            min-p (default 0.05; 0 = off)\n"
        "      --repeat-penalty R   repetition penalty over the last 64 tokens (default 1 = off)\n"
        "      --seed S             random seed (default: random); same seed, same output\n"
        "      --no-chat-template   encode -p as plain text (with the tokenizer's special tokens)\n"
        "      --ignore-eos         keep generating past end-of-sequence tokens\n"
        "  -t, --threads N          CPU threads (default: all cores)\n"
        "      --precise            exact f32 math for the prompt too (default: the prompt may use\n"
        "                           faster int8 activations; decode steps are always exact)\n"
        "      --json               print one JSON object: tokens, text, prompt_tokens, prompt_tps,\n"
        "                           decode_tps, ...\n"
        "      --no-stats           do not print the speed line on stderr\n");
}

typedef struct stream_ctx {
    mx_detok_stream *ds;
    mx_buf buf;
    bool print;
} stream_ctx;

static bool on_token(void *ud, int32_t id) {
    stream_ctx *sc = ud;
    if (!sc->print) return true;
    sc->buf.len = 0;
    mx_detok_stream_push(sc->ds, id, &sc->buf);
    if (sc->buf.len) { fwrite(sc->buf.data, 1, sc->buf.len, stdout); fflush(stdout); }
    return true;
}

int cmd_generate(int argc, char **argv) {
    const char *model_arg = NULL, *prompt = NULL, *prompt_ids_s = NULL;
    long long n_predict = 128, threads = 0;
    cli_samp sf;
    cli_samp_default(&sf);
    bool no_tmpl = false, ignore_eos = false, json = false, stats = true, precise = false;
    for (int i = 1, sk; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) { fprintf(stderr, "mlxcel generate: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED(); model_arg = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { NEED(); prompt = v; }
        else if (!strcmp(a, "--prompt-ids")) { NEED(); prompt_ids_s = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { NEED(); if (!cli_parse_int(a, v, 0, 1 << 20, &n_predict)) return 2; }
        else if ((sk = cli_samp_flag(&sf, "generate", argc, argv, &i)) != 0) { if (sk < 0) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { NEED(); if (!cli_parse_int(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "--no-chat-template")) no_tmpl = true;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--precise")) precise = true;
        else if (!strcmp(a, "--no-stats")) stats = false;
        else { fprintf(stderr, "mlxcel generate: unknown option '%s' (see mlxcel generate --help)\n", a); return 2; }
#undef NEED
    }
    if (!model_arg) { fprintf(stderr, "mlxcel generate: -m MODEL is required (see --help)\n"); return 2; }
    if (!prompt == !prompt_ids_s) { fprintf(stderr, "mlxcel generate: give exactly one of -p TEXT or --prompt-ids IDS\n"); return 2; }
    if (threads > 0) mx_pool_global_set_threads((int)threads);

    int rc = 1;
    char *dir = NULL;
    mx_backend be = {0};
    mx_model *m = NULL;
    mx_tokenizer *tok = NULL;
    int32_t *ids = NULL, *out = NULL;
    int n_ids = 0, n_out = 0;
    stream_ctx sc = {0};
    char *text = NULL;
    mx_status st;
    if ((st = cli_resolve_model(model_arg, &dir))) { rc = cli_fail("generate", NULL); goto done; }
    if ((st = cli_backend_init(&be))) { rc = cli_fail("generate", "backend"); goto done; }
    if (precise && !strcmp(be.i->name, "cpu")) mx_backend_cpu_set_precise(&be, true);
    if ((st = mx_model_load(dir, &be, &m))) { rc = cli_fail("generate", NULL); goto done; }
    if ((st = mx_tokenizer_load(dir, &tok))) { rc = cli_fail("generate", "tokenizer"); goto done; }
    if (prompt_ids_s) {
        if (!cli_parse_ids("--prompt-ids", prompt_ids_s, &ids, &n_ids)) { rc = 2; goto done; }
    } else {
        bool templated;
        if ((st = cli_prompt_ids(tok, dir, prompt, !no_tmpl, &ids, &n_ids, &templated))) { rc = cli_fail("generate", "prompt"); goto done; }
        if (n_ids == 0) { fprintf(stderr, "mlxcel generate: the prompt encodes to no tokens\n"); rc = 2; goto done; }
    }
    const mx_model_config *c = mx_model_cfg(m);
    for (int i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size) { fprintf(stderr, "mlxcel generate: prompt token id %d is outside the vocabulary (%d)\n", ids[i], c->vocab_size); rc = 2; goto done; }
    long long ctx = (long long)n_ids + n_predict;
    if (ctx > c->max_position_embeddings) {
        fprintf(stderr, "mlxcel generate: prompt (%d tokens) + -n %lld exceeds the model's context of %d tokens\n", n_ids, n_predict, c->max_position_embeddings);
        rc = 2; goto done;
    }
    if ((st = mx_gen_prepare(m, (int)ctx, 0))) { rc = cli_fail("generate", NULL); goto done; }
    mx_gen_opts o = {0};
    o.n_predict = (int)n_predict;
    o.ignore_eos = ignore_eos;
    cli_sampling(&o.sampling, &sf);
    sc.ds = mx_detok_stream_new(tok, true);
    sc.print = !json;
    if (!sc.ds) { fprintf(stderr, "mlxcel generate: out of memory\n"); goto done; }
    mx_gen_stats gs;
    if (n_predict > 0 && (st = mx_generate(m, ids, n_ids, &o, on_token, &sc, &out, &n_out, &gs))) { rc = cli_fail("generate", NULL); goto done; }
    if (n_predict == 0) memset(&gs, 0, sizeof gs);
    double ptps = gs.prompt_s > 0 ? gs.prompt_tokens / gs.prompt_s : 0;
    double dtps = gs.decode_s > 0 && gs.gen_tokens > 1 ? (gs.gen_tokens - 1) / gs.decode_s : 0;
    if (json) {
        if ((st = mx_tokenizer_decode(tok, out, n_out, true, &text))) { rc = cli_fail("generate", "decode"); goto done; }
        json_t *o_ids = json_array(), *p_ids = json_array();
        for (int i = 0; i < n_out; i++) json_array_append_new(o_ids, json_integer(out[i]));
        for (int i = 0; i < n_ids; i++) json_array_append_new(p_ids, json_integer(ids[i]));
        json_t *j = json_pack("{s:o, s:s, s:i, s:o, s:i, s:f, s:f, s:f, s:f, s:s}",
            "tokens", o_ids, "text", text, "prompt_tokens", n_ids, "prompt_ids", p_ids,
            "generated_tokens", n_out, "prompt_tps", ptps, "decode_tps", dtps,
            "prompt_s", gs.prompt_s, "decode_s", gs.decode_s,
            "stop_reason", gs.hit_eos ? "eos" : "length");
        if (!j) { fprintf(stderr, "mlxcel generate: could not build JSON (invalid UTF-8?)\n"); goto done; }
        char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(j);
        if (!s) goto done;
        printf("%s\n", s);
        free(s);
    } else {
        sc.buf.len = 0;
        mx_detok_stream_flush(sc.ds, &sc.buf);
        if (sc.buf.len) fwrite(sc.buf.data, 1, sc.buf.len, stdout);
        printf("\n");
        fflush(stdout);
        if (stats)
            fprintf(stderr, "mlxcel: prompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s | %s, %d threads\n",
                    gs.prompt_tokens, ptps, gs.gen_tokens, dtps, be.i->name, mx_pool_size(mx_pool_global()));
    }
    rc = 0;
done:
    free(text);
    mx_buf_free(&sc.buf);
    mx_detok_stream_free(sc.ds);
    free(ids); free(out);
    mx_model_free(m);
    if (be.i) cli_backend_free(&be);
    mx_tokenizer_free(tok);
    free(dir);
    return rc;
}
