/* modelserver.c: draftd and targetd (see modelserver.h). One loop: take
 * every request that waits, advance them all by one batched pass of the
 * model, reply to those that are done; signal handlers only set a flag. */
#include "modelserver.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "clock.h"
#include "costmodel.h"
#include "model.h"
#include "net.h"
#include "device.h"
#include "opts.h"
#include "proto.h"
#include "rng.h"
#include "mtp.h"
#include "sampling.h"
#include "service.h"

typedef struct session {
	uint64_t id;
	llama_kv *kv;
	int32_t *tokens; /* the ids in the cache, so a resent prefix is not recomputed */
	int cap;
	uint64_t last_use;
	int busy;        /* requests of it running: never evicted */
} session;

typedef struct server {
	const char *prog;
	llama_model *model;
	session *s;
	int n, cap;
	uint64_t clock;
	long long kv_mem;
	float *logits, *probs; /* PROTO_MAX_N x vocab */
	unsigned long evicted;
	mtp_heads *heads;      /* the model directory's mtp.safetensors, or NULL */
	float *hidden;         /* PROTO_MAX_N x hidden: final states of a score */
	float *hprobs;         /* PROTO_MAX_N x (1 + heads) x vocab, with heads */
	double step, slope;    /* measured at the first ping (lib/costmodel): told in pongs */
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

/* Brings x to pos tokens, then appends toks[0..n), reusing cached positions
 * whose ids match, and computes the last n_out positions' logits into
 * sv->logits, or with samp their probabilities into out (computed where the
 * model runs: on a GPU only probabilities come back). */
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
	if (llama_kv_truncate(x->kv, keep, err) < 0)
		return -1;
	if (keep + n - i + more > x->cap) {
		int cap = (keep + n - i + more) * 2;
		int32_t *t = realloc(x->tokens, (size_t)cap * sizeof *t);
		if (t == NULL)
			return pcg_fail(err, "out of memory");
		x->tokens = t;
		x->cap = cap;
	}
	return i;
}

static int extend(server *sv, session *x, int pos, const int32_t *toks, int n, int n_out,
		  const llama_rows *rows, const pcg_sampling *samp, float *out, float *hidden,
		  pcg_err *err)
{
	const int i = prepare(x, pos, toks, n, n_out, 0, err), keep = llama_kv_len(x->kv);

	if (i < 0)
		return -1;
	if ((samp ? llama_forward_probs(sv->model, x->kv, (const int *)toks + i, n - i, n_out,
					rows, samp, out, hidden, err)
		  : llama_forward_hidden(sv->model, x->kv, (const int *)toks + i, n - i, n_out,
					 rows, sv->logits, hidden, err)) < 0) {
		llama_kv_truncate(x->kv, keep, NULL);
		return -1;
	}
	memcpy(x->tokens + keep, toks + i, (size_t)(n - i) * sizeof *toks);
	return 0;
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

/* A propose's forced tokens must be in the vocabulary. */
static int forced_ok(const proto_msg *q, int vocab, proto_msg *rep)
{
	const proto_propose *p = &q->propose;

	for (int k = 0; q->type == PROTO_PROPOSE && k < p->n_forced; k++)
		if (p->forced[k] >= vocab) {
			proto_error(rep, q->id, PROTO_E_BAD_REQUEST,
				    "field 'forced': token %d out of range [0, %d)", p->forced[k],
				    vocab);
			return -1;
		}
	return 0;
}

/* The rows of a request must lie in the vocabulary. */
static int rows_ok(const proto_msg *q, const llama_rows *rows, int vocab, proto_msg *rep)
{
	for (int i = 0; i < rows->n; i++)
		if (rows->end[i] > vocab) {
			proto_error(rep, q->id, PROTO_E_BAD_REQUEST,
				    "field 'rows': [%d, %d) beyond the vocabulary of %d",
				    rows->begin[i], rows->end[i], vocab);
			return -1;
		}
	return 0;
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

/* Serves one parsed request into rep; errors become error replies. */
static void serve(server *sv, const proto_msg *q, proto_msg *rep)
{
	pcg_err err = { "" };
	const llama_config *c = llama_get_config(sv->model);
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
			if (cost_measure(sv->model, &top, &sv->step, &sv->slope, &err) < 0)
				sv->step = sv->slope = 0;
			sv->measured = 1;
		}
		proto_init(rep, PROTO_PONG, q->id);
		snprintf(rep->pong.msg, sizeof rep->pong.msg,
			 "%s layers=%d vocab=%d hidden=%d heads=%d sessions=%d step_ms=%.4f "
			 "slope=%.4f", sv->prog, llama_n_layers(sv->model), c->vocab, c->hidden,
			 sv->heads ? mtp_n_heads(sv->heads) : 0, sv->n, sv->step * 1e3, sv->slope);
		return;
	case PROTO_DROP:
		if ((x = find(sv, q->drop.session)) != NULL)
			drop(sv, x);
		proto_init(rep, PROTO_OK, q->id);
		return;
	case PROTO_PROPOSE:
	case PROTO_SCORE:
		break;
	default:
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "a server does not take '%s'",
			    proto_type_name(q->type));
		return;
	}
	const proto_model_req *r = proto_model(q);
	if (rows_ok(q, &r->rows, c->vocab, rep) < 0)
		return;
	const int width = llama_rows_count(sv->model, &r->rows);
	if (forced_ok(q, c->vocab, rep) < 0)
		return;
	x = find(sv, r->session);
	if (x == NULL || r->pos > llama_kv_len(x->kv)) {
		if (r->pos != 0) {
			proto_error(rep, q->id, PROTO_E_UNKNOWN_SESSION,
				    "session %llu: not held up to position %d; resend from 0",
				    (unsigned long long)r->session, r->pos);
			return;
		}
		if (x == NULL && (x = create(sv, r->session, &err)) == NULL) {
			proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
			return;
		}
	}
	x->last_use = ++sv->clock;

	const int n_out = q->type == PROTO_SCORE ? r->n : 1;
	const int nh = q->type == PROTO_SCORE ? q->score.heads : 0;
	if (nh > 0 && (sv->heads == NULL || nh > mtp_n_heads(sv->heads))) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "field 'heads': %d MTP heads asked, "
			    "the model has %d (%s)", nh, sv->heads ? mtp_n_heads(sv->heads) : 0,
			    MTP_FILE_NAME);
		return;
	}
	/* Probabilities straight from the pass, except for a score with MTP
	 * heads, which tempers the heads' logits alike on the host. */
	if (extend(sv, x, r->pos, r->append, r->n_append, n_out, &r->rows,
		   nh > 0 ? NULL : &r->samp, sv->probs, nh > 0 ? sv->hidden : NULL, &err) < 0) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
		return;
	}
	proto_init(rep, PROTO_PROBS, q->id);
	proto_probs *o = &rep->probs;
	o->width = width;
	o->f16 = r->f16;
	o->sparse = truncates(&r->samp, width);
	o->values = sv->probs;
	if (q->type == PROTO_SCORE && nh == 0) {
		o->n_vec = r->n;
		return;
	}
	if (q->type == PROTO_SCORE) {
		/* Per position: q, then the heads' distributions, tempered alike. */
		const int H = llama_get_config(sv->model)->hidden;
		float *hl = sv->probs; /* the heads' logits: nh x width of scratch */
		for (int i = 0; i < r->n; i++) {
			float *out = sv->hprobs + (size_t)i * (1 + nh) * width;
			pcg_probs(sv->logits + (size_t)i * width, width, &r->samp, out, &err);
			if (mtp_logits(sv->heads, sv->hidden + (size_t)i * H, 0, nh, &r->rows, hl,
				       &err) < 0) {
				proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
				return;
			}
			for (int k = 0; k < nh; k++)
				pcg_probs(hl + (size_t)k * width, width, &r->samp,
					  out + (size_t)(1 + k) * width, &err);
		}
		o->values = sv->hprobs;
		o->n_vec = r->n * (1 + nh);
		return;
	}
	/* propose: x_i ~ p_i, fed back to get p_{i+1}; x_n is not fed. */
	pcg_rng rng;
	pcg_rng_init(&rng, q->propose.seed, 0);
	for (int i = 0; i < r->n; i++) {
		float *p = sv->probs + (size_t)i * width;
		if (i > 0) { /* p_0 came with the appended tokens */
			int32_t feed[1 + PROTO_MAX_N];
			const int nf = propose_feed(&q->propose, o->x, i, feed);
			if (extend(sv, x, llama_kv_len(x->kv), feed, nf, 1, &r->rows, &r->samp, p,
				   NULL, &err) < 0) {
				proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
				return;
			}
		}
		int idx = pcg_sample(p, width, pcg_rng_uniform(&rng));
		o->x[o->n_x++] = row_token(&r->rows, idx < 0 ? 0 : idx);
	}
	o->n_vec = r->n;
}

/* net_serve's handler: serve, time the compute, evict beyond the budget. */
static void handle(void *ctx, const proto_msg *q, proto_msg *rep)
{
	server *sv = ctx;
	double t0 = pcg_now();

	serve(sv, q, rep);
	if (rep->type == PROTO_PROBS) {
		rep->probs.n_stats = 1;
		rep->probs.stats[0] = pcg_now() - t0;
	}
	if (rep->type == PROTO_PROBS || rep->type == PROTO_OK)
		evict(sv, q->type == PROTO_DROP ? q->drop.session : proto_model(q)->session);
}

/* ------------------------------------------------------------ batching
 *
 * The serving loop batches: it takes every request that is waiting, and
 * each pass of the model advances all of them by one step at once (a
 * score: its block; a propose: one drafted token), so the weights are read
 * once for all sessions (lib/model.h llama_forward_batch; each session
 * keeps its own cache and attention). A step of at most PCG_MATMUL_SMALL
 * positions joins the batch, and gets the bits it would get alone. A
 * longer span (a prompt's prefill) runs alone in pieces of PREFILL_CHUNK
 * positions, one piece per pass, between the batches, so it never stalls
 * the other sessions' rounds for more than a piece. The pieces are cut by
 * the request alone (never by the load), so a session's results do not
 * depend on what else runs. A lone request never waits: a pass starts as
 * soon as anything is ready. */

#define PREFILL_CHUNK 32
#define MAX_PENDING 256

typedef struct pending {
	unsigned char route[256];  /* the client's */
	size_t route_len;
	int delim;
	proto_msg *q;              /* the request, parsed (ids copied) */
	const proto_model_req *r;  /* its propose or score part */
	int next;                  /* r->append[next..] are still to run */
	int step;                  /* propose: tokens drafted so far */
	int width;
	float *out;                /* n x width outputs */
	int32_t x[PROTO_MAX_N];    /* propose: the drafted ids */
	int32_t feed[1 + PROTO_MAX_N]; /* propose: what the next step feeds */
	int n_feed;
	pcg_rng rng;
	double t_compute;
	double t_told;             /* when the client last heard of it */
	int started;               /* its session brought to its pos (pending_start) */
	int done, failed;
	struct pending *nextp;
} pending;

typedef struct sched {
	server *sv;
	const char *model_dir;
	void *sock;
	pending *head;
	int n;
	proto_msg *rep;
	proto_buf buf;
	net_counts nc;
	unsigned long batches, batched_rows;
} sched;

static int same_rows(const llama_rows *a, const llama_rows *b)
{
	if (a->n != b->n)
		return 0;
	for (int i = 0; i < a->n; i++) /* the ranges beyond n are not set */
		if (a->begin[i] != b->begin[i] || a->end[i] != b->end[i])
			return 0;
	return 1;
}

static int same_work(const proto_model_req *a, const proto_model_req *b)
{
	return same_rows(&a->rows, &b->rows) &&
	       a->samp.temperature == b->samp.temperature && a->samp.top_k == b->samp.top_k &&
	       a->samp.top_p == b->samp.top_p;
}

static void reply_pending(sched *sc, pending *p, const proto_msg *rep)
{
	pcg_err err = { "" };
	net_req r = { .route_len = p->route_len, .delim = p->delim };

	memcpy(r.route, p->route, p->route_len);
	if (rep->type == PROTO_ERROR) {
		sc->nc.errors++;
		fprintf(stderr, "%s: request %llu: %s: %s\n", sc->sv->prog,
			(unsigned long long)rep->id, rep->error.code, rep->error.msg);
	} else {
		sc->nc.served++;
	}
	if (proto_pack_buf(rep, &sc->buf, &err) < 0 ||
	    net_reply_nowait(sc->sock, &r, sc->buf.data, sc->buf.len, &err) < 0)
		fprintf(stderr, "%s: %s\n", sc->sv->prog, err.msg);
}

static void pending_free(pending *p)
{
	if (p == NULL)
		return;
	free(p->q);
	free(p->out);
	free(p);
}

/* The session of p, made ready: its cache brought to the request's pos
 * with the cached positions that match kept. Fills an error reply and
 * returns -1 when the request cannot run. */
static int pending_start(server *sv, pending *p, proto_msg *rep)
{
	pcg_err err = { "" };
	const proto_msg *q = p->q;
	const proto_model_req *r = p->r;
	const llama_config *c = llama_get_config(sv->model);

	if (rows_ok(q, &r->rows, c->vocab, rep) < 0)
		return -1;
	for (int i = 0; i < r->n_append; i++)
		if (r->append[i] < 0 || r->append[i] >= c->vocab) {
			proto_error(rep, q->id, PROTO_E_BAD_REQUEST,
				    "token %d at index %d out of range [0, %d)", r->append[i], i,
				    c->vocab);
			return -1;
		}
	if (pcg_sampling_check(&r->samp, &err) < 0) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
		return -1;
	}
	if (forced_ok(q, c->vocab, rep) < 0)
		return -1;
	if (r->n < 1) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "field 'n': %d; a %s needs 1 to %d",
			    r->n, proto_type_name(q->type), PROTO_MAX_N);
		return -1;
	}
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
	/* room for a propose's drafted and forced tokens too */
	const int n_forced = q->type == PROTO_PROPOSE ? q->propose.n_forced : 0;
	const int i = prepare(x, r->pos, r->append, r->n_append,
			      q->type == PROTO_SCORE ? r->n : 1, PROTO_MAX_N + n_forced, &err);
	if (i < 0) { /* out of memory: pos was checked above */
		proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
		return -1;
	}
	p->next = i;
	p->width = llama_rows_count(sv->model, &r->rows);
	p->out = malloc((size_t)r->n * p->width * sizeof *p->out);
	if (p->out == NULL) {
		proto_error(rep, q->id, PROTO_E_INTERNAL, "out of memory");
		return -1;
	}
	if (q->type == PROTO_PROPOSE)
		pcg_rng_init(&p->rng, q->propose.seed, 0);
	return 0;
}

/* What p runs next: tokens, count, outputs (and where they go). */
static int pending_span(const pending *p, const int32_t **toks, int *n_out, float **out)
{
	const proto_model_req *r = p->r;
	const int propose = p->q->type == PROTO_PROPOSE;

	if (propose && p->step > 0) {
		*toks = p->feed;
		*n_out = 1;
		*out = p->out + (size_t)p->step * p->width;
		return p->n_feed;
	}
	const int left = r->n_append - p->next, want = propose ? 1 : r->n;
	int n = left;
	if (left > PREFILL_CHUNK) /* the last piece holds every output */
		n = left - want < PREFILL_CHUNK ? left - want : PREFILL_CHUNK;
	*toks = r->append + p->next;
	*n_out = n == left ? want : 0;
	*out = p->out;
	return n;
}

/* After a step ran: the cache's ids, the next step, or done. */
static void pending_advance(server *sv, pending *p, const int32_t *toks, int n, int n_out)
{
	session *x = find(sv, p->r->session);
	const int len = llama_kv_len(x->kv);

	memcpy(x->tokens + len - n, toks, (size_t)n * sizeof *toks);
	if (!(p->q->type == PROTO_PROPOSE && p->step > 0))
		p->next += n;
	if (n_out == 0)
		return;
	if (p->q->type == PROTO_SCORE) {
		p->done = 1;
		return;
	}
	/* propose: x_i ~ p_i, fed back to get p_{i+1}; x_n is not fed */
	const float *pr = p->out + (size_t)p->step * p->width;
	int idx = pcg_sample(pr, p->width, pcg_rng_uniform(&p->rng));
	p->x[p->step] = row_token(&p->r->rows, idx < 0 ? 0 : idx);
	if (++p->step == p->r->n)
		p->done = 1;
	else
		p->n_feed = propose_feed(&p->q->propose, p->x, p->step, p->feed);
}

static void pending_fail(sched *sc, pending *p, const char *msg)
{
	proto_error(sc->rep, p->q->id, PROTO_E_INTERNAL, "%s", msg);
	reply_pending(sc, p, sc->rep);
	p->failed = 1;
}

/* One pass: a piece of one long span, then one batched step of every
 * request whose step is short, grouped by rows and sampling. */
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
			reply_pending(sc, p, sc->rep);
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
		const int32_t *toks;
		int n_out;
		float *out;
		if (!p->started || p->done || p->failed)
			continue;
		int n = pending_span(p, &toks, &n_out, &out);
		if (n <= PCG_MATMUL_SMALL) {
			ready[n_ready++] = p;
			continue;
		}
		if (piece)
			continue;
		piece = 1;
		session *x = find(sv, p->r->session);
		double t = pcg_now();
		if (x == NULL) {
			pending_fail(sc, p, "the session was dropped");
			continue;
		}
		llama_seq s = { x->kv, toks, n, n_out, n_out ? out : NULL, NULL };
		if (llama_forward_batch(sv->model, &s, 1, &p->r->rows, &p->r->samp, &err) < 0) {
			pending_fail(sc, p, err.msg);
			continue;
		}
		p->t_compute += pcg_now() - t;
		pending_advance(sv, p, toks, n, n_out);
	}
	/* the short steps, batched */
	for (int a = 0; a < n_ready; a++) {
		if (taken[a])
			continue;
		int nb = 0;
		for (int b = a; b < n_ready; b++) {
			if (taken[b] || !same_work(ready[a]->r, ready[b]->r))
				continue;
			pending *p = ready[b];
			session *x = find(sv, p->r->session);
			taken[b] = 1;
			if (x == NULL) {
				pending_fail(sc, p, "the session was dropped");
				continue;
			}
			const int32_t *toks;
			int n_out;
			float *out;
			int n = pending_span(p, &toks, &n_out, &out);
			seqs[nb] = (llama_seq){ x->kv, toks, n, n_out, n_out ? out : NULL, NULL };
			who[nb++] = p;
		}
		if (nb == 0)
			continue;
		double t = pcg_now();
		int rc = llama_forward_batch(sv->model, seqs, nb, &ready[a]->r->rows,
					     &ready[a]->r->samp, &err);
		if (rc < 0 && nb > 1) { /* find the one that fails: the rest go on alone */
			for (int i = 0; i < nb; i++)
				if (llama_forward_batch(sv->model, &seqs[i], 1, &who[i]->r->rows,
							&who[i]->r->samp, &err) < 0) {
					pending_fail(sc, who[i], err.msg);
				} else {
					pending_advance(sv, who[i], seqs[i].tokens, seqs[i].n,
							seqs[i].n_out);
				}
			continue;
		}
		if (rc < 0) {
			pending_fail(sc, who[0], err.msg);
			continue;
		}
		const double dt = pcg_now() - t;
		sc->batches++;
		sc->batched_rows += (unsigned long)nb;
		for (int i = 0; i < nb; i++) {
			who[i]->t_compute += dt;
			pending_advance(sv, who[i], seqs[i].tokens, seqs[i].n, seqs[i].n_out);
		}
	}
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
		if (p->done) {
			proto_init(sc->rep, PROTO_PROBS, p->q->id);
			proto_probs *o = &sc->rep->probs;
			o->width = p->width;
			o->f16 = p->r->f16;
			o->sparse = truncates(&p->r->samp, p->width);
			o->values = p->out;
			o->n_vec = p->r->n;
			if (p->q->type == PROTO_PROPOSE) {
				o->n_x = p->r->n;
				memcpy(o->x, p->x, (size_t)p->r->n * sizeof *p->x);
			}
			o->n_stats = 1;
			o->stats[0] = p->t_compute;
			reply_pending(sc, p, sc->rep);
		}
		session *x = find(sv, p->r->session);
		if (x && p->started)
			x->busy--;
		*pp = p->nextp;
		sc->n--;
		if (p->done)
			evict(sv, p->r->session);
		pending_free(p);
	}
}

/* A request that arrived: served at once (ping, drop, MTP scores, errors)
 * or added to the pending ones, to start when its session has no earlier
 * one (sched_pass). */
static void sched_take(sched *sc, const net_req *nr)
{
	server *sv = sc->sv;
	pcg_err err = { "" };
	proto_msg *rep = sc->rep;
	pending *p = calloc(1, sizeof *p);

	if (p == NULL || (p->q = malloc(sizeof *p->q)) == NULL) {
		free(p);
		p = NULL;
		proto_error(rep, 0, PROTO_E_INTERNAL, "out of memory");
		goto reply;
	}
	memcpy(p->route, nr->route, nr->route_len);
	p->route_len = nr->route_len;
	p->delim = nr->delim;
	p->t_told = pcg_now();
	if (proto_parse(nr->body, nr->len, p->q, &err) < 0) {
		proto_error(rep, p->q->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
		goto reply;
	}
	const proto_msg *q = p->q;
	p->r = proto_model(q);
	if (p->r == NULL || (q->type == PROTO_SCORE && q->score.heads > 0) ||
	    sc->n >= MAX_PENDING) {
		handle(sv, q, rep); /* at once, alone */
		goto reply;
	}
	pending **pp = &sc->head;
	while (*pp)
		pp = &(*pp)->nextp;
	*pp = p;
	sc->n++;
	return;
reply:
	if (p) {
		reply_pending(sc, p, rep);
		pending_free(p);
	}
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

static int sched_tick(pcg_daemon *d)
{
	sched *sc = d->arg;

	if (sc->head) {
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
	logf_(sc->sv, "serving %s (%d layers, %d MTP heads) on %s", sc->model_dir,
	      llama_n_layers(sc->sv->model), sc->sv->heads ? mtp_n_heads(sc->sv->heads) : 0,
	      d->url);
	return 0;
}

static void sched_done(pcg_daemon *d)
{
	sched *sc = d->arg;

	logf_(sc->sv, "stopping: %lu served, %lu errors, %lu dropped, %lu evicted; %lu batched "
	      "passes of %.2f requests on average", sc->nc.served, sc->nc.errors,
	      d->counts.dropped, sc->sv->evicted, sc->batches,
	      sc->batches ? (double)sc->batched_rows / sc->batches : 0.0);
	while (sc->head) { /* stopping: what is pending gets no reply */
		pending *p = sc->head;
		sc->head = p->nextp;
		pending_free(p);
	}
}

/* Loads the model (and MTP heads beside it) into sv. */
static int server_open(server *sv, const ms_config *cfg, pcg_err *err)
{
	memset(sv, 0, sizeof *sv);
	sv->prog = cfg->prog;
	llama_open_opts lo = { .layers = cfg->n_layers ? cfg->layers : NULL,
			       .n_layers = cfg->n_layers, .device = cfg->device };
	sv->model = llama_open(cfg->model_dir, &lo, err);
	if (sv->model == NULL)
		return -1;
	sv->kv_mem = cfg->kv_mem;
	const int V = llama_get_config(sv->model)->vocab;

	sv->logits = malloc((size_t)PROTO_MAX_N * V * sizeof(float));
	sv->probs = malloc((size_t)PROTO_MAX_N * V * sizeof(float));
	if (!sv->logits || !sv->probs)
		return pcg_fail(err, "out of memory");
	/* MTP heads beside the model (a draft made of a layer subset has none:
	 * they read the whole target's last state). */
	char hpath[4200];
	snprintf(hpath, sizeof hpath, "%s/%s", cfg->model_dir, MTP_FILE_NAME);
	if (cfg->n_layers == 0 && access(hpath, F_OK) == 0) {
		if ((sv->heads = mtp_open(sv->model, hpath, err)) == NULL)
			return -1;
		const int nh = mtp_n_heads(sv->heads), H = llama_get_config(sv->model)->hidden;
		sv->hidden = malloc((size_t)PROTO_MAX_N * H * sizeof(float));
		sv->hprobs = malloc((size_t)PROTO_MAX_N * (1 + nh) * V * sizeof(float));
		if (!sv->hidden || !sv->hprobs)
			return pcg_fail(err, "out of memory for %d MTP heads", nh);
	}
	return 0;
}

static void server_close(server *sv)
{
	while (sv->n > 0)
		drop(sv, &sv->s[0]);
	free(sv->s);
	free(sv->logits);
	free(sv->probs);
	free(sv->hidden);
	free(sv->hprobs);
	mtp_close(&sv->heads);
	llama_close(&sv->model);
}

struct ms_local {
	server sv;
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
	return m;
}

void modelserver_handle(ms_local *m, const proto_msg *q, proto_msg *rep)
{
	handle(&m->sv, q, rep);
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
	server_close(&(*mp)->sv);
	free(*mp);
	*mp = NULL;
}

int modelserver_serve(void *ctx, const ms_config *cfg, volatile sig_atomic_t *stop_flag)
{
	pcg_err err = { "" };
	server sv;
	sched sc = { .sv = &sv, .model_dir = cfg->model_dir };
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
	proto_buf_free(&sc.buf);
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

	pcg_daemon_passive_openmp(argv); /* lib/service.h says why */
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

	ms_config cfg = { prog, model_dir, listen_url, layers, n_layers, kv_mem, device };
	return modelserver_serve(NULL, &cfg, &pcg_daemon_stop);
}
