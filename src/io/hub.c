/* io/hub.c: Hugging Face Hub downloads over libcurl: the file list from
 * {endpoint}/api/models/{repo}/revision/{rev}?blobs=true, files from {endpoint}/{repo}/resolve/{rev}/{file}
 * (redirects followed), interrupted files resumed with Range + If-Range (ETag), sizes checked against
 * the listing and the response, HF_TOKEN / HF_ENDPOINT / HF_HUB_OFFLINE, progress bars on a terminal
 * and plain lines otherwise. Files are staged in <models>/.partial/<owner>--<name>/ and appear in
 * the destination only when complete. Not the store layout (store.c). */
#include "mlxcel/store.h"
#include "io/internal.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

typedef mx_hub_file hub_file;

typedef struct {
    /* per request */
    FILE *out;              /* NULL: body goes to mem */
    mx_buf mem;
    long status;            /* status of the latest response */
    char etag[256];
    int64_t content_length; /* of the latest response, -1 unknown */
    int64_t range_total;    /* from Content-Range, -1 unknown */
    int write_errno;
    mx_sha256 *sha;         /* hashes what is written, when set */
    /* progress */
    FILE *prog;
    bool tty;
    const char *fname;
    int64_t base;           /* bytes already present when the request started */
    int64_t expect;         /* expected file size, -1 unknown */
    uint64_t all_done, all_total;
    int last_pct;
    double last_t;
} hub_req;

static bool env_true(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") && strcasecmp(v, "false") && strcasecmp(v, "no");
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
    hub_req *r = ud;
    size_t len = sz * n;
    if (len >= 5 && !strncmp(p, "HTTP/", 5)) {
        /* a new response (a redirect hop or the final one) */
        const char *sp = memchr(p, ' ', len);
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        r->etag[0] = 0; r->content_length = -1; r->range_total = -1;
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon) return len;
    size_t kl = (size_t)(colon - p);
    const char *v = colon + 1;
    size_t vl = len - kl - 1;
    while (vl && (*v == ' ' || *v == '\t')) { v++; vl--; }
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' ')) vl--;
    if ((kl == 4 && !strncasecmp(p, "etag", 4)) || (kl == 13 && !strncasecmp(p, "x-linked-etag", 13))) {
        if (vl < sizeof r->etag && (kl == 13 || !r->etag[0])) { memcpy(r->etag, v, vl); r->etag[vl] = 0; }
    } else if (kl == 14 && !strncasecmp(p, "content-length", 14)) {
        r->content_length = strtoll(v, NULL, 10);
    } else if (kl == 13 && !strncasecmp(p, "content-range", 13)) {
        const char *sl = memchr(v, '/', vl);
        if (sl && sl[1] != '*') r->range_total = strtoll(sl + 1, NULL, 10);
    }
    return len;
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
    hub_req *r = ud;
    size_t len = sz * n;
    bool ok = r->status == 200 || r->status == 206;
    if (!r->out || !ok) {
        /* listings and error bodies are small: a server sending more than 64 MB is cut off */
        if (r->mem.len + len > (64u << 20)) return r->out ? len : 0;
        if (!mx_buf_append(&r->mem, p, len)) return 0;
        return len;
    }
    if (r->status == 200 && r->base > 0) {
        /* a resume answered with the whole file (no range support, or it changed): start over */
        if (fflush(r->out) != 0 || ftruncate(fileno(r->out), 0) != 0) { r->write_errno = errno ? errno : EIO; return 0; }
        r->base = 0;
        if (r->sha) mx_sha256_init(r->sha);
    }
    if (fwrite(p, 1, len, r->out) != len) { r->write_errno = errno ? errno : EIO; return 0; }
    if (r->sha) mx_sha256_update(r->sha, p, len);
    return len;
}

static void print_progress(hub_req *r, int64_t now, bool final) {
    if (!r->prog) return;
    int64_t total = r->expect;
    int pct = total > 0 ? (int)(now * 100 / total) : (final ? 100 : 0);
    if (pct > 100) pct = 100;
    uint64_t all = r->all_done + (uint64_t)now;
    int apct = r->all_total ? (int)(all * 100 / r->all_total) : 100;
    if (apct > 100) apct = 100;
    if (r->tty) {
        double t = mx_time_s();
        if (!final && t - r->last_t < 0.1) return;
        r->last_t = t;
        int w = 24, fill = pct * w / 100;
        fprintf(r->prog, "\r%-32.32s [", r->fname);
        for (int i = 0; i < w; i++) fputc(i < fill ? '#' : '.', r->prog);
        fprintf(r->prog, "] %3d%% %8.1f MB | all %3d%%", pct, (double)now / 1e6, apct);
        if (final) fputc('\n', r->prog);
        fflush(r->prog);
    } else if (final) {
        fprintf(r->prog, "download: %s done (%lld bytes), overall %d%%\n", r->fname, (long long)now, apct);
        fflush(r->prog);
    } else if (r->expect > (1 << 20) && pct < 100 && pct >= r->last_pct + 25) {
        r->last_pct = pct - pct % 25;
        fprintf(r->prog, "download: %s %d%% (%lld bytes), overall %d%%\n", r->fname, pct, (long long)now, apct);
        fflush(r->prog);
    }
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal; (void)ultotal; (void)ulnow;
    hub_req *r = ud;
    if (r->out && (r->status == 200 || r->status == 206)) print_progress(r, r->base + (int64_t)dlnow, false);
    return 0;
}

static CURL *hub_curl(hub_req *r, const char *url, struct curl_slist *hdrs) {
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "mlxcel/" MX_VERSION);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    return c;
}

static mx_status http_status_error(long status, const char *what, const char *repo) {
    if (status == 401 || status == 403)
        return mx_errorf(MX_ERR_IO, "%s: authentication failed (HTTP %ld): the repository is private or gated, or the token is wrong (--token or HF_TOKEN)", what, status);
    if (status == 404) return mx_errorf(MX_ERR_IO, "%s: not found (HTTP 404): no repository or revision '%s'", what, repo);
    return mx_errorf(MX_ERR_IO, "%s: HTTP %ld", what, status);
}

/* Percent-encodes everything but unreserved characters and '/'. */
static char *url_escape_path(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(n * 3 + 1), *p = o;
    if (!o) return NULL;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') *p++ = (char)c;
        else { sprintf(p, "%%%02X", c); p += 3; }
    }
    *p = 0;
    return o;
}

/* A listed file name must be a relative path of safe components. */
static bool safe_rel_path(const char *s) {
    size_t n = strlen(s);
    if (!n || s[0] == '/' || s[n - 1] == '/' || strchr(s, '\\')) return false;
    const char *p = s;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == 0 || (l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.')) return false;
        for (size_t i = 0; i < l; i++) if ((unsigned char)p[i] < 0x20) return false;
        p += l;
        if (*p == '/') p++;
    }
    return true;
}

static mx_status mkdirs_for(const char *path) {
    char *p = mx_strdup(path);
    if (!p) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            mx_status st = mx_errorf(MX_ERR_IO, "%s: cannot create directory: %s", p, strerror(errno));
            free(p);
            return st;
        }
        *s = '/';
    }
    free(p);
    return MX_OK;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

void mx_hub_files_free(mx_hub_file *f, int n) {
    for (int i = 0; f && i < n; i++) free(f[i].name);
    free(f);
}

mx_status mx_hub_parse_listing(const char *body, size_t len, const char *repo, mx_hub_file **out, int *n) {
    *out = NULL; *n = 0;
    json_error_t je;
    mx_status st = MX_OK;
    json_t *j = json_loadb(body, len, 0, &je);
    json_t *sib = j ? json_object_get(j, "siblings") : NULL;
    if (!json_is_array(sib)) { json_decref(j); return mx_errorf(MX_ERR_FORMAT, "%s: the Hub's file listing is not valid (no \"siblings\" array)", repo); }
    mx_hub_file *f = calloc(json_array_size(sib) + 1, sizeof *f);
    if (!f) { json_decref(j); return mx_errorf(MX_ERR_NOMEM, "out of memory"); }
    size_t i;
    json_t *s;
    int k = 0;
    json_array_foreach(sib, i, s) {
        const char *name = json_string_value(json_object_get(s, "rfilename"));
        if (!name) continue;
        if (!safe_rel_path(name)) { st = mx_errorf(MX_ERR_FORMAT, "%s: the listing names an unsafe path '%s'", repo, name); break; }
        json_t *sz = json_object_get(s, "size");
        json_t *lfs = json_object_get(s, "lfs");
        if (!json_is_integer(sz) && json_is_object(lfs)) sz = json_object_get(lfs, "size");
        if (!(f[k].name = mx_strdup(name))) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); break; }
        f[k].size = json_is_integer(sz) && json_integer_value(sz) >= 0 ? (int64_t)json_integer_value(sz) : -1;
        const char *sha = json_string_value(json_object_get(lfs, "sha256"));
        if (sha && strlen(sha) == 64 && strspn(sha, "0123456789abcdef") == 64) memcpy(f[k].sha, sha, 65);
        k++;
    }
    json_decref(j);
    if (st) { mx_hub_files_free(f, k); return st; }
    *out = f; *n = k;
    return MX_OK;
}

static mx_status list_files(const char *endpoint, const char *repo, const char *rev, struct curl_slist *hdrs,
                            hub_file **out, int *n) {
    *out = NULL; *n = 0;
    char *erev = url_escape_path(rev);
    if (!erev) return mx_errorf(MX_ERR_NOMEM, "out of memory");
    size_t ul = strlen(endpoint) + strlen(repo) + strlen(erev) + 64;
    char *url = malloc(ul);
    if (!url) { free(erev); return mx_errorf(MX_ERR_NOMEM, "out of memory"); }
    snprintf(url, ul, "%s/api/models/%s/revision/%s?blobs=true", endpoint, repo, erev);
    free(erev);
    hub_req r = {.content_length = -1, .range_total = -1};
    CURL *c = hub_curl(&r, url, hdrs);
    mx_status st = MX_OK;
    if (!c) { st = mx_errorf(MX_ERR_NOMEM, "curl init failed"); goto done; }
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
    CURLcode cc = curl_easy_perform(c);
    if (cc != CURLE_OK) { st = mx_errorf(MX_ERR_IO, "%s: cannot list files: %s", repo, curl_easy_strerror(cc)); goto done; }
    if (r.status != 200) { st = http_status_error(r.status, repo, repo); goto done; }
    st = mx_hub_parse_listing(r.mem.data ? r.mem.data : "", r.mem.len, repo, out, n);
done:
    mx_buf_free(&r.mem);
    if (c) curl_easy_cleanup(c);
    free(url);
    return st;
}

static int64_t file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode) ? (int64_t)sb.st_size : -1;
}

static char *read_text(const char *p) {
    size_t n;
    mx_clear_error();
    char *s = mx_read_file(p, &n);
    return s;
}

static mx_status write_text(const char *p, const char *s) {
    FILE *f = fopen(p, "w");
    if (!f) return mx_errorf(MX_ERR_IO, "%s: %s", p, strerror(errno));
    fputs(s, f);
    return fclose(f) == 0 ? MX_OK : mx_errorf(MX_ERR_IO, "%s: write failed", p);
}

/* Feeds the first `n` bytes of a file to the hash; false when they cannot be read. */
static bool hash_prefix(const char *path, int64_t n, mx_sha256 *sha) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char buf[1 << 16];
    while (n > 0) {
        size_t want = n > (int64_t)sizeof buf ? sizeof buf : (size_t)n;
        size_t got = fread(buf, 1, want, f);
        if (got != want) { fclose(f); return false; }
        mx_sha256_update(sha, buf, got);
        n -= (int64_t)got;
    }
    fclose(f);
    return true;
}

/* Downloads one file into stage/<name> through stage/<name>.incomplete. */
static mx_status fetch_file(const char *endpoint, const char *repo, const char *rev, struct curl_slist *base_hdrs,
                            const char *stage, const hub_file *hf, hub_req *tmpl) {
    mx_status st = MX_OK;
    char *final = mx_path_join(stage, hf->name);
    size_t fl = final ? strlen(final) : 0;
    char *part = malloc(fl + 16), *etagp = malloc(fl + 16), *ename = url_escape_path(hf->name), *erev = url_escape_path(rev), *url = NULL;
    struct curl_slist *hdrs = NULL;
    CURL *c = NULL;
    FILE *out = NULL;
    hub_req r = *tmpl;
    r.mem = (mx_buf){0};
    if (!final || !part || !etagp || !ename || !erev) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    snprintf(part, fl + 16, "%s.incomplete", final);
    snprintf(etagp, fl + 16, "%s.etag", final);
    if ((st = mkdirs_for(final))) goto done;
    int64_t have = file_size(final);
    if (have >= 0 && (hf->size < 0 || have == hf->size)) {   /* complete from an earlier run */
        r.fname = hf->name; r.expect = have; r.base = 0;
        print_progress(&r, have, true);
        goto done;
    }
    if (have >= 0) unlink(final);
    size_t ul = strlen(endpoint) + strlen(repo) + strlen(erev) + strlen(ename) + 32;
    if (!(url = malloc(ul))) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    snprintf(url, ul, "%s/%s/resolve/%s/%s", endpoint, repo, erev, ename);

    int64_t off = file_size(part);
    char *old_etag = NULL;
    if (off > 0) {
        old_etag = read_text(etagp);
        if (!old_etag || (hf->size >= 0 && off >= hf->size)) { off = 0; }
    }
    if (off < 0) off = 0;
    for (struct curl_slist *h = base_hdrs; h; h = h->next) hdrs = curl_slist_append(hdrs, h->data);
    if (off > 0) {
        char h[512];
        snprintf(h, sizeof h, "Range: bytes=%lld-", (long long)off);
        hdrs = curl_slist_append(hdrs, h);
        snprintf(h, sizeof h, "If-Range: %s", old_etag);
        hdrs = curl_slist_append(hdrs, h);
    }
    free(old_etag);
    mx_sha256 sha;
    mx_sha256_init(&sha);
    if (hf->sha[0] && off > 0 && !hash_prefix(part, off, &sha)) off = 0;
    out = fopen(part, off > 0 ? "ab" : "wb");
    if (!out) { st = mx_errorf(MX_ERR_IO, "%s: cannot create: %s", part, strerror(errno)); goto done; }
    r.out = out; r.fname = hf->name; r.base = off; r.expect = hf->size; r.last_pct = 0; r.last_t = 0;
    r.status = 0; r.etag[0] = 0; r.content_length = -1; r.range_total = -1; r.write_errno = 0;
    r.sha = hf->sha[0] ? &sha : NULL;
    c = hub_curl(&r, url, hdrs);
    if (!c) { st = mx_errorf(MX_ERR_NOMEM, "curl init failed"); goto done; }
    CURLcode cc = curl_easy_perform(c);
    off = r.base;   /* 0 when a resume was answered with the whole file */
    if (r.etag[0]) write_text(etagp, r.etag);
    if (fflush(out) != 0 && !r.write_errno) r.write_errno = errno ? errno : EIO;
    if (fclose(out) != 0 && !r.write_errno) r.write_errno = errno ? errno : EIO;
    out = NULL;
    if (r.write_errno) {
        st = mx_errorf(MX_ERR_IO, "%s: cannot write %s: %s", hf->name, part,
                       r.write_errno == ENOSPC ? "disk full" : strerror(r.write_errno));
        goto done;
    }
    if (r.status != 200 && r.status != 206) {
        unlink(part);
        st = http_status_error(r.status, hf->name, repo);
        if (r.status == 416) st = mx_errorf(MX_ERR_IO, "%s: the server rejected the resume range (HTTP 416); partial file removed, run again", hf->name);
        goto done;
    }
    if (cc != CURLE_OK) {
        st = mx_errorf(MX_ERR_IO, "%s: download interrupted after %lld bytes: %s (run the command again to resume)", hf->name,
                       (long long)file_size(part), curl_easy_strerror(cc));
        goto done;
    }
    int64_t got = file_size(part);
    int64_t want = hf->size;
    int64_t resp_total = r.range_total >= 0 ? r.range_total : (r.content_length >= 0 ? off + r.content_length : -1);
    if (resp_total >= 0 && got != resp_total) {
        st = mx_errorf(MX_ERR_IO, "%s: size mismatch: have %lld bytes, the server announced %lld (run again to resume)", hf->name, (long long)got, (long long)resp_total);
        goto done;
    }
    if (want >= 0 && got != want) {
        unlink(part); unlink(etagp);
        st = mx_errorf(MX_ERR_FORMAT, "%s: size mismatch: downloaded %lld bytes, the Hub lists %lld (corrupt file, removed)", hf->name, (long long)got, (long long)want);
        goto done;
    }
    if (hf->sha[0]) {
        char hex[65];
        mx_sha256_hex(&sha, hex);
        if (strcmp(hex, hf->sha) != 0) {
            unlink(part); unlink(etagp);
            st = mx_errorf(MX_ERR_FORMAT, "%s: checksum mismatch: sha256 %s, the Hub lists %s (corrupt file, removed)", hf->name, hex, hf->sha);
            goto done;
        }
    }
    print_progress(&r, got, true);
    if (rename(part, final) != 0) { st = mx_errorf(MX_ERR_IO, "%s: rename failed: %s", final, strerror(errno)); goto done; }
    unlink(etagp);
done:
    if (out) fclose(out);
    if (c) curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    mx_buf_free(&r.mem);
    free(final); free(part); free(etagp); free(ename); free(erev); free(url);
    return st;
}

/* Moves every regular file under `from` (recursively) into `to`, creating directories. */
static mx_status move_tree(const char *from, const char *to) {
    DIR *d = opendir(from);
    if (!d) return mx_errorf(MX_ERR_IO, "%s: %s", from, strerror(errno));
    mx_status st = MX_OK;
    struct dirent *de;
    if (mkdir(to, 0755) != 0 && errno != EEXIST) { closedir(d); return mx_errorf(MX_ERR_IO, "%s: cannot create: %s", to, strerror(errno)); }
    while ((de = readdir(d)) && !st) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char *a = mx_path_join(from, de->d_name), *b = mx_path_join(to, de->d_name);
        if (!a || !b) st = mx_errorf(MX_ERR_NOMEM, "out of memory");
        else if (mx_is_dir(a)) st = move_tree(a, b);
        else if (rename(a, b) != 0) st = mx_errorf(MX_ERR_IO, "%s: cannot move into place: %s", b, strerror(errno));
        free(a); free(b);
    }
    closedir(d);
    return st;
}

mx_status mx_hub_download(const mx_download_opts *o, char **dir_out) {
    if (dir_out) *dir_out = NULL;
    if (!o || !o->repo_id) return mx_errorf(MX_ERR_INVALID_ARG, "download: no repository");
    char *owner = NULL, *name = NULL, *root = NULL, *dest = NULL, *stage = NULL, *endpoint = NULL, *repo = NULL;
    hub_file *files = NULL;
    int nfiles = 0;
    struct curl_slist *hdrs = NULL;
    char *file_token = NULL, *lock_path = NULL;
    int lock_fd = -1;
    mx_status st = mx_repo_parse(o->repo_id, &owner, &name);
    if (st) return st;
    size_t rl = strlen(owner) + strlen(name) + 2;
    repo = malloc(rl);
    if (!repo) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    snprintf(repo, rl, "%s/%s", owner, name);
    const char *rev = o->revision && *o->revision ? o->revision : "main";
    if (strstr(rev, "..") || rev[0] == '/') { st = mx_errorf(MX_ERR_INVALID_ARG, "download: invalid revision '%s'", rev); goto done; }

    if (o->models_dir) root = mx_strdup(o->models_dir);
    else if ((st = mx_store_root(&root))) goto done;
    if (!root) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    if (o->local_dir) dest = mx_strdup(o->local_dir);
    else if ((st = mx_store_path(root, repo, &dest))) goto done;
    size_t sl = strlen(root) + rl + 32;
    stage = malloc(sl);
    if (!dest || !stage) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    snprintf(stage, sl, "%s/.partial/%s--%s", root, owner, name);

    char *cfg = mx_path_join(dest, "config.json");
    bool present = cfg && mx_is_file(cfg);
    free(cfg);
    if (present && !o->force) {
        if (o->progress) fprintf(o->progress, "download: %s is already in %s (--force downloads again)\n", repo, dest);
        if (dir_out) { *dir_out = dest; dest = NULL; }
        goto done;
    }
    if (env_true("HF_HUB_OFFLINE")) {
        st = mx_errorf(MX_ERR_IO, "download: %s is not available locally and HF_HUB_OFFLINE is set", repo);
        goto done;
    }
    const char *ep = getenv("HF_ENDPOINT");
    endpoint = mx_strdup(ep && *ep ? ep : "https://huggingface.co");
    if (!endpoint) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
    size_t el = strlen(endpoint);
    while (el && endpoint[el - 1] == '/') endpoint[--el] = 0;
    const char *tok = o->token && *o->token ? o->token : getenv("HF_TOKEN");
    if (!tok || !*tok) tok = getenv("HUGGING_FACE_HUB_TOKEN");
    if (!tok || !*tok) {
        /* the token file `huggingface-cli login` writes: HF_TOKEN_PATH, else HF_HOME/token */
        const char *tp = getenv("HF_TOKEN_PATH"), *hh = getenv("HF_HOME"), *home = getenv("HOME");
        char *path = tp && *tp ? mx_strdup(tp) : hh && *hh ? mx_path_join(hh, "token") : home && *home ? mx_path_join(home, ".cache/huggingface/token") : NULL;
        if (path && mx_is_file(path)) {
            size_t n;
            file_token = mx_read_file(path, &n);
            if (file_token) {
                while (n && (file_token[n - 1] == '\n' || file_token[n - 1] == '\r' || file_token[n - 1] == ' ')) file_token[--n] = 0;
                tok = file_token;
            }
        }
        free(path);
    }
    if (tok && *tok) {
        if (strpbrk(tok, "\r\n")) { st = mx_errorf(MX_ERR_INVALID_ARG, "download: the token contains a line break"); goto done; }
        size_t hl = strlen(tok) + 32;
        char *h = malloc(hl);
        if (!h) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
        snprintf(h, hl, "Authorization: Bearer %s", tok);
        hdrs = curl_slist_append(hdrs, h);
        free(h);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if ((st = list_files(endpoint, repo, rev, hdrs, &files, &nfiles))) goto done;

    /* choose the files */
    bool have_st = false;
    for (int i = 0; i < nfiles; i++) if (ends_with(files[i].name, ".safetensors")) have_st = true;
    int nsel = 0;
    uint64_t total = 0;
    for (int i = 0; i < nfiles; i++) {
        const char *f = files[i].name;
        bool keep = true;
        if (o->n_include > 0) {
            keep = false;
            for (int k = 0; k < o->n_include; k++) if (fnmatch(o->include[k], f, 0) == 0) keep = true;
        } else if (have_st && (ends_with(f, ".gguf") || ends_with(f, ".bin") || ends_with(f, ".pth") || ends_with(f, ".pt") ||
                               ends_with(f, ".h5") || ends_with(f, ".msgpack") || ends_with(f, ".ckpt") || ends_with(f, ".onnx"))) keep = false;
        if (f[0] == '.') keep = false;  /* .gitattributes and the like */
        if (!keep) { free(files[i].name); files[i].name = NULL; continue; }
        nsel++;
        if (files[i].size > 0) total += (uint64_t)files[i].size;
    }
    if (!nsel) { st = mx_errorf(MX_ERR_IO, "download: %s has no files to download%s", repo, o->n_include ? " matching --include" : ""); goto done; }
    if ((st = mkdirs_for(stage)) || (mkdir(stage, 0755) != 0 && errno != EEXIST)) {
        if (!st) st = mx_errorf(MX_ERR_IO, "%s: cannot create: %s", stage, strerror(errno));
        goto done;
    }
    {
        /* one download per repository at a time: a lock next to the staging directory */
        size_t ll = strlen(stage) + 8;
        char *lp = malloc(ll);
        if (!lp) { st = mx_errorf(MX_ERR_NOMEM, "out of memory"); goto done; }
        snprintf(lp, ll, "%s.lock", stage);
        lock_fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        lock_path = lp;
        if (lock_fd < 0) { st = mx_errorf(MX_ERR_IO, "%s.lock: %s", stage, strerror(errno)); goto done; }
        if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
            st = mx_errorf(MX_ERR_BUSY, "download: another download of %s is in progress", repo);
            goto done;
        }
    }
    if (o->progress) fprintf(o->progress, "download: %s (%d files, %.1f MB) from %s\n", repo, nsel, (double)total / 1e6, endpoint);
    hub_req tmpl = {.prog = o->progress, .tty = o->progress && isatty(fileno(o->progress)), .all_total = total, .expect = -1};
    for (int i = 0; i < nfiles; i++) {
        if (!files[i].name) continue;
        if ((st = fetch_file(endpoint, repo, rev, hdrs, stage, &files[i], &tmpl))) goto done;
        if (files[i].size > 0) tmpl.all_done += (uint64_t)files[i].size;
    }
    /* complete: move into place */
    if (o->local_dir) {
        if ((st = mkdirs_for(dest)) || (st = move_tree(stage, dest))) goto done;
        mx_rm_tree(stage);
    } else {
        if (mx_is_dir(dest) && (st = mx_rm_tree(dest))) goto done;
        if ((st = mkdirs_for(dest))) goto done;
        if (rename(stage, dest) != 0) { st = mx_errorf(MX_ERR_IO, "%s: cannot move into place: %s", dest, strerror(errno)); goto done; }
    }
    if (o->progress) fprintf(o->progress, "download: %s complete in %s\n", repo, dest);
    if (dir_out) { *dir_out = dest; dest = NULL; }
done:
    mx_hub_files_free(files, nfiles);
    curl_slist_free_all(hdrs);
    if (lock_fd >= 0) {
        if (!st && lock_path) unlink(lock_path);
        close(lock_fd);
    }
    free(lock_path);
    free(file_token);
    free(owner); free(name); free(root); free(dest); free(stage); free(endpoint); free(repo);
    return st;
}
