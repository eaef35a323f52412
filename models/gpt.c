/* The GPT-2 model builder (pre-LayerNorm blocks, tied LM head): a model
 * made of ops as a user's would be, through the public API only (models/
 * sits above ops/ and graph/ and reaches neither's internals). */
#include <math.h>
#include <stdio.h>

#include "pleiades.h"
#include "util/error.h"

static pl_status check_config(const pl_gpt_config *c) {
    if (c->vocab <= 0 || c->context <= 0 || c->channels <= 0 || c->layers <= 0 ||
        c->heads <= 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_gpt_build: vocab %lld, context %lld, channels %lld, "
                       "layers %lld and heads %lld must all be > 0",
                       (long long)c->vocab, (long long)c->context,
                       (long long)c->channels, (long long)c->layers,
                       (long long)c->heads);
    if (c->padded_vocab != 0 && c->padded_vocab < c->vocab)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_gpt_build: padded_vocab %lld is below vocab %lld (0: no padding)",
                       (long long)c->padded_vocab, (long long)c->vocab);
    if (c->channels % c->heads != 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_gpt_build: channels %lld not divisible by heads %lld",
                       (long long)c->channels, (long long)c->heads);
    return PL_STATUS_OK;
}

/* GPT-2 initialisation: weights N(0, std), biases zero. */
static pl_tensor_t *linear(pl_graph_t *g, pl_tensor_t *x, int64_t out,
                           const char *name, float std) {
    pl_tensor_t *y = pl_linear(g, x, out, name);
    if (!y) return NULL;
    char n[80];
    snprintf(n, sizeof n, "%s.weight", name);
    pl_param_set_init(pl_graph_find(g, n), PL_INIT_NORMAL, std);
    snprintf(n, sizeof n, "%s.bias", name);
    pl_param_set_init(pl_graph_find(g, n), PL_INIT_ZEROS, 0.0f);
    return y;
}

static pl_tensor_t *block(pl_graph_t *g, pl_tensor_t *x, const pl_gpt_config *c,
                          int64_t l) {
    char n[5][48];
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->layers);
    int64_t C = c->channels;
    snprintf(n[0], 48, "h%lld.ln1", (long long)l);
    snprintf(n[1], 48, "h%lld.attn.qkv", (long long)l);
    snprintf(n[2], 48, "h%lld.attn", (long long)l);
    snprintf(n[3], 48, "h%lld.attn.proj", (long long)l);
    snprintf(n[4], 48, "h%lld.res1", (long long)l);
    pl_tensor_t *h = pl_layernorm(g, x, n[0]);
    h = h ? linear(g, h, 3 * C, n[1], std) : NULL;
    h = h ? pl_attention(g, h, c->heads, n[2]) : NULL;
    h = h ? linear(g, h, C, n[3], proj_std) : NULL;
    x = h ? pl_add(g, x, h, n[4]) : NULL;
    if (!x) return NULL;
    snprintf(n[0], 48, "h%lld.ln2", (long long)l);
    snprintf(n[1], 48, "h%lld.mlp.fc", (long long)l);
    snprintf(n[3], 48, "h%lld.mlp.proj", (long long)l);
    snprintf(n[4], 48, "h%lld.res2", (long long)l);
    h = pl_layernorm(g, x, n[0]);
    h = h ? linear(g, h, 4 * C, n[1], std) : NULL;
    h = h ? pl_gelu(g, h) : NULL;
    h = h ? linear(g, h, C, n[3], proj_std) : NULL;
    return h ? pl_add(g, x, h, n[4]) : NULL;
}

pl_status pl_gpt_build(pl_graph_t *g, const pl_gpt_config *cfg,
                       pl_gpt_model *model) {
    if (!g || !cfg || !model)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_gpt_build: %s is NULL",
                       !g ? "graph" : !cfg ? "config" : "model");
    pl_status st = check_config(cfg);
    if (st) return st;
    if (pl_graph_num_tensors(g) != 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_gpt_build: the graph is not empty");
    int64_t T = cfg->context;
    model->tokens = pl_graph_input(g, "tokens", PL_DTYPE_I32, 1, &T);
    model->targets = pl_graph_input(g, "targets", PL_DTYPE_I32, 1, &T);
    if (!model->tokens || !model->targets) return pl_last_status();
    int64_t Vp = cfg->padded_vocab ? cfg->padded_vocab : cfg->vocab;
    pl_tensor_t *x = pl_embedding(g, model->tokens, Vp, cfg->channels, "embedding");
    for (int64_t l = 0; x && l < cfg->layers; l++) {
        pl_graph_begin_block(g, "layer");
        x = block(g, x, cfg, l);
    }
    if (!x) return pl_last_status();
    pl_graph_begin_block(g, "head");
    x = pl_layernorm(g, x, "ln_f");
    pl_tensor_t *wte = pl_graph_find(g, "embedding.wte");
    model->logits = x ? pl_linear_tied(g, x, wte, "lm_head") : NULL;
    /* Padding columns are never a target: no probability, no gradient. */
    if (model->logits)
        model->loss = Vp > cfg->vocab ? pl_cross_entropy_padded(g, model->logits, model->targets,
                                                                cfg->vocab)
                                      : pl_cross_entropy(g, model->logits, model->targets);
    else
        model->loss = NULL;
    if (!model->loss) return pl_last_status();
    if ((st = pl_graph_set_loss(g, model->loss))) return st;
    return pl_graph_set_output(g, model->logits);
}
