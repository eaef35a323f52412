/* bf16 matrix products on oneDNN (see gemm_bf16.h).
 *
 * Why no primitive cache of our own: oneDNN keeps one (1024 entries by
 * default), and a primitive descriptor plus a cached primitive costs about
 * 2 us against the milliseconds of a tile's product (measured here).
 * Each worker's OpenMP teams are one thread (pl_gemm_single_thread, as
 * for the fp32 products of ops/gemm.c). */
#include "ops/gemm_bf16.h"

#include "ops/gemm.h"

#include <stdatomic.h>
#include <stdlib.h>

#ifdef PL_WITH_DNNL
#include <pthread.h>

#include <oneapi/dnnl/dnnl.h>
#endif

static atomic_bool disabled;
static atomic_llong products;

void pl_gemm_bf16_enable(bool on) { atomic_store(&disabled, !on); }

int64_t pl_gemm_bf16_count(void) { return (int64_t)atomic_load(&products); }

#ifndef PL_WITH_DNNL

bool pl_gemm_bf16_available(void) { return false; }

static int gemm(int64_t M, int64_t N, int64_t K, const uint16_t *src, int64_t src_rs,
                int64_t src_cs, const uint16_t *wei, int64_t wei_rs, int64_t wei_cs,
                const uint16_t *bias, void *dst, int64_t dst_rs, bool dst_f32,
                bool accumulate) {
    (void)M, (void)N, (void)K, (void)src, (void)src_rs, (void)src_cs, (void)wei;
    (void)wei_rs, (void)wei_cs, (void)bias, (void)dst, (void)dst_rs, (void)dst_f32;
    (void)accumulate;
    return PL_GEMM_BF16_UNSUPPORTED;
}

#else

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool usable;           /* the CPU and the environment allow it */
static dnnl_engine_t engine;  /* one CPU engine, shared (thread-safe) */
static pthread_key_t stream_key; /* each thread's stream */

static void stream_free(void *s) { dnnl_stream_destroy(s); }

static void init(void) {
    const char *env = getenv("PLEIADES_BF16_GEMM");
    if (env && env[0] == '0') return;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) return;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return;
    if (pthread_key_create(&stream_key, stream_free) != 0) return;
    usable = true;
}

bool pl_gemm_bf16_available(void) {
    pthread_once(&once, init);
    return usable && !atomic_load(&disabled);
}

static dnnl_stream_t thread_stream(void) {
    dnnl_stream_t s = pthread_getspecific(stream_key);
    if (s) return s;
    pl_gemm_single_thread();
    if (dnnl_stream_create(&s, engine, dnnl_stream_default_flags) != dnnl_success) return NULL;
    if (pthread_setspecific(stream_key, s) != 0) {
        dnnl_stream_destroy(s);
        return NULL;
    }
    return s;
}

static dnnl_status_t matrix_desc(dnnl_memory_desc_t *md, int64_t rows, int64_t cols,
                                 int64_t rs, int64_t cs, dnnl_data_type_t type) {
    dnnl_dims_t dims = {rows, cols}, strides = {rs, cs};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, type, strides);
}

static int gemm(int64_t M, int64_t N, int64_t K, const uint16_t *src, int64_t src_rs,
                int64_t src_cs, const uint16_t *wei, int64_t wei_rs, int64_t wei_cs,
                const uint16_t *bias, void *dst, int64_t dst_rs, bool dst_f32,
                bool accumulate) {
    if (!pl_gemm_bf16_available() || M <= 0 || N <= 0 || K <= 0)
        return PL_GEMM_BF16_UNSUPPORTED;
    dnnl_stream_t stream = thread_stream();
    if (!stream) return PL_GEMM_BF16_UNSUPPORTED;
    dnnl_memory_desc_t src_md, wei_md, bias_md, dst_md;
    if (matrix_desc(&src_md, M, K, src_rs, src_cs, dnnl_bf16) ||
        matrix_desc(&wei_md, K, N, wei_rs, wei_cs, dnnl_bf16) ||
        matrix_desc(&bias_md, 1, N, N, 1, dnnl_bf16) ||
        matrix_desc(&dst_md, M, N, dst_rs, 1, dst_f32 ? dnnl_f32 : dnnl_bf16))
        return PL_GEMM_BF16_UNSUPPORTED;
    int rc = PL_GEMM_BF16_UNSUPPORTED;
    dnnl_matmul_desc_t op;
    dnnl_post_ops_t post = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
    if (dnnl_matmul_desc_init(&op, &src_md, &wei_md, bias ? &bias_md : NULL, &dst_md) ||
        dnnl_primitive_attr_create(&attr))
        goto out;
    /* Accumulation: the sum post-op adds dst's old values before the one
     * rounding, as widening, sgemm with beta 1 and rounding would. */
    if (accumulate && (dnnl_post_ops_create(&post) || dnnl_post_ops_append_sum(post, 1.0f) ||
                       dnnl_primitive_attr_set_post_ops(attr, post)))
        goto out;
    if (dnnl_primitive_desc_create(&pd, &op, attr, engine, NULL) ||
        dnnl_primitive_create(&prim, pd))
        goto out;
    if (dnnl_memory_create(&mem[0], &src_md, engine, (void *)(uintptr_t)src) ||
        dnnl_memory_create(&mem[1], &wei_md, engine, (void *)(uintptr_t)wei) ||
        dnnl_memory_create(&mem[2], &dst_md, engine, dst) ||
        (bias && dnnl_memory_create(&mem[3], &bias_md, engine, (void *)(uintptr_t)bias)))
        goto out;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]},
                               {DNNL_ARG_WEIGHTS, mem[1]},
                               {DNNL_ARG_DST, mem[2]},
                               {DNNL_ARG_BIAS, mem[3]}};
    rc = dnnl_primitive_execute(prim, stream, bias ? 4 : 3, args) == dnnl_success &&
                 dnnl_stream_wait(stream) == dnnl_success
             ? 0
             : -1;
    if (rc == 0) atomic_fetch_add(&products, 1);
out:
    for (int i = 0; i < 4; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (post) dnnl_post_ops_destroy(post);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return rc;
}

#endif

int pl_gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t *src, int64_t src_rs,
                 int64_t src_cs, const uint16_t *wei, int64_t wei_rs, int64_t wei_cs,
                 const uint16_t *bias, uint16_t *dst, int64_t dst_rs, bool accumulate) {
    return gemm(M, N, K, src, src_rs, src_cs, wei, wei_rs, wei_cs, bias, dst, dst_rs, false,
                accumulate);
}

int pl_gemm_bf16_f32(int64_t M, int64_t N, int64_t K, const uint16_t *src, int64_t src_rs,
                     int64_t src_cs, const uint16_t *wei, int64_t wei_rs, int64_t wei_cs,
                     float *dst, int64_t dst_rs) {
    return gemm(M, N, K, src, src_rs, src_cs, wei, wei_rs, wei_cs, NULL, dst, dst_rs, true,
                false);
}
