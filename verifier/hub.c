/* hub.c: the verifier's hub, its main thread: the only one that touches the
 * clients' socket. It takes requests (synth, cancel, ping), queues synths
 * as jobs for the workers (worker.c), forwards what the workers push to
 * the jobs' clients, and frees a job after its final message. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <zmq.h>

#include "client.h"
#include "clock.h"
#include "net.h"
#include "opts.h"
#include "service.h"
#include "verifier.h"
/* The hub's state: the client socket, the jobs alive, replies. */
typedef struct hub {
	verifier *v;
	void *sock, *in;      /* the clients; the workers' messages (PULL) */
	job *jobs;
	int n_jobs;
	proto_buf buf;
	proto_msg *rep;
	pcg_client *ping[2][MAX_REPLICAS], *ping_codec; /* the pinger's alone */
	/* the pinger: a thread that asks the servers on the hub's behalf, so
	 * the hub never waits on one (a stopped replica takes its timeout);
	 * the pings that come meanwhile share the next answer */
	pthread_t pinger;
	int pinger_up;
	pthread_mutex_t ping_lock;
	pthread_cond_t ping_wake;
	job *pings;           /* waiting for an answer (under ping_lock) */
	int ping_stop;
	void *ping_out;       /* the pinger's PUSH to the hub: [job][1][pong] */
} hub;

void job_free(job **j)
{
	if (*j == NULL)
		return;
	free((*j)->req);
	free((*j)->asg_img);
	free((*j)->prompt_img);
	free(*j);
	*j = NULL;
}

/* A job whose client cannot be reached: gone (EHOSTUNREACH) or not reading
 * (its queue is full): its session ends at the next round. */
static void unreachable(job *j)
{
	if (atomic_exchange(&j->cancel, 1) == 0)
		fprintf(stderr, "%s: session %llu: the client cannot be reached (%s): cancelling\n",
			prog, (unsigned long long)j->session, zmq_strerror(zmq_errno()));
}

static int send_to(hub *h, const unsigned char *route, size_t route_len, int delim,
		   const void *body, size_t len)
{
	if (zmq_send(h->sock, route, route_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    (delim && zmq_send(h->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) ||
	    zmq_send(h->sock, body, len, ZMQ_DONTWAIT) < 0)
		return -1;
	return 0;
}

static void reply_msg(hub *h, const net_req *r, const proto_msg *m)
{
	pcg_err err = { "" };

	if (proto_pack_buf(m, &h->buf, &err) < 0)
		pcg_report(prog, &err);
	else if (send_to(h, r->route, r->route_len, r->delim, h->buf.data, h->buf.len) < 0)
		fprintf(stderr, "%s: a reply to a client is lost: %s\n", prog,
			zmq_strerror(zmq_errno()));
}

/* The queue positions of the jobs that wait, sent to the streaming ones. */
static void tell_queue(hub *h)
{
	verifier *v = h->v;
	int pos = 0;

	pthread_mutex_lock(&v->lock);
	for (job *j = v->q_head; j; j = j->next_q) {
		pos++;
		if (!j->req->synth.stream)
			continue;
		proto_init(h->rep, PROTO_PROGRESS, j->req->id);
		h->rep->progress.queue = pos;
		pcg_err err = { "" };
		if (proto_pack_buf(h->rep, &h->buf, &err) == 0 &&
		    send_to(h, j->route, j->route_len, j->delim, h->buf.data, h->buf.len) < 0)
			unreachable(j);
	}
	pthread_mutex_unlock(&v->lock);
}

/* ping: the verifier and every server behind it answer (the pinger's
 * thread: it waits on the servers, the hub does not). */
static void ping(hub *h, uint64_t id, proto_msg *rep)
{
	verifier *v = h->v;
	pcg_err err = { "" };
	char summary[400] = "", why[160] = "";
	proto_msg *q = calloc(1, sizeof *q), *r = calloc(1, sizeof *r);
	const proto_msg req_ = { .id = id }, *req = &req_;

	if (q == NULL || r == NULL) {
		proto_error(rep, req->id, PROTO_E_INTERNAL, "out of memory");
		goto out;
	}
	/* every replica of draftd and targetd, and codec-decode, asked at
	 * once (so a stopped one costs one timeout, not one each): a stage is
	 * ok while one of its replicas answers; those that do not are named */
	int sent[3][MAX_REPLICAS] = { { 0 } };
	for (int sg = 0; sg < 3; sg++) {
		const int n = sg < 2 ? v->stages[sg].n : h->ping_codec != NULL;
		for (int k = 0; k < n; k++) {
			proto_init(q, PROTO_PING, 0);
			sent[sg][k] = client_send(sg < 2 ? h->ping[sg][k] : h->ping_codec, q, &err) == 0;
		}
	}
	for (int sg = 0; sg < 3; sg++) {
		const char *name = sg < 2 ? v->stages[sg].name : "codec-decode";
		const int n = sg < 2 ? v->stages[sg].n : h->ping_codec != NULL;
		char down[400] = "";
		int up = 0;
		for (int k = 0; k < n; k++) {
			pcg_client *c = sg < 2 ? h->ping[sg][k] : h->ping_codec;
			if (sent[sg][k] && client_wait(c, r, &err) == 0 && r->type == PROTO_PONG) {
				up++;
				continue;
			}
			snprintf(why, sizeof why, "%.150s",
				 sent[sg][k] && r->type == PROTO_ERROR ? r->error.msg : err.msg);
			if (sg < 2) {
				snprintf(down + strlen(down), sizeof down - strlen(down), "%s%s",
					 *down ? ", " : "", v->stages[sg].urls[k]);
				/* new sessions go elsewhere a while, as after a
				 * failed call (stage_pick) */
				atomic_store(&v->stages[sg].dead_until[k], pcg_now() + 10);
			}
		}
		if (n > 0 && up == 0) {
			/* the others' replies are dropped by their next wait */
			proto_error(rep, req->id, PROTO_E_INTERNAL, "%s: %s", name, why);
			goto out;
		}
		if (n > 1)
			snprintf(summary + strlen(summary), sizeof summary - strlen(summary),
				 "%s%s %d of %d replicas ok%s%.150s%s", *summary ? ", " : "", name, up,
				 n, *down ? " (down: " : "", down, *down ? ")" : "");
		else if (n == 1)
			snprintf(summary + strlen(summary), sizeof summary - strlen(summary), "%s%s ok",
				 *summary ? ", " : "", name);
	}
	pthread_mutex_lock(&v->lock);
	const int queued = v->n_queued, busy = v->cfg->n_sessions - v->idle;
	pthread_mutex_unlock(&v->lock);
	proto_init(rep, PROTO_PONG, req->id);
	snprintf(rep->pong.msg, sizeof rep->pong.msg,
		 "verifier ok, %s (speech %d tokens%s%s; sessions %d running of %d, %d queued)",
		 summary, v->voc.speech_count, v->groups ? ", asg" : "",
		 v->prompts ? ", cloning" : "", busy, v->cfg->n_sessions, queued);
out:
	free(q);
	free(r);
}

/* A synth: a job at the end of the queue, or "busy" beyond --queue. */
static void enqueue(hub *h, const net_req *nr, const proto_msg *req)
{
	verifier *v = h->v;
	const proto_synth *y = &req->synth;
	job *j = calloc(1, sizeof *j);

	if (j == NULL || (j->req = malloc(sizeof *j->req)) == NULL ||
	    (y->asg_len && (j->asg_img = malloc(y->asg_len)) == NULL) ||
	    (y->prompt_audio_len && (j->prompt_img = malloc(y->prompt_audio_len)) == NULL)) {
		job_free(&j);
		proto_error(h->rep, req->id, PROTO_E_INTERNAL, "out of memory");
		reply_msg(h, nr, h->rep);
		return;
	}
	if (h->n_jobs >= v->cfg->n_sessions + v->cfg->max_queue) {
		job_free(&j);
		proto_error(h->rep, req->id, PROTO_E_BUSY,
			    "%d sessions run and %d wait (verifier --sessions, --queue): try again "
			    "later", v->cfg->n_sessions, v->cfg->max_queue);
		reply_msg(h, nr, h->rep);
		return;
	}
	memcpy(j->req, req, sizeof *req);
	if (y->asg_len) {
		memcpy(j->asg_img, y->asg, y->asg_len);
		j->req->synth.asg = j->asg_img;
	}
	if (y->prompt_audio_len) {
		memcpy(j->prompt_img, y->prompt_audio, y->prompt_audio_len);
		j->req->synth.prompt_audio = j->prompt_img;
	}
	memcpy(j->route, nr->route, nr->route_len);
	j->route_len = nr->route_len;
	j->delim = nr->delim;
	j->session = atomic_fetch_add(&v->next_session, 1);
	j->next = h->jobs;
	h->jobs = j;
	h->n_jobs++;
	pthread_mutex_lock(&v->lock);
	if (v->q_tail)
		v->q_tail->next_q = j;
	else
		v->q_head = j;
	v->q_tail = j;
	v->n_queued++;
	const int waits = v->idle < v->n_queued;
	pthread_cond_signal(&v->wake);
	pthread_mutex_unlock(&v->lock);
	if (waits)
		tell_queue(h);
}

/* cancel: the job of this client with that request id. */
static void cancel(hub *h, const net_req *nr, const proto_msg *req)
{
	int found = 0;

	for (job *j = h->jobs; j; j = j->next)
		if (j->req->id == req->cancel.session && j->route_len == nr->route_len &&
		    !memcmp(j->route, nr->route, nr->route_len)) {
			atomic_store(&j->cancel, 1);
			found = 1;
		}
	if (found) {
		proto_init(h->rep, PROTO_OK, req->id);
	} else {
		/* most often the synth ended as its client gave up: its result
		 * and the cancel crossed (the log says so, as for a cancel) */
		fprintf(stderr, "%s: synth %llu cancelled after it ended, or never known\n", prog,
			(unsigned long long)req->cancel.session);
		proto_error(h->rep, req->id, PROTO_E_BAD_REQUEST,
			    "cancel: no synth %llu of this client runs or waits",
			    (unsigned long long)req->cancel.session);
	}
	reply_msg(h, nr, h->rep);
}

enum { PING_EVERY = 5 }; /* seconds between the pinger's own rounds */

/* The pinger's thread: takes every ping waiting, asks the servers once,
 * and sends the answer to each of them through the hub. */
static void *pinger_main(void *arg)
{
	hub *h = arg;
	proto_msg *rep = calloc(1, sizeof *rep);
	proto_buf buf = { 0 };

	/* with replicas, a round of pings every PING_EVERY s of its own too, so
	 * that new sessions avoid a replica that stopped answering before any
	 * session waits on it */
	const int replicas = h->v->stages[0].n > 1 || h->v->stages[1].n > 1;
	pthread_mutex_lock(&h->ping_lock);
	while (!h->ping_stop) {
		if (h->pings == NULL) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += PING_EVERY;
			if (!replicas) {
				pthread_cond_wait(&h->ping_wake, &h->ping_lock);
			} else if (pthread_cond_timedwait(&h->ping_wake, &h->ping_lock, &until) ==
					   ETIMEDOUT && h->pings == NULL && !h->ping_stop && rep) {
				pthread_mutex_unlock(&h->ping_lock);
				ping(h, 0, rep); /* the answer: dead_until of those down */
				pthread_mutex_lock(&h->ping_lock);
			}
			continue;
		}
		job *batch = h->pings;
		h->pings = NULL;
		pthread_mutex_unlock(&h->ping_lock);
		for (job *j = batch, *nx; j; j = nx) {
			nx = j->next;
			pcg_err err = { "" };
			if (rep != NULL && j == batch)
				ping(h, j->session, rep); /* once for all that waited */
			else if (rep != NULL)
				rep->id = j->session;
			const unsigned char fin = 1;
			if (rep == NULL || proto_pack_buf(rep, &buf, &err) < 0) {
				job_free(&j); /* unanswerable: the client times out */
				continue;
			}
			zmq_send(h->ping_out, &j, sizeof j, ZMQ_SNDMORE);
			zmq_send(h->ping_out, &fin, 1, ZMQ_SNDMORE);
			zmq_send(h->ping_out, buf.data, buf.len, 0);
		}
		pthread_mutex_lock(&h->ping_lock);
	}
	for (job *j = h->pings, *nx; j; j = nx) { /* never answered */
		nx = j->next;
		job_free(&j);
	}
	h->pings = NULL;
	pthread_mutex_unlock(&h->ping_lock);
	proto_buf_free(&buf);
	free(rep);
	return NULL;
}

/* A ping: handed to the pinger, answered when the servers have (the hub
 * relays everyone's audio meanwhile). */
static void ping_async(hub *h, const net_req *nr, const proto_msg *req)
{
	job *j = calloc(1, sizeof *j);

	if (j == NULL || nr->route_len > sizeof j->route) {
		job_free(&j);
		proto_error(h->rep, req->id, PROTO_E_INTERNAL, "out of memory");
		reply_msg(h, nr, h->rep);
		return;
	}
	j->session = req->id; /* a ping's job: the request's id, no copy of it */
	memcpy(j->route, nr->route, nr->route_len);
	j->route_len = nr->route_len;
	j->delim = nr->delim;
	pthread_mutex_lock(&h->ping_lock);
	j->next = h->pings;
	h->pings = j;
	pthread_cond_signal(&h->ping_wake);
	pthread_mutex_unlock(&h->ping_lock);
}

/* A request from a client (pcg_daemon's request callback). */
static void from_client(pcg_daemon *d, net_req *nr)
{
	hub *h = d->arg;
	pcg_err err = { "" };
	static proto_msg parsed; /* the hub's alone; too large for the stack */
	proto_msg *req = &parsed;

	/* a synth that parses is within the bounds of proto_synth_check
	 * (synth.h), the check its clients make before they send it */
	if (proto_parse(nr->body, nr->len, req, &err) < 0) {
		proto_error(h->rep, req->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
		reply_msg(h, nr, h->rep);
	} else if (req->type == PROTO_SYNTH) {
		enqueue(h, nr, req);
	} else if (req->type == PROTO_CANCEL) {
		cancel(h, nr, req);
	} else if (req->type == PROTO_PING) {
		ping_async(h, nr, req);
	} else {
		proto_error(h->rep, req->id, PROTO_E_BAD_REQUEST, "the verifier does not take '%s'",
			    proto_type_name(req->type));
		reply_msg(h, nr, h->rep);
	}
}

/* A message from a worker for a job's client; the final one ends the job.
 * A client that is gone (or stuck with a full queue) cancels its job. */
static void from_worker(pcg_daemon *d)
{
	hub *h = d->arg;
	zmq_msg_t f[3];
	int n = 0, more = 1;
	job *j = NULL;

	while (more && n < 3) {
		zmq_msg_init(&f[n]);
		if (zmq_msg_recv(&f[n], h->in, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&f[n]);
			break;
		}
		more = zmq_msg_more(&f[n]);
		n++;
	}
	if (n == 3 && zmq_msg_size(&f[0]) == sizeof j) {
		memcpy(&j, zmq_msg_data(&f[0]), sizeof j);
		const int final = *(unsigned char *)zmq_msg_data(&f[1]);
		if (zmq_msg_size(&f[2]) > 0 &&
		    send_to(h, j->route, j->route_len, j->delim, zmq_msg_data(&f[2]),
			    zmq_msg_size(&f[2])) < 0)
			unreachable(j);
		if (final) {
			int listed = 0; /* a synth's job; a ping's is not listed */
			for (job **pp = &h->jobs; *pp; pp = &(*pp)->next)
				if (*pp == j) {
					*pp = j->next;
					listed = 1;
					break;
				}
			h->n_jobs -= listed;
			/* a cancel that came after the job's last round: said too */
			if (listed && atomic_load(&j->cancel) && !atomic_load(&j->cancel_told))
				fprintf(stderr, "%s: session %llu cancelled as it ended (after its "
					"last round)\n", prog, (unsigned long long)j->session);
			job_free(&j);
			if (listed)
				tell_queue(h);
		}
	}
	for (int i = 0; i < n; i++)
		zmq_msg_close(&f[i]);
}

/* pcg_daemon's start: once the socket is bound, the workers' results
 * socket, the workers, the stages' ping clients, the log line. */
static int hub_start(pcg_daemon *d, pcg_err *err)
{
	hub *h = d->arg;
	verifier *v = h->v;
	const verifier_cfg *c = v->cfg;

	h->sock = d->sock;
	if ((h->in = zmq_socket(d->ctx, ZMQ_PULL)) == NULL ||
	    zmq_setsockopt(h->in, ZMQ_RCVHWM, &(int){ 0 }, sizeof(int)) != 0 ||
	    zmq_bind(h->in, "inproc://verifier-out") != 0)
		return pcg_fail(err, "inproc socket: %s", zmq_strerror(zmq_errno()));
	d->other = h->in;
	if (workers_start(v, err) < 0)
		return -1;
	/* a ping waits 2 s at most for a server (less with --timeout-ms), so
	 * that a stopped replica is named within a health check's 3 s */
	const int ping_ms = c->timeout_ms < 2000 ? c->timeout_ms : 2000;
	for (int sg = 0; sg < 2; sg++)
		for (int k = 0; k < v->stages[sg].n; k++)
			if ((h->ping[sg][k] = client_new(d->ctx, v->stages[sg].urls[k], ping_ms, 1,
							 err)) == NULL)
				return -1;
	if (strcmp(c->codec_url, "none") &&
	    (h->ping_codec = client_new(d->ctx, c->codec_url, ping_ms, 1, err)) == NULL)
		return -1;
	if ((h->ping_out = zmq_socket(d->ctx, ZMQ_PUSH)) == NULL ||
	    zmq_connect(h->ping_out, "inproc://verifier-out") != 0)
		return pcg_fail(err, "inproc socket: %s", zmq_strerror(zmq_errno()));
	if (pthread_create(&h->pinger, NULL, pinger_main, h) != 0)
		return pcg_fail(err, "cannot start the pinger's thread");
	h->pinger_up = 1;
	fprintf(stderr, "%s: listening on %s (draft %s, target %s, codec %s; %d sessions)\n",
		prog, d->url, c->draft_url, c->target_url, c->codec_url, c->n_sessions);
	return 0;
}

int hub_run(verifier *v)
{
	hub h = { .v = v, .ping_lock = PTHREAD_MUTEX_INITIALIZER,
		  .ping_wake = PTHREAD_COND_INITIALIZER };
	int rc = 1;

	/* progress messages queue per client while it reads: room for a long
	 * utterance's worth, so that only a stuck client fills it */
	pcg_daemon d = { .prog = prog, .url = v->cfg->listen_url, .ctx = v->ctx, .sndhwm = 100000,
			 .stop = &pcg_daemon_stop, .arg = &h, .start = hub_start,
			 .request = from_client, .other_ready = from_worker };
	if ((h.rep = calloc(1, sizeof *h.rep)) == NULL)
		fprintf(stderr, "%s: out of memory\n", prog);
	else
		rc = pcg_daemon_run(&d) != 0;
	pcg_daemon_stop = 1;
	if (h.pinger_up) { /* it ends after the ping in hand, its clients' timeout at most */
		pthread_mutex_lock(&h.ping_lock);
		h.ping_stop = 1;
		pthread_cond_signal(&h.ping_wake);
		pthread_mutex_unlock(&h.ping_lock);
		pthread_join(h.pinger, NULL);
	}
	net_close(&h.ping_out);
	workers_stop(v); /* before the jobs they run go */
	for (job *j = h.jobs, *nx; j; j = nx) { /* never started */
		nx = j->next;
		job_free(&j);
	}
	for (int sg = 0; sg < 2; sg++)
		for (int k = 0; k < MAX_REPLICAS; k++)
			client_free(&h.ping[sg][k]);
	client_free(&h.ping_codec);
	net_close(&h.in);
	proto_buf_free(&h.buf);
	free(h.rep);
	return rc;
}
