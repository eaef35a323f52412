/*
 * pleiades/checkpoint.h — weights to and from safetensors files (part of
 * pleiades.h). Saves are atomic; loads are all-or-nothing.
 *
 *   const char *keys[1] = {"model"}, *vals[1] = {"mlp"};
 *   if (pl_engine_save_safetensors(e, "m.safetensors", keys, vals, 1))
 *       fprintf(stderr, "%s\n", pl_last_error());
 *   pl_engine_load_safetensors(e, "m.safetensors");
 */
#ifndef PLEIADES_CHECKPOINT_H
#define PLEIADES_CHECKPOINT_H

#include "pleiades/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ checkpoints */

/* Writes every parameter (F32, named and shaped as in the graph) to a
 * safetensors file, with optional string metadata. The file is written to
 * a temporary name and renamed, so a failure never leaves a partial file. */
pl_status pl_engine_save_safetensors(pl_engine_t *e, const char *path,
                                     const char *const *meta_keys,
                                     const char *const *meta_values, int n_meta);
/* Loads every parameter of the engine's graph from a safetensors file by
 * name; a missing tensor, wrong dtype or shape is an error naming it, and
 * then no parameter is changed. */
pl_status pl_engine_load_safetensors(pl_engine_t *e, const char *path);
/* Reads one metadata value of a safetensors file into value[size]. */
pl_status pl_safetensors_metadata(const char *path, const char *key,
                                  char *value, size_t size);

/* -------------------------------------------------------- full checkpoints
 *
 * A checkpoint is a directory from which training resumes exactly (the
 * same losses and parameters, bit for bit, as a run that never stopped):
 *   model.safetensors      the weights (as pl_engine_save_safetensors)
 *   optimizer.safetensors  the optimizer states, named after their
 *                          parameter: "<param>.exp_avg" and
 *                          "<param>.exp_avg_sq" (AdamW),
 *                          "<param>.momentum_buffer" (SGD)
 *   state.json             the step, the optimizer and LR-schedule options,
 *                          the caller's values (data position, seeds), and
 *                          each file's size and CRC32C, checked on load
 *   .pleiades-checkpoint   the marker: only a directory holding it is ever
 *                          replaced or pruned by Pleiades
 * It is written under "<dir>.tmp.<pid>" and renamed into place, so a save
 * killed at any moment leaves earlier checkpoints untouched and no
 * half-written `dir`.
 *
 *   pl_checkpoint_values v = {0};
 *   pl_checkpoint_values_set(&v, "epoch", epoch);
 *   pl_engine_save_checkpoint(e, "ckpt/step-100", &v);
 *   ...
 *   char path[4096];
 *   if (pl_checkpoint_latest("ckpt", path, sizeof path) == PL_STATUS_OK)
 *       pl_engine_load_checkpoint(e, path, &v);   // then epoch = v.value[..]
 */
#define PL_CHECKPOINT_MAX_VALUES 16

/* Named integers a caller keeps with a checkpoint. */
typedef struct pl_checkpoint_values {
    int n;
    char key[PL_CHECKPOINT_MAX_VALUES][32];
    int64_t value[PL_CHECKPOINT_MAX_VALUES];
} pl_checkpoint_values;

/* Sets (or adds) `key`; fails when full or the key is empty or too long. */
pl_status pl_checkpoint_values_set(pl_checkpoint_values *v, const char *key,
                                   int64_t value);
/* The value of `key`, or PL_STATUS_INVALID_ARGUMENT naming it. */
pl_status pl_checkpoint_values_get(const pl_checkpoint_values *v, const char *key,
                                   int64_t *value);

/* Saves the engine's weights, optimizer states and step to directory `dir`
 * (replacing a checkpoint there; anything else there is refused, never
 * replaced), with the caller's values (may be NULL).
 * Between optimizer updates only: refused in the middle of a gradient
 * accumulation (the partial sums are not saved). Data parallel (dp > 1):
 * every rank calls it (ZeRO's optimizer-state shards are gathered), rank 0
 * alone writes, in the one-process format: any number of ranks, ZeRO or
 * not, can load it (each ZeRO rank keeps its shard). */
pl_status pl_engine_save_checkpoint(pl_engine_t *e, const char *dir,
                                    const pl_checkpoint_values *values);
/* Loads a checkpoint into an engine built with the same model and
 * optimizer: weights, optimizer states and step count (so the LR schedule
 * and AdamW's bias correction continue where they were); `values` (may be
 * NULL) receives the caller's values. Everything is read and checked
 * before anything changes: a different model shape, optimizer, a file
 * whose size or CRC32C differs from what state.json recorded, or a bad
 * file is refused with a message naming the file and the mismatch, and the
 * engine is left as it was. Values that restate a field are checked
 * against it: "step" (at least the file's step; equal without a loss
 * scaler, which may skip updates) and "accumulate" (accumulate_size). */
pl_status pl_engine_load_checkpoint(pl_engine_t *e, const char *dir,
                                    pl_checkpoint_values *values);
/* The caller's values of checkpoint `dir` alone, without an engine (what
 * a tool needs to rebuild the model it saved, say); the file's format is
 * checked, nothing else. */
pl_status pl_checkpoint_read_values(const char *dir, pl_checkpoint_values *values);
/* Of the checkpoints "<root>/step-<N>", the path of the one with the
 * largest N (PL_STATUS_IO_ERROR when there is none). */
pl_status pl_checkpoint_latest(const char *root, char *path, size_t size);
/* The N of every "<root>/step-<N>", ascending, in *steps (caller frees;
 * *n of them). */
pl_status pl_checkpoint_steps(const char *root, int64_t **steps, int *n);
/* `path` itself when it is a checkpoint (holds state.json), else its
 * newest "step-<N>" (pl_checkpoint_latest). */
pl_status pl_checkpoint_find(const char *path, char *out, size_t size);
/* What --resume does: loads `path` when it is one checkpoint (refused as
 * pl_engine_load_checkpoint refuses), or, when it is a root of
 * "step-<N>" checkpoints, the newest of them that passes every check
 * (each newer one that fails, a damaged file say, is named on stderr with
 * why, and so is the one resumed instead). The path loaded goes to
 * loaded[size]. */
pl_status pl_engine_resume_checkpoint(pl_engine_t *e, const char *path,
                                      pl_checkpoint_values *values, char *loaded,
                                      size_t size);
/* Removes all but the keep_last (>= 1) newest "<root>/step-<N>" that
 * Pleiades wrote (a save marks its directory with a ".pleiades-checkpoint"
 * file). A "step-<N>" that is a symbolic link, a file, or a directory
 * without the marker is never removed nor counted: it is left as it is,
 * and named in a warning on stderr. */
pl_status pl_checkpoint_prune(const char *root, int keep_last);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_CHECKPOINT_H */
