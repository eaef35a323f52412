/* Wake-up latency of the threads that mostly sleep while others compute
 * (util/thread_latency.c says why and how). */
#ifndef PL_UTIL_THREAD_LATENCY_H
#define PL_UTIL_THREAD_LATENCY_H

#include <stdbool.h>

/* Asks the kernel to let the calling thread preempt a busy core's thread
 * as soon as it wakes (Linux's EEVDF: the shortest time slice). Returns
 * whether the kernel took the request; a no-op elsewhere. */
bool pl_thread_wake_promptly(void);

#endif
