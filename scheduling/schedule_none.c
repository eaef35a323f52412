/* The non-pipelined schedule. */
#include "scheduling/schedule.h"

int pl_schedule_none(int n_ops, int microbatches, bool forward_only,
                     pl_schedule_item *items) {
    int n = 0;
    for (int m = 0; m < microbatches; m++)
        items[n++] = (pl_schedule_item){PL_DIRECTION_FORWARD, m, 0, n_ops - 1, 0};
    if (forward_only) return n;
    for (int m = 0; m < microbatches; m++)
        items[n++] = (pl_schedule_item){PL_DIRECTION_BACKWARD, m, 0, n_ops - 1, 0};
    return n;
}
