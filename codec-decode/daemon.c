/* daemon.c: codec-decode as a pipeline server: "audio" messages append the
 * speech codes of a session as the verifier commits them; the final one
 * decodes the whole utterance (the decoder is non-causal: GroupNorm and
 * attention see every frame) and writes the audio file the request names,
 * atomically. One poll loop; SIGTERM and SIGINT stop it. */
#include "daemon.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "audio.h"
#include "codes.h"
#include "net.h"
#include "proto.h"

#define MAX_SESSIONS 64
#define MAX_CODES (1 << 20) /* 5.8 hours at 50 codes per second */

typedef struct utterance {
	uint64_t session;
	int32_t *codes;
	int n, cap;
} utterance;

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static utterance *find(utterance *u, int n, uint64_t s)
{
	for (int i = 0; i < n; i++)
		if (u[i].session == s)
			return &u[i];
	return NULL;
}

typedef struct codec_state {
	const codec_ops *c;
	utterance u[MAX_SESSIONS];
	int nu;
} codec_state;

/* net_serve's handler: one parsed message into rep. */
static void handle(void *ctx, const proto_msg *q, proto_msg *rep)
{
	codec_state *d = ctx;
	const codec_ops *c = d->c;
	utterance *u = d->u;
	int *nu = &d->nu;
	pcg_err err = { "" };
	utterance *x;

	rep->id = q->id;
	if (q->type == PROTO_PING) {
		rep->type = PROTO_PONG;
		snprintf(rep->msg, sizeof rep->msg, "codec-decode %s %d Hz, %d sessions", c->name,
			 c->sample_rate, *nu);
		return;
	}
	if (q->type != PROTO_AUDIO) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "codec-decode does not take '%s'",
			    proto_type_name(q->type));
		return;
	}
	if (codes_check(q->append, (size_t)q->n_append, c->codebook, &err) < 0) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "field 'tokens': %s", err.msg);
		return;
	}
	x = find(u, *nu, q->session);
	if (x == NULL) {
		if (*nu == MAX_SESSIONS) {
			proto_error(rep, q->id, PROTO_E_TOO_LARGE, "%d utterances in progress", MAX_SESSIONS);
			return;
		}
		x = &u[(*nu)++];
		memset(x, 0, sizeof *x);
		x->session = q->session;
	}
	if (x->n + q->n_append > MAX_CODES) {
		proto_error(rep, q->id, PROTO_E_TOO_LARGE, "more than %d codes", MAX_CODES);
		goto drop;
	}
	if (x->n + q->n_append > x->cap) {
		int cap = (x->n + q->n_append) * 2 + 64;
		int32_t *c = realloc(x->codes, (size_t)cap * sizeof *c);
		if (c == NULL) {
			proto_error(rep, q->id, PROTO_E_INTERNAL, "out of memory");
			goto drop;
		}
		x->codes = c;
		x->cap = cap;
	}
	memcpy(x->codes + x->n, q->append, (size_t)q->n_append * sizeof *q->append);
	x->n += q->n_append;
	rep->type = PROTO_OK;
	if (!q->final)
		return;
	if (q->out[0] != '\0' && x->n > 0) {
		audio_format fmt;
		float *wav = malloc((size_t)x->n * c->hop * sizeof *wav);
		if (audio_format_from_path(q->out, &fmt) < 0) {
			proto_error(rep, q->id, PROTO_E_BAD_REQUEST,
				    "field 'out': %s: unknown extension (.wav, .flac, .raw)", q->out);
		} else if (wav == NULL) {
			proto_error(rep, q->id, PROTO_E_INTERNAL, "out of memory for the audio");
		} else if (c->decode(c->model, x->codes, x->n, wav, &err) < 0 ||
			   audio_write(q->out, wav, (size_t)x->n * c->hop, c->sample_rate, fmt,
				       &err) < 0) {
			proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
		} else {
			fprintf(stderr, "codec-decode: %s: %d codes, %.2f s\n", q->out, x->n,
				(double)x->n * c->hop / c->sample_rate);
		}
		free(wav);
	}
drop:
	free(x->codes);
	*x = u[--(*nu)];
}

int codec_daemon(const char *listen_url, const codec_ops *c)
{
	pcg_err err = { "" };
	static codec_state d; /* 64 utterances: off the stack */
	int rc = 1;
	void *ctx = zmq_ctx_new(), *sock = NULL;

	d.c = c;
	d.nu = 0;
	if (ctx == NULL) {
		fprintf(stderr, "codec-decode: zmq_ctx_new failed\n");
		goto out;
	}
	sock = net_server(ctx, listen_url, &err);
	if (sock == NULL) {
		fprintf(stderr, "codec-decode: %s\n", err.msg);
		goto out;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	fprintf(stderr, "codec-decode: serving %s on %s\n", c->name, listen_url);
	if (net_serve(sock, "codec-decode", handle, &d, &stop, NULL) < 0) {
		fprintf(stderr, "codec-decode: out of memory\n");
		goto out;
	}
	fprintf(stderr, "codec-decode: stopping, %d unfinished utterances dropped\n", d.nu);
	rc = 0;
out:
	for (int i = 0; i < d.nu; i++)
		free(d.u[i].codes);
	net_server_close(&sock, listen_url);
	if (ctx)
		zmq_ctx_term(ctx);
	return rc;
}
