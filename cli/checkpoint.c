/* Full checkpoints from the trainers (see checkpoint.h). */
#include "checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "common.h"

int cli_checkpoint_resume(pl_engine_t *e, const char *resume_path, uint64_t seed,
                          int accumulate, pl_checkpoint_values *values, char *path,
                          size_t size) {
    char state[4200];
    snprintf(state, sizeof state, "%s/state.json", resume_path);
    if (access(state, F_OK) == 0) {
        snprintf(path, size, "%s", resume_path);
    } else if (pl_checkpoint_latest(resume_path, path, size) != PL_STATUS_OK) {
        cli_error("--resume: %s", pl_last_error());
        return CLI_EXIT_FAILURE;
    }
    if (pl_engine_load_checkpoint(e, path, values) != PL_STATUS_OK) {
        cli_error("--resume: %s", pl_last_error());
        return CLI_EXIT_FAILURE;
    }
    int64_t saved_seed = 0, saved_accumulate = 0;
    if (pl_checkpoint_values_get(values, "seed", &saved_seed) != PL_STATUS_OK ||
        pl_checkpoint_values_get(values, "accumulate", &saved_accumulate) != PL_STATUS_OK) {
        cli_error("--resume: %s: not a checkpoint of 'pleiades train' (%s)", path,
                  pl_last_error());
        return CLI_EXIT_FAILURE;
    }
    /* The data stream is a function of the seed (and of how many batches
     * make an update): other values would feed other batches. */
    if ((uint64_t)saved_seed != seed || saved_accumulate != accumulate) {
        cli_error("--resume: %s was trained with --seed %" PRId64 " --accumulate %" PRId64
                  "; resuming with --seed %" PRIu64 " --accumulate %d would feed other "
                  "batches (give the same values)",
                  path, saved_seed, saved_accumulate, seed, accumulate);
        cli_usage_hint("train");
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

int cli_checkpoint_save(pl_engine_t *e, const char *dir, int64_t step, int keep_last,
                        uint64_t seed, int accumulate, pl_checkpoint_values *values,
                        bool quiet) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        cli_error("--checkpoint-dir: cannot create '%s': %s", dir, strerror(errno));
        return CLI_EXIT_FAILURE;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/step-%" PRId64, dir, step);
    if (pl_checkpoint_values_set(values, "seed", (int64_t)seed) != PL_STATUS_OK ||
        pl_checkpoint_values_set(values, "accumulate", accumulate) != PL_STATUS_OK ||
        pl_engine_save_checkpoint(e, path, values) != PL_STATUS_OK ||
        (keep_last > 0 && pl_checkpoint_prune(dir, keep_last) != PL_STATUS_OK)) {
        cli_error("--checkpoint-dir: %s", pl_last_error());
        return CLI_EXIT_FAILURE;
    }
    if (!quiet) {
        printf("checkpoint %s\n", path);
        fflush(stdout);
    }
    return CLI_EXIT_OK;
}
