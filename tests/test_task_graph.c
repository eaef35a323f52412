/* The tasks of one training iteration match what the graph implies.
 *
 * Model: x → fc1 → relu → fc2 → gelu → head → cross_entropy (+ accuracy),
 * batch 12 in 3 tiles, 2 CPU workers, profiling on and record_tasks; once
 * with the default chunk size (one chunk) and once with a small one so the
 * parameters span three chunks. After
 * pl_engine_forward_backward (training) and pl_engine_optimizer_step, the
 * recorded tasks must be exactly (as a multiset):
 *   per tile t: <layer>.F.t for every layer, <loss>.L.t (loss and dlogits
 *   fused), <accuracy>.F.t; <layer>.B.t for every layer whose input needs
 *   a gradient (not fc1: its input is the data); <linear>.W.t for every
 *   linear layer;
 *   per chunk c: opt.c.
 * The expected list is computed from the layer chain built here, with op
 * names read back from the graph (pl_tensor_name of each op's output), so
 * the generated "<kind><index>" names are never hard-coded.
 *
 * Dependencies are checked on the recorded start/end times (one monotonic
 * clock for all workers): a task that depends on another cannot start
 * before that one ended, whichever worker ran it. Checked: the forward
 * chain per tile; loss and metric after the logits; every B/W of a layer
 * after the task that produced its output gradient; the W tasks of one
 * layer, which accumulate into one gradient, in tile order without
 * overlap; every optimizer task after every W task that writes a gradient
 * in its chunk. (Only those: opt.c1 may well start while fc1.W, whose
 * gradients live in chunk 0, still runs; that overlap is the point of
 * per-chunk optimizer tasks. With one chunk this is "after all W tasks".)
 *
 * The iteration is run twice and both are checked: records must restart
 * with each step.
 *
 * Exit status 0 on success; every failed check prints a FAIL line. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/chunk.h" /* pl_chunk_pack: which chunk holds a parameter */
#include "pleiades.h"
#include "test_util.h"

enum { IN = 16, HID = 32, CLASSES = 10, BATCH = 12, TILES = 3 };
/* Parameters: 512 + 32 | 1024 | 32 + 320 + 10 with chunks of 1024
 * elements: three chunks (a tensor never spans two). */
#define SMALL_CHUNK_ELEMS 1024
/* The engine's default (pl_engine_options.chunk_elems = 0). */
#define DEFAULT_CHUNK_ELEMS ((size_t)1 << 20)

/* One layer of the chain, in forward order. */
typedef struct layer {
    const char *kind;     /* what its generated/given name starts with */
    bool linear;          /* has weights: a W task per tile */
    bool input_needs_grad;/* a B task per tile */
    pl_tensor_t *out;
    const char *name;     /* op name = its output tensor's name */
    unsigned chunk_mask;  /* bit c: a gradient its W task writes is in chunk c */
} layer;

enum { N_LAYERS = 5 };

typedef struct model {
    pl_graph_t *g;
    layer layers[N_LAYERS];
    const char *loss_name, *acc_name;
} model;

static bool starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool build(model *m) {
    m->g = pl_graph_new(3);
    int64_t shape[1] = {IN};
    pl_tensor_t *x = pl_graph_input(m->g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *y = pl_graph_input(m->g, "y", PL_DTYPE_I32, 0, NULL);
    layer *L = m->layers;
    L[0] = (layer){"fc1", true, false, pl_linear(m->g, x, HID, "fc1"), NULL, 0};
    L[1] = (layer){"relu", false, true, pl_relu(m->g, L[0].out), NULL, 0};
    L[2] = (layer){"fc2", true, true, pl_linear(m->g, L[1].out, HID, "fc2"), NULL, 0};
    L[3] = (layer){"gelu", false, true, pl_gelu(m->g, L[2].out), NULL, 0};
    L[4] = (layer){"head", true, true, pl_linear(m->g, L[3].out, CLASSES, "head"),
                   NULL, 0};
    pl_tensor_t *loss = pl_cross_entropy(m->g, L[4].out, y);
    pl_tensor_t *acc = pl_accuracy(m->g, L[4].out, y);
    if (!loss || !acc || pl_graph_set_loss(m->g, loss) != PL_STATUS_OK) {
        printf("FAIL: building the graph: %s\n", pl_last_error());
        return false;
    }
    for (int i = 0; i < N_LAYERS; i++) {
        L[i].name = pl_tensor_name(L[i].out);
        CHECK(starts_with(L[i].name, L[i].kind), "layer %d is named '%s', "
              "expected a name starting with '%s'", i, L[i].name, L[i].kind);
    }
    m->loss_name = pl_tensor_name(loss);
    m->acc_name = pl_tensor_name(acc);
    CHECK(starts_with(m->loss_name, "cross_entropy"), "loss op named '%s'",
          m->loss_name);
    CHECK(starts_with(m->acc_name, "accuracy"), "accuracy op named '%s'",
          m->acc_name);
    return true;
}

/* Which chunks the W task of each linear layer writes into: the engine
 * packs parameters in index (creation) order with pl_chunk_pack; the result
 * is cross-checked against the engine's chunk count and sizes. */
static bool map_chunks(model *m, const pl_engine_t *e, size_t chunk_elems) {
    int n = pl_graph_num_params(m->g);
    int64_t sizes[16], largest = 0;
    int chunk_of[16];
    size_t offset_of[16];
    if (n > 16) return false;
    for (int i = 0; i < n; i++) {
        sizes[i] = pl_tensor_numel(pl_graph_param(m->g, i));
        if (sizes[i] > largest) largest = sizes[i];
    }
    if (chunk_elems == 0)
        chunk_elems = (size_t)largest > DEFAULT_CHUNK_ELEMS ? (size_t)largest
                                                            : DEFAULT_CHUNK_ELEMS;
    int chunks = pl_chunk_pack(sizes, n, chunk_elems, chunk_of, offset_of);
    CHECK(chunks == pl_engine_num_chunks(e),
          "packing gives %d chunks, the engine has %d", chunks,
          pl_engine_num_chunks(e));
    for (int c = 0; c < chunks; c++) {
        size_t used = 0;
        for (int i = 0; i < n; i++)
            if (chunk_of[i] == c) used += (size_t)sizes[i];
        CHECK(used <= pl_engine_chunk_elems(e, c),
              "chunk %d holds %zu elements but has %zu", c, used,
              pl_engine_chunk_elems(e, c));
    }
    for (int l = 0; l < N_LAYERS; l++) {
        layer *L = &m->layers[l];
        L->chunk_mask = 0;
        if (!L->linear) continue;
        char wname[80], bname[80];
        snprintf(wname, sizeof wname, "%s.weight", L->name);
        snprintf(bname, sizeof bname, "%s.bias", L->name);
        for (int i = 0; i < n; i++) {
            const char *pn = pl_tensor_name(pl_graph_param(m->g, i));
            if (strcmp(pn, wname) == 0 || strcmp(pn, bname) == 0)
                L->chunk_mask |= 1u << chunk_of[i];
        }
        CHECK(L->chunk_mask != 0, "no parameters found for layer %s", L->name);
    }
    return true;
}

/* ------------------------------------------------------- expected names */

typedef struct name_list {
    int n;
    char (*names)[64];
} name_list;

static void add_name(name_list *l, const char *op, const char *phase, int tile) {
    if (tile >= 0)
        snprintf(l->names[l->n++], 64, "%s.%s.t%d", op, phase, tile);
    else
        snprintf(l->names[l->n++], 64, "%s", op);
}

static void expected_names(const model *m, int chunks, name_list *l) {
    for (int t = 0; t < TILES; t++) {
        for (int i = 0; i < N_LAYERS; i++) {
            const layer *L = &m->layers[i];
            add_name(l, L->name, "F", t);
            if (L->input_needs_grad) add_name(l, L->name, "B", t);
            if (L->linear) add_name(l, L->name, "W", t);
        }
        add_name(l, m->loss_name, "L", t);
        add_name(l, m->acc_name, "F", t);
    }
    for (int c = 0; c < chunks; c++) {
        char opt[32];
        snprintf(opt, sizeof opt, "opt.c%d", c);
        add_name(l, opt, NULL, -1);
    }
}

static int cmp_names(const void *a, const void *b) { return strcmp(a, b); }

/* Compares the multisets by sorting both and walking them together, so
 * every missing and every unexpected (or duplicated) name is reported. */
static void check_multiset(name_list *want, name_list *got) {
    qsort(want->names, want->n, sizeof *want->names, cmp_names);
    qsort(got->names, got->n, sizeof *got->names, cmp_names);
    int i = 0, j = 0;
    while (i < want->n || j < got->n) {
        int c = i == want->n ? 1 : j == got->n ? -1
                                               : strcmp(want->names[i], got->names[j]);
        if (c == 0) {
            i++, j++;
        } else if (c < 0) {
            CHECK(false, "expected task %s was not run", want->names[i]);
            i++;
        } else {
            CHECK(false, "unexpected task %s (not implied by the graph, or "
                         "run twice)", got->names[j]);
            j++;
        }
    }
}

/* --------------------------------------------------------- dependencies */

typedef struct records {
    const pl_task_record *r;
    int n;
} records;

static const pl_task_record *find(const records *rs, const char *op,
                                  const char *phase, int tile) {
    char name[64];
    if (tile >= 0) snprintf(name, sizeof name, "%s.%s.t%d", op, phase, tile);
    else snprintf(name, sizeof name, "%s", op);
    for (int i = 0; i < rs->n; i++)
        if (strcmp(rs->r[i].name, name) == 0) return &rs->r[i];
    CHECK(false, "no record of task %s", name);
    return NULL;
}

static int ordered_checks;

/* `after` depends on `before`: it may only start once `before` ended. */
static void expect_after(const pl_task_record *before, const pl_task_record *after) {
    if (!before || !after) return;
    ordered_checks++;
    CHECK(before->end_us <= after->start_us,
          "%s started at %.1f us, before %s ended at %.1f us (it depends on it)",
          after->name, after->start_us, before->name, before->end_us);
}

static void check_dependencies(const model *m, const records *rs) {
    const layer *L = m->layers;
    const int last = N_LAYERS - 1;
    for (int i = 0; i < rs->n; i++)
        CHECK(rs->r[i].start_us > 0 && rs->r[i].end_us >= rs->r[i].start_us &&
                  rs->r[i].worker >= 0,
              "record %s has no valid timing (start %.1f, end %.1f, worker %d)",
              rs->r[i].name, rs->r[i].start_us, rs->r[i].end_us, rs->r[i].worker);
    for (int t = 0; t < TILES; t++) {
        /* Forward: each layer reads the previous layer's output. */
        for (int i = 1; i < N_LAYERS; i++)
            expect_after(find(rs, L[i - 1].name, "F", t), find(rs, L[i].name, "F", t));
        const pl_task_record *logits = find(rs, L[last].name, "F", t);
        const pl_task_record *loss = find(rs, m->loss_name, "L", t);
        expect_after(logits, loss);
        expect_after(logits, find(rs, m->acc_name, "F", t));
        /* Backward: layer i's output gradient comes from the loss task (the
         * logits) or from layer i+1's input-gradient task. */
        for (int i = last; i >= 0; i--) {
            const pl_task_record *dout =
                i == last ? loss : find(rs, L[i + 1].name, "B", t);
            if (L[i].input_needs_grad) expect_after(dout, find(rs, L[i].name, "B", t));
            if (L[i].linear) expect_after(dout, find(rs, L[i].name, "W", t));
        }
    }
    /* W tasks of one layer read-modify-write one parameter gradient: in
     * tile (submission) order, never overlapping. */
    for (int i = 0; i < N_LAYERS; i++)
        if (L[i].linear)
            for (int t = 1; t < TILES; t++)
                expect_after(find(rs, L[i].name, "W", t - 1), find(rs, L[i].name, "W", t));
    /* The optimizer task of chunk c reads that whole gradient chunk: after
     * every W task writing into it. */
    for (int k = 0; k < rs->n; k++) {
        int c = -1;
        if (sscanf(rs->r[k].name, "opt.c%d", &c) != 1) continue;
        for (int i = 0; i < N_LAYERS; i++)
            if (L[i].linear && (L[i].chunk_mask >> c & 1u))
                for (int t = 0; t < TILES; t++)
                    expect_after(find(rs, L[i].name, "W", t), &rs->r[k]);
    }
}

/* ----------------------------------------------------------------- main */

static void run_iteration(pl_engine_t *e, const model *m, int iter,
                          const pl_batch *b) {
    printf("iteration %d\n", iter);
    pl_step_options so = {.return_loss = true};
    pl_step_result r;
    if (pl_engine_forward_backward(e, b, &so, &r) != PL_STATUS_OK ||
        pl_engine_optimizer_step(e) != PL_STATUS_OK) {
        CHECK(false, "iteration %d: %s", iter, pl_last_error());
        return;
    }
    /* Reading a parameter waits for the optimizer tasks that write it. */
    float w[HID * IN];
    CHECK(pl_engine_get_param(e, pl_graph_find(m->g, "fc1.weight"), w, (size_t)pl_tensor_numel(pl_graph_find(m->g, "fc1.weight"))) ==
              PL_STATUS_OK,
          "pl_engine_get_param: %s", pl_last_error());

    records rs;
    rs.n = pl_engine_task_records(e, &rs.r);
    int chunks = pl_engine_num_chunks(e);
    printf("  %d tasks recorded, %d chunk(s), loss %.4f\n", rs.n, chunks, r.loss);

    int workers_used = 0;
    bool seen[64] = {false};
    for (int i = 0; i < rs.n; i++) {
        int w_id = rs.r[i].worker;
        if (w_id >= 0 && w_id < 64 && !seen[w_id]) seen[w_id] = true, workers_used++;
    }
    printf("  tasks ran on %d worker(s)\n", workers_used);

    name_list want = {0, calloc(256, 64)}, got = {0, calloc(256, 64)};
    if (!want.names || !got.names || rs.n > 256) {
        CHECK(false, "out of memory or too many records (%d)", rs.n);
    } else {
        expected_names(m, chunks, &want);
        for (int i = 0; i < rs.n; i++) snprintf(got.names[got.n++], 64, "%s", rs.r[i].name);
        printf("  expected %d tasks\n", want.n);
        check_multiset(&want, &got);
        ordered_checks = 0;
        check_dependencies(m, &rs);
        printf("  %d ordering constraints checked\n", ordered_checks);
    }
    free(want.names);
    free(got.names);
}

int main(void) {
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    model m;
    pl_engine_t *e = NULL;
    if (!build(&m)) {
        tu_failures++;
        goto done;
    }
    float x[BATCH * IN];
    int32_t y[BATCH];
    for (int i = 0; i < BATCH * IN; i++) x[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < BATCH; i++) y[i] = (i * 3) % CLASSES;
    const void *data[2] = {x, y};
    pl_batch b = {.size = BATCH, .data = data};

    const size_t chunk_sizes[2] = {0, SMALL_CHUNK_ELEMS};
    const int want_chunks[2] = {1, 3};
    for (int cfg = 0; cfg < 2; cfg++) {
        printf("chunk_elems %zu%s\n", chunk_sizes[cfg],
               chunk_sizes[cfg] ? "" : " (default)");
        pl_engine_options eo = pl_engine_options_default();
        eo.batch_size = BATCH;
        eo.tiles = TILES;
        eo.chunk_elems = chunk_sizes[cfg];
        eo.record_tasks = true;
        e = pl_engine_new(rt, m.g, &eo);
        if (!e) {
            printf("FAIL: pl_engine_new: %s\n", pl_last_error());
            tu_failures++;
            goto done;
        }
        CHECK(pl_engine_num_chunks(e) == want_chunks[cfg],
              "chunk_elems %zu: %d chunks, expected %d", chunk_sizes[cfg],
              pl_engine_num_chunks(e), want_chunks[cfg]);
        if (!map_chunks(&m, e, chunk_sizes[cfg])) {
            CHECK(false, "too many parameters to map");
            goto done;
        }
        run_iteration(e, &m, 1, &b);
        run_iteration(e, &m, 2, &b);
        pl_engine_free(e);
        e = NULL;
    }

done:
    pl_engine_free(e);
    pl_graph_free(m.g);
    pl_runtime_free(rt);
    if (tu_failures) {
        printf("FAIL: %d task-graph failure(s)\n", tu_failures);
        return 1;
    }
    printf("task_graph: all checks passed\n");
    return 0;
}
