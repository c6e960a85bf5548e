/* test_speculate.c: the policies driven through lib/speculate's round loop
 * with real models, across rounds and positions:
 *
 *   1. sd: every emitted token follows the target's conditional
 *      distribution given the prefix actually emitted before it;
 *   2. pcg with the demo's ASG: every emitted group follows the target's
 *      group distribution Q_c (lib/speculate/policy.h) given the prefix, and every
 *      label names a group that holds its token;
 *   3. a session gives the same tokens and per-position statistics alone,
 *      round-robin with three others, run twice, or with its servers losing
 *      its cache after every round;
 *   4. bad requests fail naming the field; a session stops at max_tokens,
 *      and a finished session calls no server.
 *
 * The models: the demo voice's target (models/demo, on a plain text prompt)
 * and two drafts. sd's is three of the target's four layers (draftd
 * --layers 0,2,3): close, so that later slots and bonus tokens are common
 * (1.2 of 3 drafts accepted a round). pcg's is the demo's own draft, far
 * from the target on a text prompt (0.65 accepted a round), so that pcg's
 * tokens are far from q and only its groups follow Q_c. The servers run in
 * this process (modelserver_local); each reply is packed and parsed as a
 * client receives it over a socket.
 *
 * The statistic of 1 and 2: SESSIONS sessions (seeds BASE_SEED + i, the text
 * TEXT, lookahead 3, at most T tokens, temperature 1, top-k 20). For each
 * emitted token y_t the target's exact q_t = q(. | prompt, y_1..y_{t-1}) is
 * computed afresh by a second copy of the target (one score of the whole
 * sequence), and y_t is mapped to its randomized probability integral
 * transform u_t = F_t(y_t-) + v q_t(y_t), v ~ U(0, 1) from the test's own
 * generator, F_t the CDF of q_t with the tokens ordered by q_t descending
 * (ties by id; any order fixed by q_t is valid, this one shows a draft that
 * is flatter or otherwise peaked than the target as a slope across the
 * bins). When y_t ~ q_t given everything before it, the u_t are independent
 * U(0, 1) whatever the prefixes, so their histogram over PIT_BINS (pit.h) equal bins is
 * tested for uniformity by chi-square: once pooled over all positions and
 * once per position t = 1..T (so that a fault at one position is not
 * diluted). A session that ends on the end token counts it as its last y.
 * For pcg the same with groups: the label K that spec_last_round gives with
 * an accepted or corrected token (for a bonus token, label -1, and for the
 * end token, K ~ w_{., y} is drawn here, which is Q_c-distributed when
 * y ~ q), against Q_c,t(G_k) = sum_y w_{k,y} q_t(y).
 *
 * The same for a phoneme voice (models/demo's voice.json; speaker i mod 8,
 * VOICE_TEXT, at most TV frames), where rounds run across the phoneme
 * tokens the verifier forces: q_t is the target's given the context the
 * session built (spec_context: the prompt, the speech, and the forced
 * tokens among it), pooled over all tokens and over the tokens that a forced
 * token precedes inside a round's block (the new path: about 370 of 2,560).
 * Reading q at position i instead of at the vector after the forced tokens
 * was tried once: every one of the four tests failed (p below 1e-178).
 *
 * Significance: 2 (1 + T) + 4 chi-square tests, each at ALPHA = 0.001 /
 * N_TESTS (Bonferroni), so the file fails by chance with probability below
 * 0.001.
 * Run for 30 other base seeds (the optional argument), the 480 p-values
 * were spread as uniform ones (the smallest 0.0045), and at 3000 sessions
 * the tests pass too (then with 500 and 300 sessions: the many paths of the
 * round loop are tested on synthetic servers, with far more sessions, by
 * test_loops, so that these real models' sessions can be fewer).
 *
 * Power, checked here: the same statistics must reject (p-value below
 * ALPHA) pcg's tokens at token level, sd's draft sampling alone (policy none
 * with the draft as the scoring server: the draft's distribution emitted
 * instead of the target's) at token level, from POWER_SESSIONS sessions
 * only, and pcg's draft alone at group level; over the 31 base seeds their
 * p-values were below 1e-13, 1e-52 and 1e-300. Mutations of lib/speculate/speculate.c
 * were tried once: the bonus token drawn from q_L instead of q_{L+1} failed
 * sd pooled (p 1e-25) and at three positions; the policy's random stream
 * made equal to the draft server's failed sd at position 1 (p 4e-15) though
 * not pooled; labels shifted by one slot failed the membership check; the
 * target's sync position counting the drafts failed the rounds. Dropping
 * pcg's labels (all -1, so that K ~ w_{., y} is drawn here for every token)
 * is seen only weakly (p 0.005): with groups this overlapping, w smooths
 * pcg's token distribution to nearly Q_c.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "costmodel.h"
#include "asg.h"
#include "check.h"
#include "chi2.h"
#include "pit.h"
#include "llasa.h"
#include "matmul.h"
#include "modelserver.h"
#include "proto.h"
#include "rng.h"
#include "speculate.h"
#include "tokenizer.h"
#include "voice.h"

#define TEXT "Blessed are the meek."
#define SESSIONS 300
#define POWER_SESSIONS 150
#define T 8                     /* max_tokens of the statistical sessions */
#define LOOKAHEAD 3
#define TV 16                   /* max_tokens of the phoneme voice's sessions */
#define VOICE_SESSIONS 160
#define VOICE_TEXT "Ten sheep and the goat."
#define N_TESTS (2 * (1 + T) + 4)
#define ALPHA (0.001 / N_TESTS)
#define BASE_SEED 1000
static const pcg_sampling SAMP = { 1.0f, 20, 1.0f };
static const int NEAR_LAYERS[] = { 0, 2, 3 };

/* PCG_TEST_SEQUENTIAL=1: every statistic through the sequential rounds
 * (the draft waits for each verdict) instead of the pipelined ones. */
static int sequential;

/* The servers: the drafts and the target under test, and a second copy of
 * the target that computes the expected distributions. */
typedef struct rig {
	ms_local *near, *far, *target, *oracle;
	tokenizer *tok;
	llasa_vocab voc;
	asg *groups;
	const asg_view *g;
	spec_env env;
	int W;               /* rows: the speech tokens, then the end token */
	int G;               /* the ASG's groups, then singletons beyond its n */
	long calls;          /* requests served */
	proto_buf buf;
	int *prompt;         /* the prompt's ids */
	size_t n_prompt;
} rig;

/* Serves q into r, through the wire format (r reads its vectors in buf). */
static int serve_in(rig *g, proto_buf *buf, ms_local *m, const proto_msg *q, proto_msg *r,
		    pcg_err *err)
{
	proto_msg *rep = calloc(1, sizeof *rep);

	if (rep == NULL)
		return pcg_fail(err, "out of memory");
	g->calls++;
	modelserver_handle(m, q, rep);
	int rc = proto_pack_buf(rep, buf, err);
	free(rep);
	if (rc < 0)
		return -1;
	return proto_parse(buf->data, buf->len, r, err);
}

static int serve(rig *g, ms_local *m, const proto_msg *q, proto_msg *r, pcg_err *err)
{
	return serve_in(g, &g->buf, m, q, r, err);
}

/* Where a session's requests go: its draft, and the target (or, for the
 * draft's own samples, the draft again). */
typedef struct route {
	rig *g;
	ms_local *draft, *scorer;
	proto_msg held;   /* a request started (spec_io's start), served at finish */
	int n_held;
	proto_buf buf;    /* its reply */
} route;

static int call(void *ctx, int stage, proto_msg *q, proto_msg *r, pcg_err *err)
{
	route *to = ctx;

	return serve(to->g, stage == SPEC_DRAFT ? to->draft : to->scorer, q, r, err);
}

/* A pipelined round's two halves: the draft's request ahead is kept at
 * start and served at finish, after the target's score (the order a round
 * over sockets sees when the draft is the slower), its reply in a buffer
 * of its own. */
static int start(void *ctx, int stage, proto_msg *q, pcg_err *err)
{
	route *to = ctx;

	(void)stage;
	(void)err;
	to->held = *q;
	to->n_held++;
	return 0;
}

static int finish(void *ctx, int stage, proto_msg *q, proto_msg *r, pcg_err *err)
{
	route *to = ctx;

	(void)q;
	return serve_in(to->g, &to->buf, stage == SPEC_DRAFT ? to->draft : to->scorer,
			&to->held, r, err);
}

/* A synth request (the caller frees it). */
static proto_synth *synth(const char *policy, uint64_t seed, int max_tokens)
{
	proto_synth *q = calloc(1, sizeof *q);

	if (q == NULL) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	snprintf(q->text, sizeof q->text, "%s", TEXT);
	snprintf(q->policy, sizeof q->policy, "%s", policy);
	q->lookahead = LOOKAHEAD;
	q->samp = SAMP;
	q->seed = seed;
	q->max_tokens = max_tokens;
	q->sequential = sequential;
	return q;
}

/* One session to its end: the tokens (model ids; the end token included
 * when drawn), their group labels from spec_last_round, and its stats. */
typedef struct run {
	int y[T + PROTO_MAX_N], k[T + PROTO_MAX_N], n;
	double rounds, accepted;
} run;

static int run_session(route *to, const proto_synth *req, uint64_t id, run *out)
{
	rig *g = to->g;
	spec_io io = { .call = call, .start = start, .finish = finish, .ctx = to };
	pcg_err err = { "" };
	spec_session *s = spec_new(&g->env, req, g->groups, id, &err);
	int rc = 0, n;

	CHECKF(s != NULL, "spec_new: %s", err.msg);
	if (s == NULL)
		return -1;
	out->n = 0;
	while (rc == 0) {
		const int *tok, *grp;
		if ((rc = spec_round(s, &io, &err)) < 0)
			break;
		int m = spec_last_round(s, &tok, &grp);
		for (int i = 0; i < m && out->n < T + PROTO_MAX_N - 1; i++) {
			out->y[out->n] = tok[i];
			out->k[out->n++] = grp[i];
		}
	}
	CHECKF(rc == 1, "spec_round: %s", err.msg);
	const int *all = spec_tokens(s, &n);
	CHECKF(n == out->n && n <= req->max_tokens &&
	       !memcmp(all, out->y, (size_t)n * sizeof *all),
	       "the rounds emitted %d tokens, the session holds %d", out->n, n);
	if (rc == 1 && n < req->max_tokens) { /* it drew the end token */
		out->y[out->n] = g->voc.end_id;
		out->k[out->n++] = -1;
	}
	proto_msg *res = calloc(1, sizeof *res);
	spec_result(s, 0, res);
	out->rounds = res->result.stats[PROTO_STAT_ROUNDS];
	out->accepted = res->result.stats[PROTO_STAT_ACCEPTED];
	free(res);
	spec_free(&s);
	return rc == 1 ? 0 : -1;
}

/* The target's q_t for each token of r, given the prompt and the tokens
 * before it: one score of the whole sequence by the second copy of the
 * target. q: r->n x W. */
static int expected(rig *g, const run *r, float *q)
{
	proto_msg *sq = calloc(1, sizeof *sq), *rep = calloc(1, sizeof *rep);
	pcg_err err = { "" };
	int rc = -1;

	proto_init(sq, PROTO_SCORE, 0);
	proto_model_req *sr = &sq->score.req;
	sr->session = 1;
	for (size_t i = 0; i < g->n_prompt; i++)
		sr->append[sr->n_append++] = g->prompt[i];
	for (int i = 0; i + 1 < r->n; i++)
		sr->append[sr->n_append++] = r->y[i];
	sr->n = r->n;
	sr->samp = SAMP;
	sr->rows = (llama_rows){ 2, { g->voc.speech_first, g->voc.end_id },
				 { g->voc.speech_first + g->voc.speech_count, g->voc.end_id + 1 } };
	if (serve(g, g->oracle, sq, rep, &err) == 0 && rep->type == PROTO_PROBS &&
	    rep->probs.n_vec == r->n && rep->probs.width == g->W) {
		for (int i = 0; i < r->n; i++)
			proto_vector(&rep->probs, i, q + (size_t)i * g->W);
		rc = 0;
	}
	CHECKF(rc == 0, "score: %s %s", err.msg, rep->type == PROTO_ERROR ? rep->error.msg : "");
	free(sq);
	free(rep);
	return rc;
}

/* Row of a model id: speech codes, then the end token. */
static int row_of(const rig *g, int id)
{
	int c = llasa_id_to_code(&g->voc, id);
	return c >= 0 ? c : g->W - 1;
}

static int n_tests;

/* The pooled and per-position tests of h must pass (want 1), or the pooled
 * test must reject (want 0: a check of power). */
static void expect_uniform(const char *what, const hist *h, int want)
{
	pit_expect(what, h, T, want, ALPHA, &n_tests);
}

/* n sessions of policy through to from seed base: the tokens' PIT under
 * the target's q into ht, the groups' PIT under Q_c into hg (each when not
 * NULL). */
static void collect(route *to, const char *policy, int n, uint64_t base, hist *ht, hist *hg)
{
	rig *g = to->g;
	run *r = malloc(sizeof *r);
	float *q = malloc((size_t)(T + 1) * g->W * sizeof *q);
	double *d = malloc((size_t)(g->W > g->G ? g->W : g->G) * sizeof *d);
	double rounds = 0, accepted = 0, t0 = pcg_now();
	long tokens = 0, bonus = 0, bad = 0;
	pcg_rng rng;

	pcg_rng_init(&rng, base, 77);
	for (int i = 0; i < n; i++) {
		proto_synth *req = synth(policy, base + (uint64_t)i, T);
		/* one server session for all: the servers keep the prompt's
		 * cache, as they keep any prefix that matches */
		int rc = run_session(to, req, 1, r);
		free(req);
		if (rc < 0 || r->n > T || expected(g, r, q) < 0)
			break; /* (checked in run_session) */
		tokens += r->n;
		rounds += r->rounds;
		accepted += r->accepted;
		for (int t = 0; t < r->n; t++) {
			const float *qt = q + (size_t)t * g->W;
			const int y = row_of(g, r->y[t]);
			if (ht) {
				for (int j = 0; j < g->W; j++)
					d[j] = qt[j];
				hist_add(ht, t, pit(d, g->W, y, pcg_rng_uniform(&rng)));
			}
			if (hg == NULL)
				continue;
			bonus += r->k[t] < 0 && r->y[t] != g->voc.end_id;
			int K = r->k[t] >= 0 ? r->k[t] : draw_group(g->g, y, &rng);
			if (!member(g->g, g->G, y, K)) {
				bad++;
				continue;
			}
			group_masses(g->g, g->W, g->G, qt, d);
			hist_add(hg, t, pit(d, g->G, K, pcg_rng_uniform(&rng)));
		}
	}
	CHECKF(bad == 0, "%s: %ld tokens labelled with a group they are not in", policy, bad);
	printf(" %s: %d sessions, %.2f tokens and %.2f rounds a session, %.2f drafts accepted a "
	       "round", policy, n, (double)tokens / n, rounds / n, rounds ? accepted / rounds : 0);
	if (hg && strcmp(policy, "none"))
		printf(", %.1f%% bonus tokens", 100.0 * bonus / tokens);
	printf(" (%.1f s)\n", pcg_now() - t0);
	free(r);
	free(q);
	free(d);
}

/* ---- 1 and 2 with a phoneme voice: rounds across forced tokens ---- */

/* n sessions of policy on the demo voice (speaker i mod its speakers, the
 * text VOICE_TEXT, at most TV frames) through to: each speech token's PIT
 * under the target's q given the context the session built (the prompt,
 * and the phoneme tokens forced among the speech: spec_context), into
 * h_all, and for the tokens that a forced token precedes inside a round's
 * block (not the round's first token) also into h_in; for pcg (hg_all,
 * hg_in not NULL) the groups' PIT under Q_c the same way. The oracle
 * scores each prefix afresh (its session advanced token by token). */
static void collect_voice(route *to, const spec_env *env, const char *policy, int n,
			  uint64_t base, hist *h_all, hist *h_in, hist *hg_all, hist *hg_in)
{
	rig *g = to->g;
	spec_io io = { .call = call, .ctx = to };
	proto_synth *req = synth(policy, 0, TV);
	proto_msg *sq = calloc(1, sizeof *sq), *rep = calloc(1, sizeof *rep);
	double *d = malloc((size_t)(g->W > g->G ? g->W : g->G) * sizeof *d);
	float *qt = malloc((size_t)g->W * sizeof *qt);
	long tokens = 0, inside = 0, forced = 0, bad = 0;
	double rounds = 0, accepted = 0, t0 = pcg_now();
	pcg_err err = { "" };
	pcg_rng rng;

	pcg_rng_init(&rng, base, 78);
	snprintf(req->text, sizeof req->text, "%s", VOICE_TEXT);
	for (int i = 0; i < n; i++) {
		req->seed = base + (uint64_t)i;
		req->speaker = i % env->voice->n_speakers;
		spec_session *s = spec_new(env, req, g->groups, 1, &err);
		CHECKF(s != NULL, "spec_new: %s", err.msg);
		if (s == NULL)
			break;
		/* first[t]: speech token t opened its round; lab[t]: its label */
		int first[TV + PROTO_MAX_N] = { 0 }, lab[TV + PROTO_MAX_N], nt = 0, rc = 0;
		while (rc == 0) {
			const int *tok, *grp;
			if ((rc = spec_round(s, &io, &err)) < 0)
				break;
			int m = spec_last_round(s, &tok, &grp);
			if (m > 0 && nt < TV)
				first[nt] = 1;
			for (int k = 0; k < m && nt < TV + PROTO_MAX_N; k++)
				lab[nt++] = grp[k];
		}
		CHECKF(rc == 1, "spec_round: %s", err.msg);
		int nc, t = 0, cur = 0;
		const int *ctx = spec_context(s, &nc);
		proto_msg *res = calloc(1, sizeof *res);
		spec_result(s, 0, res);
		rounds += res->result.stats[PROTO_STAT_ROUNDS];
		accepted += res->result.stats[PROTO_STAT_ACCEPTED];
		free(res);
		for (int p = 1; p < nc && rc == 1; p++) {
			if (llasa_id_to_code(&g->voc, ctx[p]) < 0)
				continue; /* the prompt, or a forced token */
			/* q at p - 1: the oracle's session holds ctx[0..cur) */
			proto_init(sq, PROTO_SCORE, 0);
			proto_model_req *sr = &sq->score.req;
			sr->session = 7;
			sr->pos = cur;
			for (int k = cur; k < p; k++)
				sr->append[sr->n_append++] = ctx[k];
			sr->n = 1;
			sr->samp = SAMP;
			sr->rows = (llama_rows){ 1, { g->voc.speech_first },
						 { g->voc.speech_first + g->voc.speech_count } };
			if (serve(g, g->oracle, sq, rep, &err) < 0 || rep->type != PROTO_PROBS ||
			    rep->probs.width != g->W) {
				CHECKF(0, "oracle: %s %s", err.msg,
				       rep->type == PROTO_ERROR ? rep->error.msg : "");
				rc = -1;
				break;
			}
			proto_vector(&rep->probs, 0, qt);
			cur = p;
			const int y = llasa_id_to_code(&g->voc, ctx[p]);
			const int in = !first[t] && llasa_id_to_code(&g->voc, ctx[p - 1]) < 0;
			forced += llasa_id_to_code(&g->voc, ctx[p - 1]) < 0;
			inside += in;
			tokens++;
			for (int j = 0; j < g->W; j++)
				d[j] = qt[j];
			const double u = pit(d, g->W, y, pcg_rng_uniform(&rng));
			hist_add(h_all, 0, u);
			if (in)
				hist_add(h_in, 0, u);
			if (hg_all) {
				/* the policy's label; a bonus token's (y ~ q) drawn */
				int K = lab[t] >= 0 ? lab[t] : draw_group(g->g, y, &rng);
				if (!member(g->g, g->G, y, K))
					bad++;
				group_masses(g->g, g->W, g->G, qt, d);
				const double ug = pit(d, g->G, K, pcg_rng_uniform(&rng));
				hist_add(hg_all, 0, ug);
				if (in)
					hist_add(hg_in, 0, ug);
			}
			t++;
		}
		CHECKF(t == nt, "%d speech tokens in the context, the rounds emitted %d", t, nt);
		spec_free(&s);
	}
	CHECKF(bad == 0, "%ld labels", bad);
	printf(" %s: %d sessions, %.2f tokens and %.2f rounds a session, %.2f drafts accepted a "
	       "round; %ld of %ld tokens after a forced token, %ld of them inside a round (%.1f s)\n",
	       policy, n, (double)tokens / n, rounds / n, rounds ? accepted / rounds : 0, forced,
	       tokens, inside, pcg_now() - t0);
	free(req);
	free(sq);
	free(rep);
	free(d);
	free(qt);
}

/* The pooled test only (the positions of a phoneme voice's sessions are not
 * comparable: their prefixes differ in their forced tokens). */
static void expect_uniform_pooled(const char *what, const hist *h)
{
	pit_expect(what, h, 0, 1, ALPHA, &n_tests);
}

/* ---- 3: determinism ---- */

/* Whether two results have the same stats, apart from those that measure time. */
static int same_stats(const proto_result *a, const proto_result *b)
{
	static const int idx[] = { PROTO_STAT_ROUNDS, PROTO_STAT_DRAFTED, PROTO_STAT_ACCEPTED,
				   PROTO_STAT_RATE, PROTO_STAT_MAL, PROTO_STAT_TOKENS,
				   PROTO_STAT_RESENDS };

	if (a->n_stats != b->n_stats || a->n_stats != PROTO_STAT_POS0 + LOOKAHEAD)
		return 0;
	for (size_t i = 0; i < sizeof idx / sizeof *idx; i++)
		if (a->stats[idx[i]] != b->stats[idx[i]])
			return 0;
	for (int i = PROTO_STAT_POS0; i < a->n_stats; i++)
		if (a->stats[i] != b->stats[i])
			return 0;
	return 1;
}

static int same_tokens(const proto_result *a, const proto_result *b)
{
	return a->n_tokens == b->n_tokens &&
	       !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof *a->tokens);
}

/* Counts the target's runs (proposes that draw by index) it passes on. */
static int runs_seen;
static int call_counting(void *ctx, int stage, proto_msg *q, proto_msg *r, pcg_err *err)
{
	runs_seen += q->type == PROTO_PROPOSE && q->propose.draws > 0;
	return call(ctx, stage, q, r, err);
}

/* A session of `policy` (lookahead auto unless none) through `to`: its
 * context (prompt, forced and speech tokens) to its end under env with
 * run_tokens `run`, into ctx (room for cap); returns its length, or -1,
 * its rounds and its share of rounds that drafted. */
static double last_predicted; /* the last alone_session's PROTO_STAT_PREDICTED */
static int alone_session(route *to, const spec_env *env, const char *policy, int run,
			 const char *text, int speaker, uint64_t seed, int max_tokens, int *ctx,
			 int cap, int *rounds, double *drafting)
{
	spec_env e = *env;
	spec_io io = { .call = call_counting, .ctx = to };
	pcg_err err = { "" };
	proto_synth *req = synth(policy, seed, max_tokens);
	int rc = 0, n = -1;

	req->lookahead = 0;
	e.run_tokens = run;
	snprintf(req->text, sizeof req->text, "%s", text);
	req->speaker = speaker;
	spec_session *s = spec_new(&e, req, to->g->groups, 77, &err);
	while (s && rc == 0)
		rc = spec_round(s, &io, &err);
	CHECKF(s && rc == 1, "policy %s, runs of %d: %s", policy, run, err.msg);
	if (s && rc == 1) {
		const int *c = spec_context(s, &n);
		n = n < cap ? n : cap;
		memcpy(ctx, c, (size_t)n * sizeof *ctx);
		double st[PROTO_MAX_STATS];
		proto_msg *res = calloc(1, sizeof *res);
		spec_result(s, 0, res);
		memcpy(st, res->result.stats, sizeof st);
		*rounds = (int)st[PROTO_STAT_ROUNDS];
		*drafting = st[PROTO_STAT_DRAFTING];
		last_predicted = st[PROTO_STAT_PREDICTED];
		free(res);
	}
	spec_free(&s);
	free(req);
	return n;
}

/* The target's runs (it samples several tokens a request, each drawn by
 * its index) give the tokens of one token a round, drawn here: the same
 * context, forced tokens and end token included, for runs grown by time (0)
 * and fixed ones, over seeds (and a phoneme voice's speakers, whose forced
 * tokens fall inside the runs): policy none, and `policy` under lookahead
 * auto with costs (`costs`) where drafting never pays (every round alone)
 * and where it pays only now and then (runs end where auto weighs a
 * probe); runs are what ran, and the rounds count target passes alike.
 * The costs have no trip: the target alone then costs a step a token
 * whatever its runs (costmodel.h), so auto weighs the same prices either
 * way. With a trip, a run shares it: the price falls (checked last). */
static void test_runs(route *to, const spec_env *env, const char *policy, const char *text,
		      int max_tokens)
{
	enum { SEEDS = 6, CAP = 4096 };
	static const int runs[] = { 0, 3, PROTO_MAX_N };
	static const char *costs[] = { NULL, "1,1,0.33,0,0,1", "1,0.1,0.33,0,0,1" };
	static int one[CAP], got[CAP];
	int same = 0, total = 0, ended = 0, rounds_same = 0, mixed = 0;
	pcg_err err = { "" };

	for (size_t c = 0; c < sizeof costs / sizeof costs[0]; c++) {
		spec_env e = *env;
		const char *pol = costs[c] ? policy : "none";
		if (costs[c])
			CHECK(cost_terms_parse(costs[c], &e.costs, &err) == 0);
		for (int sd = 0; sd < SEEDS; sd++) {
			const int spk = env->voice ? sd % env->voice->n_speakers : 0;
			int r1 = 0, rr = 0;
			double d1 = 0, dr = 0;
			const int n1 = alone_session(to, &e, pol, 1, text, spk, 300 + sd, max_tokens,
						     one, CAP, &r1, &d1);
			for (size_t k = 0; k < sizeof runs / sizeof runs[0] && n1 > 0; k++) {
				runs_seen = 0;
				const int n = alone_session(to, &e, pol, runs[k], text, spk, 300 + sd,
							    max_tokens, got, CAP, &rr, &dr);
				total++;
				/* fixed runs take fewer requests than rounds; grown ones
				 * (by the time a run takes) at least run, whatever the load */
				same += n == n1 && memcmp(one, got, (size_t)n * sizeof *got) == 0 &&
					runs_seen > 0 && (runs[k] == 0 ? runs_seen <= rr : runs_seen < rr);
				rounds_same += rr == r1;
				mixed += dr > 0 && dr < 1;
			}
			ended += n1 > 0 && !env->voice && one[n1 - 1] == env->voc->end_id;
		}
	}
	CHECKF(same == total && total == 3 * SEEDS * 3, "%d of %d sessions in runs gave the "
	       "tokens of one a round (with fewer requests than rounds)", same, total);
	CHECKF(rounds_same == total, "%d of %d sessions in runs counted the rounds of one a round",
	       rounds_same, total);
	CHECKF(mixed > 0, "no session both drafted and ran the target alone");
	/* the price of the target alone: a trip a token, or a trip a run (16
	 * tokens: a 1 ms step holds 100 in RUN_SECONDS); one token, so that
	 * the prediction is the model's rate alone */
	{
		spec_env e = *env;
		int r = 0;
		double d = 0, p1, p16;
		CHECK(cost_terms_parse("1,1,0.33,0.2", &e.costs, &err) == 0);
		alone_session(to, &e, "none", 1, text, 0, 300, 1, got, CAP, &r, &d);
		p1 = last_predicted;
		alone_session(to, &e, "none", 0, text, 0, 300, 1, got, CAP, &r, &d);
		p16 = last_predicted;
		CHECKF(fabs(p1 - 1 / 1.2e-3) < 1e-6 * p1 && fabs(p16 - 1 / 1.0125e-3) < 1e-6 * p16,
		       "the target alone priced at %.3f tokens/s a token a request (%.3f "
		       "expected) and %.3f in runs (%.3f expected)", p1, 1 / 1.2e-3, p16,
		       1 / 1.0125e-3);
	}
	printf(" the target alone in runs of 3, 16 and grown (none; %s, auto): the tokens of one "
	       "a round in %d of %d sessions (%d drafting now and then; %d ended at the end "
	       "token)\n", policy, same, total, mixed, ended);
}

/* sd through to_sd, pcg through to_pcg. */
static void test_determinism(rig *g, route *to_sd, route *to_pcg)
{
	enum { NS = 4, MAXT = 24 };
	static const char *pol[NS] = { "sd", "sd", "pcg", "pcg" };
	const spec_io io[NS] = { { .call = call, .ctx = to_sd }, { .call = call, .ctx = to_sd },
				 { .call = call, .ctx = to_pcg }, { .call = call, .ctx = to_pcg } };
	pcg_err err = { "" };
	spec_session *s[NS];
	proto_msg *rr[NS], *ra = calloc(1, sizeof *ra);
	int done[NS] = { 0 }, left = NS;

	/* round-robin: one round of each in turn */
	for (int i = 0; i < NS; i++) {
		proto_synth *req = synth(pol[i], 11 + (uint64_t)i, MAXT);
		s[i] = spec_new(&g->env, req, g->groups, 101 + (uint64_t)i, &err);
		free(req);
		rr[i] = calloc(1, sizeof *rr[i]);
		CHECKF(s[i] != NULL, "%s", err.msg);
		if (s[i] == NULL)
			exit(check_done("test_speculate"));
	}
	while (left > 0)
		for (int i = 0; i < NS; i++) {
			if (done[i])
				continue;
			int rc = spec_round(s[i], &io[i], &err);
			CHECKF(rc >= 0, "%s", err.msg);
			if (rc != 0) {
				done[i] = 1;
				left--;
			}
		}
	for (int i = 0; i < NS; i++) {
		spec_result(s[i], 0, rr[i]);
		spec_free(&s[i]);
	}
	/* alone, on fresh server sessions; the same seeds again on those
	 * sessions (their caches hold the whole previous run); once more with
	 * the servers dropping the session after every round, so that each
	 * round resends the context from position 0 to both; and with the
	 * draft's work ahead started before the target's score and served
	 * after it (spec_io's start and finish, as over sockets) */
	const spec_io io2[NS] = {
		{ .call = call, .start = start, .finish = finish, .ctx = to_sd },
		{ .call = call, .start = start, .finish = finish, .ctx = to_sd },
		{ .call = call, .start = start, .finish = finish, .ctx = to_pcg },
		{ .call = call, .start = start, .finish = finish, .ctx = to_pcg } };
	for (int pass = 0; pass < 4; pass++)
		for (int i = 0; i < NS; i++) {
			proto_synth *req = synth(pol[i], 11 + (uint64_t)i, MAXT);
			spec_session *a = spec_new(&g->env, req, g->groups,
						   (pass < 2 ? 201 : 301 + 100 * pass) + (uint64_t)i,
						   &err);
			int rc = 0, rounds = 0, want = 0;
			free(req);
			CHECKF(a != NULL, "%s", err.msg);
			if (a == NULL)
				continue;
			while (rc == 0) {
				/* after the first round each call resends: the target's
				 * always, the draft's when the round drafts (not when
				 * one token is left before max_tokens) */
				int have;
				spec_tokens(a, &have);
				if (rounds > 0)
					want += 1 + (MAXT - have - 1 >= 1);
				rc = spec_round(a, pass == 3 ? &io2[i] : &io[i], &err);
				rounds++;
				if (pass == 2)
					spec_drop(a, &io[i]);
			}
			CHECKF(rc == 1, "%s", err.msg);
			spec_result(a, 0, ra);
			CHECKF(same_tokens(&ra->result, &rr[i]->result), "%s seed %d, pass %d: "
			       "tokens differ from the round-robin run", pol[i], 11 + i, pass);
			if (pass == 2) {
				CHECKF(ra->result.stats[PROTO_STAT_RESENDS] == want,
				       "%g resends in %d rounds, want %d",
				       ra->result.stats[PROTO_STAT_RESENDS], rounds, want);
				ra->result.stats[PROTO_STAT_RESENDS] = 0;
			}
			CHECKF(same_stats(&ra->result, &rr[i]->result), "%s seed %d, pass %d: "
			       "statistics differ from the round-robin run", pol[i], 11 + i, pass);
			spec_free(&a);
		}
	/* the seeds matter, and the runs are long enough to show it */
	CHECK(!same_tokens(&rr[0]->result, &rr[1]->result) &&
	      !same_tokens(&rr[2]->result, &rr[3]->result));
	for (int i = 0; i < NS; i++) {
		const proto_result *r = &rr[i]->result;
		CHECK(r->n_tokens > LOOKAHEAD);
		printf("  %s seed %d: %d tokens in %g rounds, %g of %g drafts accepted\n", pol[i],
		       11 + i, r->n_tokens, r->stats[PROTO_STAT_ROUNDS],
		       r->stats[PROTO_STAT_ACCEPTED], r->stats[PROTO_STAT_DRAFTED]);
		free(rr[i]);
	}
	free(ra);
}

/* ---- 4: edge cases ---- */

static void bad_request(rig *g, const char *policy, int n, const asg *groups, const char *want)
{
	proto_synth *req = synth(policy, 1, 10);
	pcg_err err = { "" };

	req->lookahead = n;
	spec_session *s = spec_new(&g->env, req, groups, 900, &err);
	CHECKF(s == NULL && strstr(err.msg, want) != NULL,
	       "policy %s, n %d: want an error naming %s, got '%s'", policy, n, want,
	       s ? "a session" : err.msg);
	spec_free(&s);
	free(req);
}

static void test_edges(rig *g, route *to)
{
	spec_io io = { .call = call, .ctx = to };
	pcg_err err = { "" };

	bad_request(g, "best", LOOKAHEAD, g->groups, "'policy'");
	bad_request(g, "mtp-best", LOOKAHEAD, g->groups, "'policy'");
	bad_request(g, "pcg", LOOKAHEAD, NULL, "pcg needs an ASG");
	{ /* n = 0: the lookahead is auto (the cost model's, each round): it
	   * depends on the tokens alone, so a rerun gives the same tokens;
	   * with drafting that costs nothing it drafts, with a draft that
	   * costs more than the target it leaves the rounds to the target */
		static const char *costs[2] = { "1,0.01,0,0.01", "1,5,1,0.5" };
		proto_msg *ra = calloc(1, sizeof *ra), *rb = calloc(1, sizeof *rb);
		for (int c = 0; c < 2; c++) {
			spec_env env = g->env;
			CHECK(cost_terms_parse(costs[c], &env.costs, &err) == 0);
			for (int rep = 0; rep < 2; rep++) {
				proto_synth *req = synth("sd", 3, 24);
				req->lookahead = 0;
				spec_session *s = spec_new(&env, req, NULL, 902 + 2 * c + rep, &err);
				free(req);
				CHECKF(s != NULL, "sd with n 0 (auto): %s", err.msg);
				int rc = 0;
				while (s && rc == 0)
					rc = spec_round(s, &io, &err);
				CHECKF(rc == 1, "auto: %s", err.msg);
				if (s)
					spec_result(s, 0, rep ? rb : ra);
				spec_free(&s);
			}
			CHECK(same_tokens(&ra->result, &rb->result));
			const double drafting = ra->result.stats[PROTO_STAT_DRAFTING];
			CHECKF(c == 0 ? drafting > 0.5 : drafting < 0.5, "costs %s: %.2f of the rounds "
			       "drafted", costs[c], drafting);
		}
		free(ra);
		free(rb);
	}
	bad_request(g, "sd", PROTO_MAX_N, NULL, "'n'");
	bad_request(g, "pcg", -1, g->groups, "'n'");
	bad_request(g, "lantern", LOOKAHEAD, g->groups, "needs a neighbour file");
	proto_synth *req = synth("topk", 1, 10);
	/* the policy's parameters by name: one it does not take, one out of range */
	req->n_args = 1;
	snprintf(req->arg_name[0], sizeof req->arg_name[0], "delta");
	req->arg_val[0] = 0.1;
	spec_session *s = spec_new(&g->env, req, NULL, 900, &err);
	CHECKF(s == NULL && strstr(err.msg, "takes no parameter 'delta'"), "%s", err.msg);
	snprintf(req->arg_name[0], sizeof req->arg_name[0], "k");
	req->arg_val[0] = 0;
	s = spec_new(&g->env, req, NULL, 900, &err);
	CHECKF(s == NULL && strstr(err.msg, "k = 0"), "%s", err.msg);
	req->arg_val[0] = 5;
	s = spec_new(&g->env, req, NULL, 900, &err);
	CHECKF(s != NULL, "topk k 5: %s", err.msg);
	spec_free(&s);
	free(req);
	req = synth("sd", 5, 10);
	req->lookahead = PROTO_MAX_N - 1; /* the largest lookahead is fine */
	s = spec_new(&g->env, req, NULL, 901, &err);
	CHECKF(s != NULL, "lookahead %d: %s", PROTO_MAX_N - 1, err.msg);
	spec_free(&s);
	free(req);

	/* max_tokens 5 with lookahead 3: the last round's surplus is cut (and
	 * not among its tokens); then the session is done and calls no server */
	for (uint64_t seed = 1; seed <= 4; seed++) {
		req = synth(seed % 2 ? "sd" : "pcg", seed, 5);
		s = spec_new(&g->env, req, g->groups, 902, &err);
		free(req);
		CHECKF(s != NULL, "%s", err.msg);
		if (s == NULL)
			return;
		int rc = 0, rounds = 0, n, emitted = 0;
		const int *tok;
		while (rc == 0 && rounds < 10) {
			rc = spec_round(s, &io, &err);
			rounds++;
			emitted += spec_last_round(s, &tok, NULL);
		}
		spec_tokens(s, &n);
		CHECKF(rc == 1 && n == 5 && emitted == 5,
		       "seed %d: rc %d after %d rounds, %d tokens, %d emitted (want 1, 5, 5)",
		       (int)seed, rc, rounds, n, emitted);
		long calls = g->calls;
		CHECK(spec_round(s, &io, &err) == 1 && spec_round(s, &io, &err) == 1);
		CHECKF(g->calls == calls, "a finished session made %ld calls", g->calls - calls);
		spec_tokens(s, &n);
		CHECK(n == 5);
		spec_free(&s);
	}
}

int main(int argc, char **argv)
{
	const char *root = getenv("PCG_ROOT");
	const uint64_t base = argc > 1 ? strtoull(argv[1], NULL, 10) : BASE_SEED;
	char dir[4096], ddir[4200], path[4300];
	pcg_err err = { "" };
	rig g = { 0 };

	sequential = getenv("PCG_TEST_SEQUENTIAL") && !strcmp(getenv("PCG_TEST_SEQUENTIAL"), "1");
	printf("rounds: %s\n", sequential ? "sequential" : "pipelined (the draft drafts ahead)");
	/* The models are tiny: one thread. (A second one mostly waits, and on
	 * a busy machine its spinning makes the run many times slower.) */
	pcg_set_threads(1);
	snprintf(dir, sizeof dir, "%s/models/demo", root ? root : ".");
	snprintf(ddir, sizeof ddir, "%s/draft", dir);
	snprintf(path, sizeof path, "%s/model.safetensors", ddir);
	if (access(path, R_OK) != 0)
		SKIP("models/demo has no draft (make voice)");
	ms_config nc = { .prog = "draftd", .model_dir = dir, .kv_mem = 1LL << 30,
			 .layers = NEAR_LAYERS,
			 .n_layers = sizeof NEAR_LAYERS / sizeof *NEAR_LAYERS, .draft = 1 };
	ms_config fc = { .prog = "draftd", .model_dir = ddir, .kv_mem = 1LL << 30, .draft = 1 };
	ms_config tc = { .prog = "targetd", .model_dir = dir, .kv_mem = 1LL << 30 };
	g.near = modelserver_local(&nc, &err);
	CHECKF(g.near != NULL, "%s", err.msg);
	g.far = modelserver_local(&fc, &err);
	CHECKF(g.far != NULL, "%s", err.msg);
	g.target = modelserver_local(&tc, &err);
	CHECKF(g.target != NULL, "%s", err.msg);
	g.oracle = modelserver_local(&tc, &err);
	CHECKF(g.oracle != NULL, "%s", err.msg);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	g.tok = tok_load(path, &err);
	CHECKF(g.tok != NULL, "%s", err.msg);
	snprintf(path, sizeof path, "%s/asg", dir);
	g.groups = asg_open(path, &err);
	CHECKF(g.groups != NULL, "%s", err.msg);
	llasa_prompt pr = { .text = TEXT };
	if (!g.near || !g.far || !g.target || !g.oracle || !g.tok || !g.groups ||
	    llasa_vocab_init(g.tok, &g.voc, &err) < 0 ||
	    llasa_prompt_ids(g.tok, &g.voc, &pr, &g.prompt, &g.n_prompt, &err) < 0) {
		CHECKF(0, "%s", err.msg);
		return check_done("test_speculate");
	}
	g.g = asg_get(g.groups);
	g.env = (spec_env){ .tok = g.tok, .voc = &g.voc };
	g.W = g.voc.speech_count + 1;
	g.G = (int)(g.g->M + (g.W - g.g->n));
	CHECK(g.g->token_offset == (uint32_t)g.voc.speech_first && (int)g.g->n <= g.W);

	static route to_sd, to_pcg, near_alone, far_alone; /* too large for the stack */
	to_sd = (route){ .g = &g, .draft = g.near, .scorer = g.target };
	to_pcg = (route){ .g = &g, .draft = g.far, .scorer = g.target };
	near_alone = (route){ .g = &g, .draft = g.near, .scorer = g.near };
	far_alone = (route){ .g = &g, .draft = g.far, .scorer = g.far };
	double t0 = pcg_now();
	printf("edge cases\n");
	test_edges(&g, &to_sd);
	printf("determinism and interleaving\n");
	test_determinism(&g, &to_sd, &to_pcg);
	test_runs(&to_sd, &g.env, "sd", TEXT, 120);
	printf(" (%.1f s)\n", pcg_now() - t0);

	printf("the target's distributions: lookahead %d, top-k %d, at most %d tokens, base seed "
	       "%llu, alpha %.2g per test\n", LOOKAHEAD, SAMP.top_k, T, (unsigned long long)base,
	       ALPHA);
	hist *h[5];
	for (int i = 0; i < 5; i++)
		h[i] = calloc(1, sizeof *h[i]);
	collect(&to_sd, "sd", SESSIONS, base, h[0], NULL);
	expect_uniform("sd: tokens ~ q", h[0], 1);
	collect(&to_pcg, "pcg", SESSIONS, base + 1000000, h[1], h[2]);
	expect_uniform("pcg: groups ~ Q_c", h[2], 1);

	/* a phoneme voice (the demo's own): the rows are the speech tokens
	 * alone, and rounds run across the forced phoneme tokens */
	voice_info vi;
	snprintf(path, sizeof path, "%s/voice.json", dir);
	if (voice_load(path, &vi, &err) == 0) {
		spec_env ve = { .tok = g.tok, .voc = &g.voc, .voice = &vi,
				.unk_phone = tok_token_id(g.tok, "<|p__|>", 7),
				.unk_next = vi.next_phoneme ? tok_token_id(g.tok, "<|n__|>", 7) : 0 };
		g.W = g.voc.speech_count;
		g.G = (int)(g.g->M + (g.W - g.g->n));
		printf("a phoneme voice: rounds across forced tokens, lookahead %d, at most %d "
		       "frames, \"%s\"\n", LOOKAHEAD, TV, VOICE_TEXT);
		test_runs(&to_pcg, &ve, "pcg", VOICE_TEXT, 4 * TV);
		hist *hv[4];
		for (int i = 0; i < 4; i++)
			hv[i] = calloc(1, sizeof *hv[i]);
		collect_voice(&to_sd, &ve, "sd", VOICE_SESSIONS, base + 4000000, hv[0], hv[1], NULL,
			      NULL);
		expect_uniform_pooled("voice, sd: tokens ~ q", hv[0]);
		expect_uniform_pooled("voice, sd: after a forced token in a round", hv[1]);
		for (int i = 0; i < 2; i++)
			memset(hv[i], 0, sizeof *hv[i]);
		collect_voice(&to_pcg, &ve, "pcg", VOICE_SESSIONS, base + 5000000, hv[0], hv[1],
			      hv[2], hv[3]);
		expect_uniform_pooled("voice, pcg: groups ~ Q_c", hv[2]);
		expect_uniform_pooled("voice, pcg: after a forced token in a round", hv[3]);
		CHECKF(hv[1]->n > 0, "no token followed a forced token inside a round");
		for (int i = 0; i < 4; i++)
			free(hv[i]);
		/* voice.json's next_phoneme: each forced phoneme token is followed
		 * by the next phoneme's. A voice trained so has the <|n_Y|> tokens;
		 * for one without them every next-phoneme token is the stand-in
		 * given as unk_next (a text token: recognisable). */
		voice_info vn = vi;
		vn.next_phoneme = 1;
		spec_env ne = ve;
		ne.voice = &vn;
		ne.unk_next = vi.next_phoneme ? tok_token_id(g.tok, "<|n__|>", 7)
					      : tok_token_id(g.tok, "<|s_0|>", 7) - 1;
		proto_synth *rq = synth("sd", 5, TV);
		snprintf(rq->text, sizeof rq->text, "%s", VOICE_TEXT);
		spec_io io = { .call = call, .ctx = &to_sd };
		spec_session *ss = spec_new(&ne, rq, NULL, 9, &err);
		int rc = ss ? 0 : -1, nc, pairs = 0, lone = 0, speech = 0;
		while (rc == 0)
			rc = spec_round(ss, &io, &err);
		CHECKF(rc == 1, "next_phoneme session: %s", err.msg);
		const int *cx = ss ? spec_context(ss, &nc) : NULL;
		for (int p = 0; cx && p + 1 < nc; p++) {
			size_t l0, l1;
			const char *s0 = tok_token_str(g.tok, cx[p], &l0);
			const char *s1 = tok_token_str(g.tok, cx[p + 1], &l1);
			const int is_phone = s0 && l0 > 4 && !strncmp(s0, "<|p_", 4);
			const int next_is_n = cx[p + 1] == ne.unk_next ||
					      (s1 && l1 > 4 && !strncmp(s1, "<|n_", 4));
			if (llasa_id_to_code(&g.voc, cx[p]) >= 0)
				speech++;
			else if (speech > 0 && is_phone) {
				pairs += next_is_n;
				lone += !next_is_n;
			}
		}
		CHECKF(pairs > 0 && lone == 0, "next_phoneme: %d phoneme tokens followed by the "
		       "next one's, %d not", pairs, lone);
		printf(" next_phoneme: %d forced phoneme tokens in %d frames, each followed by the "
		       "next one's\n", pairs, speech);
		spec_free(&ss);
		free(rq);
		g.W = g.voc.speech_count + 1;
		g.G = (int)(g.g->M + (g.W - g.g->n));
	} else {
		CHECKF(0, "%s", err.msg);
	}
	CHECKF(n_tests == N_TESTS, "%d tests, ALPHA assumes %d", n_tests, N_TESTS);
	printf("power: these must be rejected\n");
	expect_uniform("pcg: tokens ~ q", h[1], 0);
	collect(&near_alone, "none", POWER_SESSIONS, base + 2000000, h[3], NULL);
	expect_uniform("sd's draft alone: tokens ~ q", h[3], 0);
	collect(&far_alone, "none", POWER_SESSIONS, base + 3000000, NULL, h[4]);
	expect_uniform("pcg's draft alone: groups ~ Q_c", h[4], 0);

	for (int i = 0; i < 5; i++)
		free(h[i]);
	free(g.prompt);
	proto_buf_free(&g.buf);
	proto_buf_free(&to_sd.buf);
	proto_buf_free(&to_pcg.buf);
	asg_close(&g.groups);
	tok_free(&g.tok);
	modelserver_local_free(&g.near);
	modelserver_local_free(&g.far);
	modelserver_local_free(&g.target);
	modelserver_local_free(&g.oracle);
	return check_done("test_speculate");
}
