/* Run-time helpers shared by the pleiades commands (see common.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, also under -std=c11 */

#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "args.h"

bool cli_parse_workers(const char *flag, const char *text, int *out) {
    int64_t v;
    if (!cli_parse_int(flag, text, 0, INT32_MAX, &v))
        return false;
    int max = pl_runtime_max_cpu_workers();
    if (v > max) {
        cli_error("%s: %" PRId64 " CPU workers asked, but this StarPU build runs "
                  "at most %d (its STARPU_MAXCPUS)", flag, v, max);
        return false;
    }
    *out = (int)v;
    return true;
}

int cli_check_output_path(const char *flag, const char *path) {
    if (!path)
        return CLI_EXIT_OK;
    char *copy = strdup(path);
    if (!copy) {
        cli_error("out of memory");
        return CLI_EXIT_FAILURE;
    }
    const char *dir = dirname(copy);
    int rc = CLI_EXIT_OK;
    struct stat st;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    long name_max = pathconf(dir, _PC_NAME_MAX);
    /* The writer names a temporary "<name>.tmp.<pid>.<n>" beside it. */
    if (!*base) {
        cli_error("%s: '%s' names a directory, not a file", flag, path);
        rc = CLI_EXIT_FAILURE;
    } else if (name_max > 0 && strlen(base) + 32 > (size_t)name_max) {
        cli_error("%s: the file name of '%s' is too long (%zu bytes; at most "
                  "%ld here)", flag, path, strlen(base), name_max - 32);
        rc = CLI_EXIT_FAILURE;
    } else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        cli_error("%s: '%s' is a directory", flag, path);
        rc = CLI_EXIT_FAILURE;
    } else {
        int err = stat(dir, &st) != 0            ? errno
                  : !S_ISDIR(st.st_mode)         ? ENOTDIR
                  : access(dir, W_OK | X_OK) != 0 ? errno
                                                 : 0;
        if (err) {
            cli_error("%s: cannot write '%s': directory '%s': %s", flag, path,
                      dir, strerror(err));
            rc = CLI_EXIT_FAILURE;
        }
    }
    free(copy);
    return rc;
}

int cli_check_output_dir(const char *flag, const char *dir) {
    if (!dir)
        return CLI_EXIT_OK;
    /* mkdir first, then look: the ranks of one job check the same folder at
     * the same moment, and a stat-then-mkdir lets the slower rank fail with
     * EEXIST on the folder its peer has just made. */
    struct stat st;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        cli_error("%s: cannot create '%s': %s", flag, dir,
                  errno == ENOENT ? "its parent directory does not exist" : strerror(errno));
        return CLI_EXIT_FAILURE;
    }
    if (stat(dir, &st) != 0) {
        cli_error("%s: '%s': %s", flag, dir, strerror(errno));
        return CLI_EXIT_FAILURE;
    }
    if (!S_ISDIR(st.st_mode)) {
        cli_error("%s: '%s' is not a directory", flag, dir);
        return CLI_EXIT_FAILURE;
    }
    char probe[4096];
    if ((size_t)snprintf(probe, sizeof probe, "%s/.pleiades-probe.%ld", dir, (long)getpid()) >=
        sizeof probe) {
        cli_error("%s: '%s' is too long", flag, dir);
        return CLI_EXIT_FAILURE;
    }
    /* A real write: access() passes as root on a read-only disk's folder. */
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    int err = fd < 0 ? errno : write(fd, "p", 1) != 1 ? (errno ? errno : EIO) : 0;
    if (fd >= 0) {
        if (close(fd) != 0 && !err) err = errno;
        unlink(probe);
    }
    if (err) {
        cli_error("%s: cannot write in '%s': %s", flag, dir, strerror(err));
        return CLI_EXIT_FAILURE;
    }
    return CLI_EXIT_OK;
}

double cli_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_print_workers(const pl_runtime_t *rt) {
    int cpus = pl_runtime_cpu_workers(rt), gpus = pl_runtime_cuda_workers(rt);
    if (gpus > 0)
        printf("%d GPU%s (cuBLAS products), %d host-only CPU worker%s", gpus,
               gpus == 1 ? "" : "s", cpus, cpus == 1 ? "" : "s");
    else
        printf("%d CPU workers (fp32 products on %s)", cpus, pl_sgemm_library());
}

int cli_library_failure(const char *what) {
    cli_error("%s: %s", what, pl_last_error());
    return CLI_EXIT_FAILURE;
}

bool cli_parse_workers_flag(cli_flags *f, const cli_flag *row, void *field, const char *flag,
                            const char *arg) {
    (void)f, (void)row;
    return cli_parse_workers(flag, arg, field);
}

int cli_start_runtime(const pl_runtime_options *options, const cli_flags *flags,
                      pl_runtime_t **out) {
    /* starpu_messages stays false (the library's default): StarPU's
     * routine messages under a memory budget read like failures, and the
     * CLI reports memory and transfers itself (STARPU_SILENT=0 in the
     * environment shows them). */
    *out = pl_runtime_new(options);
    if (!*out) return cli_library_failure("cannot start the StarPU runtime");
    if (pl_runtime_world_size(*out) > 1) {
        /* Rank 0 speaks for the job: the others print nothing (errors
         * still go to stderr) and write no files (cli/fit.c). */
        if (pl_runtime_rank(*out) != 0 && !freopen("/dev/null", "w", stdout))
            return cli_library_failure("cannot silence stdout");
        if (flags && pl_runtime_check_same(*out, flags->names, flags->hashes,
                                           flags->n_flags) != PL_STATUS_OK) {
            cli_error("%s", pl_last_error());
            return CLI_EXIT_USAGE;
        }
    }
    return CLI_EXIT_OK;
}

/* "ranks 0, 2", "rank 1": the ranks r with all[2r..2r+1] equal to
 * all[2k..2k+1]. */
static void ranks_with(const double *all, int world, int k, char *buf, size_t size) {
    int n = 0;
    for (int r = 0; r < world; r++) n += all[2 * r] == all[2 * k] && all[2 * r + 1] == all[2 * k + 1];
    size_t used = (size_t)snprintf(buf, size, "rank%s", n == 1 ? "" : "s");
    for (int r = 0, first = 1; r < world && used < size; r++)
        if (all[2 * r] == all[2 * k] && all[2 * r + 1] == all[2 * k + 1]) {
            used += (size_t)snprintf(buf + used, size - used, "%s%d", first ? " " : ", ", r);
            first = 0;
        }
}

int cli_check_same_data(const pl_runtime_t *rt, const char *path,
                        const pl_dataset_t *const *sets, int n) {
    int world = pl_runtime_world_size(rt), rank = pl_runtime_rank(rt);
    if (world <= 1) return CLI_EXIT_OK;
    pl_fingerprint fp = {0, 0};
    for (int i = 0; i < n; i++)
        if (pl_dataset_fingerprint(sets[i], &fp) != PL_STATUS_OK)
            return cli_library_failure("cannot fingerprint the data");
    /* Doubles hold both exactly (sizes below 2^53). */
    double mine[2] = {(double)fp.bytes, (double)fp.crc32};
    const char *const names[] = {"the size of the --data contents",
                                 "the CRC-32 of the --data contents"};
    const uint64_t values[] = {fp.bytes, fp.crc32};
    if (pl_runtime_check_same(rt, names, values, 2) == PL_STATUS_OK) return CLI_EXIT_OK;
    /* They differ: rank 0 learns every rank's and names them. */
    double *all = rank == 0 ? calloc(2 * (size_t)world, sizeof *all) : NULL;
    if (pl_runtime_gather(rt, mine, 2, all) != PL_STATUS_OK || (rank == 0 && !all)) {
        free(all);
        cli_error("--data '%s': the ranks read different data (every rank must read the same)",
                  path);
        return CLI_EXIT_FAILURE;
    }
    if (rank == 0) {
        char line[4096];
        size_t used = (size_t)snprintf(line, sizeof line,
                                       "--data '%s': the ranks read different data (every rank "
                                       "must read the same contents):", path);
        for (int k = 0; k < world && used < sizeof line; k++) {
            bool first = true; /* the first rank with this fingerprint speaks for all */
            for (int r = 0; r < k && first; r++)
                first = !(all[2 * r] == all[2 * k] && all[2 * r + 1] == all[2 * k + 1]);
            if (!first) continue;
            char who[256];
            ranks_with(all, world, k, who, sizeof who);
            used += (size_t)snprintf(line + used, sizeof line - used,
                                     "%s %s read %.0f bytes, crc32 %08" PRIx32,
                                     k ? ";" : "", who, all[2 * k], (uint32_t)all[2 * k + 1]);
        }
        cli_error("%s", line);
        fflush(stderr);
    }
    free(all);
    /* Rank 0 has printed before any rank goes on to end the job (an
     * empty gather: its last step waits for rank 0). */
    pl_runtime_gather(rt, NULL, 0, NULL);
    return CLI_EXIT_FAILURE;
}

int cli_end_distributed(pl_runtime_t *rt, int rc) {
    if (rc != CLI_EXIT_OK && rt && pl_runtime_world_size(rt) > 1) {
        fflush(stdout);
        fflush(stderr);
        pl_runtime_abort(rt, rc);
    }
    return rc;
}

int cli_create_engine(pl_runtime_t *runtime, pl_graph_t *graph, int batch_size,
                      const cli_exec_options *exec, int64_t total_steps,
                      pl_engine_t **out) {
    pl_engine_options options = exec->engine;
    /* --batch-size is the global batch: each rank runs its share. */
    options.batch_size = exec->engine.dp > 1 ? batch_size / exec->engine.dp : batch_size;
    /* The LR schedule spans the run unless --total-steps says otherwise. */
    if (options.lr_scheduler.total_steps == 0) options.lr_scheduler.total_steps = total_steps;
    int layers_per_stage[CLI_MAX_PARTS];
    for (int i = 0; i < exec->n_layers_per_stage; i++)
        layers_per_stage[i] = (int)exec->layers_per_stage[i];
    options.layers_per_stage = exec->n_layers_per_stage ? layers_per_stage : NULL;
    /* The schedule's length is known only now (the run's optimizer steps
     * unless --total-steps): its warm-up is checked here, in flag terms. */
    const pl_lr_scheduler_options *lr = &options.lr_scheduler;
    if (pl_lr_scheduler_check(lr) != PL_STATUS_OK) {
        if (lr->warmup_steps >= lr->total_steps)
            cli_error("--warmup-steps %lld: must be less than the schedule's %lld steps "
                      "(%s)", (long long)lr->warmup_steps, (long long)lr->total_steps,
                      exec->engine.lr_scheduler.total_steps ? "--total-steps"
                                                            : "the run's optimizer steps");
        else
            cli_error("--lr-schedule: %s", pl_last_error());
        cli_usage_hint("train");
        return CLI_EXIT_USAGE;
    }
    /* A stage needs workers of its own: say which flag gives more before
     * the engine refuses in its own terms. */
    int workers = pl_runtime_cpu_workers(runtime);
    int per = options.workers_per_stage;
    int stages_here = options.pp > 1 ? 1 : options.stages;
    if (options.schedule != PL_SCHEDULE_NONE && pl_runtime_cuda_workers(runtime) == 0 &&
        (per > 0 ? per : 1) * stages_here > workers) {
        if (per > 0)
            cli_error("--workers-per-stage %d: %d stage%s%s x %d workers need %d CPU "
                      "workers, and this run has %d%s (--workers; the default is one per "
                      "core)", per, stages_here, stages_here > 1 ? "s" : "",
                      options.pp > 1 ? " per rank" : "", per, per * stages_here, workers,
                      options.pp > 1 ? " per rank" : "");
        else
            cli_error("--stages %d: each pipeline stage needs a CPU worker of its own, and "
                      "this run has %d (--workers; the default is one per core): give "
                      "--workers %d or fewer stages", options.stages, workers,
                      options.stages);
        cli_usage_hint("train");
        return CLI_EXIT_USAGE;
    }
    *out = pl_engine_new(runtime, graph, &options);
    return *out ? CLI_EXIT_OK
                : cli_library_failure("cannot create the training engine");
}
