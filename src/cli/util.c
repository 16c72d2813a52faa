/* cli/util.c: argument parsing helpers shared by the subcommands. */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bool cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) { fprintf(stderr, "mlxcel: %s needs a value\n", flag); return false; }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s) { fprintf(stderr, "mlxcel: %s: '%s' is not an integer\n", flag, s); return false; }
    if (v < lo || v > hi) { fprintf(stderr, "mlxcel: %s: %lld is out of range [%lld, %lld]\n", flag, v, lo, hi); return false; }
    *out = v;
    return true;
}

bool cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out) {
    if (!s || !*s) { fprintf(stderr, "mlxcel: %s needs a value\n", flag); return false; }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !isfinite(v)) { fprintf(stderr, "mlxcel: %s: '%s' is not a number\n", flag, s); return false; }
    if (v < lo || v > hi) { fprintf(stderr, "mlxcel: %s: %g is out of range [%g, %g]\n", flag, v, lo, hi); return false; }
    *out = v;
    return true;
}

bool cli_parse_ids(const char *flag, const char *s, int32_t **ids, int *n) {
    *ids = NULL; *n = 0;
    if (!s || !*s) { fprintf(stderr, "mlxcel: %s needs a comma-separated list of token ids\n", flag); return false; }
    size_t cap = 1;
    for (const char *p = s; *p; p++) if (*p == ',') cap++;
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) return false;
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "mlxcel: %s: bad token id list '%s'\n", flag, s);
            free(a); return false;
        }
        a[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    *ids = a; *n = k;
    return true;
}

int cli_fail(const char *cmd, const char *what) {
    const char *e = mx_last_error();
    if (e && *e) fprintf(stderr, "mlxcel %s: %s%s%s\n", cmd, what ? what : "", what && *what ? ": " : "", e);
    else fprintf(stderr, "mlxcel %s: %s\n", cmd, what ? what : "failed");
    return 1;
}
