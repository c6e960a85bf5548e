/* test_proto.c: the pipeline's messages: every type round-trips, f16
 * vectors come back within f16 rounding, a sparse probs reply gives the
 * vectors of the dense one to the bit (and the policies the same tokens for
 * a seed), a peer of another protocol version gets an error naming both
 * versions, and hostile bytes give an error that names the problem, never
 * a crash or a large allocation (a mutation loop over valid messages; this
 * test also runs under ASan and UBSan). */
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

static proto_msg *req(proto_type t)
{
	proto_msg *m = calloc(1, sizeof *m);
	m->type = t;
	m->id = 77;
	m->session = 0x123456789abcULL;
	m->pos = 5;
	m->n_append = 3;
	m->append[0] = 128260;
	m->append[1] = 128264 + 7;
	m->append[2] = 193799;
	m->n = 3;
	m->samp = (pcg_sampling){ 0.8f, 50, 0.95f };
	m->seed = 42;
	m->rows = (llama_rows){ 2, { 128264, 128261 }, { 193800, 128262 } };
	return m;
}

static int roundtrip(const proto_msg *m, proto_msg *out, pcg_err *err)
{
	void *buf;
	size_t len;
	int rc;

	if (proto_pack(m, &buf, &len, err) < 0)
		return -1;
	/* Copy, so that out->probs points into a buffer we keep. */
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
	CHECK(o->type == PROTO_PROPOSE && o->id == 77 && o->session == m->session);
	CHECK(o->pos == 5 && o->n_append == 3 && o->append[2] == 193799 && o->n == 3);
	CHECK(o->samp.temperature == 0.8f && o->samp.top_k == 50 && o->samp.top_p == 0.95f);
	CHECK(o->seed == 42 && o->rows.n == 2 && o->rows.begin[1] == 128261 && o->rows.end[0] == 193800);

	m->type = PROTO_SCORE;
	CHECKF(roundtrip(m, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_SCORE && o->n == 3);

	m->type = PROTO_DROP;
	CHECKF(roundtrip(m, o, &err) == 0 && o->type == PROTO_DROP && o->session == m->session, "%s",
	       err.msg);
	m->type = PROTO_PING;
	CHECK(roundtrip(m, o, &err) == 0 && o->type == PROTO_PING && o->id == 77);

	/* probs: f32 exactly, f16 within its rounding (relative 2^-11). */
	float v[2 * 5] = { 0.5f, 0.25f, 0.125f, 0.125f, 0.0f, 1e-3f, 0.2f, 0.3f, 0.4f, 0.099f };
	proto_msg *p = calloc(1, sizeof *p);
	p->type = PROTO_PROBS;
	p->id = 9;
	p->n_x = 2;
	p->x[0] = 3;
	p->x[1] = 4;
	p->n_vec = 2;
	p->width = 5;
	p->probs = v;
	p->n_stats = 1;
	p->stats[0] = 0.25;
	for (int f16 = 0; f16 < 2; f16++) {
		p->f16 = f16;
		CHECKF(roundtrip(p, o, &err) == 0, "%s", err.msg);
		CHECK(o->type == PROTO_PROBS && o->n_x == 2 && o->x[1] == 4 && o->n_vec == 2 &&
		      o->width == 5 && o->n_stats == 1 && o->stats[0] == 0.25);
		float back[5];
		int ok = 1;
		for (int i = 0; i < 2; i++) {
			proto_vector(o, i, back);
			for (int j = 0; j < 5; j++) {
				float want = v[i * 5 + j], d = back[j] - want;
				ok &= f16 ? (d < 0 ? -d : d) <= want / 2048 + 1e-7f : back[j] == want;
			}
		}
		CHECKF(ok, "probs f16=%d", f16);
	}

	/* synth -> result, audio: the verifier's messages. */
	proto_msg *s = calloc(1, sizeof *s);
	s->type = PROTO_SYNTH;
	snprintf(s->text, sizeof s->text, "Hello, wörld.");
	snprintf(s->policy, sizeof s->policy, "pcg");
	s->beta = 0.4f;
	s->n = 3;
	s->samp = (pcg_sampling){ 0.8f, 50, 1.0f };
	s->seed = 7;
	s->max_tokens = 500;
	s->stream = s->audio = 1;
	s->chunk = 10;
	s->left = 20;
	s->right = 4;
	CHECKF(roundtrip(s, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_SYNTH && !strcmp(o->text, "Hello, wörld.") &&
	      !strcmp(o->policy, "pcg") && o->beta == 0.4f && o->n == 3 && o->max_tokens == 500 &&
	      o->stream && o->audio && o->chunk == 10 && o->left == 20 && o->right == 4 &&
	      o->seed == 7 && o->samp.top_k == 50);
	/* the policy's parameters by name (optional: absent above) */
	CHECK(o->n_args == 0);
	s->n_args = 2;
	snprintf(s->arg_name[0], sizeof s->arg_name[0], "epsilon");
	s->arg_val[0] = 0.09;
	snprintf(s->arg_name[1], sizeof s->arg_name[1], "k");
	s->arg_val[1] = 50;
	CHECKF(roundtrip(s, o, &err) == 0, "%s", err.msg);
	CHECK(o->n_args == 2 && !strcmp(o->arg_name[0], "epsilon") && o->arg_val[0] == 0.09 &&
	      !strcmp(o->arg_name[1], "k") && o->arg_val[1] == 50);
	{
		/* a repeated name, a non-number and too many are refused by name */
		void *buf;
		size_t len;
		snprintf(s->arg_name[1], sizeof s->arg_name[1], "epsilon");
		CHECK(proto_pack(s, &buf, &len, &err) == 0);
		bad("args: a name twice", buf, len, "'epsilon' twice");
		free(buf);
		s->n_args = PROTO_MAX_ARGS + 1;
		CHECK(proto_pack(s, &buf, &len, &err) < 0 && strstr(err.msg, "policy arguments"));
	}
	s->n_args = 0;
	s->type = PROTO_RESULT;
	s->n_append = 2;
	s->append[0] = 5;
	s->append[1] = 6;
	s->n_stats = 3;
	s->stats[0] = 1.5;
	s->stats[1] = 1e-9;
	s->stats[2] = 12;
	CHECKF(roundtrip(s, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_RESULT && o->n_append == 2 && o->append[1] == 6 && o->n_stats == 3 &&
	      o->stats[0] == 1.5 && o->stats[1] == 1e-9 && o->stats[2] == 12);
	s->type = PROTO_AUDIO;
	s->final = 1;
	CHECKF(roundtrip(s, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_AUDIO && o->final == 1 && o->n_append == 2 && o->chunk == 10 &&
	      o->left == 20 && o->right == 4);
	/* progress and pcm: the audio as s16le, read back at any alignment */
	const int16_t pcm[5] = { 0, -32768, 32767, 1, -1 };
	s->type = PROTO_PROGRESS;
	s->queue = 3;
	s->pos = 7;
	s->rate = 16000;
	s->pcm = pcm;
	s->n_pcm = 5;
	CHECKF(roundtrip(s, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_PROGRESS && o->queue == 3 && o->pos == 7 && o->rate == 16000 &&
	      o->n_pcm == 5 && !memcmp(o->pcm, pcm, sizeof pcm) && o->n_append == 2);
	s->type = PROTO_PCM;
	CHECKF(roundtrip(s, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_PCM && o->n_pcm == 5 && !memcmp(o->pcm, pcm, sizeof pcm));
	s->type = PROTO_CANCEL;
	s->session = 99;
	CHECKF(roundtrip(s, o, &err) == 0, "%s", err.msg);
	CHECK(o->type == PROTO_CANCEL && o->session == 99);
	free(s);

	proto_error(o, 5, PROTO_E_UNKNOWN_SESSION, "session %d not held", 12);
	proto_msg *e = calloc(1, sizeof *e);
	CHECKF(roundtrip(o, e, &err) == 0, "%s", err.msg);
	CHECK(e->type == PROTO_ERROR && e->id == 5 && !strcmp(e->code, "unknown-session") &&
	      !strcmp(e->msg, "session 12 not held"));
	free(m);
	free(o);
	free(p);
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

	p->sparse = sparse;
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

	p->type = PROTO_PROBS;
	p->id = 3;
	p->n_vec = NV;
	p->width = W;
	p->probs = v;
	for (int f16 = 0; f16 < 2; f16++) {
		void *buf[2];
		size_t len[2];
		p->f16 = f16;
		for (int sp = 0; sp < 2; sp++) {
			CHECK(pack_parse(p, sp, o[sp], &buf[sp], &len[sp]) == 0);
			/* the values lie at a multiple of 8 bytes in the message */
			CHECK(((const unsigned char *)o[sp]->probs - (unsigned char *)buf[sp]) % 8 == 0);
			for (int i = 0; i < NV; i++)
				proto_vector(o[sp], i, back + ((size_t)sp * NV + i) * W);
		}
		CHECKF(!o[0]->sparse && o[1]->sparse, "f16=%d: sparse flags %d %d", f16, o[0]->sparse,
		       o[1]->sparse);
		CHECKF(len[1] < len[0] / 2, "f16=%d: sparse %zu bytes, dense %zu", f16, len[1], len[0]);
		/* vector 4 is not truncated: it stays dense in the sparse reply */
		CHECK(o[1]->nnz[4] == W && o[1]->nnz[0] == 20 && o[1]->nnz[2] == 1);
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

	m->samp.top_p = 1.5f;
	CHECK(proto_pack(m, &buf, &len, &err) == 0);
	bad("top_p 1.5", buf, len, "top_p");
	free(buf);
	m->samp.top_p = 1;
	m->type = PROTO_SCORE;
	m->n = 9; /* more positions than appended tokens */
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
	*p = (proto_msg){ .type = PROTO_PROBS, .n_vec = 2, .width = 100, .probs = v };
	CHECK(pack_parse(p, 1, o, &buf, &len) == 0 && o->sparse && o->nnz[0] == 5);
	unsigned char *b = buf, *c = malloc(len);
	const size_t ids = (size_t)((const unsigned char *)o->ids - b);
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

	p->type = PROTO_PROBS;
	p->n_x = 1;
	p->n_vec = 3;
	p->width = 4;
	p->probs = v;
	CHECK(proto_pack(m, &bufs[0], &lens[0], &err) == 0);
	CHECK(proto_pack(p, &bufs[1], &lens[1], &err) == 0);
	make_probs(w, 3, 40, &s, 1, 5); /* and a sparse one */
	*p = (proto_msg){ .type = PROTO_PROBS, .n_x = 1, .n_vec = 3, .width = 40, .probs = w,
			  .sparse = 1 };
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
			if (o->type == PROTO_PROBS && o->n_vec > 0) {
				float tmp[1 << 10];
				if (o->width <= 1 << 10)
					proto_vector(o, o->n_vec - 1, tmp); /* touches the last bytes */
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

/* A reused message: the fields its type does not carry hold what an earlier
 * message left there (here the worst of it), and packing must neither read
 * nor size by them. The verifier once reserved 16 GiB a request this way. */
static void test_stale_fields(void)
{
	proto_msg *m = req(PROTO_SCORE), *out = calloc(1, sizeof *out);
	proto_buf b = { 0 };
	pcg_err err = { "" };

	m->n_stats = 0x7fffffff;
	memset(m->text, 'x', sizeof m->text); /* no end */
	memset(m->msg, 'y', sizeof m->msg);
	m->asg_len = (size_t)1 << 40;
	m->n_x = 1 << 30;
	CHECKF(proto_pack_buf(m, &b, &err) == 0, "score with stale fields: %s", err.msg);
	CHECKF(b.cap < (1u << 20), "score: %zu bytes reserved for %zu packed", b.cap, b.len);
	CHECKF(proto_parse(b.data, b.len, out, &err) == 0 && out->n_append == m->n_append,
	       "score with stale fields parses back: %s", err.msg);
	/* a field of the type itself out of range is an error, not a huge buffer */
	proto_msg *r = req(PROTO_RESULT);
	r->n_stats = 0x7fffffff;
	CHECKF(proto_pack_buf(r, &b, &err) < 0 && strstr(err.msg, "stats"),
	       "result with 2^31 stats: %s", err.msg);
	r->n_stats = 0;
	memset(r->msg, 'z', sizeof r->msg);
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
 * wire unchanged); write them again only with a new PROTO_VERSION. */
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
		"audio", "pcm", "progress", "cancel" };

	if (k >= (int)(sizeof names / sizeof names[0]))
		return NULL;
	memset(m, 0, sizeof *m);
	m->id = 1000 + (uint64_t)k;
	const char *n = names[k];
	if (!strncmp(n, "propose", 7) || !strcmp(n, "score")) {
		m->type = n[0] == 'p' ? PROTO_PROPOSE : PROTO_SCORE;
		m->session = 0xfedcba987654ULL;
		m->pos = 12;
		m->n_append = 4;
		for (int i = 0; i < 4; i++)
			m->append[i] = 128264 + 1000 * i;
		m->n = 3;
		m->samp = (pcg_sampling){ 0.8f, 50, 0.95f };
		m->seed = 0x1234567890ULL;
		m->rows = (llama_rows){ 2, { 128264, 128261 }, { 193800, 128262 } };
		m->f16 = 1;
		if (!strcmp(n, "propose-forced")) {
			m->n_forced = 2;
			m->forced_at[0] = m->forced_at[1] = 2;
			m->forced[0] = 7;
			m->forced[1] = 8;
		}
		if (m->type == PROTO_SCORE)
			m->heads = 2;
	} else if (!strcmp(n, "drop") || !strcmp(n, "cancel")) {
		m->type = n[0] == 'd' ? PROTO_DROP : PROTO_CANCEL;
		m->session = 4242;
	} else if (!strcmp(n, "ping") || !strcmp(n, "ok")) {
		m->type = n[0] == 'p' ? PROTO_PING : PROTO_OK;
	} else if (!strncmp(n, "probs", 5)) {
		m->type = PROTO_PROBS;
		for (int i = 0; i < 3 * G_WIDTH; i++) /* vector 1 dense, 0 and 2 sparse */
			golden_v[i] = i / G_WIDTH == 1 || i % 13 == 0 ? 0.25f + (float)i / 512 : 0;
		m->n_x = 2;
		m->x[0] = 3;
		m->x[1] = 39;
		m->n_vec = 3;
		m->width = G_WIDTH;
		m->probs = golden_v;
		m->n_stats = 1;
		m->stats[0] = 0.125;
		m->sparse = m->f16 = !strcmp(n, "probs-sparse-f16");
	} else if (!strcmp(n, "pong")) {
		m->type = PROTO_PONG;
		snprintf(m->msg, sizeof m->msg, "llasa 1b, 16 layers");
	} else if (!strcmp(n, "error")) {
		proto_error(m, m->id, PROTO_E_UNKNOWN_SESSION, "session %d not held", 12);
	} else if (!strncmp(n, "synth", 5)) {
		m->type = PROTO_SYNTH;
		snprintf(m->text, sizeof m->text, "Hello, wörld.");
		snprintf(m->policy, sizeof m->policy, "lantern");
		m->beta = 0.4f;
		m->n = 4;
		m->samp = (pcg_sampling){ 0.9f, 0, 0.5f };
		m->seed = 7;
		m->max_tokens = 500;
		m->f16 = 1;
		m->asg = golden_asg;
		m->asg_len = sizeof golden_asg;
		m->speaker = 3;
		m->viterbi_k = 8;
		m->stream = 1;
		m->audio = 1;
		m->chunk = 10;
		m->left = 20;
		m->right = 4;
		if (!strcmp(n, "synth-args")) {
			m->n_args = 2;
			snprintf(m->arg_name[0], sizeof m->arg_name[0], "epsilon");
			m->arg_val[0] = 0.09;
			snprintf(m->arg_name[1], sizeof m->arg_name[1], "k");
			m->arg_val[1] = 50;
		}
	} else if (!strcmp(n, "result")) {
		m->type = PROTO_RESULT;
		m->n_append = 3;
		m->append[0] = 5;
		m->append[1] = 65535;
		m->append[2] = 70000;
		m->n_stats = 3;
		m->stats[0] = 1.5;
		m->stats[1] = 1e-9;
		m->stats[2] = 12;
		snprintf(m->msg, sizeof m->msg, "done");
	} else if (!strcmp(n, "audio")) {
		m->type = PROTO_AUDIO;
		m->session = 77;
		m->n_append = 2;
		m->append[0] = 300;
		m->append[1] = 65000;
		m->final = 1;
		m->chunk = 25;
		m->left = 8;
		m->right = 2;
	} else {
		m->type = !strcmp(n, "pcm") ? PROTO_PCM : PROTO_PROGRESS;
		m->rate = 16000;
		m->pcm = golden_pcm;
		m->n_pcm = 4;
		if (m->type == PROTO_PROGRESS) {
			m->queue = 2;
			m->pos = 9;
			m->n_append = 2;
			m->append[0] = 11;
			m->append[1] = 12;
		}
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

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--write-golden")) {
		test_golden(1);
		return check_done("test_proto --write-golden");
	}
	test_golden(0);
	test_stale_fields();
	test_roundtrip();
	test_sparse();
	test_hostile();
	test_sparse_hostile();
	test_mutations();
	return check_done("test_proto");
}
