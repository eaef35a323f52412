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
 * (pl_runtime_max_cpu_workers), said at parse time with the real limit;
 * and the same as a flag table's CLI_CUSTOM parser (its field an int). */
bool cli_parse_workers(const char *flag, const char *text, int *out);
bool cli_parse_workers_flag(cli_flags *f, const cli_flag *row, void *field, const char *flag,
                            const char *arg);

/* Prints "<what>: <pl_last_error()>" and returns CLI_EXIT_FAILURE. */
int cli_library_failure(const char *what);

/* "N CPU workers (fp32 products on LIB)", or on a runtime with GPUs "N
 * GPU(s) (cuBLAS products), M host-only CPU worker(s)": the start-up
 * line's worker phrase. */
void cli_print_workers(const pl_runtime_t *rt);

/* A runtime as `options` say. A distributed one (--dp, --pp) silences
 * stdout on ranks other than 0 and, given the command line's `flags`,
 * compares them between ranks, a difference being a usage error naming
 * the flag. */
int cli_start_runtime(const pl_runtime_options *options, const cli_flags *flags,
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

/* A training engine for `graph` with `exec`'s engine options (checked by
 * cli_exec_finish), completed with what the run knows: the global batch
 * of batch_size samples (each rank's share of it) and the LR schedule over
 * `total_steps` optimizer steps unless --total-steps. */
int cli_create_engine(pl_runtime_t *runtime, pl_graph_t *graph, int batch_size,
                      const cli_exec_options *exec, int64_t total_steps,
                      pl_engine_t **out);

#endif
