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

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_CHECKPOINT_H */
