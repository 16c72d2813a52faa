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
/* The sampling flags generate and run share (--temp/--temperature, --top-k, --top-p, --min-p,
 * --repeat-penalty, --seed) with their defaults. */
typedef struct cli_samp { double temp, top_p, min_p, rep; long long top_k, seed; } cli_samp;
void cli_samp_default(cli_samp *s);
/* argv[*i] is one of them: parse its value (argv[*i + 1]; *i moves past it) and return 1, or
 * print why the value is bad (prefixed with `cmd`) and return -1; 0 for any other flag. */
int cli_samp_flag(cli_samp *s, const char *cmd, int argc, char **argv, int *i);
/* Sampling settings from those flags; seed < 0 picks a time-based seed. */
void cli_sampling(mx_sampling *s, const cli_samp *f);
#endif
