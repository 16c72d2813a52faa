/* mlxcel/store.h: the local model store, the model argument resolver, Hugging Face Hub downloads
 * and the checkpoint converter. It knows nothing of model families beyond tensor names.
 *
 * The store is ${MLXCEL_CACHE_DIR:-~/.cache/mlxcel}/models/<owner>/<name>. A model already in the
 * Hugging Face hub cache (HF_HUB_CACHE, or HF_HOME/hub, or ~/.cache/huggingface/hub) is used in
 * place. Strings returned through char ** are malloc'ed (caller frees). Every failing function
 * returns a status and sets mx_last_error() to a one-line message. Not thread-safe. */
#ifndef MLXCEL_STORE_H
#define MLXCEL_STORE_H

#include "mlxcel/core.h"
#include <stdio.h>

/* ---- repository ids and the store ---- */

/* Checks "owner/name" (or a bare "name", meaning mlx-community/name): letters, digits, '-', '_',
 * '.', no "..", no empty part, no leading '.' or '-', at most 96 characters per part. On success
 * *owner / *name are malloc'ed copies (either may be NULL when not wanted). */
mx_status mx_repo_parse(const char *id, char **owner, char **name);
/* The store's models root: ${MLXCEL_CACHE_DIR:-$HOME/.cache/mlxcel}/models. */
mx_status mx_store_root(char **out);
/* The store path of a repository id (it need not exist). `models_dir` overrides the root (NULL: default). */
mx_status mx_store_path(const char *models_dir, const char *repo_id, char **out);
/* The snapshot directory of `repo_id` in the Hugging Face hub cache, if it has one with a
 * config.json; MX_ERR_IO when absent. */
mx_status mx_hf_cache_path(const char *repo_id, char **out);

/* Resolves a -m argument to a checkpoint directory: an existing directory is used as is; otherwise
 * a repository id is looked up in the store, then in the HF cache, then downloaded into the store
 * when allow_download is set and HF_HUB_OFFLINE is not. */
mx_status mx_model_resolve(const char *arg, bool allow_download, char **dir_out);

typedef struct {
    char *repo;          /* "owner/name" */
    char *path;
    uint64_t bytes;      /* sum of file sizes */
    int64_t mtime;       /* latest modification time of any file, seconds since the epoch */
    int files;
} mx_store_entry;
/* Lists the models in the store (directories <owner>/<name> with a config.json or safetensors). */
mx_status mx_store_list(const char *models_dir, mx_store_entry **out, int *n);
void mx_store_list_free(mx_store_entry *e, int n);
/* Removes a model from the store (never the HF cache). MX_ERR_IO when it is not there. */
mx_status mx_store_remove(const char *models_dir, const char *repo_id);
/* Removes a directory tree (no symlinks followed). */
mx_status mx_rm_tree(const char *path);
/* Total bytes of regular files under a directory. */
uint64_t mx_dir_bytes(const char *path, int *files, int64_t *mtime);

/* ---- downloads ---- */

typedef struct {
    const char *repo_id;      /* "owner/name" */
    const char *revision;     /* NULL: "main" */
    const char **include;     /* glob patterns (fnmatch); NULL or 0 patterns: everything */
    int n_include;
    const char *token;        /* NULL: HF_TOKEN */
    const char *local_dir;    /* download here instead of the store */
    const char *models_dir;   /* store root override */
    bool force;               /* download again even when present */
    FILE *progress;           /* progress output (NULL: none); bars when it is a terminal */
} mx_download_opts;
/* Downloads a repository; on success *dir_out (optional) is the directory holding the files.
 * Files appear in the destination only once complete; an interrupted download resumes. */
mx_status mx_hub_download(const mx_download_opts *o, char **dir_out);

/* ---- conversion ---- */

typedef struct {
    const char *hf_path;      /* source checkpoint directory */
    const char *out_dir;      /* must not exist or be empty */
    bool quantize;
    int bits;                 /* 2..8 */
    int group_size;           /* 32, 64, 128 */
    int dtype;                /* -1: keep the source's float dtype; else an mx_dtype (F32/F16/BF16) */
    uint64_t shard_bytes;     /* 0: 5 GiB, as mlx-lm */
    FILE *progress;
} mx_convert_opts;
mx_status mx_convert(const mx_convert_opts *o);

/* MLX affine quantization of `rows` rows of `cols` floats (cols % group_size == 0) into packed
 * U32 words (cols * bits / 32 per row, values low bits first) and per-group scales and biases
 * (rows * cols / group_size floats, before rounding to the storage dtype). Matches mlx.core.quantize. */
mx_status mx_quantize_affine(const float *w, int64_t rows, int64_t cols, int bits, int group_size,
                             uint32_t *packed, float *scales, float *biases);

/* ---- memory needs (mlxcel inspect) ---- */

/* Estimates, before loading:
 *   weights_bytes     sum of the checkpoint's tensor bytes (quantized weights stay packed)
 *   kv_bytes_total    num_hidden_layers * num_key_value_heads * head_dim * 2 (K, V) * 4 bytes (the CPU
 *                     cache is f32) * ctx * batch
 *   activation_bytes  4 bytes * (chunk * (4*hidden + 3*intermediate + q_dim + 2*kv_dim)
 *                     + heads * chunk * min(ctx, 512) + batch * vocab), chunk = min(ctx, 512) * batch
 *   headroom_bytes    5% of the three above + 256 MiB (runtime, allocator slack)
 *   budget_bytes      memory available to the device: CPU MemAvailable (/proc/meminfo)
 * ctx <= 0 means min(max_position_embeddings, 4096); batch <= 0 means 1. */
typedef struct mx_mem_estimate {
    uint64_t weights_bytes, kv_bytes_per_token, kv_bytes_total, activation_bytes, headroom_bytes;
    uint64_t budget_bytes, total_bytes;
    bool fits;
    const char *device;   /* "cpu" or "gpu" */
    int64_t ctx, batch, layers, kv_heads, head_dim;
} mx_mem_estimate;
struct mx_checkpoint;
mx_status mx_mem_estimate_ckpt(struct mx_checkpoint *c, int64_t ctx, int64_t batch, mx_mem_estimate *m);
/* MemAvailable in bytes (0 when unknown). */
uint64_t mx_mem_available_cpu(void);
/* Re-target an estimate to another device: its name, memory budget, and KV element size (the
 * CUDA backend keeps K and V in bf16: 2 bytes); recomputes the totals and `fits`. */
void mx_mem_estimate_retarget(mx_mem_estimate *m, const char *device, uint64_t budget_bytes, int kv_elem_bytes);

#endif
