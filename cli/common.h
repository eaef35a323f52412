/* Run-time helpers shared by the commands that drive the library
 * (`train` for both models, `generate`): timing, reporting a failed
 * library call, and starting the runtime and the engine the way every
 * command does. Each returns a CLI_EXIT_* status where it can fail. */
#ifndef PL_CLI_COMMON_H
#define PL_CLI_COMMON_H

#include <stdbool.h>

#include <pleiades.h>

#include "exec_options.h"

/* Monotonic seconds, for rates and elapsed times (never wall-clock, which
 * can jump). */
double cli_now_seconds(void);

/* Checks, before any work, that `path` (given with `flag`) can be written
 * later: not a directory, and its directory exists and is writable (files
 * are written beside their target and renamed over it). NULL passes.
 * Prints why not and returns CLI_EXIT_FAILURE, so that a bad --trace or
 * --save costs seconds, not a finished run. */
int cli_check_output_path(const char *flag, const char *path);
/* The same for a directory the run writes into (--checkpoint-dir): created
 * when missing (its parent must exist), and a probe file written and
 * removed in it, so that a file in the way, a missing parent or a
 * read-only disk costs seconds, not the whole run. NULL: nothing to check. */
int cli_check_output_dir(const char *flag, const char *dir);

/* --workers N: 0 (StarPU's choice) up to what this StarPU build can run
 * (pl_runtime_max_cpu_workers), said at parse time with the real limit. */
bool cli_parse_workers(const char *flag, const char *text, int *out);

/* Prints "<what>: <pl_last_error()>" and returns CLI_EXIT_FAILURE. */
int cli_library_failure(const char *what);

/* "N CPU workers (fp32 products on LIB)", or on a runtime with GPUs "N
 * GPU(s) (cuBLAS products), M host-only CPU worker(s)": the start-up
 * line's worker phrase. */
void cli_print_workers(const pl_runtime_t *rt);

/* A runtime with `workers` CPU workers (0: StarPU's choice) and, when
 * `exec` is not NULL, its --device/--cuda-workers and --dp (distributed:
 * then stdout is silenced on ranks other than 0, and the ranks' command
 * lines are compared, a difference being a usage error naming the flag). */
int cli_start_runtime(int workers, const cli_exec_options *exec,
                      pl_runtime_t **out);

/* A run over ranks: every rank must have read the same data from --data
 * `path` (the same path may hold other contents on another host or in
 * another working directory). Compares the fingerprints (size and CRC-32,
 * pl_dataset_fingerprint) of the n datasets each rank loaded; when they
 * differ, rank 0 names every rank's and the run is refused (exit status).
 * Collective; nothing to do on one process. */
int cli_check_same_data(const pl_runtime_t *rt, const char *path,
                        const pl_dataset_t *const *sets, int n);

/* A distributed run that failed on this rank ends the whole job
 * (pl_runtime_abort with `rc`): the other ranks would otherwise wait for
 * it in their next collective. Returns rc otherwise. */
int cli_end_distributed(pl_runtime_t *rt, int rc);

/* A training engine for `graph`: batch_size samples per step in `tiles`
 * tiles, the given optimizer, and `exec`'s pipeline schedule, placement and
 * LR schedule over `total_steps` optimizer steps. */
int cli_create_engine(pl_runtime_t *runtime, pl_graph_t *graph,
                      int batch_size, int tiles,
                      const pl_optimizer_options *optimizer,
                      const cli_exec_options *exec, int64_t total_steps,
                      pl_engine_t **out);

#endif
