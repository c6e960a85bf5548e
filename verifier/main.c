/* verifier: the hub of the pipeline. It owns the round loop of speculative
 * decoding: the draft proposes L tokens (draftd), the target scores the
 * block in one pass (targetd), the policy decides what to keep, and the
 * committed speech tokens stream to codec-decode. Clients (pcg-synth) send
 * "synth" requests; the reply carries the tokens and the statistics. See
 * man/verifier.8. */
#include <errno.h>
#include <math.h>
#include <sys/mman.h>
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
#include "tm.h"
#include "tokenizer.h"
#include "viterbi.h"
#include "voice.h"

static const char *prog = "verifier";
static const char *SYNOPSIS = "--tokenizer FILE [--asg FILE|-] [--listen URL] [--draft URL] "
			      "[--target URL] [--codec URL|none] [--timeout-ms N] [--tries N] [--ms-per-position N]";

static const char *tok_path, *asg_path, *listen_url, *draft_url, *target_url, *codec_url;
static const char *voice_path, *tm_path;
static const char *local_dir, *local_draft, *local_layers, *local_device, *curve_key, *curve_allow,
	*curve_peers;
static int timeout_ms, tries, ms_per_pos;

static const pcg_opt opts[] = {
	{ "tokenizer", PCG_OPT_STR, &tok_path, NULL, 1, 0, "FILE",
	  "the target's tokenizer.json or GGUF file (the speech vocabulary and the prompt)" },
	{ "asg", PCG_OPT_STR, &asg_path, NULL, 1, 0, "FILE",
	  "ASG file for the pcg policy (- reads standard input)" },
	{ "voice", PCG_OPT_STR, &voice_path, NULL, 1, 0, "FILE",
	  "a phoneme voice's voice.json: espeak-ng phonemes and forced phoneme tokens "
	  "(default with --local: DIR/voice.json when it exists)" },
	{ "tm", PCG_OPT_STR, &tm_path, NULL, 1, 0, "FILE",
	  "token transition matrix (tm-build) for mtp-viterbi "
	  "(default with --local: DIR/tm when it exists)" },
	{ "listen", PCG_OPT_STR, &listen_url, "tcp://127.0.0.1:7600", 1, 0, "URL",
	  "endpoint for clients" },
	{ "draft", PCG_OPT_STR, &draft_url, "tcp://127.0.0.1:7601", 1, 0, "URL", "draftd" },
	{ "target", PCG_OPT_STR, &target_url, "tcp://127.0.0.1:7602", 1, 0, "URL", "targetd" },
	{ "codec", PCG_OPT_STR, &codec_url, "none", 1, 0, "URL",
	  "codec-decode, or none (tokens only)" },
	{ "timeout-ms", PCG_OPT_INT, &timeout_ms, "3000", 10, 600000, "N",
	  "per-try timeout of a request to a server" },
	{ "tries", PCG_OPT_INT, &tries, "2", 1, 100, "N", "tries per request before giving up" },
	{ "ms-per-position", PCG_OPT_INT, &ms_per_pos, "250", 0, 600000, "N",
	  "more wait per position a request makes a model server compute (a prompt's prefill)" },
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

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Stats of one synthesis, in the order of the result's stats array. */
enum { S_ROUNDS, S_DRAFTED, S_ACCEPTED, S_RATE, S_MAL, S_TOK_S, S_T_DRAFT, S_T_TARGET,
       S_T_POLICY, S_T_MSG, S_TOKENS, S_T_TOTAL, S_RESENDS, S_POS0 };

typedef struct verifier {
	tokenizer *tok;
	llasa_vocab voc;
	asg *groups;          /* --asg */
	asg *sent;            /* the last ASG a client sent with a request */
	uint64_t sent_hash;
	pcg_client *draft, *target, *codec;
	uint64_t next_session;
	voice_info *voice;    /* --voice: a phoneme voice, else NULL */
	int unk_phone;        /* its token for a phoneme it does not know */
	int width;            /* the rows of this request: speech (+ the end token) */
	llama_rows rows;
	proto_msg *q, *r;     /* request and reply to a server */
	float *p, *qv;        /* PROTO_MAX_N x width */
	float *hv;            /* MTP: PROTO_MAX_VEC x width, allocated on first use */
	int hv_width;
	tm *tm;               /* --tm, for mtp-viterbi */
} verifier;

/* Row index of a model id in the output rows (speech codes, then end). */
static int id_row(const verifier *v, int id)
{
	int c = llasa_id_to_code(&v->voc, id);
	return c >= 0 ? c : id == v->voc.end_id && !v->voice ? v->width - 1 : -1;
}

static int row_id(const verifier *v, int row)
{
	return row == v->width - 1 && !v->voice ? v->voc.end_id : llasa_code_to_id(&v->voc, row);
}

/* One request to a model server, resending the whole context once if the
 * server lost the session. *sync is what it holds of ctx. */
static int ask(verifier *v, pcg_client *c, proto_msg *q, const int *ctx, int n, int *sync,
	       const int *tail, int n_tail, double *t_server, int *resends, pcg_err *err)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		q->pos = *sync;
		q->n_append = 0;
		if (n - *sync + n_tail > PROTO_MAX_APPEND)
			return pcg_fail(err, "context of %d tokens exceeds %d", n + n_tail,
					PROTO_MAX_APPEND);
		for (int i = *sync; i < n; i++)
			q->append[q->n_append++] = ctx[i];
		for (int i = 0; i < n_tail; i++)
			q->append[q->n_append++] = tail[i];
		if (client_call(c, q, v->r, err) < 0)
			return -1;
		if (v->r->type == PROTO_PROBS) {
			*sync = n;
			*t_server += v->r->n_stats > 0 ? v->r->stats[0] : 0;
			if (v->r->width != v->width || v->r->n_vec != q->n * (1 + q->heads))
				return pcg_fail(err, "server answered %d x %d, asked %d x %d",
						v->r->n_vec, v->r->width, q->n * (1 + q->heads),
						v->width);
			return 0;
		}
		if (v->r->type == PROTO_ERROR && !strcmp(v->r->code, PROTO_E_UNKNOWN_SESSION) &&
		    attempt == 0) {
			*sync = 0; /* restarted or evicted: resend everything */
			(*resends)++;
			continue;
		}
		return pcg_fail(err, "%s: %s", v->r->type == PROTO_ERROR ? v->r->code : "reply",
				v->r->type == PROTO_ERROR ? v->r->msg : "unexpected type");
	}
	return pcg_fail(err, "server lost the session twice");
}

/* Sends newly committed codes to codec-decode. */
static int stream(verifier *v, uint64_t session, const int *ids, int n, int final,
		  const char *out, pcg_err *err)
{
	proto_msg *q = v->q;

	if (v->codec == NULL)
		return 0;
	memset(q, 0, offsetof(proto_msg, append));
	q->type = PROTO_AUDIO;
	q->session = session;
	q->n_append = 0;
	for (int i = 0; i < n; i++)
		q->append[q->n_append++] = llasa_id_to_code(&v->voc, ids[i]);
	q->final = final;
	snprintf(q->out, sizeof q->out, "%s", out);
	if (client_call(v->codec, q, v->r, err) < 0)
		return -1;
	if (v->r->type == PROTO_ERROR)
		return pcg_fail(err, "codec-decode: %s: %s", v->r->code, v->r->msg);
	return 0;
}

static uint64_t fnv64(const unsigned char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* An ASG image sent with a request: validated by asg_open through a memory
 * file, kept for the next request that sends the same bytes. */
static const asg *sent_asg(verifier *v, const void *img, size_t len, pcg_err *err)
{
	uint64_t h = fnv64(img, len) ^ len;
	char path[64];
	int fd;

	if (v->sent && v->sent_hash == h)
		return v->sent;
	asg_close(&v->sent);
	fd = memfd_create("asg", MFD_CLOEXEC);
	if (fd < 0) {
		pcg_fail(err, "memfd_create: %s", strerror(errno));
		return NULL;
	}
	if (write(fd, img, len) != (ssize_t)len) {
		pcg_fail(err, "asg: cannot buffer %zu bytes", len);
		close(fd);
		return NULL;
	}
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	v->sent = asg_open(path, err);
	close(fd); /* the mapping keeps the pages */
	if (v->sent == NULL) {
		pcg_err_prefix(err, "field 'asg'");
		return NULL;
	}
	if (asg_get(v->sent)->n > (uint32_t)v->voc.speech_count) {
		pcg_fail(err, "field 'asg': covers %u tokens, the vocabulary has %d speech tokens",
			 asg_get(v->sent)->n, v->voc.speech_count);
		asg_close(&v->sent);
		return NULL;
	}
	v->sent_hash = h;
	return v->sent;
}

/* A phoneme voice's prompt text and forced tokens for one request: the
 * speaker token and espeak-ng's phoneme tokens, and for each phoneme its
 * token id and start frame. */
typedef struct forced {
	char *text;
	int *id, *frame;
	int n, n_frames, unknown;
} forced;

static void forced_free(forced *f)
{
	free(f->text);
	free(f->id);
	free(f->frame);
	memset(f, 0, sizeof *f);
}

static int forced_make(verifier *v, const proto_msg *req, forced *f, pcg_err *err)
{
	voice_render r;
	char tok[32];
	size_t len = 0;

	memset(f, 0, sizeof *f);
	if (req->speaker >= v->voice->n_speakers)
		return pcg_fail(err, "field 'speaker': %d, the voice has %d speakers", req->speaker,
				v->voice->n_speakers);
	if (voice_speak(&v->voice->speakers[req->speaker], req->text, v->voice->sample_rate,
			v->voice->hop, 0, &r, err) < 0)
		return -1;
	f->text = malloc((size_t)(r.n_ph + 1) * 32);
	f->id = malloc((size_t)(r.n_ph + 1) * sizeof *f->id);
	f->frame = malloc((size_t)(r.n_ph + 1) * sizeof *f->frame);
	if (f->text == NULL || f->id == NULL || f->frame == NULL) {
		voice_render_free(&r);
		forced_free(f);
		return pcg_fail(err, "out of memory");
	}
	voice_speaker_token(req->speaker, tok, sizeof tok);
	len += (size_t)sprintf(f->text, "%s", tok);
	for (int i = 0; i < r.n_ph; i++) {
		voice_phone_token(r.ph[i].name, tok, sizeof tok);
		int id = tok_token_id(v->tok, tok, strlen(tok));
		if (id < 0) { /* a phoneme the corpus never had: the pause stands in */
			id = v->unk_phone;
			f->unknown++;
			snprintf(tok, sizeof tok, "<|p__|>");
		}
		len += (size_t)sprintf(f->text + len, "%s", tok);
		f->id[f->n] = id;
		f->frame[f->n++] = r.ph[i].frame;
	}
	f->n_frames = r.n_frames;
	voice_render_free(&r);
	if (f->n_frames == 0) {
		forced_free(f);
		return pcg_fail(err, "text: espeak-ng speaks it as silence");
	}
	return 0;
}

/* One synthesis: the round loop. Fills rep (a result or an error). */
static void synth(verifier *v, const proto_msg *req, proto_msg *rep)
{
	pcg_err err = { "" };
	int *ctx = NULL, *sp = NULL, n = 0, nsp = 0, n_prompt, d_sync = 0, t_sync = 0, resends = 0;
	size_t np = 0;
	double st[PROTO_MAX_STATS] = { 0 }, t0 = now(), t_server = 0; /* servers' own compute */
	const int L = req->n;
	const uint64_t session = v->next_session++;
	/* mtp-<policy>: the target's MTP heads draft and <policy> verifies;
	 * mtp-viterbi: the heads' Viterbi path is emitted unverified. */
	const int mtp = !strncmp(req->policy, "mtp-", 4);
	const int viterbi = mtp && !strcmp(req->policy + 4, "viterbi");
	const char *pname = mtp ? req->policy + 4 : req->policy;
	const int is_none = !strcmp(pname, "none") || viterbi;
	const int kind = viterbi ? -1 : policy_kind_from_name(pname);
	const int heads = mtp ? L : 0;
	policy *pol = NULL;
	policy_result *res = NULL;
	forced fc = { 0 };
	int *pids = NULL;

	if (req->out[0] != '\0' && v->codec == NULL) {
		proto_error(rep, req->id, PROTO_E_BAD_REQUEST,
			    "field 'out': this pipeline has no codec to write %.200s (start the "
			    "verifier with --codec URL: pcg-up --codec-weights), or ask for tokens "
			    "only", req->out);
		return;
	}
	if ((!is_none && kind < 0) || (mtp && !viterbi && kind < 0)) {
		proto_error(rep, req->id, PROTO_E_BAD_REQUEST,
			    "field 'policy': '%s' is not sd, ssd, pcg, greedy, none, mtp-viterbi or "
			    "mtp- and one of the four", req->policy);
		return;
	}
	if (mtp && (L < 1 || L + 1 > PROTO_MAX_N)) {
		proto_error(rep, req->id, PROTO_E_BAD_REQUEST,
			    "field 'n': %d MTP heads not in [1, %d]", L, PROTO_MAX_N - 1);
		return;
	}
	if (viterbi && v->tm == NULL) {
		proto_error(rep, req->id, PROTO_E_BAD_REQUEST,
			    "policy mtp-viterbi needs a transition matrix (verifier --tm)");
		return;
	}
	const asg *groups = v->groups;
	if (req->asg_len > 0 && (groups = sent_asg(v, req->asg, req->asg_len, &err)) == NULL) {
		proto_error(rep, req->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
		return;
	}
	if (kind == POLICY_PCG && groups == NULL) {
		proto_error(rep, req->id, PROTO_E_BAD_REQUEST,
			    "policy pcg needs an ASG (verifier --asg, or pcg-synth --asg)");
		return;
	}
	if (!is_none && (L < 1 || L + 1 > PROTO_MAX_N)) {
		proto_error(rep, req->id, PROTO_E_BAD_REQUEST, "field 'n': lookahead %d not in [1, %d]",
			    L, PROTO_MAX_N - 1);
		return;
	}
	/* A phoneme voice: the rows are the speech tokens alone (the length is
	 * espeak-ng's, so the end token is never drawn); else speech and end. */
	if (v->voice) {
		v->width = v->voc.speech_count;
		v->rows = (llama_rows){ 1, { v->voc.speech_first },
				       { v->voc.speech_first + v->voc.speech_count } };
	} else {
		v->width = v->voc.speech_count + 1;
		v->rows = (llama_rows){ 2, { v->voc.speech_first, v->voc.end_id },
				       { v->voc.speech_first + v->voc.speech_count,
					 v->voc.end_id + 1 } };
	}
	if (v->voice && forced_make(v, req, &fc, &err) < 0) {
		proto_error(rep, req->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
		return;
	}
	const int max_tokens = v->voice && fc.n_frames < req->max_tokens ? fc.n_frames
									  : req->max_tokens;
	if (mtp && v->hv_width < v->width) {
		free(v->hv);
		v->hv = malloc((size_t)PROTO_MAX_VEC * v->width * sizeof(float));
		v->hv_width = v->hv ? v->width : 0;
		if (v->hv == NULL) {
			proto_error(rep, req->id, PROTO_E_INTERNAL, "out of memory");
			goto done;
		}
	}
	/* the heads' distributions at the last committed token (mtp-*) */
	const float *hp[PROTO_MAX_HEADS + 1];
	int have_heads = 0;
	if (!is_none) {
		policy_params pp = { .kind = (policy_kind)kind, .beta = req->beta,
				     .groups = kind == POLICY_PCG ? groups : NULL,
				     .end_token = v->voice ? -1 : v->width - 1 };
		pol = policy_new(&pp, v->width, &err);
		res = malloc(sizeof *res);
		if (pol == NULL || res == NULL) {
			proto_error(rep, req->id, PROTO_E_BAD_REQUEST, "%s", pol ? "out of memory" : err.msg);
			goto done;
		}
	}
	llasa_prompt pr = { .text = v->voice ? fc.text : req->text };
	if (llasa_prompt_ids(v->tok, &v->voc, &pr, &pids, &np, &err) < 0) {
		proto_error(rep, req->id, PROTO_E_BAD_REQUEST, "text: %s", err.msg);
		goto done;
	}
	n_prompt = (int)np;
	ctx = malloc(((size_t)n_prompt + max_tokens + fc.n + PROTO_MAX_N) * sizeof *ctx);
	sp = malloc(((size_t)max_tokens + PROTO_MAX_N) * sizeof *sp);
	if (ctx == NULL || sp == NULL) {
		proto_error(rep, req->id, PROTO_E_INTERNAL, "out of memory");
		goto done;
	}
	memcpy(ctx, pids, np * sizeof *ctx);
	n = n_prompt;

	proto_msg *q = v->q;
	int ended = 0, rounds = 0, j = 0;
	double accept_pos[PROTO_MAX_N] = { 0 };
	while (!ended && nsp < max_tokens) {
		int out[PROTO_MAX_N], n_emit = 0, x[PROTO_MAX_N], accepted = 0, Lr = L;
		const int committed = nsp;
		double t;

		/* 0. a phoneme voice: the phoneme tokens due at this frame go in,
		 * and the round stops short of the next one. Heads computed
		 * before a forced token do not see it: they are stale. */
		int room = PROTO_MAX_N;
		if (v->voice) {
			while (j < fc.n && fc.frame[j] <= nsp) {
				ctx[n++] = fc.id[j++];
				have_heads = 0;
			}
			room = (j < fc.n ? fc.frame[j] : fc.n_frames) - nsp;
			if (Lr > room - 1)
				Lr = room - 1;
		}
		const int target_only = is_none || Lr < 1 || (mtp && !have_heads);

		/* 1. draft: x_1..x_Lr and p_1..p_Lr, from draftd or from the
		 * target's heads at the last committed token */
		if (!target_only && mtp) {
			pcg_rng drng;
			pcg_rng_init(&drng, req->seed ^ 0x6d74702d64726166ull, 1 + (uint64_t)rounds);
			for (int i = 0; i < Lr; i++) {
				float *pi = v->p + (size_t)i * v->width;
				memcpy(pi, hp[i], (size_t)v->width * sizeof *pi);
				int row = pcg_sample(pi, v->width, pcg_rng_uniform(&drng));
				x[i] = row_id(v, row < 0 ? 0 : row);
			}
		} else if (!target_only) {
			memset(q, 0, offsetof(proto_msg, append));
			q->type = PROTO_PROPOSE;
			q->session = session;
			q->n = Lr;
			q->samp = req->samp;
			q->rows = v->rows;
			q->f16 = req->f16;
			q->seed = req->seed * 0x9e3779b97f4a7c15ull + (uint64_t)rounds;
			t = now();
			if (ask(v, v->draft, q, ctx, n, &d_sync, NULL, 0, &t_server, &resends, &err) < 0)
				goto fail;
			st[S_T_DRAFT] += now() - t;
			for (int i = 0; i < Lr; i++) {
				x[i] = v->r->x[i];
				proto_vector(v->r, i, v->p + (size_t)i * v->width);
			}
		}
		/* 2. target: q_1..q_{Lr+1} in one pass over [last committed, x_1..x_Lr]
		 * (mtp-*: with the heads' distributions at each position) */
		memset(q, 0, offsetof(proto_msg, append));
		q->type = PROTO_SCORE;
		q->session = session;
		q->n = target_only ? 1 : Lr + 1;
		q->samp = req->samp;
		q->rows = v->rows;
		q->f16 = req->f16;
		q->heads = heads;
		t = now();
		if (ask(v, v->target, q, ctx, n, &t_sync, x, target_only ? 0 : Lr, &t_server,
			&resends, &err) < 0)
			goto fail;
		st[S_T_TARGET] += now() - t;
		for (int i = 0; i < q->n; i++) {
			proto_vector(v->r, i * (1 + heads), v->qv + (size_t)i * v->width);
			for (int k = 0; k < heads; k++) {
				int vi = i * (1 + heads) + 1 + k;
				proto_vector(v->r, vi, v->hv + (size_t)vi * v->width);
			}
		}

		/* 3. policy */
		t = now();
		pcg_rng rng;
		pcg_rng_init(&rng, req->seed, 1 + (uint64_t)rounds);
		if (viterbi) {
			/* the target's q and the heads: 1 + heads positions */
			const int V = v->voice ? v->width : v->width - 1;
			viterbi_opts vo = { req->viterbi_k > 0 ? req->viterbi_k : 8, -1, VITERBI_UNION };
			uint32_t path[PROTO_MAX_N];
			memcpy(v->hv, v->qv, (size_t)v->width * sizeof *v->hv);
			if (V > (int)tm_get(v->tm)->n) {
				pcg_fail(&err, "the transition matrix covers %u tokens, the model %d",
					 tm_get(v->tm)->n, V);
				goto fail;
			}
			if (v->width != V) /* the end row sits between the vectors */
				for (int k = 1; k <= heads; k++)
					memmove(v->hv + (size_t)k * V, v->hv + (size_t)k * v->width,
						(size_t)V * sizeof *v->hv);
			if (viterbi_decode(v->tm, v->hv, 1 + heads, V, &vo, path, NULL, NULL, &err) < 0)
				goto fail;
			for (int i = 0; i < 1 + heads && i < room; i++)
				out[n_emit++] = row_id(v, (int)path[i]);
			accepted = n_emit - 1;
			for (int i = 0; i < accepted; i++)
				accept_pos[i] += 1;
		} else if (target_only) {
			int row = pcg_sample(v->qv, v->width, pcg_rng_uniform(&rng));
			out[n_emit++] = row_id(v, row < 0 ? v->width - 1 : row);
		} else {
			int xr[PROTO_MAX_N];
			const float *pp[PROTO_MAX_N], *qq[PROTO_MAX_N];
			for (int i = 0; i < Lr; i++) {
				xr[i] = id_row(v, x[i]);
				pp[i] = v->p + (size_t)i * v->width;
			}
			for (int i = 0; i <= Lr; i++)
				qq[i] = v->qv + (size_t)i * v->width;
			if (policy_run(pol, Lr, xr, pp, qq, &rng, res, &err) < 0)
				goto fail;
			n_emit = res->n_tokens;
			accepted = res->n_accepted;
			for (int i = 0; i < n_emit; i++)
				out[i] = row_id(v, res->tokens[i]);
			for (int i = 0; i < accepted; i++)
				accept_pos[i] += 1;
		}
		/* the next drafts: the heads at the last accepted position, whose
		 * q gave the token that ends this round */
		if (mtp && !viterbi) {
			const int a = target_only ? 0 : accepted;
			for (int k = 0; k < heads; k++)
				hp[k] = v->hv + ((size_t)a * (1 + heads) + 1 + k) * v->width;
			have_heads = 1;
		}
		st[S_T_POLICY] += now() - t;

		/* 4. commit, up to the end token */
		for (int i = 0; i < n_emit && !ended && nsp < max_tokens; i++) {
			if (out[i] == v->voc.end_id) {
				ended = 1;
			} else {
				ctx[n++] = out[i];
				sp[nsp++] = out[i];
			}
		}
		rounds++;
		st[S_DRAFTED] += viterbi ? heads : target_only ? 0 : Lr;
		st[S_ACCEPTED] += accepted;
		if (stream(v, session, sp + committed, nsp - committed, 0, req->out, &err) < 0)
			goto fail;
	}
	if (stream(v, session, NULL, 0, 1, req->out, &err) < 0)
		goto fail;
	/* The servers may drop the session now; a lost drop costs only memory. */
	memset(q, 0, offsetof(proto_msg, append));
	q->type = PROTO_DROP;
	q->session = session;
	client_call(v->target, q, v->r, &err);
	if (!is_none && !mtp) {
		q->type = PROTO_DROP;
		client_call(v->draft, q, v->r, &err);
	}

	rep->type = PROTO_RESULT;
	rep->id = req->id;
	rep->n_append = nsp;
	memcpy(rep->append, sp, (size_t)nsp * sizeof *sp);
	st[S_ROUNDS] = rounds;
	st[S_RATE] = st[S_DRAFTED] > 0 ? st[S_ACCEPTED] / st[S_DRAFTED] : 0;
	st[S_MAL] = rounds > 0 ? 1 + st[S_ACCEPTED] / rounds : 0;
	st[S_T_TOTAL] = now() - t0;
	st[S_TOKENS] = nsp;
	st[S_TOK_S] = st[S_T_TOTAL] > 0 ? nsp / st[S_T_TOTAL] : 0;
	/* messaging: time in calls minus the servers' own compute */
	st[S_T_MSG] = st[S_T_DRAFT] + st[S_T_TARGET] - t_server;
	st[S_RESENDS] = resends;
	rep->n_stats = S_POS0 + (is_none && !viterbi ? 0 : L);
	for (int i = 0; i < S_POS0; i++)
		rep->stats[i] = st[i];
	for (int i = 0; (!is_none || viterbi) && i < L; i++)
		rep->stats[S_POS0 + i] = rounds ? accept_pos[i] / rounds : 0;
	snprintf(rep->msg, sizeof rep->msg, "%.255s", req->out);
	goto done;
fail:
	proto_error(rep, req->id, PROTO_E_INTERNAL, "%s", err.msg);
done:
	free(pids);
	free(ctx);
	free(sp);
	forced_free(&fc);
	policy_free(&pol);
	free(res);
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
	ls->rc = modelserver_serve(ls->ctx, &ls->cfg, &stop);
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

/* ping: the verifier and every server behind it answer. */
static void ping(verifier *v, const proto_msg *req, proto_msg *rep)
{
	pcg_err err = { "" };
	char summary[256] = "";
	pcg_client *cs[3] = { v->draft, v->target, v->codec };
	const char *names[3] = { "draftd", "targetd", "codec-decode" };

	for (int i = 0; i < 3; i++) {
		if (cs[i] == NULL)
			continue;
		memset(v->q, 0, offsetof(proto_msg, append));
		v->q->type = PROTO_PING;
		if (client_call(cs[i], v->q, v->r, &err) < 0 || v->r->type != PROTO_PONG) {
			proto_error(rep, req->id, PROTO_E_INTERNAL, "%s: %s", names[i],
				    v->r->type == PROTO_ERROR ? v->r->msg : err.msg);
			return;
		}
		snprintf(summary + strlen(summary), sizeof summary - strlen(summary), "%s%s ok",
			 *summary ? ", " : "", names[i]);
	}
	rep->type = PROTO_PONG;
	rep->id = req->id;
	snprintf(rep->msg, sizeof rep->msg, "verifier ok%s%s (speech %d tokens%s)",
		 *summary ? ", " : "", summary, v->voc.speech_count, v->groups ? ", asg" : "");
}

/* net_serve's handler. */
static void handle(void *ctx, const proto_msg *req, proto_msg *rep)
{
	verifier *v = ctx;

	if (req->type == PROTO_SYNTH)
		synth(v, req, rep);
	else if (req->type == PROTO_PING)
		ping(v, req, rep);
	else
		proto_error(rep, req->id, PROTO_E_BAD_REQUEST, "the verifier does not take '%s'",
			    proto_type_name(req->type));
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	verifier v = { 0 };
	void *ctx = NULL, *sock = NULL;
	int rc = 1, layers[1024], n_layers = 0;
	local_server ls[2] = { 0 };
	char self[4096];
	ssize_t sl;

	/* In --local mode the model servers are threads here: passive OpenMP
	 * waiting, as draftd and targetd set it (see lib/modelserver.c). */
	if (getenv("OMP_WAIT_POLICY") == NULL &&
	    (sl = readlink("/proc/self/exe", self, sizeof self - 1)) > 0) {
		self[sl] = '\0';
		setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
		execv(self, argv);
	}
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first >= 0 && tok_path == NULL && local_dir)
		tok_path = local_dir; /* its tokenizer.json, or a GGUF's own (tok_open) */
	if (first < 0 || first != argc || tok_path == NULL) {
		fprintf(stderr, "%s: %s\n", prog, first < 0 ? err.msg
			: first != argc ? "unexpected argument" : "--tokenizer FILE is required");
		pcg_opts_usage(stderr, prog, SYNOPSIS, opts);
		return 2;
	}
	if (local_dir) {
		if ((n_layers = modelserver_parse_layers(local_layers, layers, 1024, &err)) < 0) {
			fprintf(stderr, "%s: --local-draft-layers: %s\n", prog, err.msg);
			return 2;
		}
		int dev;
		if (pcg_device_parse(local_device, &dev, &err) < 0) {
			fprintf(stderr, "%s: --device: %s\n", prog, err.msg);
			return 2;
		}
		if (pcg_device_check(dev, &err) < 0) {
			fprintf(stderr, "%s: %s\n", prog, err.msg);
			return 1;
		}
		draft_url = "inproc://draftd";
		target_url = "inproc://targetd";
	}
	if (net_curve_setup(curve_key, curve_allow, curve_peers, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return 1;
	}
	const char *urls[4] = { listen_url, draft_url, target_url, codec_url };
	for (int i = 0; i < 4; i++)
		if (!(i == 3 && !strcmp(codec_url, "none")) && net_endpoint_ok(urls[i], i == 0, &err) < 0) {
			fprintf(stderr, "%s: %s\n", prog, err.msg);
			return 2;
		}
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
	if (tm_path && (v.tm = tm_open(tm_path, &err)) == NULL)
		goto fail;
	if (voice_path) {
		static voice_info vi;
		if (voice_load(voice_path, &vi, &err) < 0)
			goto fail;
		v.voice = &vi;
		v.unk_phone = tok_token_id(v.tok, "<|p__|>", 7);
		if (v.unk_phone < 0) {
			pcg_fail(&err, "%s: the tokenizer has no pause token <|p__|>: not a phoneme "
				 "voice's", voice_path);
			goto fail;
		}
	}
	if (v.groups && asg_get(v.groups)->n > (uint32_t)v.voc.speech_count) {
		pcg_fail(&err, "%s: covers %u tokens, the vocabulary has %d speech tokens", asg_path,
			 asg_get(v.groups)->n, v.voc.speech_count);
		goto fail;
	}
	v.width = v.voc.speech_count + 1;
	v.rows = (llama_rows){ 2, { v.voc.speech_first, v.voc.end_id },
			       { v.voc.speech_first + v.voc.speech_count, v.voc.end_id + 1 } };
	v.next_session = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
	v.q = malloc(sizeof *v.q);
	v.r = malloc(sizeof *v.r);
	v.p = malloc((size_t)PROTO_MAX_N * v.width * sizeof(float));
	v.qv = malloc((size_t)PROTO_MAX_N * v.width * sizeof(float));
	ctx = zmq_ctx_new();
	if (!v.q || !v.r || !v.p || !v.qv || !ctx) {
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
	v.draft = client_new(ctx, draft_url, timeout_ms, tries, &err);
	if (v.draft == NULL || (v.target = client_new(ctx, target_url, timeout_ms, tries, &err)) == NULL)
		goto fail;
	client_set_ms_per_position(v.draft, ms_per_pos);
	client_set_ms_per_position(v.target, ms_per_pos);
	if (strcmp(codec_url, "none") &&
	    (v.codec = client_new(ctx, codec_url, timeout_ms, tries, &err)) == NULL)
		goto fail;
	sock = net_server(ctx, listen_url, &err);
	if (sock == NULL)
		goto fail;

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "%s: listening on %s (draft %s, target %s, codec %s)\n", prog, listen_url,
		draft_url, target_url, codec_url);
	if (net_serve(sock, prog, handle, &v, &stop, NULL) < 0) {
		pcg_fail(&err, "out of memory");
		goto fail;
	}
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "%s: %s\n", prog, err.msg);
out:
	net_server_close(&sock, listen_url);
	client_free(&v.draft);
	client_free(&v.target);
	client_free(&v.codec);
	stop = 1;
	for (int i = 0; i < 2; i++)
		if (ls[i].started) {
			pthread_join(ls[i].th, NULL);
			if (ls[i].rc != 0)
				rc = 1;
		}
	if (ctx)
		zmq_ctx_term(ctx);
	asg_close(&v.groups);
	asg_close(&v.sent);
	tm_close(&v.tm);
	free(v.hv);
	tok_free(&v.tok);
	free(v.q);
	free(v.r);
	free(v.p);
	free(v.qv);
	return rc;
}
