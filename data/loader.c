/* Datasets in memory and the generic batch loader.
 *
 * The loader gathers each batch into buffers it owns rather than handing out
 * pointers into the dataset: a shuffled batch is not contiguous in the
 * dataset, and a pl_batch_process_fn may rewrite a batch in place, which
 * must never alter the dataset seen by later epochs.
 *
 * Shuffling is deterministic across machines: the permutation of an epoch is
 * a Fisher–Yates shuffle of the identity driven by splitmix64
 * (util/random.h), seeded from (seed, epoch) alone. It uses only 64-bit
 * integer arithmetic, so the order does not depend on the platform, the
 * compiler or on earlier epochs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <zlib.h>

#include "data/dataset.h"
#include "util/error.h"
#include "util/random.h"

/* ------------------------------------------------------------- datasets */

pl_dataset_t *pl_dataset_alloc(int64_t size, int64_t features,
                               int64_t classes, const char *who) {
    if (size < 0 || features < 0 ||
        (features > 0 && (uint64_t)size > SIZE_MAX / sizeof(float) /
                                              (uint64_t)features)) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "%s: invalid dataset size %lld x %lld", who, (long long)size,
                (long long)features);
        return NULL;
    }
    pl_dataset_t *ds = calloc(1, sizeof *ds);
    if (!ds) {
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", who);
        return NULL;
    }
    ds->size = size;
    ds->features = features;
    ds->classes = classes;
    /* +1: malloc(0) may return NULL, which would read as a failure. */
    ds->x = malloc((size_t)size * (size_t)features * sizeof(float) + 1);
    ds->y = malloc((size_t)size * sizeof(int32_t) + 1);
    if (!ds->x || !ds->y) {
        pl_dataset_free(ds);
        pl_fail(PL_STATUS_OUT_OF_MEMORY,
                "%s: out of memory for %lld samples of %lld features", who,
                (long long)size, (long long)features);
        return NULL;
    }
    return ds;
}

void pl_dataset_free(pl_dataset_t *ds) {
    if (!ds)
        return;
    free(ds->x);
    free(ds->y);
    free(ds->text);
    free(ds->text_path);
    if (ds->map) munmap(ds->map, ds->map_len);
    free(ds);
}

int64_t pl_dataset_size(const pl_dataset_t *ds) {
    if (!ds) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_dataset_size: ds is NULL");
        return -1;
    }
    return ds->size;
}

/* zlib's CRC-32 of n bytes onto crc (crc32_z takes a size_t length). */
static void crc_bytes(pl_fingerprint *fp, const void *p, size_t n) {
    fp->crc32 = (uint32_t)crc32_z(fp->crc32, p, n);
    fp->bytes += n;
}

pl_status pl_dataset_fingerprint(const pl_dataset_t *ds, pl_fingerprint *fp) {
    if (!ds || !fp)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_dataset_fingerprint: %s is NULL",
                       !ds ? "ds" : "fp");
    if (ds->text) {
        crc_bytes(fp, ds->text, (size_t)ds->size);
    } else if (ds->tokens) { /* the tokens as stored, not the header */
        crc_bytes(fp, ds->tokens, (size_t)ds->size * (size_t)ds->token_bytes);
    } else {
        crc_bytes(fp, ds->x, (size_t)ds->size * (size_t)ds->features * sizeof *ds->x);
        crc_bytes(fp, ds->y, (size_t)ds->size * sizeof *ds->y);
    }
    return PL_STATUS_OK;
}

int64_t pl_dataset_features(const pl_dataset_t *ds) {
    if (!ds) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_dataset_features: ds is NULL");
        return -1;
    }
    return ds->features;
}

/* --------------------------------------------------------------- loader */

struct pl_loader {
    const pl_dataset_t *ds;
    int64_t batch_size;
    bool shuffle, drop_last;
    uint64_t seed;
    int64_t batches;    /* per epoch, after dropping an accumulation tail */
    int64_t all_batches;/* per epoch, before */
    int64_t next_batch; /* index of the batch pl_loader_next returns next */
    int rank, world;    /* pl_loader_set_shard: this rank's slice */
    int64_t accumulate; /* pl_loader_set_accumulation's size */
    int64_t *order;     /* [ds->size]: sample indices in epoch order */
    float *x;           /* [batch_size, features]: the gathered batch */
    int32_t *y;         /* [batch_size] */
    const void *data[2];/* {x, y}: what batch->data points at */
};

static int64_t count_batches(int64_t n, int64_t batch_size, bool drop_last) {
    int64_t full = n / batch_size;
    return drop_last || n % batch_size == 0 ? full : full + 1;
}

/* order = identity, then shuffled from (seed, epoch): resetting first makes
 * the order a function of the epoch alone, not of the epochs visited. */
static void make_order(pl_loader_t *l, int64_t epoch) {
    int64_t n = l->ds->size;
    for (int64_t i = 0; i < n; i++)
        l->order[i] = i;
    if (!l->shuffle)
        return;
    uint64_t state = pl_stream_state(l->seed, epoch);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)pl_random_below(&state, (uint64_t)i + 1);
        int64_t t = l->order[i];
        l->order[i] = l->order[j];
        l->order[j] = t;
    }
}

pl_loader_t *pl_loader_new(const pl_dataset_t *ds, int64_t batch_size,
                           bool shuffle, bool drop_last, uint64_t seed) {
    if (!ds) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_loader_new: ds is NULL");
        return NULL;
    }
    if (ds->text) { /* no rows to gather: x and y are NULL */
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_loader_new: '%s' is a text dataset; batch it with "
                "pl_text_batch", ds->text_path);
        return NULL;
    }
    if (batch_size <= 0) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_loader_new: batch_size %lld must be positive",
                (long long)batch_size);
        return NULL;
    }
    /* A batch never holds more than the whole dataset, so buffers for
     * min(batch_size, size) samples suffice (and a huge batch_size with a
     * small dataset does not allocate gigabytes). */
    int64_t cap = batch_size < ds->size ? batch_size : ds->size;
    pl_loader_t *l = NULL;
    if ((uint64_t)ds->size <= SIZE_MAX / sizeof(int64_t)) /* order[] fits */
        l = calloc(1, sizeof *l);
    if (l) {
        l->order = malloc((size_t)ds->size * sizeof *l->order + 1);
        l->x = malloc((size_t)cap * (size_t)ds->features * sizeof(float) + 1);
        l->y = malloc((size_t)cap * sizeof(int32_t) + 1);
    }
    if (!l || !l->order || !l->x || !l->y) {
        pl_loader_free(l);
        pl_fail(PL_STATUS_OUT_OF_MEMORY,
                "pl_loader_new: out of memory for batches of %lld",
                (long long)batch_size);
        return NULL;
    }
    l->ds = ds;
    l->batch_size = batch_size;
    l->shuffle = shuffle;
    l->drop_last = drop_last;
    l->seed = seed;
    l->batches = l->all_batches = count_batches(ds->size, batch_size, drop_last);
    l->rank = 0;
    l->world = 1;
    l->accumulate = 1;
    l->data[0] = l->x;
    l->data[1] = l->y;
    /* Ready for epoch 0 without an explicit pl_loader_start_epoch(). */
    pl_loader_start_epoch(l, 0);
    return l;
}

void pl_loader_free(pl_loader_t *l) {
    if (!l)
        return;
    free(l->order);
    free(l->x);
    free(l->y);
    free(l);
}

void pl_loader_start_epoch(pl_loader_t *l, int64_t epoch) {
    if (!l) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_loader_start_epoch: l is NULL");
        return;
    }
    make_order(l, epoch);
    l->next_batch = 0;
}

/* Copies samples order[first + rank + i·world] for i < count into the
 * batch buffers (rank 0, world 1: a plain slice). */
static void gather(pl_loader_t *l, int64_t first, int64_t count) {
    const pl_dataset_t *ds = l->ds;
    size_t row = (size_t)ds->features;
    for (int64_t i = 0; i < count; i++) {
        int64_t s = l->order[first + l->rank + i * l->world];
        memcpy(l->x + (size_t)i * row, ds->x + (size_t)s * row,
               row * sizeof(float));
        l->y[i] = ds->y[s];
    }
}

bool pl_loader_next(pl_loader_t *l, pl_batch *batch) {
    if (!l || !batch) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_loader_next: %s is NULL",
                !l ? "l" : "batch");
        return false;
    }
    if (l->next_batch >= l->batches)
        return false;
    int64_t first = l->next_batch * l->batch_size;
    int64_t left = l->ds->size - first;
    int64_t count = left < l->batch_size ? left : l->batch_size;
    /* This rank's positions of the global batch: rank, rank + world, ... */
    count = (count - l->rank + l->world - 1) / l->world;
    gather(l, first, count);
    l->next_batch++;
    batch->size = count;
    batch->data = l->data;
    return true;
}

pl_status pl_loader_set_accumulation(pl_loader_t *l, int64_t accumulate_size) {
    if (!l)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_loader_set_accumulation: l is NULL");
    if (accumulate_size < 1 || accumulate_size > (1 << 20))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_loader_set_accumulation: accumulate_size %lld out of "
                       "range [1, %d]", (long long)accumulate_size, 1 << 20);
    /* GradAccumDataloader: steps_per_epoch = len - len % accumulate_size;
     * the tail is consumed and skipped (here: never gathered). */
    l->accumulate = accumulate_size;
    l->batches = l->all_batches - l->all_batches % accumulate_size;
    return PL_STATUS_OK;
}

pl_status pl_shard_check(const char *who, int64_t global_batch, int rank, int world) {
    if (world < 1 || world > 65536 || rank < 0 || rank >= world)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: rank %d of world %d (need 0 <= rank < world <= 65536)", who, rank,
                       world);
    if (global_batch % world != 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: the global batch %lld is not divisible by the %d ranks", who,
                       (long long)global_batch, world);
    return PL_STATUS_OK;
}

pl_status pl_loader_set_shard(pl_loader_t *l, int rank, int world) {
    if (!l) return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_loader_set_shard: l is NULL");
    pl_status st = pl_shard_check("pl_loader_set_shard", l->batch_size, rank, world);
    if (st) return st;
    l->rank = rank;
    l->world = world;
    /* A last, incomplete global batch too small to give every rank a
     * sample is dropped on every rank alike (a rank without a batch would
     * leave the others waiting for it). */
    int64_t tail = l->ds->size % l->batch_size;
    l->all_batches = count_batches(l->ds->size, l->batch_size, l->drop_last);
    if (!l->drop_last && tail > 0 && tail < world) l->all_batches--;
    l->batches = l->all_batches - l->all_batches % l->accumulate;
    return PL_STATUS_OK;
}

int64_t pl_loader_batches_per_epoch(const pl_loader_t *l) {
    if (!l) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_loader_batches_per_epoch: l is NULL");
        return -1;
    }
    return l->batches;
}
