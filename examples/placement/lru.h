/* An LRU placement policy written only against the public interface of
 * pleiades.h: an example of a user-defined pl_placement_policy (used by
 * examples/custom_placement.c and the CLI's --placement lru). */
#ifndef PL_EXAMPLES_LRU_H
#define PL_EXAMPLES_LRU_H

#include <pleiades.h>

/* Evicts the least recently used resident units the step does not need;
 * prefetches nothing; every optimizer update runs on the compute tier. */
const pl_placement_policy *lru_placement_policy(void);

#endif
