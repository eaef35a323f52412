/* GPipe (Huang et al., 2019) written only against the public interface of
 * pleiades.h: an example of a user-defined pl_schedule_def (used by
 * examples/custom_schedule.c and the CLI's --schedule gpipe). */
#ifndef PL_EXAMPLES_GPIPE_H
#define PL_EXAMPLES_GPIPE_H

#include <pleiades.h>

/* Every stage runs the forwards of all microbatches, 0 first, then their
 * backwards, the last microbatch first. One model chunk per stage; any
 * m >= 1. Bubble (p−1)/m like 1F1B's, but all m microbatches' activations
 * are alive at once (1F1B keeps at most p). */
const pl_schedule_def *gpipe_schedule(void);

#endif
