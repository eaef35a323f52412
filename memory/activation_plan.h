/* The activation planner (memory/activation_plan.c): for each block of a
 * model, keep its activations, recompute them or offload them, and for
 * each unit of model state (a chunk's parameters and gradients, its
 * optimizer states) keep it resident or offload it between uses, so that
 * the predicted step time is least within a memory budget. A pure
 * function of a cost table; the engine fills the table from measurements
 * (block times, the tier bandwidth, activation and chunk bytes). */
#ifndef PL_MEMORY_ACTIVATION_PLAN_H
#define PL_MEMORY_ACTIVATION_PLAN_H

#include <stdbool.h>
#include <stdint.h>

typedef enum pl_act_choice {
    PL_ACT_KEEP = 0,  /* every activation stays until the backward pass */
    PL_ACT_RECOMPUTE, /* only the block's output stays; the rest is re-made
                         by running the forward again before the backward */
    PL_ACT_OFFLOAD,   /* every activation goes to the tier below after the
                         forward and comes back for the backward */
} pl_act_choice;

typedef struct pl_act_block_cost {
    double forward_us;  /* the block's forward time in a step (what a
                           re-run costs) */
    int64_t bytes;      /* its activations in a step: what keeping holds */
    int64_t out_bytes;  /* of which its output (the next block's input),
                           what recomputing keeps */
    /* 0: the entry is a block's activations. > 0: it is a unit of model
     * state, kept or offloaded, never recomputed, and offloading it moves
     * `transfers` times its bytes each step (its trips between the tiers:
     * 2 for optimizer states, out and back once; more for parameters,
     * read by the forward, the backward and the update). */
    double transfers;
    /* What the block's backward pass holds beside its activations,
     * whatever the choice (its gradients in flight: an op's output
     * gradient and its input's); part of the transient, never kept. */
    int64_t work_bytes;
} pl_act_block_cost;

typedef struct pl_act_plan_input {
    int n_blocks;
    const pl_act_block_cost *blocks;
    int64_t budget_bytes;     /* for activations */
    double bytes_per_us;      /* the tier below, each way; 0: no tier */
} pl_act_plan_input;

/* The cost model, for the planner and its tests:
 *   time = sum over recomputed blocks of forward_us
 *        + sum over offloaded blocks of 2 * bytes / bytes_per_us
 *          (model state: transfers * bytes / bytes_per_us)
 *   peak = sum over kept blocks of bytes
 *        + sum over recomputed blocks of out_bytes
 *        + the largest transient: a kept block's work_bytes, a recomputed
 *          block's bytes - out_bytes + work_bytes, or an offloaded block's
 *          bytes + work_bytes (one block is re-made or brought back at a
 *          time, just before its backward pass). */
void pl_act_plan_cost(const pl_act_plan_input *in, const pl_act_choice *choice,
                      double *time_us, int64_t *peak);

/* Fills choice[n_blocks] with the plan of least time whose peak fits the
 * budget (among plans of equal time, the one of least peak). Exact: for
 * each possible largest transient it solves the remaining multiple-choice
 * knapsack over the Pareto front of (peak, time). Returns false when no
 * plan fits, after filling choice with the plan of least peak among those
 * that offload no activations (model state offloaded where a tier exists:
 * the placement policy moves it anyway). */
bool pl_act_plan(const pl_act_plan_input *in, pl_act_choice *choice);

#endif
