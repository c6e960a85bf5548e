/* pcg-httpd: the pipeline behind OpenAI's text-to-speech HTTP API.
 *
 * POST /v1/audio/speech takes OpenAI's JSON body (speech.h checks it), has
 * the verifier speak the input piece by piece, and streams the audio back
 * as it is made, chunked, in the format asked for (encode.h), or as
 * server-sent events; GET /v1/models, /v1/voices and /health answer what
 * clients ask before. Errors are OpenAI's: a status and
 * {"error": {"message", "type", "param", "code"}}.
 *
 * libmicrohttpd runs each connection in its own thread
 * (MHD_USE_THREAD_PER_CONNECTION), and a speech opens its own DEALER
 * socket there, so every ZeroMQ socket stays in one thread. That thread
 * blocks in the content reader until the pipeline sends audio, watching
 * the client's socket meanwhile: a client that goes away cancels its
 * generation within a round. Signals are blocked in every thread but
 * waited for by main, which then stops the daemon.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
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

#include "client.h"
#include "clones.h"
#include "fileio.h"
#include "net.h"
#include "opts.h"
#include "proto.h"
#include "speech.h"

#define VERSION "1.0"
#define IDLE_S 60 /* a connection that neither sends nor reads this long is closed */

static const char *prog = "pcg-httpd";
static const char *SYNOPSIS = "[--listen ADDR] [--port N] [--token-file FILE] [--voice FILE] "
			      "[--verifier URL] [options]";

static const char *listen_addr, *token_file, *voice_path, *verifier_url, *policy, *resampler;
static int port, max_requests, timeout_ms, piece_chars, chunk, chunk_left, chunk_right;
static int max_tokens, seed, lookahead, top_k, quiet, show_version;
static long long max_body;
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
	{ "timeout-ms", PCG_OPT_INT, &timeout_ms, "30000", 100, 86400000, "N",
	  "a running request whose pipeline sends nothing this long is given up (503)" },
	{ "piece-chars", PCG_OPT_INT, &piece_chars, "300", 20, 4000, "N",
	  "a longer input is spoken in pieces of at most N characters, cut at sentence ends" },
	{ "chunk", PCG_OPT_INT, &chunk, "25", 1, PROTO_MAX_APPEND, "N",
	  "the audio comes in chunks of N codes" },
	{ "chunk-left", PCG_OPT_INT, &chunk_left, "50", 0, PROTO_MAX_APPEND, "N",
	  "codes before a chunk decoded with it" },
	{ "chunk-right", PCG_OPT_INT, &chunk_right, "4", 0, PROTO_MAX_APPEND, "N",
	  "codes after a chunk decoded with it" },
	{ "resampler", PCG_OPT_STR, &resampler, "medium", 1, 0, "NAME",
	  "libsamplerate's converter to 24 kHz: fastest, medium or best" },
	{ "max-tokens", PCG_OPT_INT, &max_tokens, "1500", 1, PROTO_MAX_APPEND, "N",
	  "speech tokens per piece at most (50 per second)" },
	{ "policy", PCG_OPT_STR, &policy, "pcg", 1, 0, "NAME",
	  "the verification policy of a request that names none (as pcg-synth's)" },
	{ "seed", PCG_OPT_INT, &seed, "1", 0, 2147483647, "N",
	  "the seed of a request that names none" },
	{ "lookahead", PCG_OPT_INT, &lookahead, "3", 1, PROTO_MAX_N - 1, "L",
	  "tokens drafted per round" },
	{ "temp", PCG_OPT_FLOAT, &temp, "0.8", 0, 100, "T", "temperature" },
	{ "top-k", PCG_OPT_INT, &top_k, "50", 0, 1 << 30, "K", "top-k (0: off)" },
	{ "top-p", PCG_OPT_FLOAT, &top_p, "1", 1e-6, 1, "P", "top-p (1: off)" },
	{ "beta", PCG_OPT_FLOAT, &beta, "0.4", 0, 1, "B", "ssd's tolerance" },
	{ "quiet", PCG_OPT_FLAG, &quiet, NULL, 1, 0, NULL, "no line per request on stderr" },
	{ "version", PCG_OPT_FLAG, &show_version, NULL, 1, 0, NULL, "print the version and exit" },
	{ NULL },
};

static atomic_int stopping, active;
static speech_cfg cfg;
static speech_voices voices;
static char token[512];
static size_t token_len;
static char *models_json, *voices_json; /* fixed answers, made at start */

enum route { R_NONE, R_SPEECH, R_MODELS, R_MODEL, R_VOICES, R_VOICE_ADD, R_HEALTH };

/* One HTTP request, from its first call to the completion callback. */
typedef struct request {
	enum route route;
	char method[16], path[96], peer[64];
	char *body;
	size_t len, cap;
	int too_large;
	int counted;           /* holds one of --max-requests */
	int status;
	speech *sp;
	struct MHD_Connection *conn;
	enc_format format;
	int sse;
	double t0;
	char fmt[8];           /* its name, for the log */
	char why[600];         /* for the log: what went wrong */
} request;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- responses ---- */

static enum MHD_Result reply(struct MHD_Connection *c, request *rq, int status, char *body,
			     const char *type, const char *allow)
{
	struct MHD_Response *r;
	enum MHD_Result ok;

	if (body == NULL)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (r == NULL) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	ok = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	rq->status = status;
	return ok;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, request *rq, int status, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (s) { /* a newline after the object, as curl users like it */
		char *t = realloc(s, strlen(s) + 2);
		if (t)
			strcat(s = t, "\n");
	}
	return reply(c, rq, status, s, "application/json", NULL);
}

static json_t *error_json(const api_error *e)
{
	return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type", e->type,
			 "param", *e->param ? json_string(e->param) : json_null(), "code",
			 *e->code ? json_string(e->code) : json_null());
}

static enum MHD_Result reply_error(struct MHD_Connection *c, request *rq, const api_error *e,
				   const char *allow)
{
	json_t *j = error_json(e);
	char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
	json_decref(j);
	snprintf(rq->why, sizeof rq->why, "%s", e->message);
	if (s) {
		char *t = realloc(s, strlen(s) + 2);
		if (t)
			strcat(s = t, "\n");
	}
	return reply(c, rq, e->status, s, "application/json", allow);
}

static enum MHD_Result fail(struct MHD_Connection *c, request *rq, int status, const char *type,
			    const char *param, const char *code, const char *allow,
			    const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static enum MHD_Result fail(struct MHD_Connection *c, request *rq, int status, const char *type,
			    const char *param, const char *code, const char *allow,
			    const char *fmt, ...)
{
	api_error e;
	va_list ap;
	api_fail(&e, status, type, param, code, "%s", "");
	va_start(ap, fmt);
	vsnprintf(e.message, sizeof e.message, fmt, ap);
	va_end(ap);
	return reply_error(c, rq, &e, allow);
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
	for (int i = 0; speech_openai_voices[i]; i++) {
		const int k = i % voices.n;
		json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id",
						      speech_openai_voices[i], "object", "voice",
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

static enum MHD_Result reply_fixed(struct MHD_Connection *c, request *rq, const char *body)
{
	size_t n = strlen(body);
	char *s = malloc(n + 2);
	if (s) {
		memcpy(s, body, n);
		memcpy(s + n, "\n", 2);
	}
	return reply(c, rq, 200, s, "application/json", NULL);
}

/* GET /health: the verifier answers a ping through every stage. */
static enum MHD_Result health(struct MHD_Connection *c, request *rq)
{
	pcg_err err = { "" };
	proto_msg *q = calloc(1, sizeof *q), *r = calloc(1, sizeof *r);
	pcg_client *cl = NULL;
	json_t *j;
	int up = 0;

	if (q && r && net_listening(cfg.verifier) &&
	    (cl = client_new(cfg.zmq, cfg.verifier, 3000, 1, &err)) != NULL) {
		q->type = PROTO_PING;
		up = client_call(cl, q, r, &err) == 0 && r->type == PROTO_PONG;
		if (!up && r->type == PROTO_ERROR)
			snprintf(err.msg, sizeof err.msg, "%s", r->error.msg);
	} else if (q && r && !*err.msg) {
		snprintf(err.msg, sizeof err.msg, "nobody listens at %s: start it with pcg-up",
			 cfg.verifier);
	}
	client_free(&cl);
	if (up)
		j = json_pack("{s:s,s:s,s:i,s:i,s:s}", "status", "ok", "pipeline", r->pong.msg,
			      "requests", atomic_load(&active), "max_requests", max_requests,
			      "version", VERSION);
	else
		j = json_pack("{s:s,s:{s:s,s:s,s:n,s:n}}", "status", "unavailable", "error",
			      "message", *err.msg ? err.msg : "out of memory", "type",
			      "server_error", "param", "code");
	free(q);
	free(r);
	return reply_json(c, rq, up ? 200 : 503, j);
}

/* ---- speech ---- */

/* Restarts libmicrohttpd's idle clock of a connection. It counts the time
 * our callbacks wait for the pipeline as idle time, so a speech that
 * waited longer than the connection timeout (a queue, a slow first chunk)
 * would be closed as it is about to send; only the time the client takes
 * to read should count. Setting the timeout from 0 to a value restarts the
 * clock. */
static void touch(struct MHD_Connection *c)
{
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_S);
}

static ssize_t read_audio(void *cls, uint64_t pos, char *buf, size_t max)
{
	request *rq = cls;
	api_error e;
	size_t n;

	(void)pos;
	int rc = speech_pump(rq->sp, 0, &e);
	if (rc == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (rc < 0) {
		snprintf(rq->why, sizeof rq->why, "%s", e.status == 499 ? "the client went away: "
			 "generation cancelled" : e.message);
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	const unsigned char *p = speech_bytes(rq->sp, &n);
	if (n > max)
		n = max;
	memcpy(buf, p, n);
	speech_take(rq->sp, n);
	touch(rq->conn);
	return (ssize_t)n;
}

static enum MHD_Result speech_request(struct MHD_Connection *c, request *rq)
{
	api_error e;
	speech_req sr;

	if (rq->too_large)
		return fail(c, rq, 413, "invalid_request_error", NULL, NULL, NULL, "The request "
			    "body is larger than %lld bytes (pcg-httpd --max-body).", max_body);
	if (speech_parse(rq->body ? rq->body : "", rq->len, &cfg, &sr, &e) < 0)
		return reply_error(c, rq, &e, NULL);
	rq->format = sr.fmt;
	rq->sse = sr.sse;
	snprintf(rq->fmt, sizeof rq->fmt, "%s", enc_format_name(sr.fmt));
	if (atomic_fetch_add(&active, 1) >= max_requests) {
		atomic_fetch_sub(&active, 1);
		speech_req_free(&sr);
		return fail(c, rq, 429, "requests", NULL, "rate_limit_exceeded", NULL, "Too many "
			    "requests at once: this server speaks %d at a time (pcg-httpd "
			    "--max-requests). Try again when one has finished.", max_requests);
	}
	rq->counted = 1;
	rq->conn = c;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	rq->sp = speech_start(&cfg, &sr, ci ? ci->connect_fd : -1, &e);
	speech_req_free(&sr);
	if (rq->sp == NULL)
		return reply_error(c, rq, &e, NULL);
	/* the status waits for the first audio: until then an error is still
	 * an error status, not a broken stream */
	if (speech_pump(rq->sp, 1, &e) < 0) {
		if (e.status == 499) { /* nobody to answer */
			rq->status = 499;
			snprintf(rq->why, sizeof rq->why, "%s", "the client went away: generation "
				 "cancelled");
			return MHD_NO;
		}
		touch(c);
		return reply_error(c, rq, &e, NULL);
	}
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
								   read_audio, rq, NULL);
	if (r == NULL)
		return MHD_NO;
	const char *type = rq->sse ? "text/event-stream" : enc_content_type(rq->format);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	touch(c);
	enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	rq->status = 200;
	return ok;
}

/* ---- cloned voices ---- */

/* A request's body may hold this many bytes: a recording more than JSON. */
static long long body_limit(const request *rq)
{
	return rq->route == R_VOICE_ADD ? CLONES_MAX_BYTES : max_body;
}

/* GET /v1/audio/voices: the model's voices, then those registered. */
static enum MHD_Result list_voices(struct MHD_Connection *c, request *rq)
{
	json_error_t je;
	json_t *j = json_loads(voices_json, 0, &je);
	json_t *data = j ? json_object_get(j, "data") : NULL;

	if (data == NULL) {
		json_decref(j);
		return reply_fixed(c, rq, voices_json);
	}
	clones_list(data);
	char *body = json_dumps(j, JSON_INDENT(2)); /* as the fixed list is written */
	json_decref(j);
	if (body == NULL)
		return reply_fixed(c, rq, voices_json);
	enum MHD_Result r = reply_fixed(c, rq, body);
	free(body);
	return r;
}

/* POST /v1/audio/voices?name=NAME&transcript=TEXT with the recording as the
 * body (any audio file libsndfile reads, up to 30 s): a voice for "voice". */
static enum MHD_Result add_voice(struct MHD_Connection *c, request *rq)
{
	const char *name = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "name");
	const char *text = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "transcript");
	char msg[600];
	int status = 0;

	if (rq->too_large)
		return fail(c, rq, 413, "invalid_request_error", NULL, NULL, NULL, "The recording "
			    "is larger than %d bytes.", CLONES_MAX_BYTES);
	if (name == NULL || text == NULL)
		return fail(c, rq, 400, "invalid_request_error", name ? "transcript" : "name",
			    "missing_required_parameter", NULL, "POST /v1/audio/voices?name=NAME&"
			    "transcript=TEXT with the recording as the body: '%s' is missing.",
			    name ? "transcript" : "name");
	const clone_voice *v = clones_add(name, text, rq->body, rq->len, &status, msg, sizeof msg);
	if (v == NULL)
		return fail(c, rq, status, "invalid_request_error", status == 409 ? "name" : NULL,
			    NULL, NULL, "%s", msg);
	return reply_json(c, rq, 200, clones_json(v));
}

/* ---- routing ---- */

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
static int authorised(struct MHD_Connection *c, request *rq, enum MHD_Result *ok)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						    MHD_HTTP_HEADER_AUTHORIZATION);
	if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) {
		*ok = fail(c, rq, 401, "invalid_request_error", NULL, NULL, NULL, "You didn't "
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
		*ok = fail(c, rq, 401, "invalid_request_error", NULL, "invalid_api_key", NULL,
			   "Incorrect API key provided. This server's key is in the file given "
			   "to pcg-httpd --token-file.");
		return 0;
	}
	return 1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	request *rq = *con_cls;
	const char *allow;

	(void)cls;
	(void)version;
	if (rq == NULL) {
		if ((rq = calloc(1, sizeof *rq)) == NULL)
			return MHD_NO;
		*con_cls = rq;
		rq->t0 = now_s();
		snprintf(rq->method, sizeof rq->method, "%s", method);
		snprintf(rq->path, sizeof rq->path, "%s", url);
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		if (ci && ci->client_addr) {
			const struct sockaddr *a = ci->client_addr;
			if (a->sa_family == AF_INET)
				inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr,
					  rq->peer, sizeof rq->peer);
			else if (a->sa_family == AF_INET6)
				inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr,
					  rq->peer, sizeof rq->peer);
		}
		/* refused before the body is read: the connection closes after */
		enum MHD_Result ok;
		if (token_len && !authorised(c, rq, &ok))
			return ok;
		rq->route = route_of(url, &allow);
		if (rq->route == R_NONE)
			return fail(c, rq, 404, "invalid_request_error", NULL, NULL, NULL,
				    "Invalid URL (%s %s): this server answers POST /v1/audio/speech, "
				    "GET /v1/models, GET and POST /v1/voices and GET /health.", method,
				    url);
		const int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
		if (rq->route == R_VOICES && !strcmp(method, "POST"))
			rq->route = R_VOICE_ADD; /* a recording to clone (clones.h) */
		if (rq->route == R_SPEECH ? strcmp(method, "POST")
					  : rq->route != R_VOICE_ADD && !is_get)
			return fail(c, rq, 405, "invalid_request_error", NULL, NULL, allow,
				    "Invalid method for URL (%s %s): use %s.", method, url,
				    rq->route == R_SPEECH ? "POST" : "GET");
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							     MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > (unsigned long long)body_limit(rq))
			return fail(c, rq, 413, "invalid_request_error", NULL, NULL, NULL,
				    "The request body is larger than %lld bytes (pcg-httpd "
				    "--max-body; a recording: 32 MB).", body_limit(rq));
		return MHD_YES;
	}
	if (rq->status) /* answered at the first call; the body is not read */
		return MHD_YES;
	if (*upload_size > 0) {
		if (!rq->too_large && rq->len + *upload_size > (size_t)body_limit(rq))
			rq->too_large = 1;
		if (!rq->too_large) {
			if (rq->len + *upload_size + 1 > rq->cap) {
				size_t cap = rq->cap ? rq->cap * 2 : 4096;
				while (cap < rq->len + *upload_size + 1)
					cap *= 2;
				char *b = realloc(rq->body, cap);
				if (b == NULL)
					return MHD_NO;
				rq->body = b;
				rq->cap = cap;
			}
			memcpy(rq->body + rq->len, upload, *upload_size);
			rq->len += *upload_size;
			rq->body[rq->len] = '\0';
		}
		*upload_size = 0;
		return MHD_YES;
	}
	switch (rq->route) {
	case R_SPEECH:
		return speech_request(c, rq);
	case R_MODELS:
		return reply_fixed(c, rq, models_json);
	case R_MODEL:
		for (int i = 0; speech_models[i]; i++)
			if (!strcmp(url + 11, speech_models[i])) {
				json_t *j = json_pack("{s:s,s:s,s:i,s:s}", "id", speech_models[i],
						      "object", "model", "created", 0,
						      "owned_by", "pcg-tts");
				return reply_json(c, rq, 200, j);
			}
		return fail(c, rq, 404, "invalid_request_error", "model", "model_not_found", NULL,
			    "The model '%.64s' does not exist: GET /v1/models lists them.",
			    url + 11);
	case R_VOICES:
		return list_voices(c, rq);
	case R_VOICE_ADD:
		return add_voice(c, rq);
	case R_HEALTH:
		return health(c, rq);
	default:
		return MHD_NO;
	}
}

/* The end of a request, however it ended: a speech still running is
 * cancelled (the client went away), and one line goes to the log. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	request *rq = *con_cls;

	(void)cls;
	(void)c;
	if (rq == NULL)
		return;
	*con_cls = NULL;
	if (rq->sp && rq->status == 200) {
		speech_stats st;
		speech_get_stats(rq->sp, &st);
		if (st.done && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
			if (!quiet)
				fprintf(stderr, "%s: %s %s %s 200 %s%s: %.2f s of audio in %.2f s "
					"(first audio after %.3f s, %d piece%s, %ld tokens)\n", prog,
					rq->peer, rq->method, rq->path, rq->fmt, rq->sse ? " sse" : "",
					st.audio_s, st.elapsed_s, st.first_audio_s, st.pieces,
					st.pieces == 1 ? "" : "s", st.speech_tokens);
		} else {
			fprintf(stderr, "%s: %s %s %s 200 %s%s: the stream ended after %.2f s of "
				"audio in %.2f s: %s\n", prog, rq->peer, rq->method, rq->path,
				rq->fmt, rq->sse ? " sse" : "", st.audio_s, st.elapsed_s,
				*rq->why ? rq->why : atomic_load(&stopping) ? "the server is stopping: "
				"generation cancelled" : "the client went away: generation cancelled");
		}
	} else if (!quiet || rq->status >= 500 || rq->status == 499) {
		fprintf(stderr, "%s: %s %s %s %d (%.3f s)%s%s\n", prog, rq->peer, rq->method,
			rq->path, rq->status, now_s() - rq->t0, *rq->why ? ": " : "", rq->why);
	}
	speech_free(&rq->sp);
	if (rq->counted)
		atomic_fetch_sub(&active, 1);
	free(rq->body);
	free(rq);
}

/* ---- start ---- */

/* libmicrohttpd's messages, as ours; the two that follow a client that
 * went away (or a stream that broke) are logged by on_completed already. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	(void)cls;
	vsnprintf(msg, sizeof msg, fmt, ap);
	if (!strncmp(msg, "Application reported internal error", 35) ||
	    !strncmp(msg, "Closing connection (application error", 37))
		return;
	msg[strcspn(msg, "\n")] = '\0';
	fprintf(stderr, "%s: libmicrohttpd: %s\n", prog, msg);
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
		pcg_die(prog, &err);
		return 1;
	}
	int known = 0;
	for (int i = 0; speech_policies[i]; i++)
		known |= !strcmp(policy, speech_policies[i]);
	if (!known) {
		fprintf(stderr, "%s: --policy %s: unknown (", prog, policy);
		for (int i = 0; speech_policies[i]; i++)
			fprintf(stderr, "%s%s", i ? ", " : "", speech_policies[i]);
		fprintf(stderr, ")\n");
		return 2;
	}
	const int conv = enc_resampler_parse(resampler);
	if (conv < 0) {
		fprintf(stderr, "%s: --resampler %s: unknown (fastest, medium, best)\n", prog,
			resampler);
		return 2;
	}
	if (speech_voices_load(voice_path, &voices, &err) < 0) {
		fprintf(stderr, "%s: --voice %s\n", prog, err.msg);
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
		.zmq = ctx, .timeout_ms = timeout_ms, .piece_chars = piece_chars, .chunk = chunk,
		.left = chunk_left, .right = chunk_right, .max_tokens = max_tokens, .resampler = conv,
		.policy = policy, .seed = seed, .lookahead = lookahead, .top_k = top_k,
		.temp = temp, .top_p = top_p, .beta = beta, .voices = &voices, .stop = &stopping,
	};
	cfg.verifier = verifier_url ? verifier_url : net_default_verifier(vbuf, sizeof vbuf);
	if (net_endpoint_ok(cfg.verifier, 0, &err) < 0) {
		fprintf(stderr, "%s: --verifier %s\n", prog, err.msg);
		return 2;
	}

	/* signals: blocked in every thread (libmicrohttpd's inherit the mask),
	 * taken by sigwait below */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
			 MHD_USE_AUTO | MHD_USE_ITC | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
	struct MHD_Daemon *d = MHD_start_daemon(
		flags, (uint16_t)port, NULL, NULL, on_request, NULL,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
		MHD_OPTION_SOCK_ADDR, &addr.sa,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)(max_requests + 64),
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_S,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
		MHD_OPTION_END);
	if (d == NULL) {
		fprintf(stderr, "%s: cannot listen on %s port %d: %s\n", prog, listen_addr, port,
			errno ? strerror(errno) : "libmicrohttpd refused");
		zmq_ctx_term(ctx);
		return 1;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	fprintf(stderr, "%s: listening on http://%s%s%s:%u/v1 (verifier %s, %d speaker%s)\n", prog,
		v6 ? "[" : "", a, v6 ? "]" : "", di ? di->port : (unsigned)port, cfg.verifier,
		voices.n, voices.n == 1 ? "" : "s");

	int sig = 0;
	while (sigwait(&sigs, &sig) != 0)
		;
	atomic_store(&stopping, 1);
	if (!quiet)
		fprintf(stderr, "%s: %s: stopping\n", prog, strsignal(sig));
	MHD_stop_daemon(d);
	zmq_ctx_term(ctx);
	free(models_json);
	free(voices_json);
	return 0;
}
