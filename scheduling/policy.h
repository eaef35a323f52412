/* The Pleiades StarPU scheduling policy. It realises a schedule exactly:
 * each pipeline stage is served by one worker, and that worker starts the
 * ready tasks of its stage in the order of the stage's schedule (items:
 * "forward of microbatch 3, model chunk 1"), one item after another.
 * Tasks outside that order — weight gradients, which fill bubbles, and
 * optimizer updates — run whenever their worker has nothing in order to
 * do. Tasks without a tag (the non-pipelined schedule, StarPU's own
 * partitioning tasks) go to one central FIFO that every worker serves,
 * which makes the policy behave like StarPU's eager policy. */
#ifndef PL_SCHEDULING_POLICY_H
#define PL_SCHEDULING_POLICY_H

#include <starpu.h>
#include <stdint.h>

#define PL_MAX_STAGES 16

/* What the engine attaches to a task (task->sched_data). */
typedef struct pl_sched_tag {
    int stage; /* -1: central queue, any worker */
    int item;  /* position in the stage's schedule; -1: out of order */
} pl_sched_tag;

extern struct starpu_sched_policy pl_sched_policy;

/* Starts a new iteration: n_stages stages, stage s served by StarPU worker
 * workers[s] with n_items[s] items in its schedule. No tagged task may be
 * pending (the engine waits for the previous iteration first). */
void pl_sched_configure(int n_stages, const int *workers, const int *n_items);
/* All ordered tasks of (stage, item) have been submitted: `count` of them.
 * An item with none is skipped once its turn comes. */
void pl_sched_item_submitted(int stage, int item, int count);
/* Nanoseconds spent inside push/pop since the runtime started. */
uint64_t pl_sched_overhead_ns(void);

#endif
