/* test_loops.c: every path of lib/speculate's round loop follows the
 * target's distribution, tested statistically on synthetic model servers
 * (no forward pass), so that many sessions run in seconds:
 *
 *   sequential rounds with their bonus tokens (sd; pcg at group level);
 *   pipelined rounds, the first draft ahead checked in the bonus token's
 *   place and the rest reused as the next round's drafts;
 *   --lookahead auto: one stream of rounds whose lookahead and kind (the
 *   target alone, sequential, pipelined) change as the cost model changes
 *   them, with a draft that gets worse along the utterance, and servers
 *   that lose the session now and then (the context resent);
 *   the target's MTP heads drafting (mtp-sd; mtp-pcg at group level).
 *
 * The servers answer the wire protocol's propose and score (each reply
 * packed and parsed as a client receives it over a socket), keeping each
 * session's context as a model server's cache does. Their distributions are
 * functions of the context: the target's logits are a Markov matrix on the
 * last token plus a term of the position modulo 3 (so that a vector read at
 * the wrong position is a different distribution), the end token included;
 * the draft's add a perturbation: a small one (sd), a large one (pcg, so
 * that its tokens are far from q and only its groups follow Q_c), or for
 * auto one that is small for 20 tokens and then grows token by token; an MTP head k gives the Markov part's (k + 2)-step
 * prediction. The request's temperature, top-k and top-p apply as in a
 * model server (pcg_probs), so drafts and target truncate differently.
 *
 * The statistic (pit.h): each emitted token's randomized PIT under the
 * target's exact q given the prompt and the tokens emitted before it, pooled
 * and at positions 1..T; for pcg the group labels' PIT under Q_c. Besides,
 * pooled over the tokens that a path alone produces: the bonus position of
 * sequential rounds (index L of a round of L drafts), the draft ahead
 * checked in its place, and the tokens of rounds whose drafts were drafted
 * ahead. Each test at ALPHA = 0.001 / N_TESTS (Bonferroni). Run for 24 other
 * base seeds (the optional argument), the 3,552 p-values were spread as
 * uniform ones (the smallest 0.0005, where 1 / 3,552 is 0.0003).
 *
 * Power, checked here on as many sessions: the same tests must reject
 *   - a draft server whose drafts ahead are sampled from another
 *     distribution than the one it reports (a wrong residual where drafts
 *     ahead are reused), on the reused rounds' tokens;
 *   - a target whose block's last vector is another distribution (the bonus
 *     token drawn from a wrong q_{L+1}), on the bonus tokens;
 *   - pcg's tokens at token level (pcg is exact for groups only).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asg.h"
#include "check.h"
#include "chi2.h"
#include "clock.h"
#include "llasa.h"
#include "pit.h"
#include "proto.h"
#include "rng.h"
#include "sampling.h"
#include "speculate.h"
#include "tokenizer.h"

#define S 40                 /* speech rows of the synthetic models */
#define W (S + 1)            /* and the end token */
#define STATES (W + 1)       /* the Markov state: a row, or "not speech" */
#define T 16                 /* max_tokens of a session */
#define TA 48                /* of an auto session */
#define MAXT (TA + PROTO_MAX_N)
#define TEXT "Loops in every order."
#define N_TESTS 148
#define ALPHA (0.001 / N_TESTS)
#define BASE_SEED 7000
#define MAX_HEADS 4          /* the heads the synthetic target has */

/* ---- the synthetic models ---- */

enum { DRAFT_NEAR, DRAFT_FAR, DRAFT_FADING };
enum { LIE_NONE, LIE_AHEAD, LIE_BONUS };

typedef struct models {
	float A[STATES][W];      /* the target's Markov logits */
	float B[3][W];           /* its term of the position modulo 3 */
	float D[STATES][W];      /* the draft's perturbation */
	float E[STATES][W];      /* a lying server's other perturbation */
	double P[STATES][W];     /* softmax(A): the Markov chain the heads roll */
	double Pk[MAX_HEADS][W][W]; /* its powers P^(k + 1) over the rows */
	llasa_vocab voc;
} models;

static models M;

/* A standard normal draw (Box-Muller). */
static double normal(pcg_rng *rng)
{
	const double u = pcg_rng_uniform(rng), v = pcg_rng_uniform(rng);

	return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

static int state_of(int id)
{
	const int c = llasa_id_to_code(&M.voc, id);
	return c >= 0 ? c : id == M.voc.end_id ? S : W;
}

static int id_of(int row)
{
	return row == S ? M.voc.end_id : llasa_code_to_id(&M.voc, row);
}

static void models_init(uint64_t seed)
{
	pcg_rng rng;

	pcg_rng_init(&rng, seed, 1);
	for (int s = 0; s < STATES; s++)
		for (int r = 0; r < W; r++) {
			/* a few likely successors per row; the end token rare */
			M.A[s][r] = r == S ? 0.6f : (float)(1.6 * normal(&rng));
			M.D[s][r] = (float)normal(&rng);
			M.E[s][r] = (float)(1.5 * normal(&rng));
		}
	for (int k = 0; k < 3; k++)
		for (int r = 0; r < W; r++)
			M.B[k][r] = r == S ? 0 : (float)(0.8 * normal(&rng));
	for (int s = 0; s < STATES; s++) {
		double m = -1e30, z = 0;
		for (int r = 0; r < W; r++)
			m = M.A[s][r] > m ? M.A[s][r] : m;
		for (int r = 0; r < W; r++)
			z += M.P[s][r] = exp(M.A[s][r] - m);
		for (int r = 0; r < W; r++)
			M.P[s][r] /= z;
	}
	for (int a = 0; a < W; a++)
		for (int r = 0; r < W; r++)
			M.Pk[0][a][r] = M.P[a][r];
	for (int k = 1; k < MAX_HEADS; k++)
		for (int a = 0; a < W; a++)
			for (int r = 0; r < W; r++) {
				double v = 0;
				for (int b = 0; b < W; b++)
					v += M.Pk[k - 1][a][b] * M.P[b][r];
				M.Pk[k][a][r] = v;
			}
}

/* The target's logits after ctx[0..n). */
static void target_logits(const int *ctx, int n, float *out)
{
	const int s = state_of(ctx[n - 1]);

	for (int r = 0; r < W; r++)
		out[r] = M.A[s][r] + M.B[n % 3][r];
}

/* The target's distribution after ctx[0..n) under samp. */
static void target_dist(const int *ctx, int n, const pcg_sampling *samp, float *q)
{
	float lg[W];
	pcg_err err = { "" };

	target_logits(ctx, n, lg);
	if (pcg_probs(lg, W, samp, q, &err) < 0)
		CHECKF(0, "pcg_probs: %s", err.msg);
}

/* The speech tokens in ctx[0..n): how far the utterance has come. */
static int spoken(const int *ctx, int n)
{
	int k = 0;

	while (k < n && llasa_id_to_code(&M.voc, ctx[n - 1 - k]) >= 0)
		k++;
	return k;
}

/* The draft's logits: the target's, perturbed by D (the fading draft more
 * the further the utterance), and by E for a lying server's samples. */
static void draft_logits(int kind, int lie, const int *ctx, int n, float *out)
{
	const int s = state_of(ctx[n - 1]);
	const int k = spoken(ctx, n);
	const double scale = kind == DRAFT_NEAR ? 0.6 : kind == DRAFT_FAR ? 1.5
			     : k < 20 ? 0.1 : 0.25 * (k - 20);

	target_logits(ctx, n, out);
	for (int r = 0; r < W; r++)
		out[r] += (float)(scale * M.D[s][r] + (lie ? M.E[s][r] : 0));
}

/* MTP head k after ctx[0..n): the Markov part's prediction k + 2 tokens on
 * (the token q gives, then k + 1 more), truncated as q is. */
static void head_dist(const int *ctx, int n, int k, const pcg_sampling *samp, float *out)
{
	double v[W] = { 0 };
	float lg[W];
	pcg_err err = { "" };

	if (k >= MAX_HEADS) { /* a server would refuse it */
		CHECKF(0, "head %d asked, the target has %d", k + 1, MAX_HEADS);
		return;
	}
	target_dist(ctx, n, samp, out);
	for (int a = 0; a < W; a++)
		for (int r = 0; out[a] > 0 && r < W; r++)
			v[r] += out[a] * M.Pk[k][a][r];
	for (int r = 0; r < W; r++)
		lg[r] = (float)log(v[r] + 1e-12);
	if (pcg_probs(lg, W, samp, out, &err) < 0)
		CHECKF(0, "pcg_probs: %s", err.msg);
}

/* ---- the servers ---- */

typedef struct server {
	int draft_kind, lie, lose_every;
	int in_ahead;                       /* serving a propose ahead */
	int ctx[PROTO_MAX_APPEND], n, live; /* the one session's cache */
	long requests;
	float vals[PROTO_MAX_VEC * W];
	proto_buf buf;
} server;

/* What a round asked (reset before each spec_round). */
typedef struct shape {
	int proposed;     /* a propose to the draft at the round's start */
	int ahead;        /* tokens drafted ahead (spec_io's start) */
	int scored;       /* positions of the target's score */
	int heads;
} shape;

typedef struct route {
	server draft, target;
	shape round;
	proto_msg held;    /* the request started, served at finish */
	proto_buf hbuf;    /* its reply's buffer */
} route;

static void answer(server *sv, const proto_msg *q, proto_msg *rep)
{
	const proto_model_req *m = proto_model(q);
	pcg_rng rng;

	proto_init(rep, PROTO_OK, q->id);
	if (q->type == PROTO_DROP) {
		sv->live = 0;
		return;
	}
	sv->requests++;
	if (m->pos > (sv->live ? sv->n : 0) ||
	    (sv->lose_every && m->pos > 0 && sv->requests % sv->lose_every == 0)) {
		sv->live = 0;
		proto_error(rep, q->id, PROTO_E_UNKNOWN_SESSION, "session %llu not held",
			    (unsigned long long)m->session);
		return;
	}
	sv->live = 1;
	sv->n = m->pos;
	for (int i = 0; i < m->n_append; i++)
		sv->ctx[sv->n++] = m->append[i];
	const int width = m->rows.n == 2 ? m->rows.end[0] - m->rows.begin[0] + 1 : -1;
	if (width != W) {
		CHECKF(0, "rows of %d, the models have %d", width, W);
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "rows");
		return;
	}
	proto_init(rep, PROTO_PROBS, q->id);
	proto_probs *p = &rep->probs;
	p->width = W;
	p->values = sv->vals;
	if (q->type == PROTO_SCORE) {
		const int heads = q->score.heads;
		for (int i = 0; i < m->n; i++) {
			const int at = sv->n - m->n + i + 1;
			float *v = sv->vals + (size_t)p->n_vec++ * W;
			target_dist(sv->ctx, at, &m->samp, v);
			if (sv->lie == LIE_BONUS && m->n > 1 && i == m->n - 1) {
				/* the block's last vector: another distribution */
				float lg[W];
				draft_logits(DRAFT_NEAR, 1, sv->ctx, at, lg);
				pcg_probs(lg, W, &m->samp, v, NULL);
			}
			for (int k = 0; k < heads; k++)
				head_dist(sv->ctx, at, k, &m->samp, sv->vals + (size_t)p->n_vec++ * W);
		}
		return;
	}
	if (q->propose.draws > 0) {
		/* the target's run: n tokens of the target's distribution, each
		 * after the last (and the forced tokens due before it), token i
		 * drawn by its index as the verifier draws one a round; it stops
		 * after the stop token */
		const proto_propose *pq = &q->propose;
		for (int i = 0; i < m->n; i++) {
			for (int f = 0; f < pq->n_forced; f++)
				if (pq->forced_at[f] == i)
					sv->ctx[sv->n++] = pq->forced[f];
			float *v = sv->vals + (size_t)p->n_vec++ * W;
			target_dist(sv->ctx, sv->n, &m->samp, v);
			const int row = pcg_sample(v, W, pcg_rng_uniform_at(pq->seed,
									     pq->draws + (uint64_t)i, 0));
			p->x[p->n_x++] = id_of(row < 0 ? W - 1 : row);
			sv->ctx[sv->n++] = p->x[p->n_x - 1];
			if (pq->stop && p->x[p->n_x - 1] == pq->stop_id)
				break;
		}
		return;
	}
	/* propose: n tokens, each after the last; the request's seed */
	pcg_rng_init(&rng, q->propose.seed, 5);
	for (int i = 0; i < m->n; i++) {
		float lg[W], lie[W], *v = sv->vals + (size_t)p->n_vec++ * W;
		draft_logits(sv->draft_kind, 0, sv->ctx, sv->n, lg);
		pcg_probs(lg, W, &m->samp, v, NULL);
		const float *from = v;
		if (sv->lie == LIE_AHEAD && sv->in_ahead) {
			draft_logits(sv->draft_kind, 1, sv->ctx, sv->n, lg);
			pcg_probs(lg, W, &m->samp, lie, NULL);
			from = lie;
		}
		const int row = pcg_sample(from, W, pcg_rng_uniform(&rng));
		p->x[p->n_x++] = id_of(row < 0 ? 0 : row);
		sv->ctx[sv->n++] = p->x[p->n_x - 1];
	}
}

/* Serves q at sv into r through the wire format (r's vectors in buf). */
static int serve(server *sv, proto_buf *buf, const proto_msg *q, proto_msg *r, pcg_err *err)
{
	static proto_msg rep;

	answer(sv, q, &rep);
	if (proto_pack_buf(&rep, buf, err) < 0)
		return -1;
	return proto_parse(buf->data, buf->len, r, err);
}

static int call(void *ctx, int stage, proto_msg *q, proto_msg *r, pcg_err *err)
{
	route *to = ctx;

	if (q->type == PROTO_PROPOSE)
		to->round.proposed = 1;
	if (q->type == PROTO_SCORE) {
		to->round.scored = q->score.req.n;
		to->round.heads = q->score.heads;
	}
	server *sv = stage == SPEC_DRAFT ? &to->draft : &to->target;
	return serve(sv, &sv->buf, q, r, err);
}

/* The draft's request ahead is kept at start and served at finish, after
 * the target's score (as over sockets when the draft is the slower). The
 * lying draft lies only here. */
static int start(void *ctx, int stage, proto_msg *q, pcg_err *err)
{
	route *to = ctx;

	(void)stage;
	(void)err;
	to->held = *q;
	to->round.ahead = q->propose.req.n;
	return 0;
}

static int finish(void *ctx, int stage, proto_msg *q, proto_msg *r, pcg_err *err)
{
	route *to = ctx;

	(void)q;
	(void)stage;
	to->draft.in_ahead = 1;
	const int rc = serve(&to->draft, &to->hbuf, &to->held, r, err);
	to->draft.in_ahead = 0;
	return rc;
}

/* ---- sessions and their statistics ---- */

typedef struct config {
	const char *what, *policy;
	int lookahead, sequential, draft_kind, lie, lose_every, max_tokens, sessions;
	pcg_sampling samp;
	const char *costs;   /* auto's cost terms (NULL: the defaults) */
} config;

/* What a configuration's sessions gave. */
typedef struct tally {
	hist tok, grp, bonus, checked_ahead, reused, bonus_grp, reused_grp;
	long tokens, rounds, alone, sequential, pipelined, reused_rounds, resends;
	long heads_asked;            /* rounds whose score asked for MTP heads */
	double accepted, drafted;
	int lookaheads[PROTO_MAX_N]; /* drafting rounds by lookahead */
	int mislabelled;
} tally;

/* A token's path within its round: 'b' the bonus position of a sequential
 * round, 'a' the draft ahead checked in its place, 'r' a round whose drafts
 * were drafted ahead, 0 otherwise. */
static char path_of(const shape *sh, int index, int reused)
{
	const int L = sh->scored - 1;

	if (L >= 1 && index == L)
		return sh->ahead > 0 ? 'a' : 'b';
	return reused ? 'r' : 0;
}

static void run_config(const config *c, spec_env *env, asg *groups, tally *ty, uint64_t base)
{
	static route to;
	const asg_view *a = asg_get(groups);
	const int G = (int)(a->M + (W - a->n));
	float q[W];
	double d[W > 64 ? W : 64];
	int *prompt = NULL;
	size_t np = 0;
	pcg_err err = { "" };
	pcg_rng rng;
	llasa_prompt pr = { .text = TEXT };
	const double t0 = pcg_now();

	memset(ty, 0, sizeof *ty);
	memset(&to, 0, sizeof to);
	to.draft.draft_kind = c->draft_kind;
	to.draft.lie = c->lie == LIE_AHEAD ? LIE_AHEAD : LIE_NONE;
	to.target.lie = c->lie == LIE_BONUS ? LIE_BONUS : LIE_NONE;
	to.draft.lose_every = to.target.lose_every = c->lose_every;
	if (llasa_prompt_ids(env->tok, env->voc, &pr, &prompt, &np, &err) < 0) {
		CHECKF(0, "prompt: %s", err.msg);
		return;
	}
	env->costs = (cost_terms){ 0 };
	if (c->costs && cost_terms_parse(c->costs, &env->costs, &err) < 0)
		CHECKF(0, "costs: %s", err.msg);
	pcg_rng_init(&rng, base, 99);
	spec_io io = { .call = call, .start = start, .finish = finish, .ctx = &to };
	const int is_pcg = strstr(c->policy, "pcg") != NULL;
	static int ctx[PROTO_MAX_APPEND];
	for (int i = 0; i < c->sessions; i++) {
		proto_synth req;
		memset(&req, 0, sizeof req);
		snprintf(req.text, sizeof req.text, "%s", TEXT);
		snprintf(req.policy, sizeof req.policy, "%s", c->policy);
		req.lookahead = c->lookahead;
		req.samp = c->samp;
		req.seed = base + (uint64_t)i;
		req.max_tokens = c->max_tokens;
		req.sequential = c->sequential;
		spec_session *s = spec_new(env, &req, groups, 1, &err);
		CHECKF(s != NULL, "%s: spec_new: %s", c->what, err.msg);
		if (s == NULL)
			break;
		int y[MAXT], lab[MAXT], n = 0, rc = 0;
		char how[MAXT];
		while (rc == 0) {
			const int *tok, *grp;
			memset(&to.round, 0, sizeof to.round);
			if ((rc = spec_round(s, &io, &err)) < 0)
				break;
			const shape *sh = &to.round;
			const int drafting = sh->scored > 1 || sh->heads > 0;
			const int reused = drafting && !sh->proposed && sh->heads == 0 &&
					   strncmp(c->policy, "mtp-", 4) != 0;
			ty->rounds++;
			ty->heads_asked += sh->heads > 0;
			ty->alone += !drafting;
			ty->sequential += drafting && !sh->ahead;
			ty->pipelined += sh->ahead > 0;
			ty->reused_rounds += reused;
			if (drafting && sh->scored - 1 < PROTO_MAX_N)
				ty->lookaheads[sh->scored - 1]++;
			const int m = spec_last_round(s, &tok, &grp);
			for (int k = 0; k < m && n < MAXT - 1; k++) {
				y[n] = tok[k];
				lab[n] = grp[k];
				how[n++] = path_of(sh, k, reused);
			}
			if (rc == 1 && n < c->max_tokens && n < MAXT) { /* the end token */
				y[n] = M.voc.end_id;
				lab[n] = -1;
				how[n++] = path_of(sh, m, reused);
			}
		}
		CHECKF(rc == 1, "%s: spec_round: %s", c->what, err.msg);
		proto_msg *res = calloc(1, sizeof *res);
		spec_result(s, 0, res);
		ty->accepted += res->result.stats[PROTO_STAT_ACCEPTED];
		ty->drafted += res->result.stats[PROTO_STAT_DRAFTED];
		ty->resends += (long)res->result.stats[PROTO_STAT_RESENDS];
		free(res);
		spec_drop(s, &io);
		spec_free(&s);
		if (rc != 1)
			break;
		/* the statistics: q_t given the prompt and y_1..y_{t-1} */
		memcpy(ctx, prompt, np * sizeof *ctx);
		for (int t = 0; t < n; t++) {
			const int row = state_of(y[t]);
			target_dist(ctx, (int)np + t, &c->samp, q);
			ctx[np + (size_t)t] = y[t];
			ty->tokens++;
			for (int j = 0; j < W; j++)
				d[j] = q[j];
			const double u = pit(d, W, row, pcg_rng_uniform(&rng));
			hist_add(&ty->tok, t, u);
			if (how[t] == 'b')
				hist_add(&ty->bonus, -1, u);
			if (how[t] == 'a')
				hist_add(&ty->checked_ahead, -1, u);
			if (how[t] == 'r')
				hist_add(&ty->reused, -1, u);
			if (!is_pcg)
				continue;
			const int K = lab[t] >= 0 ? lab[t] : draw_group(a, row, &rng);
			if (!member(a, G, row, K)) {
				ty->mislabelled++;
				continue;
			}
			group_masses(a, W, G, q, d);
			const double ug = pit(d, G, K, pcg_rng_uniform(&rng));
			hist_add(&ty->grp, t, ug);
			if (how[t] == 'b')
				hist_add(&ty->bonus_grp, -1, ug);
			if (how[t] == 'r' || how[t] == 'a')
				hist_add(&ty->reused_grp, -1, ug);
		}
	}
	free(prompt);
	proto_buf_free(&to.draft.buf);
	proto_buf_free(&to.target.buf);
	proto_buf_free(&to.hbuf);
	printf(" %s: %d sessions, %.2f tokens a session, %.2f rounds, acceptance %.3f; rounds: "
	       "%ld alone, %ld sequential, %ld pipelined, %ld with drafts reused; %ld resends "
	       "(%.1f s)\n",
	       c->what, c->sessions, (double)ty->tokens / c->sessions,
	       (double)ty->rounds / c->sessions, ty->drafted > 0 ? ty->accepted / ty->drafted : 0,
	       ty->alone, ty->sequential, ty->pipelined, ty->reused_rounds, ty->resends,
	       pcg_now() - t0);
	CHECKF(ty->mislabelled == 0, "%s: %d tokens labelled with a group they are not in",
	       c->what, ty->mislabelled);
}

static int n_tests;

static void expect(const char *what, const char *part, const hist *h, int n_pos, int want)
{
	char name[96];

	snprintf(name, sizeof name, "%s: %s", what, part);
	pit_expect(name, h, n_pos, want, ALPHA, &n_tests);
}

/* Overlapping groups over the S speech rows: row r in groups r, r - 1 and
 * r - 7 (mod S), weights by a score, so that Q_c differs from q. */
static asg *make_groups(pcg_err *err)
{
	uint64_t start[S + 1];
	uint32_t members[3 * S];
	double score[3 * S];
	int nnz = 0;

	for (int k = 0; k < S; k++) {
		int m[3] = { k, (k + 1) % S, (k + 7) % S };
		for (int i = 0; i < 3; i++) /* ascending */
			for (int j = i + 1; j < 3; j++)
				if (m[j] < m[i]) {
					int t = m[i];
					m[i] = m[j];
					m[j] = t;
				}
		start[k] = (uint64_t)nnz;
		for (int i = 0; i < 3; i++) {
			members[nnz] = (uint32_t)m[i];
			score[nnz++] = 1.0 + (m[i] + k) % 3;
		}
	}
	start[S] = (uint64_t)nnz;
	return asg_from_groups(S, S, start, members, score, (uint32_t)M.voc.speech_first, 0, 0,
			       err);
}

int main(int argc, char **argv)
{
	const char *root = getenv("PCG_ROOT");
	const uint64_t base = argc > 1 ? strtoull(argv[1], NULL, 10) : BASE_SEED;
	char path[4200];
	pcg_err err = { "" };

	/* the demo's tokenizer for the prompt; S of its speech tokens */
	snprintf(path, sizeof path, "%s/models/demo/tokenizer.json", root ? root : ".");
	tokenizer *tok = tok_load(path, &err);
	if (tok == NULL)
		SKIP("%s (make voice)", err.msg);
	if (llasa_vocab_init(tok, &M.voc, &err) < 0 || M.voc.speech_count < S) {
		CHECKF(0, "%s", err.msg);
		return check_done("test_loops");
	}
	M.voc.speech_count = S;
	models_init(base);
	asg *groups = make_groups(&err);
	CHECKF(groups != NULL, "asg: %s", err.msg);
	if (groups == NULL)
		return check_done("test_loops");
	spec_env env = { .tok = tok, .voc = &M.voc, .target_heads = 3 };
	const pcg_sampling topk = { 1.0f, 20, 1.0f }, plain = { 1.0f, 0, 1.0f },
			   topp = { 0.9f, 0, 0.95f };
	/* auto's terms: a draft step and a trip that drafting pays for while
	 * the draft is good and not once it fades (the target alone's runs
	 * share a trip: a trip weighs on the drafting rounds alone) */
	const char *costs = "1,0.15,0.15,0.1,0,0.4";
	const config cfg[] = {
		{ "sd, sequential", "sd", 3, 1, DRAFT_NEAR, 0, 0, T, 4000, topk, NULL },
		{ "sd, pipelined", "sd", 3, 0, DRAFT_NEAR, 0, 0, T, 4000, topk, NULL },
		{ "pcg, sequential", "pcg", 3, 1, DRAFT_FAR, 0, 0, T, 4000, topp, NULL },
		{ "pcg, pipelined", "pcg", 4, 0, DRAFT_FAR, 0, 0, T, 4000, topp, NULL },
		{ "sd, auto", "sd", 0, 0, DRAFT_FADING, 0, 13, TA, 1500, plain, costs },
		{ "pcg, auto", "pcg", 0, 0, DRAFT_FADING, 0, 13, TA, 1500, plain, costs },
		{ "mtp-sd", "mtp-sd", 3, 0, DRAFT_NEAR, 0, 0, T, 4000, topk, NULL },
		{ "mtp-pcg", "mtp-pcg", 2, 0, DRAFT_NEAR, 0, 0, T, 4000, topp, NULL },
	};
	const int n_cfg = (int)(sizeof cfg / sizeof *cfg);
	tally *ty = calloc((size_t)n_cfg + 3, sizeof *ty);
	double t0 = pcg_now();

	printf("the round loop on synthetic servers: %d speech rows and the end token, at most "
	       "%d tokens (auto: %d), base seed %llu, alpha %.2g per test\n", S, T, TA,
	       (unsigned long long)base, ALPHA);
	for (int i = 0; i < n_cfg; i++) {
		const config *c = &cfg[i];
		tally *t = &ty[i];
		run_config(c, &env, groups, t, base + 100000 * (uint64_t)i);
		const int pcg = strstr(c->policy, "pcg") != NULL;
		/* pcg is exact for groups: its tokens are tested at group level */
		if (!pcg)
			expect(c->what, "tokens ~ q", &t->tok, T, 1);
		else
			expect(c->what, "groups ~ Q_c", &t->grp, T, 1);
		if (t->bonus.n > 0)
			expect(c->what, pcg ? "bonus tokens' groups" : "bonus tokens",
			       pcg ? &t->bonus_grp : &t->bonus, 0, 1);
		if (!pcg && t->checked_ahead.n > 0)
			expect(c->what, "drafts ahead checked as bonus", &t->checked_ahead, 0, 1);
		if (t->reused.n > 0)
			expect(c->what, pcg ? "drafts ahead reused or checked, groups"
					    : "drafts ahead reused", pcg ? &t->reused_grp : &t->reused,
			       0, 1);
	}
	/* every path was taken, often enough to see a fault */
	CHECKF(ty[0].bonus.n > 2000, "sequential sd: %ld bonus tokens", ty[0].bonus.n);
	CHECKF(ty[1].checked_ahead.n > 2000 && ty[1].reused.n > 5000,
	       "pipelined sd: %ld drafts ahead checked, %ld tokens of reused drafts",
	       ty[1].checked_ahead.n, ty[1].reused.n);
	CHECKF(ty[3].reused_grp.n > 3000, "pipelined pcg: %ld groups of drafts ahead",
	       ty[3].reused_grp.n);
	for (int i = 4; i <= 5; i++) {
		int distinct = 0;
		for (int L = 1; L < PROTO_MAX_N; L++)
			distinct += ty[i].lookaheads[L] > 0;
		printf(" %s: lookaheads", cfg[i].what);
		for (int L = 1; L < PROTO_MAX_N; L++)
			if (ty[i].lookaheads[L])
				printf(" %d (%d rounds)", L, ty[i].lookaheads[L]);
		printf("\n");
		CHECKF(distinct >= 5 && ty[i].alone > 1000 && ty[i].sequential > 1000 &&
		       ty[i].pipelined > 1000 && ty[i].reused_rounds > 200 && ty[i].resends > 1000,
		       "%s: %d lookaheads, %ld rounds alone, %ld sequential, %ld pipelined, %ld "
		       "reused, %ld resends: auto did not change the rounds", cfg[i].what, distinct,
		       ty[i].alone, ty[i].sequential, ty[i].pipelined, ty[i].reused_rounds,
		       ty[i].resends);
	}
	CHECKF(ty[6].accepted > 0.1 * ty[6].drafted && ty[7].accepted > 0.1 * ty[7].drafted,
	       "the heads drafted nothing acceptable: %.0f of %.0f, %.0f of %.0f", ty[6].accepted,
	       ty[6].drafted, ty[7].accepted, ty[7].drafted);
	CHECKF(n_tests == N_TESTS, "%d tests, ALPHA assumes %d", n_tests, N_TESTS);

	/* a draft slower than the target: drafting cannot pay even with every
	 * draft accepted, so auto never drafts, not even to measure (a probe
	 * would cost the draft's catch-up over every token since the last) */
	const config slow = { "sd, auto, a draft slower than the target", "sd", 0, 0, DRAFT_NEAR, 0,
			      0, TA, 200, plain, "1,1.2,0.3,0.1" };
	tally *ts = calloc(1, sizeof *ts);
	run_config(&slow, &env, groups, ts, base + 800000);
	CHECKF(ts->sequential + ts->pipelined == 0 && ts->drafted == 0,
	       "%s: %ld rounds drafted", slow.what, ts->sequential + ts->pipelined);
	/* a draft at half the target's step, whose catch-up over the prompt
	 * (a block of about 80 positions) is more than what drafting could
	 * save over the 16 tokens left: no probe */
	const config short_one = { "sd, auto, a probe not worth its catch-up", "sd", 0, 0,
				   DRAFT_NEAR, 0, 0, T, 200, plain, "1,0.5,0.5,0.1" };
	run_config(&short_one, &env, groups, ts, base + 810000);
	CHECKF(ts->sequential + ts->pipelined == 0 && ts->drafted == 0,
	       "%s: %ld rounds drafted", short_one.what, ts->sequential + ts->pipelined);
	/* MTP heads whose cost outweighs what they could win: auto leaves the
	 * rounds to the target alone and asks for no heads at all (they cost
	 * the target a product and lm_head each at every position) */
	const config costly_heads = { "mtp-sd, auto, heads that cannot pay", "mtp-sd", 0, 0,
				      DRAFT_NEAR, 0, 0, T, 200, plain, "1,0,0.3,0.1,2" };
	run_config(&costly_heads, &env, groups, ts, base + 820000);
	CHECKF(ts->heads_asked == 0 && ts->drafted == 0, "%s: %ld rounds asked for heads",
	       costly_heads.what, ts->heads_asked);
	free(ts);

	printf("power: these must be rejected\n");
	const config lie_ahead = { "sd, drafts ahead from another p", "sd", 3, 0, DRAFT_NEAR,
				   LIE_AHEAD, 0, T, 4000, topk, NULL };
	run_config(&lie_ahead, &env, groups, &ty[n_cfg], base + 900000);
	expect(lie_ahead.what, "drafts ahead reused", &ty[n_cfg].reused, 0, 0);
	const config lie_bonus = { "sd, the bonus from another q", "sd", 3, 1, DRAFT_NEAR,
				   LIE_BONUS, 0, T, 4000, topk, NULL };
	run_config(&lie_bonus, &env, groups, &ty[n_cfg + 1], base + 910000);
	expect(lie_bonus.what, "bonus tokens", &ty[n_cfg + 1].bonus, 0, 0);
	expect(cfg[3].what, "tokens ~ q", &ty[3].tok, 0, 0);
	printf("(%.1f s)\n", pcg_now() - t0);

	free(ty);
	asg_close(&groups);
	tok_free(&tok);
	return check_done("test_loops");
}
