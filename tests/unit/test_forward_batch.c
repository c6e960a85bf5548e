/* test_forward_batch.c: llama_forward_batch against the same sequences run
 * alone (llama_forward_hidden, llama_forward_probs). On the CPU a sequence
 * must get in a batch, bit for bit, what it gets alone: its logits or
 * probabilities and its final hidden states, and then its next step from
 * the cache the batch filled. Compared with memcmp, no tolerance.
 *
 * Sequences of 1 to 8 positions after prompts of different lengths (so at
 * different positions), batches of 1 to 8 of them (up to 34 rows, more than
 * PCG_MATMUL_SMALL) and one with a sequence of 11 positions (its own
 * products), in the caller's order and shuffled; full logits, a subset of
 * rows, probabilities; every kernel family and quantised path this CPU
 * has. Models: the transformers fixtures in f32 and bf16, GGUF files in
 * f16, Q8_0 and Q4_0, and a random GGUF written here whose matrices are
 * Q4_K, Q5_K, Q6_K and Q8_0 (rows of 256, which the fixtures are too small
 * for).
 *
 * Under it, pcg_matmul_rows: 9 to 40 rows, each equal to the same row in
 * a product of its own, for f32, f16 and bf16, widths with and without a
 * tail, a sub-range of weight rows, on every kernel family.
 *
 * Errors (bad tokens, positions past max_position_embeddings, n and n_out,
 * a cache given twice or of another model, bad rows or sampling, and a NaN
 * that pcg_probs refuses after the layers ran) leave every cache's length
 * as it was, and the next batch gives what the sequences give alone; a NaN
 * in one sequence without sampling leaves the others' logits as they are.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "gguf.h"
#include "matmul.h"
#include "model.h"
#include "qmatmul.h"
#include "quant.h"

/* One sequence: ctx prompt positions run before, then n positions, the
 * last n_out of them out; out and hidden wanted or not. */
struct shape_case {
	int ctx, n, n_out, out, hidden;
};

static const struct shape_case cases[] = {
	{ 0, 1, 1, 1, 1 },  /* a first position */
	{ 5, 4, 4, 1, 1 },  /* a verification block after a prompt */
	{ 12, 1, 1, 1, 0 }, /* a decode step */
	{ 3, 8, 2, 1, 1 },
	{ 0, 6, 6, 0, 1 },  /* hidden states only */
	{ 9, 3, 0, 1, 1 },  /* no outputs */
	{ 2, 7, 7, 1, 1 },
	{ 1, 2, 1, 1, 1 },
	{ 4, 11, 3, 1, 1 }, /* longer than PCG_MATMUL_SMALL */
};
#define N_SPECS (int)(sizeof cases / sizeof cases[0])
#define LONG 8 /* the index of the long one */

/* Batches: indices into cases, -1 ends. */
static const int batches[][N_SPECS + 1] = {
	{ 0, -1 },
	{ 0, 1, -1 },
	{ 0, 1, 2, -1 },
	{ 0, 1, 2, 3, -1 },
	{ 0, 1, 2, 3, 4, -1 },
	{ 0, 1, 2, 3, 4, 5, -1 },
	{ 0, 1, 2, 3, 4, 5, 6, -1 },
	{ 0, 1, 2, 3, 4, 5, 6, 7, -1 },
	{ 0, 1, 2, 3, 4, 5, 6, 7, 8, -1 },
	{ 4, 8, 2, 6, 0, 3, -1 },
	{ 8, -1 },
	{ 2, 8, -1 },
};
#define N_BATCHES (int)(sizeof batches / sizeof batches[0])

static int token(int seq, int pos, int vocab) { return (seq * 37 + pos * 11 + 5) % vocab; }

/* What a mode asks for: rows of the lm_head, and probabilities or not. */
struct mode {
	const char *name;
	int subset, probs;
};
static const struct mode modes[] = {
	{ "logits", 0, 0 },
	{ "logits of a subset", 1, 0 },
	{ "probabilities of a subset", 1, 1 },
};
static const pcg_sampling samp = { 0.8f, 20, 0.95f };

/* A sequence's state and outputs: step 0 is the spec's positions, step 1
 * one more position after them. */
struct run {
	llama_kv *kv;
	int toks[2][16];
	float *out[2], *hidden[2];
};

static llama_rows subset_rows(int vocab)
{
	/* as LLaSA's: a range at the end, then a single row before it */
	llama_rows r = { 2, { vocab / 3, 7 }, { vocab, 8 } };
	return r;
}

/* Allocates r and runs the spec's prompt into a new cache. */
static int run_new(llama_model *m, struct run *r, int i, int count)
{
	const llama_config *c = llama_get_config(m);
	const struct shape_case *s = &cases[i];
	int prompt[32];
	pcg_err err = { "" };

	memset(r, 0, sizeof *r);
	r->kv = llama_kv_new(m);
	for (int p = 0; p < s->ctx; p++)
		prompt[p] = token(i + 50, p, c->vocab);
	for (int p = 0; p < s->n; p++)
		r->toks[0][p] = token(i, s->ctx + p, c->vocab);
	r->toks[1][0] = token(i + 100, 0, c->vocab);
	for (int st = 0; st < 2; st++) {
		const int n_out = st == 0 ? s->n_out : 1;
		r->out[st] = calloc((size_t)n_out * count + 1, sizeof(float));
		r->hidden[st] = calloc((size_t)n_out * c->hidden + 1, sizeof(float));
	}
	if (s->ctx > 0 && llama_forward(m, r->kv, prompt, s->ctx, 0, NULL, NULL, &err) < 0) {
		CHECKF(0, "prompt: %s", err.msg);
		return -1;
	}
	return 0;
}

static void run_free(struct run *r)
{
	llama_kv_free(&r->kv);
	for (int st = 0; st < 2; st++) {
		free(r->out[st]);
		free(r->hidden[st]);
	}
}

static llama_seq seq_of(struct run *r, int i, int st)
{
	const struct shape_case *s = &cases[i];
	llama_seq q = { r->kv, r->toks[st], st == 0 ? s->n : 1, st == 0 ? s->n_out : 1,
			st == 0 && !s->out ? NULL : r->out[st],
			st == 0 && !s->hidden ? NULL : r->hidden[st], NULL };
	return q;
}

/* Every batch of the table in mode md against its sequences alone. */
static void check_batches(llama_model *m, const char *label, const struct mode *md)
{
	const llama_config *c = llama_get_config(m);
	const llama_rows sub = subset_rows(c->vocab), *rows = md->subset ? &sub : NULL;
	const pcg_sampling *sp = md->probs ? &samp : NULL;
	const int count = llama_rows_count(m, rows);
	struct run alone[N_SPECS], b[N_SPECS];
	pcg_err err = { "" };

	/* each alone, two steps */
	for (int i = 0; i < N_SPECS; i++) {
		if (run_new(m, &alone[i], i, count) < 0)
			return;
		for (int st = 0; st < 2; st++) {
			llama_seq q = seq_of(&alone[i], i, st);
			int rc = sp ? llama_forward_probs(m, q.kv, q.tokens, q.n, q.n_out, rows, sp,
							  q.out, q.hidden, &err)
				    : llama_forward_hidden(m, q.kv, q.tokens, q.n, q.n_out, rows,
							   q.out, q.hidden, &err);
			CHECKF(rc == 0, "%s: alone: %s", label, err.msg);
		}
	}
	for (int bi = 0; bi < N_BATCHES; bi++) {
		const int *idx = batches[bi];
		int n = 0, rows_total = 0, same = 1;
		llama_seq q[N_SPECS];
		while (idx[n] >= 0)
			rows_total += cases[idx[n++]].n;
		for (int j = 0; j < n; j++)
			if (run_new(m, &b[j], idx[j], count) < 0)
				return;
		for (int st = 0; st < 2; st++) {
			for (int j = 0; j < n; j++)
				q[j] = seq_of(&b[j], idx[j], st);
			CHECKF(llama_forward_batch(m, q, n, rows, sp, &err) == 0, "%s: batch %d: %s",
			       label, bi, err.msg);
			for (int j = 0; j < n; j++) {
				const int i = idx[j];
				const llama_seq a = seq_of(&alone[i], i, st);
				if (a.out && memcmp(a.out, q[j].out, (size_t)a.n_out * count * 4)) {
					printf("%s, %s: batch %d step %d: sequence %d's outputs differ\n",
					       label, md->name, bi, st, i);
					same = 0;
				}
				if (a.hidden && memcmp(a.hidden, q[j].hidden,
						       (size_t)a.n_out * c->hidden * 4)) {
					printf("%s, %s: batch %d step %d: sequence %d's hidden differ\n",
					       label, md->name, bi, st, i);
					same = 0;
				}
				CHECK(llama_kv_len(b[j].kv) ==
				      cases[i].ctx + cases[i].n + (st == 1));
			}
		}
		CHECKF(same, "%s, %s: batch %d of %d sequences, %d rows: not what they give alone",
		       label, md->name, bi, n, rows_total);
		for (int j = 0; j < n; j++)
			run_free(&b[j]);
	}
	for (int i = 0; i < N_SPECS; i++)
		run_free(&alone[i]);
}

/* Every mode on every kernel family (float) or path (quantised) the CPU has. */
static void check_model(const char *path, int quant)
{
	static const char *const isas[] = { "avx512-bf16", "avx512", "avx2", "neon", "generic" };
	static const char *const qpaths[] = { "avx512-vnni", "avx-vnni", "avx2", "neon-i8mm",
						     "neon-dotprod", "neon", "generic" };
	const int n_k = quant ? (int)(sizeof qpaths / sizeof qpaths[0])
			      : (int)(sizeof isas / sizeof isas[0]);
	const char *isa0 = pcg_matmul_isa(), *path0 = pcg_qmatmul_path(); /* the best */
	pcg_err err = { "" };
	llama_model *m = llama_open(path, NULL, &err);
	char label[512];

	CHECKF(m != NULL, "%s: %s", path, err.msg);
	if (m == NULL)
		return;
	for (int k = 0; k < n_k; k++) {
		const char *name = quant ? qpaths[k] : isas[k];
		if ((quant ? pcg_qmatmul_set_path(name) : pcg_matmul_set_isa(name)) < 0)
			continue;
		snprintf(label, sizeof label, "%s (%s)", path, name);
		for (size_t md = 0; md < sizeof modes / sizeof modes[0]; md++)
			check_batches(m, label, &modes[md]);
		printf("%s: batches equal sequences alone\n", label);
	}
	pcg_matmul_set_isa(isa0);
	pcg_qmatmul_set_path(path0);
	llama_close(&m);
}

/* ------------------------------------------------------- pcg_matmul_rows */

static void check_rows_product(void)
{
	static const char *const isas[] = { "avx512-bf16", "avx512", "avx2", "neon", "generic" };
	static const pcg_dtype dts[] = { PCG_F32, PCG_F16, PCG_BF16 };
	static const int Bs[] = { 9, 17, 40 }, Ks[] = { 64, 70, 96 };
	enum { N = 50, R0 = 3, NR = 45 };
	const char *isa0 = pcg_matmul_isa();
	float *wf = malloc((size_t)N * 96 * 4), *x = malloc((size_t)40 * 96 * 4);
	float *y = malloc((size_t)40 * NR * 4), *y1 = malloc(NR * 4);
	uint16_t *wh = malloc((size_t)N * 96 * 2);
	uint32_t s = 99;

	for (int i = 0; i < N * 96; i++)
		wf[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
	for (int i = 0; i < 40 * 96; i++)
		x[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
	for (int k = 0; k < (int)(sizeof isas / sizeof isas[0]); k++) {
		if (pcg_matmul_set_isa(isas[k]) < 0)
			continue;
		for (int d = 0; d < 3; d++)
			for (int bi = 0; bi < 3; bi++)
				for (int ki = 0; ki < 3; ki++) {
					const int B = Bs[bi], K = Ks[ki];
					int same = 1;
					for (int i = 0; i < N * K; i++)
						wh[i] = dts[d] == PCG_BF16 ? pcg_f32_to_bf16(wf[i])
									   : pcg_f32_to_f16(wf[i]);
					pcg_mat W = { .data = dts[d] == PCG_F32 ? (const void *)wf : wh, .dtype = dts[d], .rows = N, .cols = K };
					pcg_matmul_rows(y, NR, x, B, &W, R0, NR);
					for (int b = 0; b < B; b++) {
						pcg_matmul(y1, NR, x + (size_t)b * K, 1, &W, R0, NR);
						same &= !memcmp(y1, y + (size_t)b * NR, NR * 4);
					}
					CHECKF(same, "pcg_matmul_rows %s %s B=%d K=%d: a row differs "
					       "from itself alone", isas[k], pcg_dtype_name(dts[d]), B, K);
				}
	}
	pcg_matmul_set_isa(isa0);
	free(wf);
	free(x);
	free(y);
	free(y1);
	free(wh);
}

/* ------------------------------------------------ a random GGUF model */

#define G_HIDDEN 256
#define G_FFN 512
#define G_LAYERS 2
#define G_VOCAB 300
#define G_MAXPOS 64
#define NAN_TOKEN 7

struct gtensor {
	char name[48];
	pcg_dtype t;
	int rows, cols;
};

struct gmodel {
	struct gtensor t[4 + 9 * G_LAYERS];
	int n;
	int nan_token; /* >= 0: that row of the embedding is NaN */
};

static float grand(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static int gfill(void *ctx, int index, void *dst, size_t nbytes, pcg_err *err)
{
	const struct gmodel *g = ctx;
	const struct gtensor *t = &g->t[index];
	const size_t n = (size_t)t->rows * t->cols;
	float *f = malloc(n * sizeof *f);
	uint32_t s = 1234u + 77u * (uint32_t)index;

	(void)nbytes;
	if (f == NULL)
		return pcg_fail(err, "out of memory");
	for (size_t i = 0; i < n; i++)
		f[i] = t->rows == 1 ? 1.0f + 0.2f * grand(&s) : 0.2f * grand(&s);
	if (index == 0 && g->nan_token >= 0)
		for (int k = 0; k < t->cols; k++)
			f[(size_t)g->nan_token * t->cols + k] = NAN;
	if (t->t == PCG_F32)
		memcpy(dst, f, n * sizeof *f);
	else if (pcg_quantize(dst, f, t->t, n) < 0) {
		free(f);
		return pcg_fail(err, "%s: cannot quantise", t->name);
	}
	free(f);
	return 0;
}

/* Writes the model to path; f32: every matrix in F32 (which carries a NaN
 * through, where the int8 activations of the quantised products would not);
 * nan_token >= 0 poisons that token's embedding. */
static int write_model(const char *path, int f32, int nan_token)
{
	static const struct { const char *name; pcg_dtype t; int rows, cols; } blk[] = {
		{ "attn_norm", PCG_F32, 1, G_HIDDEN },
		{ "attn_q", PCG_Q4_K, G_HIDDEN, G_HIDDEN },
		{ "attn_k", PCG_Q5_K, G_HIDDEN / 2, G_HIDDEN },
		{ "attn_v", PCG_Q6_K, G_HIDDEN / 2, G_HIDDEN },
		{ "attn_output", PCG_Q8_0, G_HIDDEN, G_HIDDEN },
		{ "ffn_norm", PCG_F32, 1, G_HIDDEN },
		{ "ffn_gate", PCG_Q4_K, G_FFN, G_HIDDEN },
		{ "ffn_up", PCG_Q5_K, G_FFN, G_HIDDEN },
		{ "ffn_down", PCG_Q6_K, G_HIDDEN, G_FFN },
	};
	struct gmodel *g = calloc(1, sizeof *g);
	pcg_err err = { "" };
	gguf_writer *w = gguf_writer_new(&err);
	int rc = w && g ? 0 : -1;

	if (g == NULL)
		return -1;
	g->nan_token = nan_token;
#define T(nm, ty, r, c) do { \
	snprintf(g->t[g->n].name, sizeof g->t[g->n].name, "%s", nm); \
	g->t[g->n].t = ty; g->t[g->n].rows = r; g->t[g->n].cols = c; g->n++; \
} while (0)
	T("token_embd.weight", PCG_F32, G_VOCAB, G_HIDDEN);
	T("output_norm.weight", PCG_F32, 1, G_HIDDEN);
	T("output.weight", f32 ? PCG_F32 : PCG_Q6_K, G_VOCAB, G_HIDDEN);
	for (int l = 0; l < G_LAYERS; l++)
		for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
			char nm[48];
			snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, blk[i].name);
			T(nm, f32 ? PCG_F32 : blk[i].t, blk[i].rows, blk[i].cols);
		}
#undef T
	if (rc == 0 &&
	    (gguf_set_str(w, "general.architecture", "llama", &err) < 0 ||
	     gguf_set_u32(w, "llama.context_length", G_MAXPOS, &err) < 0 ||
	     gguf_set_u32(w, "llama.embedding_length", G_HIDDEN, &err) < 0 ||
	     gguf_set_u32(w, "llama.block_count", G_LAYERS, &err) < 0 ||
	     gguf_set_u32(w, "llama.feed_forward_length", G_FFN, &err) < 0 ||
	     gguf_set_u32(w, "llama.attention.head_count", 4, &err) < 0 ||
	     gguf_set_u32(w, "llama.attention.head_count_kv", 2, &err) < 0 ||
	     gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f, &err) < 0 ||
	     gguf_set_u32(w, "llama.vocab_size", G_VOCAB, &err) < 0))
		rc = -1;
	for (int i = 0; rc == 0 && i < g->n; i++) {
		const struct gtensor *t = &g->t[i];
		const int64_t ne[2] = { t->cols, t->rows };
		if (gguf_add_tensor(w, t->name, t->t, t->rows == 1 ? 1 : 2, ne, gfill, g, i,
				    &err) < 0)
			rc = -1;
	}
	if (rc == 0 && gguf_writer_finish(w, path, &err) < 0)
		rc = -1;
	CHECKF(rc == 0, "%s: %s", path, err.msg);
	gguf_writer_free(&w);
	free(g);
	return rc;
}

/* ----------------------------------------------------------------- errors */

/* A batch that must fail and leave every cache's length alone. */
static void expect_fail(llama_model *m, llama_seq *q, int n, const llama_rows *rows,
			const pcg_sampling *sp, struct run *r, int nr, const char *what)
{
	pcg_err err = { "" };
	int lens[N_SPECS];

	for (int j = 0; j < nr; j++)
		lens[j] = llama_kv_len(r[j].kv);
	CHECKF(llama_forward_batch(m, q, n, rows, sp, &err) == -1 && err.msg[0],
	       "%s: accepted", what);
	printf("%s: %s\n", what, err.msg);
	for (int j = 0; j < nr; j++)
		CHECKF(llama_kv_len(r[j].kv) == lens[j], "%s: cache %d changed length", what, j);
}

static void check_errors(const char *path, const char *other)
{
	pcg_err err = { "" };
	llama_model *m = llama_open(path, NULL, &err), *o = llama_open(other, NULL, &err);
	CHECKF(m && o, "%s", err.msg);
	if (m == NULL || o == NULL)
		return;
	const llama_config *c = llama_get_config(m);
	const int idx[3] = { 1, 3, 2 }, V = c->vocab;
	struct run r[3], ref[3];
	llama_seq q[3], good[3];
	int many[G_MAXPOS];

	for (int j = 0; j < 3; j++) {
		if (run_new(m, &r[j], idx[j], V) < 0 || run_new(m, &ref[j], idx[j], V) < 0)
			return;
		good[j] = q[j] = seq_of(&r[j], idx[j], 0);
	}
	for (int p = 0; p < G_MAXPOS; p++)
		many[p] = p % V;

#define RESET memcpy(q, good, sizeof q)
	expect_fail(m, q, 0, NULL, NULL, r, 3, "no sequences");
	RESET;
	int bad_tok[8];
	memcpy(bad_tok, q[2].tokens, (size_t)q[2].n * sizeof *bad_tok);
	bad_tok[q[2].n - 1] = V;
	q[2].tokens = bad_tok;
	expect_fail(m, q, 3, NULL, NULL, r, 3, "token = vocab in the last sequence");
	bad_tok[q[2].n - 1] = -1;
	expect_fail(m, q, 3, NULL, NULL, r, 3, "token -1");
	RESET;
	q[1].n_out = q[1].n + 1;
	expect_fail(m, q, 3, NULL, NULL, r, 3, "n_out > n");
	q[1].n_out = -1;
	expect_fail(m, q, 3, NULL, NULL, r, 3, "n_out < 0");
	RESET;
	q[2].n = 0;
	q[2].n_out = 0;
	expect_fail(m, q, 3, NULL, NULL, r, 3, "n = 0");
	RESET;
	q[0].tokens = NULL;
	expect_fail(m, q, 3, NULL, NULL, r, 3, "tokens NULL");
	RESET;
	q[2].tokens = many;
	q[2].n = G_MAXPOS - llama_kv_len(r[2].kv) + 1;
	q[2].n_out = 1;
	expect_fail(m, q, 3, NULL, NULL, r, 3, "past max_position_embeddings");
	RESET;
	q[2].kv = q[0].kv;
	expect_fail(m, q, 3, NULL, NULL, r, 3, "a cache twice");
	RESET;
	q[1].kv = NULL;
	expect_fail(m, q, 3, NULL, NULL, r, 3, "no cache");
	RESET;
	llama_kv *okv = llama_kv_new(o);
	q[1].kv = okv;
	expect_fail(m, q, 3, NULL, NULL, r, 3, "another model's cache");
	llama_kv_free(&okv);
	RESET;
	llama_rows bad_rows = { 1, { 10 }, { V + 1 } };
	expect_fail(m, q, 3, &bad_rows, NULL, r, 3, "rows past the vocabulary");
	bad_rows.n = LLAMA_MAX_RANGES + 1;
	expect_fail(m, q, 3, &bad_rows, NULL, r, 3, "too many ranges");
	const pcg_sampling bad_s = { -1.0f, 0, 1.0f };
	expect_fail(m, q, 3, NULL, &bad_s, r, 3, "negative temperature");

	/* A NaN embedding: without sampling the others' logits are untouched;
	 * with it pcg_probs refuses the row after every layer ran. */
	int nan_tok[8];
	memcpy(nan_tok, good[2].tokens, (size_t)good[2].n * sizeof *nan_tok);
	nan_tok[0] = NAN_TOKEN;
	RESET;
	q[2].tokens = nan_tok;
	expect_fail(m, q, 3, NULL, &samp, r, 3, "a NaN that pcg_probs refuses");
	CHECK(llama_forward_batch(m, q, 3, NULL, NULL, &err) == 0);
	CHECKF(isnan(q[2].out[0]), "the NaN token did not give NaN logits");
	for (int j = 0; j < 2; j++) {
		llama_seq a = seq_of(&ref[j], idx[j], 0);
		CHECK(llama_forward_hidden(m, a.kv, a.tokens, a.n, a.n_out, NULL, a.out, a.hidden,
					   &err) == 0);
		CHECKF(!memcmp(a.out, q[j].out, (size_t)a.n_out * V * 4) &&
		       !memcmp(a.hidden, q[j].hidden, (size_t)a.n_out * c->hidden * 4),
		       "sequence %d beside a NaN one differs from alone", j);
		CHECK(llama_kv_truncate(a.kv, cases[idx[j]].ctx, &err) == 0);
	}
	for (int j = 0; j < 3; j++)
		CHECK(llama_kv_truncate(r[j].kv, cases[idx[j]].ctx, &err) == 0);

	/* After all that, a batch gives what the sequences give alone. */
	RESET;
	CHECKF(llama_forward_batch(m, q, 3, NULL, &samp, &err) == 0, "%s", err.msg);
	for (int j = 0; j < 3; j++) {
		llama_seq a = seq_of(&ref[j], idx[j], 0);
		CHECK(llama_forward_probs(m, a.kv, a.tokens, a.n, a.n_out, NULL, &samp, a.out,
					  a.hidden, &err) == 0);
		CHECKF(!memcmp(a.out, q[j].out, (size_t)a.n_out * V * 4) &&
		       (a.hidden == NULL ||
			!memcmp(a.hidden, q[j].hidden, (size_t)a.n_out * c->hidden * 4)),
		       "sequence %d after the errors differs from alone", j);
		CHECK(llama_kv_len(r[j].kv) == llama_kv_len(ref[j].kv));
	}
#undef RESET
	for (int j = 0; j < 3; j++) {
		run_free(&r[j]);
		run_free(&ref[j]);
	}
	llama_close(&m);
	llama_close(&o);
}

int main(void)
{
	char kq[1024], nanm[1024];

	pcg_set_threads(2);
	snprintf(kq, sizeof kq, "%s/kquant.gguf", check_tmpdir());
	snprintf(nanm, sizeof nanm, "%s/kquant-nan.gguf", check_tmpdir());
	if (write_model(kq, 0, -1) < 0 || write_model(nanm, 1, NAN_TOKEN) < 0)
		return check_done("test_forward_batch");

	check_rows_product();
	check_model("tests/fixtures/llama/gqa-f32", 0);
	check_model("tests/fixtures/llama/bf16", 0);
	check_model("tests/fixtures/gguf/gqa-f16.gguf", 0);
	check_model("tests/fixtures/gguf/gqa-q8_0.gguf", 1);
	check_model("tests/fixtures/gguf/gqa-q4_0.gguf", 1);
	check_model(kq, 1);
	check_errors(nanm, "tests/fixtures/llama/gqa-f32");
	remove(kq);
	remove(nanm);
	return check_done("test_forward_batch");
}
