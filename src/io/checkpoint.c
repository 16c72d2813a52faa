/* io/checkpoint.c: a checkpoint directory: config.json, one model.safetensors or shards named by
 * model.safetensors.index.json (or model-*.safetensors without an index), tensor lookup by name
 * across shards through one hash table, MLX quantization settings per module, and the JSON helpers
 * for config values. Not model families (models/) and not downloads or the store (store.c). */
#include "mlxcel/io.h"
#include "io/internal.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mx_checkpoint {
    char *dir;
    json_t *config;
    mx_safetensors **files;
    int nfiles;
    const mx_st_tensor **t;   /* all tensors, file by file */
    int n;
    mx_strmap index;
};

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A shard name from an index must be a plain file name inside the directory. */
static bool safe_file_name(const char *s) {
    if (!*s || !strcmp(s, ".") || !strcmp(s, "..")) return false;
    for (const char *p = s; *p; p++) if (*p == '/' || *p == '\\') return false;
    return true;
}

static mx_status add_file(mx_checkpoint *c, const char *name) {
    char *p = mx_path_join(c->dir, name);
    if (!p) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    if (!mx_is_file(p)) {
        mx_status st = mx_errorf(MX_ERR_IO, "%s: missing shard '%s'", c->dir, name);
        free(p);
        return st;
    }
    mx_safetensors **nf = realloc(c->files, (size_t)(c->nfiles + 1) * sizeof *nf);
    if (!nf) { free(p); return mx_errorf(MX_ERR_NOMEM, "out of memory"); }
    c->files = nf;
    mx_status st = mx_st_open(p, &c->files[c->nfiles]);
    free(p);
    if (st) return st;
    c->nfiles++;
    return MX_OK;
}

static mx_status open_index(mx_checkpoint *c, const char *ipath) {
    json_error_t jerr;
    mx_status st = MX_OK;
    char **names = NULL;
    size_t nn = 0;
    json_t *idx = json_load_file(ipath, JSON_REJECT_DUPLICATES, &jerr);
    if (!idx) return mx_errorf(MX_ERR_FORMAT, "%s: invalid JSON (%s, line %d)", ipath, jerr.text, jerr.line);
    json_t *wm = json_object_get(idx, "weight_map");
    if (!json_is_object(wm)) { st = mx_errorf(MX_ERR_FORMAT, "%s: no \"weight_map\" object", ipath); goto done; }
    names = calloc(json_object_size(wm) + 1, sizeof *names);
    if (!names) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        if (!json_is_string(v)) { st = mx_errorf(MX_ERR_FORMAT, "%s: weight_map entry '%s' is not a file name", ipath, k); goto done; }
        const char *s = json_string_value(v);
        if (!safe_file_name(s)) { st = mx_errorf(MX_ERR_FORMAT, "%s: weight_map entry '%s' names an unsafe path '%s'", ipath, k, s); goto done; }
        names[nn++] = (char *)s;
    }
    if (!nn) { st = mx_errorf(MX_ERR_FORMAT, "%s: weight_map is empty", ipath); goto done; }
    qsort(names, nn, sizeof *names, cmp_str);
    size_t nu = 0;   /* unique shard names, in the order of c->files */
    for (size_t i = 0; i < nn; i++) {
        if (i && !strcmp(names[i], names[nu - 1])) continue;
        names[nu++] = names[i];
        if ((st = add_file(c, names[i]))) goto done;
    }
    /* every tensor the index names must be in the shard it names */
    json_object_foreach(wm, k, v) {
        const char *s = json_string_value(v);
        char **hit = bsearch(&s, names, nu, sizeof *names, cmp_str);
        if (!hit || !mx_st_find(c->files[hit - names], k)) {
            st = mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' is listed in shard '%s' but not found there", ipath, k, s);
            goto done;
        }
    }
done:
    free(names);
    json_decref(idx);
    return st;
}

static mx_status open_glob(mx_checkpoint *c) {
    DIR *d = opendir(c->dir);
    if (!d) return mx_errorf(MX_ERR_IO, "%s: cannot read directory: %s", c->dir, strerror(errno));
    char **names = NULL;
    size_t nn = 0, cap = 0;
    mx_status st = MX_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        size_t l = strlen(n);
        if (l < 12 || strcmp(n + l - 12, ".safetensors")) continue;
        if (strncmp(n, "model", 5) && strncmp(n, "weights", 7) && strncmp(n, "consolidated", 12)) continue;
        if (nn == cap) {
            cap = cap ? cap * 2 : 8;
            char **nw = realloc(names, cap * sizeof *nw);
            if (!nw) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
            names = nw;
        }
        if (!(names[nn] = mx_strdup(n))) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
        nn++;
    }
    if (!nn) { st = mx_errorf(MX_ERR_IO, "%s: no safetensors files (model.safetensors or model-*.safetensors)", c->dir); goto done; }
    qsort(names, nn, sizeof *names, cmp_str);
    for (size_t i = 0; i < nn; i++)
        if ((st = add_file(c, names[i]))) goto done;
done:
    for (size_t i = 0; i < nn; i++) free(names[i]);
    free(names);
    closedir(d);
    return st;
}

mx_status mx_ckpt_open(const char *dir, mx_checkpoint **out) {
    *out = NULL;
    mx_status st = MX_OK;
    char *p = NULL;
    if (!dir || !*dir) return mx_errorf(MX_ERR_INVALID_ARG, "checkpoint: empty directory name");
    if (!mx_is_dir(dir)) {
        if (mx_is_file(dir)) return mx_errorf(MX_ERR_IO, "%s: not a directory (a checkpoint is a directory with config.json)", dir);
        return mx_errorf(MX_ERR_IO, "%s: no such directory", dir);
    }
    mx_checkpoint *c = calloc(1, sizeof *c);
    if (!c || !(c->dir = mx_strdup(dir))) { free(c); return mx_errorf(MX_ERR_NOMEM, "out of memory"); }
    size_t dl = strlen(c->dir);
    while (dl > 1 && c->dir[dl - 1] == '/') c->dir[--dl] = 0;

    if (!(p = mx_path_join(c->dir, "config.json"))) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
    if (!mx_is_file(p)) { st = mx_errorf(MX_ERR_IO, "%s: missing config.json", c->dir); goto fail; }
    json_error_t jerr;
    c->config = json_load_file(p, 0, &jerr);
    if (!c->config) { st = mx_errorf(MX_ERR_FORMAT, "%s: invalid JSON (%s, line %d)", p, jerr.text, jerr.line); goto fail; }
    if (!json_is_object(c->config)) { st = mx_errorf(MX_ERR_FORMAT, "%s: not a JSON object", p); goto fail; }
    free(p);

    if (!(p = mx_path_join(c->dir, "model.safetensors.index.json"))) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
    if (mx_is_file(p)) st = open_index(c, p);
    else {
        free(p);
        if (!(p = mx_path_join(c->dir, "model.safetensors"))) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
        if (mx_is_file(p)) st = add_file(c, "model.safetensors");
        else st = open_glob(c);
    }
    if (st) goto fail;
    free(p); p = NULL;

    int total = 0;
    for (int f = 0; f < c->nfiles; f++) total += mx_st_count(c->files[f]);
    c->t = calloc(total ? (size_t)total : 1, sizeof *c->t);
    if (!c->t || !mx_strmap_init(&c->index, (size_t)total)) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
    for (int f = 0; f < c->nfiles; f++) {
        for (int i = 0; i < mx_st_count(c->files[f]); i++) {
            const mx_st_tensor *t = mx_st_tensor_at(c->files[f], i);
            int ex;
            if (!mx_strmap_put(&c->index, t->name, c->n, &ex)) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto fail; }
            if (ex >= 0) { st = mx_errorf(MX_ERR_FORMAT, "%s: tensor '%s' appears in more than one shard", c->dir, t->name); goto fail; }
            c->t[c->n++] = t;
        }
    }
    *out = c;
    return MX_OK;
fail:
    free(p);
    mx_ckpt_close(c);
    return st;
}

void mx_ckpt_close(mx_checkpoint *c) {
    if (!c) return;
    mx_strmap_free(&c->index);
    free(c->t);
    for (int f = 0; f < c->nfiles; f++) mx_st_close(c->files[f]);
    free(c->files);
    json_decref(c->config);
    free(c->dir);
    free(c);
}

const char *mx_ckpt_dir(const mx_checkpoint *c) { return c ? c->dir : NULL; }
json_t *mx_ckpt_config(const mx_checkpoint *c) { return c ? c->config : NULL; }
const mx_st_tensor *mx_ckpt_find(const mx_checkpoint *c, const char *name) {
    if (!c) return NULL;
    int i = mx_strmap_get(&c->index, name);
    return i >= 0 ? c->t[i] : NULL;
}
int mx_ckpt_count(const mx_checkpoint *c) { return c ? c->n : 0; }
const mx_st_tensor *mx_ckpt_tensor_at(const mx_checkpoint *c, int i) {
    return c && i >= 0 && i < c->n ? c->t[i] : NULL;
}
size_t mx_ckpt_total_bytes(const mx_checkpoint *c) {
    size_t s = 0;
    for (int i = 0; c && i < c->n; i++) s += c->t[i]->nbytes;
    return s;
}

/* ---- quantization ---- */

static mx_status check_quant(const char *dir, const char *module, int bits, int gs) {
    if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8)
        return mx_errorf(MX_ERR_UNSUPPORTED, "%s/config.json: %s: %d-bit quantization is not supported (2, 3, 4, 5, 6 or 8)", dir, module, bits);
    if (gs != 32 && gs != 64 && gs != 128)
        return mx_errorf(MX_ERR_UNSUPPORTED, "%s/config.json: %s: group size %d is not supported (32, 64 or 128)", dir, module, gs);
    return MX_OK;
}

static mx_status read_bits_gs(const char *dir, const char *where, json_t *o, int64_t dbits, int64_t dgs, int64_t *bits, int64_t *gs) {
    if (!mx_json_int(o, "bits", dbits, bits) || !mx_json_int(o, "group_size", dgs, gs))
        return mx_errorf(MX_ERR_FORMAT, "%s/config.json: %s: bits and group_size must be integers", dir, where);
    json_t *mode = json_object_get(o, "mode");
    if (mode && !json_is_null(mode) && !(json_is_string(mode) && !strcmp(json_string_value(mode), "affine")))
        return mx_errorf(MX_ERR_UNSUPPORTED, "%s/config.json: %s: quantization mode %s is not supported (affine only)", dir, where,
                         json_is_string(mode) ? json_string_value(mode) : "(not a string)");
    return MX_OK;
}

mx_status mx_ckpt_quant_for(const mx_checkpoint *c, const char *module, int *bits, int *group_size) {
    *bits = 0; *group_size = 0;
    if (!c || !module) return mx_errorf(MX_ERR_INVALID_ARG, "quant_for: null argument");
    json_t *q = json_object_get(c->config, "quantization");
    if (!q) q = json_object_get(c->config, "quantization_config");
    if (!q || json_is_null(q)) return MX_OK;
    if (!json_is_object(q)) return mx_errorf(MX_ERR_FORMAT, "%s/config.json: \"quantization\" is not an object", c->dir);
    json_t *qm = json_object_get(q, "quant_method");
    if (qm && !(json_is_string(qm) && !strcmp(json_string_value(qm), "mlx")))
        return mx_errorf(MX_ERR_UNSUPPORTED, "%s/config.json: quantization method %s is not supported (MLX affine only)", c->dir,
                         json_is_string(qm) ? json_string_value(qm) : "(not a string)");
    int64_t gbits, ggs;
    mx_status st = read_bits_gs(c->dir, "quantization", q, 0, 64, &gbits, &ggs);
    if (st) return st;
    json_t *ov = json_object_get(q, module);
    int64_t b = gbits, g = ggs;
    if (ov) {
        if (json_is_false(ov)) return MX_OK;
        if (json_is_true(ov)) { /* quantized with the defaults */ }
        else if (json_is_object(ov)) {
            if ((st = read_bits_gs(c->dir, module, ov, gbits, ggs, &b, &g))) return st;
        } else return mx_errorf(MX_ERR_FORMAT, "%s/config.json: quantization override for '%s' is not an object or false", c->dir, module);
    } else {
        /* like mlx-lm: a module without an override is quantized when its scales were saved */
        size_t ml = strlen(module);
        char *sn = malloc(ml + 8);
        if (!sn) return mx_errorf(MX_ERR_NOMEM, "out of memory");
        memcpy(sn, module, ml); memcpy(sn + ml, ".scales", 8);
        bool has = mx_ckpt_find(c, sn) != NULL;
        free(sn);
        if (!has) return MX_OK;
    }
    if (b < 0 || b > 64 || g < 0 || g > 1 << 20) return check_quant(c->dir, module, -1, -1);
    if ((st = check_quant(c->dir, module, (int)b, (int)g))) return st;
    *bits = (int)b; *group_size = (int)g;
    return MX_OK;
}

/* ---- JSON helpers ---- */

bool mx_json_int(json_t *obj, const char *key, int64_t def, int64_t *out) {
    *out = def;
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return true;
    if (json_is_integer(v)) { *out = (int64_t)json_integer_value(v); return true; }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 9.0e15) { *out = (int64_t)d; return true; }
    }
    return false;
}

bool mx_json_num(json_t *obj, const char *key, double def, double *out) {
    *out = def;
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return true;
    if (json_is_number(v)) { *out = json_number_value(v); return true; }
    return false;
}

bool mx_json_bool(json_t *obj, const char *key, bool def, bool *out) {
    *out = def;
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return true;
    if (json_is_boolean(v)) { *out = json_is_true(v); return true; }
    return false;
}
