/* engine/kv.c: the KV block allocator: hands out block ids of the paged KV cache to sequences
 * and takes them back. It does not touch the cache memory itself (the backend owns that). */
#include "mlxcel/engine.h"

#include <stdlib.h>

struct mx_kv_alloc {
    int n_blocks, n_free;
    int32_t *free_ids;      /* stack of free block ids [n_blocks] */
};

mx_kv_alloc *mx_kv_alloc_new(int n_blocks) {
    if (n_blocks <= 0) return NULL;
    mx_kv_alloc *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->free_ids = malloc((size_t)n_blocks * sizeof *a->free_ids);
    if (!a->free_ids) { free(a); return NULL; }
    a->n_blocks = a->n_free = n_blocks;
    for (int i = 0; i < n_blocks; i++) a->free_ids[i] = n_blocks - 1 - i; /* pop gives 0 first */
    return a;
}

void mx_kv_alloc_free(mx_kv_alloc *a) {
    if (!a) return;
    free(a->free_ids);
    free(a);
}

int mx_kv_alloc_n_free(const mx_kv_alloc *a) { return a->n_free; }

bool mx_kv_alloc_reserve(mx_kv_alloc *a, int32_t *table, int *n_blocks, int max_blocks,
                         int block_size, int n_positions) {
    int need = (n_positions + block_size - 1) / block_size;
    if (need <= *n_blocks) return true;
    if (need > max_blocks || need - *n_blocks > a->n_free) return false;
    while (*n_blocks < need) table[(*n_blocks)++] = a->free_ids[--a->n_free];
    return true;
}

void mx_kv_alloc_release(mx_kv_alloc *a, int32_t *table, int *n_blocks) {
    for (int i = *n_blocks - 1; i >= 0; i--) a->free_ids[a->n_free++] = table[i];
    *n_blocks = 0;
}
