/*
 * pleiades/data.h — batches, datasets and loaders (part of pleiades.h).
 *
 *   pl_dataset_t *ds = pl_dataset_fashion_mnist(
 *       "/usr/share/datasets/fashion-mnist", true);
 *   pl_loader_t *l = pl_loader_new(ds, 256, true, true, 42);
 *   pl_loader_start_epoch(l, 0);
 *   for (pl_batch b; pl_loader_next(l, &b);)
 *       pl_engine_train_step(e, &b, &r);
 *   pl_loader_free(l); pl_dataset_free(ds);
 */
#ifndef PLEIADES_DATA_H
#define PLEIADES_DATA_H

#include "pleiades/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A batch: one pointer per graph input, in input creation order; input i
 * holds size * numel(i) values of its dtype (float or int32). The step
 * copies them before it returns; nothing is kept. */
typedef struct pl_batch {
    int64_t size;
    const void **data;
} pl_batch;

/* Called on every batch before it is fed (the reference's
 * batch_data_process_func); may rewrite the pointed-to data in place. */
typedef void (*pl_batch_process_fn)(pl_batch *batch, void *user_data);

/* ------------------------------------------------------------------ data */

typedef struct pl_dataset pl_dataset_t;

/* Fashion-MNIST from the IDX files in `dir` (train-images-idx3-ubyte.gz,
 * train-labels-idx1-ubyte.gz, t10k-...), as shipped by Debian's
 * dataset-fashion-mnist in /usr/share/datasets/fashion-mnist. Images become
 * floats normalised with the dataset's mean 0.2860 and std 0.3530; labels
 * int32. A missing, truncated or malformed file (images of more than 2^31
 * pixels included) gives NULL and an error naming the file and what is
 * wrong. */
pl_dataset_t *pl_dataset_fashion_mnist(const char *dir, bool train);
void pl_dataset_free(pl_dataset_t *ds);
int64_t pl_dataset_size(const pl_dataset_t *ds);
/* Per-sample element count of the features (784) and number of classes. */
int64_t pl_dataset_features(const pl_dataset_t *ds);

/* What a dataset holds, in two numbers: its bytes as loaded (a text
 * split's bytes; a feature dataset's features and labels as stored) and
 * their CRC-32 (zlib's). The ranks of a data-parallel job each load their
 * own copy; comparing fingerprints tells whether they all read the same
 * data (pleiades train does at start-up). Start from {0, 0}: each call
 * adds ds's contents (the CRC runs on), so several datasets (a training
 * and a test split) make one fingerprint. */
typedef struct pl_fingerprint {
    uint64_t bytes;
    uint32_t crc32;
} pl_fingerprint;
pl_status pl_dataset_fingerprint(const pl_dataset_t *ds, pl_fingerprint *fp);

typedef struct pl_loader pl_loader_t;

/* Batches of `batch_size`, shuffled per epoch with a permutation derived
 * from (seed, epoch) when `shuffle`; an incomplete last batch is dropped
 * when `drop_last`. The dataset must outlive the loader. */
pl_loader_t *pl_loader_new(const pl_dataset_t *ds, int64_t batch_size,
                           bool shuffle, bool drop_last, uint64_t seed);
void pl_loader_free(pl_loader_t *l);
/* Starts epoch `epoch` (reshuffles). */
void pl_loader_start_epoch(pl_loader_t *l, int64_t epoch);
/* Next batch of the epoch: batch->data[0] features, [1] labels, pointing
 * into loader-owned memory valid until the next call. false at the end. */
bool pl_loader_next(pl_loader_t *l, pl_batch *batch);
int64_t pl_loader_batches_per_epoch(const pl_loader_t *l);
/* Gradient accumulation over `accumulate_size` batches (Colossal-AI's
 * GradAccumDataloader): an epoch ends after the largest multiple of it, so
 * that every optimizer update sums the same number of batches; the last
 * len % accumulate_size batches are skipped (10 batches, size 4: updates
 * after batches 4 and 8, batches 9 and 10 skipped). 1 undoes it. */
pl_status pl_loader_set_accumulation(pl_loader_t *l, int64_t accumulate_size);
/* Data parallelism (DistributedSampler's split): batch_size is the global
 * batch, which `world` must divide; every rank draws the same permutation
 * and rank `rank` takes positions rank, rank + world, ... of each global
 * batch, so the ranks together see exactly a one-process run's batches.
 * A last incomplete batch (drop_last false) is split the same way, and
 * dropped on every rank when it has fewer samples than ranks. */
pl_status pl_loader_set_shard(pl_loader_t *l, int rank, int world);
/* The checks of a shard, for a data source of one's own: 0 <= rank <
 * world <= 65536 and `world` divides the global batch; `who` prefixes
 * the message. */
pl_status pl_shard_check(const char *who, int64_t global_batch, int rank, int world);

/* Byte-level text (V = 256) from a file, or from every regular file of a
 * directory (sorted by name; symlinks and fortune's *.dat indexes skipped).
 * The first 90% of the bytes are the training split, the last 10% the
 * validation split. Empty or unreadable input gives NULL and an error
 * naming the path. pl_dataset_size is the split's length in bytes. */
pl_dataset_t *pl_dataset_text(const char *path, bool train);

/* Pre-tokenized corpora, memory-mapped (never read into memory as a whole;
 * read through once at load to check every token):
 *   PL_TOKENS_LLMC     llm.c's dev/data .bin files: 256 little-endian int32 of
 *                      header -- magic, version, token count, 253 zeros --
 *                      then the tokens: magic 20240520 version 1 for uint16
 *                      tokens (GPT-2's), magic 20240801 version 7 for uint32
 *                      (llm.c's LLaMA-3 files; vocabularies over 65536).
 *   PL_TOKENS_RAW_U16  nanoGPT's train.bin / val.bin: bare uint16 tokens.
 *   PL_TOKENS_RAW_U32  bare uint32 tokens.
 * The whole file is one split (give the validation split its own file).
 * Every header field is checked (the count against the file's size) and
 * every token against [0, vocab): NULL and an error naming the file, the
 * byte offset and the value otherwise. pl_dataset_size is the number of
 * tokens; pl_text_batch draws its windows as from a text split. */
typedef enum pl_token_format {
    PL_TOKENS_LLMC,
    PL_TOKENS_RAW_U16,
    PL_TOKENS_RAW_U32,
} pl_token_format;
pl_dataset_t *pl_dataset_tokens(const char *path, pl_token_format format, int64_t vocab);
/* "llmc", "raw-u16", "raw-u32" ("?" for another value). */
const char *pl_token_format_name(pl_token_format format);

/* Fills tokens[B*T] and targets[B*T] (targets = tokens shifted by one) with
 * B windows of T+1 bytes (tokens, for a token file) at offsets drawn from
 * (seed, index): the same arguments give the same batch on every
 * machine. */
pl_status pl_text_batch(const pl_dataset_t *ds, int64_t B, int64_t T,
                        uint64_t seed, int64_t index, int32_t *tokens,
                        int32_t *targets);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_DATA_H */
