/* Chunk size search (Colossal-AI's search_chunk_configuration): among
 * candidate sizes from max(min_chunk, largest tensor) up to that plus
 * search_range, in n_grids steps (or steps of hidden_dim), pick the one
 * that wastes the least space when the tensors are packed greedily in use
 * order, a tensor never spanning two chunks. Ties go to the smaller size
 * (less memory per move). If everything fits under min_chunk, one chunk
 * holds all tensors. */
#include "memory/chunk.h"

size_t pl_chunk_search(const int64_t *sizes, int n,
                       const pl_chunk_search_options *o, size_t *waste) {
    size_t largest = 0, total = 0;
    for (int i = 0; i < n; i++) {
        if ((size_t)sizes[i] > largest) largest = (size_t)sizes[i];
        total += (size_t)sizes[i];
    }
    if (waste) *waste = 0;
    if (n == 0) return o->min_chunk ? o->min_chunk : 1;
    if (total <= o->min_chunk) return total;
    size_t start = largest > o->min_chunk ? largest : o->min_chunk;
    size_t step = o->hidden_dim > 0 ? (size_t)o->hidden_dim
                  : o->n_grids > 0   ? o->search_range / (size_t)o->n_grids
                                     : o->search_range;
    if (step == 0) step = 1;
    /* At most 2^24 candidates (each costs a packing): a finer step than
     * that over a wide range is coarsened. */
    if (o->search_range / step > (size_t)1 << 24) step = o->search_range >> 24;
    size_t best = start, best_waste = SIZE_MAX;
    for (size_t c = start; c <= start + o->search_range; c += step) {
        size_t w = pl_chunk_waste(sizes, n, c);
        if (w < best_waste) {
            best_waste = w;
            best = c;
        }
        if (step == 0 || c > SIZE_MAX - step) break;
    }
    if (waste) *waste = best_waste;
    return best;
}
