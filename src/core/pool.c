/* pool.c: a fixed-size pthread pool for data-parallel loops (mx_pool_run). Workers spin briefly
 * then sleep on a condition variable, so per-token kernels pay little wake-up latency. It is not
 * a general task queue. */

#include "mlxcel/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct mx_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint_fast64_t gen;    /* job generation; workers start when it changes */
    atomic_int remaining;        /* workers still running the current job */
    atomic_int_fast64_t next;    /* next chunk start */
    int64_t n_items, chunk;
    mx_pool_fn fn;
    void *ctx;
    bool stop;
};

static void run_chunks(mx_pool *p, int tid) {
    for (;;) {
        int64_t b = atomic_fetch_add(&p->next, p->chunk);
        if (b >= p->n_items) break;
        int64_t e = b + p->chunk;
        if (e > p->n_items) e = p->n_items;
        p->fn(p->ctx, b, e, tid);
    }
}

typedef struct { mx_pool *p; int tid; } worker_arg;

static void *worker(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    mx_pool *p = wa.p;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = atomic_load(&p->gen)) == seen && spins < 20000) { spins++; __builtin_ia32_pause(); }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->gen)) == seen && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (p->stop) return NULL;
        seen = g;
        run_chunks(p, wa.tid);
        atomic_fetch_sub(&p->remaining, 1);
    }
}

mx_pool *mx_pool_create(int n_threads) {
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    mx_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!p->threads) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n = i; break; }
        wa->p = p; wa->tid = i;
        if (pthread_create(&p->threads[i], NULL, worker, wa) != 0) { free(wa); p->n = i; break; }
    }
    return p;
}

void mx_pool_free(mx_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

int mx_pool_size(const mx_pool *p) { return p ? p->n : 1; }

void mx_pool_run(mx_pool *p, int64_t n, int64_t grain, mx_pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n == 1 || n <= grain) { fn(ctx, 0, n, 0); return; }
    int64_t chunk = (n + (int64_t)p->n * 4 - 1) / ((int64_t)p->n * 4);
    if (chunk < grain) chunk = grain;
    p->n_items = n; p->chunk = chunk; p->fn = fn; p->ctx = ctx;
    atomic_store(&p->next, 0);
    atomic_store(&p->remaining, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, 0);
    while (atomic_load(&p->remaining) > 0) __builtin_ia32_pause();
}

static mx_pool *g_pool;
static int g_pool_threads;
static pthread_once_t g_pool_once = PTHREAD_ONCE_INIT;
static void pool_init(void) {
    int n = g_pool_threads;
    if (n <= 0) { const char *e = getenv("MLXCEL_THREADS"); if (e) n = atoi(e); }
    g_pool = mx_pool_create(n);
}
mx_pool *mx_pool_global(void) { pthread_once(&g_pool_once, pool_init); return g_pool; }
void mx_pool_global_set_threads(int n) { g_pool_threads = n; }
