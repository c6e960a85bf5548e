/* test_proto.c: the pipeline's messages: every type round-trips, f16
 * vectors come back within f16 rounding, a sparse probs reply gives the
 * vectors of the dense one to the bit (and the policies the same tokens for
 * a seed), a peer of another protocol version gets an error naming both
 * versions, and hostile bytes give an error that names the problem, never
 * a crash or a large allocation (a mutation loop over valid messages; this
 * test also runs under ASan and UBSan). A synth's defaults and its one
 * check (synth.h): each bound refused, naming the field, by the check and by
 * the parser. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "policy.h"
#include "proto.h"
#include "rng.h"
#include "sampling.h"
#include "synth.h"

/* Makes m a propose or score. */
static proto_msg *fill_req(proto_msg *m, proto_type t)
{
	proto_init(m, t, 77);
	proto_model_req *r = proto_model_mut(m);
	r->session = 0x123456789abcULL;
	r->pos = 5;
	r->n_append = 3;
	r->append[0] = 128260;
	r->append[1] = 128264 + 7;
	r->append[2] = 193799;
	r->n = 3;
	r->samp = (pcg_sampling){ 0.8f, 50, 0.95f };
	r->rows = (llama_rows){ 2, { 128264, 128261 }, { 193800, 128262 } };
	if (t == PROTO_PROPOSE)
		m->propose.seed = 42;
	return m;
}

static proto_msg *req(proto_type t)
{
	return fill_req(calloc(1, sizeof(proto_msg)), t);
}

static int roundtrip(const proto_msg *m, proto_msg *out, pcg_err *err)
{
	void *buf;
	size_t len;
	int rc;

	if (proto_pack(m, &buf, &len, err) < 0)
		return -1;
	/* Copy, so that out's values point into a buffer we keep. */
	static unsigned char keep[1 << 20];
	memcpy(keep, buf, len < sizeof keep ? len : sizeof keep);
	free(buf);
	rc = proto_parse(keep, len, out, err);
	return rc;
}

static void bad(const char *what, const void *buf, size_t len, const char *want)
{
	pcg_err err = { "" };
	proto_msg *o = calloc(1, sizeof *o);
	int rc = proto_parse(buf, len, o, &err);

	CHECKF(rc == -1 && strstr(err.msg, want) != NULL, "%s: rc %d, '%s' lacks '%s'", what, rc,
	       err.msg, want);
	free(o);
}

static void test_roundtrip(void)
{
	pcg_err err = { "" };
	proto_msg *m = req(PROTO_PROPOSE), *o = calloc(1, sizeof *o);

	CHECKF(roundtrip(m, o, &err) == 0, "%s", err.msg);
	const proto_model_req *r = &o->propose.req;
	CHECK(o->type == PROTO_PROPOSE && o->id == 77 && r->session == m->propose.req.session);
	CHECK(r->pos == 5 && r->n_append == 3 && r->append[2] == 193799 && r->n == 3);
	CHECK(r->samp.temperature == 0.8f && r->samp.top_k == 50 && r->samp.top_p == 0.95f);
	CHECK(o->propose.seed == 42 && r->rows.n == 2 && r->rows.begin[1] == 128261 &&
	      r->rows.end[0] == 193800 && o->propose.n_forced == 0);
	free(m);

	m = req(PROTO_SCORE);
	m->score.heads = 2;
	CHECKF(roundtrip(m, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_SCORE && o->score.req.n == 3 && o->score.heads == 2 &&
	      o->score.req.n_append == 3 && o->score.req.append[0] == 128260);

	proto_init(m, PROTO_DROP, 77);
	m->drop.session = 0x123456789abcULL;
	CHECKF(roundtrip(m, o, &err) == 0 && o->type == PROTO_DROP &&
	       o->drop.session == m->drop.session, "%s", err.msg);
	proto_init(m, PROTO_PING, 77);
	CHECK(roundtrip(m, o, &err) == 0 && o->type == PROTO_PING && o->id == 77);

	/* probs: f32 exactly, f16 within its rounding (relative 2^-11). */
	float v[2 * 5] = { 0.5f, 0.25f, 0.125f, 0.125f, 0.0f, 1e-3f, 0.2f, 0.3f, 0.4f, 0.099f };
	proto_msg *pm = calloc(1, sizeof *pm);
	proto_init(pm, PROTO_PROBS, 9);
	proto_probs *p = &pm->probs;
	p->n_x = 2;
	p->x[0] = 3;
	p->x[1] = 4;
	p->n_vec = 2;
	p->width = 5;
	p->values = v;
	p->n_stats = 1;
	p->stats[0] = 0.25;
	for (int f16 = 0; f16 < 2; f16++) {
		p->f16 = f16;
		CHECKF(roundtrip(pm, o, &err) == 0, "%s", err.msg);
		const proto_probs *op = &o->probs;
		CHECK(o->type == PROTO_PROBS && op->n_x == 2 && op->x[1] == 4 && op->n_vec == 2 &&
		      op->width == 5 && op->n_stats == 1 && op->stats[0] == 0.25);
		float back[5];
		int ok = 1;
		for (int i = 0; i < 2; i++) {
			proto_vector(op, i, back);
			for (int j = 0; j < 5; j++) {
				float want = v[i * 5 + j], d = back[j] - want;
				ok &= f16 ? (d < 0 ? -d : d) <= want / 2048 + 1e-7f : back[j] == want;
			}
		}
		CHECKF(ok, "probs f16=%d", f16);
	}

	/* synth -> result, audio: the verifier's messages. */
	proto_msg *sm = calloc(1, sizeof *sm);
	proto_init(sm, PROTO_SYNTH, 77);
	proto_synth *s = &sm->synth;
	snprintf(s->text, sizeof s->text, "Hello, wörld.");
	snprintf(s->policy, sizeof s->policy, "pcg");
	s->beta = 0.4f;
	s->lookahead = 3;
	s->samp = (pcg_sampling){ 0.8f, 50, 1.0f };
	s->seed = 7;
	s->max_tokens = 500;
	s->stream = s->audio = 1;
	s->chunk = 10;
	s->left = 20;
	s->right = 4;
	CHECKF(roundtrip(sm, o, &err) == 0, "%s", err.msg);
	const proto_synth *os = &o->synth;
	CHECK(o->type == PROTO_SYNTH && !strcmp(os->text, "Hello, wörld.") &&
	      !strcmp(os->policy, "pcg") && os->beta == 0.4f && os->lookahead == 3 &&
	      os->max_tokens == 500 && os->stream && os->audio && os->chunk == 10 &&
	      os->left == 20 && os->right == 4 && os->seed == 7 && os->samp.top_k == 50);
	/* the first chunk (optional: absent above, an old client's request:
	 * fixed chunks), sent when not 0 */
	CHECK(os->first == 0);
	s->first = 5;
	CHECKF(roundtrip(sm, o, &err) == 0, "%s", err.msg);
	CHECK(os->first == 5 && os->chunk == 10);
	{
		void *buf;
		size_t len;
		s->first = 0;
		CHECK(proto_pack(sm, &buf, &len, &err) == 0);
		CHECK(memmem(buf, len, "\xa5" "first", 6) == NULL);
		free(buf);
		s->first = 11; /* beyond its chunk: named */
		CHECK(proto_pack(sm, &buf, &len, &err) == 0);
		bad("synth: first beyond chunk", buf, len, "field 'first': 11: want 0 to 10");
		free(buf);
		s->first = 0;
	}
	/* the policy's parameters by name (optional: absent above) */
	CHECK(os->n_args == 0);
	s->n_args = 2;
	snprintf(s->arg_name[0], sizeof s->arg_name[0], "epsilon");
	s->arg_val[0] = 0.09;
	snprintf(s->arg_name[1], sizeof s->arg_name[1], "k");
	s->arg_val[1] = 50;
	CHECKF(roundtrip(sm, o, &err) == 0, "%s", err.msg);
	CHECK(os->n_args == 2 && !strcmp(os->arg_name[0], "epsilon") && os->arg_val[0] == 0.09 &&
	      !strcmp(os->arg_name[1], "k") && os->arg_val[1] == 50);
	/* a cloning prompt (optional: absent above): the audio's bytes as sent */
	CHECK(os->prompt_audio_len == 0 && os->prompt_text[0] == '\0');
	static const unsigned char wav[] = "RIFF....WAVEfmt not really audio";
	s->prompt_audio = wav;
	s->prompt_audio_len = sizeof wav;
	snprintf(s->prompt_text, sizeof s->prompt_text, "This is my voice. ");
	CHECKF(roundtrip(sm, o, &err) == 0, "%s", err.msg);
	CHECK(os->prompt_audio_len == sizeof wav && !memcmp(os->prompt_audio, wav, sizeof wav) &&
	      !strcmp(os->prompt_text, "This is my voice. ") && os->n_args == 2);
	s->prompt_audio_len = 0;
	s->prompt_text[0] = '\0';
	{
		/* a repeated name, a non-number and too many are refused by name */
		void *buf;
		size_t len;
		snprintf(s->arg_name[1], sizeof s->arg_name[1], "epsilon");
		CHECK(proto_pack(sm, &buf, &len, &err) == 0);
		bad("args: a name twice", buf, len, "'epsilon' twice");
		free(buf);
		s->n_args = PROTO_MAX_ARGS + 1;
		CHECK(proto_pack(sm, &buf, &len, &err) < 0 && strstr(err.msg, "policy arguments"));
	}
	free(sm);

	proto_init(m, PROTO_RESULT, 77);
	proto_result *res = &m->result;
	res->n_tokens = 2;
	res->tokens[0] = 5;
	res->tokens[1] = 6;
	res->n_stats = 3;
	res->stats[0] = 1.5;
	res->stats[1] = 1e-9;
	res->stats[2] = 12;
	CHECKF(roundtrip(m, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_RESULT && o->result.n_tokens == 2 && o->result.tokens[1] == 6 &&
	      o->result.n_stats == 3 && o->result.stats[0] == 1.5 &&
	      o->result.stats[1] == 1e-9 && o->result.stats[2] == 12);
	proto_init(m, PROTO_AUDIO, 77);
	proto_audio *au = &m->audio;
	au->final = 1;
	au->n_tokens = 2;
	au->tokens[0] = 5;
	au->tokens[1] = 6;
	au->chunk = 10;
	au->left = 20;
	au->right = 4;
	CHECKF(roundtrip(m, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_AUDIO && o->audio.final == 1 && o->audio.n_tokens == 2 &&
	      o->audio.tokens[1] == 6 && o->audio.chunk == 10 && o->audio.left == 20 &&
	      o->audio.right == 4 && o->audio.first == 0);
	au->first = 3; /* optional, as a synth's */
	CHECKF(roundtrip(m, o, &err) == 0, "%s", err.msg);
	CHECK(o->audio.first == 3 && o->audio.chunk == 10);
	{
		void *buf;
		size_t len;
		au->first = 12;
		CHECK(proto_pack(m, &buf, &len, &err) == 0);
		bad("audio: first beyond chunk", buf, len, "audio: field 'first': 12: want 0 to 10");
		free(buf);
	}
	/* progress and pcm: the audio as s16le, read back at any alignment */
	const int16_t pcm[5] = { 0, -32768, 32767, 1, -1 };
	proto_init(m, PROTO_PROGRESS, 77);
	proto_progress *pr = &m->progress;
	pr->queue = 3;
	pr->pos = 7;
	pr->rate = 16000;
	pr->samples = pcm;
	pr->n_samples = 5;
	pr->n_tokens = 2;
	pr->tokens[0] = 5;
	pr->tokens[1] = 6;
	CHECKF(roundtrip(m, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_PROGRESS && o->progress.queue == 3 && o->progress.pos == 7 &&
	      o->progress.rate == 16000 && o->progress.n_samples == 5 &&
	      !memcmp(o->progress.samples, pcm, sizeof pcm) && o->progress.n_tokens == 2);
	proto_init(m, PROTO_PCM, 77);
	m->pcm.rate = 16000;
	m->pcm.samples = pcm;
	m->pcm.n_samples = 5;
	CHECKF(roundtrip(m, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_PCM && o->pcm.n_samples == 5 && o->pcm.rate == 16000 &&
	      !memcmp(o->pcm.samples, pcm, sizeof pcm));
	proto_init(m, PROTO_CANCEL, 77);
	m->cancel.session = 99;
	CHECKF(roundtrip(m, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_CANCEL && o->cancel.session == 99);

	proto_error(o, 5, PROTO_E_UNKNOWN_SESSION, "session %d not held", 12);
	proto_msg *e = calloc(1, sizeof *e);
	CHECKF(roundtrip(o, e, &err) == 0, "%s", err.msg);
	CHECK(e->type == PROTO_ERROR && e->id == 5 && !strcmp(e->error.code, "unknown-session") &&
	      !strcmp(e->error.msg, "session 12 not held"));
	free(m);
	free(o);
	free(pm);
	free(e);
}

/* n vectors of width w from random logits, tempered by s (row i uses
 * s[i % ns]): exact zeros wherever the sampler removed a token. */
static void make_probs(float *out, int n, int w, const pcg_sampling *s, int ns, uint64_t seed)
{
	pcg_rng r;
	float *lg = malloc((size_t)w * sizeof *lg);
	pcg_err err;

	pcg_rng_init(&r, seed, 0);
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < w; j++)
			lg[j] = (float)(4 * pcg_rng_uniform(&r));
		CHECK(pcg_probs(lg, w, &s[i % ns], out + (size_t)i * w, &err) == 0);
	}
	free(lg);
}

/* Packs p (dense or sparse) and parses it back into o; *buf keeps the bytes. */
static int pack_parse(proto_msg *p, int sparse, proto_msg *o, void **buf, size_t *len)
{
	pcg_err err = { "" };

	p->probs.sparse = sparse;
	if (proto_pack(p, buf, len, &err) < 0 || proto_parse(*buf, *len, o, &err) < 0) {
		fprintf(stderr, "pack_parse: %s\n", err.msg);
		return -1;
	}
	return 0;
}

/* Sparse replies: the entries a sampler removed are not sent, and the
 * vectors read back equal the dense reply's to the bit, in f32 and f16, so
 * every policy draws the same tokens from the same seed. */
static void test_sparse(void)
{
	enum { W = 2000, L = 3, NV = 2 * L + 1 };
	const pcg_sampling s[] = { { 0.8f, 20, 1 }, { 1, 0, 0.3f }, { 0, 0, 1 }, { 1, 50, 0.9f },
				   { 1, 0, 1 } /* dense: no truncation */ };
	float *v = malloc((size_t)NV * W * sizeof *v);
	make_probs(v, NV, W, s, 5, 7);
	v[(size_t)6 * W + 3] = -0.0f; /* a negative zero travels too */
	proto_msg *p = calloc(1, sizeof *p), *o[2] = { calloc(1, sizeof *o[0]), calloc(1, sizeof *o[1]) };
	float *back = malloc((size_t)2 * NV * W * sizeof *back);

	proto_init(p, PROTO_PROBS, 3);
	p->probs.n_vec = NV;
	p->probs.width = W;
	p->probs.values = v;
	for (int f16 = 0; f16 < 2; f16++) {
		void *buf[2];
		size_t len[2];
		p->probs.f16 = f16;
		for (int sp = 0; sp < 2; sp++) {
			CHECK(pack_parse(p, sp, o[sp], &buf[sp], &len[sp]) == 0);
			/* the values lie at a multiple of 8 bytes in the message */
			const unsigned char *at = o[sp]->probs.values;
			CHECK((at - (unsigned char *)buf[sp]) % 8 == 0);
			for (int i = 0; i < NV; i++)
				proto_vector(&o[sp]->probs, i, back + ((size_t)sp * NV + i) * W);
		}
		CHECKF(!o[0]->probs.sparse && o[1]->probs.sparse, "f16=%d: sparse flags %d %d", f16,
		       o[0]->probs.sparse, o[1]->probs.sparse);
		CHECKF(len[1] < len[0] / 2, "f16=%d: sparse %zu bytes, dense %zu", f16, len[1], len[0]);
		/* vector 4 is not truncated: it stays dense in the sparse reply */
		const int *nnz = o[1]->probs.nnz;
		CHECK(nnz[4] == W && nnz[0] == 20 && nnz[2] == 1);
		CHECKF(memcmp(back, back + (size_t)NV * W, (size_t)NV * W * sizeof *back) == 0,
		       "f16=%d: sparse and dense vectors differ", f16);
		if (!f16)
			CHECK(memcmp(back, v, (size_t)NV * W * sizeof *v) == 0);
		CHECK(signbit(back[(size_t)NV * W + 6 * W + 3]));

		/* The policies on both: same tokens for each seed. */
		for (int kind = POLICY_SD; kind <= POLICY_GREEDY; kind++) {
			policy_params pp = { .kind = (policy_kind)kind, .beta = 0.4, .end_token = -1 };
			pcg_err err = { "" };
			policy *pol = policy_new(&pp, W, &err);
			int same = 1, runs = 0;
			CHECKF(pol != NULL, "%s", err.msg);
			for (uint64_t seed = 1; pol && seed <= 200; seed++) {
				policy_result res[2];
				for (int sp = 0; sp < 2; sp++) {
					const float *pv[L], *qv[L + 1];
					const float *b = back + (size_t)sp * NV * W;
					int x[L];
					pcg_rng r;
					pcg_rng_init(&r, seed, 1);
					for (int i = 0; i < L; i++) {
						pv[i] = b + (size_t)i * W;
						x[i] = pcg_sample(pv[i], W, pcg_rng_uniform(&r));
					}
					for (int i = 0; i <= L; i++)
						qv[i] = b + (size_t)(L + i) * W;
					runs += policy_run(pol, L, x, pv, qv, &r, &res[sp], &err) == 0;
				}
				same &= res[0].n_tokens == res[1].n_tokens &&
					!memcmp(res[0].tokens, res[1].tokens,
						(size_t)res[0].n_tokens * sizeof res[0].tokens[0]);
			}
			CHECKF(same && runs == 400, "f16=%d %s: sparse and dense give other tokens (%d runs)",
			       f16, policy_kind_name((policy_kind)kind), runs);
			policy_free(&pol);
		}
		free(buf[0]);
		free(buf[1]);
	}
	free(v);
	free(back);
	free(p);
	free(o[0]);
	free(o[1]);
}

/* A raw message must fail with err containing want. */

static void test_hostile(void)
{
	/* array32 claiming 2^32-1 elements in 5 bytes: msgpack-c would reserve
	 * ~100 GB for it; the scan refuses before it gets there. */
	const unsigned char arr32[] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
	bad("array32 bomb", arr32, sizeof arr32, "exceeds");
	const unsigned char map32[] = { 0xdf, 0x7f, 0xff, 0xff, 0xff, 0x00 };
	bad("map32 bomb", map32, sizeof map32, "exceeds");
	const unsigned char bin32[] = { 0xc6, 0x7f, 0xff, 0xff, 0xff, 0x00 };
	bad("bin32 past the end", bin32, sizeof bin32, "truncated");
	const unsigned char deep[] = { 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x01 };
	bad("deep nesting", deep, sizeof deep, "nested");
	const unsigned char ext[] = { 0xd4, 0x01, 0x02 };
	bad("ext type", ext, sizeof ext, "not allowed");
	const unsigned char notmap[] = { 0x93, 0x01, 0x02, 0x03 };
	bad("not a map", notmap, sizeof notmap, "not a map");
	bad("empty", "", 0, "truncated");

	/* Valid msgpack, wrong schema. */
	pcg_err err;
	proto_msg *m = req(PROTO_PROPOSE);
	void *buf;
	size_t len;
	CHECK(proto_pack(m, &buf, &len, &err) == 0);
	unsigned char *b = buf;
	bad("truncated message", b, len - 1, "truncated");
	unsigned char *extra = malloc(len + 1);
	memcpy(extra, b, len);
	extra[len] = 0xc0;
	bad("trailing bytes", extra, len + 1, "after the message");
	free(extra);
	/* Change the version byte: "v" is the first key, its value follows. */
	unsigned char *cp = malloc(len);
	memcpy(cp, b, len);
	for (size_t i = 0; i + 2 < len; i++)
		if (cp[i] == 0xa1 && cp[i + 1] == 'v') {
			cp[i + 2] = PROTO_VERSION + 1;
			break;
		}
	char want[128];
	snprintf(want, sizeof want, "the peer speaks protocol version %d, this side version %d",
		 PROTO_VERSION + 1, PROTO_VERSION);
	bad("a later version", cp, len, want);
	for (size_t i = 0; i + 2 < len; i++)
		if (cp[i] == 0xa1 && cp[i + 1] == 'v') {
			cp[i + 2] = PROTO_VERSION - 1;
			break;
		}
	snprintf(want, sizeof want, "the peer speaks protocol version %d, this side version %d",
		 PROTO_VERSION - 1, PROTO_VERSION);
	bad("an earlier version", cp, len, want);
	memcpy(cp, b, len);
	for (size_t i = 0; i + 6 < len; i++) /* "top_k" -> "top_x": an unknown field */
		if (!memcmp(cp + i, "top_k", 5)) {
			cp[i + 4] = 'x';
			break;
		}
	bad("unknown field", cp, len, "unexpected field 'top_x'");
	free(cp);
	free(buf);

	m->propose.req.samp.top_p = 1.5f;
	CHECK(proto_pack(m, &buf, &len, &err) == 0);
	bad("top_p 1.5", buf, len, "top_p");
	free(buf);
	free(m);
	m = req(PROTO_SCORE);
	m->score.req.n = 9; /* more positions than appended tokens */
	CHECK(proto_pack(m, &buf, &len, &err) == 0);
	bad("score n > append", buf, len, "field 'n'");
	free(buf);
	free(m);
}

/* A sparse reply that lies: ids out of order or beyond the width, counts
 * that do not add up. */
static void test_sparse_hostile(void)
{
	const pcg_sampling s = { 1, 5, 1 };
	float v[2 * 100];
	proto_msg *p = calloc(1, sizeof *p), *o = calloc(1, sizeof *o);
	void *buf;
	size_t len;

	make_probs(v, 2, 100, &s, 1, 9);
	proto_init(p, PROTO_PROBS, 0);
	p->probs.n_vec = 2;
	p->probs.width = 100;
	p->probs.values = v;
	CHECK(pack_parse(p, 1, o, &buf, &len) == 0 && o->probs.sparse && o->probs.nnz[0] == 5);
	unsigned char *b = buf, *c = malloc(len);
	const size_t ids = (size_t)((const unsigned char *)o->probs.ids - b);
	size_t nnz = 0;
	for (size_t i = 0; i + 6 < len; i++)
		if (!memcmp(b + i, "\xa3nnz\x92", 5))
			nnz = i + 5; /* the first count */
	CHECK(nnz > 0 && b[nnz] == 5);

	memcpy(c, b, len);
	memcpy(c + ids + 4, c + ids, 4); /* the second id repeats the first */
	bad("ids not ascending", c, len, "ascending");
	memcpy(c, b, len);
	c[ids + 4 * 9] = 100; /* vector 1's last id: the width */
	c[ids + 4 * 9 + 1] = c[ids + 4 * 9 + 2] = c[ids + 4 * 9 + 3] = 0;
	bad("id beyond the width", c, len, "below 100");
	memcpy(c, b, len);
	c[nnz] = 0x7f;
	bad("count beyond the width", c, len, "127 entries in a vector of 100");
	memcpy(c, b, len);
	c[nnz] = 4;
	bad("counts and p disagree", c, len, "field 'p'");
	free(c);
	free(buf);
	free(p);
	free(o);
}

/* Mutations of valid messages: parse must return 0 or -1, never crash. */
static void test_mutations(void)
{
	proto_msg *m = req(PROTO_SCORE), *o = calloc(1, sizeof *o);
	float v[3 * 4] = { 0 }, w[3 * 40];
	const pcg_sampling s = { 1, 3, 1 };
	proto_msg *p = calloc(1, sizeof *p);
	void *bufs[3];
	size_t lens[3];
	pcg_err err;
	unsigned seed = 12345;
	int parsed = 0;

	proto_init(p, PROTO_PROBS, 0);
	p->probs.n_x = 1;
	p->probs.n_vec = 3;
	p->probs.width = 4;
	p->probs.values = v;
	CHECK(proto_pack(m, &bufs[0], &lens[0], &err) == 0);
	CHECK(proto_pack(p, &bufs[1], &lens[1], &err) == 0);
	make_probs(w, 3, 40, &s, 1, 5); /* and a sparse one */
	p->probs.width = 40;
	p->probs.values = w;
	p->probs.sparse = 1;
	CHECK(proto_pack(p, &bufs[2], &lens[2], &err) == 0);
	for (int it = 0; it < 30000; it++) {
		int which = it % 3;
		size_t len = lens[which];
		unsigned char *c = malloc(len);
		memcpy(c, bufs[which], len);
		int flips = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 4;
		for (int f = 0; f < flips; f++) {
			seed = seed * 1103515245u + 12345u;
			size_t at = (seed >> 8) % len;
			seed = seed * 1103515245u + 12345u;
			c[at] = (unsigned char)(seed >> 16);
		}
		seed = seed * 1103515245u + 12345u;
		size_t cut = (seed >> 16) % 8 == 0 ? (seed >> 4) % len : len;
		if (proto_parse(c, cut, o, &err) == 0) {
			parsed++;
			if (o->type == PROTO_PROBS && o->probs.n_vec > 0) {
				float tmp[1 << 10];
				if (o->probs.width <= 1 << 10) /* touches the last bytes: */
					proto_vector(&o->probs, o->probs.n_vec - 1, tmp);
			}
		}
		free(c);
	}
	printf("mutations: %d of 30000 still parsed\n", parsed);
	CHECK(parsed < 30000);
	for (int i = 0; i < 3; i++)
		free(bufs[i]);
	free(m);
	free(o);
	free(p);
}

/* A reused message: what an earlier message of another type left in its
 * struct (here the worst of it) must neither be read nor size anything once
 * proto_init has made it a score. The verifier once reserved 16 GiB a
 * request this way. */
static void test_stale_fields(void)
{
	proto_msg *m = malloc(sizeof *m), *out = calloc(1, sizeof *out);
	proto_buf b = { 0 };
	pcg_err err = { "" };

	memset(m, 0x7f, sizeof *m); /* counts of 2^31, strings without an end */
	fill_req(m, PROTO_SCORE);
	CHECKF(proto_pack_buf(m, &b, &err) == 0, "score with stale fields: %s", err.msg);
	CHECKF(b.cap < (1u << 20), "score: %zu bytes reserved for %zu packed", b.cap, b.len);
	CHECKF(proto_parse(b.data, b.len, out, &err) == 0 &&
	       out->score.req.n_append == m->score.req.n_append,
	       "score with stale fields parses back: %s", err.msg);
	/* a field of the type itself out of range is an error, not a huge buffer */
	proto_msg *r = calloc(1, sizeof *r);
	proto_init(r, PROTO_RESULT, 77);
	r->result.n_stats = 0x7fffffff;
	CHECKF(proto_pack_buf(r, &b, &err) < 0 && strstr(err.msg, "stats"),
	       "result with 2^31 stats: %s", err.msg);
	r->result.n_stats = 0;
	memset(r->result.msg, 'z', sizeof r->result.msg);
	CHECKF(proto_pack_buf(r, &b, &err) < 0, "result: a message without its end packs");
	CHECKF(b.cap < (1u << 20), "%zu bytes reserved", b.cap);
	proto_buf_free(&b);
	free(m);
	free(r);
	free(out);
}

/* The wire format, byte for byte: one message of each type (and the
 * optional fields, a sparse f16 probs) packed and compared with
 * tests/fixtures/proto/NAME.msgpack. Those files were written by
 * `build/tests/test_proto --write-golden` when the structs were reshaped
 * (packed by the code before the change, so that equal bytes prove the
 * wire unchanged); write them again only with a new PROTO_VERSION. A new
 * optional field adds files of its own (synth-first, audio-first,
 * propose-run: written when the field came, every other file the same to
 * the byte). */
#define GOLDEN_DIR "tests/fixtures/proto/"
enum { G_WIDTH = 40 };
static float golden_v[3 * G_WIDTH];
static const int16_t golden_pcm[4] = { 0, -32768, 32767, -2 };
static const unsigned char golden_asg[5] = { 'A', 'S', 'G', 0, 1 };

/* Message k of the golden set into m (zeroed); its file name, or NULL past
 * the last. */
static const char *golden_msg(int k, proto_msg *m)
{
	static const char *const names[] = { "propose", "propose-forced", "score", "drop", "ping",
		"probs", "probs-sparse-f16", "ok", "pong", "error", "synth", "synth-args", "result",
		"audio", "pcm", "progress", "cancel", "synth-first", "audio-first", "propose-run" };
	static const proto_type types[] = { PROTO_PROPOSE, PROTO_PROPOSE, PROTO_SCORE, PROTO_DROP,
		PROTO_PING, PROTO_PROBS, PROTO_PROBS, PROTO_OK, PROTO_PONG, PROTO_ERROR, PROTO_SYNTH,
		PROTO_SYNTH, PROTO_RESULT, PROTO_AUDIO, PROTO_PCM, PROTO_PROGRESS, PROTO_CANCEL,
		PROTO_SYNTH, PROTO_AUDIO, PROTO_PROPOSE };

	if (k >= (int)(sizeof names / sizeof names[0]))
		return NULL;
	memset(m, 0, sizeof *m);
	proto_init(m, types[k], 1000 + (uint64_t)k);
	const char *n = names[k];
	proto_model_req *r = proto_model_mut(m);
	if (r != NULL) {
		r->session = 0xfedcba987654ULL;
		r->pos = 12;
		r->n_append = 4;
		for (int i = 0; i < 4; i++)
			r->append[i] = 128264 + 1000 * i;
		r->n = 3;
		r->samp = (pcg_sampling){ 0.8f, 50, 0.95f };
		r->rows = (llama_rows){ 2, { 128264, 128261 }, { 193800, 128262 } };
		r->f16 = 1;
	}
	switch (m->type) {
	case PROTO_PROPOSE:
		m->propose.seed = 0x1234567890ULL;
		if (!strcmp(n, "propose-forced")) {
			m->propose.n_forced = 2;
			m->propose.forced_at[0] = m->propose.forced_at[1] = 2;
			m->propose.forced[0] = 7;
			m->propose.forced[1] = 8;
		}
		if (!strcmp(n, "propose-run")) {
			m->propose.draws = 41;
			m->propose.stop = 1;
			m->propose.stop_id = 193799;
		}
		break;
	case PROTO_SCORE: m->score.heads = 2; break;
	case PROTO_DROP: m->drop.session = 4242; break;
	case PROTO_CANCEL: m->cancel.session = 4242; break;
	case PROTO_PROBS: {
		proto_probs *p = &m->probs;
		for (int i = 0; i < 3 * G_WIDTH; i++) /* vector 1 dense, 0 and 2 sparse */
			golden_v[i] = i / G_WIDTH == 1 || i % 13 == 0 ? 0.25f + (float)i / 512 : 0;
		p->n_x = 2;
		p->x[0] = 3;
		p->x[1] = 39;
		p->n_vec = 3;
		p->width = G_WIDTH;
		p->values = golden_v;
		p->n_stats = 1;
		p->stats[0] = 0.125;
		p->sparse = p->f16 = !strcmp(n, "probs-sparse-f16");
		break;
	}
	case PROTO_PONG: snprintf(m->pong.msg, sizeof m->pong.msg, "llasa 1b, 16 layers"); break;
	case PROTO_ERROR:
		proto_error(m, m->id, PROTO_E_UNKNOWN_SESSION, "session %d not held", 12);
		break;
	case PROTO_SYNTH: {
		proto_synth *s = &m->synth;
		snprintf(s->text, sizeof s->text, "Hello, wörld.");
		snprintf(s->policy, sizeof s->policy, "lantern");
		s->beta = 0.4f;
		s->lookahead = 4;
		s->samp = (pcg_sampling){ 0.9f, 0, 0.5f };
		s->seed = 7;
		s->max_tokens = 500;
		s->f16 = 1;
		s->asg = golden_asg;
		s->asg_len = sizeof golden_asg;
		s->speaker = 3;
		s->viterbi_k = 8;
		s->stream = 1;
		s->audio = 1;
		s->chunk = 10;
		s->left = 20;
		s->right = 4;
		if (!strcmp(n, "synth-args")) {
			s->n_args = 2;
			snprintf(s->arg_name[0], sizeof s->arg_name[0], "epsilon");
			s->arg_val[0] = 0.09;
			snprintf(s->arg_name[1], sizeof s->arg_name[1], "k");
			s->arg_val[1] = 50;
		}
		if (!strcmp(n, "synth-first"))
			s->first = 5;
		break;
	}
	case PROTO_RESULT: {
		proto_result *res = &m->result;
		res->n_tokens = 3;
		res->tokens[0] = 5;
		res->tokens[1] = 65535;
		res->tokens[2] = 70000;
		res->n_stats = 3;
		res->stats[0] = 1.5;
		res->stats[1] = 1e-9;
		res->stats[2] = 12;
		snprintf(res->msg, sizeof res->msg, "done");
		break;
	}
	case PROTO_AUDIO: {
		proto_audio *a = &m->audio;
		a->session = 77;
		a->n_tokens = 2;
		a->tokens[0] = 300;
		a->tokens[1] = 65000;
		a->final = 1;
		a->chunk = 25;
		a->left = 8;
		a->right = 2;
		if (!strcmp(n, "audio-first"))
			a->first = 5;
		break;
	}
	case PROTO_PCM:
		m->pcm.rate = 16000;
		m->pcm.samples = golden_pcm;
		m->pcm.n_samples = 4;
		break;
	case PROTO_PROGRESS: {
		proto_progress *p = &m->progress;
		p->rate = 16000;
		p->samples = golden_pcm;
		p->n_samples = 4;
		p->queue = 2;
		p->pos = 9;
		p->n_tokens = 2;
		p->tokens[0] = 11;
		p->tokens[1] = 12;
		break;
	}
	case PROTO_PING: case PROTO_OK: break;
	}
	return n;
}

static void test_golden(int write)
{
	proto_msg *m = calloc(1, sizeof *m);
	const char *name;

	for (int k = 0; (name = golden_msg(k, m)) != NULL; k++) {
		char path[128];
		pcg_err err = { "" };
		void *buf;
		size_t len;
		snprintf(path, sizeof path, GOLDEN_DIR "%s.msgpack", name);
		CHECKF(proto_pack(m, &buf, &len, &err) == 0, "%s: %s", name, err.msg);
		if (write) {
			FILE *f = fopen(path, "wb");
			CHECKF(f && fwrite(buf, 1, len, f) == len && fclose(f) == 0, "%s", path);
			free(buf);
			continue;
		}
		static unsigned char want[4096];
		FILE *f = fopen(path, "rb");
		size_t n = f ? fread(want, 1, sizeof want, f) : 0;
		if (f)
			fclose(f);
		CHECKF(f && n == len && !memcmp(want, buf, len), "%s: %zu bytes packed, %zu in %s%s",
		       name, len, n, path, n == len ? " (other bytes)" : "");
		free(buf);
		/* and parsing them gives a message that packs to them again (a
		 * probs reply packs f32 vectors, not the ones it parsed) */
		if (m->type == PROTO_PROBS)
			continue;
		if (proto_parse(want, n, m, &err) < 0 || proto_pack(m, &buf, &len, &err) < 0) {
			CHECKF(0, "%s: %s", name, err.msg);
			continue;
		}
		CHECKF(len == n && !memcmp(want, buf, len), "%s: parsed and packed again: %zu bytes",
		       name, len);
		free(buf);
	}
	free(m);
}

/* A synth of the defaults with one field changed (set), as
 * proto_synth_check and the parser see it: refused, naming want. */
static void synth_refused(const char *what, void (*set)(proto_synth *), proto_synth_field want)
{
	pcg_err err = { "" };
	proto_msg *m = calloc(1, sizeof *m);
	proto_synth_field f = PROTO_SF_NONE;
	void *buf;
	size_t len;
	char name[64];

	proto_init(m, PROTO_SYNTH, 9);
	proto_synth_defaults(&m->synth);
	set(&m->synth);
	CHECKF(proto_synth_check(&m->synth, &f, &err) < 0 && f == want && *err.msg,
	       "%s: field %d (want %d): '%s'", what, (int)f, (int)want, err.msg);
	/* (the lookahead is out of the wire's range before the check sees it) */
	snprintf(name, sizeof name, "field '%s': ", proto_synth_field_name(want));
	if (proto_pack(m, &buf, &len, &err) == 0) {
		bad(what, buf, len, name);
		free(buf);
	}
	free(m);
}

static void set_lookahead(proto_synth *s) { s->lookahead = PROTO_MAX_LOOKAHEAD + 1; }
static void set_temp(proto_synth *s) { s->samp.temperature = -0.5f; }
static void set_temp_inf(proto_synth *s) { s->samp.temperature = INFINITY; }
static void set_top_p(proto_synth *s) { s->samp.top_p = 1.5f; }
static void set_top_p0(proto_synth *s) { s->samp.top_p = 0; }
static void set_beta(proto_synth *s) { s->beta = NAN; }
static void set_beta_neg(proto_synth *s) { s->beta = -1; }
static void set_audio(proto_synth *s) { s->audio = 1, s->stream = 0; }
static void set_first(proto_synth *s) { s->first = s->chunk + 1; }
static void set_first0(proto_synth *s) { s->chunk = 0; }
static void set_prompt(proto_synth *s) { snprintf(s->prompt_text, sizeof s->prompt_text, "Hi."); }

static void test_synth(void)
{
	pcg_err err = { "" };
	proto_synth_field f;
	proto_synth *s = calloc(1, sizeof *s);

	/* the defaults, as pcg-synth(1) and pcg-httpd(8) document them */
	proto_synth_defaults(s);
	CHECK(!strcmp(s->policy, "pcg") && s->beta == 0.4f && s->lookahead == 0 &&
	      s->samp.temperature == 0.8f && s->samp.top_k == 50 && s->samp.top_p == 1.0f &&
	      s->seed == 1 && s->max_tokens == 1500 && s->viterbi_k == 8 && s->stream &&
	      !s->audio && s->chunk == 25 && s->left == 50 && s->right == 4 && s->first == 5 &&
	      !s->text[0]);
	CHECKF(proto_synth_check(s, &f, &err) == 0 && f == PROTO_SF_NONE, "%s", err.msg);
	CHECK(!strcmp(PROTO_STR(PROTO_SYNTH_TEMP), "0.8") && !strcmp(PROTO_STR(PROTO_SYNTH_SEED), "1"));
	/* the bounds' ends pass */
	s->lookahead = PROTO_MAX_LOOKAHEAD;
	s->samp = (pcg_sampling){ 0, 0, 1e-6f };
	s->max_tokens = PROTO_MAX_APPEND;
	s->audio = 1;
	CHECKF(proto_synth_check(s, &f, &err) == 0, "%s", err.msg);
	/* the text: what the message holds, no NUL */
	char *big = malloc(sizeof s->text);
	memset(big, 'a', sizeof s->text);
	CHECK(proto_synth_text(s, big, sizeof s->text - 1, &err) == 0 &&
	      strlen(s->text) == sizeof s->text - 1);
	CHECK(proto_synth_text(s, big, sizeof s->text, &err) < 0 && strstr(err.msg, "16383"));
	CHECK(proto_synth_text(s, "a\0b", 3, &err) < 0 && strstr(err.msg, "NUL"));
	CHECK(proto_synth_text(s, "Hello.", 6, &err) == 0 && !strcmp(s->text, "Hello."));
	free(big);
	free(s);
	/* each bound, by the check and by the parser */
	synth_refused("lookahead 16", set_lookahead, PROTO_SF_LOOKAHEAD);
	synth_refused("temp -0.5", set_temp, PROTO_SF_TEMP);
	synth_refused("temp inf", set_temp_inf, PROTO_SF_TEMP);
	synth_refused("top_p 1.5", set_top_p, PROTO_SF_TOP_P);
	synth_refused("top_p 0", set_top_p0, PROTO_SF_TOP_P);
	synth_refused("beta nan", set_beta, PROTO_SF_BETA);
	synth_refused("beta -1", set_beta_neg, PROTO_SF_BETA);
	synth_refused("first beyond chunk", set_first, PROTO_SF_FIRST);
	synth_refused("first with chunk 0", set_first0, PROTO_SF_FIRST);
	synth_refused("audio without stream", set_audio, PROTO_SF_AUDIO);
	synth_refused("prompt_text without its audio", set_prompt, PROTO_SF_PROMPT_TEXT);
	/* those the wire cannot carry: the check alone */
	s = calloc(1, sizeof *s);
	proto_synth_defaults(s);
	s->samp.top_k = -1;
	CHECK(proto_synth_check(s, &f, &err) < 0 && f == PROTO_SF_TOP_K);
	proto_synth_defaults(s);
	s->max_tokens = 0;
	CHECK(proto_synth_check(s, &f, &err) < 0 && f == PROTO_SF_MAX_TOKENS &&
	      strstr(err.msg, "0: want 1 to 8192"));
	proto_synth_defaults(s);
	s->right = -1;
	CHECK(proto_synth_check(s, &f, &err) < 0 && f == PROTO_SF_RIGHT);
	CHECK(!strcmp(proto_synth_field_name(PROTO_SF_LOOKAHEAD), "n"));
	free(s);
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--write-golden")) {
		test_golden(1);
		return check_done("test_proto --write-golden");
	}
	test_golden(0);
	test_stale_fields();
	test_roundtrip();
	test_synth();
	test_sparse();
	test_hostile();
	test_sparse_hostile();
	test_mutations();
	return check_done("test_proto");
}
