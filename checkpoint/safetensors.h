/* safetensors files of any list of F32 tensors (checkpoint/safetensors.c):
 * the engine's parameters (pl_engine_save_safetensors) and a checkpoint's
 * optimizer states are both such lists. Writes are atomic; reads validate
 * the whole file and read every wanted tensor before returning. */
#ifndef PL_CHECKPOINT_SAFETENSORS_H
#define PL_CHECKPOINT_SAFETENSORS_H

#include <stdint.h>

#include "pleiades.h"

/* One F32 tensor of a file: its name (unique in the list) and shape. */
typedef struct pl_st_entry {
    const char *name;
    int ndim;
    int64_t shape[PL_MAX_DIMS];
    int64_t numel;
} pl_st_entry;

/* Fills out[entry i's numel] with tensor i's values. */
typedef pl_status (*pl_st_get_fn)(void *ctx, int i, float *out);

/* Writes the n tensors (values from get) and the string metadata to path,
 * atomically. */
pl_status pl_st_write(const char *path, const pl_st_entry *entries, int n, pl_st_get_fn get,
                      void *ctx, const char *const *meta_keys,
                      const char *const *meta_values, int n_meta);
/* Reads the n tensors from path into *values (back to back in list
 * order; caller frees): each must be present with dtype F32 and the
 * entry's shape, else an error naming the file and the tensor. `what`
 * words a missing tensor's owner ("the model"). */
pl_status pl_st_read(const char *path, const pl_st_entry *entries, int n, const char *what,
                     float **values);

/* The engine's parameters as entries (names point into the graph);
 * caller frees. */
pl_status pl_st_param_entries(const pl_graph_t *g, pl_st_entry **out, int *n);

#endif
