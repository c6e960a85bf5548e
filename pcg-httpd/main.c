/* pcg-httpd: the pipeline behind OpenAI's text-to-speech HTTP API.
 *
 * POST /v1/audio/speech takes OpenAI's JSON body (speech.h checks it), has
 * the verifier speak the input piece by piece, and answers the audio in the
 * format asked for (encode.h): whole, with its length, once the last piece
 * is spoken, or, when the request asks for a stream, as it is made, chunked
 * or as server-sent events; GET /v1/models, /v1/voices and /health answer what
 * clients ask before. Errors are OpenAI's: a status and
 * {"error": {"message", "type", "param", "code"}}.
 *
 * HTTP itself is http.h's: one loop reads every request under deadlines
 * and refuses malformed ones; the token is checked there, as soon as the
 * head is in (on_head), before anything is allocated for the request. A
 * complete request runs in a thread of its own, and a speech opens its own
 * DEALER socket there, so every ZeroMQ socket stays in one thread. That
 * thread waits for the pipeline's audio and writes it, watching the
 * client's socket meanwhile: a client that goes away cancels its
 * generation. Registered voices are clones.h's. Signals are blocked in
 * every thread but waited for by main, which then stops the server.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "clock.h"
#include "client.h"
#include "clones.h"
#include "fileio.h"
#include "http.h"
#include "net.h"
#include "opts.h"
#include "proto.h"
#include "speech.h"

#define VERSION PCG_VERSION /* one version string: the programs' (lib/core/opts.h) */
#define IDLE_MS 60000 /* a kept-alive connection idle this long, a client reading nothing */

static const char *prog = "pcg-httpd";
static const char *SYNOPSIS = "[--listen ADDR] [--port N] [--token-file FILE] [--voice FILE] "
			      "[--verifier URL] [options]";

static const char *listen_addr, *token_file, *voice_path, *verifier_url, *policy, *resampler;
static const char *voices_dir, *voices_evict;
static int port, max_requests, timeout_ms, piece_chars, chunk, chunk_first, chunk_left;
static int chunk_right;
static int max_conns, max_per_client, head_timeout_ms, body_timeout_ms, voices_max;
static int max_tokens, seed, lookahead, top_k, quiet, show_version;
static long long max_body, max_whole;
static double temp, top_p, beta;

static const pcg_opt opts[] = {
	{ "listen", PCG_OPT_STR, &listen_addr, "127.0.0.1", 1, 0, "ADDR",
	  "the address to listen on (IPv4 or IPv6); beyond loopback only with --token-file" },
	{ "port", PCG_OPT_INT, &port, "8000", 0, 65535, "N", "the TCP port (0: any free one)" },
	{ "token-file", PCG_OPT_STR, &token_file, NULL, 1, 0, "FILE",
	  "every request must carry 'Authorization: Bearer TOKEN', TOKEN the file's first line" },
	{ "voice", PCG_OPT_STR, &voice_path, NULL, 1, 0, "FILE",
	  "the voice.json of a phoneme voice: its speakers (pcg-up passes the model's)" },
	{ "verifier", PCG_OPT_STR, &verifier_url, NULL, 1, 0, "URL",
	  "the verifier (default $PCG_VERIFIER, else the one pcg-up started)" },
	{ "max-requests", PCG_OPT_INT, &max_requests, "32", 1, 4096, "N",
	  "speech requests at once; beyond, 429" },
	{ "max-body", PCG_OPT_SIZE, &max_body, "64K", 1024, 1 << 24, "SIZE",
	  "request bodies larger are refused with 413" },
	{ "max-whole", PCG_OPT_SIZE, &max_whole, "64M", 64 << 10, 1LL << 31, "SIZE",
	  "a response not streamed is held whole until sent: larger audio is refused with 400" },
	{ "max-connections", PCG_OPT_INT, &max_conns, "1024", 4, 65536, "N",
	  "connections at once (reading, speaking or idle); beyond, 503" },
	{ "max-per-client", PCG_OPT_INT, &max_per_client, "64", 1, 65536, "N",
	  "connections at once from one client address; beyond, 429" },
	{ "head-timeout-ms", PCG_OPT_INT, &head_timeout_ms, "10000", 50, 600000, "N",
	  "a request's head must arrive whole within N ms of its first byte; else 408" },
	{ "body-timeout-ms", PCG_OPT_INT, &body_timeout_ms, "60000", 50, 3600000, "N",
	  "a request's body must arrive whole within N ms of its head; else 408" },
	{ "voices", PCG_OPT_STR, &voices_dir, NULL, 1, 0, "DIR",
	  "keep registered voices there, one file each, read back at start (none: in memory)" },
	{ "voices-max", PCG_OPT_INT, &voices_max, "64", 1, 4096, "N",
	  "registered voices at most" },
	{ "voices-evict", PCG_OPT_STR, &voices_evict, "refuse", 1, 0, "RULE",
	  "a registration beyond --voices-max: refuse (409) or oldest (the oldest goes)" },
	{ "timeout-ms", PCG_OPT_INT, &timeout_ms, "30000", 100, 86400000, "N",
	  "a running request whose pipeline sends nothing this long is given up (503)" },
	{ "piece-chars", PCG_OPT_INT, &piece_chars, "300", 20, 4000, "N",
	  "a longer input is spoken in pieces of at most N characters, cut at sentence ends" },
	{ "chunk", PCG_OPT_INT, &chunk, PROTO_STR(PROTO_SYNTH_CHUNK), 1, PROTO_MAX_APPEND, "N",
	  "the audio comes in chunks of N codes" },
	{ "chunk-first", PCG_OPT_INT, &chunk_first, PROTO_STR(PROTO_SYNTH_FIRST), 0,
	  PROTO_MAX_APPEND, "N",
	  "the first chunk N codes, each next one twice the one before up to --chunk, so that "
	  "the first audio comes sooner (0 or --chunk: fixed chunks; unless given, at most "
	  "--chunk)" },
	{ "chunk-left", PCG_OPT_INT, &chunk_left, PROTO_STR(PROTO_SYNTH_LEFT), 0, PROTO_MAX_APPEND,
	  "N", "codes before a chunk decoded with it" },
	{ "chunk-right", PCG_OPT_INT, &chunk_right, PROTO_STR(PROTO_SYNTH_RIGHT), 0,
	  PROTO_MAX_APPEND, "N", "codes after a chunk decoded with it" },
	{ "resampler", PCG_OPT_STR, &resampler, "medium", 1, 0, "NAME",
	  "libsamplerate's converter to 24 kHz: fastest, medium or best" },
	{ "max-tokens", PCG_OPT_INT, &max_tokens, PROTO_STR(PROTO_SYNTH_MAX_TOKENS), 1,
	  PROTO_MAX_APPEND, "N",
	  "speech tokens per piece at most (50 per second)" },
	{ "policy", PCG_OPT_STR, &policy, PROTO_SYNTH_POLICY, 1, 0, "NAME",
	  "the verification policy of a request that names none (as pcg-synth's)" },
	{ "seed", PCG_OPT_INT, &seed, PROTO_STR(PROTO_SYNTH_SEED), 0, PROTO_SYNTH_SEED_MAX, "N",
	  "the seed of a request that names none" },
	{ "lookahead", PCG_OPT_INT, &lookahead, "0", 0, PROTO_MAX_LOOKAHEAD, "L",
	  "tokens drafted per round (0: auto, the verifier's cost model chooses)" },
	{ "temp", PCG_OPT_FLOAT, &temp, PROTO_STR(PROTO_SYNTH_TEMP), 0, PROTO_SYNTH_TEMP_MAX, "T",
	  "temperature" },
	{ "top-k", PCG_OPT_INT, &top_k, PROTO_STR(PROTO_SYNTH_TOP_K), 0, PROTO_SYNTH_TOP_K_MAX, "K",
	  "top-k (0: off)" },
	{ "top-p", PCG_OPT_FLOAT, &top_p, PROTO_STR(PROTO_SYNTH_TOP_P), PROTO_SYNTH_TOP_P_MIN, 1,
	  "P", "top-p (1: off)" },
	{ "beta", PCG_OPT_FLOAT, &beta, PROTO_STR(PROTO_SYNTH_BETA), 0, PROTO_SYNTH_BETA_MAX, "B",
	  "ssd's tolerance" },
	{ "quiet", PCG_OPT_FLAG, &quiet, NULL, 1, 0, NULL, "no line per request on stderr" },
	{ "version", PCG_OPT_FLAG, &show_version, NULL, 1, 0, NULL, "print the version and exit" },
	{ NULL },
};

static atomic_int stopping, active;
static speech_cfg cfg;
static model_voices voices;
static char token[512];
static size_t token_len;
static char *models_json, *voices_json; /* fixed answers, made at start */

enum route { R_NONE, R_SPEECH, R_MODELS, R_MODEL, R_VOICES, R_VOICE_ADD, R_VOICE_ONE,
	     R_HEALTH };

/* What a request's thread knows of it besides http_req. */
typedef struct request {
	http_req *h;
	int counted;           /* holds one of --max-requests */
	speech *sp;
	enc_format format;
	int stream, sse;
	char fmt[8];           /* its name, for the log */
} request;

/* ---- responses ---- */

/* Answers body (malloc'd; NULL: out of memory), which it frees. */
static int reply(http_req *h, int status, char *body, const char *type, const char *allow)
{
	char extra[64] = "";
	if (body == NULL)
		return http_reply(h, 500, NULL, NULL, NULL, 0);
	if (allow)
		snprintf(extra, sizeof extra, "Allow: %s\r\n", allow);
	int rc = http_reply(h, status, type, extra, body, strlen(body));
	free(body);
	return rc;
}

static int reply_json(http_req *h, int status, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (s) { /* a newline after the object, as curl users like it */
		char *t = realloc(s, strlen(s) + 2);
		if (t)
			strcat(s = t, "\n");
	}
	return reply(h, status, s, "application/json", NULL);
}

static json_t *error_json(const api_error *e)
{
	return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type", e->type,
			 "param", *e->param ? json_string(e->param) : json_null(), "code",
			 *e->code ? json_string(e->code) : json_null());
}

static int reply_error(http_req *h, const api_error *e, const char *allow)
{
	json_t *j = error_json(e);
	char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
	json_decref(j);
	snprintf(h->why, sizeof h->why, "%s", e->message);
	if (s) {
		char *t = realloc(s, strlen(s) + 2);
		if (t)
			strcat(s = t, "\n");
	}
	return reply(h, e->status, s, "application/json", allow);
}

static int fail(http_req *h, int status, const char *type, const char *param, const char *code,
		const char *allow, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static int fail(http_req *h, int status, const char *type, const char *param, const char *code,
		const char *allow, const char *fmt, ...)
{
	api_error e;
	va_list ap;
	api_fail(&e, status, type, param, code, "%s", "");
	va_start(ap, fmt);
	vsnprintf(e.message, sizeof e.message, fmt, ap);
	va_end(ap);
	return reply_error(h, &e, allow);
}

/* ---- fixed answers ---- */

static char *make_models(void)
{
	json_t *data = json_array();
	for (int i = 0; speech_models[i]; i++)
		json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id", speech_models[i],
						      "object", "model", "created", 0, "owned_by",
						      "pcg-tts"));
	json_t *j = json_pack("{s:s,s:o}", "object", "list", "data", data);
	char *s = json_dumps(j, JSON_INDENT(2));
	json_decref(j);
	return s;
}

/* The OpenAI names with the speaker each speaks with, then the speakers. */
static char *make_voices(void)
{
	json_t *data = json_array();
	for (int i = 0; voices_openai[i]; i++) {
		const int k = i % voices.n;
		json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id",
						      voices_openai[i], "object", "voice",
						      "speaker", k, "name", voices.name[k]));
	}
	for (int k = 0; k < voices.n; k++) {
		char id[16];
		snprintf(id, sizeof id, "%d", k);
		json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id", id, "object",
						      "voice", "speaker", k, "name", voices.name[k]));
	}
	json_t *j = json_pack("{s:s,s:o}", "object", "list", "data", data);
	char *s = json_dumps(j, JSON_INDENT(2));
	json_decref(j);
	return s;
}

static int reply_fixed(http_req *h, const char *body)
{
	size_t n = strlen(body);
	char *s = malloc(n + 2);
	if (s) {
		memcpy(s, body, n);
		memcpy(s + n, "\n", 2);
	}
	return reply(h, 200, s, "application/json", NULL);
}

/* A ping of the verifier through every stage: 1 with its summary in msg,
 * 0 with why not in err. */
static int ping_pipeline(char *msg, size_t msg_len, pcg_err *err)
{
	proto_msg *q = calloc(1, sizeof *q), *r = calloc(1, sizeof *r);
	pcg_client *cl = NULL;
	int up = 0;

	if (q && r && net_listening(cfg.verifier) &&
	    (cl = client_new(cfg.zmq, cfg.verifier, 3000, 1, err)) != NULL) {
		q->type = PROTO_PING;
		up = client_call(cl, q, r, err) == 0 && r->type == PROTO_PONG;
		if (up)
			snprintf(msg, msg_len, "%s", r->pong.msg);
		else if (r->type == PROTO_ERROR)
			snprintf(err->msg, sizeof err->msg, "%s", r->error.msg);
	} else if (q && r && !*err->msg) {
		snprintf(err->msg, sizeof err->msg, "nobody listens at %s: start it with pcg-up",
			 cfg.verifier);
	}
	client_free(&cl);
	free(q);
	free(r);
	return up;
}

/* GET /health: the verifier answers a ping through every stage. */
static int health(http_req *h)
{
	pcg_err err = { "" };
	char pong[300] = "";
	json_t *j;
	const int up = ping_pipeline(pong, sizeof pong, &err);
	/* a stage with a replica down still serves: 200, "degraded", the
	 * replicas down named in the pipeline's line */
	if (up)
		j = json_pack("{s:s,s:s,s:i,s:i,s:s}", "status",
			      strstr(pong, "(down: ") ? "degraded" : "ok", "pipeline", pong,
			      "requests", atomic_load(&active), "max_requests", max_requests,
			      "version", VERSION);
	else
		j = json_pack("{s:s,s:{s:s,s:s,s:n,s:n}}", "status", "unavailable", "error",
			      "message", *err.msg ? err.msg : "out of memory", "type",
			      "server_error", "param", "code");
	return reply_json(h, up ? 200 : 503, j);
}

/* ---- speech ---- */

/* A speech that failed before its response began: its error status, or
 * nothing when the client went away. */
static void speech_failed(http_req *h, const api_error *e)
{
	if (e->status == 499) { /* nobody to answer */
		h->status = 499;
		snprintf(h->why, sizeof h->why, "%s", "the client went away: generation cancelled");
		return;
	}
	reply_error(h, e, NULL);
}

/* A response not streamed: the whole file once the last piece is spoken,
 * with its Content-Length (and a WAV's true sizes); until then any error
 * is still an error status, not a cut body. */
static void speech_whole(request *rq)
{
	http_req *h = rq->h;
	api_error e;
	size_t n;

	if (speech_pump(rq->sp, SPEECH_END, &e) < 0) {
		speech_failed(h, &e);
		return;
	}
	const unsigned char *p = speech_bytes(rq->sp, &n);
	if (http_reply(h, 200, enc_content_type(rq->format), "Cache-Control: no-cache\r\n", p,
		       n) < 0)
		snprintf(h->why, sizeof h->why, "%s", "the client went away before the audio was "
			 "written");
	speech_take(rq->sp, n);
}

/* A stream: the status waits for the first audio, so that until then an
 * error is still an error status, not a broken stream; then the bytes go
 * out chunked as they are made. */
static void speech_stream(request *rq)
{
	http_req *h = rq->h;
	api_error e;

	if (speech_pump(rq->sp, SPEECH_AUDIO, &e) < 0) {
		speech_failed(h, &e);
		return;
	}
	const char *type = rq->sse ? "text/event-stream" : enc_content_type(rq->format);
	if (http_stream_begin(h, 200, type, "Cache-Control: no-cache\r\n") < 0) {
		snprintf(h->why, sizeof h->why, "%s", "the client went away: generation cancelled");
		return;
	}
	for (;;) {
		int rc = speech_pump(rq->sp, SPEECH_BYTES, &e);
		if (rc == 0) {
			http_stream_end(h, 1);
			return;
		}
		if (rc < 0) {
			snprintf(h->why, sizeof h->why, "%s", e.status == 499 ? "the client went "
				 "away: generation cancelled" : e.message);
			http_stream_end(h, 0);
			return;
		}
		size_t n;
		const unsigned char *p = speech_bytes(rq->sp, &n);
		if (http_stream_write(h, p, n) < 0) {
			snprintf(h->why, sizeof h->why, "%s", "the client went away: generation "
				 "cancelled");
			http_stream_end(h, 0);
			return;
		}
		speech_take(rq->sp, n);
	}
}

/* The knock of speech.h on a client that may have closed its connection. */
static int knock(void *h)
{
	return http_continue(h);
}

static void speech_request(request *rq)
{
	http_req *h = rq->h;
	api_error e;
	speech_req sr;

	if (speech_parse(h->body ? h->body : "", h->len, &cfg, &sr, &e) < 0) {
		reply_error(h, &e, NULL);
		return;
	}
	rq->format = sr.fmt;
	rq->stream = sr.stream;
	rq->sse = sr.sse;
	snprintf(rq->fmt, sizeof rq->fmt, "%s", enc_format_name(sr.fmt));
	if (atomic_fetch_add(&active, 1) >= max_requests) {
		atomic_fetch_sub(&active, 1);
		speech_req_free(&sr);
		fail(h, 429, "requests", NULL, "rate_limit_exceeded", NULL, "Too many requests at "
		     "once: this server speaks %d at a time (pcg-httpd --max-requests). Try again "
		     "when one has finished.", max_requests);
		return;
	}
	rq->counted = 1;
	const speech_client client = { h->fd, knock, h };
	rq->sp = speech_start(&cfg, &sr, &client, &e);
	speech_req_free(&sr);
	if (rq->sp == NULL) {
		reply_error(h, &e, NULL);
		return;
	}
	if (rq->stream)
		speech_stream(rq);
	else
		speech_whole(rq);
}

/* ---- cloned voices ---- */

/* A request's body may hold this many bytes: a recording more than JSON. */
static long long body_limit(enum route r)
{
	return r == R_VOICE_ADD ? CLONES_MAX_BYTES : r == R_VOICE_ONE ? 0 : max_body;
}

/* GET /v1/audio/voices: the model's voices, then those registered. */
static int list_voices(http_req *h)
{
	json_error_t je;
	json_t *j = json_loads(voices_json, 0, &je);
	json_t *data = j ? json_object_get(j, "data") : NULL;

	if (data == NULL) {
		json_decref(j);
		return reply_fixed(h, voices_json);
	}
	clones_list(data);
	char *body = json_dumps(j, JSON_INDENT(2)); /* as the fixed list is written */
	json_decref(j);
	if (body == NULL)
		return reply_fixed(h, voices_json);
	int r = reply_fixed(h, body);
	free(body);
	return r;
}

/* POST /v1/audio/voices?name=NAME&transcript=TEXT with the recording as the
 * body (any audio file libsndfile reads, up to 30 s): a voice for "voice". */
static int add_voice(http_req *h)
{
	char name[256], text[8192], msg[600];
	int status = 0;
	const char *code = NULL;
	const int nl = http_query(h, "name", name, sizeof name);
	const int tl = http_query(h, "transcript", text, sizeof text);

	if (nl == -1 || tl == -1)
		return fail(h, 400, "invalid_request_error", nl == -1 ? "name" : "transcript",
			    "missing_required_parameter", NULL, "POST /v1/audio/voices?name=NAME&"
			    "transcript=TEXT with the recording as the body: '%s' is missing.",
			    nl == -1 ? "name" : "transcript");
	if (nl < 0 || tl < 0)
		return fail(h, 400, "invalid_request_error", nl < 0 ? "name" : "transcript",
			    "invalid_value", NULL, "Invalid '%s': too long or badly %%-encoded.",
			    nl < 0 ? "name" : "transcript");
	if (strlen(text) != (size_t)tl)
		return fail(h, 400, "invalid_request_error", "transcript", "invalid_value", NULL,
			    "Invalid 'transcript': it holds a NUL byte.");
	/* a pipeline that answers and cannot clone (its verifier has no
	 * encoder: a phoneme voice, or no X-codec2 checkpoint) refuses at once,
	 * not at the first speech with the voice; one that does not answer
	 * keeps the voice for when it does */
	char pong[300] = "";
	pcg_err perr = { "" };
	if (ping_pipeline(pong, sizeof pong, &perr) && !strstr(pong, ", cloning"))
		return fail(h, 400, "invalid_request_error", NULL, "cloning_unavailable", NULL,
			    "This pipeline cannot clone voices: its verifier has no encoder (a "
			    "phoneme voice, such as the demo's, cannot clone). Start a LLaSA "
			    "pipeline with its X-codec2 checkpoint (pcg-up --target DIR "
			    "--codec-weights DIR --http PORT), or give the encoder: pcg-up "
			    "--encoder DIR.");
	json_t *j = clones_add(name, (size_t)nl, text, h->body, h->len, &status, &code, msg,
			       sizeof msg);
	if (j == NULL) {
		/* curl -d sends a form: newlines stripped, the audio broken */
		const char *ct = http_header(h, "Content-Type");
		const int form = ct && !strncasecmp(ct, "application/x-www-form-urlencoded", 33);
		return fail(h, status, status >= 500 ? "server_error" : "invalid_request_error",
			    status == 400 || status == 409 ? "name" : NULL, code, NULL, "%s%s", msg,
			    status == 400 && form ? " The body came as a form (curl -d strips its "
			    "newlines and breaks audio): send the file as it is, curl --data-binary "
			    "@voice.wav." : "");
	}
	return reply_json(h, 200, j);
}

/* GET or DELETE /v1/audio/voices/ID: one registered voice. */
static int one_voice(http_req *h, const char *id)
{
	char msg[300];
	int status = 404;
	if (!strcmp(h->method, "DELETE")) {
		json_t *j = clones_delete(id, &status, msg, sizeof msg);
		return j ? reply_json(h, 200, j)
			 : fail(h, status, "invalid_request_error", "voice_id", "voice_not_found",
				NULL, "%s", msg);
	}
	json_t *j = clones_get(id);
	return j ? reply_json(h, 200, j)
		 : fail(h, 404, "invalid_request_error", "voice_id", "voice_not_found", NULL,
			"No registered voice '%.64s': GET /v1/audio/voices lists them.", id);
}

/* ---- routing ---- */

/* The ID of /v1/audio/voices/ID (or /v1/voices/ID), or NULL. */
static const char *voice_id_of(const char *path)
{
	const char *p = !strncmp(path, "/v1/audio/voices/", 17) ? path + 17
			: !strncmp(path, "/v1/voices/", 11) ? path + 11 : NULL;
	return p && *p && !strchr(p, '/') ? p : NULL;
}

static enum route route_of(const char *path, const char **allow)
{
	*allow = "GET, HEAD";
	if (!strcmp(path, "/v1/audio/speech")) {
		*allow = "POST";
		return R_SPEECH;
	}
	if (!strcmp(path, "/v1/models"))
		return R_MODELS;
	if (!strncmp(path, "/v1/models/", 11) && path[11])
		return R_MODEL;
	if (!strcmp(path, "/v1/voices") || !strcmp(path, "/v1/audio/voices")) {
		*allow = "GET, HEAD, POST";
		return R_VOICES;
	}
	if (voice_id_of(path)) {
		*allow = "GET, HEAD, DELETE";
		return R_VOICE_ONE;
	}
	if (!strcmp(path, "/health"))
		return R_HEALTH;
	return R_NONE;
}

/* Constant time in the token's length: every byte is compared. */
static int token_ok(const char *got)
{
	size_t n = strlen(got);
	unsigned char d = n != token_len;
	for (size_t i = 0; i < token_len; i++)
		d |= (unsigned char)(token[i] ^ (i < n ? got[i] : 0));
	return d == 0;
}

/* Answers 401 unless the request carries the token; 1: it does. */
static int authorised(http_req *rq)
{
	const char *h = http_header(rq, "Authorization");
	if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) {
		fail(rq, 401, "invalid_request_error", NULL, NULL, NULL, "You didn't "
			    "provide an API key. You need to provide your API key in an "
			    "Authorization header using Bearer auth (i.e. Authorization: Bearer "
			    "YOUR_KEY): this server's key is in the file given to pcg-httpd "
			    "--token-file.");
		return 0;
	}
	h += 7;
	while (*h == ' ')
		h++;
	if (!token_ok(h)) {
		fail(rq, 401, "invalid_request_error", NULL, "invalid_api_key", NULL,
			   "Incorrect API key provided. This server's key is in the file given "
			   "to pcg-httpd --token-file.");
		return 0;
	}
	return 1;
}

/* After the head, in the loop: the token first, then the route and the
 * method; the body's limit, or -1 having answered. */
static long long on_head(http_req *h, void *arg)
{
	const char *allow, *method = h->method, *url = h->path;

	(void)arg;
	if (token_len && !authorised(h))
		return -1;
	enum route route = route_of(url, &allow);
	if (route == R_NONE) {
		fail(h, 404, "invalid_request_error", NULL, NULL, NULL, "Invalid URL (%s %.200s): "
		     "this server answers POST /v1/audio/speech, GET /v1/models, GET and POST "
		     "/v1/audio/voices, GET and DELETE /v1/audio/voices/ID and GET /health.",
		     method, url);
		return -1;
	}
	const int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	if (route == R_VOICES && !strcmp(method, "POST"))
		route = R_VOICE_ADD; /* a recording to clone (clones.h) */
	const int ok = route == R_SPEECH ? !strcmp(method, "POST")
		       : route == R_VOICE_ONE ? is_get || !strcmp(method, "DELETE")
		       : route == R_VOICE_ADD || is_get;
	if (!ok) {
		fail(h, 405, "invalid_request_error", NULL, NULL, allow, "Invalid method for URL "
		     "(%s %.200s): use %s.", method, url, allow);
		return -1;
	}
	if (h->content_length > body_limit(route)) {
		fail(h, 413, "invalid_request_error", NULL, NULL, NULL, "The request body is "
		     "larger than %lld bytes (%s).", body_limit(route), route == R_VOICE_ADD ?
		     "a recording: 32 MB" : route == R_VOICE_ONE ? "this request has none" :
		     "pcg-httpd --max-body");
		return -1;
	}
	h->tag = (int)route;
	return body_limit(route);
}

static void log_line(const http_req *h, const request *rq)
{
	if (rq && rq->sp && h->status == 200) {
		speech_stats st;
		const char *how = rq->sse ? " sse" : rq->stream ? " stream" : "";
		speech_get_stats(rq->sp, &st);
		if (st.done && !*h->why) {
			if (!quiet)
				fprintf(stderr, "%s: %s %s %s 200 %s%s: %.2f s of audio in %.2f s "
					"(first audio after %.3f s, %d piece%s, %ld tokens)\n", prog,
					h->peer, h->method, h->path, rq->fmt, how, st.audio_s,
					st.elapsed_s, st.first_audio_s, st.pieces,
					st.pieces == 1 ? "" : "s", st.speech_tokens);
		} else {
			const char *why = *h->why ? h->why : atomic_load(&stopping) ?
					  "the server is stopping: generation cancelled" :
					  "the client went away: generation cancelled";
			fprintf(stderr, "%s: %s %s %s 200 %s%s: the %s ended after %.2f s of "
				"audio in %.2f s: %s\n", prog, h->peer, h->method, h->path,
				rq->fmt, how, rq->stream ? "stream" : "response", st.audio_s,
				st.elapsed_s, why);
		}
	} else if (!quiet || h->status >= 500 || h->status == 499) {
		fprintf(stderr, "%s: %s %s %.200s %d (%.3f s)%s%s\n", prog, h->peer, h->method,
			h->path, h->status, h->t0 > 0 ? pcg_now() - h->t0 : 0.0,
			*h->why ? ": " : "", h->why);
	}
}

static void on_refused(const http_req *h, void *arg)
{
	(void)arg;
	log_line(h, NULL);
}

/* A complete request, in its own thread. */
static void on_request(http_req *h, void *arg)
{
	request rq = { .h = h };

	(void)arg;
	switch ((enum route)h->tag) {
	case R_SPEECH:
		speech_request(&rq);
		break;
	case R_MODELS:
		reply_fixed(h, models_json);
		break;
	case R_MODEL: {
		const char *id = h->path + 11;
		for (int i = 0; speech_models[i]; i++)
			if (!strcmp(id, speech_models[i])) {
				json_t *j = json_pack("{s:s,s:s,s:i,s:s}", "id", speech_models[i],
						      "object", "model", "created", 0,
						      "owned_by", "pcg-tts");
				reply_json(h, 200, j);
				goto done;
			}
		fail(h, 404, "invalid_request_error", "model", "model_not_found", NULL, "The model "
		     "'%.64s' does not exist: GET /v1/models lists them.", id);
		break;
	}
	case R_VOICES:
		list_voices(h);
		break;
	case R_VOICE_ADD:
		add_voice(h);
		break;
	case R_VOICE_ONE:
		one_voice(h, voice_id_of(h->path));
		break;
	case R_HEALTH:
		health(h);
		break;
	default:
		break;
	}
done:
	log_line(h, &rq);
	speech_free(&rq.sp);
	if (rq.counted)
		atomic_fetch_sub(&active, 1);
}

/* ---- start ---- */

static int reserved(const char *name)
{
	return voices_reserved(&voices, name);
}

/* The first line of a regular file of at most 64 kB (a device or a FIFO is
 * refused before it is read). */
static int read_token(const char *path, pcg_err *err)
{
	char *text;
	size_t size, n;

	if (pcg_read_small(path, 1 << 16, &text, &size, err) < 0) {
		pcg_err_prefix(err, "--token-file");
		return -1;
	}
	n = strcspn(text, "\r\n"); /* stops at a NUL too */
	if (n >= sizeof token || (text[n] == '\0' && n < size)) {
		free(text);
		return pcg_fail(err, "--token-file %s: the first line is %s", path,
				n >= sizeof token ? "too long for a token" : "not text");
	}
	memcpy(token, text, n);
	token[n] = '\0';
	free(text);
	token_len = n;
	while (token_len > 0 && (token[token_len - 1] == ' ' || token[token_len - 1] == '\t'))
		token_len--;
	token[token_len] = '\0';
	if (token_len == 0)
		return pcg_fail(err, "--token-file %s: the first line is empty (want the token)",
				path);
	return 0;
}

/* The options as every request's synth before its own fields, checked as
 * the verifier will check it (synth.h), a failure named by its flag. */
static int synth_defaults(proto_synth *q, pcg_err *err)
{
	static const char *const flags[] = {
		[PROTO_SF_LOOKAHEAD] = "--lookahead", [PROTO_SF_TEMP] = "--temp",
		[PROTO_SF_TOP_K] = "--top-k", [PROTO_SF_TOP_P] = "--top-p", [PROTO_SF_BETA] = "--beta",
		[PROTO_SF_MAX_TOKENS] = "--max-tokens", [PROTO_SF_CHUNK] = "--chunk",
		[PROTO_SF_LEFT] = "--chunk-left", [PROTO_SF_RIGHT] = "--chunk-right",
		[PROTO_SF_FIRST] = "--chunk-first",
	};
	proto_synth_field f;

	proto_synth_defaults(q);
	snprintf(q->policy, sizeof q->policy, "%s", policy);
	q->seed = (uint64_t)seed;
	q->lookahead = lookahead;
	q->samp = (pcg_sampling){ (float)temp, top_k, (float)top_p };
	q->beta = (float)beta;
	q->max_tokens = max_tokens;
	q->chunk = chunk;
	/* the default first chunk, not asked for, never beyond --chunk */
	q->first = pcg_opts_given(opts, "chunk-first") || chunk_first <= chunk ? chunk_first : chunk;
	q->left = chunk_left;
	q->right = chunk_right;
	q->audio = 1; /* in the progress messages of the stream */
	if (proto_synth_check(q, &f, err) == 0)
		return 0;
	pcg_err_prefix(err, (size_t)f < sizeof flags / sizeof *flags && flags[f] ? flags[f]
			    : proto_synth_field_name(f));
	return -1;
}

static void *run_server(void *d)
{
	http_run(d);
	return NULL;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	char vbuf[4200];
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || first != argc) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg : "no arguments besides options");
	}
	if (show_version) {
		printf("%s %s (pcg-tts, protocol %d)\n", prog, VERSION, PROTO_VERSION);
		return 0;
	}
	/* the address */
	union {
		struct sockaddr sa;
		struct sockaddr_in v4;
		struct sockaddr_in6 v6;
	} addr;
	memset(&addr, 0, sizeof addr);
	const char *a = !strcmp(listen_addr, "localhost") ? "127.0.0.1" : listen_addr;
	int v6 = 0, loopback;
	if (inet_pton(AF_INET, a, &addr.v4.sin_addr) == 1) {
		addr.v4.sin_family = AF_INET;
		addr.v4.sin_port = htons((uint16_t)port);
		loopback = (ntohl(addr.v4.sin_addr.s_addr) >> 24) == 127;
	} else if (inet_pton(AF_INET6, a, &addr.v6.sin6_addr) == 1) {
		v6 = 1;
		addr.v6.sin6_family = AF_INET6;
		addr.v6.sin6_port = htons((uint16_t)port);
		loopback = IN6_IS_ADDR_LOOPBACK(&addr.v6.sin6_addr) ||
			   (IN6_IS_ADDR_V4MAPPED(&addr.v6.sin6_addr) &&
			    addr.v6.sin6_addr.s6_addr[12] == 127);
	} else {
		fprintf(stderr, "%s: --listen %s: not an IPv4 or IPv6 address\n", prog, listen_addr);
		return 2;
	}
	if (!loopback && token_file == NULL) {
		fprintf(stderr, "%s: --listen %s is beyond loopback: clients there need a key, "
			"give --token-file FILE\n", prog, listen_addr);
		return 2;
	}
	if (token_file && read_token(token_file, &err) < 0) {
		pcg_report(prog, &err);
		return 1;
	}
	if (!speech_policy_known(policy)) {
		char list[512];
		fprintf(stderr, "%s: --policy %s: unknown (%s)\n", prog, policy,
			speech_policy_list(list, sizeof list));
		return 2;
	}
	const int conv = enc_resampler_parse(resampler);
	if (conv < 0) {
		fprintf(stderr, "%s: --resampler %s: unknown (fastest, medium, best)\n", prog,
			resampler);
		return 2;
	}
	if (voices_load(voice_path, &voices, &err) < 0) {
		fprintf(stderr, "%s: --voice %s\n", prog, err.msg);
		return 1;
	}
	enum clones_evict evict;
	if (!strcmp(voices_evict, "refuse")) {
		evict = CLONES_REFUSE;
	} else if (!strcmp(voices_evict, "oldest")) {
		evict = CLONES_OLDEST;
	} else {
		fprintf(stderr, "%s: --voices-evict %s: unknown (refuse, oldest)\n", prog,
			voices_evict);
		return 2;
	}
	if (clones_open(voices_dir, voices_max, evict, reserved, prog, &err) < 0) {
		pcg_report(prog, &err);
		return 1;
	}
	if ((models_json = make_models()) == NULL || (voices_json = make_voices()) == NULL) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return 1;
	}
	for (int f = 0; f < ENC_N_FORMATS; f++) /* asked once, before any thread */
		enc_supported((enc_format)f);

	void *ctx = zmq_ctx_new();
	if (ctx == NULL) {
		fprintf(stderr, "%s: zmq_ctx_new: %s\n", prog, zmq_strerror(zmq_errno()));
		return 1;
	}
	cfg = (speech_cfg){
		.zmq = ctx, .timeout_ms = timeout_ms, .piece_chars = piece_chars,
		.max_whole = (size_t)max_whole, .resampler = conv, .voices = &voices,
		.stop = &stopping,
	};
	if (synth_defaults(&cfg.synth, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return 2;
	}
	cfg.verifier = verifier_url ? verifier_url : net_default_verifier(vbuf, sizeof vbuf);
	if (net_endpoint_ok(cfg.verifier, 0, &err) < 0) {
		fprintf(stderr, "%s: --verifier %s\n", prog, err.msg);
		return 2;
	}

	/* signals: blocked in every thread (the server's inherit the mask),
	 * taken by sigwait below */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	const http_cfg hc = {
		.max_conns = max_conns, .max_per_client = max_per_client,
		.head_ms = head_timeout_ms, .body_ms = body_timeout_ms, .idle_ms = IDLE_MS,
		.on_head = on_head, .on_request = on_request, .on_refused = on_refused,
	};
	http_server *d = http_new(&addr.sa, v6 ? sizeof addr.v6 : sizeof addr.v4, &hc, &err);
	if (d == NULL) {
		fprintf(stderr, "%s: cannot listen on %s port %d: %s\n", prog, listen_addr, port,
			err.msg);
		zmq_ctx_term(ctx);
		return 1;
	}
	pthread_t loop;
	if (pthread_create(&loop, NULL, run_server, d) != 0) {
		fprintf(stderr, "%s: cannot start the server's thread\n", prog);
		return 1;
	}
	fprintf(stderr, "%s: listening on http://%s%s%s:%d/v1 (verifier %s, %d speaker%s)\n", prog,
		v6 ? "[" : "", a, v6 ? "]" : "", http_port(d), cfg.verifier,
		voices.n, voices.n == 1 ? "" : "s");

	int sig = 0;
	while (sigwait(&sigs, &sig) != 0)
		;
	atomic_store(&stopping, 1);
	if (!quiet)
		fprintf(stderr, "%s: %s: stopping\n", prog, strsignal(sig));
	http_stop(d);
	pthread_join(loop, NULL);
	http_free(&d);
	zmq_ctx_term(ctx);
	free(models_json);
	free(voices_json);
	return 0;
}
