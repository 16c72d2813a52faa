/* mlxcel/core.h: status codes, error messages, logging, dtypes and small numeric helpers shared
 * by every layer. It is not a tensor library: layers above define their own structures.
 *
 * Thread safety: mx_set_error/mx_last_error use a thread-local buffer; logging is serialized. */
#ifndef MLXCEL_CORE_H
#define MLXCEL_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define MX_VERSION "0.1.0"

typedef enum {
    MX_OK = 0,
    MX_ERR_INVALID_ARG,   /* bad flag, value or request field */
    MX_ERR_IO,            /* file missing, unreadable, mmap failed */
    MX_ERR_FORMAT,        /* malformed file: safetensors, JSON, tokenizer, template */
    MX_ERR_UNSUPPORTED,   /* valid input we do not handle (model_type, bits, dtype) */
    MX_ERR_NOMEM,
    MX_ERR_RANGE,         /* out-of-range index, context overflow */
    MX_ERR_INTERNAL,
    MX_ERR_BUSY,          /* queue full, try later */
    MX_ERR_CANCELLED,
} mx_status;

const char *mx_status_str(mx_status s);

/* Record a one-line human message for the current thread's last error and return `s`.
 * Typical use: `return mx_errorf(MX_ERR_FORMAT, "%s: bad header length", path);` */
mx_status mx_errorf(mx_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The message recorded by the last mx_errorf on this thread ("" if none). */
const char *mx_last_error(void);
void mx_clear_error(void);

/* Logging to stderr. Level from MLXCEL_LOG (error, warn, info, debug); default warn. */
typedef enum { MX_LOG_ERROR = 0, MX_LOG_WARN, MX_LOG_INFO, MX_LOG_DEBUG } mx_log_level;
void mx_log_set_level(mx_log_level lvl);
mx_log_level mx_log_get_level(void);
void mx_log(mx_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define MX_LOGE(...) mx_log(MX_LOG_ERROR, __VA_ARGS__)
#define MX_LOGW(...) mx_log(MX_LOG_WARN, __VA_ARGS__)
#define MX_LOGI(...) mx_log(MX_LOG_INFO, __VA_ARGS__)
#define MX_LOGD(...) mx_log(MX_LOG_DEBUG, __VA_ARGS__)

/* Element types as stored in safetensors. */
typedef enum {
    MX_DTYPE_F32 = 0, MX_DTYPE_F16, MX_DTYPE_BF16, MX_DTYPE_F64,
    MX_DTYPE_I8, MX_DTYPE_U8, MX_DTYPE_I16, MX_DTYPE_U16,
    MX_DTYPE_I32, MX_DTYPE_U32, MX_DTYPE_I64, MX_DTYPE_U64, MX_DTYPE_BOOL,
    MX_DTYPE_COUNT
} mx_dtype;

size_t mx_dtype_size(mx_dtype t);
const char *mx_dtype_name(mx_dtype t);          /* "F32", "BF16", ... as in safetensors */
bool mx_dtype_from_name(const char *s, mx_dtype *out);

static inline float mx_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v; v.u = (uint32_t)h << 16; return v.f;
}
static inline uint16_t mx_f32_to_bf16(float f) {   /* round to nearest even, NaN kept */
    union { uint32_t u; float f; } v; v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
    uint32_t r = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + r) >> 16);
}
float mx_f16_to_f32(uint16_t h);
uint16_t mx_f32_to_f16(float f);

/* Monotonic clock in seconds. */
double mx_time_s(void);

/* Checked allocation helpers: return NULL on overflow/failure (never abort). */
void *mx_malloc(size_t n);
void *mx_calloc(size_t n, size_t sz);
void *mx_aligned_alloc(size_t align, size_t n); /* free with free() */
char *mx_strdup(const char *s);
char *mx_read_file(const char *path, size_t *len_out); /* NUL-terminated; NULL + mx_errorf on fail */

/* Growable byte buffer for building strings. */
typedef struct { char *data; size_t len, cap; } mx_buf;
bool mx_buf_append(mx_buf *b, const void *p, size_t n);
bool mx_buf_puts(mx_buf *b, const char *s);
bool mx_buf_printf(mx_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mx_buf_free(mx_buf *b);

/* Thread pool: a fixed set of workers running data-parallel loops. One pool per process is
 * typical (mx_pool_global). mx_pool_run is not reentrant: call it from one thread at a time. */
typedef struct mx_pool mx_pool;
typedef void (*mx_pool_fn)(void *ctx, int64_t begin, int64_t end, int thread_idx);
mx_pool *mx_pool_create(int n_threads);         /* n_threads <= 0: number of online CPUs */
void mx_pool_free(mx_pool *p);
int mx_pool_size(const mx_pool *p);
/* Split [0, n) into chunks of at least `grain` items and run fn over them on all threads. */
void mx_pool_run(mx_pool *p, int64_t n, int64_t grain, mx_pool_fn fn, void *ctx);
/* Process-wide pool, created on first use with MLXCEL_THREADS or all CPUs; set before first use. */
mx_pool *mx_pool_global(void);
void mx_pool_global_set_threads(int n);

#endif
