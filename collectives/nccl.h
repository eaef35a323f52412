/* NCCL for the collectives of GPU-resident buckets (CUDA builds).
 *
 * The data-parallel engine reduces gradient buckets and gathers updated
 * parameters with collectives inside tasks (comm.h says why). On a CUDA
 * run the buckets live in GPU memory, and the MPI codelet would make
 * StarPU copy each one to the host and back; this codelet instead runs on
 * the CUDA worker and calls NCCL on the stream StarPU hands the task, so
 * the bucket never leaves the GPU. The same token handle orders it among
 * the rank's other collectives, so every rank issues the same NCCL calls
 * in the same order (NCCL, like MPI, deadlocks otherwise).
 *
 * Results follow comm.h's rules: every element is reduced once, by the
 * rank owning its shard (NCCL's reduce-scatter, then all-gather), so the
 * ranks hold the same bits; 16-bit vectors are widened to fp32, reduced
 * and rounded once; gathers move bits. Shards are pl_comm_shard's uneven
 * split: NCCL wants equal counts, so each rank's shard travels in a slot
 * of the longest shard's length, padded with zeros.
 *
 * libnccl.so.2 is opened at run time (dlopen), not linked: a GPU machine
 * without it still runs everything else, and pl_nccl_available says no.
 * Built where nvcc and nccl.h are (PL_WITH_NCCL); elsewhere every entry
 * point answers UNSUPPORTED. */
#ifndef PL_COLLECTIVES_NCCL_H
#define PL_COLLECTIVES_NCCL_H

#include <starpu.h>
#include <stdbool.h>

#include "collectives/comm.h"
#include "pleiades.h"

enum { PL_NCCL_ID_BYTES = 128 }; /* NCCL_UNIQUE_ID_BYTES */

typedef struct pl_nccl_comm pl_nccl_comm;

/* Whether this build has the NCCL path and libnccl.so.2 could be loaded
 * (loaded once, on the first call). */
bool pl_nccl_available(void);
/* A communicator's identity, made by one rank and given to the others
 * (over MPI: pl_comm_bcast_bytes). */
pl_status pl_nccl_unique_id(unsigned char id[PL_NCCL_ID_BYTES]);
/* Rank `rank` of `nranks`' communicator on CUDA device `device` (the one
 * whose worker runs the collectives): collective over the nranks
 * processes, which all call it with the same id. */
pl_status pl_nccl_comm_new(int nranks, int rank, const unsigned char id[PL_NCCL_ID_BYTES],
                           int device, pl_nccl_comm **out);
void pl_nccl_comm_free(pl_nccl_comm *c);
int pl_nccl_comm_size(const pl_nccl_comm *c);

/* The codelet (CUDA only): buffers as pl_cl_collective's (vectors, then
 * the token RW) for kinds ALLREDUCE_MEAN (vectors RW), REDUCE_SCATTER_MEAN
 * (pairs full R, shard W) and ALLGATHER (vectors RW: each rank's shard
 * copied into the others). */
typedef struct pl_nccl_args {
    pl_collective_kind kind;
    pl_nccl_comm *comm;
    bool bf16; /* 2-byte vectors: bf16, else fp16 */
} pl_nccl_args;
extern struct starpu_codelet pl_cl_nccl_collective;

#endif
