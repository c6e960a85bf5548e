/* verifier: the hub of the pipeline. Clients (pcg-synth) send "synth"
 * requests; each becomes a session of the round loop (lib/speculate.h: the
 * draft proposes L tokens at draftd, the target scores the block in one
 * pass at targetd, the policy decides what to keep), run by one of
 * --sessions worker threads, so many utterances are in flight at once and
 * their rounds interleave at the model servers, which batch them. The
 * committed tokens go to codec-decode, and the audio it returns goes back
 * to the client in "progress" messages as it comes; the last message is
 * the result with the tokens and the statistics. Requests beyond the
 * workers wait in a queue (told their position); a client that goes away
 * or sends "cancel" ends its session within a round. Only the main thread
 * touches the clients' socket. See man/verifier.8. */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "asg.h"
#include "client.h"
#include "llasa.h"
#include "net.h"
#include "modelserver.h"
#include "device.h"
#include "opts.h"
#include "policy.h"
#include "proto.h"
#include "rng.h"
#include "sampling.h"
#include "service.h"
#include "speculate.h"
#include "tm.h"
#include "tokenizer.h"
#include "clock.h"
#include "prompts.h"
#include "viterbi.h"
#include "voice.h"

static const char *prog = "verifier";
static const char *SYNOPSIS = "--tokenizer FILE [--asg FILE|-] [--knn FILE] [--listen URL] [--draft URL] "
			      "[--target URL] [--codec URL|none] [--encoder FILE|DIR] [--sessions N] [--queue N] [--timeout-ms N] "
			      "[--tries N] [--ms-per-position N]";

static const char *knn_path;
static const char *tok_path, *asg_path, *listen_url, *draft_url, *target_url, *codec_url;
static const char *voice_path, *tm_path, *encoder_path;
static const char *local_dir, *local_draft, *local_layers, *local_device, *curve_key, *curve_allow,
	*curve_peers;
static int timeout_ms, tries, ms_per_pos, n_sessions, max_queue;
static const char *costs;

static const pcg_opt opts[] = {
	{ "tokenizer", PCG_OPT_STR, &tok_path, NULL, 1, 0, "FILE",
	  "the target's tokenizer.json or GGUF file (the speech vocabulary and the prompt)" },
	{ "asg", PCG_OPT_STR, &asg_path, NULL, 1, 0, "FILE",
	  "ASG file for the pcg policy (- reads standard input)" },
	{ "knn", PCG_OPT_STR, &knn_path, NULL, 1, 0, "FILE",
	  "neighbour file for the lantern policy (asg-build --knn K; "
	  "default with --local: DIR/knn when it exists)" },
	{ "voice", PCG_OPT_STR, &voice_path, NULL, 1, 0, "FILE",
	  "a phoneme voice's voice.json: espeak-ng phonemes and forced phoneme tokens "
	  "(default with --local: DIR/voice.json when it exists)" },
	{ "tm", PCG_OPT_STR, &tm_path, NULL, 1, 0, "FILE",
	  "token transition matrix (tm-build) for mtp-viterbi "
	  "(default with --local: DIR/tm when it exists)" },
	{ "encoder", PCG_OPT_STR, &encoder_path, NULL, 1, 0, "FILE|DIR",
	  "the X-codec2 checkpoint whose encoder turns a request's cloning prompt (audio) "
	  "into codes, once per file (loaded on the first prompt)" },
	{ "listen", PCG_OPT_STR, &listen_url, "tcp://127.0.0.1:7600", 1, 0, "URL",
	  "endpoint for clients" },
	{ "draft", PCG_OPT_STR, &draft_url, "tcp://127.0.0.1:7601", 1, 0, "URL[,URL...]",
	  "draftd, or replicas of it" },
	{ "target", PCG_OPT_STR, &target_url, "tcp://127.0.0.1:7602", 1, 0, "URL[,URL...]",
	  "targetd, or replicas of it: new sessions go to the least loaded; a session "
	  "moves to another when its replica stops answering" },
	{ "codec", PCG_OPT_STR, &codec_url, "none", 1, 0, "URL",
	  "codec-decode, or none (tokens only)" },
	{ "sessions", PCG_OPT_INT, &n_sessions, "8", 1, 1024, "N",
	  "utterances in flight at once (each a worker thread with its own connections)" },
	{ "queue", PCG_OPT_INT, &max_queue, "256", 0, 1 << 20, "N",
	  "requests that may wait for a session; beyond, a request gets the error busy" },
	{ "timeout-ms", PCG_OPT_INT, &timeout_ms, "3000", 10, 600000, "N",
	  "per-try timeout of a request to a server, counted from the last sign of life "
	  "(a server busy with other sessions says so every second)" },
	{ "tries", PCG_OPT_INT, &tries, "2", 1, 100, "N", "tries per request before giving up" },
	{ "ms-per-position", PCG_OPT_INT, &ms_per_pos, "250", 0, 600000, "N",
	  "more wait per position a request makes a model server compute (a prompt's prefill)" },
	{ "costs", PCG_OPT_STR, &costs, NULL, 1, 0, "STEP_MS,DRAFT_MS,SLOPE,TRIP_MS[,HEAD_MS]",
	  "the cost model's terms (the target's step, the draft's step, a block's "
	  "slope, a trip to a server, an MTP head); default: the servers' own "
	  "measures and a score's round trip, learnt before the first session" },
	{ "local", PCG_OPT_STR, &local_dir, NULL, 1, 0, "DIR",
	  "run the target (DIR) and the draft as threads of this process, on inproc:// "
	  "endpoints, instead of connecting to --draft and --target" },
	{ "local-draft", PCG_OPT_STR, &local_draft, NULL, 1, 0, "DIR",
	  "with --local: the draft model (default: DIR/draft when it exists, else the target)" },
	{ "local-draft-layers", PCG_OPT_STR, &local_layers, NULL, 1, 0, "LIST",
	  "with --local: the draft is these layers of the target" },
	{ "device", PCG_OPT_STR, &local_device, "cpu", 1, 0, "DEV",
	  "with --local: where the models run (cpu, cuda or cuda:N)" },
	{ "curve-key", PCG_OPT_STR, &curve_key, NULL, 1, 0, "FILE",
	  "this process's CURVE keypair (pcg-keygen); needed for tcp beyond loopback" },
	{ "curve-allow", PCG_OPT_STR, &curve_allow, NULL, 1, 0, "FILE",
	  "public keys of the clients let in" },
	{ "curve-peers", PCG_OPT_STR, &curve_peers, NULL, 1, 0, "FILE",
	  "the servers' public keys ('URL KEY' lines)" },
	{ NULL },
};


/* An ASG image sent with a request: validated by asg_open through a memory
 * file, shared by the requests that send the same bytes while they run. */
typedef struct sent_asg {
	asg *a;
	uint64_t hash;
	int refs;
	struct sent_asg *next;
} sent_asg;

/* The replicas of a model server: endpoints, sessions on each, and until
 * when one that stopped answering gets no new sessions. */
#define MAX_REPLICAS 16
typedef struct stage {
	const char *name;
	char *urls[MAX_REPLICAS];
	int n;
	atomic_int load[MAX_REPLICAS];
	_Atomic double dead_until[MAX_REPLICAS];
} stage;

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Splits "a,b,c" into st->urls; checks each endpoint. */
static int stage_parse(stage *st, const char *name, const char *list, pcg_err *err)
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

/* The replica for a new session: the least loaded of those answering
 * (all of them when none is), not `not`. Counts the session in. */
static int stage_pick(stage *st, int not)
{
	const double t = mono();
	int best = -1;

	for (int pass = 0; pass < 2 && best < 0; pass++)
		for (int i = 0; i < st->n; i++)
			if (i != not && (pass || atomic_load(&st->dead_until[i]) <= t) &&
			    (best < 0 || atomic_load(&st->load[i]) < atomic_load(&st->load[best])))
				best = i;
	if (best < 0)
		best = not; /* the only one */
	atomic_fetch_add(&st->load[best], 1);
	return best;
}

/* One synth request: queued, then run by a worker. Main owns the list;
 * a worker owns a job from dequeue to its final message. */
typedef struct job {
	uint64_t session;          /* the servers' session id */
	unsigned char route[256];  /* the client */
	size_t route_len;
	int delim;
	proto_msg *req;            /* a copy; req->synth.asg points to asg_img */
	void *asg_img;
	void *prompt_img;          /* and req->synth.prompt_audio to this */
	atomic_int cancel;         /* the client went away or asked */
	struct job *next_q;        /* the queue (under lock) */
	struct job *next;          /* main's list of live jobs */
} job;

typedef struct verifier {
	tokenizer *tok;
	llasa_vocab voc;
	spec_env env;
	asg *groups;          /* --asg */
	asg *knn;             /* --knn */
	voice_info *voice;    /* --voice: a phoneme voice, else NULL */
	tmat *tm;               /* --tm, for mtp-viterbi */
	pcg_prompts *prompts; /* --encoder: cloning prompts, encoded once */
	void *ctx;
	stage stages[2];      /* SPEC_DRAFT, SPEC_TARGET: their replicas */
	const char *codec_url;
	/* the queue of jobs waiting for a worker, and the sent ASGs */
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_mutex_t costs_lock; /* learn_costs, once */
	int costs_known;
	job *q_head, *q_tail;
	int n_queued, n_workers, idle;
	sent_asg *sent;
	atomic_ullong next_session;
} verifier;

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
 * thread) and a PUSH socket to main, which forwards to the clients. */
typedef struct worker {
	verifier *v;
	pthread_t th;
	int started;
	pcg_client *cl[2][MAX_REPLICAS]; /* per stage, per replica */
	int cur[2];           /* the replica holding the job's session, or -1 */
	int inflight[2];      /* a request sent by io_start, its reply not yet taken */
	pcg_client *codec;
	int rate;             /* the codec's sample rate, once it answered */
	void *out;
	proto_buf buf;
	proto_msg *m, *r;
} worker;

/* The replica holding the session of q did not answer (err): it is set
 * aside for a while, and the session goes to another. */
static void move_session(worker *w, int sg, const proto_msg *q, const pcg_err *err)
{
	stage *st = &w->v->stages[sg];
	const int k = w->cur[sg];

	atomic_store(&st->dead_until[k], mono() + 10);
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

/* The liveness probe of a client of an ipc endpoint. */
static int listening(void *url)
{
	return net_listening(url);
}

/* Sends m to main for the job's client: [job][final][body]. */
static void to_client(worker *w, job *j, const proto_msg *m, int final)
{
	pcg_err err = { "" };
	unsigned char fin = (unsigned char)final;

	if (proto_pack_buf(m, &w->buf, &err) < 0) {
		pcg_die(prog, &err);
		if (!final)
			return;
		w->buf.len = 0; /* main still learns the job is over */
	}
	zmq_send(w->out, &j, sizeof j, ZMQ_SNDMORE);
	zmq_send(w->out, &fin, 1, ZMQ_SNDMORE);
	zmq_send(w->out, w->buf.data, w->buf.len, 0);
}

static void progress(worker *w, job *j, int queue, int pos, const int *tok, int n_tok,
		     const void *pcm, size_t n_pcm)
{
	proto_progress *m = &w->m->progress;

	proto_init(w->m, PROTO_PROGRESS, j->req->id);
	m->queue = queue;
	m->pos = pos;
	m->n_tokens = n_tok;
	memcpy(m->tokens, tok, (size_t)n_tok * sizeof *tok);
	m->rate = w->rate;
	m->samples = pcm;
	m->n_samples = n_pcm;
	to_client(w, j, w->m, 0);
}

/* Appends the codes of tok to the job's utterance at codec-decode, in two
 * halves: codec_start sends them, codec_wait takes the reply (w->r), which
 * carries the audio of the chunks they complete. The next round runs in
 * between, so the round loop never waits for the codec's decoding. */
static int codec_start(worker *w, job *j, const int *tok, int n, int final, pcg_err *err)
{
	const proto_synth *req = &j->req->synth;
	proto_audio *q = &w->m->audio;

	proto_init(w->m, PROTO_AUDIO, 0);
	q->session = j->session;
	q->n_tokens = n;
	for (int i = 0; i < n; i++)
		q->tokens[i] = llasa_id_to_code(&w->v->voc, tok[i]);
	q->final = final;
	q->chunk = req->chunk;
	q->left = req->left;
	q->right = req->right;
	return client_send(w->codec, w->m, err);
}

static int codec_wait(worker *w, pcg_err *err)
{
	if (client_wait(w->codec, w->r, err) < 0)
		return -1;
	if (w->r->type != PROTO_PCM)
		return pcg_fail(err, "codec-decode: %s: %s", w->r->type == PROTO_ERROR
				? w->r->error.code : "reply", w->r->type == PROTO_ERROR
				? w->r->error.msg : "not pcm");
	w->rate = w->r->pcm.rate;
	return 0;
}

/* One synth, round by round; every message to the client goes through main. */
/* The codes of a request's cloning prompt (encoded once per file, then
 * kept: lib/prompts), logged with whether they were cached. */
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

/* A number after "key=" in a pong's summary, or 0. */
static double pong_value(const char *msg, const char *key)
{
	const char *p = strstr(msg, key);

	return p ? strtod(p + strlen(key), NULL) : 0;
}

/* A request of learn_costs to a model server: type on session, pos, its
 * n_append speech tokens (from k on), n outputs, sampled as LLaSA's card
 * says (temperature 0.8, top-k 50), over the speech rows. */
static void calib_req(const verifier *v, proto_msg *q, proto_type type, uint64_t session,
		      int pos, int n_append, int n, int k)
{
	const llasa_vocab *voc = &v->voc;

	proto_init(q, type, 0);
	proto_model_req *m = proto_model_mut(q);
	m->session = session;
	m->pos = pos;
	m->n_append = n_append;
	for (int i = 0; i < n_append; i++)
		m->append[i] = voc->speech_first + (k + i) % voc->speech_count;
	m->n = n;
	m->samp = (pcg_sampling){ 0.8f, 50, 1.0f };
	m->rows = (llama_rows){ 1, { voc->speech_first },
				{ voc->speech_first + voc->speech_count } };
}

/* learn_costs's session at cl: gone. */
static void calib_drop(pcg_client *cl, uint64_t session, proto_msg *q, proto_msg *r)
{
	pcg_err err = { "" };

	proto_init(q, PROTO_DROP, 0);
	q->drop.session = session;
	client_call(cl, q, r, &err);
}

/* One-position scores to targetd, with heads MTP heads, on a session of
 * their own that is dropped after: the median time a score takes, and in
 * *beyond the median time beyond its compute (what a round pays for a
 * request: the sockets, the server's parse, schedule and reply). Returns
 * seconds, or 0 when the server did not answer. */
static double score_time(verifier *v, pcg_client *cl, proto_msg *q, proto_msg *r, int heads,
			 double *beyond)
{
	enum { N = 7 };
	pcg_err err = { "" };
	double dt[N], bt[N];
	int n = 0;
	const uint64_t session = atomic_fetch_add(&v->next_session, 1);

	for (int i = 0; i < N + 1; i++) { /* the first is a prefill of 8 */
		calib_req(v, q, PROTO_SCORE, session, i == 0 ? 0 : 7 + i, i == 0 ? 8 : 1, 1, 8 * i);
		q->score.heads = heads;
		const double t = pcg_now();
		if (client_call(cl, q, r, &err) < 0 || r->type != PROTO_PROBS)
			break;
		const double compute = r->probs.n_stats > 0 ? r->probs.stats[0] : 0;
		if (i > 0) {
			dt[n] = pcg_now() - t;
			bt[n] = dt[n] - compute;
			n++;
		}
	}
	calib_drop(cl, session, q, r);
	if (beyond)
		*beyond = cost_median(bt, n);
	return cost_median(dt, n);
}

/* A score of 4 positions to ct, a propose of 4 tokens to cd, or both at
 * once (which = 1, 2, 3), each extending sessions of their own from
 * position 8; returns the seconds until every reply came, or -1. */
static double timed(verifier *v, pcg_client *ct, pcg_client *cd, int which, uint64_t session,
		    proto_msg *q, proto_msg *r)
{
	pcg_err err = { "" };
	pcg_client *cl[2] = { ct, cd };
	const double t = pcg_now();

	for (int k = 0; k < 2; k++) {
		if (!(which & (1 << k)))
			continue;
		calib_req(v, q, k == 0 ? PROTO_SCORE : PROTO_PROPOSE, session, 8, k == 0 ? 4 : 1, 4,
			  3);
		if (client_send(cl[k], q, &err) < 0)
			return -1;
	}
	for (int k = 0; k < 2; k++)
		if ((which & (1 << k)) && (client_wait(cl[k], r, &err) < 0 || r->type != PROTO_PROBS))
			return -1;
	return pcg_now() - t;
}

/* The cost model's overlap: what the target's block and the draft's
 * tokens ahead cost when they run at once, beyond the longer of the two,
 * as a share of the shorter (0: apart, 1: no better than one after the
 * other); the fastest of a few of each way. -1 when a server did not
 * answer. */
static double overlap(verifier *v, pcg_client *ct, pcg_client *cd, proto_msg *q, proto_msg *r)
{
	const uint64_t session = atomic_fetch_add(&v->next_session, 1);
	double best[4] = { 0, 1e30, 1e30, 1e30 };
	pcg_err err = { "" };
	int ok = 1;

	for (int k = 0; k < 2 && ok; k++) { /* the sessions' first 8 positions */
		calib_req(v, q, k == 0 ? PROTO_SCORE : PROTO_PROPOSE, session, 0, 8, 1, 0);
		ok = client_call(k == 0 ? ct : cd, q, r, &err) == 0 && r->type == PROTO_PROBS;
	}
	for (int rep = 0; ok && rep < 4; rep++)
		for (int which = 1; ok && which <= 3; which++) {
			const double t = timed(v, ct, cd, which, session, q, r);
			ok = t >= 0;
			if (rep > 0 && t < best[which]) /* the first warms them */
				best[which] = t;
		}
	calib_drop(ct, session, q, r);
	calib_drop(cd, session, q, r);
	if (!ok)
		return -1;
	const double hi = fmax(best[1], best[2]), lo = fmin(best[1], best[2]);
	const double o = lo > 0 ? (best[3] - hi) / lo : 1;
	return o < 0 ? 0 : o > 1 ? 1 : o;
}

/* The cost model's terms (lib/costmodel), once, before the first session:
 * the step and block slope targetd measured at its first ping, the draft's
 * step, MTP heads' cost, the round trip of a score beyond its compute and
 * the overlap of the two servers at work at once. They stay fixed, so that
 * --lookahead auto chooses the same for the same tokens in every session
 * (--costs gives them instead). A stage that does not answer leaves the
 * defaults (SPEC_COSTS). */
static void learn_costs(worker *w)
{
	verifier *v = w->v;
	pcg_err err = { "" };
	cost_terms c = { 0 };
	pcg_client *cl[2] = { NULL, NULL };

	pthread_mutex_lock(&v->costs_lock);
	if (v->costs_known)
		goto out;
	for (int sg = SPEC_TARGET; sg >= SPEC_DRAFT; sg--) {
		/* a client of its own, quick to give up: a pipeline without a
		 * draft server must not wait for one */
		const char *u = v->stages[sg].urls[0];
		if ((cl[sg] = client_new(v->ctx, u, 1000, 1, &err)) == NULL)
			continue;
		if (!strncmp(u, "ipc://", 6))
			client_set_alive(cl[sg], listening, (void *)u);
		proto_init(w->m, PROTO_PING, 0);
		if (client_call(cl[sg], w->m, w->r, &err) < 0 || w->r->type != PROTO_PONG) {
			client_free(&cl[sg]);
			continue;
		}
		const double step = pong_value(w->r->pong.msg, "step_ms=") * 1e-3;
		if (sg == SPEC_TARGET) {
			c.step = step;
			c.slope = pong_value(w->r->pong.msg, "slope=");
			c.head = pong_value(w->r->pong.msg, "head_ms=") * 1e-3;
			const int nh = (int)pong_value(w->r->pong.msg, "heads=");
			const double plain = score_time(v, cl[sg], w->m, w->r, 0, &c.trip);
			/* MTP heads as a score with them pays: beside the
			 * server's own measure, what they add to a score */
			const int h = nh < SPEC_MTP_HEADS ? nh : SPEC_MTP_HEADS;
			const double with = h > 0 ? score_time(v, cl[sg], w->m, w->r, h, NULL) : 0;
			if (with > plain && (with - plain) / h > c.head)
				c.head = (with - plain) / h;
		} else {
			c.draft = step;
		}
	}
	c.overlap = 1;
	if (cl[SPEC_TARGET] && cl[SPEC_DRAFT]) {
		const double o = overlap(v, cl[SPEC_TARGET], cl[SPEC_DRAFT], w->m, w->r);
		if (o >= 0)
			c.overlap = o;
	}
	if (c.step > 0 && c.trip > 0) {
		v->env.costs = c;
		fprintf(stderr, "%s: cost model: target step %.3f ms, block slope %.2f, draft step "
			"%.3f ms, trip %.3f ms, MTP head %.3f ms, overlap %.2f\n", prog,
			c.step * 1e3, c.slope, c.draft * 1e3, c.trip * 1e3, c.head * 1e3, c.overlap);
	}
	v->costs_known = 1;
out:
	client_free(&cl[0]);
	client_free(&cl[1]);
	pthread_mutex_unlock(&v->costs_lock);
}

static void run_job(worker *w, job *j)
{
	verifier *v = w->v;
	const proto_synth *req = &j->req->synth;
	proto_msg *rep = w->m;
	spec_io io = { .call = io_call, .start = io_start, .finish = io_finish, .ctx = w };
	pcg_err err = { "" };
	sent_asg *sa = NULL;
	spec_session *s = NULL;
	int32_t *pc = NULL;
	size_t npc = 0;
	const char *code = PROTO_E_BAD_REQUEST;
	int rc = 0, codec_open = 0, codec_busy = 0;
	int sent = 0, cnext = 0, shown = 0; /* codes at the codec; its next chunk; at the client */
	const int chunk = req->chunk, right = req->right;
	double t_shown = 0;

	if (req->stream)
		progress(w, j, 0, 0, NULL, 0, NULL, 0);
	if (req->audio && w->codec == NULL) {
		pcg_fail(&err, "field 'audio': this pipeline has no codec (start the verifier "
			 "with --codec URL: pcg-up --codec-weights), or ask for tokens only");
		goto fail;
	}
	if (req->audio && !req->stream) {
		pcg_fail(&err, "field 'audio': the audio travels in progress messages: ask for "
			 "stream too");
		goto fail;
	}
	if (req->asg_len > 0 && (sa = asg_acquire(v, req->asg, req->asg_len, &err)) == NULL)
		goto fail;
	if (req->prompt_audio_len > 0) {
		if (prompt_codes(v, j, &pc, &npc, &err) < 0)
			goto fail;
	} else if (req->prompt_text[0] != '\0') {
		pcg_fail(&err, "field 'prompt_text' without 'prompt_audio': send the audio it "
			 "transcribes");
		goto fail;
	}
	learn_costs(w);
	s = spec_new_prompt(&v->env, req, sa ? sa->a : v->groups, j->session, pc, npc, &err);
	free(pc);
	pc = NULL;
	if (s == NULL)
		goto fail;
	code = PROTO_E_INTERNAL;
	while (rc == 0) {
		if (atomic_load(&j->cancel) || pcg_daemon_stop) {
			code = PROTO_E_CANCELLED;
			pcg_fail(&err, pcg_daemon_stop ? "the verifier is stopping" : "cancelled");
			goto fail;
		}
		if ((rc = spec_round(s, &io, &err)) < 0)
			goto fail;
		const int *all;
		int pos;
		all = spec_tokens(s, &pos);
		const void *pcm = NULL;
		size_t n_pcm = 0;
		/* The codec gets the codes when they complete a chunk (its chunk
		 * [next, next + chunk) needs the codes up to next + chunk + right)
		 * or at the end, one request at a time, and decodes while the
		 * next rounds run; its reply is taken as soon as it is there. */
		const int send = req->audio && (rc == 1 || (pos > sent && chunk > 0 &&
							       pos >= cnext + chunk + right));
		if (codec_busy && (send || client_ready(w->codec))) {
			codec_busy = 0;
			if (codec_wait(w, &err) < 0)
				goto fail;
			pcm = w->r->pcm.samples;
			n_pcm = w->r->pcm.n_samples;
		}
		/* Progress: the tokens with each piece of audio, or when 20 ms
		 * went by without a message (the client sees them as they come,
		 * not one message a round) */
		if (req->stream && (n_pcm > 0 || (pos > shown && pcg_now() - t_shown >= 0.02))) {
			progress(w, j, 0, pos, all + shown, pos - shown, pcm, n_pcm);
			shown = pos;
			t_shown = pcg_now();
		}
		if (send) {
			if (codec_start(w, j, all + sent, pos - sent, rc == 1, &err) < 0)
				goto fail;
			codec_busy = 1;
			codec_open = rc == 0;
			sent = pos;
			while (chunk > 0 && sent >= cnext + chunk + right)
				cnext += chunk;
		}
	}
	int pos;
	const int *all = spec_tokens(s, &pos);
	const void *pcm = NULL;
	size_t n_pcm = 0;
	if (codec_busy) { /* the last audio */
		codec_busy = 0;
		if (codec_wait(w, &err) < 0)
			goto fail;
		pcm = w->r->pcm.samples;
		n_pcm = w->r->pcm.n_samples;
	}
	if (req->stream && (pos > shown || n_pcm > 0))
		progress(w, j, 0, pos, all + shown, pos - shown, pcm, n_pcm);
	spec_drop(s, &io);
	spec_result(s, j->req->id, rep);
	to_client(w, j, rep, 1);
	goto out;
fail:
	/* a cancelled session's caches go now; after an error a server may be
	 * gone, and waiting for it would only delay the error */
	if (s && !strcmp(code, PROTO_E_CANCELLED)) {
		int n;
		spec_tokens(s, &n);
		fprintf(stderr, "%s: session %llu cancelled after %d tokens: %s\n", prog,
			(unsigned long long)j->session, n,
			pcg_daemon_stop ? "stopping" : "the client went away or asked");
		spec_drop(s, &io);
	}
	if (codec_busy) { /* its reply, so that the codec's client is free again */
		pcg_err e2 = { "" };
		codec_wait(w, &e2);
	}
	if (codec_open) { /* the codec may forget the utterance */
		proto_init(w->m, PROTO_DROP, 0);
		w->m->drop.session = j->session;
		client_call(w->codec, w->m, w->r, &err);
	}
	proto_error(rep, j->req->id, code, "%s", err.msg);
	to_client(w, j, rep, 1);
out:
	release_replicas(w);
	spec_free(&s);
	asg_release(v, sa);
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
	w->v = v;
	w->m = calloc(1, sizeof *w->m);
	w->r = calloc(1, sizeof *w->r);
	if (w->m == NULL || w->r == NULL)
		return pcg_fail(err, "out of memory");
	w->cur[0] = w->cur[1] = -1;
	for (int sg = 0; sg < 2; sg++)
		for (int k = 0; k < v->stages[sg].n; k++) {
			const char *u = v->stages[sg].urls[k];
			if ((w->cl[sg][k] = client_new(v->ctx, u, timeout_ms, tries, err)) == NULL)
				return -1;
			client_set_ms_per_position(w->cl[sg][k], ms_per_pos);
			if (!strncmp(u, "ipc://", 6))
				client_set_alive(w->cl[sg][k], listening, (void *)u);
		}
	if (strcmp(v->codec_url, "none") &&
	    (w->codec = client_new(v->ctx, v->codec_url, timeout_ms, tries, err)) == NULL)
		return -1;
	if ((w->out = zmq_socket(v->ctx, ZMQ_PUSH)) == NULL ||
	    zmq_connect(w->out, "inproc://verifier-out") != 0)
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
	net_close(&w->out);
	proto_buf_free(&w->buf);
	free(w->m);
	free(w->r);
}

/* ------------------------------------------------------------ main */

/* Main's state: the client socket, the jobs alive, replies. */
typedef struct hub {
	verifier *v;
	void *sock, *in;
	job *jobs;
	int n_jobs;
	proto_buf buf;
	proto_msg *rep;
	pcg_client *ping[2][MAX_REPLICAS], *ping_codec;
} hub;

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
		pcg_die(prog, &err);
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

/* ping: the verifier and every server behind it answer. */
static void ping(hub *h, const proto_msg *req, proto_msg *rep)
{
	verifier *v = h->v;
	pcg_err err = { "" };
	char summary[200] = "", why[160] = "";
	proto_msg *q = calloc(1, sizeof *q), *r = calloc(1, sizeof *r);

	if (q == NULL || r == NULL) {
		proto_error(rep, req->id, PROTO_E_INTERNAL, "out of memory");
		goto out;
	}
	/* every replica of draftd and targetd, then codec-decode: a stage is
	 * ok while one of its replicas answers */
	for (int sg = 0; sg < 3; sg++) {
		const char *name = sg < 2 ? v->stages[sg].name : "codec-decode";
		const int n = sg < 2 ? v->stages[sg].n : h->ping_codec != NULL;
		int up = 0;
		for (int k = 0; k < n; k++) {
			pcg_client *c = sg < 2 ? h->ping[sg][k] : h->ping_codec;
			proto_init(q, PROTO_PING, 0);
			if (client_call(c, q, r, &err) == 0 && r->type == PROTO_PONG)
				up++;
			else
				snprintf(why, sizeof why, "%.150s",
					 r->type == PROTO_ERROR ? r->error.msg : err.msg);
		}
		if (n > 0 && up == 0) {
			proto_error(rep, req->id, PROTO_E_INTERNAL, "%s: %s", name, why);
			goto out;
		}
		if (n > 1)
			snprintf(summary + strlen(summary), sizeof summary - strlen(summary),
				 "%s%s %d of %d replicas ok", *summary ? ", " : "", name, up, n);
		else if (n == 1)
			snprintf(summary + strlen(summary), sizeof summary - strlen(summary), "%s%s ok",
				 *summary ? ", " : "", name);
	}
	pthread_mutex_lock(&v->lock);
	const int queued = v->n_queued, busy = v->n_workers - v->idle;
	pthread_mutex_unlock(&v->lock);
	proto_init(rep, PROTO_PONG, req->id);
	snprintf(rep->pong.msg, sizeof rep->pong.msg,
		 "verifier ok, %s (speech %d tokens%s; sessions %d running of %d, %d queued)",
		 summary, v->voc.speech_count, v->groups ? ", asg" : "", busy, v->n_workers, queued);
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
		if (j) {
			free(j->req);
			free(j->asg_img);
		}
		free(j);
		proto_error(h->rep, req->id, PROTO_E_INTERNAL, "out of memory");
		reply_msg(h, nr, h->rep);
		return;
	}
	if (h->n_jobs >= v->n_workers + max_queue) {
		free(j->req);
		free(j->asg_img);
		free(j->prompt_img);
		free(j);
		proto_error(h->rep, req->id, PROTO_E_BUSY,
			    "%d sessions run and %d wait (verifier --sessions, --queue): try again "
			    "later", v->n_workers, max_queue);
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
		proto_error(h->rep, req->id, PROTO_E_BAD_REQUEST,
			    "cancel: no synth %llu of this client runs or waits",
			    (unsigned long long)req->cancel.session);
	}
	reply_msg(h, nr, h->rep);
}

/* A request from a client (pcg_daemon's request callback). */
static void from_client(pcg_daemon *d, net_req *nr)
{
	hub *h = d->arg;
	pcg_err err = { "" };
	static proto_msg parsed; /* main's alone; too large for the stack */
	proto_msg *req = &parsed;

	if (proto_parse(nr->body, nr->len, req, &err) < 0) {
		proto_error(h->rep, req->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
		reply_msg(h, nr, h->rep);
	} else if (req->type == PROTO_SYNTH) {
		enqueue(h, nr, req);
	} else if (req->type == PROTO_CANCEL) {
		cancel(h, nr, req);
	} else if (req->type == PROTO_PING) {
		ping(h, req, h->rep);
		reply_msg(h, nr, h->rep);
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
			for (job **pp = &h->jobs; *pp; pp = &(*pp)->next)
				if (*pp == j) {
					*pp = j->next;
					break;
				}
			h->n_jobs--;
			free(j->req);
			free(j->asg_img);
			free(j->prompt_img);
			free(j);
			tell_queue(h);
		}
	}
	for (int i = 0; i < n; i++)
		zmq_msg_close(&f[i]);
}

/* What the hub's start needs from main. */
static struct hub_start {
	verifier *v;
	worker *workers;
	int n_sessions, timeout_ms;
	const char *codec_url, *draft_url, *target_url;
} hub_cfg;

/* pcg_daemon's start: once the socket is bound, the workers' results
 * socket, the workers, the stages' ping clients, the log line. */
static int hub_start(pcg_daemon *d, pcg_err *err)
{
	hub *h = d->arg;
	const struct hub_start *c = &hub_cfg;

	h->sock = d->sock;
	if ((h->in = zmq_socket(d->ctx, ZMQ_PULL)) == NULL ||
	    zmq_setsockopt(h->in, ZMQ_RCVHWM, &(int){ 0 }, sizeof(int)) != 0 ||
	    zmq_bind(h->in, "inproc://verifier-out") != 0)
		return pcg_fail(err, "inproc socket: %s", zmq_strerror(zmq_errno()));
	d->other = h->in;
	for (int i = 0; i < c->n_sessions; i++)
		if (worker_start(c->v, &c->workers[i], err) < 0)
			return -1;
	for (int sg = 0; sg < 2; sg++)
		for (int k = 0; k < c->v->stages[sg].n; k++)
			if ((h->ping[sg][k] = client_new(d->ctx, c->v->stages[sg].urls[k],
							 c->timeout_ms, 1, err)) == NULL)
				return -1;
	if (strcmp(c->codec_url, "none") &&
	    (h->ping_codec = client_new(d->ctx, c->codec_url, c->timeout_ms, 1, err)) == NULL)
		return -1;
	fprintf(stderr, "%s: listening on %s (draft %s, target %s, codec %s; %d sessions)\n",
		prog, d->url, c->draft_url, c->target_url, c->codec_url, c->n_sessions);
	return 0;
}

/* --local: a model server as a thread of this process. */
typedef struct local_server {
	pthread_t th;
	void *ctx;
	ms_config cfg;
	int started, rc;
} local_server;

static void *local_main(void *arg)
{
	local_server *ls = arg;
	ls->rc = modelserver_serve(ls->ctx, &ls->cfg, &pcg_daemon_stop);
	return NULL;
}

/* With --local DIR: DIR/name (into buf) when that file exists, else NULL. */
static const char *beside_local(char *buf, size_t size, const char *name)
{
	if (local_dir == NULL)
		return NULL;
	snprintf(buf, size, "%s/%s", local_dir, name);
	return access(buf, F_OK) == 0 ? buf : NULL;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	verifier v = { 0 };
	hub h = { 0 };
	worker *workers = NULL;
	void *ctx = NULL;
	int rc = 1, layers[1024], n_layers = 0;
	local_server ls[2] = { 0 };

	/* In --local mode the model servers are threads here: passive OpenMP
	 * waiting, as draftd and targetd have it. */
	pcg_daemon_passive_openmp(argv);
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first >= 0 && tok_path == NULL && local_dir)
		tok_path = local_dir; /* its tokenizer.json, or a GGUF's own (tok_open) */
	if (first < 0 || first != argc || tok_path == NULL) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg
			: first != argc ? "unexpected argument" : "--tokenizer FILE is required");
	}
	if (local_dir) {
		if ((n_layers = modelserver_parse_layers(local_layers, layers, 1024, &err)) < 0) {
			fprintf(stderr, "%s: --local-draft-layers: %s\n", prog, err.msg);
			return 2;
		}
		pcg_device dev;
		if (pcg_device_parse(local_device, &dev, &err) < 0) {
			fprintf(stderr, "%s: --device: %s\n", prog, err.msg);
			return 2;
		}
		if (pcg_device_check(dev, &err) < 0) {
			pcg_die(prog, &err);
			return 1;
		}
		draft_url = "inproc://draftd";
		target_url = "inproc://targetd";
	}
	if (net_curve_setup(curve_key, curve_allow, curve_peers, &err) < 0) {
		pcg_die(prog, &err);
		return 1;
	}
	if (net_endpoint_ok(listen_url, 1, &err) < 0 ||
	    stage_parse(&v.stages[SPEC_DRAFT], "draft", draft_url, &err) < 0 ||
	    stage_parse(&v.stages[SPEC_TARGET], "target", target_url, &err) < 0 ||
	    (strcmp(codec_url, "none") && net_endpoint_ok(codec_url, 0, &err) < 0)) {
		pcg_die(prog, &err);
		return 2;
	}
	v.stages[SPEC_DRAFT].name = "draftd";
	v.stages[SPEC_TARGET].name = "targetd";
	v.tok = tok_open(tok_path, &err);
	if (v.tok == NULL || llasa_vocab_init(v.tok, &v.voc, &err) < 0)
		goto fail;
	if (asg_path && (v.groups = asg_open(asg_path, &err)) == NULL)
		goto fail;
	static char local_voice[4200], local_tm[4200];
	if (voice_path == NULL)
		voice_path = beside_local(local_voice, sizeof local_voice, "voice.json");
	/* the draft: DIR/draft when it holds a model, as pcg-up does */
	static char local_draft_dir[4200];
	if (local_draft == NULL && local_layers == NULL &&
	    beside_local(local_draft_dir, sizeof local_draft_dir, "draft/config.json")) {
		snprintf(local_draft_dir, sizeof local_draft_dir, "%s/draft", local_dir);
		local_draft = local_draft_dir;
	}
	if (tm_path == NULL)
		tm_path = beside_local(local_tm, sizeof local_tm, "tm");
	static char local_knn[4200];
	if (knn_path == NULL)
		knn_path = beside_local(local_knn, sizeof local_knn, "knn");
	if (knn_path && (v.knn = asg_open(knn_path, &err)) == NULL)
		goto fail;
	if (v.knn && asg_get(v.knn)->n > (uint32_t)v.voc.speech_count) {
		pcg_fail(&err, "%s: covers %u tokens, the vocabulary has %d speech tokens", knn_path,
			 asg_get(v.knn)->n, v.voc.speech_count);
		goto fail;
	}
	if (tm_path && (v.tm = tm_open(tm_path, &err)) == NULL)
		goto fail;
	if (voice_path) {
		static voice_info vi;
		if (voice_load(voice_path, &vi, &err) < 0)
			goto fail;
		v.voice = &vi;
		if (tok_token_id(v.tok, "<|p__|>", 7) < 0) {
			pcg_fail(&err, "%s: the tokenizer has no pause token <|p__|>: not a phoneme "
				 "voice's", voice_path);
			goto fail;
		}
		if (vi.next_phoneme && tok_token_id(v.tok, "<|n__|>", 7) < 0) {
			pcg_fail(&err, "%s: next_phoneme is set but the tokenizer has no <|n__|>",
				 voice_path);
			goto fail;
		}
	}
	if (v.groups && asg_get(v.groups)->n > (uint32_t)v.voc.speech_count) {
		pcg_fail(&err, "%s: covers %u tokens, the vocabulary has %d speech tokens", asg_path,
			 asg_get(v.groups)->n, v.voc.speech_count);
		goto fail;
	}
	v.env = (spec_env){ .tok = v.tok, .voc = &v.voc, .voice = v.voice, .tm = v.tm, .knn = v.knn,
			    .unk_phone = v.voice ? tok_token_id(v.tok, "<|p__|>", 7) : 0,
			    .unk_next = v.voice ? tok_token_id(v.tok, "<|n__|>", 7) : 0 };
	/* the encoder loads on the first prompt: a verifier that is sent none
	 * never holds its 1.2 GB */
	if (encoder_path && (v.prompts = pcg_prompts_new(encoder_path, PCG_BF16, 64, &err)) == NULL)
		goto fail;
	atomic_init(&v.next_session, ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid());
	v.codec_url = codec_url;
	v.n_workers = n_sessions;
	pthread_mutex_init(&v.lock, NULL);
	pthread_mutex_init(&v.costs_lock, NULL);
	if (costs) {
		if (cost_terms_parse(costs, &v.env.costs, &err) < 0)
			goto fail;
		v.costs_known = 1;
	}
	pthread_cond_init(&v.wake, NULL);
	ctx = zmq_ctx_new();
	v.ctx = ctx;
	h.rep = calloc(1, sizeof *h.rep);
	workers = calloc((size_t)n_sessions, sizeof *workers);
	if (!h.rep || !workers || !ctx) {
		pcg_fail(&err, "out of memory");
		goto fail;
	}
	if (local_dir) {
		ls[0].cfg = (ms_config){ "targetd", local_dir, target_url, NULL, 0, 2LL << 30,
					 local_device };
		ls[1].cfg = (ms_config){ "draftd", local_draft ? local_draft : local_dir, draft_url,
					 n_layers ? layers : NULL, n_layers, 2LL << 30,
					 local_device };
		for (int i = 0; i < 2; i++) {
			ls[i].ctx = ctx;
			if (pthread_create(&ls[i].th, NULL, local_main, &ls[i]) != 0) {
				pcg_fail(&err, "cannot start a local model server");
				goto fail;
			}
			ls[i].started = 1;
		}
	}
	/* progress messages queue per client while it reads: room for a long
	 * utterance's worth, so that only a stuck client fills it */
	hub_cfg = (struct hub_start){ &v, workers, n_sessions, timeout_ms, codec_url, draft_url,
				     target_url };
	h.v = &v;
	pcg_daemon d = { .prog = prog, .url = listen_url, .ctx = ctx, .sndhwm = 100000,
			 .stop = &pcg_daemon_stop, .arg = &h, .start = hub_start,
			 .request = from_client, .other_ready = from_worker };
	if (pcg_daemon_run(&d) != 0) {
		rc = 1;
		goto out;
	}
	rc = 0;
	goto out;
fail:
	pcg_die(prog, &err);
out:
	pcg_daemon_stop = 1;
	if (workers) {
		/* wake the idle workers; a busy one ends its session at its next
		 * round (its clients' calls fail once the context shuts down) */
		pthread_mutex_lock(&v.lock);
		pthread_cond_broadcast(&v.wake);
		pthread_mutex_unlock(&v.lock);
		if (ctx)
			zmq_ctx_shutdown(ctx);
		for (int i = 0; i < n_sessions; i++)
			worker_free(&workers[i]);
		free(workers);
	}
	for (job *j = h.jobs, *nx; j; j = nx) { /* never started */
		nx = j->next;
		free(j->req);
		free(j->asg_img);
		free(j->prompt_img);
		free(j);
	}
	for (int sg = 0; sg < 2; sg++)
		for (int k = 0; k < MAX_REPLICAS; k++) {
			client_free(&h.ping[sg][k]);
			free(v.stages[sg].urls[k]);
		}
	client_free(&h.ping_codec);
	net_close(&h.in);
	proto_buf_free(&h.buf);
	free(h.rep);
	for (int i = 0; i < 2; i++)
		if (ls[i].started) {
			pthread_join(ls[i].th, NULL);
			if (ls[i].rc != 0)
				rc = 1;
		}
	if (ctx)
		zmq_ctx_term(ctx);
	asg_close(&v.groups);
	asg_close(&v.knn);
	tm_close(&v.tm);
	pcg_prompts_free(&v.prompts);
	tok_free(&v.tok);
	return rc;
}
