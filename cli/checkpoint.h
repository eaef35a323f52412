/* Full checkpoints from the trainers (--checkpoint-dir, --save-every,
 * --keep-last, --resume): what the MLP and GPT trainers share. Each
 * trainer decides what its data position is (named values) and when a
 * checkpoint is due. */
#ifndef PL_CLI_CHECKPOINT_H
#define PL_CLI_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include <pleiades.h>

/* Loads --resume PATH (a checkpoint, or a --checkpoint-dir: then its
 * newest) into e; *values gets the trainer's values and `path` the
 * checkpoint used. Checks that the run feeds the same batches: the saved
 * "seed" and "accumulate" must equal seed and accumulate (else a usage
 * error naming them). CLI_EXIT_* status. */
int cli_checkpoint_resume(pl_engine_t *e, const char *resume_path, uint64_t seed,
                          int accumulate, pl_checkpoint_values *values, char *path,
                          size_t size);

/* Writes DIR/step-<step> with the values (plus "seed" and "accumulate"),
 * then keeps the keep_last newest (0: all). CLI_EXIT_* status. */
int cli_checkpoint_save(pl_engine_t *e, const char *dir, int64_t step, int keep_last,
                        uint64_t seed, int accumulate, pl_checkpoint_values *values,
                        bool quiet);

#endif
