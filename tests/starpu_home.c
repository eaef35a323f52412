/* The CTest fixture starpu_home: starts and stops StarPU once in the
 * tests' StarPU home (STARPU_HOME, set for every test), before any other
 * test runs, so that StarPU's bus calibration files are there when the
 * tests start in parallel.
 *
 * Why: StarPU 1.3 writes each of those files (sampling/bus/<host>.*) with
 * fopen(path, "a+") and only then takes the file's lock; a process that
 * finds the file in that moment opens it, takes its read lock first, reads
 * an empty file and aborts (check_bus_affinity_file: "Error when reading
 * from file ...vm.affinity", an assertion). Every process whose home lacks
 * the files calibrates and writes them, so on a clean clone the first
 * tests to start (CTest -j 2, the four ranks of an MPI test) raced there:
 * data_parallel_4 aborted so at the start of a fresh build's first run.
 * Once the files exist, StarPU only reads them. */
#include <stdio.h>

#include "pleiades.h"

int main(void) {
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        fprintf(stderr, "starpu_home: %s\n", pl_last_error());
        return 1;
    }
    pl_runtime_free(rt);
    return 0;
}
