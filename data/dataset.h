/* Internal view of a dataset: feature datasets (Fashion-MNIST) are
 * materialised into the same in-memory layout, so one loader
 * (data/loader.c) can batch and shuffle any of them. Text datasets
 * (data/text.c) keep their split's bytes instead: their samples are
 * windows at arbitrary offsets, drawn by pl_text_batch, not rows. */
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
    char *text_path;
};

/* A dataset of `size` samples with uninitialised x and y, for a loader
 * (`who` names the public function in the error message). NULL with
 * PL_STATUS_OUT_OF_MEMORY (or PL_STATUS_INVALID_ARGUMENT for negative or
 * overflowing sizes) on failure. Released with pl_dataset_free(). */
pl_dataset_t *pl_dataset_alloc(int64_t size, int64_t features,
                               int64_t classes, const char *who);

#endif
