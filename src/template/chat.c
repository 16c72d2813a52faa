/* template/chat.c: the public template API (include/mlxcel/template.h): parse/free/render, and
 * the chat glue that mirrors transformers' apply_chat_template: finding a model directory's
 * template, its bos/eos strings, and the variables a chat template is rendered with. Not the
 * interpreter itself (parse.c, eval.c, builtins.c). */
#include "template/tpl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RENDER_MAX_STEPS 20000000L
#define RENDER_MAX_MEM ((size_t)1 << 30)

mx_status mx_template_parse(const char *src, mx_template **out) {
    *out = NULL;
    if (!src) return mx_errorf(MX_ERR_INVALID_ARG, "template: no source");
    mx_template *t = calloc(1, sizeof *t);
    if (!t) return mx_errorf(MX_ERR_NOMEM, "template: out of memory");
    t->ar.limit = RENDER_MAX_MEM;
    mx_status st = tpl_parse(src, t);
    if (st != MX_OK) { mx_template_free(t); return st; }
    *out = t;
    return MX_OK;
}

void mx_template_free(mx_template *t) {
    if (!t) return;
    ta_free(&t->ar);
    free(t);
}

mx_status mx_template_render(const mx_template *t, json_t *vars, char **out) {
    if (!t || !out) return mx_errorf(MX_ERR_INVALID_ARG, "template: bad arguments");
    if (vars && !json_is_object(vars)) return mx_errorf(MX_ERR_INVALID_ARG, "template: variables must be a JSON object");
    return tpl_render_ex(t, vars, RENDER_MAX_STEPS, RENDER_MAX_MEM, out);
}

mx_status mx_template_render_chat(const mx_template *t, json_t *messages, json_t *tools,
                                  bool add_generation_prompt, const char *bos_token,
                                  const char *eos_token, json_t *kwargs, char **out) {
    if (out) *out = NULL;
    if (!t || !out) return mx_errorf(MX_ERR_INVALID_ARG, "template: bad arguments");
    if (!messages || !json_is_array(messages)) return mx_errorf(MX_ERR_INVALID_ARG, "chat template: messages must be a JSON array");
    if (tools && !json_is_array(tools) && !json_is_null(tools)) return mx_errorf(MX_ERR_INVALID_ARG, "chat template: tools must be a JSON array");
    if (kwargs && !json_is_object(kwargs) && !json_is_null(kwargs)) return mx_errorf(MX_ERR_INVALID_ARG, "chat template: kwargs must be a JSON object");
    json_t *vars = json_object();
    if (!vars) return mx_errorf(MX_ERR_NOMEM, "chat template: out of memory");
    /* transformers: render(messages=, tools=, documents=, add_generation_prompt=, **special_tokens, **kwargs) */
    int bad = 0;
    bad |= json_object_set(vars, "messages", messages);
    bad |= json_object_set_new(vars, "tools", tools && !json_is_null(tools) ? json_incref(tools) : json_null());
    bad |= json_object_set_new(vars, "documents", json_null());
    bad |= json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt));
    if (bos_token) bad |= json_object_set_new(vars, "bos_token", json_string(bos_token));
    if (eos_token) bad |= json_object_set_new(vars, "eos_token", json_string(eos_token));
    if (kwargs && json_is_object(kwargs)) {
        const char *k;
        json_t *v;
        json_object_foreach(kwargs, k, v) {
            /* apply_chat_template's own parameters cannot come through **kwargs */
            if (!strcmp(k, "messages") || !strcmp(k, "tools") || !strcmp(k, "documents") || !strcmp(k, "add_generation_prompt")) {
                json_decref(vars);
                return mx_errorf(MX_ERR_INVALID_ARG, "chat template: kwargs may not set '%s'", k);
            }
            bad |= json_object_set(vars, k, v);
        }
    }
    mx_status st;
    if (bad) st = mx_errorf(MX_ERR_INVALID_ARG, "chat template: bad variables (special tokens must be valid UTF-8)");
    else st = tpl_render_ex(t, vars, RENDER_MAX_STEPS, RENDER_MAX_MEM, out);
    json_decref(vars);
    return st;
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Last resort: a processor's chat_template.json ({"chat_template": "..."}), as multimodal
 * checkpoints ship it. */
static mx_status find_processor_template(const char *dir, char **src_out) {
    char *pp = path_join(dir, "chat_template.json");
    if (!pp) return mx_errorf(MX_ERR_NOMEM, "chat template: out of memory");
    if (!file_exists(pp)) {
        free(pp);
        return mx_errorf(MX_ERR_IO, "%s: no chat template (no chat_template.jinja, no chat_template in tokenizer_config.json, no chat_template.json)", dir);
    }
    json_error_t je;
    json_t *j = json_load_file(pp, 0, &je);
    mx_status st = MX_OK;
    json_t *ct = json_is_object(j) ? json_object_get(j, "chat_template") : NULL;
    if (!j) st = mx_errorf(MX_ERR_FORMAT, "%s: line %d: %s", pp, je.line, je.text);
    else if (!json_is_string(ct)) st = mx_errorf(MX_ERR_FORMAT, "%s: \"chat_template\" must be a string", pp);
    else if (!(*src_out = strdup(json_string_value(ct)))) st = mx_errorf(MX_ERR_NOMEM, "chat template: out of memory");
    json_decref(j);
    free(pp);
    return st;
}

mx_status mx_chat_template_find(const char *dir, bool want_tools, char **src_out) {
    *src_out = NULL;
    if (!dir) return mx_errorf(MX_ERR_INVALID_ARG, "chat template: no directory");
    char *jp = path_join(dir, "chat_template.jinja");
    if (!jp) return mx_errorf(MX_ERR_NOMEM, "chat template: out of memory");
    if (file_exists(jp)) {
        char *s = mx_read_file(jp, NULL);
        free(jp);
        if (!s) return MX_ERR_IO;
        *src_out = s;
        return MX_OK;
    }
    free(jp);
    char *cp = path_join(dir, "tokenizer_config.json");
    if (!cp) return mx_errorf(MX_ERR_NOMEM, "chat template: out of memory");
    if (!file_exists(cp)) {
        free(cp);
        return find_processor_template(dir, src_out);
    }
    json_error_t je;
    json_t *cfg = json_load_file(cp, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    mx_status st = MX_OK;
    if (!cfg) { st = mx_errorf(MX_ERR_FORMAT, "%s: line %d: %s", cp, je.line, je.text); goto done; }
    json_t *ct = json_is_object(cfg) ? json_object_get(cfg, "chat_template") : NULL;
    if (!ct || json_is_null(ct)) { st = find_processor_template(dir, src_out); goto done; }
    const char *src = NULL;
    if (json_is_string(ct)) src = json_string_value(ct);
    else if (json_is_array(ct)) {
        const char *dflt = NULL, *tool = NULL;
        size_t i;
        json_t *e;
        json_array_foreach(ct, i, e) {
            json_t *nm = json_object_get(e, "name"), *tp = json_object_get(e, "template");
            if (!json_is_string(nm) || !json_is_string(tp)) {
                st = mx_errorf(MX_ERR_FORMAT, "%s: chat_template[%zu] needs string 'name' and 'template'", cp, i);
                goto done;
            }
            if (!strcmp(json_string_value(nm), "default")) dflt = json_string_value(tp);
            if (!strcmp(json_string_value(nm), "tool_use")) tool = json_string_value(tp);
        }
        src = want_tools && tool ? tool : dflt;
        if (!src) { st = mx_errorf(MX_ERR_FORMAT, "%s: chat_template has several templates and none is named 'default'", cp); goto done; }
    } else { st = mx_errorf(MX_ERR_FORMAT, "%s: chat_template must be a string or a list of {name, template}", cp); goto done; }
    *src_out = strdup(src);
    if (!*src_out) st = mx_errorf(MX_ERR_NOMEM, "chat template: out of memory");
done:
    json_decref(cfg);
    free(cp);
    return st;
}

static char *token_str(json_t *v) {
    if (json_is_string(v)) return strdup(json_string_value(v));
    if (json_is_object(v)) {
        json_t *c = json_object_get(v, "content");
        if (json_is_string(c)) return strdup(json_string_value(c));
    }
    return NULL;
}

mx_status mx_template_special_tokens(const char *dir, char **bos, char **eos) {
    *bos = *eos = NULL;
    char *cp = path_join(dir, "tokenizer_config.json");
    if (!cp) return mx_errorf(MX_ERR_NOMEM, "chat template: out of memory");
    if (!file_exists(cp)) { free(cp); return MX_OK; }
    json_error_t je;
    json_t *cfg = json_load_file(cp, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    if (!cfg || !json_is_object(cfg)) {
        mx_status st = cfg ? mx_errorf(MX_ERR_FORMAT, "%s: not a JSON object", cp)
                           : mx_errorf(MX_ERR_FORMAT, "%s: line %d: %s", cp, je.line, je.text);
        json_decref(cfg);
        free(cp);
        return st;
    }
    *bos = token_str(json_object_get(cfg, "bos_token"));
    *eos = token_str(json_object_get(cfg, "eos_token"));
    json_decref(cfg);
    free(cp);
    return MX_OK;
}
