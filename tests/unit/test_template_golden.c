/* tests/unit/test_template_golden.c: chat templates of real models against prompts rendered by
 * transformers' apply_chat_template (tests/fixtures/goldens/chat/<name>.json: each case's
 * messages, tools, add_generation_prompt and kwargs; the template and bos/eos come from
 * tests/fixtures/tokenizers/<tokenizer>/tokenizer_config.json). Byte-exact, and a case recorded
 * as an error must fail with the template's own message. Then every chat_template.jinja shipped
 * in tests/fixtures/models and models/ must render a simple conversation. */
#include "test.h"
#include "mlxcel/template.h"

#include <dirent.h>
#include <sys/stat.h>

static const char *GOLDENS[] = {"qwen3", "llama3_1", "deepseek_v3", "gemma3"};

typedef struct { const char *tok; json_t *c; mx_template *t; const char *bos, *eos; } gcase;

static void golden_case(gcase *g) {
    json_t *c = g->c;
    json_t *msgs = json_object_get(c, "messages"), *tools = json_object_get(c, "tools");
    json_t *kw = json_object_get(c, "kwargs"), *want = json_object_get(c, "prompt"), *err = json_object_get(c, "error");
    bool gen = json_is_true(json_object_get(c, "add_generation_prompt"));
    char *out = NULL;
    mx_status st = mx_template_render_chat(g->t, msgs, json_is_null(tools) ? NULL : tools, gen, g->bos, g->eos, kw, &out);
    if (json_is_string(err)) {
        /* "TemplateError: <message>": the template's raise_exception message */
        const char *e = json_string_value(err), *colon = strstr(e, ": ");
        const char *msg = colon ? colon + 2 : e;
        TCHECK(st != MX_OK && !out, "expected an error, rendered [%s]", out ? out : "");
        TCHECK(!strcmp(mx_last_error(), msg), "message [%s] want [%s]", mx_last_error(), msg);
    } else {
        TREQUIRE(st == MX_OK, "render: %s", mx_last_error());
        TCHECK(json_is_string(want) && !strcmp(out, json_string_value(want)), "got [%s]\nwant [%s]", out,
               json_is_string(want) ? json_string_value(want) : "(none)");
    }
    free(out);
}

static void golden_file(const char *name) {
    char p[1024], dir[1024], label[256];
    snprintf(label, sizeof label, "tests/fixtures/goldens/chat/%s.json", name);
    json_error_t je;
    json_t *g = json_load_file(t_path(p, sizeof p, label), 0, &je);
    if (!g) { printf("FAIL golden_%s_load: %s: %s\n", name, p, je.text); t_total_failed++; return; }
    const char *tok = json_string_value(json_object_get(g, "tokenizer"));
    snprintf(label, sizeof label, "tests/fixtures/tokenizers/%s", tok ? tok : "?");
    t_path(dir, sizeof dir, label);
    json_t *cases = json_object_get(g, "cases");
    bool any_tools = false;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) if (json_is_array(json_object_get(c, "tools"))) any_tools = true;
    char *src = NULL, *bos = NULL, *eos = NULL, *src_tools = NULL;
    mx_template *t = NULL, *tt = NULL;
    if (mx_chat_template_find(dir, false, &src) != MX_OK || mx_template_special_tokens(dir, &bos, &eos) != MX_OK ||
        mx_template_parse(src, &t) != MX_OK ||
        (any_tools && (mx_chat_template_find(dir, true, &src_tools) != MX_OK || mx_template_parse(src_tools, &tt) != MX_OK))) {
        printf("FAIL golden_%s_template: %s\n", name, mx_last_error());
        t_total_failed++;
        goto done;
    }
    json_array_foreach(cases, i, c) {
        char cname[256];
        snprintf(cname, sizeof cname, "golden_%s_%s", name, json_string_value(json_object_get(c, "name")));
        gcase gc = {tok, c, json_is_array(json_object_get(c, "tools")) ? tt : t, bos, eos};
        RUN_NAMED(cname, golden_case, &gc);
    }
done:
    mx_template_free(t);
    mx_template_free(tt);
    free(src); free(src_tools); free(bos); free(eos);
    json_decref(g);
}

static void model_template(const char *dir) {
    char *src = NULL, *bos = NULL, *eos = NULL, *out = NULL;
    mx_template *t = NULL;
    mx_status rq_1 = mx_chat_template_find(dir, false, &src);
    TREQUIRE(rq_1 == MX_OK, "%s", mx_last_error());
    mx_status rq_2 = mx_template_special_tokens(dir, &bos, &eos);
    TREQUIRE(rq_2 == MX_OK, "%s", mx_last_error());
    mx_status rq_3 = mx_template_parse(src, &t);
    TREQUIRE(rq_3 == MX_OK, "%s", mx_last_error());
    json_t *msgs = json_loads("[{\"role\":\"system\",\"content\":\"You are terse.\"},{\"role\":\"user\",\"content\":\"Hi there\"},"
                              "{\"role\":\"assistant\",\"content\":\"Hello.\"},{\"role\":\"user\",\"content\":\"Tell me a fortune\"}]", 0, NULL);
    TCHECK(mx_template_render_chat(t, msgs, NULL, true, bos, eos, NULL, &out) == MX_OK, "%s", mx_last_error());
    TCHECK(out && strstr(out, "Tell me a fortune") && strstr(out, "Hello.") && strstr(out, "Hi there"), "conversation missing from [%s]", out ? out : "");
    free(out);
    out = NULL;
    TCHECK(mx_template_render_chat(t, msgs, NULL, false, bos, eos, NULL, &out) == MX_OK, "%s", mx_last_error());
    free(out);
    json_decref(msgs);
    mx_template_free(t);
    free(src); free(bos); free(eos);
}

static void model_dirs(const char *rel) {
    char root[1024];
    t_path(root, sizeof root, rel);
    DIR *d = opendir(root);
    if (!d) { printf("FAIL model_templates_%s: cannot open %s\n", rel, root); t_total_failed++; return; }
    struct dirent *e;
    int n = 0;
    char **names = NULL;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[2048];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s/chat_template.jinja", root, e->d_name);
        if (stat(p, &sb) != 0) continue;
        names = realloc(names, (size_t)(n + 1) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n == 0) { printf("FAIL model_templates_%s: no chat_template.jinja found\n", rel); t_total_failed++; }
    for (int i = 0; i < n; i++) {
        char dir[2048], label[512];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        snprintf(label, sizeof label, "model_template_%s", names[i]);
        RUN_NAMED(label, model_template, dir);
        free(names[i]);
    }
    free(names);
}

int main(void) {
    for (size_t i = 0; i < sizeof GOLDENS / sizeof *GOLDENS; i++) golden_file(GOLDENS[i]);
    model_dirs("tests/fixtures/models");
    model_dirs("models");
    TEST_EXIT();
}
