/* mlxcel/template.h: chat templates. A Jinja2 interpreter (the subset real models' chat
 * templates use, with transformers' settings: trim_blocks, lstrip_blocks, loopcontrols, its
 * tojson/raise_exception/strftime_now) and the glue that finds a model's template and renders a
 * conversation the way transformers' apply_chat_template does. It is not a general Jinja2: no
 * include/extends/import, no autoescape, no sandbox beyond resource limits.
 *
 * Ownership: strings returned through `char **` are malloc'ed; the caller frees them.
 * Errors: statuses as in core.h with a one-line message in mx_last_error().
 * Thread safety: a parsed mx_template is immutable; any number of threads may render it at once.
 * Rendering is bounded (steps, memory, recursion) so hostile templates end with an error. */
#ifndef MLXCEL_TEMPLATE_H
#define MLXCEL_TEMPLATE_H

#include "mlxcel/core.h"
#include <jansson.h>

typedef struct mx_template mx_template;

/* Find the chat template of a model or tokenizer directory: DIR/chat_template.jinja, else
 * DIR/tokenizer_config.json's "chat_template" (a string, or a list of {name, template}: "tool_use"
 * when `want_tools` and present, else "default"), else DIR/chat_template.json's "chat_template"
 * (processor layout). On success *src_out is malloc'ed source.
 * MX_ERR_IO: the directory has no chat template at all (a base model: callers may fall back to
 * the raw prompt); MX_ERR_FORMAT: a file is malformed or the named list has no usable entry. */
mx_status mx_chat_template_find(const char *dir, bool want_tools, char **src_out);

/* Parse template source. Syntax errors: MX_ERR_FORMAT, message "template line N: ...". */
mx_status mx_template_parse(const char *src, mx_template **out);
void mx_template_free(mx_template *t);

/* Render with arbitrary variables: `vars` is a JSON object (or NULL) of top-level variables.
 * Output malloc'ed into *out. Runtime errors (raise_exception, type errors, undefined attribute
 * access, limits): MX_ERR_INVALID_ARG with the message (raise_exception's message verbatim). */
mx_status mx_template_render(const mx_template *t, json_t *vars, char **out);

/* Render a conversation with the variables transformers passes: messages (JSON array), tools
 * (JSON array, or NULL: then `tools` is none), add_generation_prompt, bos_token/eos_token (NULL:
 * the variable is left undefined, as transformers does for a tokenizer without that token),
 * documents = none, and every key of `kwargs` (JSON object or NULL, e.g. {"enable_thinking":
 * false}) as an extra variable (it may override bos_token/eos_token; setting messages, tools,
 * documents or add_generation_prompt through it is MX_ERR_INVALID_ARG, as in transformers).
 * Errors as mx_template_render: a template that calls raise_exception (e.g. "Conversation roles
 * must alternate ...") yields MX_ERR_INVALID_ARG with exactly that message, fit for an HTTP 400. */
mx_status mx_template_render_chat(const mx_template *t, json_t *messages, json_t *tools,
                                  bool add_generation_prompt, const char *bos_token,
                                  const char *eos_token, json_t *kwargs, char **out);

/* Read bos_token/eos_token from DIR/tokenizer_config.json (a string or {"content": ...}).
 * Each is malloc'ed or NULL when absent/null; both NULL (MX_OK) when the file does not exist.
 * MX_ERR_FORMAT when the file is not valid JSON. */
mx_status mx_template_special_tokens(const char *dir, char **bos, char **eos);

#endif
