/* test_modelserver.c: draftd and targetd as separate processes over ipc,
 * driven through lib/serve/client.c: the distributions they return equal the
 * engine's own (same logits, same tempering), proposals are reproducible
 * from the seed, a resent prefix reuses the cache, a lost session answers
 * unknown-session, bad requests get errors that name the field while the
 * server goes on serving, garbage is dropped, and SIGTERM stops it. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "check.h"
#include "modelserver.h"
#include "client.h"
#include "dtype.h"
#include "model.h"
#include "net.h"
#include "rng.h"
#include "sampling.h"

#define MODEL "tests/fixtures/llama/gqa-f32"

static pid_t start(const char *prog, const char *url, const char *kv_mem)
{
	pid_t pid = fork();
	if (pid == 0) {
		char p[64];
		snprintf(p, sizeof p, "bin/%s", prog);
		freopen("/dev/null", "w", stdout);
		execl(p, prog, "--model", MODEL, "--listen", url, "--threads", "1", "--kv-mem", kv_mem,
		      (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* The engine's tempered distributions for the last n positions of toks. */
static void direct(const int *toks, int len, int n, const llama_rows *rows,
		   const pcg_sampling *s, float *out)
{
	pcg_err err;
	llama_model *m = llama_open(MODEL, NULL, &err);
	llama_kv *kv = llama_kv_new(m);
	int w = llama_rows_count(m, rows);
	float *lg = malloc((size_t)n * w * sizeof *lg);
	llama_forward(m, kv, toks, len, n, rows, lg, &err);
	for (int i = 0; i < n; i++)
		pcg_probs(lg + (size_t)i * w, w, s, out + (size_t)i * w, &err);
	free(lg);
	llama_kv_free(&kv);
	llama_close(&m);
}

static double maxdiff(const proto_msg *rep, const float *want, int n, int w)
{
	float *v = malloc((size_t)w * sizeof *v);
	double d = 0;
	for (int i = 0; i < n; i++) {
		proto_vector(&rep->probs, i, v);
		for (int j = 0; j < w; j++)
			d = fmax(d, fabs((double)v[j] - want[(size_t)i * w + j]));
	}
	free(v);
	return d;
}

/* Makes q a propose or score (type t) of session from pos, appending
 * app[0..n_app), asking for n positions. */
static proto_model_req *req(proto_msg *q, proto_type t, uint64_t session, int pos, const int *app,
			    int n_app, int n, const pcg_sampling *samp, const llama_rows *rows)
{
	proto_init(q, t, 0);
	proto_model_req *r = proto_model_mut(q);
	r->session = session;
	r->pos = pos;
	r->n_append = n_app;
	memcpy(r->append, app, (size_t)n_app * sizeof *app);
	r->n = n;
	r->samp = *samp;
	r->rows = *rows;
	return r;
}

/* What an error reply says, for a failed check's message. */
static const char *why(const proto_msg *r)
{
	return r->type == PROTO_ERROR ? r->error.msg : "";
}

/* The serving loop's wait for the sessions the last pass answered. */
static void test_gather_wait(void)
{
	const double end = 100.0, pass = 0.040; /* a 40 ms pass: waits up to 5 ms */
	double rep[3] = { end + 1e-4, end + 1e-4, end + 1e-4 };
	int pend[3] = { 1, 0, 0 };

	/* one back, two answered by the pass not yet: wait to end + 5 ms */
	CHECK(fabs(modelserver_gather_wait(end + 0.001, end, pass, rep, pend, 3) - 0.004) < 1e-9);
	/* all back: run */
	int all[3] = { 1, 1, 1 };
	CHECK(modelserver_gather_wait(end + 0.001, end, pass, rep, all, 3) == 0);
	/* never longer than an eighth of the pass after it */
	CHECK(modelserver_gather_wait(end + 0.0051, end, pass, rep, pend, 3) == 0);
	/* never longer than 10 ms, whatever the pass */
	CHECK(fabs(modelserver_gather_wait(end + 0.001, end, 10.0, rep, pend, 3) - 0.009) < 1e-9);
	/* sessions answered before the last pass are not waited for */
	double old[3] = { end - 0.050, end - 0.050, end + 1e-4 };
	int only_last_back[3] = { 0, 0, 1 };
	CHECK(modelserver_gather_wait(end + 0.001, end, pass, old, only_last_back, 3) == 0);
	/* no batched pass yet: run */
	CHECK(modelserver_gather_wait(end, 0, 0, rep, pend, 3) == 0);
	/* a step of the shipped voice (0.7 ms): at most 87.5 us */
	CHECK(modelserver_gather_wait(end + 0.0001, end, 0.0007, rep, pend, 3) == 0);
}

int main(void)
{
	char durl[512], turl[512];
	pcg_err err = { "" };
	const llama_rows rows = { 2, { 100, 3 }, { 384, 4 } };
	const int W = 384 - 100 + 1;
	const pcg_sampling samp = { 0.8f, 0, 1.0f };

	test_gather_wait();
	if (access("bin/draftd", X_OK) != 0)
		SKIP("bin/draftd not built");
	snprintf(durl, sizeof durl, "ipc://%s/d.sock", check_tmpdir());
	snprintf(turl, sizeof turl, "ipc://%s/t.sock", check_tmpdir());
	pid_t dp = start("draftd", durl, "2G"), tp = start("targetd", turl, "2G");
	void *ctx = zmq_ctx_new();
	pcg_client *d = client_new(ctx, durl, 2000, 5, &err);
	pcg_client *t = client_new(ctx, turl, 2000, 5, &err);
	proto_msg *q = calloc(1, sizeof *q), *r = calloc(1, sizeof *r);
	float *want = malloc((size_t)8 * W * sizeof *want);

	/* Up: ping answers with a summary. */
	proto_init(q, PROTO_PING, 0);
	CHECKF(client_call(d, q, r, &err) == 0 && r->type == PROTO_PONG, "%s", err.msg);
	CHECK(strstr(r->pong.msg, "draftd layers=3 vocab=384") != NULL);

	/* propose: x and p as the engine computes them. */
	const int a123[] = { 1, 2, 3 };
	req(q, PROTO_PROPOSE, 7, 0, a123, 3, 3, &samp, &rows);
	q->propose.seed = 11;
	CHECKF(client_call(d, q, r, &err) == 0 && r->type == PROTO_PROBS, "%s %s", err.msg, why(r));
	const proto_probs *rp = &r->probs;
	CHECK(rp->n_x == 3 && rp->n_vec == 3 && rp->width == W);
	int x[3] = { rp->x[0], rp->x[1], rp->x[2] };
	int seq[6] = { 1, 2, 3, x[0], x[1], x[2] };
	/* p_i is over position 2 + i. The server ran one position at a time
	 * (other kernels than one pass over 5), so equal up to f32 rounding:
	 * probabilities <= 1 differ by a few ulps, 1e-6 is far above that. */
	direct(seq, 5, 3, &rows, &samp, want);
	CHECKF(maxdiff(r, want, 3, W) < 1e-6, "propose p differs from the engine by %g",
	       maxdiff(r, want, 3, W));
	for (int i = 0; i < 3; i++)
		CHECK((x[i] >= 100 && x[i] < 384) || x[i] == 3);

	/* The same request again: same draws (the seed decides), cache reused. */
	CHECK(client_call(d, q, r, &err) == 0 && rp->x[0] == x[0] && rp->x[1] == x[1] &&
	      rp->x[2] == x[2]);
	q->propose.seed = 12;
	CHECK(client_call(d, q, r, &err) == 0 && r->type == PROTO_PROBS);

	/* draws: token i is drawn with the uniform at (seed, draws + i, 0),
	 * as a caller sampling one token a round from the same vectors; with
	 * stop, the propose ends after that token. Six tokens from session 9. */
	req(q, PROTO_PROPOSE, 9, 0, a123, 3, 6, &samp, &rows);
	q->propose.seed = 31;
	q->propose.draws = 5;
	CHECKF(client_call(t, q, r, &err) == 0 && r->type == PROTO_PROBS && rp->n_x == 6,
	       "draws: %s %s", err.msg, why(r));
	if (r->type == PROTO_PROBS && rp->n_x == 6) {
		int xs[6], same = 0;
		float *v = malloc((size_t)W * sizeof *v);
		for (int i = 0; i < 6; i++) {
			xs[i] = rp->x[i];
			proto_vector(rp, i, v);
			const int row = pcg_sample(v, W, pcg_rng_uniform_at(31, 5 + (uint64_t)i, 0));
			same += row >= 0 && (row < 384 - 100 ? 100 + row : 3) == xs[i];
		}
		CHECKF(same == 6, "draws: %d of 6 tokens are the draws of their index", same);
		/* again from token 2 (the cache holds the first ones): the same */
		int a5[5] = { 1, 2, 3, xs[0], xs[1] };
		req(q, PROTO_PROPOSE, 9, 0, a5, 5, 4, &samp, &rows);
		q->propose.seed = 31;
		q->propose.draws = 7;
		CHECK(client_call(t, q, r, &err) == 0 && rp->n_x == 4 && rp->x[0] == xs[2] &&
		      rp->x[3] == xs[5]);
		/* stop at the third token: three tokens, three vectors */
		req(q, PROTO_PROPOSE, 9, 0, a123, 3, 6, &samp, &rows);
		q->propose.seed = 31;
		q->propose.draws = 5;
		q->propose.stop = 1;
		q->propose.stop_id = xs[2];
		const int first = xs[0] == xs[2] ? 1 : xs[1] == xs[2] ? 2 : 3;
		CHECKF(client_call(t, q, r, &err) == 0 && r->type == PROTO_PROBS &&
		       rp->n_x == first && rp->n_vec == first && rp->x[first - 1] == xs[2],
		       "stop: %d tokens, %d vectors, want %d", rp->n_x, rp->n_vec, first);
		q->propose.stop_id = 384; /* beyond the vocabulary */
		CHECKF(client_call(t, q, r, &err) == 0 && r->type == PROTO_ERROR &&
		       strstr(r->error.msg, "'stop'"), "stop out of range: %s", why(r));
		free(v);
	}

	/* propose with forced tokens: 50 goes in before draft 1 and 60, 61
	 * before draft 2, and p_i is the engine's given them. */
	req(q, PROTO_PROPOSE, 8, 0, a123, 3, 3, &samp, &rows);
	proto_propose *qp = &q->propose;
	qp->seed = 11;
	qp->n_forced = 3;
	memcpy(qp->forced_at, (const int32_t[]){ 1, 2, 2 }, 3 * sizeof *qp->forced_at);
	memcpy(qp->forced, (const int32_t[]){ 50, 60, 61 }, 3 * sizeof *qp->forced);
	CHECKF(client_call(d, q, r, &err) == 0 && r->type == PROTO_PROBS, "forced: %s %s", err.msg,
	       why(r));
	if (r->type == PROTO_PROBS && rp->n_x == 3) {
		int fs[8] = { 1, 2, 3, rp->x[0], 50, rp->x[1], 60, 61 };
		float *w3 = malloc((size_t)3 * W * sizeof *w3);
		direct(fs, 3, 1, &rows, &samp, w3);                     /* p_0 at 3 */
		direct(fs, 5, 1, &rows, &samp, w3 + W);                 /* p_1 after x_0, 50 */
		direct(fs, 8, 1, &rows, &samp, w3 + 2 * (size_t)W);     /* p_2 after x_1, 60, 61 */
		CHECKF(maxdiff(r, w3, 3, W) < 1e-6, "propose with forced tokens: p differs from "
		       "the engine's given them by %g", maxdiff(r, w3, 3, W));
		free(w3);
	}
	qp->forced_at[0] = 3; /* not before a drafted token */
	CHECK(client_call(d, q, r, &err) < 0 || r->type == PROTO_ERROR);
	qp->forced_at[0] = 1;
	qp->forced[0] = 384; /* beyond the vocabulary */
	CHECKF(client_call(d, q, r, &err) == 0 && r->type == PROTO_ERROR &&
	       strstr(r->error.msg, "forced"), "forced token out of range: %s", why(r));

	/* score: the last n positions of the block, in one pass. */
	req(q, PROTO_SCORE, 7, 0, seq, 6, 4, &samp, &rows);
	CHECKF(client_call(t, q, r, &err) == 0 && r->type == PROTO_PROBS, "%s %s", err.msg, why(r));
	direct(seq, 6, 4, &rows, &samp, want);
	CHECK(rp->n_vec == 4 && maxdiff(r, want, 4, W) == 0);
	/* With top-k, the reply carries the kept entries alone (sparse), and
	 * they read back as the engine's vectors to the bit, f32 and f16. */
	const pcg_sampling topk = { 0.8f, 20, 1.0f };
	float *dense = malloc((size_t)4 * W * sizeof *dense);
	for (int f16 = 0; f16 < 2; f16++) {
		req(q, PROTO_SCORE, 7, 0, seq, 6, 4, &topk, &rows)->f16 = f16;
		CHECKF(client_call(t, q, r, &err) == 0 && r->type == PROTO_PROBS, "%s %s", err.msg,
		       why(r));
		direct(seq, 6, 4, &rows, &topk, want);
		CHECK(rp->sparse && rp->nnz[0] == 20 && r->len < (size_t)4 * W);
		if (f16) /* the dense f16 of the same values */
			for (size_t i = 0; i < (size_t)4 * W; i++)
				want[i] = pcg_f16_to_f32(pcg_f32_to_f16(want[i]));
		CHECKF(maxdiff(r, want, 4, W) == 0, "f16=%d: sparse reply differs by %g", f16,
		       maxdiff(r, want, 4, W));
	}
	free(dense);

	/* Rollback: extend from position 4 with other tokens. */
	int seq2[5] = { 1, 2, 3, x[0], 200 };
	proto_model_req *qs = req(q, PROTO_SCORE, 7, 3, seq2 + 3, 2, 2, &samp, &rows);
	qs->f16 = 1;
	CHECKF(client_call(t, q, r, &err) == 0 && r->type == PROTO_PROBS, "%s %s", err.msg, why(r));
	direct(seq2, 5, 2, &rows, &samp, want);
	CHECKF(rp->f16 && maxdiff(r, want, 2, W) < 1e-3, "f16 rollback %g", maxdiff(r, want, 2, W));

	/* A session the server does not hold, from a position > 0. */
	qs->session = 99;
	qs->pos = 4;
	CHECK(client_call(t, q, r, &err) == 0 && r->type == PROTO_ERROR &&
	      !strcmp(r->error.code, "unknown-session"));
	/* Rows beyond the vocabulary: an error naming the field. */
	qs->pos = 0;
	qs->rows.end[0] = 999;
	CHECK(client_call(t, q, r, &err) == 0 && r->type == PROTO_ERROR &&
	      strstr(r->error.msg, "'rows'") != NULL);
	/* Garbage and odd framing are answered or dropped; the server goes on. */
	void *raw = zmq_socket(ctx, ZMQ_DEALER);
	int linger = 0;
	zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof linger);
	zmq_connect(raw, turl);
	zmq_send(raw, "\xdd\xff\xff\xff\xff", 5, 0);
	zmq_send(raw, "a", 1, ZMQ_SNDMORE);
	zmq_send(raw, "b", 1, ZMQ_SNDMORE);
	zmq_send(raw, "c", 1, ZMQ_SNDMORE);
	zmq_send(raw, "d", 1, 0);
	/* A peer of the previous protocol version: an error naming both. */
	void *old;
	size_t olen;
	proto_init(q, PROTO_PING, 4242);
	CHECK(proto_pack(q, &old, &olen, &err) == 0 && ((unsigned char *)old)[0] == 0x83 &&
	      ((unsigned char *)old)[2] == 'v' && ((unsigned char *)old)[3] == PROTO_VERSION);
	((unsigned char *)old)[3] = PROTO_VERSION - 1;
	zmq_send(raw, old, olen, 0);
	free(old);
	zmq_msg_t m;
	zmq_msg_init(&m);
	int rcvtimeo = 2000;
	zmq_setsockopt(raw, ZMQ_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo);
	char want_v[96];
	snprintf(want_v, sizeof want_v, "protocol version %d, this side version %d",
		 PROTO_VERSION - 1, PROTO_VERSION);
	r->id = 0;
	for (int i = 0; i < 2 && r->id != 4242; i++) { /* first the garbage's reply */
		CHECK(zmq_msg_recv(&m, raw, 0) > 0);
		CHECKF(proto_parse(zmq_msg_data(&m), zmq_msg_size(&m), r, &err) == 0, "%s", err.msg);
	}
	CHECKF(r->id == 4242 && r->type == PROTO_ERROR &&
	       !strcmp(r->error.code, PROTO_E_BAD_REQUEST) && strstr(r->error.msg, want_v) != NULL,
	       "%s", why(r));
	zmq_msg_close(&m);
	zmq_close(raw);
	proto_init(q, PROTO_PING, 0);
	CHECK(client_call(t, q, r, &err) == 0 && r->type == PROTO_PONG);

	/* drop, then the session is unknown. */
	proto_init(q, PROTO_DROP, 0);
	q->drop.session = 7;
	CHECK(client_call(t, q, r, &err) == 0 && r->type == PROTO_OK);
	req(q, PROTO_SCORE, 7, 2, (const int[]){ 5 }, 1, 1, &samp, &rows);
	CHECK(client_call(t, q, r, &err) == 0 && r->type == PROTO_ERROR &&
	      !strcmp(r->error.code, "unknown-session"));

	/* LRU eviction: a server with a 1 MiB KV budget (a session of this model
	 * holds 48 KiB: 3 layers x K and V x 64 positions x 32 floats) keeps the
	 * recent sessions and forgets the oldest, which then answer
	 * unknown-session. */
	char eurl[512];
	snprintf(eurl, sizeof eurl, "ipc://%s/e.sock", check_tmpdir());
	pid_t ep = start("targetd", eurl, "1M");
	pcg_client *e = client_new(ctx, eurl, 2000, 5, &err);
	int served = 0;
	for (int s = 1; s <= 40; s++) {
		req(q, PROTO_SCORE, (uint64_t)s, 0, a123, 3, 1, &samp, &rows);
		served += client_call(e, q, r, &err) == 0 && r->type == PROTO_PROBS;
	}
	CHECK(served == 40);
	qs = req(q, PROTO_SCORE, 1, 3, (const int[]){ 4 }, 1, 1, &samp, &rows);
	CHECK(client_call(e, q, r, &err) == 0 && r->type == PROTO_ERROR &&
	      !strcmp(r->error.code, "unknown-session"));
	qs->session = 40;
	CHECK(client_call(e, q, r, &err) == 0 && r->type == PROTO_PROBS);
	client_free(&e);
	kill(ep, SIGTERM);
	waitpid(ep, NULL, 0);

	/* SIGTERM: both exit 0 within 2 s. */
	kill(dp, SIGTERM);
	kill(tp, SIGTERM);
	int ok = 0;
	for (int i = 0; i < 40 && ok < 2; i++) {
		int st;
		for (int k = 0; k < 2; k++) {
			pid_t *p = k ? &tp : &dp;
			if (*p > 0 && waitpid(*p, &st, WNOHANG) == *p) {
				CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
				*p = 0;
				ok++;
			}
		}
		usleep(50000);
	}
	CHECKF(ok == 2, "servers still running 2 s after SIGTERM");
	if (dp > 0)
		kill(dp, SIGKILL);
	if (tp > 0)
		kill(tp, SIGKILL);
	/* A client facing a dead server gives up with an error naming it. */
	pcg_client *gone = client_new(ctx, durl, 100, 2, &err);
	proto_init(q, PROTO_PING, 0);
	CHECK(client_call(gone, q, r, &err) == -1 && strstr(err.msg, "no reply after 2 tries"));
	client_free(&gone);
	client_free(&d);
	client_free(&t);
	zmq_ctx_term(ctx);
	free(q);
	free(r);
	free(want);
	return check_done("test_modelserver");
}
