/* The collective watchdog (watchdog.h says what and why). Its state is
 * this file's: the waits in progress, the communicators' collective
 * counts, the thread and the investigation it runs. */
#define _GNU_SOURCE /* pthread_setname_np */
#include "collectives/watchdog.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/error.h"

static pthread_mutex_t timeout_lock = PTHREAD_MUTEX_INITIALIZER;
static double timeout_s;

void pl_watchdog_set_timeout(double seconds) {
    pthread_mutex_lock(&timeout_lock);
    timeout_s = seconds > 0 && isfinite(seconds) ? seconds : 0;
    pthread_mutex_unlock(&timeout_lock);
}

double pl_watchdog_timeout(void) {
    pthread_mutex_lock(&timeout_lock);
    double t = timeout_s;
    pthread_mutex_unlock(&timeout_lock);
    return t;
}

#ifdef PL_WITH_MPI
#include <mpi.h>
#include <starpu.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define MAX_WAITS 16    /* threads waiting at once (a rank has two: its main
                           thread and its communication worker) */
#define MAX_REPORTED 4  /* waits an answer describes */
#define WHAT_LEN 64
#define MAX_SENDS 64    /* answers and questions in flight */

enum { TAG_QUERY = 1, TAG_REPLY = 2 };

typedef struct watched_comm {
    int id, size;
    int *members; /* world ranks */
    uint64_t entered; /* collectives this rank entered on it */
} watched_comm;

typedef struct wait_slot {
    bool active;
    uint64_t gen; /* bumped by every enter: an investigation's wait is
                     still the same only while gen is */
    int comm;
    uint64_t seq; /* the comm's collective #seq (from 1; 0: unknown comm) */
    const char *what;
    double since;
    double check_at; /* 0: since + the timeout; later when ranks still work */
    bool noted;      /* the "still working" note was printed */
} wait_slot;

typedef struct query {
    uint32_t id; /* the investigation, echoed */
    int32_t comm;
} query;

typedef struct reply {
    uint32_t id;
    int32_t known; /* the comm is registered here */
    uint64_t entered;
    double idle_s; /* since this rank's last progress */
    double vouch_age_s; /* since a rank this one waits for was last seen
                           working (-1: never) */
    int32_t n_waits;
    struct {
        double waited_s;
        char what[WHAT_LEN];
    } waits[MAX_REPORTED];
} reply;

typedef union message {
    query q;
    reply r;
} message;

static struct {
    pthread_mutex_t lock; /* all below but the thread's own */
    pthread_cond_t wake;
    bool mpi;
    MPI_Comm comm; /* the watchdog's own: questions and answers */
    int rank, size;
    watched_comm *comms;
    int n_comms, cap_comms;
    wait_slot slots[MAX_WAITS];
    uint64_t transitions; /* collectives entered and left (progress) */
    /* sampled by the thread each tick */
    int last_nsubmitted;
    uint64_t last_transitions;
    double last_progress;
    /* When a rank this one waited for was last seen working, directly
     * or through the ranks it waited for in turn (0: never). */
    double vouched;
    bool starpu_up; /* StarPU's task count can be read */
    bool running, stop;
    pthread_t thread;
} W = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The thread's tick: a few per timeout, at most a second apart (the
 * answer to another rank's question waits for it), at least 50 ms. */
static double tick_s(double timeout) {
    double p = timeout > 0 ? timeout / 4 : 1.0;
    return p < 0.05 ? 0.05 : p > 1.0 ? 1.0 : p;
}

/* How long an investigation waits for answers: three of the other ranks'
 * ticks, and at least 2 s, so that a rank merely slow to be scheduled on
 * a loaded host is not taken for a stopped one (up to 30 s on long
 * timeouts). */
static double grace_s(double timeout) {
    double g = fmin(timeout / 10, 30.0);
    return fmax(fmax(g, 3 * tick_s(timeout)), 2.0);
}

/* A wait younger than this may not have been judged by its own rank's
 * watchdog yet (a timeout, a tick to notice, the grace for answers). */
static double judged_s(double timeout) {
    return timeout + grace_s(timeout) + 2 * tick_s(timeout);
}

static watched_comm *find_comm(int id) {
    for (int i = 0; i < W.n_comms; i++)
        if (W.comms[i].id == id) return &W.comms[i];
    return NULL;
}

void pl_watchdog_comm_add(int id, int size, const int *members) {
    int *copy = malloc((size_t)(size > 0 ? size : 1) * sizeof *copy);
    if (!copy) return; /* unwatched: its collectives count as unknown */
    memcpy(copy, members, (size_t)size * sizeof *copy);
    pthread_mutex_lock(&W.lock);
    watched_comm *c = find_comm(id);
    int *old = c ? c->members : NULL; /* a new slot's fields are garbage */
    if (!c && W.n_comms == W.cap_comms) {
        int cap = W.cap_comms ? 2 * W.cap_comms : 8;
        watched_comm *grown = realloc(W.comms, (size_t)cap * sizeof *grown);
        if (grown) {
            W.comms = grown;
            W.cap_comms = cap;
        }
    }
    if (!c && W.n_comms < W.cap_comms) c = &W.comms[W.n_comms++];
    if (c) {
        *c = (watched_comm){.id = id, .size = size, .members = copy};
        copy = old;
    }
    pthread_mutex_unlock(&W.lock);
    free(copy);
}

void pl_watchdog_comm_remove(int id) {
    pthread_mutex_lock(&W.lock);
    watched_comm *c = find_comm(id);
    if (c) {
        free(c->members);
        *c = W.comms[--W.n_comms];
    }
    pthread_mutex_unlock(&W.lock);
}

int pl_watchdog_enter(int comm, const char *what) {
    double t = now_s();
    int h = -1;
    pthread_mutex_lock(&W.lock);
    if (W.mpi) {
        watched_comm *c = find_comm(comm);
        uint64_t seq = c ? ++c->entered : 0;
        W.transitions++;
        for (int i = 0; i < MAX_WAITS && h < 0; i++)
            if (!W.slots[i].active) h = i;
        if (h >= 0) {
            wait_slot *s = &W.slots[h];
            *s = (wait_slot){.active = true, .gen = s->gen + 1, .comm = comm, .seq = seq,
                             .what = what, .since = t};
        }
    }
    pthread_mutex_unlock(&W.lock);
    return h;
}

void pl_watchdog_leave(int handle) {
    if (handle < 0 || handle >= MAX_WAITS) return;
    pthread_mutex_lock(&W.lock);
    W.slots[handle].active = false;
    W.transitions++;
    pthread_mutex_unlock(&W.lock);
}

/* --------------------------------------------------------- the thread */

/* Messages in flight from the thread: their buffers live until MPI is
 * done with them. */
static struct {
    MPI_Request req[MAX_SENDS];
    message buf[MAX_SENDS];
} sends;

static void send_message(const message *m, size_t bytes, int dest, int tag) {
    int flag, free_slot = -1;
    for (int i = 0; i < MAX_SENDS && free_slot < 0; i++) {
        if (sends.req[i] != MPI_REQUEST_NULL) MPI_Test(&sends.req[i], &flag, MPI_STATUS_IGNORE);
        if (sends.req[i] == MPI_REQUEST_NULL) free_slot = i;
    }
    if (free_slot < 0) return; /* ranks not taking our messages: the asker times out */
    sends.buf[free_slot] = *m;
    MPI_Isend(&sends.buf[free_slot], (int)bytes, MPI_BYTE, dest, tag, W.comm,
              &sends.req[free_slot]);
}

/* Progress since the last tick: tasks submitted or finished (StarPU's
 * count of tasks not yet done moves), collectives entered or left. A
 * rank running a slow step moves both; a stopped or hung one neither. */
static void sample_progress_locked(double now, int n) {
    if (n != W.last_nsubmitted || W.transitions != W.last_transitions) {
        W.last_nsubmitted = n;
        W.last_transitions = W.transitions;
        W.last_progress = now;
    }
}

/* Answers every question that came since the last tick. */
static void serve(message *in, MPI_Request *req) {
    for (;;) {
        int flag = 0;
        MPI_Status status;
        MPI_Test(req, &flag, &status);
        if (!flag) return;
        message out = {.r = {.id = in->q.id}};
        double now = now_s();
        pthread_mutex_lock(&W.lock);
        watched_comm *c = find_comm(in->q.comm);
        out.r.known = c != NULL;
        out.r.entered = c ? c->entered : 0;
        out.r.idle_s = now - W.last_progress;
        out.r.vouch_age_s = W.vouched > 0 ? now - W.vouched : -1;
        for (int i = 0; i < MAX_WAITS && out.r.n_waits < MAX_REPORTED; i++) {
            const wait_slot *s = &W.slots[i];
            if (!s->active) continue;
            out.r.waits[out.r.n_waits].waited_s = now - s->since;
            snprintf(out.r.waits[out.r.n_waits].what, WHAT_LEN, "%s", s->what);
            out.r.n_waits++;
        }
        pthread_mutex_unlock(&W.lock);
        send_message(&out, sizeof out.r, status.MPI_SOURCE, TAG_REPLY);
        MPI_Irecv(in, sizeof in->q, MPI_BYTE, MPI_ANY_SOURCE, TAG_QUERY, W.comm, req);
    }
}

/* One timed-out wait being looked into: the other members asked, their
 * answers gathered until all came or the grace period ended. */
typedef struct investigation {
    bool on;
    uint32_t id; /* echoed in answers: a late answer to an earlier
                    question is not taken for one to this */
    int slot;
    uint64_t gen, seq;
    int comm;
    const char *what;
    double since, deadline, timeout;
    int n;        /* members */
    int *members; /* world ranks */
    bool *answered;
    reply *replies;
    message in;
    MPI_Request req;
} investigation;

static void end_investigation(investigation *v) {
    if (v->req != MPI_REQUEST_NULL) {
        MPI_Cancel(&v->req);
        MPI_Wait(&v->req, MPI_STATUS_IGNORE);
    }
    free(v->members);
    free(v->answered);
    free(v->replies);
    *v = (investigation){.req = MPI_REQUEST_NULL};
}

/* "ranks 0-3", "ranks 0, 2", "rank 1". */
static void format_ranks(const int *r, int n, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "rank%s ", n == 1 ? "" : "s");
    for (int i = 0; i < n && used < size; i++) {
        int j = i;
        while (j + 1 < n && r[j + 1] == r[j] + 1) j++;
        used += (size_t)snprintf(buf + used, size - used, "%s%d", i ? ", " : "", r[i]);
        if (j > i + 1 && used < size) {
            used += (size_t)snprintf(buf + used, size - used, "-%d", r[j]);
            i = j;
        }
    }
}

/* Looks for a wait past its time and asks the others about it. */
static void start_investigation(investigation *v, double now) {
    double timeout = pl_watchdog_timeout();
    if (timeout <= 0) return;
    pthread_mutex_lock(&W.lock);
    int slot = -1;
    for (int i = 0; i < MAX_WAITS && slot < 0; i++) {
        const wait_slot *s = &W.slots[i];
        if (s->active && now >= (s->check_at > 0 ? s->check_at : s->since + timeout)) slot = i;
    }
    if (slot < 0) {
        pthread_mutex_unlock(&W.lock);
        return;
    }
    const wait_slot *s = &W.slots[slot];
    const watched_comm *c = find_comm(s->comm);
    /* An unknown communicator: everyone is asked (and arrival unknown). */
    int n = c ? c->size : W.size;
    v->members = malloc((size_t)n * sizeof *v->members);
    v->answered = calloc((size_t)n, sizeof *v->answered);
    v->replies = calloc((size_t)n, sizeof *v->replies);
    if (v->members)
        for (int i = 0; i < n; i++) v->members[i] = c ? c->members[i] : i;
    static uint32_t last_id; /* across threads (runtimes) of the process */
    v->on = true;
    v->id = ++last_id;
    v->slot = slot;
    v->gen = s->gen;
    v->seq = s->seq;
    v->comm = s->comm;
    v->what = s->what;
    v->since = s->since;
    v->n = n;
    v->timeout = timeout;
    v->deadline = now + grace_s(timeout);
    pthread_mutex_unlock(&W.lock);
    if (!v->members || !v->answered || !v->replies) {
        end_investigation(v); /* out of memory: tried again next tick */
        return;
    }
    MPI_Irecv(&v->in, sizeof v->in.r, MPI_BYTE, MPI_ANY_SOURCE, TAG_REPLY, W.comm, &v->req);
    message q = {.q = {.id = v->id, .comm = v->comm}};
    for (int i = 0; i < n; i++)
        if (v->members[i] != W.rank) send_message(&q, sizeof q.q, v->members[i], TAG_QUERY);
}

/* Prints what the job waited for and ends it. */
static void report_and_abort(const investigation *v, const bool *culprit, double now) {
    char ranks[256];
    format_ranks(v->members, v->n, ranks, sizeof ranks);
    fprintf(stderr,
            "pleiades: rank %d: collective timeout: the %s, collective %" PRIu64 " among %s, "
            "has waited %.1f s, past the timeout of %g s:\n",
            W.rank, v->what, v->seq, ranks, now - v->since, v->timeout);
    for (int i = 0; i < v->n; i++) {
        if (!culprit[i]) continue;
        int r = v->members[i];
        if (!v->answered[i]) {
            fprintf(stderr,
                    "pleiades:   rank %d did not arrive: it does not answer (stopped, or "
                    "its process hangs)\n", r);
            continue;
        }
        const reply *a = &v->replies[i];
        fprintf(stderr,
                "pleiades:   rank %d did not arrive: it made no progress (no task, no "
                "collective) for %.1f s", r, a->idle_s);
        for (int k = 0; k < a->n_waits && k < MAX_REPORTED; k++)
            fprintf(stderr, "%s the %.*s for %.1f s", k ? "," : "; it waits in", WHAT_LEN,
                    a->waits[k].what, a->waits[k].waited_s);
        fprintf(stderr, "%s\n", a->n_waits ? "" : "; it waits in no collective");
    }
    fprintf(stderr,
            "pleiades: rank %d: ending the job (the timeout bounds each collective wait, not "
            "a step: pl_runtime_options.collective_timeout_s, the CLI's "
            "--collective-timeout; 0 turns it off)\n", W.rank);
    fflush(stderr);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Answers in; once all came or the grace period ended, the verdict. */
static void go_on_investigating(investigation *v, double now) {
    for (;;) {
        int flag = 0;
        MPI_Status status;
        MPI_Test(&v->req, &flag, &status);
        if (!flag) break;
        for (int i = 0; i < v->n && v->in.r.id == v->id; i++)
            if (v->members[i] == status.MPI_SOURCE) {
                v->answered[i] = true;
                v->replies[i] = v->in.r;
            }
        MPI_Irecv(&v->in, sizeof v->in.r, MPI_BYTE, MPI_ANY_SOURCE, TAG_REPLY, W.comm, &v->req);
    }
    int missing = 0;
    for (int i = 0; i < v->n; i++) missing += v->members[i] != W.rank && !v->answered[i];
    if (missing && now < v->deadline) return;
    pthread_mutex_lock(&W.lock);
    bool same = W.slots[v->slot].active && W.slots[v->slot].gen == v->gen;
    pthread_mutex_unlock(&W.lock);
    if (!same) { /* the collective completed meanwhile */
        end_investigation(v);
        return;
    }
    bool *culprit = calloc((size_t)v->n, sizeof *culprit);
    int n_culprits = 0, n_working = 0;
    double seen_working = 0; /* when a rank on the way was last seen working */
    for (int i = 0; culprit && i < v->n; i++) {
        if (v->members[i] == W.rank) continue;
        const reply *a = &v->replies[i];
        bool arrived = v->answered[i] && v->seq > 0 && a->known && a->entered >= v->seq;
        if (arrived || !v->answered[i]) {
            culprit[i] = !arrived;
            n_culprits += !arrived;
            continue;
        }
        /* Not there, but moving (a slow step): waited for, not blamed. */
        if (a->idle_s < v->timeout / 2) {
            n_working++;
            seen_working = now;
            continue;
        }
        /* Not moving, but waiting in a collective itself: for a rank that
         * is slow (a chain of waits), or stopped, or for this one (ranks
         * in different collectives). Its own watchdog judges that wait:
         * while it may not have yet, the rank is not blamed; once it has,
         * only if what it waits for was not seen working lately (the age
         * is handed on, never renewed, so a cycle of waits runs out). */
        double longest = -1;
        for (int k = 0; k < a->n_waits && k < MAX_REPORTED; k++)
            longest = fmax(longest, a->waits[k].waited_s);
        double horizon = 3 * judged_s(v->timeout);
        if (longest >= 0 && longest < judged_s(v->timeout)) {
            n_working++;
            continue;
        }
        if (longest >= 0 && a->vouch_age_s >= 0 && a->vouch_age_s < horizon) {
            n_working++;
            seen_working = fmax(seen_working, now - a->vouch_age_s);
            continue;
        }
        culprit[i] = true;
        n_culprits++;
    }
    if (n_culprits) report_and_abort(v, culprit, now);
    free(culprit);
    if (seen_working > 0) {
        pthread_mutex_lock(&W.lock);
        W.vouched = fmax(W.vouched, seen_working);
        pthread_mutex_unlock(&W.lock);
    }
    /* Everyone arrived (the data still moving) or is still working:
     * another timeout from now, with a note the first time. */
    pthread_mutex_lock(&W.lock);
    wait_slot *s = &W.slots[v->slot];
    bool note = false;
    if (s->active && s->gen == v->gen) {
        s->check_at = now + v->timeout;
        note = n_working && !s->noted;
        if (note) s->noted = true;
    }
    pthread_mutex_unlock(&W.lock);
    if (note)
        fprintf(stderr,
                "pleiades: rank %d: the %s has waited %.0f s (the collective timeout is %g "
                "s) for %d rank%s still working (or waiting for ranks that are); waiting "
                "on\n", W.rank, v->what, now - v->since, v->timeout, n_working,
                n_working == 1 ? "" : "s");
    end_investigation(v);
}

static void *watch_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "pl-watchdog");
    message in;
    MPI_Request req;
    MPI_Irecv(&in, sizeof in.q, MPI_BYTE, MPI_ANY_SOURCE, TAG_QUERY, W.comm, &req);
    investigation v = {.req = MPI_REQUEST_NULL};
    pthread_mutex_lock(&W.lock);
    while (!W.stop) {
        double tick = tick_s(pl_watchdog_timeout());
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        long ns = until.tv_nsec + (long)(tick * 1e9);
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        while (!W.stop && pthread_cond_timedwait(&W.wake, &W.lock, &until) != ETIMEDOUT) {}
        if (W.stop) break;
        /* StarPU's count outside the lock (it takes a lock of StarPU's);
         * StarPU, once up, stays up until this thread is joined. While it
         * starts, the rank counts as working. */
        bool up = W.starpu_up;
        pthread_mutex_unlock(&W.lock);
        int n = up ? starpu_task_nsubmitted() : 0;
        double now = now_s();
        pthread_mutex_lock(&W.lock);
        if (up)
            sample_progress_locked(now, n);
        else
            W.last_progress = now;
        pthread_mutex_unlock(&W.lock);
        serve(&in, &req);
        if (!v.on) start_investigation(&v, now);
        if (v.on) go_on_investigating(&v, now);
        pthread_mutex_lock(&W.lock);
    }
    pthread_mutex_unlock(&W.lock);
    end_investigation(&v);
    MPI_Cancel(&req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    /* Messages not taken yet stay in `sends` (the next thread tests them
     * before reusing a buffer; pl_watchdog_mpi_finalize lets them go). */
    return NULL;
}

pl_status pl_watchdog_mpi_init(int world_size) {
    pthread_mutex_lock(&W.lock);
    bool done = W.mpi;
    pthread_mutex_unlock(&W.lock);
    if (done) return PL_STATUS_OK;
    MPI_Comm comm;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "MPI_Comm_dup (the collective watchdog's) failed");
    int *all = malloc((size_t)world_size * sizeof *all);
    if (!all) {
        MPI_Comm_free(&comm);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory starting the collective watchdog");
    }
    for (int r = 0; r < world_size; r++) all[r] = r;
    for (int id = PL_WATCH_WORLD; id < PL_WATCH_GROUPS; id++)
        pl_watchdog_comm_add(id, world_size, all);
    free(all);
    for (int i = 0; i < MAX_SENDS; i++) sends.req[i] = MPI_REQUEST_NULL;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_lock(&W.lock);
    pthread_cond_init(&W.wake, &attr);
    W.comm = comm;
    MPI_Comm_rank(comm, &W.rank);
    W.size = world_size;
    W.mpi = true;
    pthread_mutex_unlock(&W.lock);
    pthread_condattr_destroy(&attr);
    return PL_STATUS_OK;
}

void pl_watchdog_mpi_finalize(void) {
    pl_watchdog_stop();
    pthread_mutex_lock(&W.lock);
    bool was = W.mpi;
    W.mpi = false;
    for (int i = 0; i < W.n_comms; i++) free(W.comms[i].members);
    free(W.comms);
    W.comms = NULL;
    W.n_comms = W.cap_comms = 0;
    pthread_mutex_unlock(&W.lock);
    if (!was) return;
    for (int i = 0; i < MAX_SENDS; i++)
        if (sends.req[i] != MPI_REQUEST_NULL) MPI_Request_free(&sends.req[i]);
    MPI_Comm_free(&W.comm);
}

pl_status pl_watchdog_start(void) {
    pthread_mutex_lock(&W.lock);
    if (!W.mpi || W.size < 2 || W.running) {
        pthread_mutex_unlock(&W.lock);
        return PL_STATUS_OK;
    }
    W.stop = false;
    W.last_progress = now_s();
    W.last_nsubmitted = -1;
    W.vouched = 0;
    W.starpu_up = false;
    int rc = pthread_create(&W.thread, NULL, watch_main, NULL);
    W.running = rc == 0;
    pthread_mutex_unlock(&W.lock);
    return rc == 0 ? PL_STATUS_OK
                   : pl_fail(PL_STATUS_RUNTIME_ERROR,
                             "cannot start the collective watchdog's thread: %s", strerror(rc));
}

void pl_watchdog_starpu_up(void) {
    pthread_mutex_lock(&W.lock);
    W.starpu_up = true;
    pthread_mutex_unlock(&W.lock);
}

void pl_watchdog_stop(void) {
    pthread_mutex_lock(&W.lock);
    /* Not from the thread itself (an exit during its MPI_Abort runs the
     * exit handlers, and so this, on that thread). */
    bool mine = W.running && !pthread_equal(pthread_self(), W.thread);
    if (mine) {
        W.stop = true;
        pthread_cond_signal(&W.wake);
    }
    pthread_mutex_unlock(&W.lock);
    if (!mine) return;
    pthread_join(W.thread, NULL);
    pthread_mutex_lock(&W.lock);
    W.running = false;
    pthread_mutex_unlock(&W.lock);
}

#else /* no MPI: no ranks to wait for */

pl_status pl_watchdog_mpi_init(int world_size) {
    (void)world_size;
    return PL_STATUS_OK;
}
void pl_watchdog_mpi_finalize(void) {}
void pl_watchdog_comm_add(int id, int size, const int *members) {
    (void)id, (void)size, (void)members;
}
void pl_watchdog_comm_remove(int id) { (void)id; }
int pl_watchdog_enter(int comm, const char *what) {
    (void)comm, (void)what;
    return -1;
}
void pl_watchdog_leave(int handle) { (void)handle; }
pl_status pl_watchdog_start(void) { return PL_STATUS_OK; }
void pl_watchdog_starpu_up(void) {}
void pl_watchdog_stop(void) {}

#endif
