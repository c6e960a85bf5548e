/* service.c: the daemons' set-up and serving loop, pcg_daemon_* (see service.h). */
#include "service.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

volatile sig_atomic_t pcg_daemon_stop;

static void on_signal(int sig)
{
	(void)sig;
	pcg_daemon_stop = 1;
}

/* Nanoseconds of one spin-wait hint (the instruction libgomp's spin loop
 * waits with), the least of a few timed runs. */
static double pause_ns(void)
{
	enum { N = 20000 };
	double best = 1e30;

	for (int r = 0; r < 5; r++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		for (int i = 0; i < N; i++) {
#if defined(__x86_64__) || defined(__i386__)
			__builtin_ia32_pause();
#elif defined(__aarch64__)
			__asm__ __volatile__("yield" ::: "memory");
#else
			__asm__ __volatile__("" ::: "memory");
#endif
		}
		clock_gettime(CLOCK_MONOTONIC, &b);
		const double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / N;
		if (ns < best)
			best = ns;
	}
	return best > 0.1 ? best : 0.1;
}

long pcg_daemon_spin_count(double us)
{
	const double n = us * 1e3 / pause_ns();

	return n < 1 ? 1 : n > 1e8 ? 100000000L : (long)n;
}

void pcg_daemon_openmp(char **argv)
{
	char self[4096], v[32];
	ssize_t n;

	if (getenv("OMP_WAIT_POLICY") != NULL || getenv("GOMP_SPINCOUNT") != NULL)
		return;
	n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return;
	self[n] = '\0';
	snprintf(v, sizeof v, "%ld", pcg_daemon_spin_count(PCG_DAEMON_SPIN_US));
	setenv("GOMP_SPINCOUNT", v, 1);
	execv(self, argv);
	/* could not: go on with the default */
}

void pcg_daemon_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* Takes the requests waiting (while the server wants more). */
static void take_requests(pcg_daemon *d)
{
	pcg_err err = { "" };

	while (!*d->stop && (d->more == NULL || d->more(d))) {
		net_req r;
		int got = net_recv_req(d->sock, &r, 0, &err);
		if (got < 0) {
			d->counts.dropped++;
			fprintf(stderr, "%s: %s\n", d->prog, err.msg);
			break; /* drained; the poll comes back for the rest */
		}
		if (got == 0)
			break;
		d->request(d, &r);
		net_req_free(&r);
	}
}

int pcg_daemon_run(pcg_daemon *d)
{
	pcg_err err = { "" };
	void *own = NULL;
	int rc = 1, wait = 0;

	if (d->stop == &pcg_daemon_stop)
		pcg_daemon_signals();
	if (d->ctx == NULL && (d->ctx = own = zmq_ctx_new()) == NULL) {
		pcg_fail(&err, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
		goto out;
	}
	d->sock = d->sndhwm > 0 ? net_server_hwm(d->ctx, d->url, d->sndhwm, &err)
				: net_server(d->ctx, d->url, &err);
	if (d->sock == NULL || (d->start && d->start(d, &err) < 0))
		goto out;
	while (!*d->stop) {
		zmq_pollitem_t it[2] = { { d->sock, 0, ZMQ_POLLIN, 0 }, { d->other, 0, ZMQ_POLLIN, 0 } };
		int n = zmq_poll(it, d->other ? 2 : 1, wait < 0 || wait > 250 ? 250 : wait);
		if (n < 0) {
			if (zmq_errno() == EINTR)
				continue;
			if (zmq_errno() == ETERM) /* the context's owner shut it down: a stop */
				break;
			pcg_fail(&err, "zmq_poll: %s", zmq_strerror(zmq_errno()));
			goto out;
		}
		if (d->other && (it[1].revents & ZMQ_POLLIN))
			d->other_ready(d);
		if (it[0].revents & ZMQ_POLLIN)
			take_requests(d);
		wait = d->tick ? d->tick(d) : 250;
	}
	if (d->done)
		d->done(d);
	rc = 0;
out:
	if (rc != 0)
		fprintf(stderr, "%s: %s\n", d->prog, err.msg);
	net_server_close(&d->sock, d->url);
	if (own) {
		zmq_ctx_term(own);
		d->ctx = NULL;
	}
	return rc;
}
