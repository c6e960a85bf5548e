/* proto.c: packing and strict parsing of the pipeline's msgpack messages
 * (see proto.h for the schemas and man/pcg-protocol.7 for the wire format). */
#include "proto.h"
#include "synth.h"
#include "chunks.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 4 /* map -> rows array -> range array: 3 levels used */

static const char *type_names[] = {
	[PROTO_PROPOSE] = "propose", [PROTO_SCORE] = "score", [PROTO_DROP] = "drop",
	[PROTO_PING] = "ping", [PROTO_PROBS] = "probs", [PROTO_OK] = "ok",
	[PROTO_PONG] = "pong", [PROTO_ERROR] = "error", [PROTO_SYNTH] = "synth",
	[PROTO_RESULT] = "result", [PROTO_AUDIO] = "audio", [PROTO_PCM] = "pcm",
	[PROTO_PROGRESS] = "progress", [PROTO_CANCEL] = "cancel",
};

const char *proto_type_name(proto_type t)
{
	if ((int)t >= 1 && (size_t)t < sizeof type_names / sizeof type_names[0])
		return type_names[t];
	return "?";
}

/* Bytes of each type's struct that proto_init clears: all but the large
 * arrays at its end. */
static const size_t clear_bytes[PROTO_LAST_TYPE + 1] = {
	[PROTO_PROPOSE] = offsetof(proto_propose, req.append),
	[PROTO_SCORE] = offsetof(proto_score, req.append),
	[PROTO_DROP] = sizeof(proto_drop),
	[PROTO_PROBS] = offsetof(proto_probs, nnz),
	[PROTO_PONG] = sizeof(proto_pong),
	[PROTO_ERROR] = sizeof(proto_error_reply),
	[PROTO_SYNTH] = offsetof(proto_synth, text) + 1, /* text[0]: empty */
	[PROTO_RESULT] = offsetof(proto_result, tokens),
	[PROTO_AUDIO] = offsetof(proto_audio, tokens),
	[PROTO_PCM] = sizeof(proto_pcm),
	[PROTO_PROGRESS] = offsetof(proto_progress, tokens),
	[PROTO_CANCEL] = sizeof(proto_cancel),
};

void proto_init(proto_msg *m, proto_type t, uint64_t id)
{
	m->type = t;
	m->id = id;
	m->len = 0;
	if ((int)t >= 1 && t <= PROTO_LAST_TYPE)
		memset((char *)m + offsetof(proto_msg, propose), 0, clear_bytes[t]);
}

const proto_model_req *proto_model(const proto_msg *m)
{
	return m->type == PROTO_PROPOSE ? &m->propose.req
	       : m->type == PROTO_SCORE ? &m->score.req : NULL;
}

proto_model_req *proto_model_mut(proto_msg *m)
{
	return (proto_model_req *)proto_model(m);
}

void proto_error(proto_msg *m, uint64_t id, const char *code, const char *fmt, ...)
{
	va_list ap;

	proto_init(m, PROTO_ERROR, id);
	snprintf(m->error.code, sizeof m->error.code, "%s", code);
	va_start(ap, fmt);
	vsnprintf(m->error.msg, sizeof m->error.msg, fmt, ap);
	va_end(ap);
}

/* Which fields each type carries: a bit per field, in the order of fnames,
 * which is also the order they are packed in. */
enum { F_SESSION, F_POS, F_APPEND, F_N, F_TEMP, F_TOPK, F_TOPP, F_ROWS, F_F16, F_SEED, F_X,
       F_WIDTH, F_P, F_CODE, F_MSG, F_TEXT, F_POLICY, F_BETA, F_MAXTOK, F_STATS,
       F_FINAL, F_TOKENS, F_ASG, F_SPEAKER, F_HEADS, F_VITERBI_K, F_NNZ, F_PAD, F_STREAM,
       F_AUDIO, F_CHUNK, F_LEFT, F_RIGHT, F_QUEUE, F_RATE, F_PCM, F_FORCED, F_ARGS,
       F_PROMPT_TEXT, F_PROMPT_AUDIO, F_SEQUENTIAL, F_FIRST, F_DRAWS, F_STOP, F_COUNT };
static const char *fnames[F_COUNT] = { "session", "pos", "append", "n", "temp", "top_k",
	"top_p", "rows", "f16", "seed", "x", "width", "p", "code", "msg", "text", "policy",
	"beta", "max_tokens", "stats", "final", "tokens", "asg", "speaker", "heads",
	"viterbi_k", "nnz", "pad", "stream", "audio", "chunk", "left", "right", "queue", "rate",
	"pcm", "forced", "args", "prompt_text", "prompt_audio", "sequential", "first", "draws",
	"stop" };
#define B(f) (1ull << (f))
static const uint64_t schema[] = {
	[PROTO_PROPOSE] = B(F_SESSION) | B(F_POS) | B(F_APPEND) | B(F_N) | B(F_TEMP) | B(F_TOPK) |
			  B(F_TOPP) | B(F_ROWS) | B(F_F16) | B(F_SEED),
	[PROTO_SCORE] = B(F_SESSION) | B(F_POS) | B(F_APPEND) | B(F_N) | B(F_TEMP) | B(F_TOPK) |
			B(F_TOPP) | B(F_ROWS) | B(F_F16) | B(F_HEADS),
	[PROTO_DROP] = B(F_SESSION),
	[PROTO_PING] = 0,
	[PROTO_PROBS] = B(F_X) | B(F_N) | B(F_WIDTH) | B(F_F16) | B(F_P) | B(F_STATS) | B(F_NNZ) |
			B(F_PAD),
	[PROTO_OK] = 0,
	[PROTO_PONG] = B(F_MSG),
	[PROTO_ERROR] = B(F_CODE) | B(F_MSG),
	[PROTO_SYNTH] = B(F_TEXT) | B(F_POLICY) | B(F_BETA) | B(F_N) | B(F_TEMP) | B(F_TOPK) |
			B(F_TOPP) | B(F_SEED) | B(F_MAXTOK) | B(F_F16) | B(F_ASG) |
			B(F_SPEAKER) | B(F_VITERBI_K) | B(F_STREAM) | B(F_AUDIO) | B(F_CHUNK) |
			B(F_LEFT) | B(F_RIGHT),
	[PROTO_RESULT] = B(F_TOKENS) | B(F_STATS) | B(F_MSG),
	[PROTO_AUDIO] = B(F_SESSION) | B(F_TOKENS) | B(F_FINAL) | B(F_CHUNK) | B(F_LEFT) |
			B(F_RIGHT),
	[PROTO_PCM] = B(F_RATE) | B(F_PCM),
	[PROTO_PROGRESS] = B(F_QUEUE) | B(F_POS) | B(F_TOKENS) | B(F_RATE) | B(F_PCM),
	[PROTO_CANCEL] = B(F_SESSION),
};
/* Fields a type may carry beyond its schema: sent only when not empty. */
static const uint64_t optional[] = {
	[PROTO_PROPOSE] = B(F_FORCED) | B(F_DRAWS) | B(F_STOP),
	[PROTO_SYNTH] = B(F_ARGS) | B(F_PROMPT_TEXT) | B(F_PROMPT_AUDIO) | B(F_SEQUENTIAL) |
			B(F_FIRST),
	[PROTO_AUDIO] = B(F_FIRST),
	[PROTO_LAST_TYPE] = 0,
};

/* The fields m carries: its schema's, and its optional ones that are set. */
static uint64_t fields_of(const proto_msg *m)
{
	uint64_t f = schema[m->type];

	if (m->type == PROTO_PROPOSE && m->propose.n_forced > 0)
		f |= B(F_FORCED);
	if (m->type == PROTO_PROPOSE && m->propose.draws)
		f |= B(F_DRAWS);
	if (m->type == PROTO_PROPOSE && m->propose.stop)
		f |= B(F_STOP);
	if (m->type == PROTO_SYNTH && m->synth.n_args > 0)
		f |= B(F_ARGS);
	if (m->type == PROTO_SYNTH && m->synth.prompt_text[0] != '\0')
		f |= B(F_PROMPT_TEXT);
	if (m->type == PROTO_SYNTH && m->synth.prompt_audio_len > 0)
		f |= B(F_PROMPT_AUDIO);
	if (m->type == PROTO_SYNTH && m->synth.sequential)
		f |= B(F_SEQUENTIAL);
	if ((m->type == PROTO_SYNTH && m->synth.first) || (m->type == PROTO_AUDIO && m->audio.first))
		f |= B(F_FIRST);
	return f;
}

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the probabilities and ids travel as the host's bytes: little-endian"
#endif

/* ------------------------------------------------------------------ pack */

void proto_buf_free(proto_buf *b)
{
	free(b->data);
	free(b->ids);
	free(b->vals);
	memset(b, 0, sizeof *b);
}

/* Room for n more bytes at the end of b; NULL when out of memory (b->oom is
 * then set, and packing fails at its end). */
static unsigned char *reserve(proto_buf *b, size_t n)
{
	if (b->cap - b->len < n) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap - b->len < n)
			cap *= 2;
		unsigned char *d = realloc(b->data, cap);
		if (d == NULL) {
			b->oom = 1;
			return NULL;
		}
		b->data = d;
		b->cap = cap;
	}
	b->len += n;
	return b->data + b->len - n;
}

/* Room for n more entries in b's scratch of sparse vectors, after used. */
static int reserve_scratch(proto_buf *b, size_t used, size_t n)
{
	if (b->scap - used >= n)
		return 0;
	size_t cap = b->scap ? b->scap : 1024;
	while (cap - used < n)
		cap *= 2;
	uint32_t *ids = realloc(b->ids, cap * sizeof *ids);
	if (ids == NULL)
		return -1;
	b->ids = ids;
	float *vals = realloc(b->vals, cap * sizeof *vals);
	if (vals == NULL)
		return -1; /* scap stays: ids is merely larger than needed */
	b->vals = vals;
	b->scap = cap;
	return 0;
}

static int buf_write(void *data, const char *buf, size_t len)
{
	unsigned char *d = reserve(data, len);
	if (d == NULL)
		return -1;
	if (len) /* an empty body may come with a NULL pointer */
		memcpy(d, buf, len);
	return 0;
}

/* What packing a probs reply decided: per vector, the entries sent. */
typedef struct pack_ctx {
	msgpack_packer pk;
	proto_buf *b;
	const proto_msg *m;
	const proto_probs *p; /* m's, when it is one */
	int nnz[PROTO_MAX_VEC];
	size_t n_vals, n_ids; /* values in p; ids of the sparse vectors */
} pack_ctx;

/* Appends the nonzero entries (by their bits: a -0 too) of u[i..end) to
 * ids and vals at *k; -1 as soon as there are more than max. */
static int take(const uint32_t *u, int i, int end, int max, uint32_t *ids, float *vals, int *k)
{
	for (; i < end; i++)
		if (u[i] != 0) {
			if (*k == max)
				return -1;
			ids[*k] = (uint32_t)i;
			memcpy(&vals[(*k)++], &u[i], sizeof *vals);
		}
	return 0;
}

/* The nonzero entries of x[0..n) into ids and vals: their count, or -1 when
 * there are more than max. Blocks of 64 are tested at once (in a truncated
 * distribution almost all are zero), with AVX2 where the CPU has it: 3 us
 * instead of 7 for 65,537 values. */
#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static int gather_avx2(const uint32_t *u, int n, int max,
						       uint32_t *ids, float *vals)
{
	int k = 0, i = 0;

	for (; i + 64 <= n; i += 64) {
		const __m256i *p = (const __m256i *)(const void *)(u + i);
		__m256i a = _mm256_or_si256(_mm256_or_si256(_mm256_loadu_si256(p),
							    _mm256_loadu_si256(p + 1)),
					    _mm256_or_si256(_mm256_loadu_si256(p + 2),
							    _mm256_loadu_si256(p + 3)));
		__m256i b = _mm256_or_si256(_mm256_or_si256(_mm256_loadu_si256(p + 4),
							    _mm256_loadu_si256(p + 5)),
					    _mm256_or_si256(_mm256_loadu_si256(p + 6),
							    _mm256_loadu_si256(p + 7)));
		a = _mm256_or_si256(a, b);
		if (!_mm256_testz_si256(a, a) && take(u, i, i + 64, max, ids, vals, &k) < 0)
			return -1;
	}
	return take(u, i, n, max, ids, vals, &k) < 0 ? -1 : k;
}
#define HAVE_AVX2() __builtin_cpu_supports("avx2")
#else
#define HAVE_AVX2() 0
#define gather_avx2(u, n, max, ids, vals) (-1)
#endif

static int gather(const float *x, int n, int max, uint32_t *ids, float *vals)
{
	const uint32_t *u = (const uint32_t *)(const void *)x;
	int k = 0, i = 0;

	if (HAVE_AVX2())
		return gather_avx2(u, n, max, ids, vals);
	for (; i + 64 <= n; i += 64) {
		uint32_t any = 0;
		for (int j = 0; j < 64; j++)
			any |= u[i + j];
		if (any != 0 && take(u, i, i + 64, max, ids, vals, &k) < 0)
			return -1;
	}
	return take(u, i, n, max, ids, vals, &k) < 0 ? -1 : k;
}

/* Chooses each vector's form: sparse when the caller asked for it and its
 * ids and values take fewer bytes than its dense values. The sparse
 * vectors' entries go to b's scratch. */
static int plan_probs(pack_ctx *c, pcg_err *err)
{
	const proto_probs *m = c->p;
	proto_buf *b = c->b;
	const size_t es = m->f16 ? 2 : 4, W = (size_t)m->width;
	/* sparse pays when k (4 + es) < W es */
	const int max = (int)((W * es - 1) / (4 + es));

	c->n_vals = c->n_ids = 0;
	for (int i = 0; i < m->n_vec; i++)
		c->nnz[i] = m->width;
	if (!m->sparse || max < 1 || m->n_vec < 1) {
		c->n_vals = (size_t)m->n_vec * W;
		return 0;
	}
	for (int i = 0; i < m->n_vec; i++) {
		if (reserve_scratch(b, c->n_ids, (size_t)max) < 0)
			return pcg_fail(err, "pack: out of memory");
		int k = gather((const float *)m->values + (size_t)i * W, m->width, max,
			       b->ids + c->n_ids, b->vals + c->n_ids);
		if (k >= 0) {
			c->nnz[i] = k;
			c->n_ids += (size_t)k;
		}
		c->n_vals += (size_t)c->nnz[i];
	}
	return 0;
}

static void key(msgpack_packer *pk, const char *k)
{
	msgpack_pack_str(pk, strlen(k));
	msgpack_pack_str_body(pk, k, strlen(k));
}

static void put_str(msgpack_packer *pk, const char *v)
{
	msgpack_pack_str(pk, strlen(v));
	msgpack_pack_str_body(pk, v, strlen(v));
}

static void str(msgpack_packer *pk, const char *k, const char *v)
{
	key(pk, k);
	put_str(pk, v);
}


static void boolean(msgpack_packer *pk, int v)
{
	v ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
}

/* n values as f32 or f16 at dst. */
static void put_values(unsigned char *dst, const float *src, size_t n, int f16)
{
	if (f16)
		pcg_f32_to_f16_n((uint16_t *)(void *)dst, src, n);
	else
		memcpy(dst, src, n * sizeof *src);
}

/* pad, then p: the values land at a multiple of 8 bytes in the message
 * (the buffer's start is malloc-aligned), so the receiver reads them in
 * place with aligned loads. p's header is always bin32, so that pad knows
 * where the values start. */
static int pack_probs(pack_ctx *c, pcg_err *err)
{
	const proto_probs *m = c->p;
	proto_buf *b = c->b;
	const size_t es = m->f16 ? 2 : 4, W = (size_t)m->width;
	size_t vbytes = c->n_vals * es, gap = c->n_ids ? (4 - vbytes % 4) % 4 : 0;
	size_t bytes = vbytes + gap + 4 * c->n_ids;
	/* "pad" key 4 bytes, bin8 header 2, k bytes, "p" key 2, bin32 header 5 */
	size_t k = (8 - (b->len + 13) % 8) % 8;
	static const unsigned char zero[8];

	key(&c->pk, "pad");
	msgpack_pack_bin(&c->pk, k);
	msgpack_pack_bin_body(&c->pk, zero, k);
	key(&c->pk, "p");
	if (bytes > UINT32_MAX)
		return pcg_fail(err, "pack: %zu bytes of probabilities", bytes);
	unsigned char *d = reserve(b, 5 + bytes);
	if (d == NULL)
		return pcg_fail(err, "pack: out of memory");
	d[0] = 0xc6;
	for (int i = 0; i < 4; i++)
		d[1 + i] = (unsigned char)(bytes >> (24 - 8 * i));
	d += 5;
	const float *sv = b->vals;
	for (int i = 0; i < m->n_vec; i++) {
		const size_t n = (size_t)c->nnz[i];
		put_values(d, n == W ? (const float *)m->values + (size_t)i * W : sv, n, m->f16);
		if (n != W)
			sv += n;
		d += n * es;
	}
	memset(d, 0, gap);
	if (c->n_ids)
		memcpy(d + gap, b->ids, 4 * c->n_ids);
	return 0;
}

/* The values of the fields that more than one type carries. */

static void put_ids(msgpack_packer *pk, const int32_t *ids, int n)
{
	msgpack_pack_array(pk, (size_t)n);
	for (int i = 0; i < n; i++)
		msgpack_pack_int32(pk, ids[i]);
}

static void put_stats(msgpack_packer *pk, const double *stats, int n)
{
	msgpack_pack_array(pk, (size_t)n);
	for (int i = 0; i < n; i++)
		msgpack_pack_double(pk, stats[i]);
}

static void put_samples(msgpack_packer *pk, const void *samples, size_t n)
{
	msgpack_pack_bin(pk, n * 2);
	msgpack_pack_bin_body(pk, samples, n * 2);
}

/* temp, top_k or top_p */
static void put_samp(msgpack_packer *pk, int f, const pcg_sampling *s)
{
	if (f == F_TOPK)
		msgpack_pack_int(pk, s->top_k);
	else
		msgpack_pack_float(pk, f == F_TEMP ? s->temperature : s->top_p);
}

/* The value of field f of each type, as parse reads it back. */

static void put_model(msgpack_packer *pk, int f, const proto_model_req *r)
{
	switch (f) {
	case F_SESSION: msgpack_pack_uint64(pk, r->session); break;
	case F_POS: msgpack_pack_int(pk, r->pos); break;
	case F_APPEND: put_ids(pk, r->append, r->n_append); break;
	case F_N: msgpack_pack_int(pk, r->n); break;
	case F_TEMP: case F_TOPK: case F_TOPP: put_samp(pk, f, &r->samp); break;
	case F_F16: boolean(pk, r->f16); break;
	case F_ROWS:
		msgpack_pack_array(pk, (size_t)r->rows.n);
		for (int i = 0; i < r->rows.n; i++) {
			msgpack_pack_array(pk, 2);
			msgpack_pack_int(pk, r->rows.begin[i]);
			msgpack_pack_int(pk, r->rows.end[i]);
		}
		break;
	}
}

static void put_propose(msgpack_packer *pk, int f, const proto_propose *p)
{
	if (f == F_SEED) {
		msgpack_pack_uint64(pk, p->seed);
	} else if (f == F_DRAWS) {
		msgpack_pack_uint64(pk, p->draws);
	} else if (f == F_STOP) {
		msgpack_pack_int32(pk, p->stop_id);
	} else if (f == F_FORCED) {
		msgpack_pack_array(pk, (size_t)p->n_forced);
		for (int i = 0; i < p->n_forced; i++) {
			msgpack_pack_array(pk, 2);
			msgpack_pack_int(pk, p->forced_at[i]);
			msgpack_pack_int32(pk, p->forced[i]);
		}
	} else {
		put_model(pk, f, &p->req);
	}
}

static void put_score(msgpack_packer *pk, int f, const proto_score *s)
{
	if (f == F_HEADS)
		msgpack_pack_int(pk, s->heads);
	else
		put_model(pk, f, &s->req);
}

/* p and pad go together (pack_probs). */
static void put_probs(pack_ctx *c, int f, const proto_probs *p)
{
	msgpack_packer *pk = &c->pk;

	switch (f) {
	case F_N: msgpack_pack_int(pk, p->n_vec); break;
	case F_WIDTH: msgpack_pack_int(pk, p->width); break;
	case F_F16: boolean(pk, p->f16); break;
	case F_X: put_ids(pk, p->x, p->n_x); break;
	case F_STATS: put_stats(pk, p->stats, p->n_stats); break;
	case F_NNZ:
		msgpack_pack_array(pk, (size_t)p->n_vec);
		for (int i = 0; i < p->n_vec; i++)
			msgpack_pack_int(pk, c->nnz[i]);
		break;
	}
}

static void put_synth(msgpack_packer *pk, int f, const proto_synth *s)
{
	switch (f) {
	case F_TEXT: put_str(pk, s->text); break;
	case F_POLICY: put_str(pk, s->policy); break;
	case F_BETA: msgpack_pack_float(pk, s->beta); break;
	case F_N: msgpack_pack_int(pk, s->lookahead); break;
	case F_TEMP: case F_TOPK: case F_TOPP: put_samp(pk, f, &s->samp); break;
	case F_SEED: msgpack_pack_uint64(pk, s->seed); break;
	case F_MAXTOK: msgpack_pack_int(pk, s->max_tokens); break;
	case F_F16: boolean(pk, s->f16); break;
	case F_ASG:
		msgpack_pack_bin(pk, s->asg_len);
		msgpack_pack_bin_body(pk, s->asg, s->asg_len);
		break;
	case F_SPEAKER: msgpack_pack_int(pk, s->speaker); break;
	case F_VITERBI_K: msgpack_pack_int(pk, s->viterbi_k); break;
	case F_STREAM: boolean(pk, s->stream); break;
	case F_AUDIO: boolean(pk, s->audio); break;
	case F_CHUNK: msgpack_pack_int(pk, s->chunk); break;
	case F_LEFT: msgpack_pack_int(pk, s->left); break;
	case F_RIGHT: msgpack_pack_int(pk, s->right); break;
	case F_ARGS:
		msgpack_pack_map(pk, (size_t)s->n_args);
		for (int i = 0; i < s->n_args; i++) {
			put_str(pk, s->arg_name[i]);
			msgpack_pack_double(pk, s->arg_val[i]);
		}
		break;
	case F_PROMPT_TEXT: put_str(pk, s->prompt_text); break;
	case F_PROMPT_AUDIO:
		msgpack_pack_bin(pk, s->prompt_audio_len);
		msgpack_pack_bin_body(pk, s->prompt_audio, s->prompt_audio_len);
		break;
	case F_SEQUENTIAL: boolean(pk, s->sequential); break;
	case F_FIRST: msgpack_pack_int(pk, s->first); break;
	}
}

static void put_audio(msgpack_packer *pk, int f, const proto_audio *a)
{
	switch (f) {
	case F_SESSION: msgpack_pack_uint64(pk, a->session); break;
	case F_TOKENS: put_ids(pk, a->tokens, a->n_tokens); break;
	case F_FINAL: boolean(pk, a->final); break;
	case F_CHUNK: msgpack_pack_int(pk, a->chunk); break;
	case F_LEFT: msgpack_pack_int(pk, a->left); break;
	case F_RIGHT: msgpack_pack_int(pk, a->right); break;
	case F_FIRST: msgpack_pack_int(pk, a->first); break;
	}
}

static void put_progress(msgpack_packer *pk, int f, const proto_progress *p)
{
	switch (f) {
	case F_QUEUE: msgpack_pack_int(pk, p->queue); break;
	case F_POS: msgpack_pack_int(pk, p->pos); break;
	case F_TOKENS: put_ids(pk, p->tokens, p->n_tokens); break;
	case F_RATE: msgpack_pack_int(pk, p->rate); break;
	case F_PCM: put_samples(pk, p->samples, p->n_samples); break;
	}
}

/* One field of m, key and value. */
static int pack_field(pack_ctx *c, int f, pcg_err *err)
{
	msgpack_packer *pk = &c->pk;
	const proto_msg *m = c->m;

	if (f == F_P)
		return pack_probs(c, err);
	if (f == F_PAD)
		return 0; /* with p */
	key(pk, fnames[f]);
	switch (m->type) {
	case PROTO_PROPOSE: put_propose(pk, f, &m->propose); break;
	case PROTO_SCORE: put_score(pk, f, &m->score); break;
	case PROTO_DROP: msgpack_pack_uint64(pk, m->drop.session); break;
	case PROTO_CANCEL: msgpack_pack_uint64(pk, m->cancel.session); break;
	case PROTO_PROBS: put_probs(c, f, &m->probs); break;
	case PROTO_PONG: put_str(pk, m->pong.msg); break;
	case PROTO_ERROR: put_str(pk, f == F_CODE ? m->error.code : m->error.msg); break;
	case PROTO_SYNTH: put_synth(pk, f, &m->synth); break;
	case PROTO_RESULT:
		if (f == F_TOKENS)
			put_ids(pk, m->result.tokens, m->result.n_tokens);
		else if (f == F_STATS)
			put_stats(pk, m->result.stats, m->result.n_stats);
		else
			put_str(pk, m->result.msg);
		break;
	case PROTO_AUDIO: put_audio(pk, f, &m->audio); break;
	case PROTO_PCM:
		if (f == F_RATE)
			msgpack_pack_int(pk, m->pcm.rate);
		else
			put_samples(pk, m->pcm.samples, m->pcm.n_samples);
		break;
	case PROTO_PROGRESS: put_progress(pk, f, &m->progress); break;
	case PROTO_PING: case PROTO_OK: break; /* no fields */
	}
	return 0;
}

/* A string of cap bytes without its end. */
static int unended(const char *s, size_t cap)
{
	return strnlen(s, cap) == cap;
}

/* Checks the counts and strings of m (a caller's error, not a peer's) and
 * estimates its packed size, so that the buffer is sized once: a payload of
 * a megabyte would otherwise be copied by every doubling. Plans a probs
 * reply's vectors. Returns 0 or -1. */
static int measure(pack_ctx *c, size_t *est, pcg_err *err)
{
	const proto_msg *m = c->m;
	const proto_model_req *r = proto_model(m);
	size_t n = 1024;

	if (r != NULL) {
		if (r->n_append < 0 || r->n_append > PROTO_MAX_APPEND)
			return pcg_fail(err, "pack: %d tokens", r->n_append);
		if (r->rows.n < 0 || r->rows.n > LLAMA_MAX_RANGES)
			return pcg_fail(err, "pack: %d row ranges", r->rows.n);
		n += (size_t)r->n_append * 5;
	}
	switch (m->type) {
	case PROTO_PROPOSE: {
		const int nf = m->propose.n_forced;
		if (nf < 0 || nf > PROTO_MAX_N)
			return pcg_fail(err, "pack: %d forced tokens", nf);
		n += (size_t)nf * 12;
		break;
	}
	case PROTO_PROBS: {
		const proto_probs *p = &m->probs;
		if (p->n_vec < 0 || p->n_vec > PROTO_MAX_VEC || p->width < 1)
			return pcg_fail(err, "pack: %d vectors of width %d", p->n_vec, p->width);
		if (p->n_x < 0 || p->n_x > PROTO_MAX_N)
			return pcg_fail(err, "pack: %d drafted tokens", p->n_x);
		if (p->n_stats < 0 || p->n_stats > PROTO_MAX_STATS)
			return pcg_fail(err, "pack: %d stats", p->n_stats);
		if (plan_probs(c, err) < 0)
			return -1;
		n += (size_t)p->n_stats * 9 + (size_t)p->n_vec * 5 +
		     c->n_vals * (p->f16 ? 2 : 4) + 4 * c->n_ids;
		break;
	}
	case PROTO_PONG:
		if (unended(m->pong.msg, sizeof m->pong.msg))
			return pcg_fail(err, "pack: a string field without its end");
		break;
	case PROTO_ERROR:
		if (unended(m->error.code, sizeof m->error.code) ||
		    unended(m->error.msg, sizeof m->error.msg))
			return pcg_fail(err, "pack: a string field without its end");
		break;
	case PROTO_SYNTH: {
		const proto_synth *s = &m->synth;
		if (s->n_args < 0 || s->n_args > PROTO_MAX_ARGS)
			return pcg_fail(err, "pack: %d policy arguments", s->n_args);
		for (int i = 0; i < s->n_args; i++)
			if (unended(s->arg_name[i], sizeof s->arg_name[i]))
				return pcg_fail(err, "pack: a string field without its end");
		if (s->asg_len > PROTO_MAX_MSG || s->prompt_audio_len > PROTO_MAX_MSG)
			return pcg_fail(err, "pack: an ASG of %zu bytes, a prompt of %zu", s->asg_len,
					s->prompt_audio_len);
		if (unended(s->text, sizeof s->text) || unended(s->policy, sizeof s->policy) ||
		    unended(s->prompt_text, sizeof s->prompt_text))
			return pcg_fail(err, "pack: a string field without its end");
		n += strlen(s->text) + s->asg_len + (size_t)s->n_args * 26 + strlen(s->prompt_text) +
		     s->prompt_audio_len;
		break;
	}
	case PROTO_RESULT: {
		const proto_result *s = &m->result;
		if (s->n_tokens < 0 || s->n_tokens > PROTO_MAX_APPEND)
			return pcg_fail(err, "pack: %d tokens", s->n_tokens);
		if (s->n_stats < 0 || s->n_stats > PROTO_MAX_STATS)
			return pcg_fail(err, "pack: %d stats", s->n_stats);
		if (unended(s->msg, sizeof s->msg))
			return pcg_fail(err, "pack: a string field without its end");
		n += (size_t)s->n_tokens * 5 + (size_t)s->n_stats * 9;
		break;
	}
	case PROTO_AUDIO:
		if (m->audio.n_tokens < 0 || m->audio.n_tokens > PROTO_MAX_APPEND)
			return pcg_fail(err, "pack: %d tokens", m->audio.n_tokens);
		n += (size_t)m->audio.n_tokens * 5;
		break;
	case PROTO_PCM:
		if (m->pcm.n_samples > PROTO_MAX_MSG / 2)
			return pcg_fail(err, "pack: %zu samples", m->pcm.n_samples);
		n += m->pcm.n_samples * 2;
		break;
	case PROTO_PROGRESS:
		if (m->progress.n_tokens < 0 || m->progress.n_tokens > PROTO_MAX_APPEND)
			return pcg_fail(err, "pack: %d tokens", m->progress.n_tokens);
		if (m->progress.n_samples > PROTO_MAX_MSG / 2)
			return pcg_fail(err, "pack: %zu samples", m->progress.n_samples);
		n += (size_t)m->progress.n_tokens * 5 + m->progress.n_samples * 2;
		break;
	default:
		break;
	}
	*est = n;
	return 0;
}

int proto_pack_buf(const proto_msg *m, proto_buf *b, pcg_err *err)
{
	pack_ctx c = { .b = b, .m = m, .p = &m->probs };
	size_t est = 0;

	if (m->type < PROTO_PROPOSE || m->type > PROTO_LAST_TYPE)
		return pcg_fail(err, "pack: unknown message type %d", (int)m->type);
	if (measure(&c, &est, err) < 0)
		return -1;
	b->len = 0;
	b->oom = 0;
	if (reserve(b, est) == NULL)
		return pcg_fail(err, "pack: out of memory");
	b->len = 0;
	msgpack_packer_init(&c.pk, b, buf_write);
	/* The envelope's three keys and the type's fields, as parse expects. */
	const uint64_t fields = fields_of(m);
	msgpack_pack_map(&c.pk, 3 + (size_t)__builtin_popcountll(fields));
	key(&c.pk, "v");
	msgpack_pack_int(&c.pk, PROTO_VERSION);
	str(&c.pk, "type", proto_type_name(m->type));
	key(&c.pk, "id");
	msgpack_pack_uint64(&c.pk, m->id);
	for (int f = 0; f < F_COUNT; f++)
		if ((fields & B(f)) && pack_field(&c, f, err) < 0)
			return -1;
	if (b->oom)
		return pcg_fail(err, "pack: out of memory");
	return 0;
}

int proto_pack(const proto_msg *m, void **out, size_t *len, pcg_err *err)
{
	proto_buf b = { 0 };

	if (proto_pack_buf(m, &b, err) < 0) {
		proto_buf_free(&b);
		return -1;
	}
	*out = b.data; /* ownership passes to the caller: free() */
	*len = b.len;
	b.data = NULL;
	proto_buf_free(&b);
	return 0;
}

/* ----------------------------------------------------------------- parse */

static int be(const uint8_t *p, int n, uint64_t *v)
{
	*v = 0;
	for (int i = 0; i < n; i++)
		*v = (*v << 8) | p[i];
	return n;
}

/* Walks one msgpack object at *pos, checking that every declared length and
 * count fits in what remains (an element takes at least one byte), that
 * nesting stays within MAX_DEPTH, and that no ext or reserved byte appears. */
static int scan(const uint8_t *p, size_t len, size_t *pos, int depth, pcg_err *err)
{
	uint64_t n = 0, elems = 0;
	uint8_t b;

	if (depth > MAX_DEPTH)
		return pcg_fail(err, "msgpack nested deeper than %d", MAX_DEPTH);
	if (*pos >= len)
		return pcg_fail(err, "msgpack truncated at byte %zu", *pos);
	b = p[(*pos)++];
#define NEED(k) do { if (len - *pos < (size_t)(k)) \
	return pcg_fail(err, "msgpack truncated at byte %zu", *pos); } while (0)
	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
		return 0;
	if (b >= 0x80 && b <= 0x8f)
		elems = 2u * (b & 0x0fu);
	else if (b >= 0x90 && b <= 0x9f)
		elems = b & 0x0fu;
	else if (b >= 0xa0 && b <= 0xbf)
		n = b & 0x1fu;
	else switch (b) {
	case 0xc4: case 0xd9: NEED(1); *pos += be(p + *pos, 1, &n); break;
	case 0xc5: case 0xda: NEED(2); *pos += be(p + *pos, 2, &n); break;
	case 0xc6: case 0xdb: NEED(4); *pos += be(p + *pos, 4, &n); break;
	case 0xca: n = 4; break;
	case 0xcb: n = 8; break;
	case 0xcc: case 0xd0: n = 1; break;
	case 0xcd: case 0xd1: n = 2; break;
	case 0xce: case 0xd2: n = 4; break;
	case 0xcf: case 0xd3: n = 8; break;
	case 0xdc: NEED(2); *pos += be(p + *pos, 2, &elems); break;
	case 0xdd: NEED(4); *pos += be(p + *pos, 4, &elems); break;
	case 0xde: NEED(2); *pos += be(p + *pos, 2, &elems); elems *= 2; break;
	case 0xdf: NEED(4); *pos += be(p + *pos, 4, &elems); elems *= 2; break;
	default:
		return pcg_fail(err, "msgpack type byte 0x%02x at byte %zu not allowed", b, *pos - 1);
	}
	if (n) {
		NEED(n);
		*pos += n;
		return 0;
	}
	if (elems > len - *pos)
		return pcg_fail(err, "msgpack count %llu at byte %zu exceeds the %zu bytes left",
				(unsigned long long)elems, *pos, len - *pos);
	for (uint64_t i = 0; i < elems; i++)
		if (scan(p, len, pos, depth + 1, err) < 0)
			return -1;
	return 0;
#undef NEED
}

static int key_is(const msgpack_object *k, const char *s)
{
	size_t n = strlen(s);
	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
	       memcmp(k->via.str.ptr, s, n) == 0;
}

static int get_int(const msgpack_object *v, const char *name, long long lo, long long hi,
		   long long *out, pcg_err *err)
{
	long long x = 0;

	*out = 0; /* pcg_fail is opaque to the compiler: keep *out defined */
	if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		if (v->via.u64 > (uint64_t)hi)
			return pcg_fail(err, "field '%s': %llu out of range [%lld, %lld]", name,
					(unsigned long long)v->via.u64, lo, hi);
		x = (long long)v->via.u64;
	} else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		x = v->via.i64;
	} else {
		return pcg_fail(err, "field '%s': not an integer", name);
	}
	if (x < lo || x > hi)
		return pcg_fail(err, "field '%s': %lld out of range [%lld, %lld]", name, x, lo, hi);
	*out = x;
	return 0;
}

static int get_u64(const msgpack_object *v, const char *name, uint64_t *out, pcg_err *err)
{
	if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return pcg_fail(err, "field '%s': not a non-negative integer", name);
	*out = v->via.u64;
	return 0;
}

static int get_float(const msgpack_object *v, const char *name, float *out, pcg_err *err)
{
	if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64)
		*out = (float)v->via.f64;
	else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		*out = (float)v->via.u64;
	else
		return pcg_fail(err, "field '%s': not a number", name);
	return 0;
}

static int get_str(const msgpack_object *v, const char *name, char *out, size_t cap,
		   pcg_err *err)
{
	if (v->type != MSGPACK_OBJECT_STR)
		return pcg_fail(err, "field '%s': not a string", name);
	if (v->via.str.size >= cap)
		return pcg_fail(err, "field '%s': longer than %zu bytes", name, cap - 1);
	memcpy(out, v->via.str.ptr, v->via.str.size);
	out[v->via.str.size] = '\0';
	return 0;
}

static int get_ids(const msgpack_object *v, const char *name, int32_t *out, int cap, int *n,
		   pcg_err *err)
{
	if (v->type != MSGPACK_OBJECT_ARRAY)
		return pcg_fail(err, "field '%s': not an array", name);
	if (v->via.array.size > (uint32_t)cap)
		return pcg_fail(err, "field '%s': %u ids, at most %d", name, v->via.array.size, cap);
	for (uint32_t i = 0; i < v->via.array.size; i++) {
		long long x;
		if (get_int(&v->via.array.ptr[i], name, 0, INT32_MAX, &x, err) < 0)
			return -1;
		out[i] = (int32_t)x;
	}
	*n = (int)v->via.array.size;
	return 0;
}

static int get_rows(const msgpack_object *v, llama_rows *rows, pcg_err *err)
{
	if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > LLAMA_MAX_RANGES)
		return pcg_fail(err, "field 'rows': not an array of at most %d ranges",
				LLAMA_MAX_RANGES);
	rows->n = (int)v->via.array.size;
	for (int i = 0; i < rows->n; i++) {
		const msgpack_object *r = &v->via.array.ptr[i];
		long long a, b;
		if (r->type != MSGPACK_OBJECT_ARRAY || r->via.array.size != 2)
			return pcg_fail(err, "field 'rows[%d]': not [begin, end]", i);
		if (get_int(&r->via.array.ptr[0], "rows", 0, INT32_MAX, &a, err) < 0 ||
		    get_int(&r->via.array.ptr[1], "rows", 0, INT32_MAX, &b, err) < 0)
			return -1;
		if (a >= b)
			return pcg_fail(err, "field 'rows[%d]': [%lld, %lld) is empty", i, a, b);
		rows->begin[i] = (int)a;
		rows->end[i] = (int)b;
	}
	return 0;
}

/* get_int into an int. */
static int get_i(const msgpack_object *v, const char *name, long long lo, long long hi, int *out,
		 pcg_err *err)
{
	long long x;

	if (get_int(v, name, lo, hi, &x, err) < 0)
		return -1;
	*out = (int)x;
	return 0;
}

static int get_bool(const msgpack_object *v, const char *name, int *out, pcg_err *err)
{
	if (v->type != MSGPACK_OBJECT_BOOLEAN)
		return pcg_fail(err, "field '%s': not a boolean", name);
	*out = v->via.boolean;
	return 0;
}

/* A bin field, pointing into the message (parse checked that it lies
 * there). */
static int get_bin(const msgpack_object *v, const char *name, const void **out, size_t *size,
		   pcg_err *err)
{
	if (v->type != MSGPACK_OBJECT_BIN)
		return pcg_fail(err, "field '%s': not bin", name);
	*out = v->via.bin.ptr;
	*size = v->via.bin.size;
	return 0;
}

static int get_samples(const msgpack_object *v, const void **out, size_t *n, pcg_err *err)
{
	if (v->type != MSGPACK_OBJECT_BIN || v->via.bin.size % 2)
		return pcg_fail(err, "field 'pcm': not bin of 16-bit samples");
	*out = v->via.bin.ptr;
	*n = v->via.bin.size / 2;
	return 0;
}

static int get_stats(const msgpack_object *v, double *stats, int *n, pcg_err *err)
{
	if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > PROTO_MAX_STATS)
		return pcg_fail(err, "field 'stats': not an array of at most %d numbers",
				PROTO_MAX_STATS);
	for (uint32_t i = 0; i < v->via.array.size; i++) {
		const msgpack_object *e = &v->via.array.ptr[i];
		if (e->type == MSGPACK_OBJECT_FLOAT32 || e->type == MSGPACK_OBJECT_FLOAT64)
			stats[i] = e->via.f64;
		else if (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			stats[i] = (double)e->via.u64;
		else
			return pcg_fail(err, "field 'stats': element %u not a number", i);
	}
	*n = (int)v->via.array.size;
	return 0;
}

/* temp, top_k or top_p */
static int get_samp(const msgpack_object *v, int f, pcg_sampling *s, pcg_err *err)
{
	if (f == F_TOPK)
		return get_i(v, "top_k", 0, INT32_MAX, &s->top_k, err);
	if (f == F_TEMP)
		return get_float(v, "temp", &s->temperature, err);
	return get_float(v, "top_p", &s->top_p, err);
}

/* chunk, left, right or first */
static int get_chunking(const msgpack_object *v, int f, int *chunk, int *left, int *right,
			int *first, pcg_err *err)
{
	return get_i(v, fnames[f], 0, PROTO_MAX_APPEND,
		     f == F_CHUNK ? chunk : f == F_LEFT ? left : f == F_RIGHT ? right : first, err);
}

/* Field f of each type, checked against the schema. */

static int get_model(proto_model_req *r, int f, const msgpack_object *v, pcg_err *err)
{
	switch (f) {
	case F_SESSION: return get_u64(v, "session", &r->session, err);
	case F_POS: return get_i(v, "pos", 0, INT32_MAX, &r->pos, err);
	case F_APPEND: return get_ids(v, "append", r->append, PROTO_MAX_APPEND, &r->n_append, err);
	case F_N: return get_i(v, "n", 0, PROTO_MAX_N, &r->n, err);
	case F_TEMP: case F_TOPK: case F_TOPP: return get_samp(v, f, &r->samp, err);
	case F_ROWS: return get_rows(v, &r->rows, err);
	case F_F16: return get_bool(v, "f16", &r->f16, err);
	}
	return pcg_fail(err, "field %d: unknown", f);
}

static int get_propose(proto_propose *p, int f, const msgpack_object *v, pcg_err *err)
{
	if (f == F_SEED)
		return get_u64(v, "seed", &p->seed, err);
	if (f == F_DRAWS) {
		if (get_u64(v, "draws", &p->draws, err) < 0)
			return -1;
		if (p->draws == 0)
			return pcg_fail(err, "field 'draws': 0 (the first stream is 1 or more; "
					"leave the field out for one stream of draws)");
		return 0;
	}
	if (f == F_STOP) {
		long long t;
		if (get_int(v, "stop", 0, INT32_MAX, &t, err) < 0)
			return -1;
		p->stop = 1;
		p->stop_id = (int32_t)t;
		return 0;
	}
	if (f != F_FORCED)
		return get_model(&p->req, f, v, err);
	if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > PROTO_MAX_N)
		return pcg_fail(err, "field 'forced': not an array of at most %d pairs",
				PROTO_MAX_N);
	for (uint32_t i = 0; i < v->via.array.size; i++) {
		const msgpack_object *e = &v->via.array.ptr[i];
		long long at, tok;
		if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2)
			return pcg_fail(err, "field 'forced': entry %u is not [at, token]", i);
		if (get_int(&e->via.array.ptr[0], "forced", 1, PROTO_MAX_N - 1, &at, err) < 0 ||
		    get_int(&e->via.array.ptr[1], "forced", 0, INT32_MAX, &tok, err) < 0)
			return -1;
		p->forced_at[i] = (int32_t)at;
		p->forced[i] = (int32_t)tok;
	}
	p->n_forced = (int)v->via.array.size;
	return 0;
}

static int get_probs(proto_probs *p, int f, const msgpack_object *v, pcg_err *err)
{
	size_t size;

	switch (f) {
	case F_N: return get_i(v, "n", 0, PROTO_MAX_VEC, &p->n_vec, err);
	case F_WIDTH: return get_i(v, "width", 1, 1 << 24, &p->width, err);
	case F_F16: return get_bool(v, "f16", &p->f16, err);
	case F_X: return get_ids(v, "x", p->x, PROTO_MAX_N, &p->n_x, err);
	case F_STATS: return get_stats(v, p->stats, &p->n_stats, err);
	case F_P: return get_bin(v, "p", &p->values, &size, err); /* checked by check_probs */
	case F_PAD:
		if (v->type != MSGPACK_OBJECT_BIN || v->via.bin.size > 7)
			return pcg_fail(err, "field 'pad': not bin of at most 7 bytes");
		return 0;
	case F_NNZ:
		if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > PROTO_MAX_VEC)
			return pcg_fail(err, "field 'nnz': not an array of at most %d counts",
					PROTO_MAX_VEC);
		for (uint32_t i = 0; i < v->via.array.size; i++)
			if (get_i(&v->via.array.ptr[i], "nnz", 0, 1 << 24, &p->nnz[i], err) < 0)
				return -1;
		p->n_nnz = (int)v->via.array.size;
		return 0;
	}
	return pcg_fail(err, "field %d: unknown", f);
}

static int get_args(proto_synth *s, const msgpack_object *v, pcg_err *err)
{
	if (v->type != MSGPACK_OBJECT_MAP || v->via.map.size > PROTO_MAX_ARGS)
		return pcg_fail(err, "field 'args': not a map of at most %d parameters",
				PROTO_MAX_ARGS);
	for (uint32_t i = 0; i < v->via.map.size; i++) {
		const msgpack_object_kv *kv = &v->via.map.ptr[i];
		const msgpack_object *x = &kv->val;
		if (get_str(&kv->key, "args", s->arg_name[i], sizeof s->arg_name[i], err) < 0)
			return -1;
		if (x->type == MSGPACK_OBJECT_FLOAT32 || x->type == MSGPACK_OBJECT_FLOAT64)
			s->arg_val[i] = x->via.f64;
		else if (x->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			s->arg_val[i] = (double)x->via.u64;
		else
			return pcg_fail(err, "field 'args': '%s' is not a number", s->arg_name[i]);
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(s->arg_name[j], s->arg_name[i]))
				return pcg_fail(err, "field 'args': '%s' twice", s->arg_name[i]);
	}
	s->n_args = (int)v->via.map.size;
	return 0;
}

static int get_synth(proto_synth *s, int f, const msgpack_object *v, pcg_err *err)
{
	switch (f) {
	case F_TEXT: return get_str(v, "text", s->text, sizeof s->text, err);
	case F_POLICY: return get_str(v, "policy", s->policy, sizeof s->policy, err);
	case F_BETA: return get_float(v, "beta", &s->beta, err);
	case F_N: return get_i(v, "n", 0, PROTO_MAX_LOOKAHEAD, &s->lookahead, err);
	case F_TEMP: case F_TOPK: case F_TOPP: return get_samp(v, f, &s->samp, err);
	case F_SEED: return get_u64(v, "seed", &s->seed, err);
	case F_MAXTOK: return get_i(v, "max_tokens", 1, PROTO_MAX_APPEND, &s->max_tokens, err);
	case F_F16: return get_bool(v, "f16", &s->f16, err);
	case F_ASG: return get_bin(v, "asg", &s->asg, &s->asg_len, err);
	case F_SPEAKER: return get_i(v, "speaker", 0, 65535, &s->speaker, err);
	case F_VITERBI_K: return get_i(v, "viterbi_k", 0, 1 << 20, &s->viterbi_k, err);
	case F_STREAM: return get_bool(v, "stream", &s->stream, err);
	case F_AUDIO: return get_bool(v, "audio", &s->audio, err);
	case F_CHUNK: case F_LEFT: case F_RIGHT: case F_FIRST:
		return get_chunking(v, f, &s->chunk, &s->left, &s->right, &s->first, err);
	case F_ARGS: return get_args(s, v, err);
	case F_PROMPT_TEXT:
		return get_str(v, "prompt_text", s->prompt_text, sizeof s->prompt_text, err);
	case F_PROMPT_AUDIO:
		return get_bin(v, "prompt_audio", &s->prompt_audio, &s->prompt_audio_len, err);
	case F_SEQUENTIAL: return get_bool(v, "sequential", &s->sequential, err);
	}
	return pcg_fail(err, "field %d: unknown", f);
}

static int get_result(proto_result *r, int f, const msgpack_object *v, pcg_err *err)
{
	if (f == F_TOKENS)
		return get_ids(v, "tokens", r->tokens, PROTO_MAX_APPEND, &r->n_tokens, err);
	if (f == F_STATS)
		return get_stats(v, r->stats, &r->n_stats, err);
	return get_str(v, "msg", r->msg, sizeof r->msg, err);
}

static int get_audio(proto_audio *a, int f, const msgpack_object *v, pcg_err *err)
{
	switch (f) {
	case F_SESSION: return get_u64(v, "session", &a->session, err);
	case F_TOKENS: return get_ids(v, "tokens", a->tokens, PROTO_MAX_APPEND, &a->n_tokens, err);
	case F_FINAL: return get_bool(v, "final", &a->final, err);
	case F_CHUNK: case F_LEFT: case F_RIGHT: case F_FIRST:
		return get_chunking(v, f, &a->chunk, &a->left, &a->right, &a->first, err);
	}
	return pcg_fail(err, "field %d: unknown", f);
}

static int get_progress(proto_progress *p, int f, const msgpack_object *v, pcg_err *err)
{
	switch (f) {
	case F_QUEUE: return get_i(v, "queue", 0, INT32_MAX, &p->queue, err);
	case F_POS: return get_i(v, "pos", 0, INT32_MAX, &p->pos, err);
	case F_TOKENS: return get_ids(v, "tokens", p->tokens, PROTO_MAX_APPEND, &p->n_tokens, err);
	case F_RATE: return get_i(v, "rate", 0, 1 << 20, &p->rate, err);
	case F_PCM: return get_samples(v, &p->samples, &p->n_samples, err);
	}
	return pcg_fail(err, "field %d: unknown", f);
}

/* Field f of m (one of its type's schema). */
static int field(proto_msg *m, int f, const msgpack_object *v, pcg_err *err)
{
	switch (m->type) {
	case PROTO_PROPOSE: return get_propose(&m->propose, f, v, err);
	case PROTO_SCORE:
		if (f == F_HEADS)
			return get_i(v, "heads", 0, PROTO_MAX_HEADS, &m->score.heads, err);
		return get_model(&m->score.req, f, v, err);
	case PROTO_DROP: return get_u64(v, "session", &m->drop.session, err);
	case PROTO_CANCEL: return get_u64(v, "session", &m->cancel.session, err);
	case PROTO_PROBS: return get_probs(&m->probs, f, v, err);
	case PROTO_PONG: return get_str(v, "msg", m->pong.msg, sizeof m->pong.msg, err);
	case PROTO_ERROR:
		if (f == F_CODE)
			return get_str(v, "code", m->error.code, sizeof m->error.code, err);
		return get_str(v, "msg", m->error.msg, sizeof m->error.msg, err);
	case PROTO_SYNTH: return get_synth(&m->synth, f, v, err);
	case PROTO_RESULT: return get_result(&m->result, f, v, err);
	case PROTO_AUDIO: return get_audio(&m->audio, f, v, err);
	case PROTO_PCM:
		if (f == F_RATE)
			return get_i(v, "rate", 0, 1 << 20, &m->pcm.rate, err);
		return get_samples(v, &m->pcm.samples, &m->pcm.n_samples, err);
	case PROTO_PROGRESS: return get_progress(&m->progress, f, v, err);
	case PROTO_PING: case PROTO_OK: break;
	}
	return pcg_fail(err, "field %d: unknown", f);
}

/* A probs reply's layout: nnz per vector, p's size, and the sparse ids
 * (ascending, below width, so that proto_vector may trust them); fills
 * where each vector lies. */
static int check_probs(proto_probs *m, size_t pbytes, pcg_err *err)
{
	const size_t es = m->f16 ? 2 : 4;
	size_t n_vals = 0, n_ids = 0;

	if (m->n_nnz != m->n_vec)
		return pcg_fail(err, "probs: field 'nnz': %d counts for %d vectors", m->n_nnz,
				m->n_vec);
	for (int i = 0; i < m->n_vec; i++) {
		if (m->nnz[i] > m->width)
			return pcg_fail(err, "probs: field 'nnz': %d entries in a vector of %d",
					m->nnz[i], m->width);
		m->voff[i] = n_vals;
		m->ioff[i] = n_ids;
		n_vals += (size_t)m->nnz[i];
		if (m->nnz[i] < m->width) {
			n_ids += (size_t)m->nnz[i];
			m->sparse = 1;
		}
	}
	size_t vbytes = n_vals * es, gap = n_ids ? (4 - vbytes % 4) % 4 : 0;
	if (pbytes != vbytes + gap + 4 * n_ids)
		return pcg_fail(err, "probs: field 'p': %zu bytes, want %zu values of %zu bytes "
				"and %zu ids", pbytes, n_vals, es, n_ids);
	const unsigned char *ids = (const unsigned char *)m->values + vbytes + gap;
	m->ids = ids;
	for (int i = 0; i < m->n_vec; i++) {
		if (m->nnz[i] == m->width)
			continue;
		uint32_t prev = 0;
		for (int k = 0; k < m->nnz[i]; k++) {
			uint32_t id;
			memcpy(&id, ids + 4 * (m->ioff[i] + (size_t)k), 4);
			if (id >= (uint32_t)m->width || (k > 0 && id <= prev))
				return pcg_fail(err, "probs: field 'p': vector %d: id %u after %u "
						"(ascending, below %d)", i, id, prev, m->width);
			prev = id;
		}
	}
	return 0;
}

/* What no single field can say: sampling in range, an audio's first
 * within its chunk, score's n within append, propose's forced tokens in order and its append not empty, rows
 * not empty, a probs reply's layout, a synth as proto_synth_check has it
 * (the one check of a synth, which its clients make too). */
static int check(proto_msg *m, const char *tname, size_t pbytes, pcg_err *err)
{
	const proto_model_req *r = proto_model(m);

	if (r != NULL && pcg_sampling_check(&r->samp, err) < 0)
		return -1;
	if (m->type == PROTO_SYNTH) {
		proto_synth_field f;
		char what[48];
		if (proto_synth_check(&m->synth, &f, err) < 0) {
			snprintf(what, sizeof what, "synth: field '%s'", proto_synth_field_name(f));
			pcg_err_prefix(err, what);
			return -1;
		}
	}
	if (m->type == PROTO_AUDIO && pcg_chunk_check(m->audio.chunk, m->audio.first, err) < 0) {
		pcg_err_prefix(err, "audio: field 'first'");
		return -1;
	}
	if (m->type == PROTO_SCORE && (r->n < 1 || r->n > r->n_append))
		return pcg_fail(err, "score: field 'n': %d positions, append has %d", r->n,
				r->n_append);
	if (m->type == PROTO_PROPOSE) {
		const int32_t *at = m->propose.forced_at;
		for (int i = 0; i < m->propose.n_forced; i++)
			if (at[i] >= r->n || (i > 0 && at[i] < at[i - 1]))
				return pcg_fail(err, "propose: field 'forced': entry %d goes before "
						"draft %d of %d (want 1 to n - 1, in order)", i, at[i],
						r->n);
		if (r->n_append < 1)
			return pcg_fail(err, "propose: field 'append': empty (the last committed "
					"token is needed)");
	}
	if (r != NULL && r->rows.n < 1)
		return pcg_fail(err, "%s: field 'rows': empty", tname);
	if (m->type == PROTO_PROBS)
		return check_probs(&m->probs, pbytes, err);
	return 0;
}

int proto_parse(const void *buf, size_t len, proto_msg *m, pcg_err *err)
{
	msgpack_unpacked u;
	size_t off = 0, pbytes = 0;
	uint64_t seen = 0;
	int rc = -1, have_v = 0, have_type = 0, have_id = 0;
	long long version = 0;
	char tname[16];

	m->type = 0;
	m->id = 0;
	m->len = len;
	if (len > PROTO_MAX_MSG)
		return pcg_fail(err, "message of %zu bytes exceeds %u", len, PROTO_MAX_MSG);
	if (scan(buf, len, &off, 0, err) < 0)
		return -1;
	if (off != len)
		return pcg_fail(err, "%zu bytes after the message", len - off);
	msgpack_unpacked_init(&u);
	off = 0;
	if (msgpack_unpack_next(&u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
		pcg_fail(err, "msgpack: cannot unpack");
		goto out;
	}
	const msgpack_object *o = &u.data;
	if (o->type != MSGPACK_OBJECT_MAP) {
		pcg_fail(err, "message is not a map");
		goto out;
	}
	/* Envelope first, so that field errors can name the type and the
	 * error reply can carry the id. */
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *k = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
		long long x;
		if (key_is(k, "v")) {
			if (get_int(v, "v", 0, 255, &x, err) < 0)
				goto out;
			version = x;
			have_v = 1;
		} else if (key_is(k, "id")) {
			if (get_u64(v, "id", &m->id, err) < 0)
				goto out;
			have_id = 1;
		} else if (key_is(k, "type")) {
			if (get_str(v, "type", tname, sizeof tname, err) < 0)
				goto out;
			have_type = 1;
		}
	}
	/* After the whole envelope: the error reply can carry the id. */
	if (have_v && version != PROTO_VERSION) {
		pcg_fail(err, "field 'v': the peer speaks protocol version %lld, this side version "
			 "%d: run programs of one release", version, PROTO_VERSION);
		goto out;
	}
	if (!have_v || !have_type || !have_id) {
		pcg_fail(err, "field '%s': missing", !have_v ? "v" : !have_type ? "type" : "id");
		goto out;
	}
	for (int t = PROTO_PROPOSE; t <= PROTO_LAST_TYPE; t++)
		if (!strcmp(tname, type_names[t]))
			proto_init(m, (proto_type)t, m->id);
	m->len = len;
	if (m->type == 0) {
		pcg_fail(err, "field 'type': unknown message type '%s'", tname);
		goto out;
	}
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *k = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
		int f;
		if (key_is(k, "v") || key_is(k, "id") || key_is(k, "type"))
			continue;
		for (f = 0; f < F_COUNT; f++)
			if (key_is(k, fnames[f]))
				break;
		if (f == F_COUNT || !((schema[m->type] | optional[m->type]) & B(f))) {
			char kn[32] = "?";
			if (k->type == MSGPACK_OBJECT_STR)
				snprintf(kn, sizeof kn, "%.*s", (int)(k->via.str.size < 24 ? k->via.str.size : 24),
					 k->via.str.ptr);
			pcg_fail(err, "%s: unexpected field '%s'", tname, kn);
			goto out;
		}
		if (seen & B(f)) {
			pcg_fail(err, "%s: field '%s' twice", tname, fnames[f]);
			goto out;
		}
		seen |= B(f);
		/* msgpack-c's unpacker points bin objects into the input
		 * buffer; check, so that values, samples and asg stay valid
		 * after the unpacked zone is gone. */
		if (v->type == MSGPACK_OBJECT_BIN &&
		    ((const char *)v->via.bin.ptr < (const char *)buf ||
		     (const char *)v->via.bin.ptr + v->via.bin.size > (const char *)buf + len)) {
			pcg_fail(err, "field '%s': not in the message buffer", fnames[f]);
			goto out;
		}
		if (field(m, f, v, err) < 0)
			goto out;
		if (f == F_P)
			pbytes = v->via.bin.size;
	}
	if ((seen & schema[m->type]) != schema[m->type]) {
		for (int f = 0; f < F_COUNT; f++)
			if ((schema[m->type] & B(f)) && !(seen & B(f))) {
				pcg_fail(err, "%s: field '%s' missing", tname, fnames[f]);
				goto out;
			}
	}
	if (check(m, tname, pbytes, err) < 0)
		goto out;
	rc = 0;
out:
	msgpack_unpacked_destroy(&u);
	return rc;
}

void proto_vector(const proto_probs *m, int i, float *out)
{
	const size_t es = m->f16 ? 2 : 4;
	const unsigned char *v = (const unsigned char *)m->values + m->voff[i] * es;
	const pcg_dtype t = m->f16 ? PCG_F16 : PCG_F32;

	if (m->nnz[i] == m->width) {
		pcg_to_f32(out, v, t, (size_t)m->width);
		return;
	}
	const unsigned char *ids = (const unsigned char *)m->ids + 4 * m->ioff[i];
	float val[256];
	memset(out, 0, (size_t)m->width * sizeof *out);
	for (int k = 0; k < m->nnz[i]; k += 256) {
		int n = m->nnz[i] - k < 256 ? m->nnz[i] - k : 256;
		pcg_to_f32(val, v + (size_t)k * es, t, (size_t)n);
		for (int j = 0; j < n; j++) {
			uint32_t id;
			memcpy(&id, ids + 4 * ((size_t)k + j), 4);
			out[id] = val[j];
		}
	}
}
