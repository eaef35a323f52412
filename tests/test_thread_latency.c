/* pl_thread_wake_promptly (util/thread_latency.c): where the kernel takes
 * the request (Linux 6.12+, EEVDF), the calling thread's slice reads back
 * as 100 µs through sched_getattr(2) (and on Linux 6.12+ it must take
 * it), its nice value and policy are
 * unchanged, and another thread's slice is untouched; elsewhere it says
 * it did nothing and nothing changed. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "test_util.h"
#include "util/thread_latency.h"

/* Whether the running kernel has EEVDF's per-thread slices (Linux 6.12):
 * there the request must be taken, so a request that silently does
 * nothing fails this test. */
static bool kernel_has_slices(void) {
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
    return major > 6 || (major == 6 && minor >= 12);
}

#ifdef SYS_sched_getattr
struct attr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
    uint32_t util_min, util_max;
};

static struct attr read_attr(void) {
    struct attr a;
    memset(&a, 0, sizeof a);
    if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0) a.size = 0;
    return a;
}

static pthread_barrier_t requested;

/* Started before the main thread's request; reads its own slice after. */
static void *other_thread(void *arg) {
    static struct attr a;
    pthread_barrier_wait(&requested);
    a = read_attr();
    (void)arg;
    return &a;
}
#endif

int main(void) {
#ifdef SYS_sched_getattr
    pid_t tid = (pid_t)syscall(SYS_gettid);
    CHECK(setpriority(PRIO_PROCESS, (id_t)tid, 3) == 0, "setpriority: %s", strerror(errno));
    struct attr before = read_attr();
    if (before.size == 0) { /* a sandbox may refuse the call */
        int err = errno;
        CHECK(!pl_thread_wake_promptly(), "taken though sched_getattr fails here");
        printf("sched_getattr(2) refused here (%s): nothing to read back\n", strerror(err));
        printf(tu_failures ? "FAILED (%d)\n" : "all passed\n", tu_failures);
        return tu_failures != 0;
    }
    pthread_t t;
    pthread_barrier_init(&requested, NULL, 2);
    CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0, "pthread_create");
    bool taken = pl_thread_wake_promptly();
    struct attr after = read_attr();
    pthread_barrier_wait(&requested);
    struct attr *o = NULL;
    pthread_join(t, (void **)&o);
    CHECK(after.size != 0, "sched_getattr failed: %s", strerror(errno));
    CHECK(after.sched_nice == 3, "nice %d after the request, 3 before", after.sched_nice);
    CHECK(after.sched_policy == before.sched_policy, "policy changed: %u -> %u",
          before.sched_policy, after.sched_policy);
    CHECK(o && o->size != 0 && o->sched_runtime == before.sched_runtime,
          "another thread's slice changed: %llu -> %llu",
          (unsigned long long)before.sched_runtime,
          o ? (unsigned long long)o->sched_runtime : 0ull);
    CHECK(taken || !kernel_has_slices(), "the kernel has EEVDF slices, yet the request "
          "was not taken");
    if (taken) {
        CHECK(after.sched_runtime == 100000, "slice %llu ns, asked 100000",
              (unsigned long long)after.sched_runtime);
        printf("slice %llu ns before the request, %llu after; another thread's %llu\n",
               (unsigned long long)before.sched_runtime,
               (unsigned long long)after.sched_runtime,
               o ? (unsigned long long)o->sched_runtime : 0ull);
    } else {
        CHECK(after.sched_runtime == before.sched_runtime,
              "not taken, yet the slice changed: %llu -> %llu",
              (unsigned long long)before.sched_runtime,
              (unsigned long long)after.sched_runtime);
        printf("this kernel keeps its own slices (the request was not taken)\n");
    }
#else
    CHECK(!pl_thread_wake_promptly(), "taken without sched_setattr");
#endif
    printf(tu_failures ? "FAILED (%d)\n" : "all passed\n", tu_failures);
    return tu_failures != 0;
}
