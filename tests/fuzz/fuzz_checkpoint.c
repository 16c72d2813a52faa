/* fuzz_checkpoint.c: libFuzzer target for checkpoint directories: the input, split at the first
 * NUL byte, becomes config.json and model.safetensors.index.json next to two small valid shards;
 * the directory is opened, every tensor looked up and quantization settings read. Build with
 * `make fuzz`. */
#include "mlxcel/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void put(const char *name, const void *p, size_t n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

static void rm(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static void cleanup(void) {
    rm("config.json"); rm("model.safetensors.index.json");
    rm("model-00001-of-00002.safetensors"); rm("model-00002-of-00002.safetensors");
    rmdir(dir);
}

static void shard(const char *file, const char *a, const char *b) {
    mx_st_writer *w = mx_st_writer_new();
    int64_t shape[2] = {2, 32};
    static float v[64];
    mx_st_writer_add(w, a, MX_DTYPE_F32, 2, shape, v, sizeof v);
    mx_st_writer_add(w, b, MX_DTYPE_F32, 2, shape, v, sizeof v);
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    mx_st_writer_save(w, path);
    mx_st_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/mlxcel-fuzz-ckpt-%d", (int)getpid());
        if (mkdir(dir, 0700) != 0) return 0;
        atexit(cleanup);
        shard("model-00001-of-00002.safetensors", "a.weight", "a.scales");
        shard("model-00002-of-00002.safetensors", "b.weight", "b.scales");
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t n1 = nul ? (size_t)(nul - data) : size;
    put("config.json", data, n1);
    if (nul) put("model.safetensors.index.json", nul + 1, size - n1 - 1);
    else rm("model.safetensors.index.json");
    mx_checkpoint *c = NULL;
    if (mx_ckpt_open(dir, &c) == MX_OK) {
        for (int i = 0; i < mx_ckpt_count(c); i++) {
            const mx_st_tensor *t = mx_ckpt_tensor_at(c, i);
            if (mx_ckpt_find(c, t->name) != t) abort();
        }
        int bits, gs;
        const char *mods[] = {"a", "b", "c", "model.layers.0.mlp.gate"};
        for (int i = 0; i < 4; i++)
            if (mx_ckpt_quant_for(c, mods[i], &bits, &gs) == MX_OK && bits &&
                ((bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8) || (gs != 32 && gs != 64 && gs != 128)))
                abort();
        int64_t v; double d; bool b;
        mx_json_int(mx_ckpt_config(c), "hidden_size", 0, &v);
        mx_json_num(mx_ckpt_config(c), "rms_norm_eps", 0, &d);
        mx_json_bool(mx_ckpt_config(c), "tie_word_embeddings", false, &b);
        mx_ckpt_close(c);
    }
    return 0;
}
