/* proto.c: packing and strict parsing of the pipeline's msgpack messages
 * (see proto.h for the schemas and man/pcg-protocol.7 for the wire format). */
#include "proto.h"

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

void proto_error(proto_msg *m, uint64_t id, const char *code, const char *fmt, ...)
{
	va_list ap;

	m->type = PROTO_ERROR;
	m->id = id;
	snprintf(m->code, sizeof m->code, "%s", code);
	va_start(ap, fmt);
	vsnprintf(m->msg, sizeof m->msg, fmt, ap);
	va_end(ap);
}

/* Which fields each type carries: a bit per field, in the order of fnames. */
enum { F_SESSION, F_POS, F_APPEND, F_N, F_TEMP, F_TOPK, F_TOPP, F_ROWS, F_F16, F_SEED, F_X,
       F_WIDTH, F_P, F_CODE, F_MSG, F_TEXT, F_POLICY, F_BETA, F_MAXTOK, F_STATS,
       F_FINAL, F_TOKENS, F_ASG, F_SPEAKER, F_HEADS, F_VITERBI_K, F_NNZ, F_PAD, F_STREAM,
       F_AUDIO, F_CHUNK, F_LEFT, F_RIGHT, F_QUEUE, F_RATE, F_PCM, F_FORCED, F_ARGS, F_COUNT };
static const char *fnames[F_COUNT] = { "session", "pos", "append", "n", "temp", "top_k",
	"top_p", "rows", "f16", "seed", "x", "width", "p", "code", "msg", "text", "policy",
	"beta", "max_tokens", "stats", "final", "tokens", "asg", "speaker", "heads",
	"viterbi_k", "nnz", "pad", "stream", "audio", "chunk", "left", "right", "queue", "rate",
	"pcm", "forced", "args" };
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
	[PROTO_PROPOSE] = B(F_FORCED),
	[PROTO_SYNTH] = B(F_ARGS),
	[PROTO_LAST_TYPE] = 0,
};

/* The fields m carries: its schema's, and its optional ones that are set. */
static uint64_t fields_of(const proto_msg *m)
{
	uint64_t f = schema[m->type];

	if ((optional[m->type] & B(F_FORCED)) && m->n_forced > 0)
		f |= B(F_FORCED);
	if ((optional[m->type] & B(F_ARGS)) && m->n_args > 0)
		f |= B(F_ARGS);
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
	const proto_msg *m = c->m;
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
		int k = gather((const float *)m->probs + (size_t)i * W, m->width, max,
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

static void str(msgpack_packer *pk, const char *k, const char *v)
{
	key(pk, k);
	msgpack_pack_str(pk, strlen(v));
	msgpack_pack_str_body(pk, v, strlen(v));
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
	const proto_msg *m = c->m;
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
		put_values(d, n == W ? (const float *)m->probs + (size_t)i * W : sv, n, m->f16);
		if (n != W)
			sv += n;
		d += n * es;
	}
	memset(d, 0, gap);
	if (c->n_ids)
		memcpy(d + gap, b->ids, 4 * c->n_ids);
	return 0;
}

/* One field of m, key and value, as parse reads it back. */
static int pack_field(pack_ctx *c, int f, pcg_err *err)
{
	msgpack_packer *pk = &c->pk;
	const proto_msg *m = c->m;

	if (f == F_P)
		return pack_probs(c, err);
	if (f == F_PAD)
		return 0; /* with p */
	key(pk, fnames[f]);
	switch (f) {
	case F_SESSION: msgpack_pack_uint64(pk, m->session); break;
	case F_SEED: msgpack_pack_uint64(pk, m->seed); break;
	case F_POS: msgpack_pack_int(pk, m->pos); break;
	case F_N: msgpack_pack_int(pk, m->type == PROTO_PROBS ? m->n_vec : m->n); break;
	case F_WIDTH: msgpack_pack_int(pk, m->width); break;
	case F_TOPK: msgpack_pack_int(pk, m->samp.top_k); break;
	case F_TEMP: msgpack_pack_float(pk, m->samp.temperature); break;
	case F_TOPP: msgpack_pack_float(pk, m->samp.top_p); break;
	case F_BETA: msgpack_pack_float(pk, m->beta); break;
	case F_MAXTOK: msgpack_pack_int(pk, m->max_tokens); break;
	case F_SPEAKER: msgpack_pack_int(pk, m->speaker); break;
	case F_HEADS: msgpack_pack_int(pk, m->heads); break;
	case F_VITERBI_K: msgpack_pack_int(pk, m->viterbi_k); break;
	case F_F16: boolean(pk, m->f16); break;
	case F_FINAL: boolean(pk, m->final); break;
	case F_STREAM: boolean(pk, m->stream); break;
	case F_AUDIO: boolean(pk, m->audio); break;
	case F_CHUNK: msgpack_pack_int(pk, m->chunk); break;
	case F_LEFT: msgpack_pack_int(pk, m->left); break;
	case F_RIGHT: msgpack_pack_int(pk, m->right); break;
	case F_QUEUE: msgpack_pack_int(pk, m->queue); break;
	case F_RATE: msgpack_pack_int(pk, m->rate); break;
	case F_PCM:
		msgpack_pack_bin(pk, m->n_pcm * 2);
		msgpack_pack_bin_body(pk, m->pcm, m->n_pcm * 2);
		break;
	case F_APPEND: case F_TOKENS:
		msgpack_pack_array(pk, (size_t)m->n_append);
		for (int i = 0; i < m->n_append; i++)
			msgpack_pack_int32(pk, m->append[i]);
		break;
	case F_X:
		msgpack_pack_array(pk, (size_t)m->n_x);
		for (int i = 0; i < m->n_x; i++)
			msgpack_pack_int32(pk, m->x[i]);
		break;
	case F_NNZ:
		msgpack_pack_array(pk, (size_t)m->n_vec);
		for (int i = 0; i < m->n_vec; i++)
			msgpack_pack_int(pk, c->nnz[i]);
		break;
	case F_FORCED:
		msgpack_pack_array(pk, (size_t)m->n_forced);
		for (int i = 0; i < m->n_forced; i++) {
			msgpack_pack_array(pk, 2);
			msgpack_pack_int(pk, m->forced_at[i]);
			msgpack_pack_int32(pk, m->forced[i]);
		}
		break;
	case F_ARGS:
		msgpack_pack_map(pk, (size_t)m->n_args);
		for (int i = 0; i < m->n_args; i++) {
			const size_t len = strlen(m->arg_name[i]);
			msgpack_pack_str(pk, len);
			msgpack_pack_str_body(pk, m->arg_name[i], len);
			msgpack_pack_double(pk, m->arg_val[i]);
		}
		break;
	case F_STATS:
		msgpack_pack_array(pk, (size_t)m->n_stats);
		for (int i = 0; i < m->n_stats; i++)
			msgpack_pack_double(pk, m->stats[i]);
		break;
	case F_ROWS:
		msgpack_pack_array(pk, (size_t)m->rows.n);
		for (int i = 0; i < m->rows.n; i++) {
			msgpack_pack_array(pk, 2);
			msgpack_pack_int(pk, m->rows.begin[i]);
			msgpack_pack_int(pk, m->rows.end[i]);
		}
		break;
	case F_CODE: case F_MSG: case F_TEXT: case F_POLICY: {
		const char *v = f == F_CODE ? m->code : f == F_MSG ? m->msg : f == F_TEXT ? m->text
			: m->policy;
		msgpack_pack_str(pk, strlen(v));
		msgpack_pack_str_body(pk, v, strlen(v));
		break;
	}
	case F_ASG:
		msgpack_pack_bin(pk, m->asg_len);
		msgpack_pack_bin_body(pk, m->asg, m->asg_len);
		break;
	}
	return 0;
}

int proto_pack_buf(const proto_msg *m, proto_buf *b, pcg_err *err)
{
	pack_ctx c = { .b = b, .m = m };

	if (m->type < PROTO_PROPOSE || m->type > PROTO_LAST_TYPE)
		return pcg_fail(err, "pack: unknown message type %d", (int)m->type);
	if (m->type == PROTO_PROBS &&
	    (m->n_vec < 0 || m->n_vec > PROTO_MAX_VEC || m->width < 1))
		return pcg_fail(err, "pack: %d vectors of width %d", m->n_vec, m->width);
	/* Only the fields of the type are read: a caller may leave the others
	 * as they were (a reused message), and they must not size or fill
	 * anything. */
	const uint64_t sc = schema[m->type];
	const int has_append = (sc & (B(F_APPEND) | B(F_TOKENS))) != 0;
	if (has_append && (m->n_append < 0 || m->n_append > PROTO_MAX_APPEND))
		return pcg_fail(err, "pack: %d tokens", m->n_append);
	if ((sc & B(F_STATS)) && (m->n_stats < 0 || m->n_stats > PROTO_MAX_STATS))
		return pcg_fail(err, "pack: %d stats", m->n_stats);
	if ((optional[m->type] & B(F_FORCED)) && (m->n_forced < 0 || m->n_forced > PROTO_MAX_N))
		return pcg_fail(err, "pack: %d forced tokens", m->n_forced);
	if ((optional[m->type] & B(F_ARGS)) && (m->n_args < 0 || m->n_args > PROTO_MAX_ARGS))
		return pcg_fail(err, "pack: %d policy arguments", m->n_args);
	for (int i = 0; (fields_of(m) & B(F_ARGS)) && i < m->n_args; i++)
		if (strnlen(m->arg_name[i], sizeof m->arg_name[i]) == sizeof m->arg_name[i])
			return pcg_fail(err, "pack: a string field without its end");
	if ((sc & B(F_X)) && (m->n_x < 0 || m->n_x > PROTO_MAX_N))
		return pcg_fail(err, "pack: %d drafted tokens", m->n_x);
	if ((sc & B(F_ROWS)) && (m->rows.n < 0 || m->rows.n > LLAMA_MAX_RANGES))
		return pcg_fail(err, "pack: %d row ranges", m->rows.n);
	if ((sc & B(F_PCM)) && m->n_pcm > PROTO_MAX_MSG / 2)
		return pcg_fail(err, "pack: %zu samples", m->n_pcm);
	if ((sc & B(F_ASG)) && m->asg_len > PROTO_MAX_MSG)
		return pcg_fail(err, "pack: an ASG of %zu bytes", m->asg_len);
	if (((sc & B(F_TEXT)) && strnlen(m->text, sizeof m->text) == sizeof m->text) ||
	    ((sc & B(F_POLICY)) && strnlen(m->policy, sizeof m->policy) == sizeof m->policy) ||
	    ((sc & B(F_CODE)) && strnlen(m->code, sizeof m->code) == sizeof m->code) ||
	    ((sc & B(F_MSG)) && strnlen(m->msg, sizeof m->msg) == sizeof m->msg))
		return pcg_fail(err, "pack: a string field without its end");
	if (m->type == PROTO_PROBS && plan_probs(&c, err) < 0)
		return -1;
	/* Sized once: a probability payload of a megabyte would otherwise be
	 * copied by every doubling of the buffer. */
	size_t est = 1024 + (has_append ? (size_t)m->n_append * 5 : 0) +
		     ((sc & B(F_STATS)) ? (size_t)m->n_stats * 9 : 0) +
		     ((sc & B(F_TEXT)) ? strlen(m->text) : 0) +
		     ((sc & B(F_ASG)) ? m->asg_len : 0) + ((sc & B(F_PCM)) ? m->n_pcm * 2 : 0) +
		     ((fields_of(m) & B(F_FORCED)) ? (size_t)m->n_forced * 12 : 0) +
		     ((fields_of(m) & B(F_ARGS)) ? (size_t)m->n_args * 26 : 0) +
		     (m->type == PROTO_PROBS ? (size_t)m->n_vec * 5 + c.n_vals * (m->f16 ? 2 : 4) +
						       4 * c.n_ids : 0);
	b->len = 0;
	b->oom = 0;
	if (reserve(b, est) == NULL)
		return pcg_fail(err, "pack: out of memory");
	b->len = 0;
	msgpack_packer_init(&c.pk, b, buf_write);
	/* The envelope's three keys and the schema's fields, as parse expects. */
	msgpack_pack_map(&c.pk, 3 + (size_t)__builtin_popcountll(fields_of(m)));
	key(&c.pk, "v");
	msgpack_pack_int(&c.pk, PROTO_VERSION);
	str(&c.pk, "type", proto_type_name(m->type));
	key(&c.pk, "id");
	msgpack_pack_uint64(&c.pk, m->id);
	for (int f = 0; f < F_COUNT; f++)
		if ((fields_of(m) & B(f)) && pack_field(&c, f, err) < 0)
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

static int field(proto_msg *m, int f, const msgpack_object *v, const void *buf, size_t len,
		 pcg_err *err)
{
	long long x;
	int b;

	switch (f) {
	case F_SESSION: return get_u64(v, "session", &m->session, err);
	case F_SEED: return get_u64(v, "seed", &m->seed, err);
	case F_POS:
		if (get_int(v, "pos", 0, INT32_MAX, &x, err) < 0)
			return -1;
		m->pos = (int)x;
		return 0;
	case F_N:
		if (get_int(v, "n", 0, m->type == PROTO_PROBS ? PROTO_MAX_VEC : PROTO_MAX_N, &x,
			    err) < 0)
			return -1;
		if (m->type == PROTO_PROBS)
			m->n_vec = (int)x;
		else
			m->n = (int)x;
		return 0;
	case F_WIDTH:
		if (get_int(v, "width", 1, 1 << 24, &x, err) < 0)
			return -1;
		m->width = (int)x;
		return 0;
	case F_TOPK:
		if (get_int(v, "top_k", 0, INT32_MAX, &x, err) < 0)
			return -1;
		m->samp.top_k = (int)x;
		return 0;
	case F_TEMP: return get_float(v, "temp", &m->samp.temperature, err);
	case F_TOPP: return get_float(v, "top_p", &m->samp.top_p, err);
	case F_APPEND: return get_ids(v, "append", m->append, PROTO_MAX_APPEND, &m->n_append, err);
	case F_X: return get_ids(v, "x", m->x, PROTO_MAX_N, &m->n_x, err);
	case F_ROWS: return get_rows(v, &m->rows, err);
	case F_F16:
		if (v->type != MSGPACK_OBJECT_BOOLEAN)
			return pcg_fail(err, "field 'f16': not a boolean");
		b = v->via.boolean;
		m->f16 = b;
		return 0;
	case F_ASG:
		if (v->type != MSGPACK_OBJECT_BIN)
			return pcg_fail(err, "field 'asg': not bin");
		if ((const char *)v->via.bin.ptr < (const char *)buf ||
		    (const char *)v->via.bin.ptr + v->via.bin.size > (const char *)buf + len)
			return pcg_fail(err, "field 'asg': not in the message buffer");
		m->asg = v->via.bin.ptr;
		m->asg_len = v->via.bin.size;
		return 0;
	case F_TEXT: return get_str(v, "text", m->text, sizeof m->text, err);
	case F_POLICY: return get_str(v, "policy", m->policy, sizeof m->policy, err);
	case F_STREAM: case F_AUDIO:
		if (v->type != MSGPACK_OBJECT_BOOLEAN)
			return pcg_fail(err, "field '%s': not a boolean", fnames[f]);
		*(f == F_STREAM ? &m->stream : &m->audio) = v->via.boolean;
		return 0;
	case F_CHUNK: case F_LEFT: case F_RIGHT:
		if (get_int(v, fnames[f], 0, PROTO_MAX_APPEND, &x, err) < 0)
			return -1;
		*(f == F_CHUNK ? &m->chunk : f == F_LEFT ? &m->left : &m->right) = (int)x;
		return 0;
	case F_QUEUE:
		if (get_int(v, "queue", 0, INT32_MAX, &x, err) < 0)
			return -1;
		m->queue = (int)x;
		return 0;
	case F_RATE:
		if (get_int(v, "rate", 0, 1 << 20, &x, err) < 0)
			return -1;
		m->rate = (int)x;
		return 0;
	case F_FORCED:
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
			m->forced_at[i] = (int32_t)at;
			m->forced[i] = (int32_t)tok;
		}
		m->n_forced = (int)v->via.array.size;
		return 0;
	case F_PCM:
		if (v->type != MSGPACK_OBJECT_BIN || v->via.bin.size % 2)
			return pcg_fail(err, "field 'pcm': not bin of 16-bit samples");
		if ((const char *)v->via.bin.ptr < (const char *)buf ||
		    (const char *)v->via.bin.ptr + v->via.bin.size > (const char *)buf + len)
			return pcg_fail(err, "field 'pcm': not in the message buffer");
		m->pcm = v->via.bin.ptr;
		m->n_pcm = v->via.bin.size / 2;
		return 0;
	case F_BETA: return get_float(v, "beta", &m->beta, err);
	case F_ARGS:
		if (v->type != MSGPACK_OBJECT_MAP || v->via.map.size > PROTO_MAX_ARGS)
			return pcg_fail(err, "field 'args': not a map of at most %d parameters",
					PROTO_MAX_ARGS);
		for (uint32_t i = 0; i < v->via.map.size; i++) {
			const msgpack_object_kv *kv = &v->via.map.ptr[i];
			const msgpack_object *x = &kv->val;
			if (get_str(&kv->key, "args", m->arg_name[i], sizeof m->arg_name[i], err) < 0)
				return -1;
			if (x->type == MSGPACK_OBJECT_FLOAT32 || x->type == MSGPACK_OBJECT_FLOAT64)
				m->arg_val[i] = x->via.f64;
			else if (x->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
				m->arg_val[i] = (double)x->via.u64;
			else
				return pcg_fail(err, "field 'args': '%s' is not a number",
						m->arg_name[i]);
			for (uint32_t j = 0; j < i; j++)
				if (!strcmp(m->arg_name[j], m->arg_name[i]))
					return pcg_fail(err, "field 'args': '%s' twice", m->arg_name[i]);
		}
		m->n_args = (int)v->via.map.size;
		return 0;
	case F_MAXTOK:
		if (get_int(v, "max_tokens", 1, PROTO_MAX_APPEND, &x, err) < 0)
			return -1;
		m->max_tokens = (int)x;
		return 0;
	case F_SPEAKER:
		if (get_int(v, "speaker", 0, 65535, &x, err) < 0)
			return -1;
		m->speaker = (int)x;
		return 0;
	case F_HEADS:
		if (get_int(v, "heads", 0, PROTO_MAX_HEADS, &x, err) < 0)
			return -1;
		m->heads = (int)x;
		return 0;
	case F_VITERBI_K:
		if (get_int(v, "viterbi_k", 0, 1 << 20, &x, err) < 0)
			return -1;
		m->viterbi_k = (int)x;
		return 0;
	case F_TOKENS: return get_ids(v, "tokens", m->append, PROTO_MAX_APPEND, &m->n_append, err);
	case F_FINAL:
		if (v->type != MSGPACK_OBJECT_BOOLEAN)
			return pcg_fail(err, "field 'final': not a boolean");
		m->final = v->via.boolean;
		return 0;
	case F_STATS:
		if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > PROTO_MAX_STATS)
			return pcg_fail(err, "field 'stats': not an array of at most %d numbers",
					PROTO_MAX_STATS);
		for (uint32_t i = 0; i < v->via.array.size; i++) {
			const msgpack_object *e = &v->via.array.ptr[i];
			if (e->type == MSGPACK_OBJECT_FLOAT32 || e->type == MSGPACK_OBJECT_FLOAT64)
				m->stats[i] = e->via.f64;
			else if (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
				m->stats[i] = (double)e->via.u64;
			else
				return pcg_fail(err, "field 'stats': element %u not a number", i);
		}
		m->n_stats = (int)v->via.array.size;
		return 0;
	case F_CODE: return get_str(v, "code", m->code, sizeof m->code, err);
	case F_MSG: return get_str(v, "msg", m->msg, sizeof m->msg, err);
	case F_P:
		if (v->type != MSGPACK_OBJECT_BIN)
			return pcg_fail(err, "field 'p': not bin");
		/* msgpack-c's unpacker points bin objects into the input buffer;
		 * check, so that probs stays valid after the unpacked zone is gone. */
		if ((const char *)v->via.bin.ptr < (const char *)buf ||
		    (const char *)v->via.bin.ptr + v->via.bin.size > (const char *)buf + len)
			return pcg_fail(err, "field 'p': not in the message buffer");
		m->probs = v->via.bin.ptr;
		return 0;
	case F_PAD:
		if (v->type != MSGPACK_OBJECT_BIN || v->via.bin.size > 7)
			return pcg_fail(err, "field 'pad': not bin of at most 7 bytes");
		return 0;
	case F_NNZ:
		if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > PROTO_MAX_VEC)
			return pcg_fail(err, "field 'nnz': not an array of at most %d counts",
					PROTO_MAX_VEC);
		for (uint32_t i = 0; i < v->via.array.size; i++) {
			if (get_int(&v->via.array.ptr[i], "nnz", 0, 1 << 24, &x, err) < 0)
				return -1;
			m->nnz[i] = (int)x;
		}
		m->n_nnz = (int)v->via.array.size;
		return 0;
	}
	return pcg_fail(err, "field %d: unknown", f);
}

/* A probs reply's layout: nnz per vector, p's size, and the sparse ids
 * (ascending, below width, so that proto_vector may trust them); fills
 * where each vector lies. */
static int check_probs(proto_msg *m, size_t pbytes, pcg_err *err)
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
	const unsigned char *ids = (const unsigned char *)m->probs + vbytes + gap;
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

int proto_parse(const void *buf, size_t len, proto_msg *m, pcg_err *err)
{
	msgpack_unpacked u;
	size_t off = 0, pbytes = 0;
	uint64_t seen = 0;
	int rc = -1, have_v = 0, have_type = 0, have_id = 0;
	long long version = 0;
	char tname[16];

	memset(m, 0, offsetof(proto_msg, append));
	m->n_append = 0;
	m->n_x = 0;
	m->probs = NULL;
	m->code[0] = m->msg[0] = m->text[0] = m->policy[0] = '\0';
	m->n_stats = 0;
	m->n_args = 0;
	m->asg = NULL;
	m->asg_len = 0;
	m->sparse = 0;
	m->n_nnz = 0;
	m->ids = NULL;
	m->len = len;
	m->samp = (pcg_sampling){ 1.0f, 0, 1.0f };
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
			m->type = (proto_type)t;
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
		if (field(m, f, v, buf, len, err) < 0)
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
	/* Cross-field checks. */
	if ((m->type == PROTO_PROPOSE || m->type == PROTO_SCORE || m->type == PROTO_SYNTH) &&
	    pcg_sampling_check(&m->samp, err) < 0)
		goto out;
	if (m->type == PROTO_SCORE && (m->n < 1 || m->n > m->n_append)) {
		pcg_fail(err, "score: field 'n': %d positions, append has %d", m->n, m->n_append);
		goto out;
	}
	for (int i = 0; m->type == PROTO_PROPOSE && i < m->n_forced; i++)
		if (m->forced_at[i] >= m->n || (i > 0 && m->forced_at[i] < m->forced_at[i - 1])) {
			pcg_fail(err, "propose: field 'forced': entry %d goes before draft %d of %d "
				 "(want 1 to n - 1, in order)", i, m->forced_at[i], m->n);
			goto out;
		}
	if (m->type == PROTO_PROPOSE && m->n_append < 1) {
		pcg_fail(err, "propose: field 'append': empty (the last committed token is needed)");
		goto out;
	}
	if ((m->type == PROTO_PROPOSE || m->type == PROTO_SCORE) && m->rows.n < 1) {
		pcg_fail(err, "%s: field 'rows': empty", tname);
		goto out;
	}
	if (m->type == PROTO_PROBS && check_probs(m, pbytes, err) < 0)
		goto out;
	rc = 0;
out:
	msgpack_unpacked_destroy(&u);
	return rc;
}

void proto_vector(const proto_msg *m, int i, float *out)
{
	const size_t es = m->f16 ? 2 : 4;
	const unsigned char *v = (const unsigned char *)m->probs + m->voff[i] * es;
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
