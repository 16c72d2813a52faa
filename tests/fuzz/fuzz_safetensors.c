/* fuzz_safetensors.c: libFuzzer target for the safetensors reader: the input is written to a file
 * and opened; every accepted file's tensors are read end to end (ASan catches any byte outside
 * the mapping). Build with `make fuzz`; run build-fuzz/fuzz/fuzz_safetensors [corpus]. */
#include "mlxcel/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[64];
static void cleanup(void) { if (path[0]) unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/mlxcel-fuzz-st-%d.safetensors", (int)getpid());
        atexit(cleanup);
    }
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    mx_safetensors *st = NULL;
    if (mx_st_open(path, &st) == MX_OK) {
        volatile uint8_t acc = 0;
        for (int i = 0; i < mx_st_count(st); i++) {
            const mx_st_tensor *t = mx_st_tensor_at(st, i);
            const uint8_t *p = t->data;
            for (size_t k = 0; k < t->nbytes; k++) acc ^= p[k];
            if (mx_st_find(st, t->name) != t) abort();
        }
        (void)acc;
        mx_st_close(st);
    }
    return 0;
}
