/* backend/select.c: picks the backend for a process: the CUDA backend when this build has it and
 * a usable GPU is present, the CPU backend otherwise; MLXCEL_DEVICE=cpu|gpu forces the choice.
 * It is not a backend itself and holds no state. */
#include "mlxcel/backend_cuda.h"

#include <stdlib.h>
#include <string.h>

bool mx_backend_is_gpu(const mx_backend *b) {
    return b && b->i && b->i->name && !strcmp(b->i->name, "cuda");
}

mx_status mx_backend_auto_init(mx_backend *out) {
    out->i = NULL; out->ctx = NULL;
    const char *d = getenv("MLXCEL_DEVICE");
    bool want_cpu = false, want_gpu = false;
    if (d && *d && strcmp(d, "auto")) {
        if (!strcmp(d, "cpu")) want_cpu = true;
        else if (!strcmp(d, "gpu") || !strcmp(d, "cuda")) want_gpu = true;
        else return mx_errorf(MX_ERR_INVALID_ARG, "MLXCEL_DEVICE=%s: expected cpu, gpu or auto", d);
    }
    if (!want_cpu) {
#ifdef MLXCEL_HAVE_CUDA
        /* a mistyped switch is an error, not a silent fall back to the CPU without a GPU */
        mx_status st = mx_backend_cuda_check_env();
        if (st != MX_OK) return st;
        st = mx_backend_cuda_init(out);
        if (st == MX_OK) return MX_OK;
        if (want_gpu) return st;    /* the message says why (no GPU, architecture mismatch) */
        /* A GPU is there but this binary cannot use it (e.g. its compiled architectures do not
         * cover it): refuse rather than silently run on the CPU; MLXCEL_DEVICE=cpu overrides. */
        uint64_t f, t;
        if (mx_backend_cuda_meminfo(&f, &t))
            return mx_errorf(st, "%s (set MLXCEL_DEVICE=cpu to run on the CPU)", mx_last_error());
        MX_LOGI("no usable GPU (%s); using the CPU", mx_last_error());
        mx_clear_error();
#else
        if (want_gpu)
            return mx_errorf(MX_ERR_UNSUPPORTED, "MLXCEL_DEVICE=gpu: this build has no CUDA backend "
                             "(build with -DMLXCEL_CUDA=ON, e.g. make cuda)");
#endif
    }
    mx_status st = mx_backend_cpu_init(out);
    if (st == MX_OK) MX_LOGI("device: cpu");
    return st;
}

void mx_backend_auto_free(mx_backend *b) {
    if (!b || !b->i) return;
#ifdef MLXCEL_HAVE_CUDA
    if (mx_backend_is_gpu(b)) { mx_backend_cuda_free(b); return; }
#endif
    mx_backend_cpu_free(b);
}

bool mx_backend_gpu_memory(uint64_t *free_bytes, uint64_t *total_bytes) {
    const char *d = getenv("MLXCEL_DEVICE");
    if (d && !strcmp(d, "cpu")) return false;
#ifdef MLXCEL_HAVE_CUDA
    return mx_backend_cuda_meminfo(free_bytes, total_bytes);
#else
    (void)free_bytes; (void)total_bytes;
    return false;
#endif
}
