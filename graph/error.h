/* Error reporting for graph/ and the layers above it: pl_fail (from
 * util/error.h, the bottom layer) plus the shape formatting that op and
 * engine messages use. */
#ifndef PL_GRAPH_ERROR_H
#define PL_GRAPH_ERROR_H

#include "pleiades.h"
#include "util/error.h"

/* Formats a tensor shape with its batch dim as "[B, 784]" into buf. */
const char *pl_shape_str(const pl_tensor_t *t, char *buf, size_t size);

#endif
