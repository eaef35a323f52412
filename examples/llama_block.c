/* llama_block: a LLaMA-style decoder built from Pleiades' ops (public API
 * only): pre-norm residual blocks with RMSNorm, causal attention and a
 * SwiGLU feed-forward, down(silu(gate(h)) ⊙ up(h)).
 *
 *   llama_block [TEXT-FILE-OR-DIR]      train byte-level on a text corpus
 *                                       (default /usr/share/games/fortunes)
 *   llama_block --reference FILE        check against the PyTorch twin
 *
 * With --reference, FILE is what tests/reference/llama_block_reference.py
 * writes: the twin's configuration, a batch, its initial parameters and
 * the losses of its first AdamW steps. The same model is built here, given
 * those parameters, and trained on that batch; every loss must match the
 * twin's to 1e-5 (relative), else the exit status is 1.
 *
 * Where it differs from LLaMA (no op for them yet): learned positions
 * (pl_embedding's wpe) instead of rotary embeddings, biases on the linear
 * layers. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleiades.h>

typedef struct config {
    int vocab, context, channels, layers, heads, ffn, batch, steps;
} config;

static int fail(const char *what) {
    fprintf(stderr, "llama_block: %s: %s\n", what, pl_last_error());
    return 1;
}

/* One block: x + attn(rmsnorm(x)), then + swiglu(rmsnorm(·)). One op per
 * statement: each name is formatted into the same buffer just before use. */
static pl_tensor_t *block(pl_graph_t *g, pl_tensor_t *x, const config *c, int l) {
    char n[64];
#define NAME(s) (snprintf(n, sizeof n, "h%d.%s", l, s), n)
    pl_tensor_t *h = pl_rmsnorm(g, x, NAME("attn_norm"));
    h = pl_linear(g, h, 3 * c->channels, NAME("attn.qkv"));
    h = pl_attention(g, h, c->heads, NAME("attn.core"));
    h = pl_linear(g, h, c->channels, NAME("attn.proj"));
    x = pl_add(g, x, h, NAME("attn.res"));
    h = pl_rmsnorm(g, x, NAME("mlp_norm"));
    pl_tensor_t *gate = pl_linear(g, h, c->ffn, NAME("mlp.gate"));
    gate = pl_silu(g, gate);
    pl_tensor_t *up = pl_linear(g, h, c->ffn, NAME("mlp.up"));
    pl_tensor_t *y = pl_mul(g, gate, up, NAME("mlp.swiglu"));
    y = pl_linear(g, y, c->channels, NAME("mlp.down"));
    return pl_add(g, x, y, NAME("mlp.res"));
#undef NAME
}

/* tokens int32 [T], targets int32 [T] → mean cross-entropy. Blocks are
 * marked so that pipeline schedules can split the model between them. */
static pl_status build(pl_graph_t *g, const config *c) {
    int64_t t[1] = {c->context};
    pl_tensor_t *tokens = pl_graph_input(g, "tokens", PL_DTYPE_I32, 1, t);
    pl_tensor_t *targets = pl_graph_input(g, "targets", PL_DTYPE_I32, 1, t);
    pl_tensor_t *x = pl_embedding(g, tokens, c->vocab, c->channels, "embedding");
    for (int l = 0; l < c->layers && x; l++) {
        char name[16];
        snprintf(name, sizeof name, "h%d", l);
        pl_graph_begin_block(g, name);
        x = block(g, x, c, l);
    }
    pl_graph_begin_block(g, "head");
    pl_tensor_t *logits = pl_linear(g, pl_rmsnorm(g, x, "norm"), c->vocab, "head");
    pl_tensor_t *loss = pl_cross_entropy(g, logits, targets);
    return loss ? pl_graph_set_loss(g, loss) : PL_STATUS_INVALID_ARGUMENT;
}

/* An engine for batches of c->batch with the twin's AdamW. */
static pl_engine_t *engine(pl_runtime_t *rt, pl_graph_t *g, const config *c) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = c->batch;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 3e-3f; /* betas, eps and weight decay 0.01: defaults */
    return pl_engine_new(rt, g, &eo);
}

/* ------------------------------------------------ the reference file */

typedef struct array {
    char name[64];
    int64_t n;
    double *v;
} array;

typedef struct reference {
    const char *path;
    array *a;
    int n;
} reference;

static void reference_free(reference *r) {
    for (int i = 0; i < r->n; i++) free(r->a[i].v);
    free(r->a);
}

/* Reads "<name> <count> <values...>" lines after the header. Counts are
 * range-checked against the line's length before anything is allocated. */
static int reference_load(reference *r, const char *path) {
    r->path = path;
    r->a = NULL;
    r->n = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "llama_block: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, bad = 0;
    while (!bad && (len = getline(&line, &cap, f)) > 0) {
        if (++lineno == 1) {
            if (strncmp(line, "llama_block_reference 1", 23) != 0) {
                fprintf(stderr, "llama_block: %s: not a llama_block_reference 1 file\n",
                        path);
                bad = 1;
            }
            continue;
        }
        array a = {0};
        char *p = line, *end;
        int used = 0;
        if (sscanf(p, "%63s %n", a.name, &used) != 1) continue; /* blank line */
        p += used;
        a.n = strtoll(p, &end, 10);
        if (end == p || a.n < 0 || a.n > (int64_t)len / 2) {
            fprintf(stderr, "llama_block: %s:%d: '%s': bad value count\n", path, lineno,
                    a.name);
            bad = 1;
            break;
        }
        p = end;
        a.v = malloc((size_t)(a.n ? a.n : 1) * sizeof *a.v);
        for (int64_t i = 0; a.v && i < a.n && !bad; i++) {
            a.v[i] = strtod(p, &end);
            if (end == p) {
                fprintf(stderr, "llama_block: %s:%d: '%s': %lld values expected, %lld found\n",
                        path, lineno, a.name, (long long)a.n, (long long)i);
                bad = 1;
            }
            p = end;
        }
        array *grown = a.v ? realloc(r->a, (size_t)(r->n + 1) * sizeof *r->a) : NULL;
        if (!grown) {
            if (!bad) fprintf(stderr, "llama_block: %s: out of memory\n", path);
            free(a.v);
            bad = 1;
            break;
        }
        r->a = grown;
        r->a[r->n++] = a;
    }
    free(line);
    fclose(f);
    if (!bad && lineno == 0) {
        fprintf(stderr, "llama_block: %s: empty file\n", path);
        bad = 1;
    }
    if (bad) reference_free(r);
    return bad;
}

/* The array `name` with exactly n values, or NULL after saying why. */
static const double *reference_get(const reference *r, const char *name, int64_t n) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->a[i].name, name) == 0) {
            if (r->a[i].n == n) return r->a[i].v;
            fprintf(stderr, "llama_block: %s: '%s' has %lld values, %lld expected\n",
                    r->path, name, (long long)r->a[i].n, (long long)n);
            return NULL;
        }
    fprintf(stderr, "llama_block: %s: no array '%s'\n", r->path, name);
    return NULL;
}

static int check_reference(const char *path) {
    reference ref;
    if (reference_load(&ref, path)) return 1;
    int status = 1;
    pl_runtime_t *rt = NULL;
    pl_graph_t *g = NULL;
    pl_engine_t *e = NULL;
    int32_t *tokens = NULL, *targets = NULL;
    float *values = NULL;
    const double *cf = reference_get(&ref, "config", 8);
    if (!cf) goto out;
    config c = {(int)cf[0], (int)cf[1], (int)cf[2], (int)cf[3],
                (int)cf[4], (int)cf[5], (int)cf[6], (int)cf[7]};
    /* Sizes from a file: range-checked before they size anything. */
    if (c.vocab < 2 || c.vocab > 65536 || c.context < 1 || c.context > 4096 ||
        c.channels < 1 || c.channels > 4096 || c.layers < 1 || c.layers > 64 ||
        c.heads < 1 || c.channels % c.heads || c.ffn < 1 || c.ffn > 16384 ||
        c.batch < 1 || c.batch > 1024 || c.steps < 1 || c.steps > 100) {
        fprintf(stderr, "llama_block: %s: config out of range\n", path);
        goto out;
    }
    int64_t n_tok = (int64_t)c.batch * c.context;
    const double *tok = reference_get(&ref, "tokens", n_tok);
    const double *tgt = reference_get(&ref, "targets", n_tok);
    const double *losses = reference_get(&ref, "losses", c.steps);
    if (!tok || !tgt || !losses) goto out;
    tokens = malloc((size_t)n_tok * sizeof *tokens);
    targets = malloc((size_t)n_tok * sizeof *targets);
    if (!tokens || !targets) goto out;
    for (int64_t i = 0; i < n_tok; i++) {
        tokens[i] = (int32_t)tok[i];
        targets[i] = (int32_t)tgt[i];
    }

    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    if (!(rt = pl_runtime_new(&ro))) {
        fail("cannot start StarPU");
        goto out;
    }
    g = pl_graph_new(1);
    if (!g || build(g, &c) != PL_STATUS_OK) {
        fail("building the model");
        goto out;
    }
    if (!(e = engine(rt, g, &c))) {
        fail("pl_engine_new");
        goto out;
    }
    /* PyTorch's initial parameters, by name. */
    for (int i = 0; pl_graph_param(g, i); i++) {
        const pl_tensor_t *p = pl_graph_param(g, i);
        int64_t n = pl_tensor_numel(p);
        const double *v = reference_get(&ref, pl_tensor_name(p), n);
        float *grown = v ? realloc(values, (size_t)n * sizeof *values) : NULL;
        if (!grown) goto out;
        values = grown;
        for (int64_t j = 0; j < n; j++) values[j] = (float)v[j];
        if (pl_engine_set_param(e, p, values, (size_t)n) != PL_STATUS_OK) {
            fail(pl_tensor_name(p));
            goto out;
        }
    }
    const void *data[2] = {tokens, targets};
    pl_batch batch = {.size = c.batch, .data = data};
    double worst = 0.0;
    printf("step  pleiades     pytorch      rel. diff\n");
    for (int s = 0; s < c.steps; s++) {
        pl_step_result r;
        if (pl_engine_train_step(e, &batch, &r) != PL_STATUS_OK) {
            fail("training step");
            goto out;
        }
        double diff = fabs(r.loss - losses[s]) / fmax(1.0, fabs(losses[s]));
        if (diff > worst) worst = diff;
        printf("%4d  %.7f   %.7f   %.1e\n", s + 1, r.loss, losses[s], diff);
    }
    if (worst <= 1e-5) {
        printf("matches the PyTorch twin: worst relative loss difference %.1e\n", worst);
        status = 0;
    } else {
        fprintf(stderr, "llama_block: losses differ from the PyTorch twin's by %.1e "
                "(tolerance 1e-5)\n", worst);
    }
out:
    free(values);
    free(tokens);
    free(targets);
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    reference_free(&ref);
    return status;
}

/* ------------------------------------------------ training on text */

static int train_text(const char *path) {
    const config c = {.vocab = 256, .context = 64, .channels = 64, .layers = 2,
                      .heads = 4, .ffn = 128, .batch = 16, .steps = 200};
    pl_dataset_t *train = pl_dataset_text(path, true);
    pl_dataset_t *val = pl_dataset_text(path, false);
    if (!train || !val) return fail("cannot load the text");
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) return fail("cannot start StarPU");
    pl_graph_t *g = pl_graph_new(1);
    if (build(g, &c) != PL_STATUS_OK) return fail("building the model");
    printf("LLaMA-style model: %d blocks, %lld parameters\n", c.layers,
           (long long)pl_graph_param_count(g));
    pl_engine_t *e = engine(rt, g, &c);
    if (!e) return fail("pl_engine_new");
    static int32_t tokens[16 * 64], targets[16 * 64];
    const void *data[2] = {tokens, targets};
    pl_batch batch = {.size = c.batch, .data = data};
    for (int step = 1; step <= c.steps; step++) {
        pl_step_result r;
        pl_text_batch(train, c.batch, c.context, 1, step, tokens, targets);
        if (pl_engine_train_step(e, &batch, &r) != PL_STATUS_OK)
            return fail("training step");
        if (step % 50 == 0) {
            pl_step_options fo = {.forward_only = true, .return_loss = true};
            pl_step_result v;
            pl_text_batch(val, c.batch, c.context, 2, 0, tokens, targets);
            if (pl_engine_forward_backward(e, &batch, &fo, &v) != PL_STATUS_OK)
                return fail("validation");
            printf("step %3d  train loss %.3f  validation loss %.3f nats/byte\n", step,
                   r.loss, v.loss);
        }
    }
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    pl_dataset_free(train);
    pl_dataset_free(val);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "--reference") == 0) return check_reference(argv[2]);
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: llama_block [TEXT-FILE-OR-DIR] | --reference FILE\n");
        return 2;
    }
    return train_text(argc > 1 ? argv[1] : "/usr/share/games/fortunes");
}
