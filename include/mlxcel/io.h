/* mlxcel/io.h: safetensors files (mmap'ed, bounds-checked), checkpoint directories (config.json,
 * single or sharded safetensors with model.safetensors.index.json), and MLX quantization settings.
 * It knows nothing of backends or model families.
 *
 * Ownership: tensors returned point into the mmap of their file and live until the file or
 * checkpoint is closed. Every function that fails returns a status and sets mx_last_error() to a
 * one-line message naming the file and the problem. Not thread-safe for open/close; lookups are. */
#ifndef MLXCEL_IO_H
#define MLXCEL_IO_H

#include "mlxcel/core.h"
#include <jansson.h>

#define MX_MAX_DIMS 8

typedef struct mx_st_tensor {
    const char *name;
    mx_dtype dtype;
    int ndim;
    int64_t shape[MX_MAX_DIMS];
    const void *data;       /* into the mmap */
    size_t nbytes;
} mx_st_tensor;

typedef struct mx_safetensors mx_safetensors;

/* Open and validate one file: header length within the file, header JSON valid, known dtypes,
 * shape * dtype size == byte length, offsets inside the data section and not overlapping. */
mx_status mx_st_open(const char *path, mx_safetensors **out);
void mx_st_close(mx_safetensors *f);
int mx_st_count(const mx_safetensors *f);
const mx_st_tensor *mx_st_tensor_at(const mx_safetensors *f, int i);
const mx_st_tensor *mx_st_find(const mx_safetensors *f, const char *name);
/* The "__metadata__" object of the header (may be NULL). */
json_t *mx_st_metadata(const mx_safetensors *f);

/* Writing (for `convert` and `logits`): collect tensors then write in one go. Data is copied. */
typedef struct mx_st_writer mx_st_writer;
mx_st_writer *mx_st_writer_new(void);
mx_status mx_st_writer_add(mx_st_writer *w, const char *name, mx_dtype dt, int ndim, const int64_t *shape,
                           const void *data, size_t nbytes);
mx_status mx_st_writer_set_meta(mx_st_writer *w, const char *key, const char *value);
mx_status mx_st_writer_save(mx_st_writer *w, const char *path); /* writes path.tmp then renames */
void mx_st_writer_free(mx_st_writer *w);

/* Streaming writers (convert writes tensors one at a time without holding them): the order the
 * Python library lays tensors out in (larger dtypes first, then by name; <0, 0, >0 like strcmp),
 * and the padded header for entries laid out back to back in the given order, data offsets from 0.
 * The header (malloc'ed, *len_out bytes, a multiple of 8) is what follows the 8-byte length. */
typedef struct mx_st_entry {
    const char *name;
    mx_dtype dtype;
    int ndim;
    int64_t shape[MX_MAX_DIMS];
    size_t nbytes;
} mx_st_entry;
int mx_st_order_cmp(mx_dtype da, const char *na, mx_dtype db, const char *nb);
mx_status mx_st_header_json(const mx_st_entry *e, int n, json_t *meta, char **out, size_t *len_out);

/* A checkpoint directory. */
typedef struct mx_checkpoint mx_checkpoint;
mx_status mx_ckpt_open(const char *dir, mx_checkpoint **out);
void mx_ckpt_close(mx_checkpoint *c);
const char *mx_ckpt_dir(const mx_checkpoint *c);
json_t *mx_ckpt_config(const mx_checkpoint *c);      /* parsed config.json (borrowed) */
const mx_st_tensor *mx_ckpt_find(const mx_checkpoint *c, const char *name);
int mx_ckpt_count(const mx_checkpoint *c);
const mx_st_tensor *mx_ckpt_tensor_at(const mx_checkpoint *c, int i);
/* Total bytes of all tensors. */
size_t mx_ckpt_total_bytes(const mx_checkpoint *c);

/* MLX quantization for a module path (e.g. "model.layers.0.self_attn.q_proj"): reads
 * config["quantization"] (falls back to "quantization_config") and its per-layer overrides
 * (a key equal to the module path whose value is {bits, group_size} or false).
 * Sets *bits = 0 when the module is not quantized. Validates bits in {2,3,4,5,6,8} and
 * group_size in {32,64,128}. */
mx_status mx_ckpt_quant_for(const mx_checkpoint *c, const char *module, int *bits, int *group_size);

/* JSON helpers for config.json: read a number/bool with a default; false if present but wrong type. */
bool mx_json_int(json_t *obj, const char *key, int64_t def, int64_t *out);
bool mx_json_num(json_t *obj, const char *key, double def, double *out);
bool mx_json_bool(json_t *obj, const char *key, bool def, bool *out);

#endif
