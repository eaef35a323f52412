/* Checkpoint directories on disk (checkpoint/checkpoint_dir.c): which of
 * them Pleiades wrote, and removing only those.
 *
 * Why a marker: pruning (--keep-last), the cleanup of a killed save's
 * "<dir>.tmp.<pid>" and the replacement of an existing checkpoint all
 * delete files. A name alone ("step-3") proves nothing: a user's folder or
 * a symbolic link to one can carry it, and following it would delete
 * someone's data. So a save writes the marker file first, and removal
 * happens only inside a real directory (opened with O_NOFOLLOW, its
 * entries unlinked relative to that descriptor) that holds the marker (or,
 * for checkpoints written before the marker existed, a state.json of
 * Pleiades' format). Anything else is left alone and named in a
 * warning. */
#ifndef PL_CHECKPOINT_DIR_H
#define PL_CHECKPOINT_DIR_H

#include <stdbool.h>

#include "pleiades.h"

#define PL_CKPT_MARKER ".pleiades-checkpoint"
#define PL_CKPT_STEP_PREFIX "step-"

/* Whether `path` is one checkpoint rather than a folder of step-<N>: it
 * has a state.json entry, whatever that is. A state.json that is a
 * symlink loop, a dangling link or a directory makes `path` a damaged
 * checkpoint, which its reader then names, not a root that holds "no
 * step-<N> directory". */
bool pl_ckpt_has_state(const char *path);

/* Writes the marker into `dir` (a save's first file). */
pl_status pl_ckpt_mark(const char *dir);

/* Why `path` is not a checkpoint directory Pleiades wrote ("a symbolic
 * link", "not a directory", ...), or NULL when it is one or does not
 * exist (*exists says which). */
const char *pl_ckpt_foreign(const char *path, bool *exists);

/* Removes `path` when it is a checkpoint directory Pleiades wrote, or an
 * empty directory (a save killed before its marker); leaves anything else
 * as it is, with a warning naming it and why. True when it is gone. */
bool pl_ckpt_remove(const char *path);

/* Removes what killed saves left in `parent`: "<name>.tmp.<pid>" and
 * "<name>.old.tmp.<pid>" of a process that no longer runs, where <name> is
 * `name` or a "step-<N>". */
void pl_ckpt_sweep_temporaries(const char *parent, const char *name);

#endif
