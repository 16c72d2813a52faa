/* cli/model_open.c: what the model-taking subcommands share: resolving -m, choosing the backend,
 * loading the model and its tokenizer, and turning a prompt into ids (through the chat template
 * unless told not to). */
#include "cli/cli.h"
#include "cli/model_open.h"

#include "mlxcel/backend_cuda.h"
#include "mlxcel/store.h"
#include "mlxcel/template.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

mx_status cli_backend_init(mx_backend *be) {
    return mx_backend_auto_init(be);
}

void cli_backend_free(mx_backend *be) {
    mx_backend_auto_free(be);
}

mx_status cli_resolve_model(const char *arg, char **dir_out) {
    return mx_model_resolve(arg, true, dir_out);
}

mx_status cli_prompt_ids(const mx_tokenizer *tok, const char *dir, const char *text, bool use_template,
                         int32_t **ids, int *n, bool *templated) {
    *templated = false;
    if (use_template) {
        char *src = NULL;
        mx_status st = mx_chat_template_find(dir, false, &src);
        if (st == MX_OK) {
            mx_template *t = NULL;
            char *bos = NULL, *eos = NULL, *out = NULL;
            json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", text);
            if (!msgs) { free(src); return mx_errorf(MX_ERR_NOMEM, "out of memory"); }
            if (!(st = mx_template_parse(src, &t)) &&
                !(st = mx_template_special_tokens(dir, &bos, &eos)) &&
                !(st = mx_template_render_chat(t, msgs, NULL, true, bos, eos, NULL, &out))) {
                st = mx_tokenizer_encode(tok, out, strlen(out), false, ids, n);
                *templated = true;
            }
            free(out); free(bos); free(eos);
            json_decref(msgs);
            mx_template_free(t);
            free(src);
            return st;
        }
        if (st != MX_ERR_IO) return st;   /* a broken template is an error; none at all is not */
        mx_clear_error();
    }
    return mx_tokenizer_encode(tok, text, strlen(text), true, ids, n);
}

void cli_samp_default(cli_samp *s) {
    s->temp = 0.8; s->top_p = 0.95; s->min_p = 0.05; s->rep = 1.0; s->top_k = 40; s->seed = -1;
}

int cli_samp_flag(cli_samp *s, const char *cmd, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    bool known = !strcmp(a, "--temp") || !strcmp(a, "--temperature") || !strcmp(a, "--top-k") || !strcmp(a, "--top-p") ||
                 !strcmp(a, "--min-p") || !strcmp(a, "--repeat-penalty") || !strcmp(a, "--seed");
    if (!known) return 0;
    if (*i + 1 >= argc) { fprintf(stderr, "mlxcel %s: %s needs a value\n", cmd, a); return -1; }
    const char *v = argv[++*i];
    bool ok;
    if (!strcmp(a, "--top-k")) ok = cli_parse_int(a, v, 0, 1 << 24, &s->top_k);
    else if (!strcmp(a, "--top-p")) ok = cli_parse_float(a, v, 0, 1, &s->top_p);
    else if (!strcmp(a, "--min-p")) ok = cli_parse_float(a, v, 0, 1, &s->min_p);
    else if (!strcmp(a, "--repeat-penalty")) ok = cli_parse_float(a, v, 0.01, 100, &s->rep);
    else if (!strcmp(a, "--seed")) ok = cli_parse_int(a, v, -1, INT64_MAX, &s->seed);
    else ok = cli_parse_float(a, v, 0, 100, &s->temp);
    return ok ? 1 : -1;
}

void cli_sampling(mx_sampling *s, const cli_samp *f) {
    mx_sampling_default(s);
    s->temperature = (float)f->temp;
    s->top_k = (int)f->top_k;
    s->top_p = (float)f->top_p;
    s->min_p = (float)f->min_p;
    s->repeat_penalty = (float)f->rep;
    s->seed = f->seed >= 0 ? (uint64_t)f->seed : (uint64_t)(mx_time_s() * 1e9) ^ (uint64_t)getpid();
}
