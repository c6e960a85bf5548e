/* speech.c: one POST /v1/audio/speech: the body checked, the input spoken
 * piece by piece by the pipeline, the audio encoded as it comes (see
 * speech.h). */
#include "speech.h"
#include "clock.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <zmq.h>

#include "clones.h"
#include "net.h"
#include "policy.h"
#include "proto.h"
#include "speculate.h"
#include "split.h"

#define POLL_MS 100       /* the longest wait between looks at the client and the clock */
#define SSE_RAW_MAX 12288 /* encoded bytes per SSE event at most (16 KB of base64) */

const char *const speech_models[] = {
	"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15", "pcg", NULL,
};
int speech_policy_known(const char *name)
{
	int mtp, viterbi, none, kind;

	return spec_policy_parse(name, &mtp, &viterbi, &none, &kind) == 0;
}

const char *speech_policy_list(char *buf, size_t size)
{
	char rules[256];

	snprintf(buf, size, "'none', 'mtp-viterbi', a rule (%s) or 'mtp-' and a rule",
		 policy_names(rules, sizeof rules, " or "));
	return buf;
}

int api_fail(api_error *e, int status, const char *type, const char *param, const char *code,
	     const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	e->type = type;
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	snprintf(e->code, sizeof e->code, "%s", code ? code : "");
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof e->message, fmt, ap);
	va_end(ap);
	return -1;
}

#define BAD(e, param, code, ...) api_fail(e, 400, "invalid_request_error", param, code, __VA_ARGS__)

/* "a, b, c or d" of a NULL-terminated list, into buf. */
static const char *list_of(const char *const *l, const char *quote, char *buf, size_t n)
{
	size_t k = 0, count = 0;
	while (l[count])
		count++;
	buf[0] = '\0';
	for (size_t i = 0; i < count && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%s%s%s", i == 0 ? "" : i + 1 == count ?
				      " or " : ", ", quote, l[i], quote);
	return buf;
}

/* ---- the request ---- */

static const char *json_kind(const json_t *j)
{
	switch (json_typeof(j)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	default: return "null";
	}
}

/* An optional string field: 0 (absent: *out untouched), 1, -1 with e. */
static int get_string(json_t *root, const char *key, const char **out, api_error *e)
{
	json_t *j = json_object_get(root, key);
	if (j == NULL)
		return 0;
	if (!json_is_string(j))
		return BAD(e, key, "invalid_type", "Invalid type for '%s': expected a string, but "
			   "got %s instead.", key, json_kind(j));
	*out = json_string_value(j);
	return 1;
}

/* An optional number field in [lo, hi]. */
static int get_number(json_t *root, const char *key, double lo, double hi, int integer,
		      double *out, api_error *e)
{
	json_t *j = json_object_get(root, key);
	if (j == NULL)
		return 0;
	if (!json_is_integer(j) && (integer || !json_is_real(j)))
		return BAD(e, key, "invalid_type", "Invalid type for '%s': expected %s, but got %s "
			   "instead.", key, integer ? "an integer" : "a number", json_kind(j));
	double d = json_number_value(j);
	if (d < lo)
		return BAD(e, key, "decimal_below_min_value", "Invalid '%s': below its minimum "
			   "value. Expected a value >= %g, but got %g instead.", key, lo, d);
	if (d > hi)
		return BAD(e, key, "decimal_above_max_value", "Invalid '%s': above its maximum "
			   "value. Expected a value <= %g, but got %g instead.", key, hi, d);
	*out = d;
	return 1;
}

static int missing(api_error *e, const char *key)
{
	return BAD(e, key, "missing_required_parameter", "Missing required parameter: '%s'.", key);
}

/* The steps of speech_parse, one field or a few each, in the order the
 * fields are checked: 0, or -1 with e. */

/* model: one of speech_models. */
static int take_model(json_t *root, const speech_cfg *cfg, speech_req *r, api_error *e)
{
	const char *s;
	char buf[1200];
	int known = 0;

	(void)cfg;
	if (json_object_get(root, "model") == NULL)
		return missing(e, "model");
	if (get_string(root, "model", &s, e) < 0)
		return -1;
	for (int i = 0; speech_models[i]; i++)
		known |= !strcmp(s, speech_models[i]);
	if (!known)
		return BAD(e, "model", "invalid_value", "Invalid value for 'model': '%.64s'. "
			   "Supported models are %s.", s,
			   list_of(speech_models, "'", buf, sizeof buf));
	snprintf(r->model, sizeof r->model, "%s", s);
	return 0;
}

/* input: text of 1 to SPEECH_MAX_INPUT characters, not only white space
 * (copied at the end of speech_parse). */
static int take_input(json_t *root, const speech_cfg *cfg, speech_req *r, api_error *e)
{
	json_t *j = json_object_get(root, "input");
	const char *s;

	(void)cfg;
	if (j == NULL)
		return missing(e, "input");
	if (get_string(root, "input", &s, e) < 0)
		return -1;
	const size_t bytes = json_string_length(j);
	if (strlen(s) != bytes)
		return BAD(e, "input", "invalid_value", "Invalid 'input': it holds a NUL character; "
			   "send text.");
	r->input_chars = split_chars(s, bytes);
	if (r->input_chars == 0)
		return BAD(e, "input", "string_below_min_length", "Invalid 'input': string too "
			   "short. Expected a string with minimum length 1, but got an empty string "
			   "instead.");
	if (r->input_chars > SPEECH_MAX_INPUT)
		return BAD(e, "input", "string_above_max_length", "Invalid 'input': string too long. "
			   "Expected a string with maximum length %d, but got a string with length "
			   "%zu instead. Split the text into several requests.", SPEECH_MAX_INPUT,
			   r->input_chars);
	if (strspn(s, " \t\r\n\f\v") == bytes)
		return BAD(e, "input", "invalid_value", "Invalid 'input': it holds only white space; "
			   "send text to speak.");
	return 0;
}

/* voice: the model's own or a registered one (voices.h). */
static int take_voice(json_t *root, const speech_cfg *cfg, speech_req *r, api_error *e)
{
	json_t *j = json_object_get(root, "voice");
	char buf[1200], shown[80];

	if (j == NULL)
		return missing(e, "voice");
	if (voices_find(cfg->voices, j, &r->speaker, &r->clone) == 0)
		return 0;
	const json_t *id = json_is_object(j) ? json_object_get(j, "id") : j;
	const char *name = json_string_value(id);
	if (name)
		snprintf(shown, sizeof shown, "'%.64s'", name);
	else if (json_is_integer(j))
		snprintf(shown, sizeof shown, "%lld", (long long)json_integer_value(j));
	else
		snprintf(shown, sizeof shown, "%s", json_kind(j));
	return BAD(e, "voice", "invalid_value", "Invalid value for 'voice': %s. Supported voices "
		   "are %s.", shown, voices_describe(cfg->voices, buf, sizeof buf));
}

/* response_format: one this server's libsndfile encodes (default mp3). */
static int take_format(json_t *root, const speech_cfg *cfg, speech_req *r, api_error *e)
{
	const char *s = NULL;

	(void)cfg;
	r->fmt = ENC_MP3;
	if (get_string(root, "response_format", &s, e) < 0)
		return -1;
	if (s && enc_format_parse(s, &r->fmt) < 0)
		return BAD(e, "response_format", "invalid_value", "Invalid value for "
			   "'response_format': '%.32s'. Supported values are: 'mp3', 'opus', "
			   "'aac', 'flac', 'wav', and 'pcm'.", s);
	if (!enc_supported(r->fmt)) {
		char ok[100] = "";
		for (int f = 0; f < ENC_N_FORMATS; f++)
			if (enc_supported((enc_format)f))
				snprintf(ok + strlen(ok), sizeof ok - strlen(ok), "%s'%s'",
					 *ok ? ", " : "", enc_format_name((enc_format)f));
		return BAD(e, "response_format", "unsupported_value", "response_format '%s' is not "
			   "supported by this server (its libsndfile has no %s encoder). Use one of "
			   "%s.", enc_format_name(r->fmt), r->fmt == ENC_AAC ? "AAC" : "such", ok);
	}
	return 0;
}

/* speed, stream_format and instructions (taken and ignored: the voices
 * have no style control). stream_format, "audio" as well as "sse", asks
 * for a stream; without it the response is the whole file with its length
 * (curl's usual request, and every WAV whose header must say its size). */
static int take_delivery(json_t *root, const speech_cfg *cfg, speech_req *r, api_error *e)
{
	const char *s = NULL;

	(void)cfg;
	r->speed = 1.0;
	if (get_number(root, "speed", 0.25, 4.0, 0, &r->speed, e) < 0)
		return -1;
	if (get_string(root, "stream_format", &s, e) < 0)
		return -1;
	if (s && strcmp(s, "audio") && strcmp(s, "sse"))
		return BAD(e, "stream_format", "invalid_value", "Invalid value for 'stream_format': "
			   "'%.32s'. Supported values are: 'sse' and 'audio'.", s);
	r->stream = s != NULL;
	r->sse = s && !strcmp(s, "sse");
	return get_string(root, "instructions", &s, e) < 0 ? -1 : 0;
}

/* The JSON field that sets a synth's field, for an error about it. */
static const char *json_field(proto_synth_field f)
{
	switch (f) {
	case PROTO_SF_LOOKAHEAD: return "lookahead";
	case PROTO_SF_TEMP: return "temperature";
	case PROTO_SF_TOP_K: return "top_k";
	case PROTO_SF_TOP_P: return "top_p";
	case PROTO_SF_BETA: return "beta";
	default: return NULL; /* the server's options: a request cannot set it */
	}
}

/* The request's synth checked as the verifier will check it (synth.h). */
static int check_synth(const proto_synth *q, api_error *e)
{
	pcg_err err = { "" };
	proto_synth_field f;

	if (proto_synth_check(q, &f, &err) == 0)
		return 0;
	const char *key = json_field(f);
	if (key == NULL)
		return api_fail(e, 500, "server_error", NULL, NULL, "The server's own settings "
				"make a request the pipeline refuses (field '%s': %s).",
				proto_synth_field_name(f), err.msg);
	return BAD(e, key, "invalid_value", "Invalid '%s': %s.", key, err.msg);
}

/* pcg's own: the policy and its knobs, cfg's where absent. */
static int take_pcg(json_t *root, const speech_cfg *cfg, speech_req *r, api_error *e)
{
	const char *s = NULL;
	char buf[1200];

	if ((r->synth = malloc(sizeof *r->synth)) == NULL)
		return api_fail(e, 500, "server_error", NULL, NULL, "The server is out of memory.");
	proto_synth *q = r->synth;
	*q = cfg->synth;
	if (get_string(root, "policy", &s, e) < 0)
		return -1;
	if (s) {
		if (!speech_policy_known(s))
			return BAD(e, "policy", "invalid_value", "Invalid value for 'policy': '%.32s'. "
				   "Supported values are %s.", s, speech_policy_list(buf, sizeof buf));
		snprintf(q->policy, sizeof q->policy, "%s", s);
	}
	/* absent ones keep cfg's (a float's value comes back the same) */
	double seed = (double)q->seed, la = q->lookahead, k = q->samp.top_k;
	double t = q->samp.temperature, p = q->samp.top_p, b = q->beta;
	if (get_number(root, "seed", 0, PROTO_SYNTH_SEED_MAX, 1, &seed, e) < 0 ||
	    get_number(root, "lookahead", 0, PROTO_MAX_LOOKAHEAD, 1, &la, e) < 0 ||
	    get_number(root, "top_k", 0, PROTO_SYNTH_TOP_K_MAX, 1, &k, e) < 0 ||
	    get_number(root, "temperature", 0, PROTO_SYNTH_TEMP_MAX, 0, &t, e) < 0 ||
	    get_number(root, "top_p", PROTO_SYNTH_TOP_P_MIN, 1, 0, &p, e) < 0 ||
	    get_number(root, "beta", 0, PROTO_SYNTH_BETA_MAX, 0, &b, e) < 0)
		return -1;
	q->seed = (uint64_t)seed;
	q->lookahead = (int)la;
	q->samp = (pcg_sampling){ (float)t, (int)k, (float)p };
	q->beta = (float)b;
	return check_synth(q, e);
}

int speech_parse(const char *body, size_t len, const speech_cfg *cfg, speech_req *r,
		 api_error *e)
{
	static int (*const steps[])(json_t *, const speech_cfg *, speech_req *, api_error *) = {
		take_model, take_input, take_voice, take_format, take_delivery, take_pcg,
	};
	json_error_t je;
	json_t *root = json_loadb(body, len, 0, &je);
	int rc = -1;

	memset(r, 0, sizeof *r);
	if (root == NULL || !json_is_object(root)) {
		if (root)
			snprintf(je.text, sizeof je.text, "the body is %s, not an object",
				 json_kind(root));
		BAD(e, NULL, NULL, "We could not parse the JSON body of your request (%s). Send a "
		    "JSON object such as {\"model\": \"tts-1\", \"input\": \"Hello.\", \"voice\": "
		    "\"alloy\"} with Content-Type: application/json.", je.text);
		goto out;
	}
	for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
		if (steps[i](root, cfg, r, e) < 0)
			goto out;
	if ((r->input = strdup(json_string_value(json_object_get(root, "input")))) == NULL) {
		api_fail(e, 500, "server_error", NULL, NULL, "The server is out of memory.");
		goto out;
	}
	rc = 0;
out:
	json_decref(root);
	if (rc < 0)
		speech_req_free(r);
	return rc;
}

void speech_req_free(speech_req *r)
{
	free(r->input);
	r->input = NULL;
	free(r->synth);
	r->synth = NULL;
	clones_release(r->clone);
	r->clone = NULL;
}

/* ---- the speech ---- */

struct speech {
	const speech_cfg *cfg;
	speech_req req;
	split_piece *pieces;
	int n_pieces, next;      /* the piece to send next */
	void *sock;
	uint64_t id;             /* of the synth in flight */
	int running;             /* a synth is in flight */
	int queued;              /* it waits in the verifier's queue */
	enc *enc;
	unsigned char *sse;      /* SSE: the events not sent yet */
	size_t sse_len, sse_cap, sse_head;
	speech_client client;
	/* how the client is watched: its input, until that ends; then, after
	 * a knock, for a hang-up (the reset its system answered); or not */
	enum { WATCH_NONE, WATCH_INPUT, WATCH_HANGUP } watch;
	double t0, t_first, t_last, t_probe;
	int seen;                /* the verifier listened once */
	long speech_tokens;
	size_t audio_samples;    /* of the codec, at in_rate */
	int in_rate;
	int got_audio, done;
	proto_msg *q, *r;
};

static uint64_t fresh_id(void)
{
	static atomic_ullong counter;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec) * 1024 +
	       (atomic_fetch_add(&counter, 1) & 1023);
}

static int send_msg(speech *s, const proto_msg *m, api_error *e)
{
	pcg_err err = { "" };
	void *b = NULL;
	size_t len;
	int rc = proto_pack(m, &b, &len, &err) < 0 || net_send(s->sock, b, len, &err) < 0 ? -1 : 0;
	free(b);
	if (rc < 0)
		api_fail(e, 500, "server_error", NULL, NULL, "The server could not reach the "
			 "speech pipeline (%s).", err.msg);
	return rc;
}

/* The next piece as a synth. */
static int send_piece(speech *s, api_error *e)
{
	const speech_req *r = &s->req;
	const split_piece *p = &s->pieces[s->next];
	pcg_err err = { "" };

	s->id = fresh_id();
	proto_init(s->q, PROTO_SYNTH, s->id);
	proto_synth *q = &s->q->synth;
	*q = *r->synth;
	/* a piece of --piece-chars characters (4000 at most) always fits */
	if (proto_synth_text(q, r->input + p->off, p->len, &err) < 0)
		return api_fail(e, 500, "server_error", NULL, NULL, "The server cut the input into "
				"a piece it cannot send (%s).", err.msg);
	q->speaker = r->speaker;
	if (r->clone) { /* the verifier encodes the recording once, then finds it cached */
		q->prompt_audio = r->clone->audio;
		q->prompt_audio_len = r->clone->len;
		snprintf(q->prompt_text, sizeof q->prompt_text, "%s", r->clone->transcript);
	}
	q->stream = 1;
	q->audio = 1;
	if (send_msg(s, s->q, e) < 0)
		return -1;
	s->next++;
	s->running = 1;
	s->queued = 0;
	s->t_last = pcg_now();
	return 0;
}

static void send_cancel(speech *s)
{
	proto_msg *c = s->q;
	api_error e;
	int linger = 200; /* ms for the cancel to leave before the socket goes */

	proto_init(c, PROTO_CANCEL, s->id + 1);
	c->cancel.session = s->id;
	send_msg(s, c, &e);
	zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger);
	s->running = 0;
}

speech *speech_start(const speech_cfg *cfg, speech_req *r, const speech_client *client,
		     api_error *e)
{
	pcg_err err = { "" };
	speech *s = calloc(1, sizeof *s);

	if (s == NULL) {
		api_fail(e, 500, "server_error", NULL, NULL, "The server is out of memory.");
		return NULL;
	}
	s->cfg = cfg;
	s->req = *r;
	r->input = NULL;
	r->clone = NULL;
	r->synth = NULL;
	s->client = *client;
	s->watch = client->fd >= 0 ? WATCH_INPUT : WATCH_NONE;
	s->t0 = s->t_probe = pcg_now();
	s->q = calloc(1, sizeof *s->q);
	s->r = calloc(1, sizeof *s->r);
	const int cap = (int)s->req.input_chars + 1;
	s->pieces = malloc((size_t)cap * sizeof *s->pieces);
	if (s->q == NULL || s->r == NULL || s->pieces == NULL) {
		api_fail(e, 500, "server_error", NULL, NULL, "The server is out of memory.");
		goto fail;
	}
	s->n_pieces = split_text(s->req.input, cfg->piece_chars, s->pieces, cap);
	if (s->n_pieces <= 0) {
		BAD(e, "input", "invalid_value", "Invalid 'input': nothing to speak.");
		goto fail;
	}
	if ((s->enc = enc_new(s->req.fmt, s->req.speed, cfg->resampler, !s->req.stream,
			      &err)) == NULL) {
		api_fail(e, 500, "server_error", NULL, NULL, "The server cannot encode %s (%s).",
			 enc_format_name(s->req.fmt), err.msg);
		goto fail;
	}
	if (!net_listening(cfg->verifier)) {
		api_fail(e, 503, "server_error", NULL, NULL, "The speech pipeline is not running "
			 "(nobody listens at %s): start it with pcg-up, then try again.",
			 cfg->verifier);
		goto fail;
	}
	s->seen = 1;
	if ((s->sock = net_client(cfg->zmq, cfg->verifier, &err)) == NULL) {
		api_fail(e, 500, "server_error", NULL, NULL, "The server cannot connect to the "
			 "speech pipeline (%s).", err.msg);
		goto fail;
	}
	if (send_piece(s, e) < 0)
		goto fail;
	return s;
fail:
	speech_free(&s);
	return NULL;
}

/* ---- bytes out ---- */

static int sse_put(speech *s, const char *p, size_t n)
{
	if (s->sse_len + n > s->sse_cap) {
		size_t c = s->sse_cap ? s->sse_cap : 16384;
		while (c < s->sse_len + n)
			c *= 2;
		unsigned char *b = realloc(s->sse, c);
		if (b == NULL)
			return -1;
		s->sse = b;
		s->sse_cap = c;
	}
	memcpy(s->sse + s->sse_len, p, n);
	s->sse_len += n;
	return 0;
}

/* SSE: the encoder's new bytes as speech.audio.delta events. */
static int sse_frame(speech *s)
{
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	static const char head[] = "data: {\"type\":\"speech.audio.delta\",\"audio\":\"";
	static const char tail[] = "\"}\n\n";
	size_t n;
	const unsigned char *p = enc_bytes(s->enc, &n);
	char out[4 * (SSE_RAW_MAX / 3) + 8];

	while (n > 0) {
		size_t k = n < SSE_RAW_MAX ? n : SSE_RAW_MAX, o = 0;
		for (size_t i = 0; i < k; i += 3) {
			uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < k ? (uint32_t)p[i + 1] << 8 : 0) |
				     (i + 2 < k ? p[i + 2] : 0);
			out[o++] = b64[v >> 18 & 63];
			out[o++] = b64[v >> 12 & 63];
			out[o++] = i + 1 < k ? b64[v >> 6 & 63] : '=';
			out[o++] = i + 2 < k ? b64[v & 63] : '=';
		}
		if (sse_put(s, head, sizeof head - 1) < 0 || sse_put(s, out, o) < 0 ||
		    sse_put(s, tail, sizeof tail - 1) < 0)
			return -1;
		enc_take(s->enc, k);
		p = enc_bytes(s->enc, &n);
	}
	return 0;
}

const unsigned char *speech_bytes(const speech *s, size_t *n)
{
	if (!s->req.sse)
		return enc_bytes(s->enc, n);
	*n = s->sse_len - s->sse_head;
	return s->sse + s->sse_head;
}

void speech_take(speech *s, size_t n)
{
	if (!s->req.sse) {
		enc_take(s->enc, n);
		return;
	}
	s->sse_head += n;
	if (s->sse_head >= s->sse_len)
		s->sse_head = s->sse_len = 0;
}

/* ---- the pipeline's messages ---- */

static int oom(api_error *e)
{
	return api_fail(e, 500, "server_error", NULL, NULL, "The server is out of memory.");
}

/* A response held whole, grown beyond cfg->max_whole: refused rather than
 * holding more memory (the audio of a stream goes out as it comes, so a
 * stream has no such bound). */
static int too_long(speech *s, api_error *e)
{
	size_t n;
	speech_bytes(s, &n);
	if (s->req.stream || n <= s->cfg->max_whole)
		return 0;
	return api_fail(e, 400, "invalid_request_error", "input", "audio_too_long", "The audio "
			"of this input is longer than this server holds for a response that is "
			"not streamed (%zu bytes of %s at most, pcg-httpd --max-whole). Ask for a "
			"stream (\"stream_format\": \"audio\"), a compressed format, or split the "
			"input into several requests.", s->cfg->max_whole,
			enc_format_name(s->req.fmt));
}

/* The end of the last piece: the encoder's tail, and with SSE the done
 * event. */
static int finish(speech *s, api_error *e)
{
	pcg_err err = { "" };

	if (enc_finish(s->enc, &err) < 0)
		return api_fail(e, 500, "server_error", NULL, NULL, "The server could not encode "
				"the audio (%s).", err.msg);
	if (s->req.sse) {
		char done[200];
		const long in = (long)s->req.input_chars;
		int n = snprintf(done, sizeof done, "data: {\"type\":\"speech.audio.done\",\"usage\":"
				 "{\"input_tokens\":%ld,\"output_tokens\":%ld,\"total_tokens\":%ld}}"
				 "\n\n", in, s->speech_tokens, in + s->speech_tokens);
		if (sse_frame(s) < 0 || sse_put(s, done, (size_t)n) < 0)
			return oom(e);
	}
	if (too_long(s, e) < 0)
		return -1;
	s->done = 1;
	return 0;
}

/* The verifier's error as the client's. */
static int pipeline_error(speech *s, const proto_error_reply *r, api_error *e)
{
	fprintf(stderr, "pcg-httpd: verifier: %s: %s\n", r->code, r->msg);
	s->running = 0;
	if (!strcmp(r->code, PROTO_E_BUSY))
		return api_fail(e, 503, "server_error", NULL, NULL, "The server is overloaded: "
				"every session of the speech pipeline is busy and its queue is "
				"full. Try again later.");
	if (!strcmp(r->code, PROTO_E_CANCELLED))
		return api_fail(e, 503, "server_error", NULL, NULL, "The speech pipeline is "
				"stopping. Try again when it is back.");
	if (!strcmp(r->code, PROTO_E_BAD_REQUEST) && strstr(r->msg, "no codec"))
		return api_fail(e, 503, "server_error", NULL, NULL, "The speech pipeline has no "
				"codec: it makes speech tokens but no audio. Start it with one "
				"(pcg-up --codec-weights DIR).");
	if (!strcmp(r->code, PROTO_E_BAD_REQUEST))
		return BAD(e, NULL, NULL, "The speech pipeline cannot speak this request: %s.",
			   r->msg);
	return api_fail(e, 500, "server_error", NULL, NULL, "The speech pipeline failed while "
			"speaking the input (%s). Try again; if it keeps failing, the server's "
			"log says more.", r->msg);
}

static int handle(speech *s, const proto_msg *r, api_error *e)
{
	pcg_err err = { "" };

	if (r->id != s->id || !s->running)
		return 0; /* a late reply to an earlier piece or a cancel */
	s->t_last = pcg_now();
	switch (r->type) {
	case PROTO_PROGRESS:
		s->queued = r->progress.queue > 0;
		if (r->progress.n_samples == 0)
			return 0;
		if (enc_feed(s->enc, r->progress.samples, r->progress.n_samples, r->progress.rate,
			     &err) < 0)
			return api_fail(e, 500, "server_error", NULL, NULL, "The server could not "
					"encode the audio (%s).", err.msg);
		if (!s->got_audio)
			s->t_first = pcg_now() - s->t0;
		s->got_audio = 1;
		s->in_rate = r->progress.rate;
		s->audio_samples += r->progress.n_samples;
		if (s->req.sse && sse_frame(s) < 0)
			return oom(e);
		return too_long(s, e);
	case PROTO_RESULT:
		s->running = 0;
		s->speech_tokens += r->result.n_tokens;
		if (s->next < s->n_pieces)
			return send_piece(s, e);
		return finish(s, e);
	case PROTO_ERROR:
		return pipeline_error(s, &r->error, e);
	default:
		s->running = 0;
		return api_fail(e, 500, "server_error", NULL, NULL, "The speech pipeline sent an "
				"unexpected '%s'.", proto_type_name(r->type));
	}
}

/* Whether the HTTP client has gone (closed or reset its connection), its
 * socket having polled readable or in error. */
static int client_gone(speech *s)
{
	char c;

	if (s->watch == WATCH_HANGUP) /* the knock was answered with a reset */
		return 1;
	ssize_t n = recv(s->client.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0) { /* a next request waits: no way to look further */
		s->watch = WATCH_NONE;
		return 0;
	}
	if (n == 0) {
		/* the end of its input: a half-close, which HTTP allows after a
		 * request, or a close; the end stays readable, and a knock tells
		 * the two apart (without one, a write of the response finds a
		 * client that closed) */
		const int k = s->client.knock ? s->client.knock(s->client.arg) : 1;
		s->watch = k == 0 ? WATCH_HANGUP : WATCH_NONE;
		return k < 0;
	}
	return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* One wait of at most POLL_MS for the pipeline and the client. */
static int step(speech *s, api_error *e)
{
	const speech_cfg *cfg = s->cfg;
	zmq_pollitem_t it[2] = { { s->sock, 0, ZMQ_POLLIN, 0 },
				 { NULL, s->client.fd, s->watch == WATCH_INPUT ? ZMQ_POLLIN
				   : ZMQ_POLLERR, 0 } };
	const int n_it = s->watch != WATCH_NONE ? 2 : 1;
	pcg_err err = { "" };

	if (atomic_load(cfg->stop))
		return api_fail(e, 503, "server_error", NULL, NULL, "The server is shutting down. "
				"Try again when it is back.");
	if (zmq_poll(it, n_it, POLL_MS) < 0 && zmq_errno() != EINTR)
		return api_fail(e, 500, "server_error", NULL, NULL, "The server could not wait for "
				"the speech pipeline (%s).", zmq_strerror(zmq_errno()));
	if (n_it == 2 && (it[1].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) && client_gone(s))
		return api_fail(e, 499, "invalid_request_error", NULL, NULL, "The client closed "
				"the connection.");
	if (it[0].revents & ZMQ_POLLIN) {
		for (;;) {
			zmq_msg_t m;
			int got = net_recv(s->sock, &m, 0, &err);
			if (got < 0)
				return api_fail(e, 500, "server_error", NULL, NULL, "The server lost "
						"the speech pipeline (%s).", err.msg);
			if (got == 0)
				return 0;
			int rc = proto_parse(zmq_msg_data(&m), zmq_msg_size(&m), s->r, &err);
			if (rc == 0)
				rc = handle(s, s->r, e);
			else
				api_fail(e, 500, "server_error", NULL, NULL, "The speech pipeline sent "
					 "a message the server cannot read (%s).", err.msg);
			zmq_msg_close(&m);
			if (rc < 0 || s->done)
				return rc;
		}
	}
	const double t = pcg_now();
	if (!s->queued && (t - s->t_last) * 1000 >= cfg->timeout_ms)
		return api_fail(e, 503, "server_error", NULL, NULL, "The speech pipeline did not "
				"answer for %.0f s. Try again later.", cfg->timeout_ms / 1000.0);
	/* a local verifier that went away: at once, not after the timeout */
	if (t - s->t_probe >= 1.0) {
		s->t_probe = t;
		if (!net_listening(cfg->verifier))
			return api_fail(e, 503, "server_error", NULL, NULL, "The speech pipeline "
					"stopped while speaking. Try again when it is back.");
	}
	return 0;
}

int speech_pump(speech *s, speech_until until, api_error *e)
{
	for (;;) {
		size_t n;
		speech_bytes(s, &n);
		if (until == SPEECH_AUDIO ? s->got_audio || s->done
		    : until == SPEECH_BYTES ? n > 0 : s->done)
			return 1;
		if (s->done)
			return 0;
		if (step(s, e) < 0) {
			if (s->running)
				send_cancel(s);
			return -1;
		}
	}
}

void speech_get_stats(const speech *s, speech_stats *st)
{
	st->done = s->done;
	st->pieces = s->n_pieces;
	st->speech_tokens = s->speech_tokens;
	st->audio_s = (double)enc_samples(s->enc) / ENC_RATE;
	st->first_audio_s = s->got_audio ? s->t_first : -1;
	st->elapsed_s = pcg_now() - s->t0;
}

void speech_free(speech **ps)
{
	speech *s = *ps;
	if (s == NULL)
		return;
	if (s->running && s->sock)
		send_cancel(s);
	net_close(&s->sock);
	enc_free(&s->enc);
	speech_req_free(&s->req);
	free(s->pieces);
	free(s->sse);
	free(s->q);
	free(s->r);
	free(s);
	*ps = NULL;
}
