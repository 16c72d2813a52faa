/* tests/test.h: a tiny test harness. Each case prints "PASS name" or "FAIL name: why" on stdout,
 * which tests/run.sh counts. Use TCHECK inside a case; RUN(case) runs it. */
#ifndef MLXCEL_TEST_H
#define MLXCEL_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_case_failed;
static int t_total_failed;
static char t_why[512];

#define TCHECK(cond, ...) do { if (!(cond)) { if (!t_case_failed) { \
    int _n = snprintf(t_why, sizeof t_why, "%s:%d: ", __FILE__, __LINE__); \
    snprintf(t_why + _n, sizeof t_why - (size_t)_n, __VA_ARGS__); } t_case_failed = 1; } } while (0)
/* TREQUIRE evaluates cond once (it may have side effects) and returns from the case if false. */
#define TREQUIRE(cond, ...) do { int _ok = !!(cond); TCHECK(_ok, __VA_ARGS__); if (!_ok) return; } while (0)

static inline void t_report(const char *name) {
    if (t_case_failed) { printf("FAIL %s: %s\n", name, t_why); t_total_failed++; }
    else printf("PASS %s\n", name);
    fflush(stdout);
}
/* MLXCEL_TEST_CASE=TEXT runs only the cases whose name contains TEXT (while working on them;
 * tests/run.sh never sets it). */
static inline int t_want(const char *name) {
    const char *f = getenv("MLXCEL_TEST_CASE");
    return !f || !*f || strstr(name, f) != NULL;
}
/* A file that defines T_CASE_BEGIN(name) before including this one has it called before each
 * case (e.g. to seed its random inputs from the name, so that a case's data does not depend on
 * which cases ran before it). */
#ifndef T_CASE_BEGIN
#define T_CASE_BEGIN(name) ((void)0)
#endif
#define RUN(fn) do { if (!t_want(#fn)) break; t_case_failed = 0; t_why[0] = 0; T_CASE_BEGIN(#fn); fn(); t_report(#fn); } while (0)
/* Like RUN but with a runtime name (for table-driven cases). */
#define RUN_NAMED(name, fn, arg) do { if (!t_want(name)) break; t_case_failed = 0; t_why[0] = 0; T_CASE_BEGIN(name); fn(arg); t_report(name); } while (0)

#define TEST_EXIT() return t_total_failed ? 1 : 0

/* Repository root (MLXCEL_ROOT, set by tests/run.sh), for fixture paths. */
static inline const char *t_root(void) { const char *r = getenv("MLXCEL_ROOT"); return r ? r : "."; }
static inline const char *t_path(char *buf, size_t n, const char *rel) {
    snprintf(buf, n, "%s/%s", t_root(), rel); return buf;
}
#endif
