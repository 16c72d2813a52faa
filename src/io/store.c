/* io/store.c: the local model store (paths, listing, removal), repository id validation, the Hugging
 * Face hub cache lookup and the -m argument resolver. Not the network (hub.c) and not conversion
 * (convert.c). */
#include "mlxcel/store.h"
#include "io/internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MX_REPO_PART_MAX 96

static bool repo_part_ok(const char *s, size_t n) {
    if (n == 0 || n > MX_REPO_PART_MAX) return false;
    if (s[0] == '.' || s[0] == '-') return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
        if (!ok) return false;
        if (c == '.' && i + 1 < n && s[i + 1] == '.') return false;
    }
    return true;
}

mx_status mx_repo_parse(const char *id, char **owner, char **name) {
    if (owner) *owner = NULL;
    if (name) *name = NULL;
    if (!id || !*id) return mx_errorf(MX_ERR_INVALID_ARG, "empty repository id");
    if (id[0] == '/') return mx_errorf(MX_ERR_INVALID_ARG, "'%s' is an absolute path, not a repository id (owner/name)", id);
    if (strstr(id, "..")) return mx_errorf(MX_ERR_INVALID_ARG, "repository id '%s' contains '..'", id);
    const char *slash = strchr(id, '/');
    const char *o = "mlx-community", *n = id;
    size_t ol = strlen(o), nl = strlen(id);
    if (slash) {
        if (strchr(slash + 1, '/')) return mx_errorf(MX_ERR_INVALID_ARG, "repository id '%s' has more than one '/' (expected owner/name)", id);
        o = id; ol = (size_t)(slash - id);
        n = slash + 1; nl = strlen(n);
    }
    if (!repo_part_ok(o, ol) || !repo_part_ok(n, nl))
        return mx_errorf(MX_ERR_INVALID_ARG, "invalid repository id '%s' (expected owner/name with letters, digits, '-', '_', '.')", id);
    if (owner && !(*owner = strndup(o, ol))) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    if (name && !(*name = strndup(n, nl))) {
        if (owner) { free(*owner); *owner = NULL; }
        return mx_errorf(MX_ERR_NOMEM, "out of memory");
    }
    return MX_OK;
}

mx_status mx_store_root(char **out) {
    *out = NULL;
    const char *c = getenv("MLXCEL_CACHE_DIR");
    char *base = NULL;
    if (c && *c) base = mx_strdup(c);
    else {
        const char *h = getenv("HOME");
        if (!h || !*h) return mx_errorf(MX_ERR_INVALID_ARG, "neither MLXCEL_CACHE_DIR nor HOME is set: no place for the model store");
        base = mx_path_join(h, ".cache/mlxcel");
    }
    if (!base) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    *out = mx_path_join(base, "models");
    free(base);
    return *out ? MX_OK : mx_errorf(MX_ERR_NOMEM, "out of memory");
}

mx_status mx_store_path(const char *models_dir, const char *repo_id, char **out) {
    *out = NULL;
    char *owner = NULL, *name = NULL, *root = NULL;
    mx_status st = mx_repo_parse(repo_id, &owner, &name);
    if (st) return st;
    if (models_dir) root = mx_strdup(models_dir);
    else if ((st = mx_store_root(&root))) goto done;
    if (!root) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    size_t n = strlen(root) + strlen(owner) + strlen(name) + 3;
    *out = malloc(n);
    if (!*out) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    snprintf(*out, n, "%s/%s/%s", root, owner, name);
done:
    free(owner); free(name); free(root);
    return st;
}

static char *read_small(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\r')) buf[--n] = 0;
    return n ? mx_strdup(buf) : NULL;
}

mx_status mx_hf_cache_path(const char *repo_id, char **out) {
    *out = NULL;
    char *owner = NULL, *name = NULL, *hub = NULL, *repo = NULL, *snap = NULL;
    mx_status st = mx_repo_parse(repo_id, &owner, &name);
    if (st) return st;
    const char *e;
    if ((e = getenv("HF_HUB_CACHE")) && *e) hub = mx_strdup(e);
    else if ((e = getenv("HF_HOME")) && *e) hub = mx_path_join(e, "hub");
    else if ((e = getenv("HOME")) && *e) hub = mx_path_join(e, ".cache/huggingface/hub");
    if (!hub) { st = mx_errorf(MX_ERR_IO, "no Hugging Face cache directory"); goto done; }
    size_t n = strlen(hub) + strlen(owner) + strlen(name) + 32;
    repo = malloc(n);
    if (!repo) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    snprintf(repo, n, "%s/models--%s--%s", hub, owner, name);
    char *refp = mx_path_join(repo, "refs/main");
    char *ref = refp ? read_small(refp) : NULL;
    free(refp);
    if (ref && repo_part_ok(ref, strlen(ref))) {
        size_t m = strlen(repo) + strlen(ref) + 16;
        snap = malloc(m);
        if (snap) snprintf(snap, m, "%s/snapshots/%s", repo, ref);
    } else {
        /* no ref: the most recently modified snapshot */
        char *sd = mx_path_join(repo, "snapshots");
        DIR *d = sd ? opendir(sd) : NULL;
        time_t best = 0;
        if (d) {
            struct dirent *de;
            while ((de = readdir(d))) {
                if (de->d_name[0] == '.') continue;
                char *p = mx_path_join(sd, de->d_name);
                struct stat sb;
                if (p && stat(p, &sb) == 0 && S_ISDIR(sb.st_mode) && (!snap || sb.st_mtime > best)) {
                    free(snap); snap = p; p = NULL; best = sb.st_mtime;
                }
                free(p);
            }
            closedir(d);
        }
        free(sd);
    }
    free(ref);
    char *cfg = snap ? mx_path_join(snap, "config.json") : NULL;
    if (!cfg || !mx_is_file(cfg)) { free(cfg); st = mx_errorf(MX_ERR_IO, "%s is not in the Hugging Face cache", repo_id); goto done; }
    free(cfg);
    *out = snap; snap = NULL;
done:
    free(owner); free(name); free(hub); free(repo); free(snap);
    return st;
}

static bool looks_like_path(const char *a) {
    return a[0] == '/' || a[0] == '.' || a[0] == '~' || strstr(a, "//") != NULL;
}

mx_status mx_model_resolve(const char *arg, bool allow_download, char **dir_out) {
    *dir_out = NULL;
    if (!arg || !*arg) return mx_errorf(MX_ERR_INVALID_ARG, "no model given (-m DIR or owner/name)");
    if (mx_is_dir(arg)) {
        *dir_out = mx_strdup(arg);
        return *dir_out ? MX_OK : mx_errorf(MX_ERR_NOMEM, "out of memory");
    }
    if (looks_like_path(arg) || mx_is_file(arg))
        return mx_errorf(MX_ERR_IO, "%s: no such model directory", arg);
    char *p = NULL;
    mx_status st = mx_repo_parse(arg, NULL, NULL);
    if (st) return mx_errorf(st, "%s: not a directory, and not a repository id: %s", arg, mx_last_error());
    if ((st = mx_store_path(NULL, arg, &p))) return st;
    if (mx_is_dir(p)) { *dir_out = p; return MX_OK; }
    free(p); p = NULL;
    if (mx_hf_cache_path(arg, &p) == MX_OK) { *dir_out = p; return MX_OK; }
    const char *off = getenv("HF_HUB_OFFLINE");
    bool offline = off && *off && strcmp(off, "0") && strcasecmp(off, "false");
    if (!allow_download || offline)
        return mx_errorf(MX_ERR_IO, "model '%s' is not in the store or the Hugging Face cache%s (mlxcel download %s)", arg,
                         offline ? " and HF_HUB_OFFLINE is set" : "", arg);
    char full[256];
    if (!strchr(arg, '/')) snprintf(full, sizeof full, "mlx-community/%s", arg);
    else snprintf(full, sizeof full, "%s", arg);
    mx_download_opts o = {.repo_id = full, .progress = stderr};
    return mx_hub_download(&o, dir_out);
}

/* ---- listing and removal ---- */

uint64_t mx_dir_bytes(const char *path, int *files, int64_t *mtime) {
    uint64_t total = 0;
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char *p = mx_path_join(path, de->d_name);
        if (!p) continue;
        struct stat sb;
        if (lstat(p, &sb) == 0) {
            if (S_ISDIR(sb.st_mode)) total += mx_dir_bytes(p, files, mtime);
            else if (S_ISREG(sb.st_mode)) {
                total += (uint64_t)sb.st_size;
                if (files) (*files)++;
                if (mtime && sb.st_mtime > *mtime) *mtime = sb.st_mtime;
            }
        }
        free(p);
    }
    closedir(d);
    return total;
}

mx_status mx_store_list(const char *models_dir, mx_store_entry **out, int *n) {
    *out = NULL; *n = 0;
    char *root = NULL;
    mx_status st = MX_OK;
    if (models_dir) root = mx_strdup(models_dir);
    else if ((st = mx_store_root(&root))) return st;
    if (!root) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    DIR *d = opendir(root);
    if (!d) { free(root); return MX_OK; } /* no store yet: empty */
    mx_store_entry *e = NULL;
    int cnt = 0, cap = 0;
    struct dirent *oe;
    while ((oe = readdir(d))) {
        if (oe->d_name[0] == '.') continue;
        char *op = mx_path_join(root, oe->d_name);
        DIR *d2 = op && mx_is_dir(op) ? opendir(op) : NULL;
        struct dirent *ne;
        while (d2 && (ne = readdir(d2))) {
            if (ne->d_name[0] == '.') continue;
            char *np = mx_path_join(op, ne->d_name);
            if (!np || !mx_is_dir(np)) { free(np); continue; }
            if (cnt == cap) {
                cap = cap ? cap * 2 : 16;
                mx_store_entry *ne2 = realloc(e, (size_t)cap * sizeof *e);
                if (!ne2) { free(np); st = mx_errorf(MX_ERR_NOMEM, "out of memory"); break; }
                e = ne2;
            }
            mx_store_entry *x = &e[cnt];
            memset(x, 0, sizeof *x);
            size_t rl = strlen(oe->d_name) + strlen(ne->d_name) + 2;
            x->repo = malloc(rl);
            if (!x->repo) { free(np); st = mx_errorf(MX_ERR_NOMEM, "out of memory"); break; }
            snprintf(x->repo, rl, "%s/%s", oe->d_name, ne->d_name);
            x->path = np;
            x->bytes = mx_dir_bytes(np, &x->files, &x->mtime);
            cnt++;
        }
        if (d2) closedir(d2);
        free(op);
        if (st) break;
    }
    closedir(d);
    free(root);
    if (st) { mx_store_list_free(e, cnt); return st; }
    *out = e; *n = cnt;
    return MX_OK;
}

void mx_store_list_free(mx_store_entry *e, int n) {
    for (int i = 0; i < n; i++) { free(e[i].repo); free(e[i].path); }
    free(e);
}

mx_status mx_rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return mx_errorf(MX_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return mx_errorf(MX_ERR_IO, "%s: %s", path, strerror(errno));
        struct dirent *de;
        mx_status st = MX_OK;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char *p = mx_path_join(path, de->d_name);
            if (!p) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); break; }
            st = mx_rm_tree(p);
            free(p);
            if (st) break;
        }
        closedir(d);
        if (st) return st;
        if (rmdir(path) != 0) return mx_errorf(MX_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
        return MX_OK;
    }
    if (unlink(path) != 0) return mx_errorf(MX_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return MX_OK;
}

mx_status mx_store_remove(const char *models_dir, const char *repo_id) {
    char *p = NULL, *root = NULL;
    mx_status st = mx_store_path(models_dir, repo_id, &p);
    if (st) return st;
    if (models_dir) root = mx_strdup(models_dir);
    else if ((st = mx_store_root(&root))) { free(p); return st; }
    /* the resolved path must stay inside the store root */
    char *rp = realpath(p, NULL), *rr = root ? realpath(root, NULL) : NULL;
    if (!rp || !mx_is_dir(p)) { st = mx_errorf(MX_ERR_IO, "%s is not in the store (%s)", repo_id, p); goto done; }
    size_t rl = rr ? strlen(rr) : 0;
    if (!rr || strncmp(rp, rr, rl) != 0 || rp[rl] != '/') {
        st = mx_errorf(MX_ERR_INVALID_ARG, "%s: resolves outside the store root (%s)", repo_id, rp);
        goto done;
    }
    st = mx_rm_tree(p);
    if (!st) {
        /* drop the owner directory when it became empty */
        char *slash = strrchr(p, '/');
        if (slash) { *slash = 0; rmdir(p); }
    }
done:
    free(rp); free(rr); free(p); free(root);
    return st;
}
