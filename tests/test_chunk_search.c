/* The chunk size search picks the least-waste size on hand-made tensor
 * lists; the expected answers are worked out here by hand from the rule
 * (greedy packing in order, a tensor never spans two chunks). */
#include <stdio.h>

#include "memory/chunk.h"

static int failures;

static void check(const char *what, size_t got, size_t want) {
    if (got != want) {
        printf("FAIL %s: got %zu, want %zu\n", what, got, want);
        failures++;
    } else {
        printf("OK   %s: %zu\n", what, got);
    }
}

int main(void) {
    /* 6, 5, 5, 4: candidates 8..16 step 1.
     * c=10: [6][5,5][4] → waste 4+0+6 = 10;  c=11: [6,5][5,4] → 0+2 = 2;
     * c=16: [6,5,5][4] → 0+12 = 12;  c=20 not in range. Best: 11 (waste 2),
     * c=10: 3 chunks. Waste(11) = 2 is the unique minimum over 8..16. */
    int64_t a[] = {6, 5, 5, 4};
    pl_chunk_search_options o = {.min_chunk = 8, .search_range = 8, .n_grids = 8};
    size_t waste;
    check("least-waste size of {6,5,5,4} in 8..16", pl_chunk_search(a, 4, &o, &waste), 11);
    check("its waste", waste, 2);
    check("waste of 10 (computed independently: 4+0+6)", pl_chunk_waste(a, 4, 10), 10);

    /* A tensor larger than every candidate below it sets the start. */
    int64_t b[] = {3, 12, 3, 3};
    o = (pl_chunk_search_options){.min_chunk = 4, .search_range = 6, .n_grids = 6};
    /* start = 12: c=12: [3][12][3,3] → 9+0+6 = 15; c=15: [3,12][3,3] → 0+9 = 9;
     * c=18: [3,12,3][3] → 0+15 = 15; c=13,14,16,17 are no better than 15. */
    check("{3,12,3,3} from the largest tensor", pl_chunk_search(b, 4, &o, NULL), 15);

    /* hidden_dim steps replace the grid: from 8 by 4 → 8, 12, 16. */
    o = (pl_chunk_search_options){.min_chunk = 8, .search_range = 8, .hidden_dim = 4};
    /* c=8: [6][5][5][4] → 2+3+3+4 = 12; c=12: [6,5][5,4] → 1+3 = 4;
     * c=16: [6,5,5][4] → 0+12 = 12 → 12. */
    check("{6,5,5,4} in steps of hidden_dim 4", pl_chunk_search(a, 4, &o, NULL), 12);

    /* Everything under min_chunk: one chunk exactly the total. */
    o = (pl_chunk_search_options){.min_chunk = 100, .search_range = 8, .n_grids = 4};
    check("all tensors under min_chunk", pl_chunk_search(a, 4, &o, NULL), 20);

    /* Ties go to the smaller size: {4,4} with 8..12 → 8 (waste 0). */
    int64_t c[] = {4, 4};
    o = (pl_chunk_search_options){.min_chunk = 8, .search_range = 4, .n_grids = 4};
    check("a tie goes to the smaller size", pl_chunk_search(c, 2, &o, NULL), 8);

    /* Packing never splits a tensor: {5,5,5} in chunks of 8 → three chunks. */
    int64_t d[] = {5, 5, 5};
    int chunk_of[4];
    size_t off[4];
    check("chunks for {5,5,5} at size 8", (size_t)pl_chunk_pack(d, 3, 8, chunk_of, off), 3);
    check("a tensor larger than the chunk gets its own", (size_t)pl_chunk_pack(b, 4, 10, chunk_of, off), 3);
    return failures ? 1 : 0;
}
