/* Memory admission in the Pleiades scheduling policy: under a memory limit
 * a worker starts a task only if its buffers fit beside those of the tasks
 * already running (otherwise two tasks can each hold part of their buffers
 * and wait forever for the rest). Measured here as the most tasks that
 * ever ran at once on two workers, for tasks that fit two at a time and
 * tasks that do not. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <starpu.h>

#include "scheduling/policy.h"
#include "test_util.h"

static atomic_int running, most;

static void hold(void *buffers[], void *arg) {
    (void)buffers, (void)arg;
    int now = atomic_fetch_add(&running, 1) + 1;
    int seen = atomic_load(&most);
    while (now > seen && !atomic_compare_exchange_weak(&most, &seen, now)) {
    }
    usleep(40000); /* long enough that the other worker polls meanwhile */
    atomic_fetch_sub(&running, 1);
}

static struct starpu_codelet hold_cl = {
    .cpu_funcs = {hold},
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_R},
    .name = "hold",
};

/* Runs 8 independent tasks, each on its own two vectors of `kb` KB, under
 * a limit of `limit_kb` KB (0: none); returns the most that ran at once. */
static int most_at_once(int kb, int limit_kb) {
    enum { N = 8 };
    size_t n = (size_t)kb * 1024 / sizeof(float);
    float *mem[N][2];
    starpu_data_handle_t h[N][2];
    pl_sched_set_memory_limit(STARPU_MAIN_RAM, (int64_t)limit_kb * 1024);
    atomic_store(&running, 0);
    atomic_store(&most, 0);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 2; j++) {
            mem[i][j] = calloc(n, sizeof(float));
            starpu_vector_data_register(&h[i][j], STARPU_MAIN_RAM, (uintptr_t)mem[i][j],
                                        (uint32_t)n, sizeof(float));
        }
    for (int i = 0; i < N; i++)
        CHECK(starpu_task_insert(&hold_cl, STARPU_RW, h[i][0], STARPU_R, h[i][1], 0) == 0,
              "task %d submitted", i);
    starpu_task_wait_for_all();
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 2; j++) {
            starpu_data_unregister(h[i][j]);
            free(mem[i][j]);
        }
    return atomic_load(&most);
}

int main(void) {
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.ncpus = 2;
    conf.ncuda = 0;
    conf.nopencl = 0;
    conf.sched_policy = &pl_sched_policy;
    conf.sched_policy_name = NULL;
    CHECK(starpu_init(&conf) == 0, "starpu_init");
    CHECK(starpu_cpu_worker_get_count() == 2, "two CPU workers");

    /* Without a limit both workers run tasks side by side. */
    int none = most_at_once(300, 0);
    /* 600 KB tasks under 1 MB: one at a time. */
    int big = most_at_once(300, 1024);
    /* 400 KB tasks under 1 MB: two fit together. */
    int small = most_at_once(200, 1024);
    printf("tasks at once: no limit %d, 600 KB tasks under 1 MB %d, "
           "400 KB tasks under 1 MB %d\n", none, big, small);
    CHECK(none == 2, "without a limit two tasks ran at once (%d)", none);
    CHECK(big == 1, "600 KB tasks under a 1 MB limit ran one at a time (%d)", big);
    CHECK(small == 2, "400 KB tasks under a 1 MB limit ran two at once (%d)", small);
    starpu_shutdown();
    return tu_failures ? 1 : 0;
}
