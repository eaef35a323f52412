/* The NCCL collectives of GPU buckets (collectives/nccl.c) on one GPU,
 * with a single-rank communicator: what one machine with one GPU can run
 * (data parallelism over several GPUs needs a CUDA StarPU with StarPU-MPI,
 * which no machine of this project has yet).
 *
 * With one rank every collective is an identity: an all-reduce mean or a
 * reduce-scatter mean of one rank's vector is that vector, a gather of its
 * one shard is the vector. So each result must equal its input bit for bit,
 * in fp32 and in bf16/fp16 (widened to fp32, averaged, rounded back: a
 * 16-bit value survives that exactly), for lengths that do and do not
 * divide evenly, through libnccl loaded at run time, the CUDA worker's
 * stream and the scratch the codelet allocates on it. A buffer left
 * unwritten (NaN-filled beforehand) or a shard taken from the wrong slot
 * fails it.
 *
 * Without CUDA in this StarPU, without a GPU or without libnccl.so.2, it
 * says so and exits 77 (CTest: skipped). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "collectives/nccl.h"
#include "pleiades.h"
#include "collective_task.h"
#include "test_util.h"
#include "util/half.h"

/* One collective task on `vecs` (plus the token), waited for. */
static bool run(pl_collective_kind kind, pl_nccl_comm *comm, bool bf16,
                starpu_data_handle_t *vecs, const enum starpu_data_access_mode *modes, int n,
                starpu_data_handle_t token) {
    pl_nccl_args a = {.kind = kind, .comm = comm, .bf16 = bf16};
    return tu_run_collective(&pl_cl_nccl_collective, &a, sizeof a, vecs, modes, n, token,
                             NULL, NULL);
}

/* The kinds on a vector of `n` values of `elem` bytes (4: fp32; 2: bf16
 * or fp16), each result compared bitwise with the input. */
static void check_vector(pl_nccl_comm *comm, size_t n, size_t elem, bool bf16,
                         starpu_data_handle_t token) {
    const char *what = elem == 4 ? "fp32" : bf16 ? "bf16" : "fp16";
    unsigned char *x = malloc(n * elem), *orig = malloc(n * elem), *shard = malloc(n * elem);
    uint64_t s = 99 + n;
    for (size_t i = 0; i < n; i++) {
        float v = (float)((double)(tu_splitmix64(&s) >> 40) / 16777216.0 - 0.5) * 8.0f;
        if (elem == 4) memcpy(x + 4 * i, &v, 4);
        else {
            uint16_t h = pl_half_round(bf16, v);
            memcpy(x + 2 * i, &h, 2);
        }
    }
    memcpy(orig, x, n * elem);
    memset(shard, 0xff, n * elem); /* NaNs: what the codelet must overwrite */
    starpu_data_handle_t hx, hs;
    starpu_vector_data_register(&hx, STARPU_MAIN_RAM, (uintptr_t)x, (uint32_t)n, elem);
    starpu_vector_data_register(&hs, STARPU_MAIN_RAM, (uintptr_t)shard, (uint32_t)n, elem);
    static const struct {
        pl_collective_kind kind;
        const char *name;
    } kinds[] = {{PL_COLLECTIVE_ALLREDUCE_MEAN, "all-reduce mean"},
                 {PL_COLLECTIVE_REDUCE_SCATTER_MEAN, "reduce-scatter mean"},
                 {PL_COLLECTIVE_ALLGATHER, "all-gather"}};
    for (int k = 0; k < 3; k++) {
        bool scatter = kinds[k].kind == PL_COLLECTIVE_REDUCE_SCATTER_MEAN;
        starpu_data_handle_t v[2] = {hx, hs};
        enum starpu_data_access_mode m[2] = {scatter ? STARPU_R : STARPU_RW, STARPU_W};
        bool ok = run(kinds[k].kind, comm, bf16, v, m, scatter ? 2 : 1, token);
        CHECK(ok, "%s %s of %zu: task not submitted", what, kinds[k].name, n);
        starpu_data_handle_t out = scatter ? hs : hx;
        starpu_data_acquire(out, STARPU_R);
        const unsigned char *got = scatter ? shard : x;
        CHECK(memcmp(got, orig, n * elem) == 0, "%s %s of %zu values on one rank: not the "
              "input", what, kinds[k].name, n);
        starpu_data_release(out);
    }
    starpu_data_unregister(hx);
    starpu_data_unregister(hs);
    printf("%s: all-reduce mean, reduce-scatter mean, all-gather of %zu values on one rank: "
           "the input, bitwise\n", what, n);
    free(x);
    free(orig);
    free(shard);
}

int main(void) {
    if (!pl_runtime_cuda_available()) {
        printf("nccl: this StarPU has no CUDA support: skipped\n");
        return 77;
    }
    if (!pl_nccl_available()) {
        printf("nccl: no NCCL in this build, or libnccl.so.2 cannot be loaded: skipped\n");
        return 77;
    }
    pl_runtime_options ro = pl_runtime_options_default();
    ro.device = PL_DEVICE_CUDA;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt || pl_runtime_cuda_workers(rt) == 0) {
        printf("nccl: no CUDA worker (%s): skipped\n", rt ? "none found" : pl_last_error());
        pl_runtime_free(rt);
        return 77;
    }
    unsigned char id[PL_NCCL_ID_BYTES];
    pl_nccl_comm *comm = NULL;
    int worker = starpu_worker_get_by_type(STARPU_CUDA_WORKER, 0);
    bool ok = pl_nccl_unique_id(id) == PL_STATUS_OK &&
              pl_nccl_comm_new(1, 0, id, starpu_worker_get_devid(worker), &comm) ==
                  PL_STATUS_OK;
    CHECK(ok, "a single-rank NCCL communicator: %s", pl_last_error());
    CHECK(!ok || pl_nccl_comm_size(comm) == 1, "communicator size %d", pl_nccl_comm_size(comm));
    int token_value = 0;
    starpu_data_handle_t token;
    starpu_variable_data_register(&token, STARPU_MAIN_RAM, (uintptr_t)&token_value,
                                  sizeof token_value);
    const size_t lengths[] = {1, 1000, 1 << 16};
    for (int i = 0; ok && i < 3; i++) {
        check_vector(comm, lengths[i], 4, false, token);
        check_vector(comm, lengths[i], 2, true, token);
        check_vector(comm, lengths[i], 2, false, token);
    }
    /* Bad arguments: a clear error, nothing created. */
    pl_nccl_comm *bad = NULL;
    pl_status st = pl_nccl_comm_new(2, 5, id, 0, &bad);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT && !bad && strstr(pl_last_error(), "rank 5 of 2"),
          "rank 5 of 2 accepted (%s)", pl_last_error());
    starpu_data_unregister(token);
    pl_nccl_comm_free(comm);
    pl_runtime_free(rt);
    printf("%s\n", tu_failures ? "FAILED" : "ok");
    return tu_failures ? 1 : 0;
}
