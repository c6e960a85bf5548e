/* speech.h: one POST /v1/audio/speech of pcg-httpd, from its JSON body to
 * the bytes of the response.
 *
 * The body is checked as OpenAI's endpoint checks it (speech_parse); the
 * input is cut into pieces at sentence ends (split.h), and each piece is
 * one "synth" to the verifier (protocol 4, man 7 pcg-protocol) on a DEALER
 * socket of this request alone, with stream and audio on: "progress"
 * messages bring the audio as it is decoded, the "result" ends a piece, and
 * the next piece follows; the audio of all pieces goes through one encoder
 * (encode.h), so the response is one continuous file with one header.
 * A request that asks for a stream (stream_format) gets the bytes as they
 * are made; one that does not gets them once the last piece is spoken,
 * the whole file, so that its length is known before anything is sent.
 *
 * A speech belongs to one thread at a time (its socket is a ZeroMQ
 * socket): pcg-httpd calls it from the request's thread only.
 */
#ifndef PCG_HTTPD_SPEECH_H
#define PCG_HTTPD_SPEECH_H

#include <stdatomic.h>
#include <stddef.h>

#include "encode.h"
#include "err.h"
#include "synth.h"
#include "voices.h"

/* An error as OpenAI's API returns it: the HTTP status and the body
 * {"error": {"message", "type", "param", "code"}}. param and code are
 * empty for null. status 499: the client went away (nothing to send). */
typedef struct api_error {
	int status;
	const char *type;
	char param[32];
	char code[40];
	char message[600];
} api_error;

int api_fail(api_error *e, int status, const char *type, const char *param, const char *code,
	     const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define SPEECH_MAX_INPUT 4096 /* characters, as OpenAI */

/* The model names accepted; NULL-terminated. */
extern const char *const speech_models[];
/* Whether name is a policy the verifier knows (lib/speculate's
 * spec_policy_parse: every rule of policy_rules.h, none, mtp-viterbi and
 * mtp-RULE), and the list of them for a message, in buf. */
int speech_policy_known(const char *name);
const char *speech_policy_list(char *buf, size_t size);

/* How this server speaks: fixed at start, shared by every request. */
typedef struct speech_cfg {
	void *zmq;                 /* the ZeroMQ context */
	const char *verifier;      /* its endpoint */
	int timeout_ms;            /* silence of a running request before it is given up */
	int piece_chars;           /* characters per synth at most */
	size_t max_whole;          /* bytes of a response that is not streamed, at most */
	int resampler;             /* enc_resampler_parse */
	/* every request's synth before its own fields: synth.h's defaults, then
	 * the options (--policy, --seed, ..., --max-tokens, --chunk), checked */
	proto_synth synth;
	const model_voices *voices;
	atomic_int *stop;          /* set: the server is stopping */
} speech_cfg;

/* A request, checked. */
typedef struct speech_req {
	char *input;               /* malloc'd, UTF-8 */
	size_t input_chars;
	char model[64];
	enc_format fmt;
	int stream;                /* stream_format given: bytes as they are made */
	int sse;                   /* stream_format "sse" */
	double speed;
	int speaker;
	const struct clone_voice *clone; /* a registered recording (clones.h), or NULL */
	proto_synth *synth;        /* malloc'd: cfg's with the request's pcg fields, checked */
} speech_req;

/* Parses and checks a body. Returns 0, or -1 with e filled (400). */
int speech_parse(const char *body, size_t len, const speech_cfg *cfg, speech_req *r,
		 api_error *e);
void speech_req_free(speech_req *r);

typedef struct speech speech;

/* The HTTP client of a speech. fd, its connection (-1: none), is watched
 * so that a client that goes away cancels its generation within a round.
 * A client that closed its connection looks like one that only shut down
 * its sending side (which HTTP allows) until something is written to it:
 * knock(arg) (NULL: none), called once when fd reads the end, writes an
 * interim response if the response has not begun (0), else writes nothing
 * (1), or finds the client gone (-1); the reset that a gone client's
 * system answers is then seen as a hang-up. */
typedef struct speech_client {
	int fd;
	int (*knock)(void *arg);
	void *arg;
} speech_client;

/* Sends the first piece to the verifier. Takes r's input. NULL with e on
 * failure. */
speech *speech_start(const speech_cfg *cfg, speech_req *r, const speech_client *client,
		     api_error *e);

/* What speech_pump waits for. */
typedef enum speech_until {
	SPEECH_AUDIO,              /* the first audio (or the end without any) */
	SPEECH_BYTES,              /* bytes to send */
	SPEECH_END,                /* the last piece spoken: every byte there */
} speech_until;

/* Waits for the pipeline until that. Returns 1 (it came), 0 (the end:
 * every byte taken), -1 with e (the generation is cancelled; status 499 if
 * the client went away). A request not streamed whose file would grow
 * beyond cfg->max_whole fails with 400. */
int speech_pump(speech *s, speech_until until, api_error *e);

/* The bytes to send (*n of them), and taking n of them. */
const unsigned char *speech_bytes(const speech *s, size_t *n);
void speech_take(speech *s, size_t n);

/* What it did, for the log. */
typedef struct speech_stats {
	int done;                  /* every piece spoken */
	int pieces;
	long speech_tokens;
	double audio_s;            /* seconds of audio sent */
	double first_audio_s;      /* after the start; < 0: none */
	double elapsed_s;
} speech_stats;
void speech_get_stats(const speech *s, speech_stats *st);

/* Cancels the generation if it runs (a "cancel" to the verifier), frees
 * everything and sets *s to NULL. */
void speech_free(speech **s);

#endif
