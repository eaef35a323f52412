/* One collective task, waited for: the shape of the engine's (collectives/
 * comm.h, collectives/nccl.h) — `n` vectors with their modes, then the
 * token read-write — for the tests that call the codelets directly
 * (test_collectives over MPI, test_nccl on a GPU). `arg` may live on the
 * caller's stack: the task is synchronous. `callback` (may be NULL) runs
 * on the worker that ran the task, right after it. */
#ifndef PL_TESTS_COLLECTIVE_TASK_H
#define PL_TESTS_COLLECTIVE_TASK_H

#include <stdbool.h>
#include <stddef.h>

#include <starpu.h>

static inline bool tu_run_collective(struct starpu_codelet *cl, void *arg, size_t arg_size,
                                     starpu_data_handle_t *vecs,
                                     const enum starpu_data_access_mode *modes, int n,
                                     starpu_data_handle_t token, void (*callback)(void *),
                                     void *callback_arg) {
    struct starpu_task *task = starpu_task_create();
    task->cl = cl;
    task->nbuffers = n + 1;
    for (int i = 0; i < n; i++) {
        STARPU_TASK_SET_HANDLE(task, vecs[i], i);
        STARPU_TASK_SET_MODE(task, modes[i], i);
    }
    STARPU_TASK_SET_HANDLE(task, token, n);
    STARPU_TASK_SET_MODE(task, STARPU_RW, n);
    task->cl_arg = arg;
    task->cl_arg_size = arg_size;
    task->callback_func = callback;
    task->callback_arg = callback_arg;
    task->synchronous = 1;
    return starpu_task_submit(task) == 0;
}

#endif
