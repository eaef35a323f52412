/*
 * pleiades/models.h — whole models built of ops (part of pleiades.h; the
 * code is in models/, written against the public API only, as a user's
 * own model would be).
 */
#ifndef PLEIADES_MODELS_H
#define PLEIADES_MODELS_H

#include "pleiades/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A GPT-2 style model: embedding, L pre-LayerNorm blocks (ln1 → qkv linear
 * → attention → projection → residual; ln2 → 4C linear → GELU → C linear →
 * residual), final LayerNorm, LM head tied to wte, cross-entropy. Linear
 * weights N(0, 0.02) (projections 0.02/√(2L)), biases zero (GPT-2/nanoGPT). */
typedef struct pl_gpt_config {
    int64_t vocab;    /* V */
    int64_t context;  /* T */
    int64_t channels; /* C */
    int64_t layers;   /* L */
    int64_t heads;    /* NH; C % NH == 0 */
    /* Rows of the embedding and columns of the logits: 0 for V, else
     * >= V (Megatron's make_vocab_size_divisible_by: GPT-2's 50257 padded
     * to 50304, a multiple of 64, for faster matrix products). Columns
     * from V on are masked out of the loss (pl_cross_entropy_padded);
     * whoever samples the logits must skip them too. */
    int64_t padded_vocab;
} pl_gpt_config;

typedef struct pl_gpt_model {
    pl_tensor_t *tokens;  /* int32 input [T] */
    pl_tensor_t *targets; /* int32 input [T] (next tokens) */
    pl_tensor_t *logits;  /* [T, padded V], the graph's output */
    pl_tensor_t *loss;    /* the graph's loss */
} pl_gpt_model;

/* Builds the model into an empty graph, sets loss and output. Blocks:
 * embedding, one per layer, then the head. */
pl_status pl_gpt_build(pl_graph_t *g, const pl_gpt_config *cfg,
                       pl_gpt_model *model);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_MODELS_H */
