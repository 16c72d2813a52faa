/* cli/main.c: the `mlxcel` program's entry point: dispatches subcommands. Each subcommand lives
 * in its own file (cmd_*.c) and registers here. Not the place for any model logic. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static const mx_cmd g_cmds[] = {
#define MX_CMD(name, fn, help) {name, fn, help},
#include "cli/commands.def"
#undef MX_CMD
    {NULL, NULL, NULL},
};

static void usage(FILE *f) {
    fprintf(f, "mlxcel %s: run large language models from MLX and Hugging Face checkpoints\n\n", MX_VERSION);
    fprintf(f, "usage: mlxcel <command> [options]   (mlxcel <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; g_cmds[i].name; i++)
        fprintf(f, "  %-14s %s\n", g_cmds[i].name, g_cmds[i].help);
    fprintf(f, "\nenvironment: MLXCEL_THREADS (CPU threads), MLXCEL_LOG (error|warn|info|debug), MLXCEL_DEVICE (cpu|gpu)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    const char *c = argv[1];
    if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) { usage(stdout); return 0; }
    if (!strcmp(c, "--version") || !strcmp(c, "-V")) { printf("mlxcel %s\n", MX_VERSION); return 0; }
    for (size_t i = 0; g_cmds[i].name; i++)
        if (!strcmp(c, g_cmds[i].name)) return g_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "mlxcel: unknown command '%s' (see mlxcel --help)\n", c);
    return 2;
}
