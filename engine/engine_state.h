/* What checkpoint formats see of an engine (engine/engine_state.c): a
 * read-only view of the state a checkpoint records, the optimizer states
 * and master weights per parameter, the collective steps of a save or a
 * load over ranks, and the restoration of the training position. The one
 * engine header checkpoint/ includes: it never reads or writes a field of
 * struct pl_engine, and the modules (the loss scaler, clipping, ZeRO's
 * shards) keep their state to themselves. */
#ifndef PL_ENGINE_STATE_H
#define PL_ENGINE_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "optim/loss_scaler.h"
#include "pleiades.h"

typedef struct pl_engine_view {
    const pl_graph_t *graph;
    const pl_engine_options *options; /* as the engine runs them (fp16
                                         turns the loss scaler on) */
    int64_t steps;                    /* optimizer updates made */
    int accumulating;                 /* backward passes since the last one */
    int n_states;                     /* optimizer states per parameter */
    bool half;                        /* 16-bit storage */
    bool master;                      /* fp32 master weights are kept */
    int world_size;
    bool scaled;                      /* a loss scaler runs: its state */
    pl_loss_scaler_state scaler;
} pl_engine_view;

void pl_engine_view_get(const pl_engine_t *e, pl_engine_view *v);

/* Optimizer state s of parameter `param` (graph order): read into out or
 * written from in (ZeRO: from/to the whole states assembled for a
 * checkpoint between save_begin/end or load_open/close). */
pl_status pl_engine_optimizer_state_io(pl_engine_t *e, int param, int s, float *out,
                                       const float *in);
/* The fp32 master weights of parameter p (16-bit runs that keep them). */
pl_status pl_engine_master_io(pl_engine_t *e, const pl_tensor_t *p, float *out,
                              const float *in);

/* Over ranks (collective; no-ops in one process): before rank 0 writes,
 * every chunk's parameters and whole optimizer states where it can read
 * them; after, the assembled states freed. */
pl_status pl_engine_save_begin(pl_engine_t *e);
void pl_engine_save_end(pl_engine_t *e);
/* Whether any rank failed (a collective every rank joins with its own
 * verdict). */
pl_status pl_engine_ranks_any(pl_engine_t *e, bool mine, bool *any);
/* A load: whole-state buffers to read ZeRO's states into, then each
 * rank's shard taken from them (when ok) and the buffers freed. */
pl_status pl_engine_load_open(pl_engine_t *e);
void pl_engine_load_close(pl_engine_t *e, bool ok);
/* After a load: the step count, the scaler's state (NULL: as it is), no
 * pending accumulation or norm, the next backward overwriting the
 * gradients. */
void pl_engine_restore_position(pl_engine_t *e, int64_t steps,
                                const pl_loss_scaler_state *scaler);

#endif
