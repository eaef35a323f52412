/* Naps for StarPU-MPI's progression thread on a host with more busy
 * threads than cores.
 *
 * StarPU 1.3's progression thread never blocks while a receive is posted
 * or a request is pending: it calls MPI_Test in a loop. A pipeline stage
 * posts its receives ahead, so the thread polls nearly all the time. On
 * 2 ranks sharing 2 cores it took a third of a core per rank, and both
 * ranks' threads sat on core 0 (StarPU binds the thread to the first core
 * its own workers leave free, the same on every rank), so stage 0's
 * compute worker got a third of its core: a 1F1B step across the two
 * ranks took 190 ms against 123 ms in one process. StarPU has no setting
 * for it, so Pleiades interposes MPI_Test through MPI's profiling
 * interface (the standard's way to wrap an MPI call; PMPI_Test is the
 * implementation): when the progression thread's test finds nothing
 * done and the thread has polled for PL_POLL_BURST_NS since its last nap,
 * it sleeps for a nap. Other threads' calls, and every call when naps are
 * off, go straight through. The wrapper takes effect when the program
 * finds it before libmpi's MPI_Test: linked statically, or with
 * libpleiades listed before libmpi (as Pleiades' own programs are);
 * test_pipeline_ranks checks that naps are taken.
 *
 * A nap delays a transfer by up to its length, and the thread may hold
 * StarPU-MPI's own lock while it naps (the envelope test runs under it),
 * so a worker handing over a send waits for it too. Measured on 2 ranks
 * sharing 2 cores (bench_pp, GPT p = 2, m = 8, 2026-11-26): no naps 194 ms
 * per 1F1B step; naps of 150 µs 173 ms, 300 µs 148-149 ms, 500 µs
 * 143 ms, 1000 µs 155 ms; interleaved 342 -> 152 ms at 300 µs. Later the
 * same day, with twice as fast products, the short slices and idle
 * workers sleeping until pushed: 1F1B 86.7-90.7 ms at 300 µs against
 * 84.2-84.8 at 500 (three runs each; 100 µs 115-118, 1000 µs 94-98:
 * shorter naps take the compute worker's core, longer ones delay the
 * transfers), ZB-H1 86.5-87.6 against 85.7-86.7: 500 µs. Tried and
 * no better (docs/benchmarks.md, "Pipeline stages across processes"):
 * binding each rank's thread to its own compute core, polling without
 * naps while a compute worker is idle, waking the thread after every task
 * or after each task whose output is sent (sends then left sooner, steps
 * did not get shorter). */
#define _GNU_SOURCE /* pthread_getname_np */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "collectives/comm.h"
#include "util/thread_latency.h"

#ifdef PL_WITH_MPI
#include <mpi.h>

static atomic_long nap_ns; /* 0: naps off */
static atomic_long naps_taken;

void pl_comm_progress_naps(long nap_us) {
    atomic_store(&nap_ns, nap_us > 0 ? nap_us * 1000 : 0);
}

long pl_comm_progress_nap_us(void) { return atomic_load(&nap_ns) / 1000; }

long pl_comm_progress_naps_taken(void) { return atomic_load(&naps_taken); }

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Whether the calling thread is StarPU-MPI's progression thread, which
 * StarPU names "MPI" when it binds it (asked once per thread; Open MPI's
 * own helper threads of that name never call MPI_Test). */
static _Thread_local int thread_kind; /* 0 unknown, 1 progression, 2 other */
static _Thread_local long polling_since_ns;

static bool on_progression_thread(void) {
    if (thread_kind == 0) {
        char name[16] = "";
        pthread_getname_np(pthread_self(), name, sizeof name);
        thread_kind = strcmp(name, "MPI") == 0 ? 1 : 2;
        /* Naps as asked, not the default 50 µs of timer slack more. */
        if (thread_kind == 1) {
            prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
            pl_thread_wake_promptly();
        }
    }
    return thread_kind == 1;
}

/* Polling this long between naps: a burst covers every pending request
 * of StarPU-MPI's loop at least once. */
#define PL_POLL_BURST_NS 20000L

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    int rc = PMPI_Test(request, flag, status);
    long nap = atomic_load_explicit(&nap_ns, memory_order_relaxed);
    if (nap == 0 || rc != MPI_SUCCESS || *flag || !on_progression_thread()) return rc;
    long now = now_ns();
    if (polling_since_ns == 0) polling_since_ns = now;
    if (now - polling_since_ns >= PL_POLL_BURST_NS) {
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        atomic_fetch_add_explicit(&naps_taken, 1, memory_order_relaxed);
        polling_since_ns = 0;
    }
    return rc;
}
#else
void pl_comm_progress_naps(long nap_us) { (void)nap_us; }
long pl_comm_progress_nap_us(void) { return 0; }
long pl_comm_progress_naps_taken(void) { return 0; }
#endif
