/* service.h: what every daemon of pcg-tts (draftd, targetd, the verifier,
 * codec-decode --listen) sets up the same way before it serves. Its names
 * are pcg_daemon_*, after the daemon that calls them (pcg_daemon_run(&d)
 * serves d), not after this file.
 */
#ifndef PCG_SERVICE_H
#define PCG_SERVICE_H

#include <signal.h>

#include "err.h"
#include "net.h"

/* Set to 1 by SIGTERM and SIGINT once pcg_daemon_signals ran: the serving
 * loops poll it (pcg_daemon's stop). */
extern volatile sig_atomic_t pcg_daemon_stop;

/* How an OpenMP thread of a server waits between parallel regions: it spins
 * for PCG_DAEMON_SPIN_US, then sleeps. libgomp's default (about 300,000
 * spins, 6 ms on a 21 ns pause) keeps the cores from the other servers of a
 * pipeline when they work at once: a pipelined round of sd on 2 cores went
 * from 4.5 to 3.3 tokens/s (8x slower rounds once, with a tiny model).
 * Sleeping at once (OMP_WAIT_POLICY=PASSIVE, the old setting) pays a wake-up
 * at each of a step's ~100 regions: LLaSA-1B's shape as Q8_0 through the
 * pipeline at 12.7-13.2 tokens/s instead of 14.0-14.2 with a 0.5 ms spin,
 * which costs nothing measurable when the servers work at once (4.5 tokens/s
 * either way): a step's regions follow each other within microseconds, a
 * spin that long covers them, and an idle server sleeps after 0.5 ms
 * (docs/BENCHMARKS.md, "The wait between parallel regions"). */
#define PCG_DAEMON_SPIN_US 500.0

/* Spins of libgomp's wait loop (GOMP_SPINCOUNT) that last about us
 * microseconds on this CPU: the wait hint's time, measured. */
long pcg_daemon_spin_count(double us);

/* libgomp reads GOMP_SPINCOUNT when it is loaded, before main, so this sets
 * it (pcg_daemon_spin_count(PCG_DAEMON_SPIN_US)) and executes the program
 * again (by its real path, so ps shows its name) with the same arguments; a
 * user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins, and when the program
 * cannot be executed again it goes on as it is. Call it first in main. */
void pcg_daemon_openmp(char **argv);

/* SIGTERM and SIGINT set pcg_daemon_stop (no SA_RESTART: a blocking
 * zmq_poll returns EINTR); SIGPIPE is ignored (a peer gone is an error
 * return, not a death). */
void pcg_daemon_signals(void);

/* One server of the pipeline, run by pcg_daemon_run: a ZeroMQ ROUTER bound
 * to url, one poll loop over it and over one more socket where the server
 * has one, and callbacks for what differs between servers (the shape of
 * czmq's zloop and redis's ae loop). Each callback gets the daemon; its
 * own state is d->arg. In the order they are called:
 *   start    once bound (d->sock set): the server's own set-up and its
 *            log line; -1 with err ends the run as a failure. May set
 *            d->other.
 *   more     may the loop take another request now (NULL: always): a
 *            server that queues work says no while its queue is full, and
 *            the requests wait in libzmq.
 *   request  one request that arrived, to answer now (net_reply,
 *            net_respond) or later (keep a copy of its route). r and its
 *            body are valid during the call.
 *   other_ready  d->other is readable.
 *   tick     after every wake (requests, the other socket, or the wait
 *            running out): pending and periodic work. Returns the next
 *            wait in ms (0: work is pending, do not wait).
 *   done     the loop stopped (the socket still open): the closing log
 *            line with the counts.
 * Requests dropped for bad framing are counted in d->counts.dropped and
 * logged as "prog: ..."; served and errors are the callbacks' to count. */
typedef struct pcg_daemon pcg_daemon;
struct pcg_daemon {
	const char *prog;            /* names the log lines */
	const char *url;             /* endpoint to bind */
	void *ctx;                   /* the ZeroMQ context, or NULL: the run's own */
	int sndhwm;                  /* replies queued per peer (0: libzmq's default) */
	volatile sig_atomic_t *stop; /* polled; &pcg_daemon_stop: the run installs
				      * pcg_daemon_signals */
	void *arg;
	int (*start)(pcg_daemon *d, pcg_err *err);
	int (*more)(pcg_daemon *d);
	void (*request)(pcg_daemon *d, net_req *r);
	void (*other_ready)(pcg_daemon *d);
	int (*tick)(pcg_daemon *d);
	void (*done)(pcg_daemon *d);
	void *sock;                  /* set by the run: the bound socket */
	void *other;                 /* another socket to poll (start may set it) */
	net_counts counts;
};

/* Binds d->url (making a context if d->ctx is NULL), calls start, loops
 * until *d->stop or until the context is shut down (zmq_ctx_shutdown: how
 * a process stops the servers it runs as threads), waiting at most 250 ms
 * between ticks, calls done, and
 * closes the socket (and the context it made). Returns 0 after a stop, or
 * 1 after printing "prog: what failed". */
int pcg_daemon_run(pcg_daemon *d);

#endif
