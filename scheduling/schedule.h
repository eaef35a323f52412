/* Schedules: the order in which an iteration's work is submitted. An item
 * is one direction (forward or backward) of a contiguous range of ops for
 * one microbatch (a batch tile). The non-pipelined schedule is the whole
 * model as one range; pipeline schedules (later) cut it into stages. */
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
    int first_op, last_op; /* inclusive range in graph op order */
    int stage;
} pl_schedule_item;

/* The reference NonPipelineSchedule: every microbatch's forward, then (unless
 * forward_only) every microbatch's backward, microbatch 0 first so that
 * weight gradients accumulate in a fixed order. Writes at most
 * 2 * microbatches items into `items`; returns the count. */
int pl_schedule_none(int n_ops, int microbatches, bool forward_only,
                     pl_schedule_item *items);

#endif
