/* The non-pipelined submission order. */
#include "scheduling/schedule.h"

int pl_schedule_none(int n_parts, int microbatches, bool forward_only,
                     pl_schedule_item *items) {
    int n = 0;
    for (int m = 0; m < microbatches; m++)
        for (int k = 0; k < n_parts; k++)
            items[n++] = (pl_schedule_item){PL_DIRECTION_FORWARD, m, k};
    if (forward_only) return n;
    for (int m = 0; m < microbatches; m++)
        for (int k = n_parts - 1; k >= 0; k--)
            items[n++] = (pl_schedule_item){PL_DIRECTION_BACKWARD, m, k};
    return n;
}
