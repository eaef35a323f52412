/* The submission order of one iteration. An item is one direction
 * (forward or backward) of one stage part (a contiguous range of ops) for
 * one microbatch (a batch tile). The engine submits items in this order —
 * a valid sequential execution, so StarPU's implicit data dependencies are
 * those of plain forward-then-backward training — and the scheduling
 * policy (policy.h) reorders execution per stage for pipeline schedules. */
#ifndef PL_SCHEDULING_SCHEDULE_H
#define PL_SCHEDULING_SCHEDULE_H

#include <stdbool.h>

typedef enum pl_direction {
    PL_DIRECTION_FORWARD,
    PL_DIRECTION_BACKWARD,
} pl_direction;

typedef struct pl_schedule_item {
    pl_direction direction;
    int microbatch;
    int part; /* stage part: ops part_first[part]..part_last[part] */
} pl_schedule_item;

/* The reference NonPipelineSchedule order over n_parts parts: every
 * microbatch's forward through all parts, then (unless forward_only) every
 * microbatch's backward from the last part to the first, microbatch 0
 * first so that weight gradients accumulate in a fixed order. Writes
 * 2 · microbatches · n_parts items at most; returns the count. */
int pl_schedule_none(int n_parts, int microbatches, bool forward_only,
                     pl_schedule_item *items);

#endif
