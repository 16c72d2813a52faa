/* cli/cmd_template.c: `mlxcel apply-template`: renders a model's chat template for a conversation
 * exactly as transformers' apply_chat_template(tokenize=False) would, and prints it with no
 * added newline. The interpreter lives in src/template/; this file only parses flags and files. */
#include "cli/cli.h"
#include "mlxcel/template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: mlxcel apply-template (-m DIR | --tokenizer DIR) --messages FILE.json [options]\n\n"
            "Render the chat template of DIR (chat_template.jinja or tokenizer_config.json) for a\n"
            "conversation and print the prompt exactly (no trailing newline added).\n\n"
            "options:\n"
            "  -m, --model DIR          model directory holding the template and tokenizer_config.json\n"
            "  --tokenizer DIR          same, for a tokenizer-only directory\n"
            "  --messages FILE.json     JSON array of {role, content, ...} messages ('-' = stdin)\n"
            "  --tools FILE.json        JSON array of tool definitions (passed as `tools`)\n"
            "  --no-generation-prompt   render with add_generation_prompt=false\n"
            "  --kwargs JSON            JSON object of extra template variables, e.g. '{\"enable_thinking\":false}'\n"
            "  --template FILE          use this template file instead of DIR's\n"
            "  -h, --help               show this help\n");
}

static json_t *load_json_file(const char *flag, const char *path) {
    json_error_t je;
    json_t *j = !strcmp(path, "-") ? json_loadf(stdin, JSON_DECODE_ANY, &je) : json_load_file(path, JSON_DECODE_ANY, &je);
    if (!j) fprintf(stderr, "mlxcel apply-template: %s %s: line %d: %s\n", flag, path, je.line, je.text);
    return j;
}

int cmd_apply_template(int argc, char **argv) {
    const char *dir = NULL, *msgs_path = NULL, *tools_path = NULL, *kwargs_s = NULL, *tpl_path = NULL;
    bool gen = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--no-generation-prompt")) gen = false;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--tokenizer") || !strcmp(a, "--messages") ||
                 !strcmp(a, "--tools") || !strcmp(a, "--kwargs") || !strcmp(a, "--template")) {
            if (!has_val) { fprintf(stderr, "mlxcel apply-template: %s needs a value\n", a); return 2; }
            const char *v = argv[++i];
            if (!strcmp(a, "--messages")) msgs_path = v;
            else if (!strcmp(a, "--tools")) tools_path = v;
            else if (!strcmp(a, "--kwargs")) kwargs_s = v;
            else if (!strcmp(a, "--template")) tpl_path = v;
            else dir = v;
        } else { fprintf(stderr, "mlxcel apply-template: unknown option '%s' (see --help)\n", a); return 2; }
    }
    if (!dir && !tpl_path) { fprintf(stderr, "mlxcel apply-template: -m DIR or --tokenizer DIR is required (see --help)\n"); return 2; }
    if (!msgs_path) { fprintf(stderr, "mlxcel apply-template: --messages FILE.json is required (see --help)\n"); return 2; }

    int rc = 1;
    json_t *msgs = NULL, *tools = NULL, *kwargs = NULL;
    char *src = NULL, *bos = NULL, *eos = NULL, *out = NULL;
    mx_template *t = NULL;

    msgs = load_json_file("--messages", msgs_path);
    if (!msgs) goto done;
    if (!json_is_array(msgs)) {
        json_t *inner = json_is_object(msgs) ? json_object_get(msgs, "messages") : NULL;
        if (!json_is_array(inner)) { fprintf(stderr, "mlxcel apply-template: --messages %s: expected a JSON array of messages\n", msgs_path); goto done; }
        json_incref(inner);
        json_decref(msgs);
        msgs = inner;
    }
    if (tools_path) {
        tools = load_json_file("--tools", tools_path);
        if (!tools) goto done;
        if (!json_is_array(tools)) { fprintf(stderr, "mlxcel apply-template: --tools %s: expected a JSON array\n", tools_path); goto done; }
    }
    if (kwargs_s) {
        json_error_t je;
        kwargs = json_loads(kwargs_s, JSON_DECODE_ANY, &je);
        if (!kwargs || !json_is_object(kwargs)) {
            fprintf(stderr, "mlxcel apply-template: --kwargs: expected a JSON object%s%s\n", kwargs ? "" : ": ", kwargs ? "" : je.text);
            goto done;
        }
    }
    if (tpl_path) {
        src = mx_read_file(tpl_path, NULL);
        if (!src) { rc = cli_fail("apply-template", "--template"); goto done; }
    } else if (mx_chat_template_find(dir, tools != NULL, &src) != MX_OK) {
        rc = cli_fail("apply-template", NULL);
        goto done;
    }
    if (dir && mx_template_special_tokens(dir, &bos, &eos) != MX_OK) { rc = cli_fail("apply-template", NULL); goto done; }
    if (mx_template_parse(src, &t) != MX_OK) { rc = cli_fail("apply-template", NULL); goto done; }
    if (mx_template_render_chat(t, msgs, tools, gen, bos, eos, kwargs, &out) != MX_OK) {
        rc = cli_fail("apply-template", NULL);
        goto done;
    }
    fwrite(out, 1, strlen(out), stdout);
    fflush(stdout);
    rc = 0;
done:
    free(out);
    mx_template_free(t);
    free(src);
    free(bos);
    free(eos);
    json_decref(msgs);
    json_decref(tools);
    json_decref(kwargs);
    return rc;
}
