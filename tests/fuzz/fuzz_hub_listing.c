/* fuzz_hub_listing.c: libFuzzer target for the Hugging Face Hub file listing parser (the JSON body
 * of /api/models/{repo}/revision/{rev}, untrusted network input): every accepted name must be a
 * safe relative path. Build with `make fuzz`. */
#include "io/internal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mx_hub_file *f = NULL;
    int n = 0;
    if (mx_hub_parse_listing((const char *)data, size, "fuzz/repo", &f, &n) == MX_OK) {
        for (int i = 0; i < n; i++) {
            const char *s = f[i].name;
            if (!s || !*s || s[0] == '/' || strchr(s, '\\')) abort();
            /* no component may be empty, "." or ".." */
            for (const char *p = s;;) {
                const char *e = strchr(p, '/');
                size_t l = e ? (size_t)(e - p) : strlen(p);
                if (l == 0 || (l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.')) abort();
                if (!e) break;
                p = e + 1;
            }
        }
        mx_hub_files_free(f, n);
    }
    return 0;
}
