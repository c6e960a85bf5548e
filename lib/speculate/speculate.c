/* speculate.c: the round loop of speculative decoding (see speculate.h). */
#include "speculate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "costmodel.h"
#include "policy.h"
#include "rng.h"
#include "sampling.h"
#include "synth.h"
#include "viterbi.h"

/* A run asks for at most this much of the target's time (its tokens come
 * to the client together: a run delays them by as much). */
#define RUN_SECONDS 0.1

/* A phoneme voice's prompt text and forced tokens for one request: the
 * speaker token and espeak-ng's phoneme tokens, and for each phoneme its
 * token id and start frame. */
typedef struct forced {
	char *text;
	int *id, *frame;
	int n, n_frames, unknown;
} forced;

struct spec_session {
	spec_env env;
	uint64_t id;
	/* the request */
	int L, max_tokens, f16, viterbi_k;
	pcg_sampling samp;
	uint64_t seed;
	int mtp, viterbi, is_none, heads;
	policy *pol;
	policy_result res;
	forced fc;
	/* the output rows: speech (+ the end token) */
	int width;
	llama_rows rows;
	/* the state between rounds */
	int *ctx, *sp;           /* context ids (prompt, forced, committed); committed speech ids */
	int n, nsp;              /* ids in ctx; in sp */
	int j;                   /* the next forced token (fc.id[j]) to go into ctx */
	int rounds, ended;       /* rounds run; the end token was committed */
	int d_sync, t_sync;      /* positions of ctx the draft's and the target's caches hold */
	int resends;             /* times a server lost the session and got ctx again */
	int have_heads;          /* hp holds the MTP heads' distributions */
	/* pipelined rounds: while the target verifies a block, the draft drafts
	 * on from its last draft as if all were accepted. n_ahead drafts are
	 * ready for the next round: ids ax, vectors in p from vector p_off */
	int pipe, n_ahead, p_off, ax[PROTO_MAX_N];
	int pipe_next, n_piped;  /* whether the next round drafts ahead; rounds that did */
	int probe_every, next_probe; /* auto, the target alone: when it drafts to measure */
	int can_pay;             /* auto: drafting beats the target alone at full acceptance
				  * (and MTP heads, at a common acceptance): probes are made */
	double t_alone, t_probes; /* auto: the model's seconds of the rounds the target ran
				   * alone, and of the probes' catch-up */
	int ahead_pipe;          /* the choice the drafts ahead were made for */
	/* the lookahead: the request's, or chosen each round (auto_l) from the
	 * acceptance per position so far (tries, accepted) by lib/speculate/costmodel.c */
	int auto_l, L_next;
	double tries_pos[PROTO_MAX_N + 1], acc_pos[PROTO_MAX_N + 1];
	int n_drafting;          /* rounds that drafted (st[DRAFTED]: their drafts) */
	/* the target alone (policy none, and auto's rounds that do not draft):
	 * it samples a run of tokens a request, each drawn as a round of its own
	 * would draw it, so the tokens are the same, and a run counts as the
	 * rounds (target passes) it holds; run_next the next run's length (0:
	 * one token a round, sampled here) */
	int run_next;
	const float *hp[PROTO_MAX_HEADS + 1]; /* the heads' vectors (in hv) at the last
						* committed token: the next round's drafts */
	int last[PROTO_MAX_N], last_groups[PROTO_MAX_N], n_last; /* the last round's
						* tokens and their ASG groups */
	double st[PROTO_STAT_POS0];   /* the result's statistics, by enum proto_stat */
	double accept_pos[PROTO_MAX_N]; /* rounds that accepted position i */
	double t0, t_server;     /* pcg_now() at the start; the servers' compute (s) */
	double t_server_target;  /* the target server's compute (s) */
	double t_first;          /* the first round's seconds (the prompt's prefill in it) */
	int tok_first;           /* and its tokens */
	/* buffers */
	proto_msg *q, *r;        /* a request to a server, its reply */
	proto_msg *qd, *rd;      /* the draft's request ahead, its reply */
	float *p, *ap;           /* PROTO_MAX_N x width: the draft's vectors p of the
				  * round's drafts; of the drafts ahead */
	float *qv;               /* (L + 1) x width: the target's vectors q of the block */
	float *hv;               /* PROTO_MAX_VEC x width, MTP: q and the heads' vectors
				  * of every scored position */
};

/* Row index of a model id in the output rows (speech codes, then end). */
static int id_row(const spec_session *s, int id)
{
	int c = llasa_id_to_code(s->env.voc, id);
	return c >= 0 ? c : id == s->env.voc->end_id && !s->env.voice ? s->width - 1 : -1;
}

static int row_id(const spec_session *s, int row)
{
	return row == s->width - 1 && !s->env.voice ? s->env.voc->end_id
						    : llasa_code_to_id(s->env.voc, row);
}

static int next_lookahead(spec_session *s);
static int drafting_can_pay(const spec_session *s);
static int probe_worth(const spec_session *s, double catch_up);

static void forced_free(forced *f)
{
	free(f->text);
	free(f->id);
	free(f->frame);
	memset(f, 0, sizeof *f);
}

static int forced_make(const spec_env *env, const proto_synth *req, forced *f, pcg_err *err)
{
	const voice_info *vi = env->voice;
	voice_render r;
	char tok[32];
	size_t len = 0;

	memset(f, 0, sizeof *f);
	if (req->speaker >= vi->n_speakers)
		return pcg_fail(err, "field 'speaker': %d, the voice has %d speakers", req->speaker,
				vi->n_speakers);
	if (voice_speak(&vi->speakers[req->speaker], req->text, vi->sample_rate, vi->hop, 0, &r,
			err) < 0)
		return -1;
	f->text = malloc((size_t)(r.n_ph + 1) * 32);
	f->id = malloc((size_t)(2 * r.n_ph + 1) * sizeof *f->id);
	f->frame = malloc((size_t)(2 * r.n_ph + 1) * sizeof *f->frame);
	if (f->text == NULL || f->id == NULL || f->frame == NULL) {
		voice_render_free(&r);
		forced_free(f);
		return pcg_fail(err, "out of memory");
	}
	voice_speaker_token(req->speaker, tok, sizeof tok);
	len += (size_t)sprintf(f->text, "%s", tok);
	for (int i = 0; i < r.n_ph; i++) {
		voice_phone_token(r.ph[i].name, tok, sizeof tok);
		int id = tok_token_id(env->tok, tok, strlen(tok));
		if (id < 0) { /* a phoneme the corpus never had: the pause stands in */
			id = env->unk_phone;
			f->unknown++;
			snprintf(tok, sizeof tok, "<|p__|>");
		}
		len += (size_t)sprintf(f->text + len, "%s", tok);
		f->id[f->n] = id;
		f->frame[f->n++] = r.ph[i].frame;
		if (vi->next_phoneme) { /* where this phoneme goes: the next one */
			voice_next_token(i + 1 < r.n_ph ? r.ph[i + 1].name : "_", tok, sizeof tok);
			int nid = tok_token_id(env->tok, tok, strlen(tok));
			f->id[f->n] = nid >= 0 ? nid : env->unk_next;
			f->frame[f->n++] = r.ph[i].frame;
		}
	}
	f->n_frames = r.n_frames;
	voice_render_free(&r);
	if (f->n_frames == 0) {
		forced_free(f);
		return pcg_fail(err, "text: espeak-ng speaks it as silence");
	}
	return 0;
}

int spec_policy_parse(const char *name, int *mtp, int *viterbi, int *is_none, int *kind)
{
	/* mtp-<policy>: the target's MTP heads draft and <policy> verifies;
	 * mtp-viterbi: the heads' Viterbi path is emitted unverified. */
	*mtp = !strncmp(name, "mtp-", 4);
	*viterbi = *mtp && !strcmp(name + 4, "viterbi");
	const char *pname = *mtp ? name + 4 : name;
	*is_none = !strcmp(pname, "none") || *viterbi;
	*kind = *viterbi ? -1 : policy_kind_from_name(pname);
	return (!*is_none && *kind < 0) || (*mtp && !*viterbi && *kind < 0) ? -1 : 0;
}

spec_session *spec_new(const spec_env *env, const proto_synth *req, const asg *groups, uint64_t id,
		       pcg_err *err)
{
	return spec_new_prompt(env, req, groups, id, NULL, 0, err);
}

/* A cloning prompt's codes: a LLaSA model's speech tokens, each one it has. */
static int check_prompt(const spec_env *env, const int32_t *codes, size_t n, pcg_err *err)
{
	if (env->voice != NULL)
		return pcg_fail(err, "a cloning prompt needs a LLaSA model: this one speaks with a "
				"phoneme voice");
	for (size_t i = 0; i < n; i++)
		if (codes[i] < 0 || codes[i] >= env->voc->speech_count)
			return pcg_fail(err, "prompt code %d (position %zu) is beyond the model's %d "
					"speech tokens", codes[i], i, env->voc->speech_count);
	return 0;
}

/* The request's policy, its parameters and its lookahead into s (L, auto_l,
 * mtp, viterbi, is_none, heads, pipe) and pp (the rule's kind, beta, groups,
 * arguments); 0, or -1 with err naming the field. */
static int session_policy(spec_session *s, const spec_env *env, const proto_synth *req,
			  const asg *groups, policy_params *pp, pcg_err *err)
{
	int kind;

	s->L = req->lookahead;
	s->auto_l = s->L == 0;
	if (s->auto_l) /* the longest lookahead auto considers */
		s->L = SPEC_AUTO_MAX_L;
	if (spec_policy_parse(req->policy, &s->mtp, &s->viterbi, &s->is_none, &kind)) {
		char all[256], one_of[256];
		return pcg_fail(err, "field 'policy': '%s' is not %s, none, mtp-viterbi, or mtp- "
				"and one of %s", req->policy, policy_names(all, sizeof all, ", "),
				policy_names(one_of, sizeof one_of, " or "));
	}
	if (s->mtp && (s->L < 1 || s->L + 1 > PROTO_MAX_N))
		return pcg_fail(err, "field 'n': %d MTP heads not in [1, %d]", s->L,
				PROTO_MAX_N - 1);
	if (s->viterbi && env->tm == NULL)
		return pcg_fail(err, "policy mtp-viterbi needs a transition matrix (verifier --tm)");
	const policy_info *pi = policy_info_of(kind);
	/* lantern's neighbours: a file the request sent (it comes as groups), or
	 * the verifier's --knn */
	const asg *nbf = req->asg_len > 0 ? groups : env->knn;
	if (pi && (pi->needs & POLICY_NEEDS_ASG) && groups == NULL)
		return pcg_fail(err, "policy %s needs an ASG (verifier --asg, or pcg-synth --asg)",
				pi->name);
	if (pi && (pi->needs & POLICY_NEEDS_KNN) && nbf == NULL)
		return pcg_fail(err, "policy %s needs a neighbour file (asg-build --knn K; "
				"verifier --knn, or pcg-synth --asg)", pi->name);
	*pp = (policy_params){ .kind = (policy_kind)kind, .beta = req->beta,
			       .groups = pi && (pi->needs & POLICY_NEEDS_ASG) ? groups
				       : pi && (pi->needs & POLICY_NEEDS_KNN) ? nbf : NULL };
	for (int i = 0; i < req->n_args; i++) {
		const int a = pi ? policy_arg_index(kind, req->arg_name[i]) : -1;
		if (a < 0)
			return pcg_fail(err, "field 'args': policy %s takes no parameter '%s'",
					pi ? pi->name : req->policy, req->arg_name[i]);
		pp->arg[a] = req->arg_val[i];
		pp->arg_set |= 1u << a;
	}
	if (!s->is_none && (s->L < 1 || s->L > PROTO_MAX_LOOKAHEAD))
		return pcg_fail(err, "field 'n': lookahead %d not in [1, %d]", s->L,
				PROTO_MAX_LOOKAHEAD);
	if (s->is_none && !s->mtp)
		s->L = 0;
	if (s->is_none) /* the target alone; mtp-viterbi keeps every head it asks for */
		s->auto_l = 0;
	if (s->mtp && req->lookahead == 0) /* auto: as many heads as the target has */
		s->L = env->target_heads > 0 && env->target_heads < SPEC_MTP_HEADS ? env->target_heads
										 : SPEC_MTP_HEADS;
	s->heads = s->mtp ? s->L : 0;
	s->pipe = !req->sequential && !s->is_none && !s->mtp;
	/* the target alone samples runs of tokens itself (policy none, and
	 * auto's rounds without drafts but for MTP heads, which need the
	 * target's score), unless f16 vectors were asked for (drawn here from
	 * f16, the tokens would differ) */
	if ((s->is_none || (s->auto_l && !s->mtp)) && !s->viterbi && !req->f16 &&
	    env->run_tokens != 1)
		s->run_next = env->run_tokens > 1 ? env->run_tokens : 1;
	return 0;
}

/* The output rows: a phoneme voice's are the speech tokens alone (the
 * length is espeak-ng's, so the end token is never drawn); else speech and
 * end. */
static void session_rows(spec_session *s, const llasa_vocab *voc)
{
	if (s->env.voice) {
		s->width = voc->speech_count;
		s->rows = (llama_rows){ 1, { voc->speech_first },
					{ voc->speech_first + voc->speech_count } };
	} else {
		s->width = voc->speech_count + 1;
		s->rows = (llama_rows){ 2, { voc->speech_first, voc->end_id },
					{ voc->speech_first + voc->speech_count, voc->end_id + 1 } };
	}
}

/* The session's buffers, for a prompt of np ids; 0 or -1 with err. */
static int session_buffers(spec_session *s, size_t np, pcg_err *err)
{
	const size_t nv = (size_t)PROTO_MAX_N * s->width;

	s->ctx = malloc((np + (size_t)s->max_tokens + s->fc.n + PROTO_MAX_N) * sizeof *s->ctx);
	s->sp = malloc(((size_t)s->max_tokens + PROTO_MAX_N) * sizeof *s->sp);
	s->q = calloc(1, sizeof *s->q);
	s->r = calloc(1, sizeof *s->r);
	s->p = malloc(nv * sizeof *s->p);
	s->ap = malloc(nv * sizeof *s->ap);
	s->qd = calloc(1, sizeof *s->qd);
	s->rd = calloc(1, sizeof *s->rd);
	/* the target scores forced tokens inside a block too: a vector for each */
	s->qv = malloc(nv * sizeof *s->qv);
	if (s->mtp)
		s->hv = malloc((size_t)PROTO_MAX_VEC * s->width * sizeof *s->hv);
	if (!s->ctx || !s->sp || !s->q || !s->r || !s->p || !s->qv || (s->mtp && !s->hv) ||
	    !s->ap || !s->qd || !s->rd)
		return pcg_fail(err, "out of memory");
	return 0;
}

spec_session *spec_new_prompt(const spec_env *env, const proto_synth *req, const asg *groups,
			      uint64_t id, const int32_t *codes, size_t n_codes, pcg_err *err)
{
	if (n_codes > 0 && check_prompt(env, codes, n_codes, err) < 0)
		return NULL;
	spec_session *s = calloc(1, sizeof *s);
	policy_params pp;
	int *pids = NULL;
	size_t np = 0;

	if (s == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	s->env = *env;
	s->id = id;
	s->samp = req->samp;
	s->seed = req->seed;
	s->f16 = req->f16;
	s->viterbi_k = req->viterbi_k > 0 ? req->viterbi_k : PROTO_SYNTH_VITERBI_K;
	if (session_policy(s, env, req, groups, &pp, err) < 0)
		goto fail;
	session_rows(s, env->voc);
	if (env->voice && forced_make(env, req, &s->fc, err) < 0)
		goto fail;
	s->max_tokens = env->voice && s->fc.n_frames < req->max_tokens ? s->fc.n_frames
									 : req->max_tokens;
	if (!s->is_none) {
		pp.end_token = env->voice ? -1 : s->width - 1;
		if ((s->pol = policy_new(&pp, s->width, err)) == NULL)
			goto fail;
	}
	llasa_prompt pr = { .text = env->voice ? s->fc.text : req->text };
	if (n_codes > 0) { /* cloning: the prompt's transcript before the text, its codes */
		pr.prompt_text = req->prompt_text;
		pr.codes = (const int *)codes;
		pr.n_codes = n_codes;
	}
	if (llasa_prompt_ids(env->tok, env->voc, &pr, &pids, &np, err) < 0) {
		pcg_err_prefix(err, "text");
		goto fail;
	}
	if (session_buffers(s, np, err) < 0)
		goto fail;
	memcpy(s->ctx, pids, np * sizeof *s->ctx);
	s->n = (int)np;
	free(pids);
	if (s->env.costs.step <= 0)
		cost_terms_parse(SPEC_COSTS, &s->env.costs, err);
	s->env.costs.heads = s->mtp ? s->heads : 0; /* a score asks for them all */
	/* the target alone's runs, once grown: PROTO_MAX_N tokens, or what
	 * RUN_SECONDS of steps hold (draft_run), a trip for them all */
	const double st1 = cost_alone_step(&s->env.costs);
	const double steps = st1 > 0 ? RUN_SECONDS / st1 : PROTO_MAX_N;
	s->env.costs.run = s->run_next == 0 ? 1 : s->env.run_tokens > 1 ? s->env.run_tokens
			   : steps < 1 ? 1 : steps > PROTO_MAX_N ? PROTO_MAX_N : (int)steps;
	/* MTP heads ride on the target's score: nothing to catch up, so a
	 * probe is worth it where drafting at a common acceptance would pay */
	s->can_pay = !s->auto_l || (drafting_can_pay(s) && (!s->mtp || probe_worth(s, 0)));
	s->L_next = next_lookahead(s);
	s->t0 = pcg_now();
	return s;
fail:
	free(pids);
	spec_free(&s);
	return NULL;
}

void spec_free(spec_session **sp)
{
	spec_session *s = sp ? *sp : NULL;

	if (s == NULL)
		return;
	policy_free(&s->pol);
	forced_free(&s->fc);
	free(s->ctx);
	free(s->sp);
	free(s->q);
	free(s->r);
	free(s->p);
	free(s->ap);
	free(s->qd);
	free(s->rd);
	free(s->qv);
	free(s->hv);
	free(s);
	*sp = NULL;
}

/* Fills request q to extend from *sync: the context it lacks, then tail. */
static int fill(spec_session *s, proto_msg *q, int sync, const int *tail, int n_tail,
		pcg_err *err)
{
	proto_model_req *m = proto_model_mut(q);

	m->pos = sync;
	m->n_append = 0;
	if (s->n - sync + n_tail > PROTO_MAX_APPEND)
		return pcg_fail(err, "context of %d tokens exceeds %d", s->n + n_tail,
				PROTO_MAX_APPEND);
	for (int i = sync; i < s->n; i++)
		m->append[m->n_append++] = s->ctx[i];
	for (int i = 0; i < n_tail; i++)
		m->append[m->n_append++] = tail[i];
	return 0;
}

/* Checks the reply r to q: 0 probabilities (*sync now holds the context),
 * 1 the server lost the session (*sync = 0: ask again with everything),
 * -1 with err otherwise. timed: the server's compute counts in t_server
 * (not the draft's work ahead, which overlaps the target's). */
static int check(spec_session *s, const proto_msg *q, const proto_msg *r, int *sync,
		 int attempt, int timed, pcg_err *err)
{
	const int heads = q->type == PROTO_SCORE ? q->score.heads : 0;
	const proto_model_req *m = proto_model(q);

	if (r->type == PROTO_PROBS) {
		const proto_probs *p = &r->probs;
		*sync = s->n;
		const double compute = timed && p->n_stats > 0 ? p->stats[0] : 0;
		s->t_server += compute;
		/* the target's: its scores and its runs (proposes that draw by
		 * index, draft_run) */
		s->t_server_target += q->type == PROTO_SCORE || q->propose.draws ? compute : 0;
		/* a propose that stops at its end token answers fewer */
		const int propose = q->type == PROTO_PROPOSE, n = p->n_vec;
		const int stopped = propose && q->propose.stop && n >= 1 && n < m->n &&
				    p->n_x == n && p->x[n - 1] == q->propose.stop_id;
		if (p->width != s->width || (n != m->n * (1 + heads) && !stopped))
			return pcg_fail(err, "server answered %d x %d, asked %d x %d", n,
					p->width, m->n * (1 + heads), s->width);
		if (propose && p->n_x != n)
			return pcg_fail(err, "server drafted %d tokens, asked %d", p->n_x, n);
		return 0;
	}
	if (r->type == PROTO_ERROR && !strcmp(r->error.code, PROTO_E_UNKNOWN_SESSION) &&
	    attempt == 0) {
		*sync = 0; /* restarted or evicted: resend everything */
		s->resends++;
		return 1;
	}
	return pcg_fail(err, "%s: %s", r->type == PROTO_ERROR ? r->error.code : "reply",
			r->type == PROTO_ERROR ? r->error.msg : "unexpected type");
}

/* One request q to a model server, resending the whole context once if the
 * server lost the session. *sync is what it holds of the context; the
 * reply is r. */
static int ask(spec_session *s, const spec_io *io, int stage, int *sync, const int *tail,
	       int n_tail, proto_msg *q, proto_msg *r, int attempt, pcg_err *err)
{
	for (; attempt < 2; attempt++) {
		if (fill(s, q, *sync, tail, n_tail, err) < 0)
			return -1;
		if (io->call(io->ctx, stage, q, r, err) < 0)
			return -1;
		const int c = check(s, q, r, sync, attempt, 1, err);
		if (c <= 0)
			return c;
	}
	return pcg_fail(err, "server lost the session twice");
}

/* The drafts ahead, out of the draft's reply (read before the next
 * request: a reply may live in a buffer that the next one reuses). */
static void take_ahead(spec_session *s, int A)
{
	for (int i = 0; i < A; i++) {
		s->ax[i] = s->rd->probs.x[i];
		proto_vector(&s->rd->probs, i, s->ap + (size_t)i * s->width);
	}
}

/* The target's score s->q and the draft's propose ahead s->qd (A tokens)
 * at once, each on its own server, or one after the other when io cannot
 * overlap them; the results are the same either way. *t_wait: the seconds
 * spent waiting for the draft after the target answered. */
static int ask_both(spec_session *s, const spec_io *io, const int *tail, int n_tail, int A,
		    double *t_wait, pcg_err *err)
{
	*t_wait = 0;
	if (io->start == NULL || io->finish == NULL) {
		if (ask(s, io, SPEC_DRAFT, &s->d_sync, tail, n_tail, s->qd, s->rd, 0, err) < 0)
			return -1;
		take_ahead(s, A);
		return ask(s, io, SPEC_TARGET, &s->t_sync, tail, n_tail, s->q, s->r, 0, err);
	}
	if (fill(s, s->qd, s->d_sync, tail, n_tail, err) < 0 ||
	    io->start(io->ctx, SPEC_DRAFT, s->qd, err) < 0)
		return -1;
	/* the draft's sync moves on only when its reply is checked */
	int d_sync = s->d_sync;
	const int rt = ask(s, io, SPEC_TARGET, &s->t_sync, tail, n_tail, s->q, s->r, 0, err);
	const double t = pcg_now();
	pcg_err e2 = { "" };
	const int rd = io->finish(io->ctx, SPEC_DRAFT, s->qd, s->rd, &e2);
	*t_wait = pcg_now() - t;
	if (rt < 0)
		return -1;
	if (rd < 0) {
		*err = e2;
		return -1;
	}
	int c = check(s, s->qd, s->rd, &d_sync, 0, 0, err);
	s->d_sync = d_sync;
	if (c == 1) /* the draft lost the session: once more, with everything */
		c = ask(s, io, SPEC_DRAFT, &s->d_sync, tail, n_tail, s->qd, s->rd, 1, err);
	if (c == 0)
		take_ahead(s, A);
	return c;
}

/* Makes q a propose or score with the fields both share. */
static void request(spec_session *s, proto_msg *q, proto_type type, int n)
{
	proto_init(q, type, 0);
	proto_model_req *m = proto_model_mut(q);
	m->session = s->id;
	m->n = n;
	m->samp = s->samp;
	m->rows = s->rows;
	m->f16 = s->f16;
}

/* The forced tokens of a phoneme voice inside a round's block: fb[k] is the
 * index in s->fc of the first one due at frame nsp + k or later, for k = 1..
 * Lr + 1, so fc[fb[k] .. fb[k + 1] - 1] go in right before speech token k of
 * the round (token 0 is preceded by those already in the context). Lr shrinks
 * while the target's block (the last committed token, Lr drafts, the forced
 * tokens among them) would exceed PROTO_MAX_N vectors, or, for the target's
 * run (run: Lr + 1 tokens it samples, the forced ones sent apart in the
 * propose), while they would exceed the PROTO_MAX_N a propose carries.
 * Returns Lr. */
static int forced_in_block(const spec_session *s, int Lr, int fb[PROTO_MAX_N + 1], int run)
{
	int f = s->j;

	for (int k = 1; k <= Lr + 1; k++) {
		while (s->env.voice && f < s->fc.n && s->fc.frame[f] < s->nsp + k)
			f++;
		fb[k] = f;
	}
	while (Lr > 0 && (run ? 0 : 1 + Lr) + (fb[Lr + 1] - fb[1]) > PROTO_MAX_N)
		Lr--;
	return Lr;
}

/* The acceptance of each draft position given the ones before it, from the
 * rounds so far: the first with a prior of AUTO_PRIOR, each later one with
 * the estimate of the one before it as its prior, worth two rounds each (a
 * position seldom tried is taken to be like the one before it, so that a
 * longer lookahead gets tried when the shorter ones are accepted). */
#define AUTO_PRIOR 0.5
static void acceptance(const spec_session *s, double *a, int n)
{
	double prior = AUTO_PRIOR;

	for (int i = 0; i < n; i++) {
		a[i] = (s->acc_pos[i] + 2 * prior) / (s->tries_pos[i] + 2);
		prior = a[i];
	}
}

#define AUTO_PROBE 8
#define AUTO_MARGIN 1.05 /* the cost model predicts the pipeline to 10 % */

/* The round a session runs, for the cost model. */
static cost_kind kind_of(const spec_session *s, int pipe)
{
	return s->viterbi ? COST_VITERBI : s->is_none ? COST_NONE : s->mtp ? COST_MTP
	       : pipe ? COST_PIPELINED : COST_SEQUENTIAL;
}

/* Tokens per second of the target alone, by the cost model. */
static double none_rate(const spec_session *s)
{
	return cost_tokens_per_second(&s->env.costs, COST_NONE, NULL, 1);
}

/* The most tokens per second drafting gives at the acceptances a[0..s->L]
 * by the cost model: the kind of round the session may run (MTP heads, or
 * sequential or, unless the request asked for sequential rounds,
 * pipelined) and its lookahead *L; *pipe whether pipelined won. */
static double best_drafting(const spec_session *s, const double *a, int *L, int *pipe)
{
	const cost_terms *c = &s->env.costs;

	*pipe = 0;
	if (s->mtp) {
		*L = cost_best_lookahead(c, COST_MTP, a, s->L);
		return cost_tokens_per_second(c, COST_MTP, a, *L);
	}
	*L = cost_best_lookahead(c, COST_SEQUENTIAL, a, s->L);
	const double ts = cost_tokens_per_second(c, COST_SEQUENTIAL, a, *L);
	if (!s->pipe)
		return ts;
	const int lp = cost_best_lookahead(c, COST_PIPELINED, a, s->L);
	const double tp = cost_tokens_per_second(c, COST_PIPELINED, a, lp);
	if (tp <= ts)
		return ts;
	*pipe = 1;
	*L = lp;
	return tp;
}

/* The cost model's choice from the acceptance so far: the request's
 * lookahead (pipelined unless it asked for sequential rounds), or (auto)
 * the lookahead and kind of round predicted the most tokens per second;
 * whether its rounds draft ahead (*pipe), and whether drafting beats the
 * target alone by more than the model's error (*pays). It depends on the
 * tokens alone, never on timing; no state changes. */
static int best_lookahead(const spec_session *s, int *pipe, int *pays)
{
	double a[PROTO_MAX_N + 1];
	int L;

	*pipe = s->pipe;
	*pays = 1;
	if (!s->auto_l)
		return s->L;
	acceptance(s, a, s->L + 1);
	*pays = none_rate(s) * AUTO_MARGIN < best_drafting(s, a, &L, pipe);
	return L;
}
/* The most tokens per second drafting could give if every draft position
 * were accepted with probability acc, by the cost model. */
static double drafting_rate(const spec_session *s, double acc)
{
	double a[PROTO_MAX_N + 1];
	int L, pipe;

	for (int i = 0; i <= PROTO_MAX_N; i++)
		a[i] = acc;
	return best_drafting(s, a, &L, &pipe);
}
/* Whether drafting can beat the target alone by more than the model's
 * error at all: with every draft accepted. Where it cannot (a draft as slow
 * as the target), auto never drafts, not even to measure. */
static int drafting_can_pay(const spec_session *s)
{
	return none_rate(s) * AUTO_MARGIN < drafting_rate(s, 1);
}

/* What a probe's catch-up costs the draft: the tokens committed since it
 * last drafted, in one batched prefill (a block of that many positions at
 * the draft's step; the target's block slope stands in for the draft's).
 * MTP heads ride on the target's score: nothing to catch up. */
static double catch_up_seconds(const spec_session *s)
{
	const cost_terms *c = &s->env.costs;
	const int k = s->n - s->d_sync;

	return s->mtp || k < 1 ? 0 : c->draft * (1 + c->slope * (k - 1));
}

/* Whether a probe is worth its catch-up: what drafting would save over
 * the rest of the utterance (at most max_tokens) if its drafts were
 * accepted as speech drafts commonly are (AUTO_HOPE a position), by the
 * cost model, must be AUTO_PROBE_WORTH times what the catch-up costs. The
 * first probe's catch-up holds the prompt: against a long utterance it is
 * small, against a short one it may never be worth it. */
#define AUTO_HOPE 0.75
#define AUTO_PROBE_WORTH 4
static int probe_worth(const spec_session *s, double catch_up)
{
	const double none = none_rate(s), hoped = drafting_rate(s, AUTO_HOPE);
	const double left = (s->max_tokens - s->nsp) / none;

	return hoped > none && left * (1 - none / hoped) >= AUTO_PROBE_WORTH * catch_up;
}

/* The next round's lookahead and whether it drafts ahead (s->pipe_next),
 * once a round. Where drafting does not pay by more than the model's
 * error, the target alone (exact under every rule), with a round that
 * drafts now and then to measure on, AUTO_PROBE rounds apart at first and
 * twice as far each time it confirms. A probe's catch-up (the draft prefills
 * every token since it last drafted) is counted: a probe is made only when
 * it is worth it (probe_worth), after the first the probes' catch-up is
 * kept within AUTO_PROBE_SHARE of the session's rounds alone, so that auto
 * stays within a few per cent of the target alone where drafting does not
 * pay, and where it cannot pay even with every draft accepted there is no
 * probe at all. A probe due but not made is weighed again an interval
 * later. */
#define AUTO_PROBE_SHARE 0.03
static int next_lookahead(spec_session *s)
{
	int pays;
	const int L = best_lookahead(s, &s->pipe_next, &pays);

	if (pays) {
		s->probe_every = 0;
		return L;
	}
	if (s->probe_every == 0) {
		s->probe_every = AUTO_PROBE;
		s->next_probe = s->rounds + AUTO_PROBE;
	}
	const double probe = catch_up_seconds(s);
	if (!s->can_pay || s->rounds + 1 < s->next_probe) {
		s->pipe_next = 0;
		return 0;
	}
	if (!probe_worth(s, probe) ||
	    (s->t_probes > 0 && s->t_probes + probe > AUTO_PROBE_SHARE * s->t_alone)) {
		/* not now: weighed again an interval later (the target's runs
		 * end there, not at every round from here on) */
		s->next_probe = s->rounds + 1 + s->probe_every;
		s->pipe_next = 0;
		return 0;
	}
	s->t_probes += probe;
	s->probe_every *= 2;
	s->next_probe = s->rounds + 1 + s->probe_every;
	return L;
}

/* The draft's propose ahead: while the target verifies [x_1..x_Lr], the
 * draft appends what it has not seen of the block (x_Lr and the forced
 * tokens before speech token Lr) and drafts A tokens on, as if all were
 * accepted: speech tokens Lr..Lr + A - 1 of the round, each after the
 * forced tokens due at its frame. Fills s->qd; returns A (0: nothing to
 * draft ahead). */
static int propose_ahead(spec_session *s, int Lr, const int *fb)
{
	int pays, f = fb[Lr + 1];
	const int L = best_lookahead(s, &s->ahead_pipe, &pays);
	int A = (pays ? L : 0) + 1;

	if (A > s->max_tokens - s->nsp - Lr)
		A = s->max_tokens - s->nsp - Lr;
	if (A > PROTO_MAX_N - 1)
		A = PROTO_MAX_N - 1;
	if (A < 1)
		return 0;
	request(s, s->qd, PROTO_PROPOSE, A);
	proto_propose *pq = &s->qd->propose;
	pq->seed = (s->seed ^ 0x61686561642d6472ull) * 0x9e3779b97f4a7c15ull + (uint64_t)s->rounds;
	for (int k = 1; k < A; k++)
		for (; s->env.voice && f < s->fc.n && s->fc.frame[f] < s->nsp + Lr + k + 1; f++) {
			if (pq->n_forced == PROTO_MAX_N) { /* more phonemes than a propose
							    * carries: draft less */
				while (pq->n_forced > 0 && pq->forced_at[pq->n_forced - 1] == k)
					pq->n_forced--; /* forced_at < n */
				proto_model_mut(s->qd)->n = k;
				return k;
			}
			pq->forced_at[pq->n_forced] = k;
			pq->forced[pq->n_forced++] = s->fc.id[f];
		}
	return A;
}

/* ---- the round, in steps ----
 *
 * What one round holds between its steps. */
typedef struct round {
	int Lr;                  /* drafts this round */
	int room;                /* MTP: speech tokens before the next forced one */
	int target_only;         /* no drafts: the target alone (or mtp-viterbi) */
	int run;                 /* the target alone samples this many tokens itself */
	int fb[PROTO_MAX_N + 1]; /* forced_in_block */
	int x[PROTO_MAX_N];      /* the drafts (model ids) */
	const float *pv[PROTO_MAX_N]; /* and their vectors */
	int tail[PROTO_MAX_N], n_tail; /* the block after the last committed token */
	int qat[PROTO_MAX_N];    /* the vector of q for speech token k of the round */
	int A;                   /* drafts asked ahead (0: none) */
	int nq, heads;           /* vectors of the score, MTP heads at each */
	int out[PROTO_MAX_N], groups[PROTO_MAX_N], n_emit; /* the tokens emitted */
	int accepted;            /* drafts accepted */
	int kept_ahead;          /* the drafts ahead are the next round's */
} round;

/* 0. a phoneme voice: the phoneme tokens due at this frame go in. Those
 * due later run inside the round's block, except for MTP drafts: heads
 * computed before a forced token do not see it (they go stale), so there
 * the round stops short of the next one. Then the round's lookahead: no
 * drafts beyond max_tokens (a round emits at most Lr + 1). */
static void round_begin(spec_session *s, round *r)
{
	r->Lr = s->L_next;
	r->room = PROTO_MAX_N;
	if (s->env.voice) {
		while (s->j < s->fc.n && s->fc.frame[s->j] <= s->nsp) {
			s->ctx[s->n++] = s->fc.id[s->j++];
			s->have_heads = 0;
		}
		if (s->mtp) {
			r->room = (s->j < s->fc.n ? s->fc.frame[s->j] : s->fc.n_frames) - s->nsp;
			if (r->Lr > r->room - 1)
				r->Lr = r->room - 1;
		}
	}
	if (r->Lr > s->max_tokens - s->nsp - 1)
		r->Lr = s->max_tokens - s->nsp - 1;
	if (r->Lr > 0)
		r->Lr = forced_in_block(s, r->Lr, r->fb, 0);
	r->target_only = s->is_none || r->Lr < 1 || (s->mtp && !s->have_heads);
	for (int i = 0; i < PROTO_MAX_N; i++)
		r->groups[i] = -1;
	if (s->run_next > 0 && r->target_only) { /* its tokens, the forced ones among them */
		int n = s->run_next < s->max_tokens - s->nsp ? s->run_next : s->max_tokens - s->nsp;
		/* auto: the run ends where auto next weighs a probe (rounds + 1 =
		 * next_probe, next_lookahead), so it decides at the same token as
		 * with one token a round; in between its answer cannot change */
		if (s->auto_l && s->can_pay && s->probe_every > 0 && n > s->next_probe - s->rounds - 1)
			n = s->next_probe - s->rounds - 1;
		if (n < 1)
			n = 1;
		r->Lr = 0;
		r->run = 1 + forced_in_block(s, n - 1, r->fb, 1);
	}
}

/* 1. draft: x_1..x_Lr and p_1..p_Lr, by the kind of round. */

/* From the target's heads at the last committed token. */
static int draft_heads(spec_session *s, const spec_io *io, round *r, pcg_err *err)
{
	const int W = s->width;
	pcg_rng drng;

	(void)io;
	(void)err;
	pcg_rng_init(&drng, s->seed ^ 0x6d74702d64726166ull, 1 + (uint64_t)s->rounds);
	for (int i = 0; i < r->Lr; i++) {
		float *pi = s->p + (size_t)i * W;
		memcpy(pi, s->hp[i], (size_t)W * sizeof *pi);
		r->pv[i] = pi;
		int row = pcg_sample(pi, W, pcg_rng_uniform(&drng));
		r->x[i] = row_id(s, row < 0 ? 0 : row);
	}
	return 0;
}

/* Drafted ahead last round. */
static int draft_ahead(spec_session *s, const spec_io *io, round *r, pcg_err *err)
{
	(void)io;
	(void)err;
	for (int i = 0; i < r->Lr; i++) {
		r->x[i] = s->ax[i];
		r->pv[i] = s->p + (size_t)(s->p_off + i) * s->width;
	}
	return 0;
}

/* The forced tokens due inside a propose of n tokens (fb: forced_in_block)
 * into pq, each before the token it precedes (1 to n - 1). */
static void put_forced(const spec_session *s, proto_propose *pq, const int *fb, int n)
{
	for (int k = 1; k < n; k++)
		for (int f = fb[k]; f < fb[k + 1]; f++) {
			pq->forced_at[pq->n_forced] = k;
			pq->forced[pq->n_forced++] = s->fc.id[f];
		}
}

/* From the draft server now; the forced tokens due inside the block go
 * with the request, so that the draft conditions on them (before drafting
 * token k, the ones due at frame nsp + k). */
static int draft_server(spec_session *s, const spec_io *io, round *r, pcg_err *err)
{
	request(s, s->q, PROTO_PROPOSE, r->Lr);
	proto_propose *pq = &s->q->propose;
	pq->seed = s->seed * 0x9e3779b97f4a7c15ull + (uint64_t)s->rounds;
	put_forced(s, pq, r->fb, r->Lr);
	const double t = pcg_now();
	if (ask(s, io, SPEC_DRAFT, &s->d_sync, NULL, 0, s->q, s->r, 0, err) < 0)
		return -1;
	s->st[PROTO_STAT_T_DRAFT] += pcg_now() - t;
	for (int i = 0; i < r->Lr; i++) {
		r->x[i] = s->r->probs.x[i];
		proto_vector(&s->r->probs, i, s->p + (size_t)i * s->width);
		r->pv[i] = s->p + (size_t)i * s->width;
	}
	return 0;
}

/* The target alone, a run of r->run tokens that it samples itself: token
 * k of the run drawn with the uniform the round of its own would draw
 * (stream 1 + rounds + k: a run counts as its tokens' rounds), so that the
 * tokens are those of one token a round; the forced tokens due inside the
 * run go with it, as to a draft (draft_server); it stops at the end token. */
static int draft_run(spec_session *s, const spec_io *io, round *r, pcg_err *err)
{
	request(s, s->q, PROTO_PROPOSE, r->run);
	proto_propose *pq = &s->q->propose;
	pq->seed = s->seed;
	pq->draws = 1 + (uint64_t)s->rounds;
	pq->stop = !s->env.voice; /* a phoneme voice's length is espeak-ng's */
	pq->stop_id = s->env.voc->end_id;
	put_forced(s, pq, r->fb, r->run);
	const double t = pcg_now();
	if (ask(s, io, SPEC_TARGET, &s->t_sync, NULL, 0, s->q, s->r, 0, err) < 0)
		return -1;
	const double dt = pcg_now() - t;
	s->st[PROTO_STAT_T_TARGET] += dt;
	/* the next run: twice this one, up to RUN_SECONDS of the target's time
	 * (the first run, one token, carries the prompt's prefill) */
	int next = 2 * r->run;
	const int got = s->r->probs.n_x;
	if (s->rounds > 0 && dt > 0 && next > RUN_SECONDS * got / dt)
		next = (int)(RUN_SECONDS * got / dt);
	s->run_next = next < 1 ? 1 : next > PROTO_MAX_N ? PROTO_MAX_N : next;
	if (s->env.run_tokens > 1)
		s->run_next = s->env.run_tokens;
	return 0;
}

/* 2. target: q_1..q_{Lr+1} in one pass over [last committed, x_1, the
 * forced tokens before x_2, x_2, ..., x_Lr, the forced tokens before the
 * bonus token]: the distribution of speech token k of the round is the
 * vector qat[k], at the token right before it (mtp-*: with the heads'
 * distributions at each position). Pipelined, the draft drafts on
 * meanwhile (propose_ahead). */
static int score(spec_session *s, const spec_io *io, round *r, pcg_err *err)
{
	const int W = s->width;
	double t;

	r->qat[0] = 0;
	for (int k = 1; !r->target_only && k <= r->Lr; k++) {
		r->tail[r->n_tail++] = r->x[k - 1];
		for (int f = r->fb[k]; f < r->fb[k + 1]; f++)
			r->tail[r->n_tail++] = s->fc.id[f];
		r->qat[k] = r->n_tail;
	}
	r->A = !r->target_only && !s->mtp && s->pipe_next ? propose_ahead(s, r->Lr, r->fb) : 0;
	s->n_piped += r->A > 0;
	request(s, s->q, PROTO_SCORE, r->target_only ? 1 : r->n_tail + 1);
	/* MTP heads cost the target a product and lm_head each at every
	 * position: not asked for while auto leaves the rounds to the target
	 * alone, but for the round before its next probe */
	const int quiet = s->mtp && s->auto_l && s->probe_every > 0 &&
			  (!s->can_pay || s->rounds + 2 < s->next_probe);
	s->q->score.heads = quiet ? 0 : s->heads;
	r->nq = s->q->score.req.n;
	r->heads = s->q->score.heads;
	t = pcg_now();
	if (r->A > 0) {
		double t_wait;
		if (ask_both(s, io, r->tail, r->n_tail, r->A, &t_wait, err) < 0)
			return -1;
		s->st[PROTO_STAT_T_TARGET] += pcg_now() - t - t_wait;
		s->st[PROTO_STAT_T_DRAFT] += t_wait;
	} else {
		if (ask(s, io, SPEC_TARGET, &s->t_sync, r->tail, r->n_tail, s->q, s->r, 0, err) < 0)
			return -1;
		s->st[PROTO_STAT_T_TARGET] += pcg_now() - t;
	}
	for (int i = 0; i < r->nq; i++) {
		proto_vector(&s->r->probs, i * (1 + r->heads), s->qv + (size_t)i * W);
		for (int k = 0; k < r->heads; k++) {
			int vi = i * (1 + r->heads) + 1 + k;
			proto_vector(&s->r->probs, vi, s->hv + (size_t)vi * W);
		}
	}
	return 0;
}

/* 3. what the round emits, by the kind of round. */

/* mtp-viterbi: the path through the target's q and the heads (1 + heads
 * positions), unverified. */
static int verify_viterbi(spec_session *s, round *r, pcg_rng *rng, pcg_err *err)
{
	const int W = s->width, V = s->env.voice ? W : W - 1, heads = r->heads;
	viterbi_opts vo = { s->viterbi_k, -1, VITERBI_UNION };
	uint32_t path[PROTO_MAX_N];

	(void)rng;
	memcpy(s->hv, s->qv, (size_t)W * sizeof *s->hv);
	if (V > (int)tm_get(s->env.tm)->n)
		return pcg_fail(err, "the transition matrix covers %u tokens, the model %d",
				tm_get(s->env.tm)->n, V);
	if (W != V) /* the end row sits between the vectors */
		for (int k = 1; k <= heads; k++)
			memmove(s->hv + (size_t)k * V, s->hv + (size_t)k * W,
				(size_t)V * sizeof *s->hv);
	if (viterbi_decode(s->env.tm, s->hv, 1 + heads, V, &vo, path, NULL, NULL, err) < 0)
		return -1;
	for (int i = 0; i < 1 + heads && i < r->room; i++)
		r->out[r->n_emit++] = row_id(s, (int)path[i]);
	r->accepted = r->n_emit - 1;
	/* for the cost model: each head's token kept, until a round stops
	 * short of a forced token */
	for (int i = 0; i < heads && i <= r->accepted; i++) {
		s->tries_pos[i]++;
		s->acc_pos[i] += i < r->accepted;
	}
	return 0;
}

/* The target's run: its tokens as they are. */
static int verify_run(spec_session *s, round *r, pcg_rng *rng, pcg_err *err)
{
	(void)rng;
	(void)err;
	r->n_emit = s->r->probs.n_x;
	for (int i = 0; i < r->n_emit; i++)
		r->out[i] = s->r->probs.x[i];
	return 0;
}

/* The target alone: one token of q. */
static int verify_alone(spec_session *s, round *r, pcg_rng *rng, pcg_err *err)
{
	(void)err;
	const int row = pcg_sample(s->qv, s->width, pcg_rng_uniform(rng));
	r->out[r->n_emit++] = row_id(s, row < 0 ? s->width - 1 : row);
	return 0;
}

/* The rule over the drafts. Pipelined, the first draft ahead stands where
 * the bonus token would: when x_1..x_Lr are all accepted it is verified
 * against q_{Lr+1} like any draft (accepted, or corrected from the rule's
 * residual), so every position still follows the rule. */
static int verify_drafts(spec_session *s, round *r, pcg_rng *rng, pcg_err *err)
{
	int xr[PROTO_MAX_N + 1];
	const float *pp[PROTO_MAX_N + 1], *qq[PROTO_MAX_N + 1];
	const int Lr = r->Lr, Ld = Lr + (r->A > 0);

	for (int i = 0; i < Lr; i++) {
		xr[i] = id_row(s, r->x[i]);
		pp[i] = r->pv[i];
	}
	for (int i = 0; i <= Lr; i++)
		qq[i] = s->qv + (size_t)r->qat[i] * s->width;
	if (r->A > 0) {
		xr[Lr] = id_row(s, s->ax[0]);
		pp[Lr] = s->ap;
		qq[Lr + 1] = NULL;
		if (xr[Lr] < 0)
			return pcg_fail(err, "draft: token %d is not a speech token", s->ax[0]);
	}
	if (policy_run(s->pol, Ld, xr, pp, qq, rng, &s->res, err) < 0)
		return -1;
	r->n_emit = s->res.n_tokens;
	r->accepted = s->res.n_accepted < Lr ? s->res.n_accepted : Lr;
	for (int i = 0; i < r->n_emit; i++) {
		r->out[i] = row_id(s, s->res.tokens[i]);
		r->groups[i] = s->res.groups[i];
	}
	const int tried = s->res.n_accepted + s->res.rejected;
	for (int i = 0; i < tried && i < PROTO_MAX_N; i++) {
		s->tries_pos[i]++;
		s->acc_pos[i] += i < s->res.n_accepted;
	}
	r->kept_ahead = r->A > 1 && s->res.n_accepted == Ld && !s->res.ended;
	return 0;
}

/* The kinds of round, as policy_rules.h lists the rules: where the drafts
 * come from (step 1; NULL: none) and how the round's tokens are chosen
 * (step 3). */
typedef struct round_kind {
	const char *name;
	int (*draft)(spec_session *s, const spec_io *io, round *r, pcg_err *err);
	int (*verify)(spec_session *s, round *r, pcg_rng *rng, pcg_err *err);
	int no_score;            /* step 1 brought the round's tokens: no step 2 */
} round_kind;

static const round_kind ROUND_ALONE = { "the target alone", NULL, verify_alone, 0 };
static const round_kind ROUND_RUN = { "the target's run", draft_run, verify_run, 1 };
static const round_kind ROUND_VITERBI = { "mtp-viterbi's path", NULL, verify_viterbi, 0 };
static const round_kind ROUND_HEADS = { "the MTP heads' drafts", draft_heads, verify_drafts, 0 };
static const round_kind ROUND_AHEAD = { "drafts drafted ahead", draft_ahead, verify_drafts, 0 };
static const round_kind ROUND_SERVER = { "drafts from the draft server", draft_server,
					 verify_drafts, 0 };

static const round_kind *kind_of_round(const spec_session *s, const round *r)
{
	if (s->viterbi)
		return &ROUND_VITERBI;
	if (r->run > 0)
		return &ROUND_RUN;
	if (r->target_only)
		return &ROUND_ALONE;
	if (s->mtp)
		return &ROUND_HEADS;
	return s->n_ahead >= r->Lr ? &ROUND_AHEAD : &ROUND_SERVER;
}

/* The next round's drafts: the heads at the last accepted position, whose
 * q gave the token that ends this round; or the drafts ahead after the one
 * just accepted (their vectors become s->p, from vector 1). */
static void keep_drafts(spec_session *s, const round *r)
{
	if (s->mtp && !s->viterbi) {
		const int a = r->target_only ? 0 : r->accepted;
		for (int k = 0; k < r->heads; k++)
			s->hp[k] = s->hv + ((size_t)a * (1 + r->heads) + 1 + k) * s->width;
		s->have_heads = r->heads > 0;
	}
	if (r->kept_ahead) {
		float *tp = s->p;
		s->p = s->ap;
		s->ap = tp;
		s->p_off = 1;
		s->n_ahead = r->A - 1;
		memmove(s->ax, s->ax + 1, (size_t)(r->A - 1) * sizeof *s->ax);
	}
}

/* 4. commit, up to the end token; the forced tokens due before a token of
 * the block go in before it, with certainty (neither drafted nor
 * accepted). */
static void commit(spec_session *s, const round *r)
{
	for (int i = 0; i < r->n_emit && !s->ended && s->nsp < s->max_tokens; i++) {
		if (i > 0 && (!r->target_only || r->run)) /* fb was made for the block */
			while (s->j < r->fb[i + 1])
				s->ctx[s->n++] = s->fc.id[s->j++];
		if (r->out[i] == s->env.voc->end_id) {
			s->ended = 1;
		} else {
			s->ctx[s->n++] = r->out[i];
			s->sp[s->nsp++] = r->out[i];
			s->last[s->n_last] = r->out[i];
			s->last_groups[s->n_last++] = r->groups[i];
		}
	}
}

/* The round's statistics, and the next round's lookahead. */
static void round_end(spec_session *s, const round *r)
{
	for (int i = 0; i < r->accepted; i++)
		s->accept_pos[i] += 1;
	const int passes = r->run ? r->n_emit : 1; /* a run: a round for each token */
	if (s->rounds == 0) {
		s->t_first = pcg_now() - s->t0;
		s->tok_first = s->nsp;
	}
	s->rounds += passes;
	s->st[PROTO_STAT_DRAFTED] += s->viterbi ? r->heads : r->target_only ? 0 : r->Lr;
	s->st[PROTO_STAT_ACCEPTED] += r->accepted;
	s->n_drafting += s->viterbi || !r->target_only;
	/* added pass by pass, not times passes: the sum of one a round, bit
	 * for bit, so that auto's probe share decides alike */
	for (int i = 0; i < passes && r->target_only && !s->viterbi; i++)
		s->t_alone += cost_round_seconds(&s->env.costs, COST_NONE, NULL, 1);
	if (r->kept_ahead)
		s->pipe_next = s->ahead_pipe && r->A > 1;
	s->L_next = r->kept_ahead ? r->A - 1 : next_lookahead(s);
}

int spec_round(spec_session *s, const spec_io *io, pcg_err *err)
{
	round r = { 0 };
	pcg_rng rng;

	if (s->ended || s->nsp >= s->max_tokens)
		return 1;
	s->n_last = 0;
	round_begin(s, &r);
	const round_kind *kind = kind_of_round(s, &r);
	if (kind->draft != NULL && kind->draft(s, io, &r, err) < 0)
		return -1;
	s->n_ahead = 0;
	if (!kind->no_score && score(s, io, &r, err) < 0)
		return -1;
	const double t = pcg_now();
	pcg_rng_init(&rng, s->seed, 1 + (uint64_t)s->rounds);
	if (kind->verify(s, &r, &rng, err) < 0)
		return -1;
	keep_drafts(s, &r);
	s->st[PROTO_STAT_T_POLICY] += pcg_now() - t;
	commit(s, &r);
	round_end(s, &r);
	return s->ended || s->nsp >= s->max_tokens;
}

const int *spec_tokens(const spec_session *s, int *n)
{
	*n = s->nsp;
	return s->sp;
}

const int *spec_context(const spec_session *s, int *n)
{
	*n = s->n;
	return s->ctx;
}

int spec_last_round(const spec_session *s, const int **tokens, const int **groups)
{
	*tokens = s->last;
	if (groups)
		*groups = s->last_groups;
	return s->n_last;
}

/* What the cost model predicts for the session's rounds: the acceptance
 * measured per position (no prior); the drafting rounds at their mean
 * lookahead, the others (the target alone: auto found drafting would not
 * pay, or no room before max_tokens) at a step and a trip each, and the
 * probes' catch-up. */
static double spec_predict(const spec_session *s)
{
	double a[PROTO_MAX_N + 1];
	const cost_terms *c = &s->env.costs;
	const cost_kind kind = kind_of(s, 2 * s->n_piped >= s->n_drafting && s->n_piped > 0);
	const int alone = s->rounds - s->n_drafting;
	int L = s->n_drafting > 0 ? (int)(s->st[PROTO_STAT_DRAFTED] / s->n_drafting + 0.5) : 1;

	if (L < 1)
		L = 1;
	for (int i = 0; i <= PROTO_MAX_N; i++)
		a[i] = s->tries_pos[i] > 0 ? s->acc_pos[i] / s->tries_pos[i] : i > 0 ? a[i - 1] : 0;
	if (kind == COST_NONE || s->n_drafting == 0)
		return cost_tokens_per_second(c, COST_NONE, a, 1);
	const double tokens = alone + s->n_drafting * cost_tokens_per_round(a, L);
	const double t = alone * cost_round_seconds(c, COST_NONE, a, 1) +
			 s->n_drafting * cost_round_seconds(c, kind, a, L) + s->t_probes;
	return t > 0 ? tokens / t : 0;
}

void spec_result(const spec_session *s, uint64_t req_id, proto_msg *rep)
{
	double st[PROTO_MAX_STATS] = { 0 };
	const int rounds = s->rounds;

	memcpy(st, s->st, sizeof s->st);
	proto_init(rep, PROTO_RESULT, req_id);
	proto_result *res = &rep->result;
	res->n_tokens = s->nsp;
	memcpy(res->tokens, s->sp, (size_t)s->nsp * sizeof *s->sp);
	st[PROTO_STAT_ROUNDS] = rounds;
	st[PROTO_STAT_RATE] = st[PROTO_STAT_DRAFTED] > 0
				      ? st[PROTO_STAT_ACCEPTED] / st[PROTO_STAT_DRAFTED] : 0;
	st[PROTO_STAT_MAL] = rounds > 0 ? 1 + st[PROTO_STAT_ACCEPTED] / rounds : 0;
	st[PROTO_STAT_T_TOTAL] = pcg_now() - s->t0;
	st[PROTO_STAT_TOKENS] = s->nsp;
	st[PROTO_STAT_TOK_S] = st[PROTO_STAT_T_TOTAL] > 0 ? s->nsp / st[PROTO_STAT_T_TOTAL] : 0;
	/* messaging: time in calls minus the servers' own compute */
	st[PROTO_STAT_T_MSG] = st[PROTO_STAT_T_DRAFT] + st[PROTO_STAT_T_TARGET] - s->t_server;
	st[PROTO_STAT_RESENDS] = s->resends;
	st[PROTO_STAT_T_TARGET_SERVER] = s->t_server_target;
	st[PROTO_STAT_LOOKAHEAD] = rounds > 0 ? st[PROTO_STAT_DRAFTED] / rounds : 0;
	st[PROTO_STAT_PIPELINED] = s->n_drafting > 0 ? (double)s->n_piped / s->n_drafting : 0;
	/* the session as the model predicts it: its rounds at the model's rate,
	 * the first (which carries the prompt's prefill, not modelled) as it
	 * went, so that measured / predicted is near 1 when the model is right */
	const double rate = spec_predict(s);
	st[PROTO_STAT_PREDICTED] = rate;
	if (rate > 0 && rounds > 1 && s->nsp > s->tok_first)
		st[PROTO_STAT_PREDICTED] = s->nsp / (s->t_first + (s->nsp - s->tok_first) / rate);
	st[PROTO_STAT_DRAFTING] = rounds > 0 ? (double)s->n_drafting / rounds : 0;
	const int per_pos = !s->is_none || s->viterbi;
	res->n_stats = PROTO_STAT_POS0 + (per_pos ? s->L : 0);
	for (int i = 0; i < PROTO_STAT_POS0; i++)
		res->stats[i] = st[i];
	for (int i = 0; per_pos && i < s->L; i++)
		res->stats[PROTO_STAT_POS0 + i] = rounds ? s->accept_pos[i] / rounds : 0;
}

void spec_drop(spec_session *s, const spec_io *io)
{
	pcg_err err = { "" };
	proto_msg *r = s->r;

	proto_init(s->q, PROTO_DROP, 0);
	s->q->drop.session = s->id;
	io->call(io->ctx, SPEC_TARGET, s->q, r, &err);
	if (!s->is_none && !s->mtp)
		io->call(io->ctx, SPEC_DRAFT, s->q, r, &err);
}
