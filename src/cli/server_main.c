/* cli/server_main.c: the `mlxcel-server` program, a drop-in for llama-server. It is `mlxcel serve`
 * under another name: the whole command is cmd_serve.c, compiled into this program too. */
#include "cmd_serve.c"

int main(int argc, char **argv) {
    argv[0] = "mlxcel-server";
    return cmd_serve(argc, argv);
}
