/* tests/fuzz/fuzz_template.c: libFuzzer target for the chat-template layer. The input is template
 * source, optionally followed by a NUL byte and a JSON object of variables (else a fixed
 * conversation with tools is used). Parse errors and render errors are fine; crashes, leaks,
 * hangs and sanitizer reports are not. Renders run with small step/memory budgets. */
#include "mlxcel/template.h"
#include "template/tpl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *DEFAULT_VARS =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u00e9 \\ud83d\\ude00\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
    "   \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1, \"y\": [1.5, true, null]}}}]},"
    " {\"role\": \"tool\", \"content\": \"{\\\"ok\\\": 1}\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"documents\": null}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    size_t tl = strlen(src);
    json_t *vars = NULL;
    if (tl < size) vars = json_loadb(src + tl + 1, size - tl - 1, JSON_DECODE_ANY, NULL);
    if (!vars || !json_is_object(vars)) { json_decref(vars); vars = json_loads(DEFAULT_VARS, 0, NULL); }
    mx_template *t = NULL;
    if (mx_template_parse(src, &t) == MX_OK) {
        char *out = NULL;
        if (tpl_render_ex(t, vars, 200000, 32u << 20, &out) == MX_OK) free(out);
        mx_template_free(t);
    }
    json_decref(vars);
    free(src);
    return 0;
}
