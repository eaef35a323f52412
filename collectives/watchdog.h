/* The collective watchdog: a rank that stops (SIGSTOP, a frozen node) or
 * hangs must not leave the other ranks waiting in a collective forever.
 *
 * Each wait in a collective (comm.c's tasks and host collectives, the
 * start-up exchanges) is bracketed by pl_watchdog_enter/_leave: a mutex,
 * a clock read and a counter per collective, nothing per poll, so the
 * normal path does not slow down. A thread of the watchdog's own (one per
 * process, while a distributed StarPU runs) wakes a few times per timeout
 * and
 *   - answers the other ranks' questions (on a communicator of its own):
 *     how many collectives this rank entered on a communicator, what it
 *     waits in now, and how long ago it last made progress (a task
 *     submitted or finished, a collective entered or left);
 *   - when one of this rank's waits has lasted longer than the timeout,
 *     asks every other member of that collective's communicator. A member
 *     that does not answer within a grace period (stopped, or its process
 *     hung), or answers that it has not arrived and has made no progress
 *     for half the timeout (stuck elsewhere: another collective, a task
 *     that never ends), did not arrive: the watchdog prints the
 *     collective and those ranks and ends the job (MPI_Abort, status 1).
 *     Members that have not arrived but are still working (a slow step)
 *     are waited for another timeout, with a note on stderr: the timeout
 *     is per collective wait, from the last sign of life of the ranks it
 *     waits for, not a bound on a step. A member that makes no progress
 *     because it waits in a collective itself is blamed only once its own
 *     watchdog has had the time to judge that wait and has not seen a
 *     working rank behind it lately (a chain of waits ending at a slow
 *     rank is waited for; the sighting's age is handed on, never renewed,
 *     so a cycle of waits, a deadlock, runs out and is named).
 *
 * Communicators are known by ids every rank agrees on: the world's three
 * below, and two per pl_comm_group (comm.c numbers them in split order,
 * which every rank follows). */
#ifndef PL_COLLECTIVES_WATCHDOG_H
#define PL_COLLECTIVES_WATCHDOG_H

#include <stdbool.h>

#include "pleiades.h"

enum {
    PL_WATCH_WORLD = 0, /* MPI_COMM_WORLD itself (splits) */
    PL_WATCH_TASKS = 1, /* the world's collective tasks */
    PL_WATCH_HOST = 2,  /* the world's host collectives */
    PL_WATCH_GROUPS = 3 /* first id of the groups' */
};

/* The timeout of one collective wait, seconds (0: off); process-wide,
 * set by pl_runtime_new from pl_runtime_options.collective_timeout_s.
 * Taken by the watchdog thread at its next tick. */
void pl_watchdog_set_timeout(double seconds);
double pl_watchdog_timeout(void);

/* MPI is up (pl_comm_mpi_init): the watchdog's communicator (a duplicate
 * of the world: collective) and the world's three ids; at the exit, before
 * MPI_Finalize, pl_watchdog_mpi_finalize stops the thread and frees it. */
pl_status pl_watchdog_mpi_init(int world_size);
void pl_watchdog_mpi_finalize(void);

/* A communicator of `size` ranks whose world ranks are `members` (copied)
 * under `id`; removed when freed. */
void pl_watchdog_comm_add(int id, int size, const int *members);
void pl_watchdog_comm_remove(int id);

/* The calling thread waits in collective `what` (a static string) on
 * communicator `comm` from now on; returns the handle for
 * pl_watchdog_leave (-1: not watched, when too many threads wait at once). */
int pl_watchdog_enter(int comm, const char *what);
void pl_watchdog_leave(int handle);

/* The thread, while a distributed StarPU runs: started before
 * starpu_mpi_init_conf (so that a rank answers while StarPU starts, which
 * counts as progress), told by pl_watchdog_starpu_up when StarPU's task
 * counts can be read, stopped before starpu_mpi_shutdown. Idempotent;
 * nothing on a world of one rank. */
pl_status pl_watchdog_start(void);
void pl_watchdog_starpu_up(void);
void pl_watchdog_stop(void);

#endif
