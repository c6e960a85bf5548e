/* modelserver.c: draftd and targetd (see modelserver.h). One loop: take
 * every request that waits, advance them all by one batched pass of the
 * model, reply to those that are done; signal handlers only set a flag. */
#include "modelserver.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "clock.h"
#include "costmodel.h"
#include "matmul.h"
#include "model.h"
#include "net.h"
#include "qmatmul.h"
#include "device.h"
#include "opts.h"
#include "proto.h"
#include "rng.h"
#include "mtp.h"
#include "sampling.h"
#include "service.h"

/* A prompt's prefill runs in pieces of this many positions (sched_pass). */
#define PREFILL_CHUNK 32

typedef struct session {
	uint64_t id;
	llama_kv *kv;
	int32_t *tokens; /* the ids in the cache, so a resent prefix is not recomputed */
	int cap;
	uint64_t last_use;
	int busy;        /* requests of it running: never evicted */
	double t_replied; /* when its last short step was answered (0: never) */
	int prefilled;   /* positions from 0 its first request (a prompt) computed in whole
			  * pieces of PREFILL_CHUNK (share_prefix); 0: none */
} session;

typedef struct server {
	const char *prog;
	llama_model *model;
	session *s;
	int n, cap;
	uint64_t clock;
	long long kv_mem;
	unsigned long evicted;
	session spare;         /* the last session a client dropped, kept for its prompt
				* (share_prefix); spare.kv NULL: none */
	unsigned long shared;  /* prompts that began with another session's positions */
	mtp_heads *heads;      /* the model directory's mtp.safetensors, or NULL */
	int layer_heads;       /* the model's Llasa+ heads (lib/engine/model.h llama_n_mtp), or 0 */
	float *hlogits;        /* mtp.safetensors heads: heads x vocab, one position's
				* (a Llasa+ model's go through lm_head into the
				* pending's out, after the block's rows) */
	float *hprobs;         /* with heads: PROTO_MAX_N x (1 + heads) x vocab */
	double step, slope;    /* measured at the first ping (lib/speculate/costmodel.c): told in pongs */
	double run_step;       /* and the step back to back, caches warm */
	double head;           /* one MTP head at one position, likewise */
	int measured;
} server;


static void logf_(const server *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(const server *sv, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", sv->prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* The MTP heads a score may ask for: a Llasa+ model's own, or those of
 * mtp.safetensors beside the model. */
static int n_heads(const server *sv)
{
	return sv->layer_heads ? sv->layer_heads : sv->heads ? mtp_n_heads(sv->heads) : 0;
}

static session *find(server *sv, uint64_t id)
{
	for (int i = 0; i < sv->n; i++)
		if (sv->s[i].id == id)
			return &sv->s[i];
	return NULL;
}

static void drop(server *sv, session *x)
{
	llama_kv_free(&x->kv);
	free(x->tokens);
	*x = sv->s[--sv->n];
}

/* A session its client is done with: kept as the spare when its prompt
 * can start another's (share_prefix), the spare before it freed. */
static void retire(server *sv, session *x)
{
	if (x->prefilled < PREFILL_CHUNK || llama_kv_len(x->kv) < PREFILL_CHUNK) {
		drop(sv, x);
		return;
	}
	llama_kv_free(&sv->spare.kv);
	free(sv->spare.tokens);
	sv->spare = *x;
	*x = sv->s[--sv->n];
}

static session *create(server *sv, uint64_t id, pcg_err *err)
{
	if (sv->n == sv->cap) {
		int cap = sv->cap ? 2 * sv->cap : 8;
		session *s = realloc(sv->s, (size_t)cap * sizeof *s);
		if (s == NULL) {
			pcg_fail(err, "out of memory for sessions");
			return NULL;
		}
		sv->s = s;
		sv->cap = cap;
	}
	session *x = &sv->s[sv->n];
	memset(x, 0, sizeof *x);
	x->id = id;
	x->kv = llama_kv_new(sv->model);
	if (x->kv == NULL) {
		pcg_fail(err, "out of memory for a KV cache");
		return NULL;
	}
	sv->n++;
	return x;
}

/* Least recently used sessions go until the caches fit in --kv-mem; the one
 * just served stays. A client whose session went gets "unknown-session". */
static void evict(server *sv, uint64_t keep)
{
	for (;;) {
		size_t total = 0;
		session *lru = NULL;
		for (int i = 0; i < sv->n; i++) {
			total += llama_kv_bytes(sv->s[i].kv);
			if (sv->s[i].id != keep && !sv->s[i].busy &&
			    (!lru || sv->s[i].last_use < lru->last_use))
				lru = &sv->s[i];
		}
		if ((long long)total <= sv->kv_mem || lru == NULL)
			return;
		logf_(sv, "evicting session %llu (kv %zu bytes, total %zu > --kv-mem %lld)",
		      (unsigned long long)lru->id, llama_kv_bytes(lru->kv), total, sv->kv_mem);
		drop(sv, lru);
		sv->evicted++;
	}
}

/* Room for n ids in x->tokens (doubling). */
static int reserve_tokens(session *x, int n, pcg_err *err)
{
	if (n <= x->cap)
		return 0;
	int32_t *t = realloc(x->tokens, (size_t)n * 2 * sizeof *t);
	if (t == NULL)
		return pcg_fail(err, "out of memory");
	x->tokens = t;
	x->cap = n * 2;
	return 0;
}

/* Brings x to pos tokens, keeping the cached positions after it whose ids
 * equal toks[0..n) (but never the last n_out: their outputs are wanted),
 * with room for the rest and `more` tokens. Returns how many of toks are
 * kept, or -1. */
static int prepare(session *x, int pos, const int32_t *toks, int n, int n_out, int more,
		   pcg_err *err)
{
	int keep = pos, i = 0, len = llama_kv_len(x->kv);

	while (i < n - n_out && keep < len && x->tokens[keep] == toks[i])
		keep++, i++;
	if (keep < x->prefilled) /* rolled back into its prompt: recomputed otherwise */
		x->prefilled = keep / PREFILL_CHUNK * PREFILL_CHUNK;
	if (llama_kv_truncate(x->kv, keep, err) < 0 || reserve_tokens(x, keep + n - i + more, err) < 0)
		return -1;
	return i;
}

/* What a propose feeds before drafting its token i >= 1: x_{i-1}, then the
 * forced tokens due there (forced_at == i). Returns the count. */
static int propose_feed(const proto_propose *q, const int32_t *x, int i, int32_t *feed)
{
	int n = 0;

	feed[n++] = x[i - 1];
	for (int k = 0; k < q->n_forced; k++)
		if (q->forced_at[k] == i)
			feed[n++] = q->forced[k];
	return n;
}

static int row_token(const llama_rows *rows, int idx)
{
	for (int i = 0; i < rows->n; i++) {
		int len = rows->end[i] - rows->begin[i];
		if (idx < len)
			return rows->begin[i] + idx;
		idx -= len;
	}
	return -1;
}

/* Whether the sampler leaves zeros: then the reply is worth sending as the
 * nonzero entries alone (proto decides per vector by size; either way the
 * client reads the same vector). */
static int truncates(const pcg_sampling *s, int width)
{
	return s->temperature == 0 || (s->top_k > 0 && s->top_k < width) || s->top_p < 1;
}

/* What proto_parse cannot know of a propose or score, and what a request
 * built in this process (modelserver_handle) may get wrong: its tokens,
 * rows and forced tokens in this model's vocabulary, its sampling, n, the
 * MTP heads it asks for. Fills an error reply and returns -1 when the
 * model cannot serve it. */
static int request_check(const server *sv, const proto_msg *q, proto_msg *rep)
{
	pcg_err err = { "" };
	const proto_model_req *r = proto_model(q);
	const int vocab = llama_get_config(sv->model)->vocab;
	const int heads = q->type == PROTO_SCORE ? q->score.heads : 0;
	const int have = n_heads(sv);

	for (int i = 0; i < r->rows.n; i++)
		if (r->rows.end[i] > vocab) {
			proto_error(rep, q->id, PROTO_E_BAD_REQUEST,
				    "field 'rows': [%d, %d) beyond the vocabulary of %d",
				    r->rows.begin[i], r->rows.end[i], vocab);
			return -1;
		}
	for (int i = 0; i < r->n_append; i++)
		if (r->append[i] < 0 || r->append[i] >= vocab) {
			proto_error(rep, q->id, PROTO_E_BAD_REQUEST,
				    "token %d at index %d out of range [0, %d)", r->append[i], i,
				    vocab);
			return -1;
		}
	if (pcg_sampling_check(&r->samp, &err) < 0) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
		return -1;
	}
	if (q->type == PROTO_PROPOSE && q->propose.stop && q->propose.stop_id >= vocab) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST,
			    "field 'stop': token %d out of range [0, %d)", q->propose.stop_id, vocab);
		return -1;
	}
	for (int k = 0; q->type == PROTO_PROPOSE && k < q->propose.n_forced; k++)
		if (q->propose.forced[k] >= vocab) {
			proto_error(rep, q->id, PROTO_E_BAD_REQUEST,
				    "field 'forced': token %d out of range [0, %d)",
				    q->propose.forced[k], vocab);
			return -1;
		}
	const int max_n = q->type == PROTO_SCORE && r->n_append < PROTO_MAX_N ? r->n_append
									       : PROTO_MAX_N;
	if (r->n < 1 || r->n > max_n) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "field 'n': %d; a %s needs 1 to %d",
			    r->n, proto_type_name(q->type), max_n);
		return -1;
	}
	if (heads > have) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "field 'heads': %d MTP heads asked, "
			    "the model has %d (%s)", heads, have,
			    sv->layer_heads ? "Llasa+" : MTP_FILE_NAME);
		return -1;
	}
	return 0;
}


/* ping and drop, answered at once; any other type but propose and score
 * is an error. */
static void serve_now(server *sv, const proto_msg *q, proto_msg *rep)
{
	const llama_config *c = llama_get_config(sv->model);
	pcg_err err = { "" };
	session *x;

	switch (q->type) {
	case PROTO_PING:
		if (!sv->measured) {
			/* what a step and a block cost here, for the verifier's cost
			 * model, over as many rows as LLaSA's speech tokens and end
			 * token; at the first ping (pcg-up's, once every server is
			 * up) rather than at load, where the others still load */
			const int V = c->vocab, nr = V < 65537 ? V : 65537;
			const llama_rows top = { 1, { V - nr }, { V } };
			if (cost_measure(sv->model, &top, &sv->step, &sv->slope, &sv->run_step,
					 &err) < 0)
				sv->step = sv->slope = sv->run_step = 0;
			const pcg_sampling samp = { 0.8f, 50, 1.0f }; /* LLaSA's */
			if (n_heads(sv) > 0)
				sv->head = cost_measure_heads(sv->heads, sv->model, &top, &samp);
			sv->measured = 1;
		}
		proto_init(rep, PROTO_PONG, q->id);
		snprintf(rep->pong.msg, sizeof rep->pong.msg,
			 "%s layers=%d vocab=%d hidden=%d heads=%d sessions=%d step_ms=%.4f "
			 "slope=%.4f head_ms=%.4f run_step_ms=%.4f", sv->prog,
			 llama_n_layers(sv->model), c->vocab, c->hidden, n_heads(sv), sv->n,
			 sv->step * 1e3, sv->slope, sv->head * 1e3, sv->run_step * 1e3);
		return;
	case PROTO_DROP:
		if ((x = find(sv, q->drop.session)) != NULL)
			retire(sv, x);
		proto_init(rep, PROTO_OK, q->id);
		evict(sv, q->drop.session);
		return;
	default:
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "a server does not take '%s'",
			    proto_type_name(q->type));
		return;
	}
}

/* ------------------------------------------------------------ batching
 *
 * Every propose and score runs one way, whether it came over the socket
 * (modelserver_serve) or from this process (modelserver_handle): checked
 * (request_check), added to the pending requests, advanced by passes of
 * the model until done (sched_pass), answered by one reply builder
 * (reply_probs, sched_reap). Only ping and drop are answered at once.
 *
 * The serving loop batches: it takes every request that is waiting, and
 * each pass of the model advances all of them by one step at once (a
 * score: its block; a propose: one drafted token), so the weights are read
 * once for all sessions (lib/engine/model.h llama_forward_batch; each session
 * keeps its own cache and attention). A step of at most PCG_MATMUL_SMALL
 * positions joins the batch, and gets the bits it would get alone. A
 * longer span (a prompt's prefill) runs alone in pieces of PREFILL_CHUNK
 * positions, one piece per pass, between the batches, so it never stalls
 * the other sessions' rounds for more than a piece. The pieces are cut by
 * the request alone (never by the load), so a session's results do not
 * depend on what else runs. A lone request never waits: a pass starts as
 * soon as anything is ready. A score with MTP heads takes its block's
 * logits and final states from the pass; the heads run when it is done. */

#define MAX_PENDING 256
/* Finished requests kept with their buffers for the next ones, so that a
 * request costs no malloc of its parsed message (tens of kB) or of its
 * outputs (n x width floats: megabytes, fresh pages each time). A batch
 * of this many sessions runs without any; each keeps at most
 * PROTO_MAX_N x vocab floats. */
#define POOL_MAX 16

typedef struct pending {
	unsigned char route[256];  /* the client's (none: modelserver_handle) */
	size_t route_len;
	int delim;
	const proto_msg *q;        /* the request: *qbuf, or modelserver_handle's */
	const proto_model_req *r;  /* its propose or score part */
	int heads;                 /* a score's MTP heads */
	int next;                  /* r->append[next..] are still to run */
	int step;                  /* propose: tokens drafted so far */
	int width;
	int32_t x[PROTO_MAX_N];    /* propose: the drafted ids */
	int32_t feed[1 + PROTO_MAX_N]; /* propose: what the next step feeds */
	int n_feed;
	pcg_rng rng;
	double t_compute;
	double t_told;             /* when the client last heard of it */
	int started;               /* its session brought to its pos (pending_start) */
	int short_step;            /* ran in a batched pass (not a prefill's pieces) */
	int done, failed;
	struct pending *nextp;
	/* kept from request to request (POOL_MAX) */
	proto_msg *qbuf;           /* the request, parsed (ids copied) */
	float *out;                /* n x width: probabilities; with heads, logits */
	float *hidden;             /* with heads: n x hidden final states (Llasa+: n x heads
				    * x hidden, the heads' outputs) */
	size_t out_cap, hidden_cap; /* floats */
} pending;

typedef struct sched {
	server *sv;
	const char *model_dir;
	void *sock;                /* NULL: modelserver_handle, rep is the caller's */
	pending *head;
	int n;
	pending *pool;             /* finished ones, their buffers kept */
	int n_pool;
	proto_msg *rep;            /* the reply being built */
	proto_buf buf;
	net_counts nc;
	unsigned long batches, batched_rows;
	double t_pass;             /* the last batched pass: its length, */
	double t_pass_end;         /* when it ended */
	double t_waited;           /* the pass after which the last wait was */
	unsigned long waits;       /* passes that waited for sessions (gather_wait) */
	int no_gather;             /* PCG_GATHER=0: never wait (to compare) */
	const char *device;        /* ms_config's */
} sched;

/* A pending request with its fields cleared, from the pool if it has one;
 * NULL when out of memory. */
static pending *pending_get(sched *sc)
{
	pending *p = sc->pool;

	if (p == NULL)
		return calloc(1, sizeof *p);
	sc->pool = p->nextp;
	sc->n_pool--;
	memset(p, 0, offsetof(pending, qbuf)); /* the buffers stay */
	return p;
}

static void pending_free(pending *p)
{
	if (p == NULL)
		return;
	free(p->qbuf);
	free(p->out);
	free(p->hidden);
	free(p);
}

/* Back to the pool, or freed beyond POOL_MAX. (modelserver_handle's reply
 * points into the outputs until the next request: its one pending always
 * goes back to the pool.) */
static void pending_put(sched *sc, pending *p)
{
	if (sc->n_pool >= POOL_MAX) {
		pending_free(p);
		return;
	}
	p->nextp = sc->pool;
	sc->pool = p;
	sc->n_pool++;
}

/* Makes *buf hold n floats (its contents not kept). Returns 0 or -1. */
static int reserve(float **buf, size_t *cap, size_t n)
{
	if (n <= *cap)
		return 0;
	free(*buf);
	*cap = 0;
	if ((*buf = malloc(n * sizeof **buf)) == NULL)
		return -1;
	*cap = n;
	return 0;
}

static int same_rows(const llama_rows *a, const llama_rows *b)
{
	if (a->n != b->n)
		return 0;
	for (int i = 0; i < a->n; i++) /* the ranges beyond n are not set */
		if (a->begin[i] != b->begin[i] || a->end[i] != b->end[i])
			return 0;
	return 1;
}

/* Whether a and b can share a pass: the same rows, and the same outputs
 * (probabilities of the same sampling, or logits and final states for MTP
 * heads). */
static int same_work(const pending *a, const pending *b)
{
	const pcg_sampling *s = &a->r->samp, *t = &b->r->samp;

	return same_rows(&a->r->rows, &b->r->rows) && (a->heads > 0) == (b->heads > 0) &&
	       s->temperature == t->temperature && s->top_k == t->top_k && s->top_p == t->top_p;
}

/* The sampling a pass of p applies on the model's device; NULL: logits
 * (MTP heads temper them on the host with the heads'). */
static const pcg_sampling *pending_samp(const pending *p)
{
	return p->heads > 0 ? NULL : &p->r->samp;
}

/* Sends sc->rep to p's client (modelserver_handle: it is already the
 * caller's) and counts it. */
static void reply_pending(sched *sc, const pending *p)
{
	pcg_err err = { "" };
	const proto_msg *rep = sc->rep;

	if (rep->type == PROTO_ERROR)
		sc->nc.errors++;
	else
		sc->nc.served++;
	if (sc->sock == NULL)
		return;
	if (rep->type == PROTO_ERROR)
		fprintf(stderr, "%s: request %llu: %s: %s\n", sc->sv->prog,
			(unsigned long long)rep->id, rep->error.code, rep->error.msg);
	net_req r = { .route_len = p->route_len, .delim = p->delim };
	memcpy(r.route, p->route, p->route_len);
	if (proto_pack_buf(rep, &sc->buf, &err) < 0 ||
	    net_reply_nowait(sc->sock, &r, sc->buf.data, sc->buf.len, &err) < 0)
		fprintf(stderr, "%s: %s\n", sc->sv->prog, err.msg);
}

/* The session of p, made ready: its cache brought to the request's pos
 * with the cached positions that match kept, p's outputs allocated. Fills
 * an error reply and returns -1 when the request cannot run. */
/* Sessions share the start of their prompts. LLaSA's prompt begins with
 * the same header for every request (the chat template's system and user
 * turns: a third of a short sentence's prompt), which each new session
 * would compute again. A new session's first request (from position 0,
 * longer than a step) starts instead from the longest run of whole pieces
 * (PREFILL_CHUNK positions from 0) that another session, or the spare,
 * computed in its own prompt with the same tokens: its cache's positions
 * are copied. Those pieces are the very products the new session would
 * run (the pieces are cut by the request alone, from position 0, and
 * their rows are the same tokens at the same positions), so the cache
 * holds the same bits either way, and so do the results. At least the
 * positions whose outputs are asked for are computed (n: the positions
 * before them). On the host only (a
 * device's cache is not copied: there prefill is cheap). */
static void share_prefix(server *sv, session *x, const int32_t *toks, int n)
{
	const session *best = NULL;
	int best_len = 0;

	for (int k = -1; k < sv->n; k++) {
		const session *d = k < 0 ? &sv->spare : &sv->s[k];
		if (d == x || d->kv == NULL)
			continue;
		int lim = d->prefilled < llama_kv_len(d->kv) ? d->prefilled : llama_kv_len(d->kv);
		if (lim > n)
			lim = n;
		int l = 0;
		while (l < lim && d->tokens[l] == toks[l])
			l++;
		l -= l % PREFILL_CHUNK;
		if (l > best_len) {
			best = d;
			best_len = l;
		}
	}
	pcg_err err = { "" };
	if (best == NULL || best_len > x->cap)
		return;
	if (llama_kv_copy(x->kv, best->kv, best_len, &err) < 0)
		return;
	memcpy(x->tokens, best->tokens, (size_t)best_len * sizeof *x->tokens);
	sv->shared++;
}

static int pending_start(server *sv, pending *p, proto_msg *rep)
{
	pcg_err err = { "" };
	const proto_msg *q = p->q;
	const proto_model_req *r = p->r;

	if (request_check(sv, q, rep) < 0)
		return -1;
	session *x = find(sv, r->session);
	if (x == NULL || r->pos > llama_kv_len(x->kv)) {
		if (r->pos != 0) {
			proto_error(rep, q->id, PROTO_E_UNKNOWN_SESSION,
				    "session %llu: not held up to position %d; resend from 0",
				    (unsigned long long)r->session, r->pos);
			return -1;
		}
		if (x == NULL && (x = create(sv, r->session, &err)) == NULL) {
			proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
			return -1;
		}
	}
	x->last_use = ++sv->clock;
	/* a prompt: its whole pieces from position 0 may be another session's
	 * (pending_seq cuts them: every multiple of PREFILL_CHUNK up to the
	 * outputs ends one; a score with MTP heads is one piece, not shared) */
	const int want = q->type == PROTO_SCORE ? r->n : 1;
	const int prompt = r->pos == 0 && r->n_append > PREFILL_CHUNK && p->heads == 0 &&
			   llama_kv_len(x->kv) == 0;
	if (prompt && reserve_tokens(x, r->n_append, &err) == 0)
		share_prefix(sv, x, r->append, r->n_append - want);
	/* room for a propose's drafted and forced tokens too */
	const int n_forced = q->type == PROTO_PROPOSE ? q->propose.n_forced : 0;
	const int i = prepare(x, r->pos, r->append, r->n_append,
			      q->type == PROTO_SCORE ? r->n : 1, PROTO_MAX_N + n_forced, &err);
	if (i < 0) { /* out of memory: pos was checked above */
		proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
		return -1;
	}
	p->next = i;
	if (prompt)
		x->prefilled = (r->n_append - want) / PREFILL_CHUNK * PREFILL_CHUNK;
	p->width = llama_rows_count(sv->model, &r->rows);
	const size_t H = (size_t)llama_get_config(sv->model)->hidden;
	/* Llasa+ with heads: the target's and the heads' rows, through lm_head
	 * together (reply_probs) */
	const int rows_per = p->heads > 0 && sv->layer_heads ? 1 + sv->layer_heads : 1;
	if (reserve(&p->out, &p->out_cap, (size_t)r->n * rows_per * p->width) < 0 ||
	    (p->heads > 0 && reserve(&p->hidden, &p->hidden_cap,
				     (size_t)r->n * (sv->layer_heads ? rows_per : 1) * H) < 0)) {
		proto_error(rep, q->id, PROTO_E_INTERNAL, "out of memory");
		return -1;
	}
	if (q->type == PROTO_PROPOSE)
		pcg_rng_init(&p->rng, q->propose.seed, 0);
	return 0;
}

/* What p runs next, as a sequence of a pass on its session's cache.
 * Returns -1 when the session was dropped meanwhile. */
static int pending_seq(server *sv, const pending *p, llama_seq *s)
{
	const proto_model_req *r = p->r;
	const int propose = p->q->type == PROTO_PROPOSE;
	const session *x = find(sv, r->session);

	if (x == NULL)
		return -1;
	*s = (llama_seq){ .kv = x->kv };
	if (propose && p->step > 0) {
		s->tokens = p->feed;
		s->n = p->n_feed;
		s->n_out = 1;
		s->out = p->out + (size_t)p->step * p->width;
		return 0;
	}
	const int left = r->n_append - p->next, want = propose ? 1 : r->n;
	int n = left;
	/* the last piece holds every output; a score with MTP heads is one
	 * piece, so that its bits stay those it always had (a prefill of more
	 * than 64 positions in one product gets other bits than in pieces:
	 * lib/engine/model.c) */
	if (left > PREFILL_CHUNK && p->heads == 0)
		n = left - want < PREFILL_CHUNK ? left - want : PREFILL_CHUNK;
	s->tokens = r->append + p->next;
	s->n = n;
	s->n_out = n == left ? want : 0;
	s->out = s->n_out ? p->out : NULL;
	s->hidden = s->n_out && p->heads > 0 && !sv->layer_heads ? p->hidden : NULL;
	if (s->n_out && p->heads > 0 && sv->layer_heads) {
		/* Llasa+: the final hidden states of the outputs, then the heads'
		 * outputs, and lm_head on all of them at once in reply_probs */
		const size_t H = (size_t)llama_get_config(sv->model)->hidden;
		s->out = NULL;
		s->hidden = p->hidden;
		s->heads = p->hidden + (size_t)s->n_out * H;
	}
	return 0;
}

/* After a step ran: the cache's ids, the next step, or done. */
static void pending_advance(server *sv, pending *p, const llama_seq *s)
{
	session *x = find(sv, p->r->session);
	const int len = llama_kv_len(x->kv);

	memcpy(x->tokens + len - s->n, s->tokens, (size_t)s->n * sizeof *s->tokens);
	if (!(p->q->type == PROTO_PROPOSE && p->step > 0))
		p->next += s->n;
	if (s->n_out == 0)
		return;
	if (p->q->type == PROTO_SCORE) {
		p->done = 1;
		return;
	}
	/* propose: x_i ~ p_i, fed back to get p_{i+1}; x_n is not fed. With
	 * draws, x_i's uniform is a function of i (a verifier's one a round;
	 * where nothing can be drawn, the last row, as there) */
	const proto_propose *q = &p->q->propose;
	const float *pr = p->out + (size_t)p->step * p->width;
	const double u = q->draws ? pcg_rng_uniform_at(q->seed, q->draws + (uint64_t)p->step, 0)
				  : pcg_rng_uniform(&p->rng);
	int idx = pcg_sample(pr, p->width, u);
	p->x[p->step] = row_token(&p->r->rows, idx >= 0 ? idx : q->draws ? p->width - 1 : 0);
	if (++p->step == p->r->n || (q->stop && p->x[p->step - 1] == q->stop_id))
		p->done = 1;
	else
		p->n_feed = propose_feed(&p->q->propose, p->x, p->step, p->feed);
}

static void pending_fail(sched *sc, pending *p, const char *msg)
{
	proto_error(sc->rep, p->q->id, PROTO_E_INTERNAL, "%s", msg);
	reply_pending(sc, p);
	p->failed = 1;
}

/* One pass: a piece of one long span, then one batched step of every
 * request whose step is short, grouped by rows and outputs (same_work). */
static void sched_pass(sched *sc)
{
	server *sv = sc->sv;
	pcg_err err = { "" };
	llama_seq seqs[MAX_PENDING];
	pending *who[MAX_PENDING];
	int taken[MAX_PENDING] = { 0 }, n_ready = 0;
	pending *ready[MAX_PENDING];

	/* requests start in arrival order, one at a time per session (a
	 * client's resend after a timeout runs after the abandoned one) */
	for (pending *p = sc->head; p; p = p->nextp) {
		int blocked = 0;
		if (p->started || p->done || p->failed)
			continue;
		for (pending *o = sc->head; o != p && !blocked; o = o->nextp)
			blocked = o->r->session == p->r->session && !o->done && !o->failed;
		if (blocked)
			continue;
		if (pending_start(sv, p, sc->rep) < 0) {
			reply_pending(sc, p);
			p->failed = 1;
			continue;
		}
		p->started = 1;
		find(sv, p->r->session)->busy++;
	}
	/* the short steps wait for the batch; the oldest long span runs a
	 * piece (the list is in arrival order) */
	int piece = 0;
	for (pending *p = sc->head; p; p = p->nextp) {
		llama_seq s;
		if (!p->started || p->done || p->failed)
			continue;
		if (pending_seq(sv, p, &s) < 0) {
			pending_fail(sc, p, "the session was dropped");
			continue;
		}
		if (s.n <= PCG_MATMUL_SMALL) {
			p->short_step = 1;
			ready[n_ready++] = p;
			continue;
		}
		if (piece)
			continue;
		piece = 1;
		double t = pcg_now();
		if (llama_forward_batch(sv->model, &s, 1, &p->r->rows, pending_samp(p), &err) < 0) {
			pending_fail(sc, p, err.msg);
			continue;
		}
		p->t_compute += pcg_now() - t;
		pending_advance(sv, p, &s);
	}
	/* the short steps, batched */
	for (int a = 0; a < n_ready; a++) {
		if (taken[a])
			continue;
		int nb = 0;
		for (int b = a; b < n_ready; b++) {
			if (taken[b] || !same_work(ready[a], ready[b]))
				continue;
			pending *p = ready[b];
			taken[b] = 1;
			if (pending_seq(sv, p, &seqs[nb]) < 0) {
				pending_fail(sc, p, "the session was dropped");
				continue;
			}
			who[nb++] = p;
		}
		if (nb == 0)
			continue;
		double t = pcg_now();
		int rc = llama_forward_batch(sv->model, seqs, nb, &ready[a]->r->rows,
					     pending_samp(ready[a]), &err);
		if (rc < 0 && nb > 1) { /* find the one that fails: the rest go on alone */
			for (int i = 0; i < nb; i++)
				if (llama_forward_batch(sv->model, &seqs[i], 1, &who[i]->r->rows,
							pending_samp(who[i]), &err) < 0)
					pending_fail(sc, who[i], err.msg);
				else
					pending_advance(sv, who[i], &seqs[i]);
			continue;
		}
		if (rc < 0) {
			pending_fail(sc, who[0], err.msg);
			continue;
		}
		const double dt = pcg_now() - t;
		sc->t_pass = dt;
		sc->t_pass_end = t + dt;
		sc->batches++;
		sc->batched_rows += (unsigned long)nb;
		for (int i = 0; i < nb; i++) {
			who[i]->t_compute += dt;
			pending_advance(sv, who[i], &seqs[i]);
		}
	}
}

/* The reply to p, done: its distributions, drafted ids and seconds of
 * compute. A score with MTP heads gets them here, per position: q, then
 * the heads' distributions, tempered alike on the host. Returns 0, or -1
 * with an error reply. */
static int reply_probs(server *sv, pending *p, proto_msg *rep)
{
	pcg_err err = { "" };
	const proto_model_req *r = p->r;
	const int width = p->width, nh = p->heads;
	const float *values = p->out;

	if (nh > 0) {
		const double t = pcg_now();
		const int H = llama_get_config(sv->model)->hidden, nl = sv->layer_heads;
		/* Llasa+: the block's final hidden states and the heads' outputs of
		 * every position through lm_head in one pass (its weights stream
		 * once; each row's logits are the bits it gets alone) */
		if (nl > 0 && llama_lm_head(sv->model, p->hidden, r->n * (1 + nl), &r->rows,
					    p->out, &err) < 0) {
			proto_error(rep, p->q->id, PROTO_E_INTERNAL, "%s", err.msg);
			return -1;
		}
		for (int i = 0; i < r->n; i++) {
			float *o = sv->hprobs + (size_t)i * (1 + nh) * width;
			/* the heads' logits: a Llasa+ position's in the pass above,
			 * after the block's rows; separate heads' from mtp_logits */
			const float *hl = nl > 0 ? p->out + ((size_t)r->n + (size_t)i * nl) * width
						 : sv->hlogits;
			pcg_probs(p->out + (size_t)i * width, width, &r->samp, o, &err);
			if (nl == 0 && mtp_logits(sv->heads, p->hidden + (size_t)i * H, 0, nh,
						  &r->rows, sv->hlogits, &err) < 0) {
				proto_error(rep, p->q->id, PROTO_E_INTERNAL, "%s", err.msg);
				return -1;
			}
			for (int k = 0; k < nh; k++) /* a Llasa+ position's first nh of nl */
				pcg_probs(hl + (size_t)k * width, width, &r->samp,
					  o + (size_t)(1 + k) * width, &err);
		}
		values = sv->hprobs;
		p->t_compute += pcg_now() - t;
	}
	proto_init(rep, PROTO_PROBS, p->q->id);
	proto_probs *o = &rep->probs;
	o->width = width;
	o->f16 = r->f16;
	o->sparse = truncates(&r->samp, width);
	o->values = values;
	o->n_vec = r->n * (1 + nh);
	if (p->q->type == PROTO_PROPOSE) { /* fewer where it stopped */
		o->n_vec = p->step;
		o->n_x = p->step;
		memcpy(o->x, p->x, (size_t)p->step * sizeof *p->x);
	}
	o->n_stats = 1;
	o->stats[0] = p->t_compute;
	return 0;
}

/* Replies to the requests that are done, frees them and the failed ones. */
static void sched_reap(sched *sc)
{
	server *sv = sc->sv;

	for (pending **pp = &sc->head; *pp;) {
		pending *p = *pp;
		if (!p->done && !p->failed) {
			pp = &p->nextp;
			continue;
		}
		int served = 0;
		if (p->done) {
			served = reply_probs(sv, p, sc->rep) == 0;
			reply_pending(sc, p);
		}
		session *x = find(sv, p->r->session);
		if (x && p->started)
			x->busy--;
		if (x && served && p->short_step)
			x->t_replied = pcg_now();
		*pp = p->nextp;
		sc->n--;
		if (served)
			evict(sv, p->r->session);
		pending_put(sc, p);
	}
}

/* Adds p, holding request q, to the pending ones, to start when its
 * session has no earlier one (sched_pass); ping, drop and errors are
 * answered at once. */
static void sched_add(sched *sc, pending *p, const proto_msg *q)
{
	p->q = q;
	p->r = proto_model(q);
	if (p->r == NULL || sc->n >= MAX_PENDING) {
		if (p->r == NULL)
			serve_now(sc->sv, q, sc->rep);
		else /* not when sched_more is heeded */
			proto_error(sc->rep, q->id, PROTO_E_BUSY, "%d requests pending", sc->n);
		reply_pending(sc, p);
		pending_put(sc, p);
		return;
	}
	p->heads = q->type == PROTO_SCORE && q->score.heads > 0 ? q->score.heads : 0;
	pending **pp = &sc->head;
	while (*pp)
		pp = &(*pp)->nextp;
	*pp = p;
	sc->n++;
}

/* A request that arrived on the socket: parsed and added. */
static void sched_take(sched *sc, const net_req *nr)
{
	pcg_err err = { "" };
	pending *p = pending_get(sc);

	if (p == NULL || (p->qbuf == NULL && (p->qbuf = malloc(sizeof *p->qbuf)) == NULL)) {
		pending tmp = { .route_len = nr->route_len, .delim = nr->delim };
		memcpy(tmp.route, nr->route, nr->route_len);
		proto_error(sc->rep, 0, PROTO_E_INTERNAL, "out of memory");
		reply_pending(sc, &tmp);
		pending_free(p);
		return;
	}
	memcpy(p->route, nr->route, nr->route_len);
	p->route_len = nr->route_len;
	p->delim = nr->delim;
	p->t_told = pcg_now();
	if (proto_parse(nr->body, nr->len, p->qbuf, &err) < 0) {
		proto_error(sc->rep, p->qbuf->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
		reply_pending(sc, p);
		pending_put(sc, p);
		return;
	}
	sched_add(sc, p, p->qbuf);
}

/* Every request pending for a second since its client last heard of it
 * gets a "progress" message, so the client's timeout counts from there: a
 * request that waits behind other sessions' work is not taken for a dead
 * server. */
#define KEEPALIVE_S 1.0
static void sched_keepalive(sched *sc)
{
	const double t = pcg_now();
	proto_msg *m = sc->rep;

	for (pending *p = sc->head; p; p = p->nextp) {
		if (p->done || p->failed || t - p->t_told < KEEPALIVE_S)
			continue;
		proto_init(m, PROTO_PROGRESS, p->q->id);
		pcg_err err = { "" };
		net_req r = { .route_len = p->route_len, .delim = p->delim };
		memcpy(r.route, p->route, p->route_len);
		if (proto_pack_buf(m, &sc->buf, &err) == 0)
			net_reply_nowait(sc->sock, &r, sc->buf.data, sc->buf.len, &err);
		p->t_told = t;
	}
}

/* Frees what is pending (it gets no reply) and the pool. */
static void sched_free(sched *sc)
{
	while (sc->head) {
		pending *p = sc->head;
		sc->head = p->nextp;
		pending_free(p);
	}
	while (sc->pool) {
		pending *p = sc->pool;
		sc->pool = p->nextp;
		pending_free(p);
	}
	sc->n = sc->n_pool = 0;
	proto_buf_free(&sc->buf);
}

/* The serving loop is pcg_daemon_run's; these are its callbacks. A
 * request is taken while fewer than MAX_PENDING wait (the rest wait in
 * libzmq); the tick runs the pending ones and waits for requests only
 * when there is no work. */
static int sched_more(pcg_daemon *d)
{
	return ((sched *)d->arg)->n < MAX_PENDING;
}

static void sched_request(pcg_daemon *d, net_req *r)
{
	sched_take(d->arg, r);
}

/* Sessions come back together. A session answered by the last batched
 * pass sends its next step a client's turn later (sampling, a message each
 * way: tenths of a millisecond); the first one back would otherwise start
 * a pass alone, the rest would meet in the next, and the sessions would
 * stay split in two batches, each reading the weights (four LLaSA-1B
 * sessions: 1.56x one, where the batched pass gives 2.73x). So a pass
 * waits while a session answered less than GATHER_SHARE of a pass ago has
 * not come back, never longer than that after the last pass ended, nor
 * than GATHER_MAX_S: at most an eighth of a step lost where a session does
 * not come back (its utterance ended, its client does other work), the
 * weights read once a step where they do. A lone session never waits (it
 * is the one that came back), nor does a request while no batched pass
 * has run. Which requests share a pass does not change a result (each
 * gets the bits it would get alone). Returns the seconds to wait, or 0. */
#define GATHER_SHARE 0.125
#define GATHER_MAX_S 0.010
double modelserver_gather_wait(double now, double pass_end, double pass, const double *replied,
			       const int *pending, int n)
{
	double w = GATHER_SHARE * pass;
	if (w > GATHER_MAX_S)
		w = GATHER_MAX_S;
	if (pass_end <= 0 || now >= pass_end + w)
		return 0;
	for (int i = 0; i < n; i++)
		if (!pending[i] && replied[i] >= pass_end - 1e-9 && now < replied[i] + w)
			return pass_end + w - now;
	return 0;
}

/* modelserver_gather_wait for the sessions the last pass answered. */
static double gather_wait(sched *sc)
{
	server *sv = sc->sv;
	enum { MAX = 64 };
	double replied[MAX];
	int pend[MAX], n = 0;
	const double now = pcg_now();

	if (sc->t_pass_end <= 0 || now >= sc->t_pass_end + GATHER_MAX_S)
		return 0;
	for (int i = 0; i < sv->n && n < MAX; i++) {
		if (sv->s[i].t_replied < sc->t_pass_end - 1e-9)
			continue;
		int here = 0;
		for (pending *p = sc->head; p && !here; p = p->nextp)
			here = p->r->session == sv->s[i].id;
		replied[n] = sv->s[i].t_replied;
		pend[n++] = here;
	}
	return modelserver_gather_wait(now, sc->t_pass_end, sc->t_pass, replied, pend, n);
}

static int sched_tick(pcg_daemon *d)
{
	sched *sc = d->arg;

	if (sc->head) {
		double w = sc->no_gather ? 0 : gather_wait(sc);
		if (w > 0) { /* poll again: at once below two milliseconds */
			if (sc->t_pass_end != sc->t_waited) {
				sc->t_waited = sc->t_pass_end;
				sc->waits++;
			}
			return w < 0.002 ? 0 : 1;
		}
		sched_keepalive(sc);
		sched_pass(sc);
		sched_reap(sc);
	}
	return sc->head ? 0 : 100;
}

static int sched_start(pcg_daemon *d, pcg_err *err)
{
	sched *sc = d->arg;

	(void)err;
	sc->sock = d->sock;
	const char *g = getenv("PCG_GATHER");
	sc->no_gather = g && strcmp(g, "0") == 0;
	logf_(sc->sv, "serving %s (%d layers, %d MTP heads) on %s", sc->model_dir,
	      llama_n_layers(sc->sv->model), n_heads(sc->sv),
	      d->url);
	/* which kernels run: the same words as bench-forward's and as
	 * PCG_MATMUL_ISA / PCG_QPATH take (pcg-up shows this line) */
	if (sc->device && strncmp(sc->device, "cuda", 4) == 0)
		logf_(sc->sv, "kernels: %s", sc->device);
	else
		logf_(sc->sv, "kernels: float %s, quantised %s", pcg_matmul_isa(),
		      pcg_qmatmul_path());
	pcg_blas_warn(sc->sv->prog);
	return 0;
}

static void sched_done(pcg_daemon *d)
{
	sched *sc = d->arg;

	logf_(sc->sv, "stopping: %lu served, %lu errors, %lu dropped, %lu evicted; %lu batched "
	      "passes of %.2f requests on average, %lu waited for sessions to come back; "
	      "%lu prompts began with another's", sc->nc.served, sc->nc.errors,
	      d->counts.dropped, sc->sv->evicted, sc->batches,
	      sc->batches ? (double)sc->batched_rows / sc->batches : 0.0, sc->waits,
	      sc->sv->shared);
	sched_free(sc); /* stopping: what is pending gets no reply */
}

/* Loads the model (and MTP heads beside it) into sv. */
static int server_open(server *sv, const ms_config *cfg, pcg_err *err)
{
	memset(sv, 0, sizeof *sv);
	sv->prog = cfg->prog;
	llama_open_opts lo = { .layers = cfg->n_layers ? cfg->layers : NULL,
			       .n_layers = cfg->n_layers, .device = cfg->device,
			       .no_mtp = cfg->draft };
	sv->model = llama_open(cfg->model_dir, &lo, err);
	if (sv->model == NULL)
		return -1;
	sv->kv_mem = cfg->kv_mem;
	/* MTP heads beside the model (a draft made of a layer subset has none:
	 * they read the whole target's last state). */
	char hpath[4200];
	snprintf(hpath, sizeof hpath, "%s/%s", cfg->model_dir, MTP_FILE_NAME);
	sv->layer_heads = llama_n_mtp(sv->model); /* a Llasa+ checkpoint's: loaded with it */
	if (sv->layer_heads > 0 ||
	    (cfg->n_layers == 0 && access(hpath, F_OK) == 0)) {
		if (sv->layer_heads == 0 && (sv->heads = mtp_open(sv->model, hpath, err)) == NULL)
			return -1;
		const int nh = n_heads(sv), V = llama_get_config(sv->model)->vocab;
		sv->hlogits = sv->layer_heads ? NULL : malloc((size_t)nh * V * sizeof(float));
		sv->hprobs = malloc((size_t)PROTO_MAX_N * (1 + nh) * V * sizeof(float));
		if ((!sv->layer_heads && !sv->hlogits) || !sv->hprobs)
			return pcg_fail(err, "out of memory for %d MTP heads", nh);
	}
	return 0;
}

static void server_close(server *sv)
{
	while (sv->n > 0)
		drop(sv, &sv->s[0]);
	llama_kv_free(&sv->spare.kv);
	free(sv->spare.tokens);
	free(sv->s);
	free(sv->hlogits);
	free(sv->hprobs);
	mtp_close(&sv->heads);
	llama_close(&sv->model);
}

/* The in-process server: the scheduler without a socket, one request at a
 * time. */
struct ms_local {
	server sv;
	sched sc;
};

ms_local *modelserver_local(const ms_config *cfg, pcg_err *err)
{
	ms_local *m = calloc(1, sizeof *m);

	if (m == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	if (server_open(&m->sv, cfg, err) < 0) {
		server_close(&m->sv);
		free(m);
		return NULL;
	}
	m->sc.sv = &m->sv;
	m->sc.model_dir = cfg->model_dir;
	return m;
}

/* As the serving loop: the request is taken, passes run until it is done
 * (or failed), and its reply is built into rep. */
void modelserver_handle(ms_local *m, const proto_msg *q, proto_msg *rep)
{
	sched *sc = &m->sc;
	pending *p = pending_get(sc);

	sc->rep = rep;
	if (p == NULL) {
		proto_error(rep, q->id, PROTO_E_INTERNAL, "out of memory");
		return;
	}
	sched_add(sc, p, q);
	while (sc->head) {
		sched_pass(sc);
		sched_reap(sc);
	}
	sc->rep = NULL;
	if (rep->type != PROTO_PROBS)
		return;
	/* as proto_vector reads a parsed reply: every vector dense, f32 */
	proto_probs *o = &rep->probs;
	o->f16 = 0;
	o->sparse = 0;
	o->n_nnz = o->n_vec;
	for (int i = 0; i < o->n_vec; i++) {
		o->nnz[i] = o->width;
		o->voff[i] = (size_t)i * o->width;
		o->ioff[i] = 0;
	}
}

void modelserver_local_free(ms_local **mp)
{
	if (mp == NULL || *mp == NULL)
		return;
	sched_free(&(*mp)->sc);
	server_close(&(*mp)->sv);
	free(*mp);
	*mp = NULL;
}

int modelserver_serve(void *ctx, const ms_config *cfg, volatile sig_atomic_t *stop_flag)
{
	pcg_err err = { "" };
	server sv;
	sched sc = { .sv = &sv, .model_dir = cfg->model_dir, .device = cfg->device };
	pcg_daemon d = { .prog = cfg->prog, .url = cfg->listen_url, .ctx = ctx,
			 .stop = stop_flag, .arg = &sc, .start = sched_start, .more = sched_more,
			 .request = sched_request, .tick = sched_tick, .done = sched_done };
	int rc = 1;

	if (server_open(&sv, cfg, &err) == 0 && (sc.rep = calloc(1, sizeof *sc.rep)) == NULL)
		pcg_fail(&err, "out of memory");
	if (sc.rep != NULL)
		rc = pcg_daemon_run(&d);
	else
		fprintf(stderr, "%s: %s\n", cfg->prog, err.msg);
	free(sc.rep);
	sched_free(&sc);
	server_close(&sv);
	return rc;
}

int modelserver_parse_layers(const char *s, int *layers, int max, pcg_err *err)
{
	int n = 0;

	while (s && *s) {
		char *end;
		long l = strtol(s, &end, 10);
		if (end == s || l < 0 || l > 100000 || (*end && *end != ',') || n == max)
			return pcg_fail(err, "'%s' is not a comma-separated list of layers", s);
		layers[n++] = (int)l;
		s = *end ? end + 1 : end;
	}
	return n;
}

static const char *model_dir, *listen_url, *layers_s, *curve_key, *curve_allow, *device;
static int threads;
static long long kv_mem;

int modelserver_main(int argc, char **argv, ms_role role)
{
	const char *prog = role == MS_DRAFT ? "draftd" : "targetd";
	const pcg_opt opts[] = {
		{ "model", PCG_OPT_STR, &model_dir, NULL, 1, 0, "PATH", "model directory or GGUF file" },
		{ "listen", PCG_OPT_STR, &listen_url,
		  role == MS_DRAFT ? "tcp://127.0.0.1:7601" : "tcp://127.0.0.1:7602", 1, 0, "URL",
		  "endpoint to bind (inproc://, ipc://PATH, tcp://127.0.0.1:PORT)" },
		{ "layers", PCG_OPT_STR, &layers_s, NULL, 1, 0, "LIST",
		  "serve only these layers of the checkpoint, e.g. 0,1,15 (a draft)" },
		{ "kv-mem", PCG_OPT_SIZE, &kv_mem, "2G", 1 << 20, 1e15, "BYTES",
		  "KV cache budget; least recently used sessions are evicted beyond it" },
		{ "threads", PCG_OPT_INT, &threads, "0", 0, 1024, "N", "threads (0: all cores)" },
		{ "device", PCG_OPT_STR, &device, "cpu", 1, 0, "DEV",
		  "where the model runs: cpu, cuda or cuda:N" },
		{ "curve-key", PCG_OPT_STR, &curve_key, NULL, 1, 0, "FILE",
		  "this server's CURVE keypair (pcg-keygen); needed for tcp beyond loopback" },
		{ "curve-allow", PCG_OPT_STR, &curve_allow, NULL, 1, 0, "FILE",
		  "public keys of the clients let in (one per line)" },
		{ NULL },
	};
	const char *synopsis = "--model DIR [--listen URL] [--layers LIST] [--kv-mem BYTES] [--threads N] "
			       "[--device DEV] [--curve-key FILE --curve-allow FILE]";
	pcg_err err = { "" };
	int layers[1024], n_layers;

	pcg_daemon_openmp(argv); /* lib/serve/service.h says why */
	int first = pcg_opts_parse(opts, argc, argv, &err);
	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, synopsis, opts);
		return 0;
	}
	if (first < 0 || first != argc || model_dir == NULL) {
		fprintf(stderr, "%s: %s\n", prog, first < 0 ? err.msg
			: first != argc ? "unexpected argument" : "--model DIR is required");
		pcg_opts_usage(stderr, prog, synopsis, opts);
		return 2;
	}
	if ((n_layers = modelserver_parse_layers(layers_s, layers, 1024, &err)) < 0) {
		fprintf(stderr, "%s: --layers: %s\n", prog, err.msg);
		return 2;
	}
	pcg_device dev;
	if (pcg_device_parse(device, &dev, &err) < 0) {
		fprintf(stderr, "%s: --device: %s\n", prog, err.msg);
		return 2;
	}
	if (pcg_device_check(dev, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return 1;
	}
	if (net_curve_setup(curve_key, curve_allow, NULL, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return 1;
	}
	if (net_endpoint_ok(listen_url, 1, &err) < 0) {
		fprintf(stderr, "%s: --listen: %s\n", prog, err.msg);
		return 2;
	}
	pcg_set_threads(threads);

	ms_config cfg = { .prog = prog, .model_dir = model_dir, .listen_url = listen_url,
			  .layers = layers, .n_layers = n_layers, .kv_mem = kv_mem, .device = device,
			  .draft = role == MS_DRAFT };
	return modelserver_serve(NULL, &cfg, &pcg_daemon_stop);
}
