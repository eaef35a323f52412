/* pipeline_schedules: one small GPT trained with each pipeline schedule,
 * using only the public API (pleiades.h).
 *
 *   pipeline_schedules [OUTPUT-DIR]     (default: the current directory)
 *
 * A GPT (V=256, T=32, C=64, 4 layers, 4 heads; blocks: embedding, 4 layers,
 * head) is trained for 5 AdamW steps on the same fixed batches of 8
 * sequences with
 *   none         the non-pipelined schedule, 4 tiles;
 *   1f1b         2 stages, 4 microbatches;
 *   interleaved  2 stages, 2 model chunks per stage, 4 microbatches.
 * The engine submits the tasks of every schedule in the same order and
 * only their execution order differs, so the losses printed are the same,
 * bit for bit, for all three. The last step's tasks of each schedule are
 * written as trace_<schedule>.json (Chrome trace: Perfetto or
 * chrome://tracing) and trace_<schedule>.paje (ViTE, pj_dump); in the
 * pipelined traces each worker is one stage, and the warm-up forwards,
 * the one-forward-one-backward steady state and the backward drain are
 * visible per stage. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <pleiades.h>

enum { V = 256, T = 32, C = 64, L = 4, NH = 4, B = 8, STEPS = 5, MB = 4 };

static int32_t tokens[STEPS][B * T], targets[STEPS][B * T];

/* Byte sequences that count upwards with random skips: learnable. */
static void make_batches(void) {
    uint64_t s = 7;
    for (int st = 0; st < STEPS; st++)
        for (int i = 0; i < B; i++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            int32_t x = (int32_t)(s >> 56);
            for (int t = 0; t < T; t++) {
                tokens[st][i * T + t] = x;
                s = s * 6364136223846793005u + 1442695040888963407u;
                x = (x + 1 + (int32_t)((s >> 62) == 0)) % V;
                targets[st][i * T + t] = x;
            }
        }
}

typedef struct schedule {
    const char *name;
    pl_schedule_kind kind;
    int stages, chunks;
} schedule;

/* Trains one engine; fills losses[STEPS]. 0 on success. */
static int train(pl_runtime_t *rt, const schedule *sc, const char *dir,
                 double *losses) {
    pl_graph_t *g = pl_graph_new(42);
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = C, .layers = L,
                         .heads = NH};
    pl_gpt_model model;
    if (!g || pl_gpt_build(g, &cfg, &model) != PL_STATUS_OK) {
        fprintf(stderr, "pipeline_schedules: building the GPT: %s\n", pl_last_error());
        pl_graph_free(g);
        return 1;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = MB;                /* microbatches */
    eo.schedule = sc->kind;
    eo.stages = sc->stages;
    eo.model_chunks = sc->chunks;
    eo.record_tasks = true;       /* for the traces */
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) {
        fprintf(stderr, "pipeline_schedules: %s: %s\n", sc->name, pl_last_error());
        pl_graph_free(g);
        return 1;
    }
    int rc = 0;
    for (int st = 0; st < STEPS && !rc; st++) {
        const void *data[2] = {tokens[st], targets[st]};
        pl_batch batch = {.size = B, .data = data};
        pl_step_result r;
        if (pl_engine_train_step(e, &batch, &r) != PL_STATUS_OK) {
            fprintf(stderr, "pipeline_schedules: %s step %d: %s\n", sc->name, st,
                    pl_last_error());
            rc = 1;
        }
        losses[st] = r.loss;
    }
    if (!rc) {
        int nb = pl_graph_num_blocks(g), parts[64];
        int np = pl_engine_block_parts(e, nb <= 64 ? parts : NULL);
        printf("%-12s %d part%s, blocks -> parts:", sc->name, np, np == 1 ? "" : "s");
        for (int b = 0; b < nb && b < 64; b++) printf(" %d", parts[b]);
        printf("   theoretical bubble %.3f\n", pl_engine_theoretical_bubble(e));
        char json[512], paje[512];
        snprintf(json, sizeof json, "%s/trace_%s.json", dir, sc->name);
        snprintf(paje, sizeof paje, "%s/trace_%s.paje", dir, sc->name);
        if (pl_engine_write_trace(e, json, paje) != PL_STATUS_OK) {
            fprintf(stderr, "pipeline_schedules: writing the %s trace: %s\n", sc->name,
                    pl_last_error());
            rc = 1;
        } else {
            printf("%-12s traces: %s, %s\n", "", json, paje);
        }
    }
    pl_engine_free(e);
    pl_graph_free(g);
    return rc;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    make_batches();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;  /* one per pipeline stage */
    ro.profiling = true; /* task timings for the traces */
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        fprintf(stderr, "pipeline_schedules: %s\n", pl_last_error());
        return 1;
    }
    const schedule scheds[] = {
        {"none", PL_SCHEDULE_NONE, 0, 0},
        {"1f1b", PL_SCHEDULE_1F1B, 2, 1},
        {"interleaved", PL_SCHEDULE_INTERLEAVED, 2, 2},
    };
    enum { N = sizeof scheds / sizeof scheds[0] };
    double losses[N][STEPS];
    int rc = 0;
    for (int i = 0; i < N && !rc; i++) rc = train(rt, &scheds[i], dir, losses[i]);
    pl_runtime_free(rt);
    if (rc) return rc;

    printf("\nstep");
    for (int i = 0; i < N; i++) printf("  %-16s", scheds[i].name);
    printf("\n");
    for (int st = 0; st < STEPS; st++) {
        printf("%4d", st);
        for (int i = 0; i < N; i++) printf("  %-16.9f", losses[i][st]);
        printf("\n");
    }
    bool same = true;
    for (int i = 1; i < N; i++)
        same = same && memcmp(losses[i], losses[0], sizeof losses[0]) == 0;
    printf("losses %s across schedules\n", same ? "identical (bit for bit)" : "DIFFER");
    return same ? 0 : 1;
}
