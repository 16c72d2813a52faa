/* cli/cmd_list.c: `mlxcel list` (models in the store, as a table or JSON) and `mlxcel rm` (remove
 * one from the store, never from the Hugging Face cache). The store itself is io/store.c. */
#include "cli/cli.h"
#include "mlxcel/store.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_sort; /* 0 name, 1 size (largest first), 2 modified (newest first) */

static int entry_cmp(const void *a, const void *b) {
    const mx_store_entry *x = a, *y = b;
    if (g_sort == 1 && x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    if (g_sort == 2 && x->mtime != y->mtime) return x->mtime > y->mtime ? -1 : 1;
    return strcmp(x->repo, y->repo);
}

static void human(uint64_t b, char *out, size_t n) {
    if (b >= 1000000000ull) snprintf(out, n, "%.2f GB", (double)b / 1e9);
    else if (b >= 1000000ull) snprintf(out, n, "%.1f MB", (double)b / 1e6);
    else if (b >= 1000ull) snprintf(out, n, "%.1f kB", (double)b / 1e3);
    else snprintf(out, n, "%llu B", (unsigned long long)b);
}

int cmd_list(int argc, char **argv) {
    bool json = false;
    const char *models_dir = NULL;
    g_sort = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: mlxcel list [--json] [--sort name|size|modified] [--models-dir D]\n");
            return 0;
        } else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--sort")) {
            const char *v = i + 1 < argc ? argv[++i] : NULL;
            if (!v) { fprintf(stderr, "mlxcel list: --sort needs a value\n"); return 2; }
            if (!strcmp(v, "name")) g_sort = 0;
            else if (!strcmp(v, "size")) g_sort = 1;
            else if (!strcmp(v, "modified")) g_sort = 2;
            else { fprintf(stderr, "mlxcel list: --sort: '%s' is not name, size or modified\n", v); return 2; }
        } else if (!strcmp(a, "--models-dir")) {
            if (i + 1 >= argc) { fprintf(stderr, "mlxcel list: --models-dir needs a value\n"); return 2; }
            models_dir = argv[++i];
        } else { fprintf(stderr, "mlxcel list: unknown option '%s'\n", a); return 2; }
    }
    mx_store_entry *e = NULL;
    int n = 0;
    if (mx_store_list(models_dir, &e, &n) != MX_OK) return cli_fail("list", NULL);
    if (n > 1) qsort(e, (size_t)n, sizeof *e, entry_cmp);
    if (json) {
        json_t *arr = json_array();
        for (int i = 0; i < n; i++) {
            char ts[32] = "";
            time_t t = (time_t)e[i].mtime;
            struct tm tm;
            if (gmtime_r(&t, &tm)) strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
            json_array_append_new(arr, json_pack("{ss ss sI si ss}", "id", e[i].repo, "path", e[i].path,
                                                 "size_bytes", (json_int_t)e[i].bytes, "files", e[i].files, "modified", ts));
        }
        char *s = json_dumps(arr, JSON_INDENT(2));
        if (s) printf("%s\n", s);
        free(s);
        json_decref(arr);
    } else if (n == 0) {
        char *root = NULL;
        if (!models_dir) mx_store_root(&root);
        fprintf(stderr, "no models in the store (%s); mlxcel download REPO adds one\n", models_dir ? models_dir : root ? root : "?");
        free(root);
    } else {
        printf("%-50s %10s %6s  %s\n", "MODEL", "SIZE", "FILES", "MODIFIED");
        for (int i = 0; i < n; i++) {
            char sz[32], ts[32] = "";
            human(e[i].bytes, sz, sizeof sz);
            time_t t = (time_t)e[i].mtime;
            struct tm tm;
            if (localtime_r(&t, &tm)) strftime(ts, sizeof ts, "%Y-%m-%d %H:%M", &tm);
            printf("%-50s %10s %6d  %s\n", e[i].repo, sz, e[i].files, ts);
        }
    }
    mx_store_list_free(e, n);
    return 0;
}

int cmd_rm(int argc, char **argv) {
    bool yes = false;
    const char *repo = NULL, *models_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: mlxcel rm REPO [-y] [--models-dir D]   (removes a model from the store, never the HF cache)\n");
            return 0;
        } else if (!strcmp(a, "-y") || !strcmp(a, "--yes")) yes = true;
        else if (!strcmp(a, "--models-dir")) {
            if (i + 1 >= argc) { fprintf(stderr, "mlxcel rm: --models-dir needs a value\n"); return 2; }
            models_dir = argv[++i];
        } else if (a[0] == '-') { fprintf(stderr, "mlxcel rm: unknown option '%s'\n", a); return 2; }
        else if (!repo) repo = a;
        else { fprintf(stderr, "mlxcel rm: unexpected argument '%s'\n", a); return 2; }
    }
    if (!repo) { fprintf(stderr, "mlxcel rm: no repository given (mlxcel list shows the store)\n"); return 2; }
    char full[512];
    if (!strchr(repo, '/') && repo[0] != '.') { snprintf(full, sizeof full, "mlx-community/%s", repo); repo = full; }
    char *path = NULL;
    if (mx_store_path(models_dir, repo, &path) != MX_OK) return cli_fail("rm", NULL);
    int files = 0;
    int64_t mt = 0;
    uint64_t bytes = mx_dir_bytes(path, &files, &mt);
    if (!yes) {
        if (!isatty(STDIN_FILENO)) {
            fprintf(stderr, "mlxcel rm: not a terminal; pass -y to remove %s\n", path);
            free(path);
            return 2;
        }
        fprintf(stderr, "remove %s (%d files, %.1f MB)? [y/N] ", path, files, (double)bytes / 1e6);
        char line[16] = "";
        if (!fgets(line, sizeof line, stdin) || (line[0] != 'y' && line[0] != 'Y')) {
            fprintf(stderr, "not removed\n");
            free(path);
            return 1;
        }
    }
    free(path);
    if (mx_store_remove(models_dir, repo) != MX_OK) return cli_fail("rm", NULL);
    fprintf(stderr, "removed %s (%.1f MB)\n", repo, (double)bytes / 1e6);
    return 0;
}
