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

void cli_sampling(mx_sampling *s, double temp, long long top_k, double top_p, double min_p, double rep, long long seed) {
    mx_sampling_default(s);
    s->temperature = (float)temp;
    s->top_k = (int)top_k;
    s->top_p = (float)top_p;
    s->min_p = (float)min_p;
    s->repeat_penalty = (float)rep;
    s->seed = seed >= 0 ? (uint64_t)seed : (uint64_t)(mx_time_s() * 1e9) ^ (uint64_t)getpid();
}
