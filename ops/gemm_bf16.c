/* bf16 matrix products on oneDNN (see gemm_bf16.h).
 *
 * Each worker thread keeps the primitives it ran, by shape (a small LRU
 * cache), and runs the next product of a shape by pointing the cached
 * memory objects at the new operands. oneDNN's own primitive cache spares
 * only the primitive's creation: building the descriptor, looking the
 * primitive up and creating and destroying the memory objects still cost
 * 2.5 us per call here (allocations included), against under 0.5 us
 * through the thread's cache. Attention multiplies per head (a 64x64x32
 * product takes 0.3 us of arithmetic), so that difference was most of its
 * products' time: measured 3.0 -> 0.85 us per call for 64x64x32, 210 ->
 * 194 us for 256x768x256. Each worker's OpenMP teams are one thread
 * (pl_gemm_single_thread, as for the fp32 products of ops/gemm.c). */
#include "ops/gemm_bf16.h"

#include "ops/gemm.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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
static pthread_key_t cache_key; /* each thread's stream and primitives */

/* What a primitive is made for: everything but the data pointers. */
typedef struct product_key {
    int64_t M, N, K, src_rs, src_cs, wei_rs, wei_cs, dst_rs;
    bool bias, dst_f32, accumulate;
} product_key;

/* A primitive with its memory objects, whose data handles each call sets. */
typedef struct product {
    product_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t mem[4]; /* src, weights, dst, bias (NULL without) */
    uint64_t last_use;
} product;

/* Per worker thread: oneDNN's stream and the products it ran lately.
 * Enough entries for every shape of a model's tiles (a GPT's five linear
 * layers times three kernels and two tile sizes, attention's six
 * products per head), so a step finds them all. */
enum { PRODUCTS_CACHED = 64 };
typedef struct thread_cache {
    dnnl_stream_t stream;
    product p[PRODUCTS_CACHED];
    int n;
    uint64_t clock;
} thread_cache;

static void product_destroy(product *p) {
    for (int i = 0; i < 4; i++)
        if (p->mem[i]) dnnl_memory_destroy(p->mem[i]);
    if (p->prim) dnnl_primitive_destroy(p->prim);
    memset(p, 0, sizeof *p);
}

static void cache_free(void *arg) {
    thread_cache *c = arg;
    for (int i = 0; i < c->n; i++) product_destroy(&c->p[i]);
    if (c->stream) dnnl_stream_destroy(c->stream);
    free(c);
}

static void init(void) {
    const char *env = getenv("PLEIADES_BF16_GEMM");
    if (env && env[0] == '0') return;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) return;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return;
    if (pthread_key_create(&cache_key, cache_free) != 0) return;
    usable = true;
}

bool pl_gemm_bf16_available(void) {
    pthread_once(&once, init);
    return usable && !atomic_load(&disabled);
}

static thread_cache *thread_cache_get(void) {
    thread_cache *c = pthread_getspecific(cache_key);
    if (c) return c;
    pl_gemm_single_thread();
    c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (dnnl_stream_create(&c->stream, engine, dnnl_stream_default_flags) != dnnl_success ||
        pthread_setspecific(cache_key, c) != 0) {
        cache_free(c);
        return NULL;
    }
    return c;
}

static dnnl_status_t matrix_desc(dnnl_memory_desc_t *md, int64_t rows, int64_t cols,
                                 int64_t rs, int64_t cs, dnnl_data_type_t type) {
    dnnl_dims_t dims = {rows, cols}, strides = {rs, cs};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, type, strides);
}

/* Builds the primitive and memory objects for `k` into `p` (zeroed);
 * false, with nothing kept, when oneDNN cannot. */
static bool product_create(product *p, const product_key *k) {
    dnnl_memory_desc_t src_md, wei_md, bias_md, dst_md;
    if (matrix_desc(&src_md, k->M, k->K, k->src_rs, k->src_cs, dnnl_bf16) ||
        matrix_desc(&wei_md, k->K, k->N, k->wei_rs, k->wei_cs, dnnl_bf16) ||
        matrix_desc(&bias_md, 1, k->N, k->N, 1, dnnl_bf16) ||
        matrix_desc(&dst_md, k->M, k->N, k->dst_rs, 1, k->dst_f32 ? dnnl_f32 : dnnl_bf16))
        return false;
    bool ok = false;
    dnnl_matmul_desc_t op;
    dnnl_post_ops_t post = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_matmul_desc_init(&op, &src_md, &wei_md, k->bias ? &bias_md : NULL, &dst_md) ||
        dnnl_primitive_attr_create(&attr))
        goto out;
    /* Accumulation: the sum post-op adds dst's old values before the one
     * rounding, as widening, sgemm with beta 1 and rounding would. */
    if (k->accumulate && (dnnl_post_ops_create(&post) || dnnl_post_ops_append_sum(post, 1.0f) ||
                          dnnl_primitive_attr_set_post_ops(attr, post)))
        goto out;
    if (dnnl_primitive_desc_create(&pd, &op, attr, engine, NULL) ||
        dnnl_primitive_create(&p->prim, pd))
        goto out;
    /* DNNL_MEMORY_NONE: each call sets the data handles. */
    if (dnnl_memory_create(&p->mem[0], &src_md, engine, DNNL_MEMORY_NONE) ||
        dnnl_memory_create(&p->mem[1], &wei_md, engine, DNNL_MEMORY_NONE) ||
        dnnl_memory_create(&p->mem[2], &dst_md, engine, DNNL_MEMORY_NONE) ||
        (k->bias && dnnl_memory_create(&p->mem[3], &bias_md, engine, DNNL_MEMORY_NONE)))
        goto out;
    memcpy(&p->key, k, sizeof *k); /* padding too: keys compare bytewise */
    ok = true;
out:
    if (!ok) product_destroy(p);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (post) dnnl_post_ops_destroy(post);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* The thread's product for `k`: a cached one, or a new one in a free
 * entry or the least recently used one's. NULL when oneDNN cannot. */
static product *product_for(thread_cache *c, const product_key *k) {
    c->clock++;
    for (int i = 0; i < c->n; i++)
        if (memcmp(&c->p[i].key, k, sizeof *k) == 0) {
            c->p[i].last_use = c->clock;
            return &c->p[i];
        }
    product *p = &c->p[c->n];
    if (c->n == PRODUCTS_CACHED) {
        p = &c->p[0];
        for (int i = 1; i < c->n; i++)
            if (c->p[i].last_use < p->last_use) p = &c->p[i];
        product_destroy(p);
    } else {
        c->n++;
    }
    if (!product_create(p, k)) {
        /* Keep the entries packed: the last one moves into the hole. */
        c->n--;
        if (p != &c->p[c->n]) {
            *p = c->p[c->n];
            memset(&c->p[c->n], 0, sizeof c->p[c->n]);
        }
        return NULL;
    }
    p->last_use = c->clock;
    return p;
}

static int gemm(int64_t M, int64_t N, int64_t K, const uint16_t *src, int64_t src_rs,
                int64_t src_cs, const uint16_t *wei, int64_t wei_rs, int64_t wei_cs,
                const uint16_t *bias, void *dst, int64_t dst_rs, bool dst_f32,
                bool accumulate) {
    if (!pl_gemm_bf16_available() || M <= 0 || N <= 0 || K <= 0)
        return PL_GEMM_BF16_UNSUPPORTED;
    thread_cache *c = thread_cache_get();
    if (!c) return PL_GEMM_BF16_UNSUPPORTED;
    product_key k;
    memset(&k, 0, sizeof k); /* padding too: keys are compared bytewise */
    k.M = M, k.N = N, k.K = K;
    k.src_rs = src_rs, k.src_cs = src_cs, k.wei_rs = wei_rs, k.wei_cs = wei_cs;
    k.dst_rs = dst_rs;
    k.bias = bias != NULL, k.dst_f32 = dst_f32, k.accumulate = accumulate;
    product *p = product_for(c, &k);
    if (!p) return PL_GEMM_BF16_UNSUPPORTED;
    void *ptr[4] = {(void *)(uintptr_t)src, (void *)(uintptr_t)wei, dst,
                    (void *)(uintptr_t)bias};
    for (int i = 0; i < (bias ? 4 : 3); i++)
        if (dnnl_memory_set_data_handle(p->mem[i], ptr[i]) != dnnl_success)
            return PL_GEMM_BF16_UNSUPPORTED; /* nothing written yet */
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->mem[0]},
                               {DNNL_ARG_WEIGHTS, p->mem[1]},
                               {DNNL_ARG_DST, p->mem[2]},
                               {DNNL_ARG_BIAS, p->mem[3]}};
    int rc = dnnl_primitive_execute(p->prim, c->stream, bias ? 4 : 3, args) == dnnl_success &&
                     dnnl_stream_wait(c->stream) == dnnl_success
                 ? 0
                 : -1;
    if (rc == 0) atomic_fetch_add(&products, 1);
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
