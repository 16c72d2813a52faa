/* cli/cmd_download.c: `mlxcel download`: flags to mx_hub_download (io/hub.c). Not the protocol. */
#include "cli/cli.h"
#include "mlxcel/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void download_usage(FILE *f) {
    fprintf(f, "usage: mlxcel download REPO [--revision R] [--include GLOB ...] [--token T] [--local-dir D]\n"
               "                       [--models-dir D] [--force]\n"
               "  Downloads a Hugging Face repository (owner/name, or a bare name for mlx-community/name)\n"
               "  into the store (${MLXCEL_CACHE_DIR:-~/.cache/mlxcel}/models/<owner>/<name>).\n"
               "  environment: HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE, MLXCEL_CACHE_DIR\n");
}

int cmd_download(int argc, char **argv) {
    mx_download_opts o = {.progress = stderr};
    const char **inc = calloc((size_t)argc + 1, sizeof *inc);
    if (!inc) return cli_fail("download", "out of memory");
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { download_usage(stdout); rc = 0; goto done; }
        else if (!strcmp(a, "--revision")) { if (!v) goto missing; o.revision = v; i++; }
        else if (!strcmp(a, "--include")) {
            if (!v) goto missing;
            inc[o.n_include++] = v; i++;
            /* more patterns may follow one --include, as in huggingface-cli; only words with glob
             * characters are taken, so a repository id after the patterns stays the repository */
            while (i + 1 < argc && argv[i + 1][0] != '-' && strpbrk(argv[i + 1], "*?[")) inc[o.n_include++] = argv[++i];
        } else if (!strcmp(a, "--token")) { if (!v) goto missing; o.token = v; i++; }
        else if (!strcmp(a, "--local-dir")) { if (!v) goto missing; o.local_dir = v; i++; }
        else if (!strcmp(a, "--models-dir")) { if (!v) goto missing; o.models_dir = v; i++; }
        else if (!strcmp(a, "--force")) o.force = true;
        else if (!strcmp(a, "--quiet")) o.progress = NULL;
        else if (a[0] == '-') { fprintf(stderr, "mlxcel download: unknown option '%s'\n", a); download_usage(stderr); goto done; }
        else if (!o.repo_id) o.repo_id = a;
        else { fprintf(stderr, "mlxcel download: unexpected argument '%s'\n", a); goto done; }
        continue;
    missing:
        fprintf(stderr, "mlxcel download: %s needs a value\n", a);
        goto done;
    }
    if (!o.repo_id) { fprintf(stderr, "mlxcel download: no repository given\n"); download_usage(stderr); goto done; }
    o.include = inc;
    char full[512];
    if (!strchr(o.repo_id, '/')) { snprintf(full, sizeof full, "mlx-community/%s", o.repo_id); o.repo_id = full; }
    char *dir = NULL;
    if (mx_hub_download(&o, &dir) != MX_OK) { rc = cli_fail("download", NULL); goto done; }
    printf("%s\n", dir);
    free(dir);
    rc = 0;
done:
    free(inc);
    return rc;
}
