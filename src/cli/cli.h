/* cli/cli.h: shared declarations of the command line: subcommand table and argument helpers. */
#ifndef MLXCEL_CLI_H
#define MLXCEL_CLI_H
#include "mlxcel/core.h"
#include <stdio.h>

typedef int (*mx_cmd_fn)(int argc, char **argv);   /* argv[0] is the subcommand name */
typedef struct { const char *name; mx_cmd_fn fn; const char *help; } mx_cmd;

#define MX_CMD(name, fn, help) int fn(int argc, char **argv);
#include "cli/commands.def"
#undef MX_CMD

/* Strict number parsing for flags: false (and a message on stderr naming the flag) if `s` is not
 * entirely a number within [lo, hi]. */
bool cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
bool cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out);
/* Parse "1,2,3" into a malloc'ed int32 array. */
bool cli_parse_ids(const char *flag, const char *s, int32_t **ids, int *n);
/* Print "mlxcel <cmd>: <msg>" with mx_last_error() and return exit code 1. */
int cli_fail(const char *cmd, const char *what);

#endif
