/* costs.c: the verifier learns the cost model's terms (lib/speculate/costmodel.h)
 * from the servers, once, before the first session: what targetd says of
 * its step at a ping, and the time of a few scores and proposes of its
 * own, on sessions that are dropped after. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "client.h"
#include "clock.h"
#include "costmodel.h"
#include "verifier.h"

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

/* A client of learn_costs's for the stage at url: timeout_ms per try. */
static pcg_client *calib_client(verifier *v, const char *u, int timeout_ms, int tries,
				pcg_err *err)
{
	pcg_client *cl = client_new(v->ctx, u, timeout_ms, tries, err);

	if (cl != NULL && !strncmp(u, "ipc://", 6))
		client_set_alive(cl, stage_listening, (void *)u);
	return cl;
}

/* The cost model's terms (lib/speculate/costmodel.c), before the first session: the
 * step and block slope targetd measured at its first ping, the draft's
 * step, MTP heads' cost, the round trip of a score beyond its compute and
 * the overlap of the two servers at work at once. Once learnt they stay
 * fixed, so that --lookahead auto chooses the same for the same tokens in
 * every session (--costs gives them instead). The pings give up after a
 * second (a pipeline without a draft server must not wait for one); the
 * measures that follow wait as long as a round would (--timeout-ms,
 * --tries, --ms-per-position), so a slow target is measured too. When the
 * target did not answer, this session has the defaults (SPEC_COSTS) and the
 * next one tries again, up to LEARN_TRIES sessions. The target's number of
 * MTP heads is learnt with its ping, also with --costs. */
enum { LEARN_TRIES = 3 };
void learn_costs(verifier *v)
{
	pcg_err err = { "" };
	cost_terms c = { 0 };
	pcg_client *cl[2] = { NULL, NULL };
	proto_msg *q = NULL, *r = NULL; /* a request and its reply */
	const verifier_cfg *cfg = v->cfg;

	pthread_mutex_lock(&v->costs_lock);
	if (v->costs_known)
		goto out;
	if ((q = calloc(1, sizeof *q)) == NULL || (r = calloc(1, sizeof *r)) == NULL)
		goto out; /* the defaults, this time */
	for (int sg = SPEC_TARGET; sg >= SPEC_DRAFT; sg--) {
		const char *u = v->stages[sg].urls[0];
		if ((cl[sg] = calib_client(v, u, 1000, 1, &err)) == NULL)
			continue;
		proto_init(q, PROTO_PING, 0);
		if (client_call(cl[sg], q, r, &err) < 0 || r->type != PROTO_PONG) {
			client_free(&cl[sg]);
			continue;
		}
		const double step = pong_value(r->pong.msg, "step_ms=") * 1e-3;
		if (sg == SPEC_TARGET) {
			const int nh = (int)pong_value(r->pong.msg, "heads=");
			v->env.target_heads = nh > 0 ? nh : -1;
			if (v->costs_given)
				break;
			/* it answered: the measures wait as a round would */
			client_free(&cl[sg]);
			if ((cl[sg] = calib_client(v, u, cfg->timeout_ms, cfg->tries, &err)) == NULL)
				continue;
			client_set_ms_per_position(cl[sg], cfg->ms_per_pos);
			c.step = step;
			c.run_step = pong_value(r->pong.msg, "run_step_ms=") * 1e-3;
			c.slope = pong_value(r->pong.msg, "slope=");
			c.head = pong_value(r->pong.msg, "head_ms=") * 1e-3;
			const double plain = score_time(v, cl[sg], q, r, 0, &c.trip);
			/* MTP heads as a score with them pays: beside the
			 * server's own measure, what they add to a score */
			const int h = nh < SPEC_MTP_HEADS ? nh : SPEC_MTP_HEADS;
			const double with = h > 0 ? score_time(v, cl[sg], q, r, h, NULL) : 0;
			if (with > plain && (with - plain) / h > c.head)
				c.head = (with - plain) / h;
		} else {
			c.draft = step;
		}
	}
	if (v->costs_given) {
		v->costs_known = 1;
		goto out;
	}
	c.overlap = 1;
	if (cl[SPEC_TARGET] && cl[SPEC_DRAFT]) {
		/* the draft's measures wait as a round would, too */
		client_free(&cl[SPEC_DRAFT]);
		cl[SPEC_DRAFT] = calib_client(v, v->stages[SPEC_DRAFT].urls[0], cfg->timeout_ms,
					      cfg->tries, &err);
		const double o = cl[SPEC_DRAFT] ? overlap(v, cl[SPEC_TARGET], cl[SPEC_DRAFT], q, r)
						: -1;
		if (o >= 0)
			c.overlap = o;
	}
	if (c.step > 0 && c.trip > 0) {
		v->env.costs = c;
		v->costs_known = 1;
		fprintf(stderr, "%s: cost model: target step %.3f ms, block slope %.2f, draft step "
			"%.3f ms, trip %.3f ms, MTP head %.3f ms, overlap %.2f, target step back to "
			"back %.3f ms\n", prog, c.step * 1e3, c.slope, c.draft * 1e3, c.trip * 1e3,
			c.head * 1e3, c.overlap, c.run_step * 1e3);
	} else if (++v->costs_tries >= LEARN_TRIES) {
		v->costs_known = 1;
		fprintf(stderr, "%s: cost model: the target was not measured in %d tries; "
			"--lookahead auto keeps the defaults (%s; give them with --costs)\n", prog,
			LEARN_TRIES, SPEC_COSTS);
	} else {
		fprintf(stderr, "%s: cost model: the target was not measured (%s); the defaults "
			"for this session, another try at the next\n", prog,
			err.msg[0] ? err.msg : "no answer");
	}
out:
	client_free(&cl[0]);
	client_free(&cl[1]);
	free(q);
	free(r);
	pthread_mutex_unlock(&v->costs_lock);
}
