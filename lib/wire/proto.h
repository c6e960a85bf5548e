/* proto.h: the messages between the stages of the pipeline, as msgpack.
 *
 * Every message is one ZeroMQ frame holding one msgpack map with the keys
 *   "v" (protocol version, 3), "type" (string), "id" (request id, echoed in
 *   the reply), and the fields of that type's schema, nothing else.
 * Requests to a model server (draftd, targetd):
 *   propose: session, pos, append, n (tokens to draft), temp, top_k, top_p,
 *            seed, rows, f16 -> reply "probs" with x (the drafted ids) and
 *            p (n vectors)
 *   score:   session, pos, append, n (positions to score: the last n of
 *            append), temp, top_k, top_p, rows, f16, heads (MTP heads per
 *            position, 0: none) -> reply "probs" with q; with heads h,
 *            n x (1 + h) vectors: per position q, then head 1..h
 *   drop:    session -> reply "ok"
 *   ping:    -> reply "pong" with the server's model summary
 * Requests to the verifier:
 *   synth:   text, policy, beta, n (lookahead), temp, top_k, top_p, seed,
 *            max_tokens, f16, args (optional: a map of the policy's
 *            parameters by name, as lib/speculate/policy.c's table names them, at most
 *            PROTO_MAX_ARGS: {"epsilon": 0.09, "alpha": 0.3}; absent ones
 *            take their defaults), asg (an ASG file image, or empty: the
 *            verifier's own), speaker (a phoneme voice's speaker),
 *            viterbi_k (mtp-viterbi's top-k per head), stream, audio
 *            (send the audio back), chunk, left, right (the audio's
 *            chunking: codes per chunk, 0 the whole utterance at the end;
 *            codes of context before and after each), prompt_audio and
 *            prompt_text (optional: a cloning prompt, the bytes of an
 *            audio file and what it says; the verifier encodes it with
 *            X-codec2, once per file: its codes are kept by the bytes'
 *            SHA-256) -> with stream, any
 *            number of "progress" messages with the same id, then "result"
 *            with tokens (the speech ids), stats and msg (or "error")
 *   cancel:  session (the id of a synth from this client) -> "ok"; the
 *            synth then ends with the error "cancelled"
 * Progress of a synth (verifier -> client, with stream):
 *   progress: queue (requests ahead of it; 0 once it runs), pos (speech
 *            tokens so far), tokens (the new ones), rate, pcm (the new
 *            audio: s16le samples at rate Hz; empty when none)
 * Request to codec-decode:
 *   audio:   session, tokens (speech codes appended), final, chunk, left,
 *            right -> "pcm" with rate and pcm: the audio of the chunks the
 *            codes so far complete (chunk s is decoded from codes
 *            [s - left, s + chunk + right) once they are all there, or at
 *            the final message; chunk 0: everything at the final one)
 * A probs reply also carries stats: [seconds of compute in the server], so
 * that the client can tell compute from messaging.
 * A server brings the session's cache to `pos` tokens (truncate), appends
 * `append`, then proposes or scores. A session it does not hold gives the
 * error "unknown-session" unless pos is 0; the client then resends the
 * whole context. Probability vectors cover the output rows only (LLaSA: the
 * speech range plus the end token), little-endian f32 (or f16 when asked).
 * A probs reply sends vector i either dense (nnz[i] = width: all its
 * values) or sparse (nnz[i] < width: only its nonzero entries, as values
 * and ascending row ids), whichever is smaller: the entries a top-k or
 * top-p sampler removed are exactly 0, so both give the same vector to the
 * bit. Its bin p holds the values of every vector in order, then, when a
 * vector is sparse, zero to three zero bytes to a multiple of 4 and the
 * u32 ids of the sparse vectors in order; pad (0 to 7 bytes) puts the
 * values at a multiple of 8 bytes in the message. Errors: type "error"
 * with code and msg.
 *
 * Parsing never trusts the peer: before msgpack-c sees the bytes, a scan
 * checks that every declared length fits in the bytes that remain (msgpack-c
 * would otherwise reserve memory for a count it cannot have), nesting is
 * bounded, and then each field is checked against its schema (sparse ids
 * ascending and below width); an error names the field. Parsing copies no
 * payload: probabilities are read where they lie in the received message.
 * See man/pcg-protocol.7.
 */
#ifndef PCG_PROTO_H
#define PCG_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "model.h"
#include "sampling.h"

#define PROTO_VERSION 5
#define PROTO_MAX_APPEND 8192 /* tokens per request: a whole LLaSA context fits */
#define PROTO_MAX_N 16        /* lookahead + 1 */
/* A synth's lookahead (its n): 1 to PROTO_MAX_LOOKAHEAD drafts a round, or 0:
 * auto. The one definition pcg-synth, pcg-httpd, the wire and lib/speculate check. */
#define PROTO_MAX_LOOKAHEAD (PROTO_MAX_N - 1)
#define PROTO_MAX_HEADS 16    /* MTP heads a score may ask for */
#define PROTO_MAX_VEC (PROTO_MAX_N * (1 + PROTO_MAX_HEADS)) /* vectors in a probs */
#define PROTO_MAX_MSG (64u << 20) /* ZMQ_MAXMSGSIZE of every socket */
#define PROTO_MAX_STATS 32
#define PROTO_MAX_ARGS 4   /* synth: policy parameters by name */

/* The statistics a synth's "result" carries, by index of its stats array
 * (pcg-protocol(7), STATISTICS): counts, rates and seconds of the session,
 * then from PROTO_STAT_POS0 one per draft position, the share of rounds
 * whose draft was accepted there. */
enum proto_stat {
	PROTO_STAT_ROUNDS,     /* rounds (target passes) */
	PROTO_STAT_DRAFTED,    /* tokens drafted */
	PROTO_STAT_ACCEPTED,   /* drafted tokens accepted */
	PROTO_STAT_RATE,       /* accepted / drafted */
	PROTO_STAT_MAL,        /* mean acceptance length: 1 + accepted / rounds */
	PROTO_STAT_TOK_S,      /* speech tokens per second of the session */
	PROTO_STAT_T_DRAFT,    /* seconds in draft requests */
	PROTO_STAT_T_TARGET,   /* seconds in target requests */
	PROTO_STAT_T_POLICY,   /* seconds in the policy */
	PROTO_STAT_T_MSG,      /* seconds of messaging: requests minus the servers' compute */
	PROTO_STAT_TOKENS,     /* speech tokens */
	PROTO_STAT_T_TOTAL,    /* seconds of the session */
	PROTO_STAT_RESENDS,    /* contexts resent to a server that lost them */
	PROTO_STAT_LOOKAHEAD,  /* drafts per round (the lookahead, on average over all rounds) */
	PROTO_STAT_PIPELINED,  /* the share of drafting rounds whose draft drafted ahead */
	PROTO_STAT_PREDICTED,  /* tokens/s the cost model predicts for the session
				* (lib/speculate/costmodel.c): its rounds at the model's rate,
				* the first (with the prompt's prefill) as measured */
	PROTO_STAT_DRAFTING,   /* the share of rounds that drafted (the rest: the target alone) */
	PROTO_STAT_T_TARGET_SERVER, /* of T_TARGET, seconds the target server computed (the
				* rest: queue and messaging) */
	PROTO_STAT_POS0        /* the first per-position acceptance */
};

typedef enum proto_type {
	PROTO_PROPOSE = 1,
	PROTO_SCORE,
	PROTO_DROP,
	PROTO_PING,
	PROTO_PROBS, /* reply */
	PROTO_OK,    /* reply */
	PROTO_PONG,  /* reply */
	PROTO_ERROR, /* reply */
	PROTO_SYNTH, /* client -> verifier */
	PROTO_RESULT, /* verifier -> client */
	PROTO_AUDIO, /* verifier -> codec-decode: tokens of a session */
	PROTO_PCM,   /* codec-decode -> verifier: audio of the chunks completed */
	PROTO_PROGRESS, /* verifier -> client: queue position, tokens, audio */
	PROTO_CANCEL, /* client -> verifier: end a synth */
} proto_type;
#define PROTO_LAST_TYPE PROTO_CANCEL

/* Error codes carried by PROTO_ERROR replies. */
#define PROTO_E_BAD_REQUEST "bad-request"
#define PROTO_E_UNKNOWN_SESSION "unknown-session"
#define PROTO_E_TOO_LARGE "too-large"
#define PROTO_E_INTERNAL "internal"
#define PROTO_E_CANCELLED "cancelled"
#define PROTO_E_BUSY "busy"

/* One struct per message type, with the fields of its schema (by their
 * wire names unless said otherwise). A struct's large arrays come last, so
 * that proto_init clears a message without touching them. */

/* What a propose and a score both carry, read by the server alike: the
 * session's cache is brought to pos tokens and append goes in; the
 * distributions of n positions come back, with samp's temperature and
 * truncation, over rows, as f16 when asked. */
typedef struct proto_model_req {
	uint64_t session;
	int pos;
	int n;                 /* propose: tokens to draft; score: positions (the
				* last n of append) */
	pcg_sampling samp;     /* wire: temp, top_k, top_p */
	llama_rows rows;
	int f16;
	int n_append;
	int32_t append[PROTO_MAX_APPEND];
} proto_model_req;

typedef struct proto_propose {
	uint64_t seed;
	/* optional: forced[i] goes in right before drafted token forced_at[i]
	 * (1 <= forced_at[i] < n, non-decreasing): the draft conditions on it */
	int n_forced;
	int32_t forced_at[PROTO_MAX_N], forced[PROTO_MAX_N];
	/* optional: draws > 0: token i is drawn with the first uniform of
	 * Philox stream draws + i under seed (pcg_rng_uniform_at(seed, draws +
	 * i, 0)), a function of its index alone, so that a run of tokens
	 * sampled here equals the same tokens sampled one a round elsewhere;
	 * 0: the uniforms of stream 0 in order (wire: absent) */
	uint64_t draws;
	/* optional: stop: the propose ends after drafting token stop_id (the
	 * end token), the reply holding the tokens up to it (wire: "stop") */
	int stop;
	int32_t stop_id;
	proto_model_req req;
} proto_propose;

typedef struct proto_score {
	int heads;             /* MTP heads wanted at each scored position */
	proto_model_req req;
} proto_score;

typedef struct proto_drop {
	uint64_t session;
} proto_drop;

/* The reply to a propose or score: n_vec vectors of width values. */
typedef struct proto_probs {
	int n_vec, width;      /* wire: n, width */
	const void *values;    /* wire: p. pack: n_vec x width f32 (the caller's);
				* parse: in the received buffer, read them with
				* proto_vector */
	int f16;
	int sparse;            /* pack: send a vector as its nonzero entries when
				* that is smaller (set it when a sampler truncated:
				* else the scan is wasted); parse: some vector came so */
	int n_x;
	int32_t x[PROTO_MAX_N]; /* propose: the drafted ids */
	int n_stats;
	double stats[PROTO_MAX_STATS]; /* [seconds of compute in the server] */
	/* parse: where each vector lies */
	const void *ids;       /* the u32 ids of the sparse vectors, in the buffer */
	int n_nnz;
	int nnz[PROTO_MAX_VEC]; /* entries sent (width: dense) */
	size_t voff[PROTO_MAX_VEC], ioff[PROTO_MAX_VEC]; /* its first value, first id */
} proto_probs;

typedef struct proto_pong {
	char msg[256];         /* the server's model summary */
} proto_pong;

/* (proto_error is the function that fills one.) */
typedef struct proto_error_reply {
	char code[32];         /* PROTO_E_* */
	char msg[256];
} proto_error_reply;

/* What to say and how. */
typedef struct proto_synth {
	char policy[16];
	float beta;
	int lookahead;         /* wire: n */
	pcg_sampling samp;     /* wire: temp, top_k, top_p */
	uint64_t seed;
	int max_tokens;
	int f16;
	const void *asg;       /* an ASG file image for this request (may be
				* empty); parse: in the received buffer */
	size_t asg_len;
	int speaker;           /* a phoneme voice's speaker (0..) */
	int viterbi_k;         /* mtp-viterbi's top-k per head (0: 8) */
	int stream;            /* send progress messages */
	int audio;             /* send the audio back (needs a codec) */
	int chunk, left, right; /* the audio's chunking (codes) */
	int first;             /* optional: the first chunk's codes, each next one
				* twice as many up to chunk (lib/core/chunks.h;
				* 0, absent: every chunk `chunk` codes) */
	int n_args;            /* optional: the policy's parameters by name */
	char arg_name[PROTO_MAX_ARGS][16];
	double arg_val[PROTO_MAX_ARGS];
	const void *prompt_audio; /* optional: a cloning prompt, an audio file's
				   * bytes (parse: in the received buffer) */
	size_t prompt_audio_len;
	char prompt_text[4096]; /* optional: what the prompt audio says */
	int sequential;        /* optional: rounds one after the other, the draft
				* waiting for each verdict (default: pipelined) */
	char text[16384];
} proto_synth;

typedef struct proto_result {
	char msg[256];
	int n_stats;
	double stats[PROTO_MAX_STATS]; /* by enum proto_stat */
	int n_tokens;
	int32_t tokens[PROTO_MAX_APPEND]; /* the speech ids */
} proto_result;

typedef struct proto_audio {
	uint64_t session;
	int final;             /* the last tokens of the session */
	int chunk, left, right;
	int first;             /* optional: as a synth's first (0, absent: none) */
	int n_tokens;
	int32_t tokens[PROTO_MAX_APPEND]; /* speech codes appended */
} proto_audio;

/* samples: n_samples s16le samples at rate Hz (pack: the caller's; parse:
 * in the received buffer, any alignment). */
typedef struct proto_pcm {
	int rate;
	const void *samples;   /* wire: pcm */
	size_t n_samples;
} proto_pcm;

typedef struct proto_progress {
	int queue;             /* requests ahead */
	int pos;               /* speech tokens so far */
	int rate;
	const void *samples;   /* wire: pcm, as in proto_pcm */
	size_t n_samples;
	int n_tokens;
	int32_t tokens[PROTO_MAX_APPEND]; /* the new ones */
} proto_progress;

typedef struct proto_cancel {
	uint64_t session;      /* the id of a synth from this client */
} proto_cancel;

/* A message: its type says which member holds it (ping and ok carry
 * nothing). */
typedef struct proto_msg {
	proto_type type;
	uint64_t id;
	size_t len;            /* parse: bytes of the message */
	union {
		proto_propose propose;
		proto_score score;
		proto_drop drop;
		proto_probs probs;
		proto_pong pong;
		proto_error_reply error;
		proto_synth synth;
		proto_result result;
		proto_audio audio;
		proto_pcm pcm;
		proto_progress progress;
		proto_cancel cancel;
	};
} proto_msg;

/* Makes m an empty message of type t with id: every field zero or empty;
 * the arrays beyond the counts are not touched. */
void proto_init(proto_msg *m, proto_type t, uint64_t id);

/* The part of m that propose and score share; NULL for another type. */
const proto_model_req *proto_model(const proto_msg *m);
proto_model_req *proto_model_mut(proto_msg *m);

/* A growable buffer that packing reuses from message to message, so that a
 * payload of megabytes neither takes fresh pages nor grows by copies each
 * time; zero-initialise it. data[0..len) is the last message packed. */
typedef struct proto_buf {
	unsigned char *data;
	size_t len, cap;
	uint32_t *ids;         /* scratch of sparse packing */
	float *vals;
	size_t scap;
	int oom;               /* the last pack ran out of memory */
} proto_buf;

/* Packs m into b (b->data, b->len), reusing its memory. Returns 0 or -1
 * (out of memory, an unknown type, a count out of range). Only the member
 * of m's type is read. A probs reply's values are f32, converted when f16
 * is set. */
int proto_pack_buf(const proto_msg *m, proto_buf *b, pcg_err *err);
void proto_buf_free(proto_buf *b);

/* Packs m into a malloc'd buffer (*out, *len) that the caller frees.
 * Returns 0 or -1. */
int proto_pack(const proto_msg *m, void **out, size_t *len, pcg_err *err);

/* Parses buf into m (whose values, ids, samples and asg then point into
 * buf: keep buf while they are read; buf may have any alignment). Returns
 * 0, or -1 with err naming the problem; m->id is filled whenever it could
 * be read, so the error reply can carry it (the rest of m is then
 * undefined). A message of another protocol version gives an error naming
 * both versions. */
int proto_parse(const void *buf, size_t len, proto_msg *m, pcg_err *err);

/* Reads vector i of a parsed probs reply as f32 into out[width] (a sparse
 * one: its entries, zero elsewhere). */
void proto_vector(const proto_probs *p, int i, float *out);

const char *proto_type_name(proto_type t);

/* Fills m as an error reply to request id. */
void proto_error(proto_msg *m, uint64_t id, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
