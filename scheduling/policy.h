/* The Pleiades StarPU scheduling policy. It realises a schedule exactly:
 * each pipeline stage is served by its own workers (one, or several),
 * which start the ready tasks of the stage in the order of the stage's
 * schedule (items: "forward of microbatch 3, model chunk 1"), one item
 * after another: the tasks of item k+1 start once every task of item k
 * has started. With one worker the items run one at a time; with several,
 * consecutive items run at once where their data dependencies allow (in
 * 1F1B, stage 0's forward of microbatch i+1 beside the backward of i).
 * Weight gradients are in that order too when the schedule lists W items
 * (ZB-H1: they are tagged with their W item like any ordered task).
 * Tasks outside the order — otherwise weight gradients, which fill
 * bubbles, and optimizer updates — run whenever their worker has nothing
 * in order to do; but ready weight gradients go before the tasks of a forward item,
 * and a forward item waits for the weight gradients its tasks' tags say
 * it must (pl_sched_tag.owner). A deferred weight gradient keeps its
 * microbatch's activations (and output gradient) alive, so without that
 * bound a stage can hold far more than the schedule's in-flight
 * microbatches (1F1B: p on stage 0; measured up to 6 of 8 with p = 2).
 * The engine sets owners for 1F1B only (under interleaved the wait did
 * not lower the measured peak; engine/pipeline.c). Tasks without
 * a tag (the non-pipelined schedule, StarPU's own
 * partitioning tasks) go to one central FIFO that every worker serves,
 * which makes the policy behave like StarPU's eager policy. */
#ifndef PL_SCHEDULING_POLICY_H
#define PL_SCHEDULING_POLICY_H

#include <starpu.h>
#include <stdbool.h>
#include <stdint.h>

#define PL_MAX_STAGES 16
/* Tasks a worker may hold at once under a memory limit (CUDA workers pop
 * ahead: STARPU_CUDA_PIPELINE, 2 by default). */
#define PL_SCHED_MAX_IN_FLIGHT 4

/* What the engine attaches to a task (task->sched_data). */
typedef struct pl_sched_tag {
    int stage; /* -1: central queue, any worker */
    int item;  /* position in the stage's schedule; -1: out of order */
    int forward; /* ordered tasks: 1 when the item is a forward */
    int background; /* weight gradients and optimizer updates: off the
                       critical path, so the central queue hands out other
                       ready tasks first */
    int owner;   /* out-of-order tasks (weight gradients): the backward
                    item they complete; every later forward item of the
                    stage waits until they have run. -1: none (fill idle
                    time only) */
    int comm;    /* 1: a collective (collectives/comm.h), run only by the
                    communication worker when there is one */
    int order;   /* central queue under pl_sched_set_central_order: among
                    ready tasks, a lower order first (ties in push order) */
    int64_t start_order; /* ordered tasks: written by the policy when a
                    worker takes the task, its position in the order its
                    stage started tasks this iteration (exact where the
                    stage's several workers start tasks within the
                    clock's resolution); the engine sets -1 before submit */
} pl_sched_tag;

extern struct starpu_sched_policy pl_sched_policy;

/* Starts a new iteration: n_stages stages with n_items[s] items in stage
 * s's schedule; StarPU worker w < n_workers serves stage
 * stage_of_worker[w] (-1: none, it runs untagged tasks only). Every stage
 * needs at least one worker. No tagged task may be pending (the engine
 * waits for the previous iteration first). */
void pl_sched_configure(int n_stages, const int *n_items, const int *stage_of_worker,
                        int n_workers);
/* All ordered tasks of (stage, item) have been submitted: `count` of them.
 * An item with none is skipped once its turn comes. */
void pl_sched_item_submitted(int stage, int item, int count);
/* Memory admission on `node` (the compute tier under a budget): a worker
 * of that node starts a task only when its buffers fit in `bytes`
 * beside those of the tasks already running there, or when none is
 * running. 0 bytes: no limit (the default after StarPU starts). */
void pl_sched_set_memory_limit(int node, int64_t bytes);
/* The worker reserved for collectives (tag->comm tasks, and nothing
 * else), or -1 for none: then collectives run on any worker. A rank's
 * collective waits for the other ranks; on a worker of its own that wait
 * never delays computation, which is what lets communication overlap
 * the backward pass even with one compute worker. */
void pl_sched_set_comm_worker(int worker);
/* The worker StarPU-MPI's progression thread runs between its polls
 * (pl_mpi_progress's WORKER), or -1 for none. Idle, it must not sleep
 * like the other workers of a distributed run (transfers would wait): it
 * yields its core and returns to polling. */
void pl_sched_set_progress_worker(int worker);
/* CUDA runtimes: CPU workers take only host work (tasks restricted to
 * STARPU_CPU: optimizer updates a placement policy keeps on the host,
 * 16-bit trampolines, ops without a CUDA kernel), never a task a GPU can
 * run, which a CPU would run far slower and copy data back for. */
void pl_sched_set_cpu_host_only(bool on);
/* Non-pipelined runs that bound memory (activation recomputation, a
 * placement budget): the central queue hands out the ready task of the
 * lowest tag->order (the engine gives a tile's tasks its index) instead of
 * the first ready one. In push order, every tile's next task queues behind
 * the others' (breadth first): all tiles' recomputed layers, their
 * gradients and their checkpoints are alive at once. Lowest tile first,
 * the workers finish a tile's backward before starting the next tile's
 * recomputation and the tiles beyond the workers' run one after another
 * (bench_memory, 1 worker, 4 tiles, full recomputation: the activations'
 * peak was that of all 4 tiles' layers at once). */
void pl_sched_set_central_order(bool on);
/* Nanoseconds spent inside push, and inside pops that handed out a task,
 * since the runtime started (summed over threads; lock waits included).
 * Pops that find nothing to run are idle polling, not counted. */
uint64_t pl_sched_overhead_ns(void);

#endif
