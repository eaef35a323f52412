/* The built-in data sources of the trainer: a loader (Fashion-MNIST's, or
 * any pl_loader_t) and windows of a text dataset. Both are a struct of
 * callbacks (pl_data_source), as a user's generator would be. */
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "util/error.h"

/* -------------------------------------------------------------- loader */

static int64_t loader_start(void *l, int64_t epoch) {
    pl_loader_start_epoch(l, epoch);
    return pl_loader_batches_per_epoch(l);
}

static int loader_next(void *l, pl_batch *b) { return pl_loader_next(l, b) ? 1 : 0; }

pl_data_source pl_data_source_loader(pl_loader_t *loader) {
    return (pl_data_source){.start_epoch = loader_start, .next = loader_next,
                            .user_data = loader};
}

/* ---------------------------------------------------------------- text */

struct pl_text_source {
    const pl_dataset_t *ds;
    int64_t batch_size, context, batches_per_epoch;
    uint64_t seed;
    bool restart;
    int64_t index, end; /* next batch of the stream, end of the epoch */
    int32_t *tokens, *targets;  /* the global batch */
    int rank, world;            /* pl_text_source_set_shard */
    int32_t *shard_tokens, *shard_targets; /* this rank's rows, world > 1 */
    const void *data[2];
};

pl_text_source_t *pl_text_source_new(const pl_dataset_t *ds, int64_t batch_size,
                                     int64_t context, uint64_t seed,
                                     int64_t batches_per_epoch, bool restart) {
    /* B·T is bounded so that it sizes an allocation safely. */
    if (!ds || batch_size < 1 || context < 1 || batches_per_epoch < 1 ||
        batch_size > (INT64_C(1) << 26) / context) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_text_source_new: dataset %s, batch_size %lld, context %lld, "
                "batches_per_epoch %lld (each >= 1, batch_size*context <= 2^26)",
                ds ? "given" : "NULL", (long long)batch_size, (long long)context,
                (long long)batches_per_epoch);
        return NULL;
    }
    pl_text_source_t *s = calloc(1, sizeof *s);
    size_t n = (size_t)(batch_size * context);
    if (s) {
        s->tokens = malloc(n * sizeof *s->tokens);
        s->targets = malloc(n * sizeof *s->targets);
    }
    if (!s || !s->tokens || !s->targets) {
        pl_text_source_free(s);
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_text_source_new: out of memory for %zu tokens", n);
        return NULL;
    }
    *s = (pl_text_source_t){.ds = ds, .batch_size = batch_size, .context = context,
                            .batches_per_epoch = batches_per_epoch, .seed = seed,
                            .restart = restart, .tokens = s->tokens, .targets = s->targets,
                            .rank = 0, .world = 1};
    s->data[0] = s->tokens; /* inputs in creation order: tokens, targets */
    s->data[1] = s->targets;
    return s;
}

void pl_text_source_free(pl_text_source_t *s) {
    if (!s)
        return;
    free(s->tokens);
    free(s->targets);
    free(s->shard_tokens);
    free(s->shard_targets);
    free(s);
}

pl_status pl_text_source_set_shard(pl_text_source_t *s, int rank, int world) {
    if (!s) return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_text_source_set_shard: s is NULL");
    pl_status st = pl_shard_check("pl_text_source_set_shard", s->batch_size, rank, world);
    if (st) return st;
    free(s->shard_tokens);
    free(s->shard_targets);
    s->shard_tokens = s->shard_targets = NULL;
    s->rank = rank;
    s->world = world;
    s->data[0] = s->tokens;
    s->data[1] = s->targets;
    if (world == 1) return PL_STATUS_OK;
    size_t n = (size_t)(s->batch_size / world * s->context);
    s->shard_tokens = malloc(n * sizeof *s->shard_tokens);
    s->shard_targets = malloc(n * sizeof *s->shard_targets);
    if (!s->shard_tokens || !s->shard_targets)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_text_source_set_shard: out of memory");
    s->data[0] = s->shard_tokens;
    s->data[1] = s->shard_targets;
    return PL_STATUS_OK;
}

static int64_t text_start(void *p, int64_t epoch) {
    pl_text_source_t *s = p;
    s->index = s->restart ? 0 : epoch * s->batches_per_epoch;
    s->end = s->index + s->batches_per_epoch;
    return s->batches_per_epoch;
}

/* Batch i is a function of (seed, i) alone: a run is reproducible, a
 * longer run sees a shorter one's batches first, and skipping is free. */
static int text_next(void *p, pl_batch *b) {
    pl_text_source_t *s = p;
    if (s->index >= s->end)
        return 0;
    if (pl_text_batch(s->ds, s->batch_size, s->context, s->seed, s->index, s->tokens,
                      s->targets) != PL_STATUS_OK)
        return -1;
    s->index++;
    /* This rank's windows: rows rank, rank + world, ... of the global
     * batch (as the loader's DistributedSampler split). */
    int64_t rows = s->batch_size / s->world;
    size_t row = (size_t)s->context * sizeof *s->tokens;
    for (int64_t i = 0; s->world > 1 && i < rows; i++) {
        size_t from = (size_t)(s->rank + i * s->world) * (size_t)s->context;
        memcpy(s->shard_tokens + i * s->context, s->tokens + from, row);
        memcpy(s->shard_targets + i * s->context, s->targets + from, row);
    }
    *b = (pl_batch){.size = rows, .data = s->data};
    return 1;
}

static pl_status text_skip(void *p, int64_t n) {
    pl_text_source_t *s = p;
    if (n < 0 || n > s->end - s->index)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "text source: cannot skip %lld batches, %lld are left in the epoch",
                       (long long)n, (long long)(s->end - s->index));
    s->index += n;
    return PL_STATUS_OK;
}

pl_data_source pl_text_source(pl_text_source_t *s) {
    return (pl_data_source){.start_epoch = text_start, .next = text_next, .skip = text_skip,
                            .user_data = s};
}
