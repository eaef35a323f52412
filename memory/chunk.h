/* Chunks: model state packed into contiguous buffers (Colossal-AI's chunk
 * idea). Each chunk is one StarPU vector handle per kind of state
 * (parameters, gradients, optimizer states). Layer tasks read parameters
 * through the whole chunk's handle at the tensor's offset (many readers
 * share it; only the optimizer writes it), and write gradients through
 * per-tensor children of the gradient handle (so that weight-gradient
 * tasks of one chunk run side by side), while optimizer tasks work on
 * whole chunks. This is the unit the memory manager places and moves. */
#ifndef PL_MEMORY_CHUNK_H
#define PL_MEMORY_CHUNK_H

#include <starpu.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pleiades.h"

#define PL_CHUNK_MAX_STATES 2 /* AdamW m and v; SGD uses one */

typedef struct pl_chunk {
    size_t numel;              /* elements, padding included */
    size_t used;               /* elements holding tensors */
    int n_tensors;
    int *tensor_ids;           /* caller's ids, in packing order */
    size_t *offsets;           /* element offset of each tensor */
    /* Parameters and gradients: floats, or 16-bit values with a 16-bit
     * chunk set (pl_chunk_set.elem == 2). */
    void *param, *grad;
    float *state[PL_CHUNK_MAX_STATES];
    float *master;             /* fp32 master weights (16-bit sets), else NULL */
    starpu_data_handle_t h_param, h_grad, h_state[PL_CHUNK_MAX_STATES], h_master;
    unsigned nparts;           /* children: one per tensor (+1 padding) */
    uint32_t *lengths;
    starpu_data_handle_t *grad_children;
} pl_chunk;

typedef struct pl_chunk_set {
    int n;
    pl_chunk *chunks;
    int n_states;
    /* Mixed precision: parameters and gradients are stored in `elem`
     * bytes (4: fp32; 2: bf16 when bf16, else fp16), optimizer states in
     * fp32, and with `master` the fp32 master weights the optimizer
     * updates, whose rounding is the 16-bit parameters. */
    size_t elem;
    bool bf16, master;
    bool partitioned;          /* gradient children (not parents) are live */
    bool managed;              /* StarPU-allocated (home -1) whole chunks
                                  that a placement policy moves between
                                  tiers; never partitioned (StarPU 1.3
                                  livelocks evicting partitioned data), so
                                  tasks take the chunk plus an offset */
} pl_chunk_set;

/* Elements of a chunk holding `used` elements of tensors: the chunk size,
 * or more for a tensor larger than it (which gets its own chunk). */
static inline size_t pl_chunk_numel(size_t used, size_t chunk_elems) {
    return used > chunk_elems ? used : chunk_elems;
}

/* Packs tensors of the given sizes, in the given (first-use) order, into
 * chunks of `chunk_elems` elements greedily: a tensor never spans two
 * chunks; one larger than chunk_elems gets a chunk of its own size. Writes
 * each tensor's chunk index and offset; returns the number of chunks.
 * Pure function (no StarPU), so the packing is testable by itself. */
int pl_chunk_pack(const int64_t *sizes, int n, size_t chunk_elems,
                  int *chunk_of, size_t *offset_of);

/* Elements a packing wastes (chunk capacity minus tensor elements). */
size_t pl_chunk_waste(const int64_t *sizes, int n, size_t chunk_elems);

/* The chunk size search's knobs, in elements (Colossal-AI: search_range,
 * n_grids or hidden_dim, min_chunk_size). */
typedef struct pl_chunk_search_options {
    size_t min_chunk;
    size_t search_range;
    int n_grids;
    int64_t hidden_dim; /* > 0: step by this instead of n_grids */
} pl_chunk_search_options;

/* The least-waste chunk size for tensors of `sizes` in use order; its
 * waste (elements) in *waste when not NULL (memory/chunk_search.c). */
size_t pl_chunk_search(const int64_t *sizes, int n,
                       const pl_chunk_search_options *o, size_t *waste);

/* How a chunk set stores parameters and gradients (see pl_chunk_set). */
typedef struct pl_chunk_format {
    size_t elem;      /* 4 (fp32) or 2 */
    bool bf16;        /* elem 2: bf16, else fp16 */
    bool master;      /* elem 2: keep fp32 master weights */
} pl_chunk_format;

/* Bytes of state per element of a chunk: parameter, gradient, optimizer
 * states and master weights. */
static inline size_t pl_chunk_format_bytes(const pl_chunk_format *f, int n_states) {
    return 2 * f->elem + (size_t)n_states * sizeof(float) +
           (f->elem != sizeof(float) && f->master ? sizeof(float) : 0);
}

/* Allocates and registers the chunks of a packing; `init` fills the fp32
 * parameter values of tensor i (given its caller id) before registration
 * (a 16-bit set keeps them as master weights and stores their rounding).
 * Gradients and states start at zero. */
pl_status pl_chunk_set_create(pl_chunk_set *cs, const int64_t *sizes,
                              const int *ids, int n, size_t chunk_elems,
                              int n_states, bool managed, const pl_chunk_format *fmt,
                              void (*init)(void *ctx, int id, float *dst),
                              void *ctx);
void pl_chunk_set_destroy(pl_chunk_set *cs);

/* Submits the partitioning of every gradient chunk into its per-tensor
 * children (no-op if already partitioned), or its undoing. Both are
 * asynchronous: StarPU orders them after the tasks already submitted.
 * Parameter chunks are never partitioned: an unpartitioning submits an
 * invalidation per child (0.2 ms of the submitting thread per step, on a
 * core a worker needs), and reading the whole chunk costs a task one
 * buffer per chunk instead of one per tensor. Measured, bench_pipeline
 * three runs each: non-pipelined worst-worker idle 5.2-5.3 % -> 4.2-4.5 %
 * (8 tiles) and 1.9-2.0 % -> 1.3-1.9 % (2 tiles), ZB-H1's step 65.3-65.4
 * -> 63.4-63.8 ms. */
void pl_chunk_set_partition(pl_chunk_set *cs);
void pl_chunk_set_unpartition(pl_chunk_set *cs);

#endif
