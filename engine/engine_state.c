/* What checkpoint formats see of an engine (see engine_state.h). */
#include "engine/engine_state.h"

#include <string.h>

#include "engine/clip.h"
#include "engine/data_parallel.h"
#include "engine/engine_internal.h"
#include "engine/loss_scaler.h"
#include "engine/pipeline_ranks.h"
#include "graph/error.h"

void pl_engine_view_get(const pl_engine_t *e, pl_engine_view *v) {
    *v = (pl_engine_view){.graph = e->g, .options = &e->opt, .steps = e->steps,
                          .accumulating = e->accumulate_step, .n_states = e->chunks.n_states,
                          .half = e->half, .master = e->chunks.master,
                          .world_size = e->rt->world_size, .scaled = e->ls != NULL};
    if (e->ls) pl_loss_scaler_get_state(e->ls, &v->scaler);
}

pl_status pl_engine_optimizer_state_io(pl_engine_t *e, int param, int s, float *out,
                                       const float *in) {
    const pl_tensor_t *p = pl_graph_param(e->g, param);
    const pl_tensor_rt *r = &e->trt[p->id];
    const pl_chunk *c = &e->chunks.chunks[r->chunk];
    /* ZeRO: the whole chunk's states assembled for the checkpoint. */
    float *whole = pl_engine_dp_ckpt_states(e, r->chunk, s);
    if (whole) {
        float *data = whole + c->offsets[r->slot];
        if (in) memcpy(data, in, (size_t)p->numel * sizeof *data);
        else if (out) memcpy(out, data, (size_t)p->numel * sizeof *data);
        return PL_STATUS_OK;
    }
    starpu_data_handle_t h = c->h_state[s];
    if (starpu_data_acquire(h, in ? STARPU_RW : STARPU_R) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "cannot acquire the optimizer state of '%s'",
                       p->name);
    float *data = (float *)starpu_vector_get_local_ptr(h) + c->offsets[r->slot];
    if (in) memcpy(data, in, (size_t)p->numel * sizeof *data);
    else if (out) memcpy(out, data, (size_t)p->numel * sizeof *data);
    starpu_data_release(h);
    return PL_STATUS_OK;
}

pl_status pl_engine_save_begin(pl_engine_t *e) {
    if (e->rt->world_size == 1) return PL_STATUS_OK;
    starpu_task_wait_for_all();
    /* ZeRO-3: the whole parameters too (collective); stages across
     * ranks: every chunk's parameters and states from a rank whose stage
     * updates it. */
    pl_status st = pl_engine_gather_params(e);
    /* Hybrid: each replica's stages share their state shards first, then
     * rank 0 gathers the shards of its stage's data-parallel ranks. */
    if (!st) st = pl_engine_pp_sync(e, true);
    if (!st && pl_engine_dp_sharded(e)) st = pl_engine_dp_states_gather(e);
    return st;
}

void pl_engine_save_end(pl_engine_t *e) { pl_engine_dp_states_close(e); }

pl_status pl_engine_ranks_any(pl_engine_t *e, bool mine, bool *any) {
    double failed = mine ? 1.0 : 0.0;
    pl_status st = pl_engine_dp_mean_results(e, &failed, 1);
    *any = failed > 0;
    return st;
}

pl_status pl_engine_load_open(pl_engine_t *e) {
    /* ZeRO: the file holds whole states (whatever world size wrote
     * them); each rank keeps its shard. */
    return pl_engine_dp_sharded(e) ? pl_engine_dp_states_open(e) : PL_STATUS_OK;
}

void pl_engine_load_close(pl_engine_t *e, bool ok) {
    if (ok && pl_engine_dp_ckpt_open(e)) pl_engine_dp_states_scatter(e);
    pl_engine_dp_states_close(e);
}

void pl_engine_restore_position(pl_engine_t *e, int64_t steps,
                                const pl_loss_scaler_state *scaler) {
    e->steps = steps;
    e->accumulate_step = 0;
    pl_clip_restart(e->clip);
    if (e->ls && scaler) pl_loss_scaler_set_state(e->ls, scaler);
    /* The next backward overwrites the gradients (as after an update). */
    pl_engine_grads_restart(e);
}
