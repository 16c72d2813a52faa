/* test_core.c: core helpers: half-float conversion, buffers, thread pool, errors. */
#include "mlxcel/core.h"
#include "test.h"
#include <math.h>
#include <stdatomic.h>

static void t_bf16(void) {
    TCHECK(mx_bf16_to_f32(mx_f32_to_bf16(1.0f)) == 1.0f, "1.0");
    TCHECK(mx_f32_to_bf16(1.00390625f) == 0x3f80, "round half to even down");
    TCHECK(mx_f32_to_bf16(1.01171875f) == 0x3f82, "round half to even up");
    TCHECK(isnan(mx_bf16_to_f32(mx_f32_to_bf16(NAN))), "nan kept");
}
static void t_f16(void) {
    float vals[] = {0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++)
        TCHECK(mx_f16_to_f32(mx_f32_to_f16(vals[i])) == vals[i], "roundtrip %g", vals[i]);
    TCHECK(isinf(mx_f16_to_f32(mx_f32_to_f16(1e6f))), "overflow to inf");
}
static void t_buf(void) {
    mx_buf b = {0};
    for (int i = 0; i < 1000; i++) mx_buf_printf(&b, "%d,", i);
    TCHECK(b.len == 3890, "len %zu", b.len);
    TCHECK(!strncmp(b.data, "0,1,2,", 6), "content");
    mx_buf_free(&b);
}
static atomic_long g_sum;
static void add_range(void *ctx, int64_t b, int64_t e, int tid) {
    (void)ctx; (void)tid;
    long s = 0;
    for (int64_t i = b; i < e; i++) s += (long)i;
    atomic_fetch_add(&g_sum, s);
}
static void t_pool(void) {
    mx_pool *p = mx_pool_create(3);
    TREQUIRE(p != NULL, "create");
    for (int rep = 0; rep < 200; rep++) {
        atomic_store(&g_sum, 0);
        mx_pool_run(p, 10000, 7, add_range, NULL);
        TCHECK(atomic_load(&g_sum) == 49995000L, "sum %ld", (long)atomic_load(&g_sum));
    }
    mx_pool_free(p);
}
static void t_errors(void) {
    mx_status s = mx_errorf(MX_ERR_FORMAT, "bad %s", "thing");
    TCHECK(s == MX_ERR_FORMAT, "status");
    TCHECK(!strcmp(mx_last_error(), "bad thing"), "message");
    TCHECK(!strcmp(mx_status_str(MX_ERR_IO), "i/o error"), "str");
}
int main(void) {
    RUN(t_bf16); RUN(t_f16); RUN(t_buf); RUN(t_pool); RUN(t_errors);
    TEST_EXIT();
}
