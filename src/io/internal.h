/* io/internal.h: helpers shared by the io/ files only (a string -> index hash table, path
 * helpers). Not a public header: other layers use include/mlxcel/io.h and store.h. */
#ifndef MLXCEL_IO_INTERNAL_H
#define MLXCEL_IO_INTERNAL_H
#include "mlxcel/core.h"

/* Open-addressing hash table from borrowed NUL-terminated keys to non-negative ints.
 * Keys must outlive the table. */
typedef struct {
    const char **keys;
    int *vals;
    size_t cap, n;
} mx_strmap;

bool mx_strmap_init(mx_strmap *m, size_t expected);
void mx_strmap_free(mx_strmap *m);
/* Insert; returns false on allocation failure. *existing is set to the old value (or -1) and the
 * old value is kept when the key was present. */
bool mx_strmap_put(mx_strmap *m, const char *key, int val, int *existing);
int mx_strmap_get(const mx_strmap *m, const char *key); /* -1 if absent */

/* The last path component (points into `path`). */
const char *mx_path_base(const char *path);
/* Joined "a/b" (malloc'ed) or NULL. */
char *mx_path_join(const char *a, const char *b);
bool mx_is_dir(const char *path);
bool mx_is_file(const char *path);
/* write(2) until done; MX_ERR_IO naming `path` ("disk full" for ENOSPC). */
mx_status mx_write_all(int fd, const void *p, size_t n, const char *path);
int mx_st_dtype_rank(mx_dtype d);

/* One file of a Hub listing (hub.c). */
typedef struct {
    char *name;       /* relative path, checked safe */
    int64_t size;     /* -1 when the listing has no size */
    char sha[65];     /* LFS sha256, "" when none */
} mx_hub_file;
/* Parses the body of /api/models/{repo}/revision/{rev}?blobs=true (untrusted). */
mx_status mx_hub_parse_listing(const char *body, size_t len, const char *repo, mx_hub_file **out, int *n);
void mx_hub_files_free(mx_hub_file *f, int n);

/* SHA-256, streaming (sha256.c). */
typedef struct { uint32_t h[8]; uint64_t len; unsigned char buf[64]; size_t fill; } mx_sha256;
void mx_sha256_init(mx_sha256 *s);
void mx_sha256_update(mx_sha256 *s, const void *data, size_t n);
void mx_sha256_hex(mx_sha256 *s, char out[65]); /* finishes; lowercase hex */

#endif
