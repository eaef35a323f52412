/* The chunk size search picks the least-waste size on hand-made tensor
 * lists; the expected answers are worked out here by hand from the rule
 * (greedy packing in order, a tensor never spans two chunks). Then the
 * engine's public knobs (GeminiPlugin's search_range_m, min_chunk_size_m,
 * hidden_dim; Lightning's chunk_search_n_grids) on a GPT: the chunk size
 * an engine picks is the one a brute force over the knobs' candidates
 * finds here, and bad knob values are refused by name. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "memory/chunk.h"
#include "pleiades.h"

static int failures;

/* Waste of packing `sizes` greedily into chunks of c (a tensor larger
 * than c gets a chunk of its own size), written here without the
 * library's packer. */
static size_t brute_waste(const int64_t *sizes, int n, size_t c) {
    size_t waste = 0, room = 0;
    bool open = false;
    for (int i = 0; i < n; i++) {
        size_t t = (size_t)sizes[i];
        if (t > c) { /* its own chunk, exactly its size */
            if (open) waste += room;
            open = false;
            continue;
        }
        if (!open || t > room) {
            if (open) waste += room;
            open = true;
            room = c;
        }
        room -= t;
    }
    return waste + (open ? room : 0);
}

/* One set of the search's knobs, named for messages. */
typedef struct knob_set {
    const char *what;
    double range_m, min_m;
    int64_t hidden;
    int grids;
} knob_set;

static pl_engine_t *engine_with(pl_runtime_t *rt, pl_graph_t *g, const knob_set *k) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = 2;
    eo.search_range_m = k->range_m;
    eo.min_chunk_size_m = k->min_m;
    eo.hidden_dim = k->hidden;
    eo.chunk_search_n_grids = k->grids;
    return pl_engine_new(rt, g, &eo);
}

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

    /* The engine's knobs, on a GPT of 0.4 M parameters. */
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    pl_graph_t *g = pl_graph_new(3);
    pl_gpt_config cfg = {.vocab = 256, .context = 32, .channels = 96, .layers = 2, .heads = 2};
    pl_gpt_model gm;
    if (!rt || !g || pl_gpt_build(g, &cfg, &gm) != PL_STATUS_OK) {
        printf("FAIL set-up: %s\n", pl_last_error());
        return 1;
    }
    int np = pl_graph_num_params(g);
    int64_t sizes[256], total = 0, largest = 0;
    for (int i = 0; i < np && i < 256; i++) {
        sizes[i] = pl_tensor_numel(pl_graph_param(g, i));
        total += sizes[i];
        if (sizes[i] > largest) largest = sizes[i];
    }
    const knob_set knobs[] = {
        {"GeminiPlugin's defaults (32, 32, 1024): one chunk", 32, 32, 1024, 0},
        {"min 1/8 Mi, range 1/16 Mi in hidden_dim 4096 steps", 0.0625, 0.125, 4096, 0},
        {"min 1/8 Mi, range 1/16 Mi in 4 grids (Lightning)", 0.0625, 0.125, 0, 4},
        {"min 1/16 Mi, range 1/4 Mi in 1000-element steps", 0.25, 0.0625, 1000, 0},
    };
    for (int k = 0; k < 4; k++) {
        pl_engine_t *e = engine_with(rt, g, &knobs[k]);
        if (!e) {
            printf("FAIL %s: %s\n", knobs[k].what, pl_last_error());
            failures++;
            continue;
        }
        /* Brute force: every candidate, the least waste, ties to the
         * smaller; all under the minimum is one chunk of the total. */
        size_t min = (size_t)(knobs[k].min_m * 1048576), want = (size_t)total;
        if ((size_t)total > min) {
            size_t start = (size_t)largest > min ? (size_t)largest : min;
            size_t range = (size_t)(knobs[k].range_m * 1048576);
            size_t step = knobs[k].hidden ? (size_t)knobs[k].hidden : range / (size_t)knobs[k].grids;
            size_t best_waste = (size_t)-1;
            for (size_t c = start; c <= start + range; c += step) {
                size_t w = brute_waste(sizes, np, c);
                if (w < best_waste) best_waste = w, want = c;
            }
        }
        size_t got = 0;
        for (int c = 0; c < pl_engine_num_chunks(e); c++)
            if (pl_engine_chunk_elems(e, c) > got) got = pl_engine_chunk_elems(e, c);
        check(knobs[k].what, got, want);
        pl_engine_free(e);
    }
    /* Bad knobs: refused, naming the knob (`what`). */
    const knob_set bad[] = {{"search_range_m", -1, 0, 0, 0}, {"search_range_m", NAN, 0, 0, 0},
               {"min_chunk_size_m", 0, 4096, 0, 0}, {"hidden_dim", 0, 0, -5, 0},
               {"chunk_search_n_grids", 0, 0, 0, -1}, {"hidden_dim", 2048, 0, 1, 0}};
    for (int k = 0; k < 6; k++) {
        pl_engine_t *e = engine_with(rt, g, &bad[k]);
        bool named = !e && strstr(pl_last_error(), bad[k].what);
        printf("%s bad %s refused: %s\n", named ? "OK  " : "FAIL", bad[k].what,
               e ? "(accepted)" : pl_last_error());
        if (!named) failures++;
        pl_engine_free(e);
    }
    pl_graph_free(g);
    pl_runtime_free(rt);
    return failures ? 1 : 0;
}
