/* service.h: what every daemon of pcg-tts (draftd, targetd, the verifier,
 * codec-decode --listen) sets up the same way before it serves.
 */
#ifndef PCG_SERVICE_H
#define PCG_SERVICE_H

#include <signal.h>

/* Set to 1 by SIGTERM and SIGINT once pcg_daemon_signals ran: the serving
 * loops poll it (net_serve's stop). */
extern volatile sig_atomic_t pcg_daemon_stop;

/* Servers of a pipeline share cores and take turns. OpenMP threads that
 * spin after each parallel region (libgomp's default) steal the cores from
 * the other processes: 8x slower rounds measured on 2 cores with a tiny
 * model. libgomp reads OMP_WAIT_POLICY when it is loaded, before main, so
 * this sets it to PASSIVE and executes the program again (by its real path,
 * so ps shows its name) with the same arguments; a user's own setting wins,
 * and when the program cannot be executed again it goes on as it is. Call
 * it first in main. */
void pcg_daemon_passive_openmp(char **argv);

/* SIGTERM and SIGINT set pcg_daemon_stop (no SA_RESTART: a blocking
 * zmq_poll returns EINTR); SIGPIPE is ignored (a peer gone is an error
 * return, not a death). */
void pcg_daemon_signals(void);

#endif
