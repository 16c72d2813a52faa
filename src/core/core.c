/* core.c: status strings, thread-local error messages, logging, dtypes, half floats, clocks,
 * checked allocation and the growable buffer. Not the thread pool (pool.c). */

#include "mlxcel/core.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *mx_status_str(mx_status s) {
    switch (s) {
    case MX_OK: return "ok";
    case MX_ERR_INVALID_ARG: return "invalid argument";
    case MX_ERR_IO: return "i/o error";
    case MX_ERR_FORMAT: return "bad format";
    case MX_ERR_UNSUPPORTED: return "unsupported";
    case MX_ERR_NOMEM: return "out of memory";
    case MX_ERR_RANGE: return "out of range";
    case MX_ERR_INTERNAL: return "internal error";
    case MX_ERR_BUSY: return "busy";
    case MX_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

static _Thread_local char g_err[1024];

mx_status mx_errorf(mx_status s, const char *fmt, ...) {
    char tmp[sizeof g_err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(g_err, tmp, sizeof g_err);
    return s;
}
const char *mx_last_error(void) { return g_err; }
void mx_clear_error(void) { g_err[0] = 0; }

static int g_log_level = -1;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;

mx_log_level mx_log_get_level(void) {
    if (g_log_level < 0) {
        const char *e = getenv("MLXCEL_LOG");
        int l = MX_LOG_WARN;
        if (e) {
            if (!strcmp(e, "error")) l = MX_LOG_ERROR;
            else if (!strcmp(e, "info")) l = MX_LOG_INFO;
            else if (!strcmp(e, "debug")) l = MX_LOG_DEBUG;
        }
        g_log_level = l;
    }
    return (mx_log_level)g_log_level;
}
void mx_log_set_level(mx_log_level lvl) { g_log_level = (int)lvl; }

void mx_log(mx_log_level lvl, const char *fmt, ...) {
    if ((int)lvl > (int)mx_log_get_level()) return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_log_mu);
    fprintf(stderr, "mlxcel %s: ", names[lvl]);
    vfprintf(stderr, fmt, ap);
    size_t n = strlen(fmt);
    if (n == 0 || fmt[n - 1] != '\n') fputc('\n', stderr);
    pthread_mutex_unlock(&g_log_mu);
    va_end(ap);
}

static const struct { const char *name; size_t size; } g_dtypes[MX_DTYPE_COUNT] = {
    [MX_DTYPE_F32] = {"F32", 4},  [MX_DTYPE_F16] = {"F16", 2},   [MX_DTYPE_BF16] = {"BF16", 2},
    [MX_DTYPE_F64] = {"F64", 8},  [MX_DTYPE_I8] = {"I8", 1},     [MX_DTYPE_U8] = {"U8", 1},
    [MX_DTYPE_I16] = {"I16", 2},  [MX_DTYPE_U16] = {"U16", 2},   [MX_DTYPE_I32] = {"I32", 4},
    [MX_DTYPE_U32] = {"U32", 4},  [MX_DTYPE_I64] = {"I64", 8},   [MX_DTYPE_U64] = {"U64", 8},
    [MX_DTYPE_BOOL] = {"BOOL", 1},
};
size_t mx_dtype_size(mx_dtype t) { return (unsigned)t < MX_DTYPE_COUNT ? g_dtypes[t].size : 0; }
const char *mx_dtype_name(mx_dtype t) { return (unsigned)t < MX_DTYPE_COUNT ? g_dtypes[t].name : "?"; }
bool mx_dtype_from_name(const char *s, mx_dtype *out) {
    for (int i = 0; i < MX_DTYPE_COUNT; i++)
        if (!strcmp(s, g_dtypes[i].name)) { *out = (mx_dtype)i; return true; }
    return false;
}

float mx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else { /* subnormal */
            float f = ldexpf((float)man, -24);
            return sign ? -f : f;
        }
    } else if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else u = sign | ((exp + 112) << 23) | (man << 13);
    union { uint32_t u; float f; } v; v.u = u; return v.f;
}
uint16_t mx_f32_to_f16(float f) {
    union { uint32_t u; float f; } v; v.f = f;
    uint32_t sign = (v.u >> 16) & 0x8000, a = v.u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (a < 0x38800000u) { /* subnormal or zero */
        float af; union { uint32_t u; float f; } w; w.u = a; af = w.f;
        uint32_t m = (uint32_t)lrintf(af * 16777216.0f); /* 2^24, round-half-even */
        return (uint16_t)(sign | m);
    }
    uint32_t r = a + 0x0fffu + ((a >> 13) & 1u); /* round to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

double mx_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void *mx_malloc(size_t n) { return malloc(n ? n : 1); }
void *mx_calloc(size_t n, size_t sz) {
    if (sz && n > SIZE_MAX / sz) return NULL;
    return calloc(n ? n : 1, sz ? sz : 1);
}
void *mx_aligned_alloc(size_t align, size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, align, n ? n : align) != 0) return NULL;
    return p;
}
char *mx_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

char *mx_read_file(const char *path, size_t *len_out) {
    FILE *f = fopen(path, "rb");
    if (!f) { mx_errorf(MX_ERR_IO, "%s: %s", path, strerror(errno)); return NULL; }
    mx_buf b = {0};
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (!mx_buf_append(&b, tmp, n)) { fclose(f); mx_buf_free(&b); mx_errorf(MX_ERR_NOMEM, "%s: out of memory", path); return NULL; }
    if (ferror(f)) { fclose(f); mx_buf_free(&b); mx_errorf(MX_ERR_IO, "%s: read error", path); return NULL; }
    fclose(f);
    if (!b.data && !mx_buf_append(&b, "", 0)) { mx_errorf(MX_ERR_NOMEM, "out of memory"); return NULL; }
    if (len_out) *len_out = b.len;
    return b.data;
}

bool mx_buf_append(mx_buf *b, const void *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) return false;
            cap *= 2;
        }
        char *d = realloc(b->data, cap);
        if (!d) return false;
        b->data = d; b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}
bool mx_buf_puts(mx_buf *b, const char *s) { return mx_buf_append(b, s, strlen(s)); }
bool mx_buf_printf(mx_buf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) { va_end(ap2); return false; }
    if (!mx_buf_append(b, NULL, 0)) { va_end(ap2); return false; }
    /* reserve */
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) { va_end(ap2); return false; }
        b->data = d; b->cap = cap;
    }
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
    return true;
}
void mx_buf_free(mx_buf *b) { free(b->data); b->data = NULL; b->len = b->cap = 0; }
