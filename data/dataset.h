/* Internal view of a dataset: feature datasets (Fashion-MNIST) are
 * materialised into the same in-memory layout, so one loader
 * (data/loader.c) can batch and shuffle any of them. Text datasets
 * (data/text.c) keep their split's bytes instead, and token files
 * (data/tokens.c) their mapped tokens: the samples of both are windows at
 * arbitrary offsets, drawn by pl_text_batch, not rows. */
#ifndef PL_GRAPH_DATASET_H
#define PL_GRAPH_DATASET_H

#include <stdint.h>

#include "pleiades.h"

struct pl_dataset {
    int64_t size;     /* samples */
    int64_t features; /* floats per sample */
    int64_t classes;  /* labels lie in [0, classes) */
    float *x;         /* [size, features], row-major, owned */
    int32_t *y;       /* [size], owned */
    /* Text datasets only (NULL otherwise; x and y are NULL for them): the
     * split's bytes, [size] of them, owned, and the path it was read from
     * (owned), which pl_text_batch names in its errors. */
    uint8_t *text;
    char *text_path; /* token files too */
    /* Token files only (NULL otherwise): the whole file mapped read-only
     * (map, map_len; never read into memory as a whole), and its [size]
     * little-endian tokens of token_bytes (2 or 4) each at `tokens`. */
    void *map;
    size_t map_len;
    const uint8_t *tokens;
    int token_bytes;
};

/* Token i of a text or token dataset (0 <= i < size). The bytes are
 * decoded little-endian one by one: the files are little-endian whatever
 * the host, and a byte load has no alignment to respect. */
static inline int32_t pl_dataset_token(const pl_dataset_t *ds, int64_t i) {
    if (ds->text) return ds->text[i];
    const uint8_t *p = ds->tokens + (size_t)i * (size_t)ds->token_bytes;
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8;
    if (ds->token_bytes == 4) v |= (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (int32_t)v; /* < vocab <= INT32_MAX: checked at load */
}

/* A dataset of `size` samples with uninitialised x and y, for a loader
 * (`who` names the public function in the error message). NULL with
 * PL_STATUS_OUT_OF_MEMORY (or PL_STATUS_INVALID_ARGUMENT for negative or
 * overflowing sizes) on failure. Released with pl_dataset_free(). */
pl_dataset_t *pl_dataset_alloc(int64_t size, int64_t features,
                               int64_t classes, const char *who);

#endif
