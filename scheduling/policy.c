/* The Pleiades scheduling policy (see policy.h). One mutex guards all
 * queues: with a handful of workers and tasks of ≥100 µs, contention is
 * negligible, and a single lock keeps the ordering logic obvious.
 *
 * Per-task cost matters all the same: bench_pipeline's non-pipelined GPT
 * step is ~970 tasks of 10 µs to 5 ms on 2 workers, so each µs a worker
 * spends between two tasks is ~0.4% idle. Measured there (StarPU's
 * profiling times against timestamps taken in push, pop and post_exec;
 * perf samples inside the F/L/B/W window), a worker spends ~10 µs between
 * tasks (median 7-9), nearly all of it CPU work on that worker inside
 * StarPU: job termination (dependency release, the successors' push, the
 * engine's record callback, task destruction) ~6 µs, input fetch and
 * profiling ~2 µs, data release ~1 µs. This policy's share, ~0.75% of the
 * step in pl_sched_overhead_ns, is down to ~0.35% with the fast paths
 * below: no lock where none is needed (submit and post-exec hooks), no
 * walk past queued background tasks, no per-worker codelet checks on
 * CPU-only runs, no wake-ups of drivers that never sleep. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "scheduling/policy.h"
#include "util/thread_latency.h"

typedef struct stage_queue {
    int n_workers;                   /* the workers serving the stage */
    int workers[STARPU_NMAXWORKERS];
    int64_t started;                 /* ordered tasks started this iteration */
    struct starpu_task_list ordered; /* ready, in push order */
    struct starpu_task_list free;    /* ready, out of order (W tasks) */
    int cur;                         /* item whose tasks may start */
    int n_items;
    int *total;                      /* ordered tasks per item, -1 unknown */
    int *popped;
    int *w_pending;                  /* per item: submitted out-of-order
                                        tasks it owns not yet started */
    int w_first;                     /* items before it own no pending W */
} stage_queue;

static struct {
    pthread_mutex_t lock;
    /* Untagged tasks, ready, in push order: those on the critical path,
     * and background ones (tag->background) apart so that a pop finds the
     * first of either without walking past the other (up to ~40 tasks
     * queue there in a non-pipelined step, most of them background). */
    struct starpu_task_list central;
    struct starpu_task_list central_bg;
    /* Every worker is a CPU worker (Debian's StarPU, CPU runs): any of
     * them can run any task, so the per-worker codelet checks, each a
     * call into StarPU, are skipped. */
    bool cpu_only;
    bool cpu_host_only; /* pl_sched_set_cpu_host_only */
    bool central_order; /* pl_sched_set_central_order */
    /* Collectives (tag->comm) wait here for the communication worker,
     * which runs nothing else; -1: none, they go to the central FIFO. */
    struct starpu_task_list comm;
    int comm_worker;
    int progress_worker; /* run by StarPU-MPI's thread: never sleeps */
    int n_stages;
    stage_queue stages[PL_MAX_STAGES];
    int stage_of[STARPU_NMAXWORKERS]; /* the stage a worker serves, -1: none */
    uint64_t overhead_ns;
    /* Idle workers of a distributed run sleep here until work is pushed
     * (idle_sleep): [0] compute workers, [1] the communication worker,
     * apart so that a compute worker's pushes (every task's successors)
     * do not wake the communication worker, whose short slice would
     * preempt a compute worker each time. `sleepers` tells a pusher
     * whether to signal. */
    pthread_mutex_t idle_lock;
    pthread_cond_t idle_cond[2];
    atomic_int sleepers[2];
    /* Memory admission (pl_sched_set_memory_limit): the tasks each worker
     * was handed on the limited node and the bytes of their buffers. */
    int limit_node;
    int64_t limit_bytes; /* 0: no limit */
    int64_t in_flight;   /* bytes of the tasks in slots */
    struct {
        struct starpu_task *task[PL_SCHED_MAX_IN_FLIGHT];
        int64_t bytes[PL_SCHED_MAX_IN_FLIGHT];
    } slots[STARPU_NMAXWORKERS];
} S = {.lock = PTHREAD_MUTEX_INITIALIZER, .idle_lock = PTHREAD_MUTEX_INITIALIZER,
       .comm_worker = -1, .progress_worker = -1};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void init_idle_cond(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    for (int k = 0; k < 2; k++) pthread_cond_init(&S.idle_cond[k], &a);
    pthread_condattr_destroy(&a);
}

static void init_sched(unsigned sched_ctx_id) {
    (void)sched_ctx_id;
    static pthread_once_t cond_once = PTHREAD_ONCE_INIT;
    pthread_once(&cond_once, init_idle_cond);
    starpu_task_list_init(&S.central);
    starpu_task_list_init(&S.central_bg);
    starpu_task_list_init(&S.comm);
    S.cpu_only = starpu_worker_get_count() == starpu_cpu_worker_get_count();
    S.comm_worker = -1;
    S.progress_worker = -1;
    S.cpu_host_only = false;
    S.central_order = false;
    S.n_stages = 0;
    for (int w = 0; w < STARPU_NMAXWORKERS; w++) S.stage_of[w] = -1;
    S.overhead_ns = 0;
    S.limit_bytes = 0;
    S.in_flight = 0;
    memset(S.slots, 0, sizeof S.slots);
}

static void free_stages(void) {
    for (int s = 0; s < S.n_stages; s++) {
        free(S.stages[s].total);
        free(S.stages[s].popped);
        free(S.stages[s].w_pending);
    }
    S.n_stages = 0;
}

static void deinit_sched(unsigned sched_ctx_id) {
    (void)sched_ctx_id;
    pthread_mutex_lock(&S.lock);
    free_stages();
    pthread_mutex_unlock(&S.lock);
}

/* Moves `cur` past items whose ordered tasks have all started. */
static void advance(stage_queue *q) {
    while (q->cur < q->n_items && q->total[q->cur] >= 0 &&
           q->popped[q->cur] == q->total[q->cur])
        q->cur++;
}

void pl_sched_configure(int n_stages, const int *n_items, const int *stage_of_worker,
                        int n_workers) {
    pthread_mutex_lock(&S.lock);
    free_stages();
    for (int w = 0; w < STARPU_NMAXWORKERS; w++)
        S.stage_of[w] = w < n_workers && stage_of_worker[w] >= 0 &&
                                stage_of_worker[w] < n_stages && stage_of_worker[w] < PL_MAX_STAGES
                            ? stage_of_worker[w]
                            : -1;
    for (int s = 0; s < n_stages && s < PL_MAX_STAGES; s++) {
        stage_queue *q = &S.stages[s];
        q->n_workers = 0;
        for (int w = 0; w < STARPU_NMAXWORKERS; w++)
            if (S.stage_of[w] == s) q->workers[q->n_workers++] = w;
        q->started = 0;
        starpu_task_list_init(&q->ordered);
        starpu_task_list_init(&q->free);
        q->cur = 0;
        q->n_items = n_items[s];
        q->total = malloc((n_items[s] ? n_items[s] : 1) * sizeof *q->total);
        q->popped = calloc(n_items[s] ? n_items[s] : 1, sizeof *q->popped);
        q->w_pending = calloc(n_items[s] ? n_items[s] : 1, sizeof *q->w_pending);
        q->w_first = 0;
        for (int i = 0; i < n_items[s]; i++) q->total[i] = -1;
        S.n_stages = s + 1;
    }
    pthread_mutex_unlock(&S.lock);
}

/* Blocking drivers sleep on an empty pop: wake whoever may run a task.
 * Debian's StarPU (and scripts/build-starpu-cuda's) is built with
 * STARPU_NON_BLOCKING_DRIVERS: its workers poll and never sleep, and a
 * wake-up only takes the target's scheduling mutex, which that worker
 * itself takes on every poll, so it is compiled out there. */
static void wake(int worker) {
#ifdef STARPU_NON_BLOCKING_DRIVERS
    (void)worker;
#else
    starpu_wake_worker_relax_light(worker);
#endif
}

/* Wakes the workers of stage s (with S.lock released: the stage's worker
 * list only changes in pl_sched_configure, between iterations). */
static void wake_stage(int s) {
#ifdef STARPU_NON_BLOCKING_DRIVERS
    (void)s;
#else
    if (s < 0 || s >= S.n_stages) return;
    for (int i = 0; i < S.stages[s].n_workers; i++) wake(S.stages[s].workers[i]);
#endif
}

/* Wakes the idle workers of a distributed run that sleep in idle_sleep:
 * the communication worker (comm) or the compute workers (all of them: a
 * handful, and each goes back to sleep if the work is not its own).
 * Called after a change that may give them something to run, with S.lock
 * released. */
static void wake_sleepers(bool comm) {
    if (atomic_load(&S.sleepers[comm]) == 0) return;
    pthread_mutex_lock(&S.idle_lock);
    pthread_cond_broadcast(&S.idle_cond[comm]);
    pthread_mutex_unlock(&S.idle_lock);
}

void pl_sched_item_submitted(int stage, int item, int count) {
    pthread_mutex_lock(&S.lock);
    if (stage >= 0 && stage < S.n_stages && item >= 0 &&
        item < S.stages[stage].n_items) {
        stage_queue *q = &S.stages[stage];
        q->total[item] = count;
        advance(q);
    }
    pthread_mutex_unlock(&S.lock);
    wake_stage(stage);
    wake_sleepers(false);
}

void pl_sched_set_cpu_host_only(bool on) {
    pthread_mutex_lock(&S.lock);
    S.cpu_host_only = on;
    pthread_mutex_unlock(&S.lock);
}

void pl_sched_set_central_order(bool on) {
    pthread_mutex_lock(&S.lock);
    S.central_order = on;
    pthread_mutex_unlock(&S.lock);
}

void pl_sched_set_comm_worker(int worker) {
    pthread_mutex_lock(&S.lock);
    S.comm_worker = worker;
    pthread_mutex_unlock(&S.lock);
}

void pl_sched_set_progress_worker(int worker) {
    pthread_mutex_lock(&S.lock);
    S.progress_worker = worker;
    pthread_mutex_unlock(&S.lock);
}

uint64_t pl_sched_overhead_ns(void) {
    pthread_mutex_lock(&S.lock);
    uint64_t ns = S.overhead_ns;
    pthread_mutex_unlock(&S.lock);
    return ns;
}

static const pl_sched_tag *tag_of(const struct starpu_task *task) {
    const pl_sched_tag *tag = task->sched_data;
    if (!tag || tag->stage < 0 || tag->stage >= S.n_stages) return NULL;
    return tag;
}

/* Whether `worker` has an implementation of `t` (all do on CPU-only runs;
 * with GPUs a CPU-only codelet must not land on a CUDA worker). */
static bool can_run(unsigned worker, struct starpu_task *t) {
    if (S.cpu_only) return true;
    if (!starpu_worker_can_execute_task_first_impl(worker, t, NULL)) return false;
    if (S.cpu_host_only && starpu_worker_get_type((int)worker) == STARPU_CPU_WORKER)
        return t->where == STARPU_CPU || !t->cl || !t->cl->cuda_funcs[0];
    return true;
}

/* Counts the weight gradients each item owns as they are submitted: an
 * item's are all counted once pl_sched_item_submitted reports it (the
 * engine submits an item's tasks, then reports it). */
static void submit_hook(struct starpu_task *task) {
    /* Only owned weight gradients are counted. The tag is the engine's,
     * fixed before submission, so the others (every task of the
     * non-pipelined and interleaved schedules) are told apart without
     * the lock, which the submitting thread would otherwise take ~1000
     * times per step against the workers' pops (on 2 cores it shares one
     * with a worker, and a holder descheduled there stalls every pop). */
    const pl_sched_tag *any = task->sched_data;
    if (!any || any->item >= 0 || any->owner < 0) return;
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&S.lock);
    const pl_sched_tag *tag = tag_of(task);
    if (tag && tag->owner < S.stages[tag->stage].n_items)
        S.stages[tag->stage].w_pending[tag->owner]++;
    S.overhead_ns += now_ns() - t0;
    pthread_mutex_unlock(&S.lock);
}

/* Whether every weight gradient owned by an item before `cur` has started
 * (items before cur are fully submitted: cur only moves past reported
 * items). */
static int weights_done(stage_queue *q) {
    while (q->w_first < q->cur && q->w_pending[q->w_first] == 0) q->w_first++;
    return q->w_first >= q->cur;
}

static int push_task(struct starpu_task *task) {
    uint64_t t0 = now_ns();
    int target = -1, target_stage = -1;
#ifndef STARPU_NON_BLOCKING_DRIVERS
    /* Which workers may run an untagged task is decided before it is
     * queued: once it is in a list (and the lock released) another worker
     * may pop, run and destroy it, so `task` must not be touched again. */
    unsigned n_workers = starpu_worker_get_count();
    int candidates[STARPU_NMAXWORKERS], n_candidates = 0;
#endif
    pthread_mutex_lock(&S.lock);
    const pl_sched_tag *tag = tag_of(task);
    const pl_sched_tag *any = task->sched_data;
    if (any && any->comm && S.comm_worker >= 0) {
        starpu_task_list_push_back(&S.comm, task);
        target = S.comm_worker;
    } else if (!tag) {
#ifndef STARPU_NON_BLOCKING_DRIVERS
        for (unsigned w = 0; w < n_workers; w++)
            if (can_run(w, task)) candidates[n_candidates++] = (int)w;
#endif
        starpu_task_list_push_back(any && any->background ? &S.central_bg : &S.central,
                                   task);
    } else {
        stage_queue *q = &S.stages[tag->stage];
        starpu_task_list_push_back(tag->item >= 0 ? &q->ordered : &q->free, task);
        target_stage = tag->stage;
    }
    starpu_push_task_end(task);
    S.overhead_ns += now_ns() - t0;
    pthread_mutex_unlock(&S.lock);
    wake_sleepers(target >= 0 && target == S.comm_worker);
    if (target >= 0) wake(target);
    else if (target_stage >= 0) wake_stage(target_stage);
#ifndef STARPU_NON_BLOCKING_DRIVERS
    else
        for (int i = 0; i < n_candidates; i++)
            if (starpu_wake_worker_relax_light(candidates[i])) break;
#endif
    return 0;
}

void pl_sched_set_memory_limit(int node, int64_t bytes) {
    pthread_mutex_lock(&S.lock);
    S.limit_node = node;
    S.limit_bytes = bytes > 0 ? bytes : 0;
    pthread_mutex_unlock(&S.lock);
}

/* Bytes of a task's distinct buffers. */
static int64_t task_bytes(const struct starpu_task *t) {
    int n = (int)STARPU_TASK_GET_NBUFFERS(t);
    int64_t b = 0;
    for (int i = 0; i < n; i++) {
        starpu_data_handle_t h = STARPU_TASK_GET_HANDLE(t, i);
        bool dup = false;
        for (int j = 0; j < i && !dup; j++) dup = STARPU_TASK_GET_HANDLE(t, j) == h;
        if (!dup) b += (int64_t)starpu_data_get_size(h);
    }
    return b;
}

static bool limited(int worker) {
    return S.limit_bytes > 0 &&
           (int)starpu_worker_get_memory_node((unsigned)worker) == S.limit_node;
}

/* Whether `worker` may start `t` now. StarPU fetches a task's buffers one
 * by one and holds those it has while it waits for the rest; when the
 * tasks running at once need more than the node's limit together, each
 * can hold part of its buffers and wait forever for memory only the
 * others could free (seen with two AdamW updates of 4 x 148 KB chunks
 * under a 1 MB budget). So a task starts only if it fits beside those in
 * flight, or when none is (each fits alone: the engine checks that). */
static bool admits(const struct starpu_task *t, int worker) {
    if (!limited(worker)) return true;
    int free_slot = 0;
    while (free_slot < PL_SCHED_MAX_IN_FLIGHT && S.slots[worker].task[free_slot])
        free_slot++;
    if (free_slot == PL_SCHED_MAX_IN_FLIGHT) return false;
    return S.in_flight == 0 || S.in_flight + task_bytes(t) <= S.limit_bytes;
}

static void admit(struct starpu_task *t, int worker) {
    if (!limited(worker)) return;
    for (int i = 0; i < PL_SCHED_MAX_IN_FLIGHT; i++)
        if (!S.slots[worker].task[i]) {
            S.slots[worker].task[i] = t;
            S.slots[worker].bytes[i] = task_bytes(t);
            S.in_flight += S.slots[worker].bytes[i];
            return;
        }
}

/* After a task ran: its buffers are no longer needed where it ran. A
 * worker's slots are written only by that worker (admit in its pop, here
 * after its tasks), so it finds its task without the lock, and takes the
 * lock only for a task it holds: never without a memory limit (this hook
 * runs after every task). */
static void post_exec_hook(struct starpu_task *task, unsigned sched_ctx_id) {
    (void)sched_ctx_id;
    int worker = starpu_worker_get_id();
    if (worker < 0) return;
    int slot = 0;
    while (slot < PL_SCHED_MAX_IN_FLIGHT && S.slots[worker].task[slot] != task) slot++;
    if (slot == PL_SCHED_MAX_IN_FLIGHT) return;
    pthread_mutex_lock(&S.lock);
    S.slots[worker].task[slot] = NULL;
    S.in_flight -= S.slots[worker].bytes[slot];
    pthread_mutex_unlock(&S.lock);
    wake_sleepers(false); /* a task held back for memory may fit now */
}

/* The first ready task of the current item, if any (still queued). */
static struct starpu_task *peek_ordered(stage_queue *q) {
    for (struct starpu_task *t = starpu_task_list_begin(&q->ordered);
         t != starpu_task_list_end(&q->ordered); t = starpu_task_list_next(t)) {
        const pl_sched_tag *tag = t->sched_data;
        if (tag->item == q->cur) return t;
    }
    return NULL;
}

static struct starpu_task *take_ordered(stage_queue *q, struct starpu_task *t) {
    starpu_task_list_erase(&q->ordered, t);
    /* The tag is the engine's, reset when it submits the task; it reads
     * this back after the task ran (the trace's start order). */
    ((pl_sched_tag *)t->sched_data)->start_order = q->started++;
    q->popped[q->cur]++;
    advance(q);
    return t;
}

/* The first task of `list` this worker can run. */
static struct starpu_task *pop_runnable(struct starpu_task_list *list, int worker) {
    for (struct starpu_task *t = starpu_task_list_begin(list);
         t != starpu_task_list_end(list); t = starpu_task_list_next(t))
        if (can_run((unsigned)worker, t) && admits(t, worker)) {
            starpu_task_list_erase(list, t);
            return t;
        }
    return NULL;
}

/* The runnable task of `list` with the lowest tag->order, the first
 * pushed among equals (pl_sched_set_central_order). The list is short (a
 * few tasks per tile), so a walk costs less than keeping it sorted. */
static struct starpu_task *pop_lowest_order(struct starpu_task_list *list, int worker) {
    struct starpu_task *best = NULL;
    int best_order = 0;
    for (struct starpu_task *t = starpu_task_list_begin(list);
         t != starpu_task_list_end(list); t = starpu_task_list_next(t)) {
        const pl_sched_tag *tag = t->sched_data;
        int order = tag ? tag->order : 0;
        if ((!best || order < best_order) && can_run((unsigned)worker, t) && admits(t, worker)) {
            best = t;
            best_order = order;
        }
    }
    if (best) starpu_task_list_erase(list, best);
    return best;
}

/* From the central FIFOs: the first ready task on the critical path (a
 * forward, loss or input gradient), else the first background one (weight
 * gradients, optimizer updates), which can wait without delaying others. */
static struct starpu_task *pop_central(int worker) {
    struct starpu_task *(*pop)(struct starpu_task_list *, int) =
        S.central_order ? pop_lowest_order : pop_runnable;
    struct starpu_task *t = pop(&S.central, worker);
    return t ? t : pop(&S.central_bg, worker);
}

/* An out-of-order task of stage q. With one worker per stage, that worker
 * runs it to completion before its next pop, so "started" is "done" for
 * the stage's order; with several, a forward item may start beside the
 * weight gradients it waited for (they still started first). */
static struct starpu_task *pop_free(stage_queue *q, int worker) {
    struct starpu_task *t = pop_runnable(&q->free, worker);
    const pl_sched_tag *tag = t ? t->sched_data : NULL;
    if (tag && tag->owner >= 0 && tag->owner < q->n_items && q->w_pending[tag->owner] > 0)
        q->w_pending[tag->owner]--;
    return t;
}

/* The stage `worker` serves, -1 for none. */
static int stage_of(int worker) {
    return worker >= 0 && worker < STARPU_NMAXWORKERS ? S.stage_of[worker] : -1;
}

/* Whether anything is queued that `worker` might run: an unlocked peek
 * (idle workers poll pop_task continuously; a stale answer only delays
 * the next poll, no task is touched) or, with S.lock held, a sure one. */
static bool queued_for(int worker) {
    if (worker == S.comm_worker) return !starpu_task_list_empty(&S.comm);
    if (!starpu_task_list_empty(&S.central) || !starpu_task_list_empty(&S.central_bg))
        return true;
    int s = stage_of(worker);
    if (s < 0 || s >= S.n_stages) return false;
    const stage_queue *q = &S.stages[s];
    return !starpu_task_list_empty(&q->ordered) || !starpu_task_list_empty(&q->free);
}

/* StarPU's drivers poll (Debian's is built with non-blocking drivers):
 * an idle worker spins on its core. In a distributed run the
 * communication worker is idle most of the time, and every worker shares
 * cores with those of the host's other ranks; while a collective runs,
 * the compute workers are mostly idle and spinning beside it would slow
 * it (measured: a 4 MB reduction 12 ms instead of 1 ms). So there idle
 * workers sleep until a task is pushed (push_task, and the other changes
 * that can give one work, call wake_sleepers), at most `max_ns`.
 *
 * They napped before, for fixed times: the communication worker 500 µs,
 * so a collective started up to that late, and the compute workers
 * 20 µs, whose wake-ups interrupted the collective's threads 50 times a
 * millisecond (200-µs naps made bench_dp's MLP step 9 % faster, but would
 * delay every task by up to that long). Measured against those naps, two
 * ranks on 2 cores, A/B in one session: the MLP's DDP step 17.3-17.5 ->
 * 15.7-15.9 ms (hidden communication 39-50 -> 53-61 %), ZeRO-3's 19.3-19.9
 * -> 18.0-19.2 ms, the GPT's DDP and ZeRO-3 steps 3 % faster, a pipeline
 * across the ranks unchanged (it was 5 % slower while one condition
 * served every sleeper: each task's pushes woke the communication
 * worker, whose short slice preempted a compute worker).
 *
 * Race-free: a sleeper counts itself, then looks at the queues under
 * S.lock; a pusher queues under S.lock, then reads the count. Either the
 * sleeper sees the task, or the pusher sees the sleeper and signals once
 * it waits (the signal takes idle_lock, which the sleeper holds until
 * it waits). */
static void idle_sleep(int worker, long max_ns) {
    static __thread bool slack_set;
    if (!slack_set) { /* timeouts as asked, not 50 µs of timer slack more */
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        slack_set = true;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += max_ns;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    bool comm = worker == S.comm_worker;
    pthread_mutex_lock(&S.idle_lock);
    atomic_fetch_add(&S.sleepers[comm], 1);
    pthread_mutex_lock(&S.lock);
    bool idle = !queued_for(worker);
    pthread_mutex_unlock(&S.lock);
    if (idle) pthread_cond_timedwait(&S.idle_cond[comm], &S.idle_lock, &until);
    atomic_fetch_sub(&S.sleepers[comm], 1);
    pthread_mutex_unlock(&S.idle_lock);
}

static bool may_have_work(int worker) {
    if (queued_for(worker)) return true;
    if (S.comm_worker < 0) return false; /* one process: poll */
    if (worker == S.progress_worker) {
        /* Back to StarPU-MPI's polling at once; the yield lets a
         * collective's thread on this core run (measured, bench_pp
         * interleaved on 2 ranks: a 2 MB sum of shared chunks took 8-12 ms
         * beside a spinning thread, the step 99 ms against 68 with it). */
        sched_yield();
        return false;
    }
    if (worker == S.comm_worker) {
        /* It wakes onto a core a compute worker holds: without asking, a
         * collective that became ready waited for that worker's task to
         * end (util/thread_latency.c). */
        static __thread bool prompt;
        if (!prompt) {
            pl_thread_wake_promptly();
            prompt = true;
        }
    }
    /* The timeouts only bound a missed signal's cost. */
    idle_sleep(worker, worker == S.comm_worker ? 10000000L : 1000000L);
    return queued_for(worker);
}

static struct starpu_task *pop_task(unsigned sched_ctx_id) {
    (void)sched_ctx_id;
    int worker = starpu_worker_get_id();
    if (!may_have_work(worker)) return NULL;
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&S.lock);
    struct starpu_task *task = NULL;
    if (worker == S.comm_worker) {
        /* Collectives only, in submission order (their token handle
         * already serialises them; every rank submits the same list). */
        task = starpu_task_list_empty(&S.comm) ? NULL : starpu_task_list_pop_front(&S.comm);
        if (task) S.overhead_ns += now_ns() - t0;
        pthread_mutex_unlock(&S.lock);
        return task;
    }
    int s = stage_of(worker);
    if (s >= 0 && s < S.n_stages) {
        stage_queue *q = &S.stages[s];
        struct starpu_task *next = peek_ordered(q);
        /* Before a forward item: ready weight gradients first, and those
         * of earlier backward items that have owners even if that means
         * waiting (see policy.h). Otherwise weight gradients run only when
         * nothing in order is ready. */
        bool forward = next && ((const pl_sched_tag *)next->sched_data)->forward;
        if (!next || forward) task = pop_free(q, worker);
        if (!task && next && (!forward || weights_done(q)) && admits(next, worker))
            task = take_ordered(q, next);
    }
    if (!task) task = pop_central(worker);
    if (task) admit(task, worker);
    /* A pop that hands out nothing is idle time (the worker had nothing
     * it could run), not scheduling overhead. */
    if (task) S.overhead_ns += now_ns() - t0;
    pthread_mutex_unlock(&S.lock);
    return task;
}

struct starpu_sched_policy pl_sched_policy = {
    .init_sched = init_sched,
    .deinit_sched = deinit_sched,
    .submit_hook = submit_hook,
    .push_task = push_task,
    .pop_task = pop_task,
    .post_exec_hook = post_exec_hook,
    .policy_name = "pleiades",
    .policy_description = "per-stage ordered queues realising pipeline schedules",
};
