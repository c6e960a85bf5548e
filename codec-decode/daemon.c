/* daemon.c: codec-decode as a pipeline server: "audio" messages append the
 * speech codes of a session as the verifier commits them, and each reply
 * carries the audio of the chunks those codes complete, as 16-bit PCM (see
 * proto.h). Chunk boundaries are fixed by the count of codes, never by
 * timing, so an utterance's audio is the same to the byte however its codes
 * arrive, and the same as `codec-decode --chunk` writes (the schedule, growing
 * from a first chunk or not, is lib/core/chunks.h's). Chunk 0 decodes the
 * whole utterance at the final message (the decoder is non-causal: GroupNorm
 * and attention see every frame), the best quality. One poll loop; SIGTERM
 * and SIGINT stop it. */
#include "daemon.h"

#include "matmul.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "audio.h"
#include "chunks.h"
#include "codes.h"
#include "net.h"
#include "service.h"
#include "proto.h"

#define MAX_SESSIONS 256
#define MAX_CODES (1 << 20) /* 5.8 hours at 50 codes per second */

typedef struct utterance {
	uint64_t session;
	int32_t *codes;
	int n, cap;
	int next;               /* the first code whose audio is not sent yet */
	int chunk, left, right, first; /* from its first message */
	uint64_t last_use;
} utterance;


typedef struct codec_state {
	const codec_ops *c;
	utterance u[MAX_SESSIONS];
	int nu;
	float *wav;             /* a decoded span */
	int16_t *pcm;           /* the reply's samples */
	size_t wav_cap, pcm_cap;
	uint64_t clock;
	net_responder *responder; /* parse, handle, reply */
	int oom;                  /* a reply could not be made: stopped */
} codec_state;

static utterance *find(codec_state *d, uint64_t s)
{
	for (int i = 0; i < d->nu; i++)
		if (d->u[i].session == s)
			return &d->u[i];
	return NULL;
}

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return p;
	void *q = realloc(p, need * size);
	if (q != NULL)
		*cap = need;
	return q;
}

/* Decodes codes [a, z) of x and appends the audio of [s, e) to the reply's
 * samples (n_pcm of them so far). */
static int emit(codec_state *d, const utterance *x, int a, int s, int e, int z, size_t *n_pcm,
		pcg_err *err)
{
	const int hop = d->c->hop;
	float *w = grow(d->wav, &d->wav_cap, (size_t)(z - a) * hop, sizeof *w);
	if (w == NULL)
		return pcg_fail(err, "out of memory for the audio");
	d->wav = w;
	int16_t *p = grow(d->pcm, &d->pcm_cap, *n_pcm + (size_t)(e - s) * hop, sizeof *p);
	if (p == NULL)
		return pcg_fail(err, "out of memory for the audio");
	d->pcm = p;
	if (d->c->decode(d->c->model, x->codes + a, z - a, w, err) < 0)
		return -1;
	audio_to_s16(w + (size_t)(s - a) * hop, p + *n_pcm, (size_t)(e - s) * hop);
	*n_pcm += (size_t)(e - s) * hop;
	return 0;
}

/* The audio of every chunk of x that is complete: chunk [s, e) (e its
 * end by pcg_chunk_end) needs the codes up to e + right, or the final
 * message. */
static int complete_chunks(codec_state *d, utterance *x, int final, size_t *n_pcm, pcg_err *err)
{
	if (x->chunk == 0) {
		if (final && x->n > 0 && emit(d, x, 0, 0, x->n, x->n, n_pcm, err) < 0)
			return -1;
		x->next = x->n;
		return 0;
	}
	while (x->next < x->n) {
		const int s = x->next, end = pcg_chunk_end(s, x->chunk, x->first);
		if (!final && x->n < end + x->right)
			break;
		const int e = end < x->n ? end : x->n;
		const int a = s - x->left > 0 ? s - x->left : 0;
		const int z = e + x->right < x->n ? e + x->right : x->n;
		if (emit(d, x, a, s, e, z, n_pcm, err) < 0)
			return -1;
		x->next = e;
	}
	return 0;
}

/* net_respond's handler: one parsed message into rep. */
static void handle(void *ctx, const proto_msg *q, proto_msg *rep)
{
	codec_state *d = ctx;
	const codec_ops *c = d->c;
	pcg_err err = { "" };
	utterance *x;
	size_t n_pcm = 0;

	if (q->type == PROTO_PING) {
		proto_init(rep, PROTO_PONG, q->id);
		snprintf(rep->pong.msg, sizeof rep->pong.msg, "codec-decode %s %d Hz, %d sessions",
			 c->name, c->sample_rate, d->nu);
		return;
	}
	if (q->type == PROTO_DROP) {
		if ((x = find(d, q->drop.session)) != NULL) {
			free(x->codes);
			*x = d->u[--d->nu];
		}
		proto_init(rep, PROTO_OK, q->id);
		return;
	}
	if (q->type != PROTO_AUDIO) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "codec-decode does not take '%s'",
			    proto_type_name(q->type));
		return;
	}
	const proto_audio *a = &q->audio;
	if (codes_check(a->tokens, (size_t)a->n_tokens, c->codebook, &err) < 0) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "field 'tokens': %s", err.msg);
		return;
	}
	x = find(d, a->session);
	if (x == NULL) {
		if (d->nu == MAX_SESSIONS) { /* the least recently used goes: one whose
					      * verifier never said final */
			utterance *lru = &d->u[0];
			for (int i = 1; i < d->nu; i++)
				if (d->u[i].last_use < lru->last_use)
					lru = &d->u[i];
			fprintf(stderr, "codec-decode: %d utterances: dropping session %llu, idle "
				"longest\n", MAX_SESSIONS, (unsigned long long)lru->session);
			free(lru->codes);
			*lru = d->u[--d->nu];
		}
		x = &d->u[d->nu++];
		memset(x, 0, sizeof *x);
		x->session = a->session;
		x->chunk = a->chunk;
		x->left = a->left;
		x->right = a->right;
		x->first = a->first; /* proto_parse held it to 0..chunk */
	}
	x->last_use = ++d->clock;
	if (x->n + a->n_tokens > MAX_CODES) {
		proto_error(rep, q->id, PROTO_E_TOO_LARGE, "more than %d codes", MAX_CODES);
		goto drop;
	}
	if (x->n + a->n_tokens > x->cap) {
		int cap = (x->n + a->n_tokens) * 2 + 64;
		int32_t *cs = realloc(x->codes, (size_t)cap * sizeof *cs);
		if (cs == NULL) {
			proto_error(rep, q->id, PROTO_E_INTERNAL, "out of memory");
			goto drop;
		}
		x->codes = cs;
		x->cap = cap;
	}
	memcpy(x->codes + x->n, a->tokens, (size_t)a->n_tokens * sizeof *a->tokens);
	x->n += a->n_tokens;
	if (complete_chunks(d, x, a->final, &n_pcm, &err) < 0) {
		proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
		goto drop;
	}
	proto_init(rep, PROTO_PCM, q->id);
	rep->pcm.rate = c->sample_rate;
	rep->pcm.samples = d->pcm;
	rep->pcm.n_samples = n_pcm;
	if (!a->final)
		return;
drop:
	free(x->codes);
	*x = d->u[--d->nu];
}

static int start(pcg_daemon *dm, pcg_err *err)
{
	codec_state *d = dm->arg;

	(void)err;
	fprintf(stderr, "codec-decode: serving %s on %s\n", d->c->name, dm->url);
	pcg_blas_warn("codec-decode");
	return 0;
}

/* Each request answered at once (net_respond: parse, handle, reply). */
static void request(pcg_daemon *dm, net_req *r)
{
	codec_state *d = dm->arg;

	if (net_respond(d->responder, dm->sock, r, &dm->counts) < 0) {
		fprintf(stderr, "codec-decode: out of memory\n");
		d->oom = 1;
		*dm->stop = 1;
	}
}

static void done(pcg_daemon *dm)
{
	codec_state *d = dm->arg;

	fprintf(stderr, "codec-decode: stopping, %d unfinished utterances dropped\n", d->nu);
}

int codec_daemon(const char *listen_url, const codec_ops *c)
{
	static codec_state d; /* 64 utterances: off the stack */
	pcg_daemon dm = { .prog = "codec-decode", .url = listen_url, .stop = &pcg_daemon_stop,
			  .arg = &d, .start = start, .request = request, .done = done };
	int rc = 1;

	d.c = c;
	d.nu = 0;
	if ((d.responder = net_responder_new("codec-decode", handle, &d)) == NULL)
		fprintf(stderr, "codec-decode: out of memory\n");
	else
		rc = pcg_daemon_run(&dm) != 0 || d.oom;
	for (int i = 0; i < d.nu; i++)
		free(d.u[i].codes);
	free(d.wav);
	free(d.pcm);
	net_responder_free(&d.responder);
	return rc;
}
