/* engine/stop.c: incremental stop-string matching across token boundaries. Text that might be
 * the beginning of a stop string is held back until it is known not to be; a partial stop never
 * reaches the output. Not a tokenizer: it works on UTF-8 bytes. */
#include "mlxcel/engine.h"

#include <stdlib.h>
#include <string.h>

struct mx_stop {
    char **stops;
    size_t *lens;
    int n;
    mx_buf pending;     /* text not yet released */
    bool done;
};

mx_stop *mx_stop_new(const char *const *stops, int n) {
    mx_stop *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (n > 0) {
        s->stops = calloc((size_t)n, sizeof *s->stops);
        s->lens = calloc((size_t)n, sizeof *s->lens);
        if (!s->stops || !s->lens) goto fail;
    }
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) continue;   /* empty stop strings are ignored */
        s->stops[s->n] = mx_strdup(stops[i]);
        if (!s->stops[s->n]) goto fail;
        s->lens[s->n] = strlen(stops[i]);
        s->n++;
    }
    return s;
fail:
    mx_stop_free(s);
    return NULL;
}

void mx_stop_free(mx_stop *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    mx_buf_free(&s->pending);
    free(s);
}

/* UTF-8: do not split a multi-byte character when releasing text. */
static size_t utf8_safe_cut(const char *p, size_t n) {
    size_t i = n;
    /* walk back over continuation bytes of a possibly incomplete final character */
    size_t back = 0;
    while (back < 4 && i > 0 && ((unsigned char)p[i - 1] & 0xC0) == 0x80) { i--; back++; }
    if (i == 0) return n;
    unsigned char lead = (unsigned char)p[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > 1 && back + 1 < need) return i - 1;   /* incomplete: cut before the lead byte */
    return n;
}

bool mx_stop_feed(mx_stop *s, const char *text, size_t len, mx_buf *out) {
    if (s->done) return true;
    if (!mx_buf_append(&s->pending, text, len)) return false;
    const char *p = s->pending.data ? s->pending.data : "";
    size_t n = s->pending.len;
    /* earliest full match */
    size_t best = (size_t)-1;
    for (int i = 0; i < s->n; i++) {
        const char *m = memmem(p, n, s->stops[i], s->lens[i]);
        if (m && (size_t)(m - p) < best) best = (size_t)(m - p);
    }
    if (best != (size_t)-1) {
        mx_buf_append(out, p, best);
        s->pending.len = 0;
        s->done = true;
        return true;
    }
    /* hold back the longest suffix that is a proper prefix of some stop string */
    size_t hold = 0;
    for (int i = 0; i < s->n; i++) {
        size_t maxk = s->lens[i] - 1 < n ? s->lens[i] - 1 : n;
        for (size_t k = maxk; k > hold; k--)
            if (!memcmp(p + n - k, s->stops[i], k)) { hold = k; break; }
    }
    size_t release = utf8_safe_cut(p, n - hold);
    if (release > 0) {
        mx_buf_append(out, p, release);
        memmove(s->pending.data, p + release, n - release);
        s->pending.len = n - release;
        s->pending.data[s->pending.len] = 0;
    }
    return false;
}

void mx_stop_flush(mx_stop *s, mx_buf *out) {
    if (!s->done && s->pending.len) mx_buf_append(out, s->pending.data, s->pending.len);
    s->pending.len = 0;
}
