/* NCCL collectives on GPU buffers (see nccl.h). */
#include "collectives/nccl.h"

#include "util/error.h"

#if defined(PL_WITH_NCCL) && defined(STARPU_USE_CUDA)
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "util/half_cuda.h"

/* The NCCL calls used, resolved from libnccl.so.2 (nccl.h gives their
 * types; nothing links against the library). */
static struct {
    __typeof__(&ncclGetUniqueId) get_unique_id;
    __typeof__(&ncclCommInitRank) comm_init_rank;
    __typeof__(&ncclCommDestroy) comm_destroy;
    __typeof__(&ncclReduceScatter) reduce_scatter;
    __typeof__(&ncclAllGather) all_gather;
    __typeof__(&ncclGetErrorString) error_string;
    bool ok;
} nccl;
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;

static void nccl_load(void) {
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    nccl.get_unique_id = (__typeof__(nccl.get_unique_id))dlsym(lib, "ncclGetUniqueId");
    nccl.comm_init_rank = (__typeof__(nccl.comm_init_rank))dlsym(lib, "ncclCommInitRank");
    nccl.comm_destroy = (__typeof__(nccl.comm_destroy))dlsym(lib, "ncclCommDestroy");
    nccl.reduce_scatter = (__typeof__(nccl.reduce_scatter))dlsym(lib, "ncclReduceScatter");
    nccl.all_gather = (__typeof__(nccl.all_gather))dlsym(lib, "ncclAllGather");
    nccl.error_string = (__typeof__(nccl.error_string))dlsym(lib, "ncclGetErrorString");
    nccl.ok = nccl.get_unique_id && nccl.comm_init_rank && nccl.comm_destroy &&
              nccl.reduce_scatter && nccl.all_gather && nccl.error_string;
}

bool pl_nccl_available(void) {
    pthread_once(&nccl_once, nccl_load);
    return nccl.ok;
}

struct pl_nccl_comm {
    ncclComm_t comm;
    int nranks, rank;
};

static pl_status nccl_fail(const char *what, ncclResult_t r) {
    return pl_fail(PL_STATUS_RUNTIME_ERROR, "NCCL: %s: %s", what, nccl.error_string(r));
}

pl_status pl_nccl_unique_id(unsigned char id[PL_NCCL_ID_BYTES]) {
    if (!pl_nccl_available())
        return pl_fail(PL_STATUS_UNSUPPORTED, "NCCL: libnccl.so.2 cannot be loaded");
    ncclUniqueId u;
    ncclResult_t r = nccl.get_unique_id(&u);
    if (r != ncclSuccess) return nccl_fail("ncclGetUniqueId", r);
    memcpy(id, u.internal, PL_NCCL_ID_BYTES);
    return PL_STATUS_OK;
}

pl_status pl_nccl_comm_new(int nranks, int rank, const unsigned char id[PL_NCCL_ID_BYTES],
                           int device, pl_nccl_comm **out) {
    *out = NULL;
    if (!pl_nccl_available())
        return pl_fail(PL_STATUS_UNSUPPORTED, "NCCL: libnccl.so.2 cannot be loaded");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "NCCL: rank %d of %d", rank, nranks);
    pl_nccl_comm *c = calloc(1, sizeof *c);
    if (!c) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "NCCL: out of memory");
    ncclUniqueId u;
    memcpy(u.internal, id, PL_NCCL_ID_BYTES);
    /* On the device of the worker that will run the collectives; the
     * caller's current device is left as it was. */
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device);
    ncclResult_t r = nccl.comm_init_rank(&c->comm, nranks, u, rank);
    cudaSetDevice(previous);
    if (r != ncclSuccess) {
        free(c);
        return nccl_fail("ncclCommInitRank", r);
    }
    c->nranks = nranks;
    c->rank = rank;
    *out = c;
    return PL_STATUS_OK;
}

void pl_nccl_comm_free(pl_nccl_comm *c) {
    if (!c) return;
    nccl.comm_destroy(c->comm);
    free(c);
}

int pl_nccl_comm_size(const pl_nccl_comm *c) { return c ? c->nranks : 1; }

/* A kernel or NCCL call that failed inside a task has no caller to report
 * to, and the other ranks would wait for this one forever: the job ends
 * (as a rank that dies does). */
static void check(bool ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "pleiades: NCCL collective: %s failed\n", what);
    abort();
}

/* Vector x (n elements of elem bytes) <-> the padded fp32 (or, gathers,
 * same-width) layout: rank r's shard [lo_r, hi_r) at slot r of `slot`
 * elements. Sums widen 16-bit values; gathers copy bits. */
static void to_slots(cudaStream_t s, const void *x, size_t n, size_t elem, bool widen,
                     bool bf16, int size, size_t slot, void *buf) {
    size_t out_elem = widen ? sizeof(float) : elem;
    check(cudaMemsetAsync(buf, 0, (size_t)size * slot * out_elem, s) == cudaSuccess,
          "cudaMemsetAsync");
    for (int r = 0; r < size; r++) {
        size_t lo, hi;
        pl_comm_shard(n, size, r, &lo, &hi);
        if (hi == lo) continue;
        char *dst = (char *)buf + (size_t)r * slot * out_elem;
        const char *src = (const char *)x + lo * elem;
        if (widen && elem == sizeof(uint16_t))
            pl_cuda_half_to_float(s, bf16, (const uint16_t *)src, (float *)dst,
                                  (int64_t)(hi - lo));
        else
            check(cudaMemcpyAsync(dst, src, (hi - lo) * elem, cudaMemcpyDeviceToDevice, s) ==
                      cudaSuccess,
                  "cudaMemcpyAsync");
    }
}

/* `count` values from buf (fp32 when `narrow`, else elem-wide) into dst
 * (elem-wide), rounded to 16 bits when narrow and elem is 2. */
static void from_buf(cudaStream_t s, const void *buf, size_t count, size_t elem, bool narrow,
                     bool bf16, void *dst) {
    if (count == 0) return;
    if (narrow && elem == sizeof(uint16_t))
        pl_cuda_half_from_float(s, bf16, (const float *)buf, (uint16_t *)dst, (int64_t)count);
    else
        check(cudaMemcpyAsync(dst, buf, count * elem, cudaMemcpyDeviceToDevice, s) ==
                  cudaSuccess,
              "cudaMemcpyAsync");
}

/* Slots back into x: slot r's first hi_r - lo_r values to [lo_r, hi_r). */
static void from_slots(cudaStream_t s, const void *buf, size_t n, size_t elem, bool narrow,
                       bool bf16, int size, size_t slot, void *x) {
    size_t in_elem = narrow ? sizeof(float) : elem;
    for (int r = 0; r < size; r++) {
        size_t lo, hi;
        pl_comm_shard(n, size, r, &lo, &hi);
        from_buf(s, (const char *)buf + (size_t)r * slot * in_elem, hi - lo, elem, narrow,
                 bf16, (char *)x + lo * elem);
    }
}

static void nccl_cuda(void *buffers[], void *cl_arg) {
    const pl_nccl_args *a = cl_arg;
    struct starpu_task *task = starpu_task_get_current();
    cudaStream_t s = starpu_cuda_get_local_stream();
    ncclComm_t comm = a->comm->comm;
    int size = a->comm->nranks, rank = a->comm->rank;
    int n_buffers = (int)STARPU_TASK_GET_NBUFFERS(task) - 1; /* the token last */
    int step = a->kind == PL_COLLECTIVE_REDUCE_SCATTER_MEAN ? 2 : 1;
    for (int b = 0; b + step - 1 < n_buffers; b += step) {
        size_t n = STARPU_VECTOR_GET_NX(buffers[b]);
        size_t elem = STARPU_VECTOR_GET_ELEMSIZE(buffers[b]);
        void *x = (void *)STARPU_VECTOR_GET_PTR(buffers[b]);
        size_t slot = (n + (size_t)size - 1) / (size_t)size, lo, hi;
        pl_comm_shard(n, size, rank, &lo, &hi);
        bool sum = a->kind != PL_COLLECTIVE_ALLGATHER;
        size_t wide = sum ? sizeof(float) : elem;
        ncclDataType_t type = sum || elem == sizeof(float) ? ncclFloat32 : ncclFloat16;
        /* The padded whole (all slots) and this rank's slot. */
        void *all = NULL, *mine = NULL;
        check(cudaMallocAsync(&all, (size_t)size * slot * wide + 1, s) == cudaSuccess &&
                  cudaMallocAsync(&mine, slot * wide + 1, s) == cudaSuccess,
              "cudaMallocAsync");
        if (sum) {
            /* Every rank's slots, averaged into this rank's. */
            to_slots(s, x, n, elem, true, a->bf16, size, slot, all);
            ncclResult_t r = nccl.reduce_scatter(all, mine, slot, ncclFloat32, ncclAvg, comm, s);
            check(r == ncclSuccess, "ncclReduceScatter");
            if (a->kind == PL_COLLECTIVE_REDUCE_SCATTER_MEAN) {
                void *shard = (void *)STARPU_VECTOR_GET_PTR(buffers[b + 1]);
                from_buf(s, mine, hi - lo, STARPU_VECTOR_GET_ELEMSIZE(buffers[b + 1]), true,
                         a->bf16, shard);
            } else {
                r = nccl.all_gather(mine, all, slot, ncclFloat32, comm, s);
                check(r == ncclSuccess, "ncclAllGather");
                from_slots(s, all, n, elem, true, a->bf16, size, slot, x);
            }
        } else {
            /* This rank's updated shard to every rank, bits unchanged. */
            check(cudaMemsetAsync(mine, 0, slot * wide, s) == cudaSuccess, "cudaMemsetAsync");
            from_buf(s, (const char *)x + lo * elem, hi - lo, elem, false, a->bf16, mine);
            ncclResult_t r = nccl.all_gather(mine, all, slot, type, comm, s);
            check(r == ncclSuccess, "ncclAllGather");
            from_slots(s, all, n, elem, false, a->bf16, size, slot, x);
        }
        check(cudaFreeAsync(all, s) == cudaSuccess && cudaFreeAsync(mine, s) == cudaSuccess,
              "cudaFreeAsync");
    }
}

struct starpu_codelet pl_cl_nccl_collective = {
    .cuda_funcs = {nccl_cuda},
    .cuda_flags = {STARPU_CUDA_ASYNC},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "nccl_collective",
};

#else /* no NCCL in this build */

bool pl_nccl_available(void) { return false; }

pl_status pl_nccl_unique_id(unsigned char id[PL_NCCL_ID_BYTES]) {
    (void)id;
    return pl_fail(PL_STATUS_UNSUPPORTED, "NCCL: this build has no CUDA/NCCL");
}

pl_status pl_nccl_comm_new(int nranks, int rank, const unsigned char id[PL_NCCL_ID_BYTES],
                           int device, pl_nccl_comm **out) {
    (void)nranks, (void)rank, (void)id, (void)device;
    *out = NULL;
    return pl_fail(PL_STATUS_UNSUPPORTED, "NCCL: this build has no CUDA/NCCL");
}

void pl_nccl_comm_free(pl_nccl_comm *c) { (void)c; }

int pl_nccl_comm_size(const pl_nccl_comm *c) {
    (void)c;
    return 1;
}

/* Never submitted: no implementation StarPU could pick. */
struct starpu_codelet pl_cl_nccl_collective = {
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "nccl_collective",
};

#endif
