/* The disk tier (StarPU's disk node) on Pleiades' own files; see
 * engine/offload.c. */
#ifndef PL_ENGINE_OFFLOAD_H
#define PL_ENGINE_OFFLOAD_H

#include <starpu.h>
#include <stdint.h>

/* Opens this process's run folder in `dir` (util/offload_dir: sweeping
 * dead runs' first, *removed (may be NULL) gets how many), before StarPU
 * starts (its janitor is forked then). 0 or an errno value. */
int pl_offload_open(const char *dir, int *removed);

/* Closes the run opened by pl_offload_open when no disk node was
 * registered on it (the runtime failed to start). */
void pl_offload_abandon(void);

/* Registers StarPU's disk node of `size` bytes on the open run: the node,
 * or -1 with *err an errno value (the disk's first allocation failed);
 * the run is then closed when StarPU shuts down. */
int pl_offload_register(starpu_ssize_t size, int *err);

/* The offload directory in use (NULL: none). */
const char *pl_offload_dir(void);

/* Bytes this run's offload files hold now. */
int64_t pl_offload_bytes(void);

#endif
