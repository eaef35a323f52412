/* Why: a distributed rank's communication worker and StarPU-MPI's
 * progression thread sleep most of the time and share cores with compute
 * workers that never yield (a task of milliseconds). Measured on the
 * 2-core machine (bench_dp's MLP, 2 ranks, Linux 6.18): a collective that
 * became ready while the core's compute worker was inside a task started
 * 2.2-2.5 ms later, after that task ended, although the communication
 * worker then polled every 500 µs (it now sleeps until a collective is
 * pushed, scheduling/policy.c): the kernel's EEVDF scheduler lets the
 * running thread finish its time slice before a woken one of the same
 * weight runs. EEVDF (Linux 6.12 and later) lets a thread ask for a
 * shorter slice; a thread with a shorter slice preempts one with a longer
 * slice when it wakes, without a larger share of the core (its weight is
 * unchanged) and without privileges. Older kernels ignore the request.
 *
 * How: sched_setattr(2) with SCHED_OTHER, the thread's own nice value, and
 * sched_runtime = the slice (clamped by the kernel to 0.1-100 ms), read
 * back with sched_getattr(2). glibc 2.36 has no wrappers, hence the raw
 * system calls. */
#define _GNU_SOURCE
#include "util/thread_latency.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
/* sched_setattr(2)'s argument, as the kernel's ABI lays it out (its
 * header, linux/sched/types.h, clashes with glibc's sched.h). */
struct pl_sched_attr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
};

bool pl_thread_wake_promptly(void) {
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    if (errno != 0) nice = 0;
    struct pl_sched_attr a = {.size = sizeof a,
                              .sched_policy = SCHED_OTHER,
                              .sched_nice = nice,
                              .sched_runtime = 100 * 1000}; /* 100 µs, the least */
    if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) return false;
    /* Kernels before EEVDF's slices accept the call and ignore the slice:
     * taken only if it reads back. */
    struct pl_sched_attr b = {.size = sizeof b};
    return syscall(SYS_sched_getattr, 0, &b, sizeof b, 0) == 0 &&
           b.sched_runtime == a.sched_runtime;
}
#else
bool pl_thread_wake_promptly(void) { return false; }
#endif
