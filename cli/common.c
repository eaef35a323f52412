/* Run-time helpers shared by the pleiades commands (see common.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, also under -std=c11 */

#include "common.h"

#include <time.h>

#include "args.h"

double cli_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_library_failure(const char *what) {
    cli_error("%s: %s", what, pl_last_error());
    return CLI_EXIT_FAILURE;
}

int cli_start_runtime(int workers, const cli_exec_options *exec,
                      pl_runtime_t **out) {
    pl_runtime_options options = pl_runtime_options_default();
    options.cpu_workers = workers;
    if (exec)
        cli_exec_runtime(exec, &options);
    *out = pl_runtime_new(&options);
    return *out ? CLI_EXIT_OK
                : cli_library_failure("cannot start the StarPU runtime");
}

int cli_create_engine(pl_runtime_t *runtime, pl_graph_t *graph,
                      int batch_size, int tiles,
                      const pl_optimizer_options *optimizer,
                      const cli_exec_options *exec, pl_engine_t **out) {
    pl_engine_options options = pl_engine_options_default();
    options.batch_size = batch_size;
    options.tiles = tiles;
    options.optimizer = *optimizer;
    cli_exec_engine(exec, &options);
    *out = pl_engine_new(runtime, graph, &options);
    return *out ? CLI_EXIT_OK
                : cli_library_failure("cannot create the training engine");
}
