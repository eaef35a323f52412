/* gpt_tiny: train a tiny byte-level GPT on a text corpus and sample from it,
 * using only the public API (pleiades.h).
 *
 *   gpt_tiny [TEXT-FILE-OR-DIR]     (default /usr/share/games/fortunes)
 *
 * 2 layers, 64 channels, 4 heads, 64 bytes of context: 121k parameters,
 * 300 AdamW steps of 16 windows (about 20 s of CPU time on two cores); the
 * loss ends near 3.0 nats/byte, below the 3.3 of byte frequencies alone. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <pleiades.h>

enum { V = 256, T = 64, C = 64, L = 2, NH = 4, B = 16, STEPS = 300, GEN = 200 };

static int fail(const char *what) {
    fprintf(stderr, "gpt_tiny: %s: %s\n", what, pl_last_error());
    return 1;
}

/* Draws from softmax(logits / temperature) with a splitmix64 stream. */
static int sample(const float *logits, float temperature, uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    double u = (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
    double max = logits[0], p[V], sum = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > max) max = logits[i];
    for (int i = 0; i < V; i++)
        sum += p[i] = exp((logits[i] - max) / temperature);
    for (int i = 0; i < V; i++)
        if ((u -= p[i] / sum) < 0) return i;
    return V - 1;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "/usr/share/games/fortunes";

    /* Text as bytes: the first 90% trains, the last 10% validates. */
    pl_dataset_t *train = pl_dataset_text(path, true);
    pl_dataset_t *val = pl_dataset_text(path, false);
    if (!train || !val) return fail("cannot load the text");

    /* StarPU with two CPU workers; the model graph seeds its own init. */
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) return fail("cannot start StarPU");
    pl_graph_t *g = pl_graph_new(1);
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = C, .layers = L,
                         .heads = NH};
    pl_gpt_model model;
    if (pl_gpt_build(g, &cfg, &model) != PL_STATUS_OK) return fail("pl_gpt_build");
    printf("tiny GPT: %lld parameters\n", (long long)pl_graph_param_count(g));

    /* One engine for training (batches of B windows) ... */
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 3e-3f;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) return fail("pl_engine_new");

    /* Inputs are fed in creation order: tokens, then targets. */
    static int32_t tokens[B * T], targets[B * T];
    const void *data[2] = {tokens, targets};
    pl_batch batch = {.size = B, .data = data};
    pl_step_result r;
    for (int step = 1; step <= STEPS; step++) {
        pl_text_batch(train, B, T, 1, step, tokens, targets);
        if (pl_engine_train_step(e, &batch, &r) != PL_STATUS_OK)
            return fail("training step");
        if (step % 50 == 0) {
            /* Validation: a forward pass only, on a fixed batch. */
            pl_step_options fo = {.forward_only = true, .return_loss = true};
            pl_step_result v;
            pl_text_batch(val, B, T, 2, 0, tokens, targets);
            if (pl_engine_forward_backward(e, &batch, &fo, &v) != PL_STATUS_OK)
                return fail("validation");
            printf("step %3d  train loss %.3f  val loss %.3f\n", step, r.loss,
                   v.loss);
        }
    }

    /* Generation: batch 1, the window in positions 0..n-1 and padding after
     * it. Causal attention keeps the padding out of the logits at position
     * n-1, the ones the next byte is drawn from. */
    const char *prompt = "The ";
    unsigned char text[4 + GEN];
    int len = 0;
    for (const char *s = prompt; *s; s++) text[len++] = (unsigned char)*s;
    pl_step_options go = {.forward_only = true, .return_output_label = true};
    batch.size = 1;
    uint64_t rng = 42;
    fputs(prompt, stdout);
    for (int i = 0; i < GEN; i++) {
        int n = len < T ? len : T;
        for (int j = 0; j < T; j++) tokens[j] = j < n ? text[len - n + j] : 0;
        if (pl_engine_forward_backward(e, &batch, &go, &r) != PL_STATUS_OK)
            return fail("generation");
        int next = sample(r.output + (size_t)(n - 1) * V, 0.8f, &rng);
        text[len++] = (unsigned char)next;
        putchar(next);
    }
    putchar('\n');

    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    pl_dataset_free(val);
    pl_dataset_free(train);
    return 0;
}
