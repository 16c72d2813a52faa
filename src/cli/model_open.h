/* cli/model_open.h: shared model/backend/prompt helpers of the model-taking subcommands. */
#ifndef MLXCEL_CLI_MODEL_OPEN_H
#define MLXCEL_CLI_MODEL_OPEN_H
#include "mlxcel/backend.h"
#include "mlxcel/engine.h"
#include "mlxcel/tokenizer.h"

/* CPU or GPU, per MLXCEL_DEVICE and what this build and machine have. */
mx_status cli_backend_init(mx_backend *be);
void cli_backend_free(mx_backend *be);
/* -m argument (directory, owner/name, or bare name) to a model directory (malloc'ed). */
mx_status cli_resolve_model(const char *arg, char **dir_out);
/* Prompt text to ids: through the model's chat template (as one user message, with the
 * generation prompt) when use_template and the model has one, else encoded with special tokens. */
mx_status cli_prompt_ids(const mx_tokenizer *tok, const char *dir, const char *text, bool use_template,
                         int32_t **ids, int *n, bool *templated);
/* Sampling settings from the common flags; seed < 0 picks a time-based seed. */
void cli_sampling(mx_sampling *s, double temp, long long top_k, double top_p, double min_p, double rep, long long seed);
#endif
