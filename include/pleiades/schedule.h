/*
 * pleiades/schedule.h — pipeline schedules as data: the per-stage order of
 * work items that the scheduling policy enforces (part of pleiades.h).
 *
 * p stages, v model chunks per stage, m microbatches. The model's blocks
 * are cut into P = p·v contiguous parts; chunk c of stage s is part
 * s + c·p (Megatron / Colossal-AI mapping) unless the schedule places
 * chunks itself (pl_schedule_def.part, ZB-V's V). A schedule says, per stage,
 * in which order that stage's worker runs its items: "forward (F) of
 * microbatch mb on chunk c", "input-gradient backward (B) of mb on c".
 * Every (F, mb, c) and (B, mb, c) of the stage appears exactly once.
 * Weight-gradient (W) items are optional: a schedule that lists none
 * leaves the policy to run weight gradients in the bubbles on its own; one
 * that lists any must list W of every (mb, c) of every stage, and the
 * policy then runs them exactly where listed (zero-bubble schedules).
 *
 * A user schedule (see examples/custom_schedule.c), registered by name:
 *
 *   static int build(const pl_schedule_def *def, int p, int v, int m,
 *                    int stage, pl_work_item *items, int capacity,
 *                    void *user) {
 *       int n = 0;
 *       for (int mb = 0; mb < m; mb++)
 *           pl_schedule_append(items, capacity, &n,
 *                              (pl_work_item){PL_WORK_F, mb, 0});
 *       for (int mb = 0; mb < m; mb++)
 *           pl_schedule_append(items, capacity, &n,
 *                              (pl_work_item){PL_WORK_B, mb, 0});
 *       return n;
 *   }
 *   static const pl_schedule_def fill_drain = {.name = "fill-drain",
 *                                              .build = build};
 *   pl_schedule_register(&fill_drain);
 *   eo.schedule_def = pl_schedule_find("fill-drain");  // or &fill_drain
 *   eo.stages = 2; eo.tiles = 8;
 *
 * The engine builds every stage's list when it is created and refuses a
 * schedule that lists an item twice, misses one, names a microbatch or
 * chunk out of range, or would deadlock (a stage waiting for an item that
 * another stage can only reach after the waiting stage has moved on).
 */
#ifndef PLEIADES_SCHEDULE_H
#define PLEIADES_SCHEDULE_H

#include "pleiades/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pl_work_kind {
    PL_WORK_F = 0, /* forward of the chunk's ops (the loss included) */
    PL_WORK_B,     /* input-gradient backward of the chunk's ops */
    PL_WORK_W,     /* weight-gradient backward of the chunk's ops (optional) */
} pl_work_kind;

typedef struct pl_work_item {
    pl_work_kind kind;
    int microbatch; /* 0 .. m−1 */
    int chunk;      /* model chunk of the stage, 0 .. v−1 */
} pl_work_item;

typedef struct pl_schedule_def pl_schedule_def;

/* The mean time one F, B and W item takes on a stage (microseconds), as
 * an engine that records tasks measures them over its last step. */
typedef struct pl_item_times {
    double f, b, w;
} pl_item_times;

struct pl_schedule_def {
    const char *name; /* for messages and traces (required) */
    /* Writes stage `stage`'s items in execution order into items (room
     * for `capacity` items, 3·m·v: every F, B and W once) and returns how
     * many; a negative value refuses (p, v, m). Called once per stage
     * when an engine is created, with def itself and def->user.
     * Required. pl_schedule_append writes an item only while there is
     * room; a build that writes past `capacity` itself, or returns more,
     * is refused naming the schedule and the stage. */
    int (*build)(const pl_schedule_def *def, int p, int v, int m, int stage,
                 pl_work_item *items, int capacity, void *user);
    /* Optional preconditions (say m >= p): PL_STATUS_OK, or a failure
     * status. The engine reports it naming the schedule and p, v, m (or,
     * for the built-ins, with their own message). */
    pl_status (*check)(int p, int v, int m);
    /* Optional: the theoretical idle fraction of a stage over its busy
     * time (traces and pl_engine_theoretical_bubble; 0 without). */
    double (*bubble)(int p, int v, int m);
    void *user;
    /* Optional: the theoretical idle fraction given the measured item
     * times (ZB-H1's bubble depends on them). An engine that records
     * tasks uses it instead of `bubble` once a step has run. */
    double (*bubble_measured)(int p, int v, int m, const pl_item_times *t);
    /* Optional: the placement, which of the model's p·v parts (0 first in
     * model order) chunk `chunk` of stage `stage` holds. NULL: part
     * stage + chunk·p (Megatron's interleaving). It must place every
     * part exactly once (checked, naming the schedule). ZB-V's V: chunk 0
     * of stage s holds part s, chunk 1 part 2p−1−s, so the first and the
     * last part sit on stage 0 and the forward turns on stage p−1. */
    int (*part)(int p, int v, int stage, int chunk);
};

/* The part chunk `chunk` of stage `stage` holds under def's placement
 * (def->part, or stage + chunk·p without one; def may be NULL). */
int pl_schedule_part(const pl_schedule_def *def, int p, int v, int stage, int chunk);

/* For a build: items[*n] = item and *n += 1 while *n < capacity (true);
 * past it nothing is written and false returned, but *n still counts, so
 * a build returning *n is refused naming the schedule, the stage and the
 * count (rather than writing past its buffer). */
bool pl_schedule_append(pl_work_item *items, int capacity, int *n, pl_work_item item);

/* The built-ins (PL_SCHEDULE_1F1B, PL_SCHEDULE_INTERLEAVED and
 * PL_SCHEDULE_ZB_H1 are these):
 * 1F1B: v = 1, any m; stage s does min(p−s−1, m) warm-up forwards, then
 * one forward / one backward, then the remaining backwards (m < p: the
 * first stages run every forward first, as Megatron's and Colossal-AI's
 * 1F1B do); bubble (p−1)/m. Interleaved 1F1B (Megatron order): v > 1,
 * m a multiple of p (so m >= p: its virtual steps take microbatches in
 * groups of p);
 * warm-up min(2(p−s−1) + (v−1)p, m·v) virtual forwards (all m·v when
 * m == p, as Colossal-AI and Megatron do), virtual step k is
 * microbatch (k / (p·v))·p + k mod p on chunk (k mod (p·v)) / p (counted
 * from the last chunk for backwards); bubble (p−1)/(v·m). ZB-H1 (Qi et
 * al., "Zero Bubble Pipeline Parallelism", ICLR 2024): v = 1, any m;
 * 1F1B's F/B order, with W items listed: on stage s the W of microbatch j
 * comes right after the B of microbatch j + s, the rest after the last B,
 * so every stage holds at most p microbatches' activations (1F1B's peak,
 * on its stage 0) and the deferred W's fill the cool-down; bubble
 * (p−1)(F+B−W) / (m(F+B+W)) with the measured item times (the paper's
 * (p−1)(T_F+T_B−T_W) idle over m(T_F+T_B+T_W) busy; with m < p only
 * m−1 W's fill the p−1 slots: (p−1)(T_F+T_B) − (m−1)T_W idle),
 * (p−1)/(3m) when F, B and W take alike and m >= p. */
extern const pl_schedule_def pl_schedule_1f1b;
extern const pl_schedule_def pl_schedule_interleaved;
extern const pl_schedule_def pl_schedule_zb_h1;

/* ------------------------------------------------------------ registry
 *
 * Schedules by name: the built-ins ("1f1b", "interleaved", "zb-h1",
 * GPipe, "gpipe": every stage runs all forwards, then all backwards from
 * the last microbatch; one chunk, any m; bubble (p−1)/m, all m
 * microbatches' activations alive at once; and ZB-V, "zbv", Qi et al.'s
 * V schedule (Colossal-AI's pp_style="zbv"): v = 2 chunks per stage
 * placed in a V by its `part` (stage s holds parts s and 2p−1−s), any m;
 * its lists come from a unit-time simulation of the paper's rules — a free
 * stage takes a ready B, else F of its chunk 1, else F of chunk 0 of a
 * new microbatch if at most 2p chunk activations (1F1B's p whole-stage
 * ones) stay live counting the new one's two and one for each admitted
 * microbatch still to turn, else the oldest ready W — and its bubble, with
 * measured item times, is those lists run with the times;
 * scheduling/schedule_zbv.c states the rules in full) and those
 * registered with
 * pl_schedule_register, which are found exactly like the built-ins. The
 * CLI's --schedule NAME looks names up here (and lists them); an engine
 * takes what pl_schedule_find returns as pl_engine_options.schedule_def.
 * The registry holds pointers: a registered def must outlive every use
 * (make it static). Registering and finding are thread-safe. */

/* Adds `def` under def->name. PL_STATUS_INVALID_ARGUMENT, with a message,
 * for a NULL def, a NULL or empty name, the name "none" (the CLI's
 * non-pipelined run), a name already registered (built-ins included),
 * or a NULL build; PL_STATUS_OUT_OF_MEMORY if the registry cannot
 * grow. */
pl_status pl_schedule_register(const pl_schedule_def *def);
/* The schedule registered as `name` (case-sensitive), or NULL with
 * PL_STATUS_INVALID_ARGUMENT and a message listing the registered
 * names. */
const pl_schedule_def *pl_schedule_find(const char *name);
/* Listing: pl_schedule_at(i) for i in [0, pl_schedule_count()) gives
 * the built-ins in the order above, then yours in registration order;
 * NULL outside. */
int pl_schedule_count(void);
const pl_schedule_def *pl_schedule_at(int index);

/* Builds every stage of `def` for (p, v, m) and checks it as an engine
 * does before its first iteration: def->check, then every F and B item of
 * every (microbatch, chunk) exactly once per stage (and every W item, or
 * none), nothing else, and no deadlock when each stage runs its list in
 * order under the task graph's dependencies (F of mb on part k needs F of
 * mb on part k−1; B of mb on part k needs F of mb on part k and B of mb
 * on part k+1; W of mb on part k needs B of mb on part k and W of mb−1 on
 * part k, gradients summing in microbatch order). An engine also knows
 * which parts share a parameter (a tied embedding) and checks that
 * order between their W items too; this function cannot. PL_STATUS_OK,
 * or PL_STATUS_INVALID_ARGUMENT with a message naming the stage, the item
 * and (for a deadlock) the dependency it waits for. */
pl_status pl_schedule_validate(const pl_schedule_def *def, int p, int v, int m);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_SCHEDULE_H */
