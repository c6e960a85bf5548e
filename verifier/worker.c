/* worker.c: the verifier's workers. Each runs one job at a time, round by
 * round (lib/speculate/speculate.h), with its own clients of the model servers' replicas
 * and of codec-decode (a ZeroMQ socket belongs to one thread); what goes to
 * the job's client is pushed to the hub (hub.c), which owns the clients'
 * socket. Also here: the stages (a model server's replicas, the one a
 * session runs on) and the cache of the ASGs that requests send. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <zmq.h>

#include "chunks.h"
#include "client.h"
#include "clock.h"
#include "net.h"
#include "opts.h"
#include "service.h"
#include "verifier.h"

/* ------------------------------------------------------------ stages */

/* Splits "a,b,c" into st->urls; checks each endpoint. */
int stage_parse(stage *st, const char *name, const char *list, pcg_err *err)
{
	const char *p = list;

	st->name = name;
	while (*p) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (st->n == MAX_REPLICAS)
			return pcg_fail(err, "--%s: more than %d replicas", name, MAX_REPLICAS);
		if (len == 0 || (st->urls[st->n] = strndup(p, len)) == NULL)
			return pcg_fail(err, "--%s: '%s': an empty endpoint", name, list);
		if (net_endpoint_ok(st->urls[st->n++], 0, err) < 0)
			return -1;
		p += len + (e != NULL);
	}
	return st->n ? 0 : pcg_fail(err, "--%s: no endpoint", name);
}

int stage_pick(stage *st, int skip)
{
	const double t = pcg_now();
	int best = -1;

	for (int pass = 0; pass < 2 && best < 0; pass++)
		for (int i = 0; i < st->n; i++)
			if (i != skip && (pass || atomic_load(&st->dead_until[i]) <= t) &&
			    (best < 0 || atomic_load(&st->load[i]) < atomic_load(&st->load[best])))
				best = i;
	if (best < 0)
		best = skip; /* the only one */
	atomic_fetch_add(&st->load[best], 1);
	return best;
}

/* ------------------------------------------------------------ sent ASGs */

static uint64_t fnv64(const unsigned char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* The ASG a request sent, opened once for all requests sending the same
 * bytes; release it with asg_release. */
static sent_asg *asg_acquire(verifier *v, const void *img, size_t len, pcg_err *err)
{
	uint64_t h = fnv64(img, len) ^ len;
	sent_asg *x;

	pthread_mutex_lock(&v->lock);
	for (x = v->sent; x; x = x->next)
		if (x->hash == h) {
			x->refs++;
			pthread_mutex_unlock(&v->lock);
			return x;
		}
	pthread_mutex_unlock(&v->lock);
	if ((x = calloc(1, sizeof *x)) == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	x->a = asg_from_memory(img, len, "asg", err);
	if (x->a == NULL) {
		pcg_err_prefix(err, "field 'asg'");
		free(x);
		return NULL;
	}
	if (asg_get(x->a)->n > (uint32_t)v->voc.speech_count) {
		pcg_fail(err, "field 'asg': covers %u tokens, the vocabulary has %d speech tokens",
			 asg_get(x->a)->n, v->voc.speech_count);
		asg_close(&x->a);
		free(x);
		return NULL;
	}
	x->hash = h;
	x->refs = 1;
	pthread_mutex_lock(&v->lock);
	x->next = v->sent;
	v->sent = x;
	pthread_mutex_unlock(&v->lock);
	return x;
}

static void asg_release(verifier *v, sent_asg *x)
{
	if (x == NULL)
		return;
	pthread_mutex_lock(&v->lock);
	if (--x->refs == 0) {
		for (sent_asg **pp = &v->sent; *pp; pp = &(*pp)->next)
			if (*pp == x) {
				*pp = x->next;
				break;
			}
		asg_close(&x->a);
		free(x);
	}
	pthread_mutex_unlock(&v->lock);
}
/* ------------------------------------------------------------ workers */

/* A worker: its own clients of the servers (a ZeroMQ socket belongs to one
 * thread) and a PUSH socket to the hub, which forwards to the clients. */
struct worker {
	verifier *v;
	pthread_t th;
	int started;
	pcg_client *cl[2][MAX_REPLICAS]; /* per stage, per replica */
	int cur[2];           /* the replica holding the job's session, or -1 */
	int inflight[2];      /* a request sent by io_start, its reply not yet taken */
	pcg_client *codec;
	int rate;             /* the codec's sample rate, once it answered */
	void *to_hub;         /* PUSH to the hub: [job][final][body] */
	proto_buf buf;        /* to_hub's packed body */
	proto_msg *client_msg; /* to the job's client: progress, the result, an error */
	proto_msg *codec_req; /* to codec-decode: audio, drop */
	proto_msg *codec_rep; /* codec-decode's reply: pcm, read in place */
};

/* The replica holding the session of q did not answer (err): it is set
 * aside for a while, and the session goes to another. */
static void move_session(worker *w, int sg, const proto_msg *q, const pcg_err *err)
{
	stage *st = &w->v->stages[sg];
	const int k = w->cur[sg];

	atomic_store(&st->dead_until[k], pcg_now() + 10);
	atomic_fetch_sub(&st->load[k], 1);
	fprintf(stderr, "%s: %s: %s; session %llu moves to another replica\n", prog, st->name,
		err->msg, (unsigned long long)proto_model(q)->session);
	w->cur[sg] = stage_pick(st, k);
}

/* spec_io's call: to the replica that holds the session. One that does not
 * answer is set aside for a while and the session moves to another, whose
 * "unknown-session" makes the round loop resend the whole context: the
 * client sees a delay, and the same tokens (the servers' results do not
 * depend on which replica computes them). */
static int io_call(void *ctx, int sg, proto_msg *q, proto_msg *r, pcg_err *err)
{
	worker *w = ctx;
	stage *st = &w->v->stages[sg];

	for (int attempt = 0; attempt < st->n; attempt++) {
		if (w->cur[sg] < 0)
			w->cur[sg] = stage_pick(st, -1);
		const int k = w->cur[sg];
		if (client_call(w->cl[sg][k], q, r, err) == 0)
			return 0;
		if (st->n == 1 || q->type == PROTO_DROP)
			return -1;
		move_session(w, sg, q, err);
	}
	return -1;
}

/* spec_io's start and finish: the draft's request ahead goes out before
 * the target's score, so both servers work at once. A replica that fails
 * in between is left to io_call, which moves the session (a resend of an
 * idempotent request). */
static int io_start(void *ctx, int sg, proto_msg *q, pcg_err *err)
{
	worker *w = ctx;
	stage *st = &w->v->stages[sg];

	if (w->cur[sg] < 0)
		w->cur[sg] = stage_pick(st, -1);
	w->inflight[sg] = client_send(w->cl[sg][w->cur[sg]], q, err) == 0;
	return 0;
}

static int io_finish(void *ctx, int sg, proto_msg *q, proto_msg *r, pcg_err *err)
{
	worker *w = ctx;
	stage *st = &w->v->stages[sg];

	if (w->inflight[sg]) {
		const int k = w->cur[sg];
		w->inflight[sg] = 0;
		if (client_wait(w->cl[sg][k], r, err) == 0)
			return 0;
		if (st->n == 1)
			return -1;
		move_session(w, sg, q, err);
	}
	return io_call(ctx, sg, q, r, err);
}

/* The job is over: its sessions leave their replicas' load. */
static void release_replicas(worker *w)
{
	for (int sg = 0; sg < 2; sg++)
		if (w->cur[sg] >= 0) {
			atomic_fetch_sub(&w->v->stages[sg].load[w->cur[sg]], 1);
			w->cur[sg] = -1;
		}
}

int stage_listening(void *url)
{
	return net_listening(url);
}

/* Sends m to the hub for the job's client: [job][final][body]. */
static void to_client(worker *w, job *j, const proto_msg *m, int final)
{
	pcg_err err = { "" };
	unsigned char fin = (unsigned char)final;

	if (proto_pack_buf(m, &w->buf, &err) < 0) {
		pcg_report(prog, &err);
		if (!final)
			return;
		w->buf.len = 0; /* main still learns the job is over */
	}
	zmq_send(w->to_hub, &j, sizeof j, ZMQ_SNDMORE);
	zmq_send(w->to_hub, &fin, 1, ZMQ_SNDMORE);
	zmq_send(w->to_hub, w->buf.data, w->buf.len, 0);
}

/* A progress message to the job's client: its place in the queue, or
 * the n_tok tokens up to pos and the audio that came with them. */
static void progress(worker *w, job *j, int queue, int pos, const int *tok, int n_tok,
		     const void *pcm, size_t n_pcm)
{
	proto_progress *m = &w->client_msg->progress;

	proto_init(w->client_msg, PROTO_PROGRESS, j->req->id);
	m->queue = queue;
	m->pos = pos;
	m->n_tokens = n_tok;
	memcpy(m->tokens, tok, (size_t)n_tok * sizeof *tok);
	m->rate = w->rate;
	m->samples = pcm;
	m->n_samples = n_pcm;
	to_client(w, j, w->client_msg, 0);
}

/* Appends the codes of tok to the job's utterance at codec-decode, in two
 * halves: codec_start sends them, codec_wait takes the reply (w->codec_rep), which
 * carries the audio of the chunks they complete. The next round runs in
 * between, so the round loop never waits for the codec's decoding. */
static int codec_start(worker *w, job *j, const int *tok, int n, int final, pcg_err *err)
{
	const proto_synth *req = &j->req->synth;
	proto_audio *q = &w->codec_req->audio;

	proto_init(w->codec_req, PROTO_AUDIO, 0);
	q->session = j->session;
	q->n_tokens = n;
	for (int i = 0; i < n; i++)
		q->tokens[i] = llasa_id_to_code(&w->v->voc, tok[i]);
	q->final = final;
	q->chunk = req->chunk;
	q->left = req->left;
	q->right = req->right;
	q->first = req->first;
	return client_send(w->codec, w->codec_req, err);
}

static int codec_wait(worker *w, pcg_err *err)
{
	const proto_msg *r = w->codec_rep;

	if (client_wait(w->codec, w->codec_rep, err) < 0)
		return -1;
	if (r->type != PROTO_PCM)
		return pcg_fail(err, "codec-decode: %s: %s", r->type == PROTO_ERROR
				? r->error.code : "reply", r->type == PROTO_ERROR
				? r->error.msg : "not pcm");
	w->rate = r->pcm.rate;
	return 0;
}

/* The codes of a request's cloning prompt (encoded once per file, then
 * kept: lib/codec/prompts.c), logged with whether they were cached. */
static int prompt_codes(verifier *v, const job *j, int32_t **codes, size_t *n, pcg_err *err)
{
	const proto_synth *req = &j->req->synth;
	int hit = 0;

	if (v->prompts == NULL)
		return pcg_fail(err, "field 'prompt_audio': this verifier has no encoder (start it "
				"with --encoder, the X-codec2 checkpoint)");
	const double t = pcg_now();
	if (pcg_prompts_codes(v->prompts, req->prompt_audio, req->prompt_audio_len, "prompt_audio",
			      codes, n, &hit, err) < 0)
		return -1;
	fprintf(stderr, "%s: session %llu: a cloning prompt of %zu codes (%s, %.2f s)\n", prog,
		(unsigned long long)j->session, *n, hit ? "cached" : "encoded", pcg_now() - t);
	return 0;
}

/* ---- a job, in steps ----
 *
 * What run_job holds between its steps. */
typedef struct job_state {
	spec_io io;
	spec_session *s;
	sent_asg *sa;        /* the ASG the request sent */
	pcg_err err;
	const char *code;    /* the error's code, should the job fail */
	int codec_open;      /* the codec holds the utterance */
	int codec_busy;      /* codes sent, the codec's reply not yet taken */
	int sent, cnext, shown; /* codes at the codec; its next chunk; at the client */
	double t_shown;      /* when the client last heard */
} job_state;

/* 1. the session. A streaming client hears at once; the request's own
 * bounds held when the hub parsed it (proto_synth_check), here what
 * depends on this pipeline. 0, or -1 with js->err. */
static int job_start(worker *w, job *j, job_state *js)
{
	verifier *v = w->v;
	const proto_synth *req = &j->req->synth;
	int32_t *pc = NULL;
	size_t npc = 0;

	if (req->stream)
		progress(w, j, 0, 0, NULL, 0, NULL, 0);
	if (req->audio && w->codec == NULL)
		return pcg_fail(&js->err, "field 'audio': this pipeline has no codec (start the "
				"verifier with --codec URL: pcg-up --codec-weights), or ask for "
				"tokens only");
	if (req->asg_len > 0 &&
	    (js->sa = asg_acquire(v, req->asg, req->asg_len, &js->err)) == NULL)
		return -1;
	if (req->prompt_audio_len > 0 && prompt_codes(v, j, &pc, &npc, &js->err) < 0)
		return -1;
	learn_costs(v);
	js->s = spec_new_prompt(&v->env, req, js->sa ? js->sa->a : v->groups, j->session, pc,
				npc, &js->err);
	free(pc);
	return js->s ? 0 : -1;
}

/* The codec's reply to the codes last sent: the audio of the chunks they
 * completed (*pcm, n_pcm samples, read in place). */
static int codec_take(worker *w, job_state *js, const void **pcm, size_t *n_pcm)
{
	js->codec_busy = 0;
	if (codec_wait(w, &js->err) < 0)
		return -1;
	*pcm = w->codec_rep->pcm.samples;
	*n_pcm = w->codec_rep->pcm.n_samples;
	return 0;
}

/* Whether the codes up to pos complete the chunk that starts at js->cnext
 * (its codes and the `right` after it are there): the chunks' ends are
 * lib/core/chunks.h's, as codec-decode's. */
static int chunk_done(const proto_synth *req, const job_state *js, int pos)
{
	return req->chunk > 0 && pos >= pcg_chunk_end(js->cnext, req->chunk, req->first) + req->right;
}

/* The codes up to pos that the codec has not had, final at the end. */
static int codec_give(worker *w, job *j, job_state *js, const int *all, int pos, int final)
{
	const proto_synth *req = &j->req->synth;

	if (codec_start(w, j, all + js->sent, pos - js->sent, final, &js->err) < 0)
		return -1;
	js->codec_busy = 1;
	js->codec_open = !final;
	js->sent = pos;
	while (chunk_done(req, js, js->sent))
		js->cnext = pcg_chunk_end(js->cnext, req->chunk, req->first);
	return 0;
}

/* 2. one round, unless the job is cancelled, then its tokens and audio on
 * their way. spec_round's 0 (more) or 1 (the end), or -1 with js->err. */
static int job_round(worker *w, job *j, job_state *js)
{
	const proto_synth *req = &j->req->synth;
	const void *pcm = NULL;
	size_t n_pcm = 0;
	int rc, pos;

	if (atomic_load(&j->cancel) || pcg_daemon_stop) {
		js->code = PROTO_E_CANCELLED;
		return pcg_fail(&js->err, pcg_daemon_stop ? "the verifier is stopping"
							 : "cancelled");
	}
	if ((rc = spec_round(js->s, &js->io, &js->err)) < 0)
		return -1;
	const int *all = spec_tokens(js->s, &pos);
	/* The codec gets the codes when they complete a chunk (its chunk
	 * [next, end) needs the codes up to end + right) or at the end, one
	 * request at a time, and decodes while the next rounds run; its
	 * reply is taken as soon as it is there. */
	const int send = req->audio && (rc == 1 || (pos > js->sent && chunk_done(req, js, pos)));
	if (js->codec_busy && (send || client_ready(w->codec)) &&
	    codec_take(w, js, &pcm, &n_pcm) < 0)
		return -1;
	/* Progress: the tokens with each piece of audio, or when 20 ms
	 * went by without a message (the client sees them as they come,
	 * not one message a round) */
	if (req->stream && (n_pcm > 0 || (pos > js->shown && pcg_now() - js->t_shown >= 0.02))) {
		progress(w, j, 0, pos, all + js->shown, pos - js->shown, pcm, n_pcm);
		js->shown = pos;
		js->t_shown = pcg_now();
	}
	if (send && codec_give(w, j, js, all, pos, rc == 1) < 0)
		return -1;
	return rc;
}

/* 3. the end: the last audio and tokens to a streaming client, the
 * servers' caches dropped, the result. 0, or -1 with js->err. */
static int job_finish(worker *w, job *j, job_state *js)
{
	const void *pcm = NULL;
	size_t n_pcm = 0;
	int pos;
	const int *all = spec_tokens(js->s, &pos);

	if (js->codec_busy && codec_take(w, js, &pcm, &n_pcm) < 0) /* the last audio */
		return -1;
	if (j->req->synth.stream && (pos > js->shown || n_pcm > 0))
		progress(w, j, 0, pos, all + js->shown, pos - js->shown, pcm, n_pcm);
	spec_drop(js->s, &js->io);
	spec_result(js->s, j->req->id, w->client_msg);
	to_client(w, j, w->client_msg, 1);
	return 0;
}

/* 4. a failure or a cancel: the codec left free, the error to the
 * client. */
static void job_fail(worker *w, job *j, job_state *js)
{
	proto_msg *rep = w->client_msg;

	/* a cancelled session's caches go now; after an error a server may be
	 * gone, and waiting for it would only delay the error */
	if (js->s && !strcmp(js->code, PROTO_E_CANCELLED)) {
		int n;
		spec_tokens(js->s, &n);
		fprintf(stderr, "%s: session %llu cancelled after %d tokens: %s\n", prog,
			(unsigned long long)j->session, n,
			pcg_daemon_stop ? "stopping" : "the client went away or asked");
		atomic_store(&j->cancel_told, 1);
		spec_drop(js->s, &js->io);
	}
	if (js->codec_busy) { /* its reply, so that the codec's client is free again */
		pcg_err e2 = { "" };
		codec_wait(w, &e2);
	}
	if (js->codec_open) { /* the codec may forget the utterance */
		proto_init(w->codec_req, PROTO_DROP, 0);
		w->codec_req->drop.session = j->session;
		client_call(w->codec, w->codec_req, w->codec_rep, &js->err);
	}
	proto_error(rep, j->req->id, js->code, "%s", js->err.msg);
	to_client(w, j, rep, 1);
}

/* One synth, round by round; every message to the client goes through the
 * hub. */
static void run_job(worker *w, job *j)
{
	job_state js = {
		.io = { .call = io_call, .start = io_start, .finish = io_finish, .ctx = w },
		.code = PROTO_E_BAD_REQUEST,
	};
	int rc = job_start(w, j, &js);

	if (rc == 0) {
		js.code = PROTO_E_INTERNAL;
		while ((rc = job_round(w, j, &js)) == 0)
			;
	}
	if (rc < 0 || job_finish(w, j, &js) < 0)
		job_fail(w, j, &js);
	release_replicas(w);
	spec_free(&js.s);
	asg_release(w->v, js.sa);
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	verifier *v = w->v;

	for (;;) {
		pthread_mutex_lock(&v->lock);
		v->idle++;
		while (v->q_head == NULL && !pcg_daemon_stop)
			pthread_cond_wait(&v->wake, &v->lock);
		v->idle--;
		job *j = v->q_head;
		if (j) {
			v->q_head = j->next_q;
			if (v->q_head == NULL)
				v->q_tail = NULL;
			v->n_queued--;
		}
		pthread_mutex_unlock(&v->lock);
		if (j == NULL)
			break; /* stopping */
		run_job(w, j);
	}
	return NULL;
}

static int worker_start(verifier *v, worker *w, pcg_err *err)
{
	const verifier_cfg *c = v->cfg;

	w->v = v;
	w->client_msg = calloc(1, sizeof *w->client_msg);
	w->codec_req = calloc(1, sizeof *w->codec_req);
	w->codec_rep = calloc(1, sizeof *w->codec_rep);
	if (w->client_msg == NULL || w->codec_req == NULL || w->codec_rep == NULL)
		return pcg_fail(err, "out of memory");
	w->cur[0] = w->cur[1] = -1;
	for (int sg = 0; sg < 2; sg++)
		for (int k = 0; k < v->stages[sg].n; k++) {
			const char *u = v->stages[sg].urls[k];
			if ((w->cl[sg][k] = client_new(v->ctx, u, c->timeout_ms, c->tries, err)) == NULL)
				return -1;
			client_set_ms_per_position(w->cl[sg][k], c->ms_per_pos);
			if (!strncmp(u, "ipc://", 6))
				client_set_alive(w->cl[sg][k], stage_listening, (void *)u);
		}
	if (strcmp(c->codec_url, "none") &&
	    (w->codec = client_new(v->ctx, c->codec_url, c->timeout_ms, c->tries, err)) == NULL)
		return -1;
	if ((w->to_hub = zmq_socket(v->ctx, ZMQ_PUSH)) == NULL ||
	    zmq_connect(w->to_hub, "inproc://verifier-out") != 0)
		return pcg_fail(err, "inproc socket: %s", zmq_strerror(zmq_errno()));
	/* From here on the sockets belong to the worker thread (libzmq lets a
	 * socket move between threads with a full memory barrier, which
	 * pthread_create is). */
	if (pthread_create(&w->th, NULL, worker_main, w) != 0)
		return pcg_fail(err, "cannot start a worker thread");
	w->started = 1;
	return 0;
}

static void worker_free(worker *w)
{
	if (w->started)
		pthread_join(w->th, NULL);
	for (int sg = 0; sg < 2; sg++)
		for (int k = 0; k < MAX_REPLICAS; k++)
			client_free(&w->cl[sg][k]);
	client_free(&w->codec);
	net_close(&w->to_hub);
	proto_buf_free(&w->buf);
	free(w->client_msg);
	free(w->codec_req);
	free(w->codec_rep);
}

int workers_start(verifier *v, pcg_err *err)
{
	if ((v->workers = calloc((size_t)v->cfg->n_sessions, sizeof *v->workers)) == NULL)
		return pcg_fail(err, "out of memory");
	for (int i = 0; i < v->cfg->n_sessions; i++)
		if (worker_start(v, &v->workers[i], err) < 0)
			return -1;
	return 0;
}

void workers_stop(verifier *v)
{
	pthread_mutex_lock(&v->lock);
	pthread_cond_broadcast(&v->wake);
	pthread_mutex_unlock(&v->lock);
	if (v->ctx)
		zmq_ctx_shutdown(v->ctx);
	if (v->workers == NULL)
		return;
	for (int i = 0; i < v->cfg->n_sessions; i++)
		worker_free(&v->workers[i]);
	free(v->workers);
	v->workers = NULL;
}
