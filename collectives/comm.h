/* Communication between the processes of a data-parallel job: Open MPI
 * under StarPU-MPI. This layer sits beside the op kernels: it knows MPI,
 * StarPU and the public status codes, nothing of graphs or engines.
 *
 * Why collectives inside tasks, not StarPU-MPI's inferred transfers:
 * a gradient all-reduce is N-to-N. StarPU-MPI infers point-to-point
 * transfers from data ownership, so an all-reduce would be spelled as a
 * ring of 2(N-1) detached sends/receives per bucket plus add tasks, with
 * tags to keep unique and none of MPI's tuned collective algorithms.
 * Instead each bucket's reduction is one StarPU task that calls MPI's
 * nonblocking collectives and waits for them. Blocking collectives issued
 * in different orders on different ranks deadlock, so every such task
 * also takes one "token" handle in RW mode: StarPU runs them one after the
 * other in submission order, and every rank submits the same sequence.
 * They run on a worker of their own (the runtime adds one CPU worker for
 * them, see scheduling/policy.h), so waiting for the other ranks never
 * takes a compute worker away from the backward pass it overlaps.
 *
 * Reductions are reduce-scatter then all-gather, not MPI_Allreduce: each
 * element's sum is then computed once, by the rank that owns its shard,
 * and copied everywhere, so parameters stay bitwise identical on every
 * rank (the MPI standard only recommends that all-reduce results agree).
 * The same two halves are ZeRO-2's reduce-scatter and ZeRO's parameter
 * all-gather.
 *
 * Hybrid data x pipeline parallelism runs collectives in groups of ranks
 * (pl_comm_group): gradients are averaged among the data-parallel ranks
 * of a stage, shared chunks summed among the stages of a replica. */
#ifndef PL_COLLECTIVES_COMM_H
#define PL_COLLECTIVES_COMM_H

#include <starpu.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pleiades.h"

/* Starts MPI (MPI_THREAD_MULTIPLE: the communication worker and the main
 * thread both call it) unless it already runs; rank and size are known
 * afterwards. Then pl_comm_starpu_init starts StarPU through
 * starpu_mpi_init_conf with `conf`. Without MPI in the build: an
 * UNSUPPORTED error. */
pl_status pl_comm_mpi_init(void);
/* progress_in_worker: StarPU-MPI's progression thread runs the first CPU
 * worker itself (pl_mpi_progress's WORKER; StarPU-MPI's "MPI driver"),
 * then pl_comm_progress_worker names that worker, else it is -1. */
pl_status pl_comm_starpu_init(struct starpu_conf *conf, bool progress_in_worker);
int pl_comm_progress_worker(void);
/* starpu_mpi_shutdown (if StarPU was started). MPI itself stays up until
 * the process exits (it cannot start twice), then is finalised if
 * pl_comm_mpi_init started it. */
void pl_comm_starpu_shutdown(void);
/* Naps of `nap_us` µs (0: none) for StarPU-MPI's progression thread
 * whenever its MPI_Test finds nothing done (progress_naps.c, which says
 * why). pl_comm_starpu_init turns them on when the host's ranks have
 * more threads than it has cores (PLEIADES_MPI_NAP_US overrides);
 * pl_comm_progress_nap_us says what is in force, and
 * pl_comm_progress_naps_taken how many naps the thread took (so a test
 * can tell that StarPU-MPI's calls reach the wrapper). */
void pl_comm_progress_naps(long nap_us);
long pl_comm_progress_nap_us(void);
long pl_comm_progress_naps_taken(void);
/* This process's rank in the world, the world's size, and its rank among
 * the processes of its host (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, 0
 * when unknown); 0, 1, 0 before init or without MPI. */
int pl_comm_rank(void);
int pl_comm_size(void);
int pl_comm_local_rank(void);
/* Processes of the job on this host (OMPI_COMM_WORLD_LOCAL_SIZE, 1 when
 * unknown). */
int pl_comm_local_size(void);
/* Ends every process of the job (MPI_Abort): a failure on one rank would
 * otherwise leave the others waiting in a collective forever. */
void pl_comm_abort(int code);

/* A group of ranks with communicators of its own (hybrid data x pipeline
 * parallelism: the data-parallel ranks of one stage, the stages of one
 * data-parallel replica). NULL means the whole world everywhere a group
 * is taken. pl_comm_group_split is collective over the world: ranks
 * giving the same `color` form a group, ranked by `key`. */
typedef struct pl_comm_group pl_comm_group;
pl_status pl_comm_group_split(int color, int key, pl_comm_group **out);
void pl_comm_group_free(pl_comm_group *g);
/* This rank's rank in g and g's size (the world's for NULL). */
int pl_comm_group_rank(const pl_comm_group *g);
int pl_comm_group_size(const pl_comm_group *g);

/* Collective, on the host: element-wise sum of `n` doubles over ranks. */
pl_status pl_comm_sum(double *values, int n);
/* Collective over group g, on the host: g's rank 0 receives every
 * member's `n` floats of `send` into recv (counts[r] floats from rank r
 * of g at displs[r]); recv is only read on g's rank 0. */
pl_status pl_comm_gather_floats(const pl_comm_group *g, const float *send, int n, float *recv,
                                const int *counts, const int *displs);
/* Collective over group g, on the host: the n floats of g's rank `root`
 * copied into every member's buf (pipeline stages across ranks: a chunk
 * only its users update, for a reader elsewhere; a checkpoint's states). */
pl_status pl_comm_bcast_floats(const pl_comm_group *g, float *buf, size_t n, int root);
/* The same for n bytes (16-bit values, whatever the element). */
pl_status pl_comm_bcast_bytes(const pl_comm_group *g, void *buf, size_t n, int root);

/* Collective, on the host: rank 0 receives every rank's `n` bytes (n may
 * differ between ranks) concatenated in rank order into *out (malloc'ed,
 * *out_n bytes; counts[r] bytes from rank r when counts is not NULL, the
 * world size ints); the other ranks get NULL. */
pl_status pl_comm_gather_bytes(const void *send, size_t n, void **out, size_t *out_n,
                               int *counts);
/* Collective, on the host: returns once every rank has called it. */
pl_status pl_comm_barrier(void);

/* Point-to-point transfers of a StarPU handle between two ranks
 * (pipeline stages across ranks: an activation tile forward, its
 * gradient backward). StarPU-MPI's detached requests: they take the
 * handle like a task would (R to send, W to receive) in submission
 * order, so the tasks submitted before and after are ordered around them
 * by StarPU's implicit dependencies; StarPU-MPI's own thread moves the
 * data, no worker waits. `tag` must be unique among the transfers in
 * flight between the two ranks. */
pl_status pl_comm_send_handle(starpu_data_handle_t h, int dest, int64_t tag);
pl_status pl_comm_recv_handle(starpu_data_handle_t h, int source, int64_t tag);

/* Collective, on the host: index of the first of `n` values that differs
 * between ranks, or -1 when all agree. */
pl_status pl_comm_first_difference(const uint64_t *values, int n, int *first);

/* The collectives, as one STARPU_VARIABLE_NBUFFERS codelet. A task's
 * buffers are the float vectors it works on, then args.n_order ordering
 * handles, then the token (RW). */
typedef enum pl_collective_kind {
    /* every vector RW: summed over ranks and divided by the world size
     * (gradient averaging, DDP). The sums, here and below, run as a ring
     * reduce-scatter of MPI point-to-point messages (comm.c says why),
     * then an all-gather. */
    PL_COLLECTIVE_ALLREDUCE_MEAN,
    /* pairs (full R, shard W): the shard receives this rank's part of the
     * mean of the full vectors (ZeRO-2) */
    PL_COLLECTIVE_REDUCE_SCATTER_MEAN,
    /* every vector RW: each rank's shard is copied into the others
     * (updated parameters under ZeRO) */
    PL_COLLECTIVE_ALLGATHER,
    /* every vector of doubles RW: replaced by the element-wise sum (or
     * max) of every rank's, added in rank order so that every rank gets
     * the same bits (ZeRO-2: gradient-norm and overflow partials of
     * gradient shards) */
    PL_COLLECTIVE_SUM_F64,
    PL_COLLECTIVE_MAX_F64,
    /* pairs (shard R, full W): every rank's shard is gathered into the
     * full vector (ZeRO-3: a parameter chunk before its use); then the
     * args' n_zero vectors (W) are filled with zeros (the chunk's
     * gradients, born with it) */
    PL_COLLECTIVE_GATHER_SHARDS,
    /* pairs (own R, sum W): the sum receives every rank's own vector
     * (one rank reduces each element, in a fixed ring order, then it is
     * copied everywhere: the same bits on every rank; where at most two
     * ranks' terms are nonzero, the bits of a one-process a + b).
     * Pipeline stages
     * across ranks: a chunk whose parameters several stages use (a tied
     * embedding, a chunk straddling a stage boundary), each stage's own
     * contributions summed. */
    PL_COLLECTIVE_ALLREDUCE_SUM,
} pl_collective_kind;

typedef struct pl_collective_args {
    pl_collective_kind kind;
    /* The ranks taking part (NULL: the world). Every member submits the
     * group's collectives in the same order; one token orders all of a
     * rank's collectives, whatever their group, so groups cannot wait on
     * each other in a cycle either (every rank submits its part of one
     * sequence). */
    const pl_comm_group *group;
    int n_zero; /* GATHER_SHARDS: vectors after the pairs to zero */
    int n_order; /* handles before the token that only order the task
                    (taken for their dependencies, never touched) */
    /* Vectors of 2-byte elements hold 16-bit floats: bf16 when set, else
     * fp16. Sums widen them to fp32, reduce in fp32 and round the result
     * once (to nearest even); gathers move their bits unchanged. */
    bool bf16;
} pl_collective_args;

extern struct starpu_codelet pl_cl_collective;

/* Of the last pl_cl_collective task the calling thread ran: how long its
 * barrier took, before any data moved (the other ranks of its group
 * reaching it, and this thread seeing them when it shares a busy core),
 * µs. The rest of the task's time is the data's.
 * Read it from that task's callback, which StarPU runs on the same worker
 * right after the task. */
double pl_comm_task_wait_us(void);

/* The same barrier as times of CLOCK_MONOTONIC, seconds: when the task
 * entered it and when it saw every rank there (the wait is their
 * difference). That clock is the host's, so processes on one machine can
 * compare them: test_collectives checks that a rank's wait ends no
 * earlier than the last rank's arrival whatever the machine's load. */
void pl_comm_task_wait_span(double *begin_s, double *end_s);

/* Shard r of n elements over `size` ranks: [lo, hi), the first ranks one
 * element longer when n % size != 0. */
static inline void pl_comm_shard(size_t n, int size, int r, size_t *lo, size_t *hi) {
    size_t q = n / (size_t)size, rem = n % (size_t)size;
    *lo = (size_t)r * q + ((size_t)r < rem ? (size_t)r : rem);
    *hi = *lo + q + ((size_t)r < rem);
}

#endif
