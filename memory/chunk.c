/* Chunk packing, allocation, registration and partitioning. */
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "memory/chunk.h"
#include "util/checked_size.h"
#include "util/half.h"

int pl_chunk_pack(const int64_t *sizes, int n, size_t chunk_elems,
                  int *chunk_of, size_t *offset_of) {
    int chunk = -1;
    size_t fill = 0, cap = 0;
    for (int i = 0; i < n; i++) {
        size_t s = (size_t)sizes[i];
        if (chunk < 0 || fill + s > cap) {
            chunk++;
            fill = 0;
            cap = s > chunk_elems ? s : chunk_elems;
        }
        chunk_of[i] = chunk;
        offset_of[i] = fill;
        fill += s;
    }
    return chunk + 1;
}

size_t pl_chunk_waste(const int64_t *sizes, int n, size_t chunk_elems) {
    if (n == 0) return 0;
    int *chunk_of = malloc(n * sizeof *chunk_of);
    size_t *offset_of = malloc(n * sizeof *offset_of);
    if (!chunk_of || !offset_of) {
        free(chunk_of);
        free(offset_of);
        return SIZE_MAX;
    }
    int nc = pl_chunk_pack(sizes, n, chunk_elems, chunk_of, offset_of);
    size_t capacity = 0, used = 0;
    for (int c = 0, i = 0; c < nc; c++) {
        size_t fill = 0;
        for (; i < n && chunk_of[i] == c; i++) fill += (size_t)sizes[i];
        capacity += pl_chunk_numel(fill, chunk_elems);
        used += fill;
    }
    free(chunk_of);
    free(offset_of);
    return capacity - used;
}

static void *alloc_zeroed(size_t numel, size_t elem) {
    void *p = NULL;
    if (starpu_malloc(&p, numel * elem) != 0) return NULL;
    memset(p, 0, numel * elem);
    return p;
}

static bool is_half(const pl_chunk_set *cs) { return cs->elem != sizeof(float); }

/* Fills a chunk's parameter buffer `dst` (and its master weights, if
 * any) with the initial values of its tensors, zero elsewhere. */
static pl_status fill_params(const pl_chunk_set *cs, const pl_chunk *c, void *dst,
                             float *master, void (*init)(void *, int, float *),
                             void *ctx) {
    float *values = is_half(cs) ? (master ? master : calloc(c->numel, sizeof(float)))
                                : (float *)dst;
    if (!values) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory initialising a chunk");
    memset(values, 0, c->numel * sizeof(float));
    for (int i = 0; init && i < c->n_tensors; i++)
        init(ctx, c->tensor_ids[i], values + c->offsets[i]);
    if (is_half(cs)) pl_half_from_float(cs->bf16, values, dst, (int64_t)c->numel);
    if (values != master && values != dst) free(values);
    return PL_STATUS_OK;
}

static void register_children(pl_chunk *c) {
    struct starpu_data_filter f = {
        .filter_func = starpu_vector_filter_list,
        .nchildren = c->nparts,
        .filter_arg_ptr = c->lengths,
    };
    starpu_data_partition_plan(c->h_grad, &f, c->grad_children);
}

static pl_status chunk_init(const pl_chunk_set *cs, pl_chunk *c, const int64_t *sizes,
                            const int *ids, int first, int count, size_t chunk_elems,
                            int n_states, bool host_buffers) {
    c->used = 0;
    for (int i = 0; i < count; i++) c->used += (size_t)sizes[first + i];
    c->numel = pl_chunk_numel(c->used, chunk_elems);
    /* StarPU 1.3 vector lengths (and the children's) are 32-bit; the engine
     * refuses larger sizes up front, this keeps other callers honest. */
    if (c->numel > (size_t)PL_MAX_BUFFER_ELEMS)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "a chunk of %zu floats exceeds %lld, the most one buffer holds",
                       c->numel, (long long)PL_MAX_BUFFER_ELEMS);
    c->n_tensors = count;
    c->nparts = count + (c->numel > c->used);
    c->tensor_ids = malloc(count * sizeof *c->tensor_ids);
    c->offsets = malloc(count * sizeof *c->offsets);
    c->lengths = malloc(c->nparts * sizeof *c->lengths);
    c->grad_children = calloc(c->nparts, sizeof *c->grad_children);
    if (host_buffers) {
        c->param = alloc_zeroed(c->numel, cs->elem);
        c->grad = alloc_zeroed(c->numel, cs->elem);
        if (is_half(cs) && cs->master) c->master = alloc_zeroed(c->numel, sizeof(float));
    }
    bool ok = c->tensor_ids && c->offsets && c->lengths && c->grad_children &&
              (!host_buffers || (c->param && c->grad &&
                                 (c->master || !is_half(cs) || !cs->master)));
    for (int s = 0; s < n_states; s++) {
        c->state[s] = alloc_zeroed(c->numel, sizeof(float));
        ok = ok && c->state[s];
    }
    if (!ok)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY,
                       "out of memory allocating a chunk of %zu floats", c->numel);
    size_t off = 0;
    for (int i = 0; i < count; i++) {
        c->tensor_ids[i] = ids[first + i];
        c->offsets[i] = off;
        c->lengths[i] = (uint32_t)sizes[first + i];
        off += (size_t)sizes[first + i];
    }
    if (c->nparts > (unsigned)count) c->lengths[count] = (uint32_t)(c->numel - c->used);
    return PL_STATUS_OK;
}

/* A StarPU-allocated handle (home -1: counted against the memory budget
 * and evictable) of zeros, written through a write acquire. */
static starpu_data_handle_t register_zeroed(size_t numel, size_t elem) {
    starpu_data_handle_t h;
    starpu_vector_data_register(&h, -1, 0, (uint32_t)numel, elem);
    starpu_data_acquire(h, STARPU_W);
    memset((void *)starpu_vector_get_local_ptr(h), 0, numel * elem);
    starpu_data_release(h);
    return h;
}

static pl_status register_managed(pl_chunk_set *cs, pl_chunk *c,
                                  void (*init)(void *, int, float *), void *ctx) {
    c->h_grad = register_zeroed(c->numel, cs->elem);
    for (int s = 0; s < cs->n_states; s++)
        c->h_state[s] = register_zeroed(c->numel, sizeof(float));
    starpu_vector_data_register(&c->h_param, -1, 0, (uint32_t)c->numel, cs->elem);
    float *master = NULL;
    if (is_half(cs) && cs->master) {
        starpu_vector_data_register(&c->h_master, -1, 0, (uint32_t)c->numel, sizeof(float));
        starpu_data_acquire(c->h_master, STARPU_W);
        master = (float *)starpu_vector_get_local_ptr(c->h_master);
    }
    starpu_data_acquire(c->h_param, STARPU_W);
    pl_status st = fill_params(cs, c, (void *)starpu_vector_get_local_ptr(c->h_param),
                               master, init, ctx);
    starpu_data_release(c->h_param);
    if (master) starpu_data_release(c->h_master);
    return st;
}

pl_status pl_chunk_set_create(pl_chunk_set *cs, const int64_t *sizes,
                              const int *ids, int n, size_t chunk_elems,
                              int n_states, bool managed, const pl_chunk_format *fmt,
                              void (*init)(void *ctx, int id, float *dst),
                              void *ctx) {
    memset(cs, 0, sizeof *cs);
    cs->n_states = n_states;
    cs->managed = managed;
    cs->elem = fmt && fmt->elem ? fmt->elem : sizeof(float);
    cs->bf16 = fmt && fmt->bf16;
    cs->master = fmt && fmt->master && is_half(cs);
    int *chunk_of = malloc((n ? n : 1) * sizeof *chunk_of);
    size_t *offset_of = malloc((n ? n : 1) * sizeof *offset_of);
    if (!chunk_of || !offset_of) {
        free(chunk_of);
        free(offset_of);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory packing chunks");
    }
    cs->n = n ? pl_chunk_pack(sizes, n, chunk_elems, chunk_of, offset_of) : 0;
    cs->chunks = calloc(cs->n ? cs->n : 1, sizeof *cs->chunks);
    pl_status st = cs->chunks ? PL_STATUS_OK
                              : pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int c = 0, i = 0; st == PL_STATUS_OK && c < cs->n; c++) {
        int first = i;
        while (i < n && chunk_of[i] == c) i++;
        st = chunk_init(cs, &cs->chunks[c], sizes, ids, first, i - first,
                        chunk_elems, managed ? 0 : n_states, !managed);
    }
    free(chunk_of);
    free(offset_of);
    if (st != PL_STATUS_OK) {
        pl_chunk_set_destroy(cs);
        return st;
    }
    for (int c = 0; c < cs->n && managed && st == PL_STATUS_OK; c++)
        st = register_managed(cs, &cs->chunks[c], init, ctx);
    for (int c = 0; c < cs->n && !managed && st == PL_STATUS_OK; c++) {
        pl_chunk *ch = &cs->chunks[c];
        st = fill_params(cs, ch, ch->param, ch->master, init, ctx);
        if (st) break;
        starpu_vector_data_register(&ch->h_param, STARPU_MAIN_RAM,
                                    (uintptr_t)ch->param, ch->numel, cs->elem);
        starpu_vector_data_register(&ch->h_grad, STARPU_MAIN_RAM,
                                    (uintptr_t)ch->grad, ch->numel, cs->elem);
        if (ch->master)
            starpu_vector_data_register(&ch->h_master, STARPU_MAIN_RAM,
                                        (uintptr_t)ch->master, ch->numel, sizeof(float));
        for (int s = 0; s < n_states; s++)
            starpu_vector_data_register(&ch->h_state[s], STARPU_MAIN_RAM,
                                        (uintptr_t)ch->state[s], ch->numel,
                                        sizeof(float));
        register_children(ch);
    }
    if (st != PL_STATUS_OK) pl_chunk_set_destroy(cs);
    return st;
}

void pl_chunk_set_partition(pl_chunk_set *cs) {
    if (cs->partitioned || cs->managed) return;
    for (int c = 0; c < cs->n; c++) {
        pl_chunk *ch = &cs->chunks[c];
        starpu_data_partition_submit(ch->h_grad, ch->nparts, ch->grad_children);
    }
    cs->partitioned = true;
}

void pl_chunk_set_unpartition(pl_chunk_set *cs) {
    if (!cs->partitioned) return;
    for (int c = 0; c < cs->n; c++) {
        pl_chunk *ch = &cs->chunks[c];
        starpu_data_unpartition_submit(ch->h_grad, ch->nparts,
                                       ch->grad_children, STARPU_MAIN_RAM);
    }
    cs->partitioned = false;
}

void pl_chunk_set_destroy(pl_chunk_set *cs) {
    for (int c = 0; c < cs->n && cs->chunks; c++) {
        pl_chunk *ch = &cs->chunks[c];
        if (ch->h_master) starpu_data_unregister(ch->h_master);
        if (ch->h_param && cs->managed) {
            starpu_data_unregister(ch->h_param);
            starpu_data_unregister(ch->h_grad);
            for (int s = 0; s < cs->n_states; s++)
                if (ch->h_state[s]) starpu_data_unregister(ch->h_state[s]);
        } else if (ch->h_param) {
            pl_chunk_set_unpartition(cs); /* no-op after the first chunk */
            starpu_data_partition_clean(ch->h_grad, ch->nparts, ch->grad_children);
            starpu_data_unregister(ch->h_param);
            starpu_data_unregister(ch->h_grad);
            for (int s = 0; s < cs->n_states; s++)
                if (ch->h_state[s]) starpu_data_unregister(ch->h_state[s]);
        }
        if (ch->param) starpu_free(ch->param);
        if (ch->grad) starpu_free(ch->grad);
        if (ch->master) starpu_free(ch->master);
        for (int s = 0; s < cs->n_states; s++)
            if (ch->state[s]) starpu_free(ch->state[s]);
        free(ch->tensor_ids);
        free(ch->offsets);
        free(ch->lengths);
        free(ch->grad_children);
    }
    free(cs->chunks);
    memset(cs, 0, sizeof *cs);
}
