/* pcg-synth: the client of the pipeline. Sends text to the verifier, which
 * runs speculative decoding over draftd and targetd and codec-decode; the
 * tokens and the audio come back as they are made ("progress" messages),
 * and the audio goes to a file here (atomically, at the end) or to standard
 * output as it arrives (WAV, or raw PCM). Gives up after --timeout-ms
 * without a message, and cancels its request when interrupted. Prints the
 * statistics of the run. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "clock.h"
#include "audio.h"
#include "client.h"
#include "net.h"
#include "fileio.h"
#include "opts.h"
#include "policy.h"
#include "proto.h"
#include "speculate.h"
#include "synth.h"

static const char *prog = "pcg-synth";
static const char *SYNOPSIS = "[--policy NAME] [--beta B] [--policy-args NAME=X,...] "
			      "[--lookahead L|auto] [--sequential] [-o FILE|-] "
			      "[--chunk N] [options] TEXT | -\n"
			      "       pcg-synth --output-dir DIR [options] < LINES";

static const char *url, *policy_name, *out, *curve_key, *curve_server, *asg_path;
static double beta, temp, top_p;
static const char *lookahead_s;
static int lookahead, sequential, top_k, seed, max_tokens, timeout_ms, f16, print_tokens, do_ping, speaker;
static int viterbi_k, chunk, chunk_first, chunk_left, chunk_right, raw, quiet;
static const char *outdir, *policy_args, *prompt_wav, *prompt_text;
static char policy_opt_help[512]; /* from lib/speculate/policy.c's table, by options() */
static proto_synth args_msg;      /* --policy-args, checked before anything runs */

static const pcg_opt opts[] = {
	{ "verifier", PCG_OPT_STR, &url, NULL, 1, 0, "URL",
	  "the verifier (default $PCG_VERIFIER, else the one pcg-up started)" },
	{ "policy", PCG_OPT_STR, &policy_name, PROTO_SYNTH_POLICY, 1, 0, "NAME", policy_opt_help },
	{ "beta", PCG_OPT_FLOAT, &beta, PROTO_STR(PROTO_SYNTH_BETA), 0, PROTO_SYNTH_BETA_MAX, "B",
	  "ssd's tolerance" },
	{ "policy-args", PCG_OPT_STR, &policy_args, NULL, 1, 0, "NAME=X,...",
	  "the policy's parameters (typical: epsilon, alpha; topk: k; lantern: delta, k); "
	  "--policy help lists them with their ranges and defaults" },
	{ "lookahead", PCG_OPT_STR, &lookahead_s, "auto", 1, 0, "L|auto",
	  "tokens drafted per round, 1 to 15, or auto: chosen each round by the "
	  "verifier's cost model from the acceptance so far (mtp-*: the MTP heads "
	  "used; auto: the target's, at most 3)" },
	{ "sequential", PCG_OPT_FLAG, &sequential, NULL, 1, 0, NULL,
	  "rounds one after the other: the draft waits for each verdict instead of "
	  "drafting the next block while the target verifies" },
	{ "viterbi-k", PCG_OPT_INT, &viterbi_k, PROTO_STR(PROTO_SYNTH_VITERBI_K), 1, 1 << 20, "K",
	  "mtp-viterbi: top-k tokens of each head in the search" },
	{ "temp", PCG_OPT_FLOAT, &temp, PROTO_STR(PROTO_SYNTH_TEMP), 0, PROTO_SYNTH_TEMP_MAX, "T",
	  "temperature (0: greedy)" },
	{ "top-k", PCG_OPT_INT, &top_k, PROTO_STR(PROTO_SYNTH_TOP_K), 0, PROTO_SYNTH_TOP_K_MAX, "K",
	  "top-k (0: off)" },
	{ "top-p", PCG_OPT_FLOAT, &top_p, PROTO_STR(PROTO_SYNTH_TOP_P), PROTO_SYNTH_TOP_P_MIN, 1,
	  "P", "top-p (1: off)" },
	{ "seed", PCG_OPT_INT, &seed, PROTO_STR(PROTO_SYNTH_SEED), 0, PROTO_SYNTH_SEED_MAX, "N",
	  "seed of every random draw" },
	{ "max-tokens", PCG_OPT_INT, &max_tokens, PROTO_STR(PROTO_SYNTH_MAX_TOKENS), 1,
	  PROTO_MAX_APPEND, "N", "speech tokens at most (50 per second)" },
	{ "speaker", PCG_OPT_INT, &speaker, "0", 0, 65535, "N",
	  "the speaker, with a phoneme voice (the demo voice has 8)" },
	{ "o", PCG_OPT_STR, &out, NULL, 1, 0, "FILE",
	  "write the audio here (.wav, .flac, .raw), or - to stream WAV to standard output "
	  "as it arrives" },
	{ "raw", PCG_OPT_FLAG, &raw, NULL, 1, 0, NULL,
	  "with -o -: raw 16-bit little-endian PCM instead of WAV" },
	{ "chunk", PCG_OPT_INT, &chunk, PROTO_STR(PROTO_SYNTH_CHUNK), 0, PROTO_MAX_APPEND, "N",
	  "the audio comes in chunks of N codes (0: the whole utterance at the end, the best "
	  "quality)" },
	{ "chunk-first", PCG_OPT_INT, &chunk_first, PROTO_STR(PROTO_SYNTH_FIRST), 0,
	  PROTO_MAX_APPEND, "N",
	  "the first chunk N codes, each next one twice the one before up to --chunk, so that "
	  "the first audio comes sooner (0 or --chunk: fixed chunks; unless given, at most "
	  "--chunk)" },
	{ "chunk-left", PCG_OPT_INT, &chunk_left, PROTO_STR(PROTO_SYNTH_LEFT), 0, PROTO_MAX_APPEND,
	  "N", "codes before a chunk decoded with it" },
	{ "chunk-right", PCG_OPT_INT, &chunk_right, PROTO_STR(PROTO_SYNTH_RIGHT), 0,
	  PROTO_MAX_APPEND, "N", "codes after a chunk decoded with it (each chunk waits for them)" },
	{ "output-dir", PCG_OPT_STR, &outdir, NULL, 1, 0, "DIR",
	  "batch: one utterance per line of standard input into DIR/NNNN.wav (NNNN: the line "
	  "number); each path is printed when written" },
	{ "quiet", PCG_OPT_FLAG, &quiet, NULL, 1, 0, NULL,
	  "errors only: no progress line and no statistics" },
	{ "f16", PCG_OPT_FLAG, &f16, NULL, 1, 0, NULL, "distributions travel as f16" },
	{ "prompt-wav", PCG_OPT_STR, &prompt_wav, NULL, 1, 0, "FILE",
	  "zero-shot cloning: a recording of the voice (any format libsndfile reads, up to "
	  "30 s), sent to the verifier, which encodes it once (verifier --encoder)" },
	{ "prompt-text", PCG_OPT_STR, &prompt_text, NULL, 1, 0, "TEXT",
	  "with --prompt-wav: what the recording says" },
	{ "asg", PCG_OPT_STR, &asg_path, NULL, 1, 0, "FILE",
	  "send this ASG file with the request ('-': standard input) instead of the verifier's" },
	{ "tokens", PCG_OPT_FLAG, &print_tokens, NULL, 1, 0, NULL,
	  "print the speech tokens (model ids) on one line" },
	{ "ping", PCG_OPT_FLAG, &do_ping, NULL, 1, 0, NULL,
	  "check that the pipeline is up, print its summary" },
	{ "timeout-ms", PCG_OPT_INT, &timeout_ms, "60000", 1, 86400000, "N",
	  "give up after this long without a message from the verifier (a local verifier "
	  "that goes away is noticed within a second)" },
	{ "curve-key", PCG_OPT_STR, &curve_key, NULL, 1, 0, "FILE",
	  "this client's CURVE keypair (pcg-keygen); needed for tcp beyond loopback" },
	{ "curve-server", PCG_OPT_STR, &curve_server, NULL, 1, 0, "FILE",
	  "the verifier's public key (its .pub file)" },
	{ NULL },
};

/* Whether an ipc:// endpoint has nobody listening (no socket file, or one
 * left by a process that is gone): then a request would only wait for its
 * timeout. Other transports are not checked. */
static int no_listener(const char *url, pcg_err *err)
{
	/* a runtime directory or socket this user may not use: said at once,
	 * not found out by waiting for the timeout */
	if (!strncmp(url, "ipc://", 6) && access(url + 6, W_OK) != 0 && errno == EACCES) {
		pcg_fail(err, "cannot reach the pipeline at %s: %s (it belongs to another user: "
			 "start your own with pcg-up, set PCG_RUNTIME_DIR, or name a verifier with "
			 "--verifier)", url, strerror(EACCES));
		return 1;
	}
	if (net_listening(url))
		return 0;
	pcg_fail(err, "no pipeline at %s (%s): start one with pcg-up, or name a verifier "
		 "with --verifier or PCG_VERIFIER", url,
		 access(url + 6, F_OK) ? "no such socket" : "nobody listens on it");
	return 1;
}

/* The liveness probe of the client: an ipc endpoint still has a listener. */
static int listening(void *url)
{
	return net_listening(url);
}

static char *read_all(FILE *f, size_t max)
{
	size_t n = 0, cap = 4096;
	char *s = malloc(cap);

	while (s) {
		size_t got = fread(s + n, 1, cap - n - 1, f);
		n += got;
		if (got == 0 || n > max)
			break;
		if (cap - n - 1 == 0) {
			char *t = realloc(s, cap *= 2);
			if (t == NULL)
				free(s);
			s = t;
		}
	}
	if (s)
		s[n] = '\0';
	return s;
}

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

/* Audio to standard output as it arrives: a WAV header whose sizes say
 * "unknown" (the largest), as streaming writers do, fixed at the end when
 * standard output can seek (a file); or raw PCM. */
typedef struct stream_out {
	int started, wav, rate;
	size_t bytes;
} stream_out;

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = v, p[1] = v >> 8, p[2] = v >> 16, p[3] = v >> 24;
}

static void wav_header(unsigned char h[44], int rate, uint32_t data)
{
	memcpy(h, "RIFF", 4);
	put32(h + 4, data > 0xffffffffu - 36 ? 0xffffffffu : data + 36);
	memcpy(h + 8, "WAVEfmt ", 8);
	put32(h + 16, 16);
	h[20] = 1, h[21] = 0;                 /* PCM */
	h[22] = 1, h[23] = 0;                 /* mono */
	put32(h + 24, (uint32_t)rate);
	put32(h + 28, (uint32_t)rate * 2);
	h[32] = 2, h[33] = 0, h[34] = 16, h[35] = 0;
	memcpy(h + 36, "data", 4);
	put32(h + 40, data);
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static int stream_pcm(stream_out *so, int rate, const void *pcm, size_t n, pcg_err *err)
{
	if (!so->started) {
		unsigned char h[44];
		so->started = 1;
		so->rate = rate;
		wav_header(h, rate, 0xffffffffu);
		if (so->wav && write_all(1, h, sizeof h) < 0)
			return pcg_fail(err, "standard output: %s", strerror(errno));
	}
	if (n && write_all(1, pcm, n * 2) < 0)
		return pcg_fail(err, "standard output: %s", strerror(errno));
	so->bytes += n * 2;
	return 0;
}

/* The real sizes, when standard output is a file. */
static void stream_finish(stream_out *so)
{
	unsigned char h[44];

	if (!so->wav || !so->started || lseek(1, 0, SEEK_CUR) < 0)
		return;
	wav_header(h, so->rate, so->bytes > 0xffffffffu - 36 ? 0xffffffffu : (uint32_t)so->bytes);
	if (pwrite(1, h, sizeof h, 0) != (ssize_t)sizeof h)
		fprintf(stderr, "%s: standard output: cannot fix the WAV header\n", prog);
}

/* An error reply in words for the user: a bad request is the user's to fix
 * (the message says what and how); the rest say what happened. */
static void print_error(const proto_error_reply *r)
{
	if (!strcmp(r->code, PROTO_E_BAD_REQUEST))
		fprintf(stderr, "%s: %s\n", prog, r->msg);
	else if (!strcmp(r->code, PROTO_E_BUSY))
		fprintf(stderr, "%s: the pipeline is busy: %s\n", prog, r->msg);
	else if (!strcmp(r->code, PROTO_E_CANCELLED))
		fprintf(stderr, "%s: the request was cancelled: %s\n", prog, r->msg);
	else
		fprintf(stderr, "%s: the pipeline failed: %s\n", prog, r->msg);
}

/* The statistics to standard error (unless --quiet); the tokens, with
 * --tokens, to standard output unless the audio goes there. */
static void print_result(const proto_result *r, const char *path, double t_first, double lag,
			 double gap)
{
	const double *s = r->stats;
	FILE *o = stderr;

	if (!quiet) {
		if (lookahead > 0)
			fprintf(o, "policy %s, lookahead %d, %.0f%% of rounds pipelined, seed %d\n",
				policy_name, lookahead, 100 * s[PROTO_STAT_PIPELINED], seed);
		else
			fprintf(o, "policy %s, lookahead auto (%.2f a round), %.0f%% of rounds "
				"drafting, %.0f%% of those pipelined, seed %d\n", policy_name,
				s[PROTO_STAT_LOOKAHEAD], 100 * s[PROTO_STAT_DRAFTING],
				100 * s[PROTO_STAT_PIPELINED], seed);
		fprintf(o, "tokens %.0f (%.2f s of audio) in %.3f s: %.1f tokens/s\n",
			s[PROTO_STAT_TOKENS], s[PROTO_STAT_TOKENS] / 50, s[PROTO_STAT_T_TOTAL],
			s[PROTO_STAT_TOK_S]);
		fprintf(o, "rounds %.0f, drafted %.0f, accepted %.0f, acceptance rate %.3f, mean "
			"acceptance length %.3f\n", s[PROTO_STAT_ROUNDS], s[PROTO_STAT_DRAFTED],
			s[PROTO_STAT_ACCEPTED], s[PROTO_STAT_RATE], s[PROTO_STAT_MAL]);
		if (r->n_stats > PROTO_STAT_POS0) {
			fprintf(o, "acceptance per position:");
			for (int i = PROTO_STAT_POS0; i < r->n_stats; i++)
				fprintf(o, " %.3f", s[i]);
			fprintf(o, "\n");
		}
		fprintf(o, "time: draft %.3f s, target %.3f s (its server computing %.3f s, "
			"queue and messaging %.3f s), policy %.3f s, messaging %.3f s; "
			"resends %.0f\n", s[PROTO_STAT_T_DRAFT], s[PROTO_STAT_T_TARGET],
			s[PROTO_STAT_T_TARGET_SERVER],
			s[PROTO_STAT_T_TARGET] - s[PROTO_STAT_T_TARGET_SERVER],
			s[PROTO_STAT_T_POLICY], s[PROTO_STAT_T_MSG], s[PROTO_STAT_RESENDS]);
		if (s[PROTO_STAT_PREDICTED] > 0)
			fprintf(o, "cost model: %.1f tokens/s predicted (the prompt's round as "
				"measured), %.1f measured (%.2f)\n",
				s[PROTO_STAT_PREDICTED], s[PROTO_STAT_TOK_S],
				s[PROTO_STAT_TOK_S] / s[PROTO_STAT_PREDICTED]);
		if (path && strcmp(path, "-"))
			fprintf(o, "audio: %s\n", path);
		else if (path == NULL && !print_tokens)
			fprintf(o, "audio: none kept (no -o: give -o FILE.wav, or -o - to stream it "
				"to standard output; --tokens prints the speech tokens)\n");
		if (t_first >= 0)
			fprintf(o, "first audio after %.3f s; worst lag behind playback %.3f s; "
				"longest wait between chunks %.3f s\n", t_first, lag, gap);
	}
	if (print_tokens) {
		FILE *t = path && !strcmp(path, "-") ? stderr : stdout;
		for (int i = 0; i < r->n_tokens; i++)
			fprintf(t, "%s%d", i ? " " : "", r->tokens[i]);
		fprintf(t, "\n");
		fflush(t);
	}
}

/* --policy help: every policy the verifier takes, from lib/speculate/policy.c's table. */
static void policy_help(void)
{
	printf("policies (pcg-synth --policy NAME):\n");
	for (int k = 0; policy_info_of(k); k++) {
		const policy_info *pi = policy_info_of(k);
		printf("  %-12s %s\n  %-12s guarantees %s\n", pi->name, pi->summary, "",
		       pi->guarantee);
		for (int i = 0; i < pi->n_args; i++)
			printf("  %-12s --policy-args %s=X: %.10g to %.10g, default %.10g\n", "",
			       pi->args[i].name, pi->args[i].min, pi->args[i].max, pi->args[i].def);
		if (pi->needs & POLICY_NEEDS_ASG)
			printf("  %-12s needs an ASG (asg-build)\n", "");
		if (pi->needs & POLICY_NEEDS_KNN)
			printf("  %-12s needs a neighbour file (asg-build --knn K; verifier --knn)\n", "");
	}
	printf("  %-12s the target alone, one token a pass (the baseline of every speedup)\n",
	       "none");
	printf("  %-12s the target's MTP heads draft and the named policy verifies, with its "
	       "guarantee\n", "mtp-NAME");
	printf("  %-12s the Viterbi path over the MTP heads' top-k (--viterbi-k) with the "
	       "transition matrix, unverified\n", "mtp-viterbi");
}

/* ping: one request, one reply. */
static int do_ping_call(void *ctx, const char *url, proto_msg *q, proto_msg *r)
{
	pcg_err err = { "" };
	pcg_client *c = client_new(ctx, url, timeout_ms, 1, &err);
	int rc = 1;

	if (c != NULL && !strncmp(url, "ipc://", 6))
		client_set_alive(c, listening, (void *)url);
	if (c == NULL || client_call(c, q, r, &err) < 0)
		pcg_report(prog, &err);
	else if (r->type == PROTO_ERROR)
		print_error(&r->error);
	else if (r->type == PROTO_PONG && printf("%s\n", r->pong.msg) > 0)
		rc = 0;
	client_free(&c);
	return rc;
}

/* Sends a cancel for the synth with that id (best effort: the verifier also
 * notices a client that is gone). */
static void send_cancel(void *sock, uint64_t id)
{
	proto_msg *c = calloc(1, sizeof *c);
	void *b = NULL;
	size_t len;
	pcg_err err = { "" };

	if (c == NULL)
		return;
	proto_init(c, PROTO_CANCEL, id + 1);
	c->cancel.session = id;
	if (proto_pack(c, &b, &len, &err) == 0)
		zmq_send(sock, b, len, ZMQ_DONTWAIT);
	free(b);
	free(c);
}

/* Edit distance of a and b (adjacent swaps count 1), for "did you mean". */
static int distance(const char *a, const char *b)
{
	enum { M = 32 };
	int d[M + 1][M + 1];
	const int n = (int)strlen(a), m = (int)strlen(b);

	if (n > M || m > M)
		return 99;
	for (int i = 0; i <= n; i++)
		for (int j = 0; j <= m; j++) {
			if (i == 0 || j == 0) {
				d[i][j] = i + j;
				continue;
			}
			int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < c)
				c = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < c)
				c = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < c)
				c = d[i - 2][j - 2] + 1;
			d[i][j] = c;
		}
	return d[n][m];
}

/* --policy NAME checked here, as the verifier would, so that a misspelt
 * name is told as the flag the user typed, with the nearest name. */
static int policy_check(const char *name, pcg_err *err)
{
	int mtp, viterbi, is_none, kind;

	if (spec_policy_parse(name, &mtp, &viterbi, &is_none, &kind) == 0)
		return 0;
	char all[256], best[64] = "";
	int bd = 3; /* suggest within two edits */
	const char *extra[] = { "none", "mtp-viterbi" };
	for (int k = 0; k < POLICY_N_KINDS; k++) {
		char c[64];
		snprintf(c, sizeof c, "%s%s", mtp ? "mtp-" : "", policy_kind_name((policy_kind)k));
		const int dd = distance(name, c);
		if (dd < bd)
			bd = dd, snprintf(best, sizeof best, "%s", c);
	}
	for (int k = 0; k < 2; k++) {
		const int dd = distance(name, extra[k]);
		if (dd < bd)
			bd = dd, snprintf(best, sizeof best, "%s", extra[k]);
	}
	return pcg_fail(err, "--policy '%s': no such policy%s%s%s (%s, none, mtp-viterbi, or "
			"mtp- and a rule; --policy help describes them)", name,
			*best ? "; did you mean '" : "", best, *best ? "'?" : "",
			policy_names(all, sizeof all, ", "));
}

static uint64_t new_id(void)
{
	static uint64_t n;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec) + (n++ << 40);
}

/* One request on sock: q is sent; progress is shown; the audio goes to path
 * (a file, written atomically, or "-": standard output as it arrives; NULL:
 * none); the result is printed. Returns 0, 1 (failed, said why), or 128 +
 * the signal that interrupted it (the request cancelled). */
static int synth_one(void *sock, proto_msg *q, proto_msg *r, const char *path, const char *vurl)
{
	pcg_err err = { "" };
	const int to_stdout = path && !strcmp(path, "-");
	audio_format fmt = AUDIO_WAV;
	audio_out *file = NULL;
	stream_out so = { .wav = !raw };
	const int show = !quiet && isatty(2);
	int got_audio = 0, told_queue = 0, seen = 0, rc = 1;
	void *packed = NULL;
	size_t plen;

	if (path && !to_stdout)
		audio_format_from_path(path, &fmt);
	q->id = new_id();
	q->synth.audio = path != NULL;
	if (proto_pack(q, &packed, &plen, &err) < 0 || net_send(sock, packed, plen, &err) < 0) {
		free(packed);
		pcg_report(prog, &err);
		return 1;
	}
	free(packed);
	double last = pcg_now(), t0 = last, t_first = 0, played = 0, lag = 0, gap = 0,
	       last_audio = 0;
	for (;;) {
		zmq_msg_t m;
		int got = net_recv(sock, &m, 250, &err);
		if (interrupted) {
			if (got > 0)
				zmq_msg_close(&m);
			send_cancel(sock, q->id);
			fprintf(stderr, "%s%s: interrupted: request cancelled\n", show ? "\n" : "", prog);
			rc = 128 + interrupted;
			goto out;
		}
		if (got < 0)
			goto fail;
		if (got == 0) {
			if ((pcg_now() - last) * 1000 >= timeout_ms) {
				send_cancel(sock, q->id);
				pcg_fail(&err, "%s: no reply: no message for %d ms (--timeout-ms); "
					 "request cancelled", vurl, timeout_ms);
				goto fail;
			}
			/* gone: it listened (or answered) once and listens no more;
			 * a verifier still starting has not bound yet */
			const int here = listening((void *)vurl);
			seen |= here;
			if (!strncmp(vurl, "ipc://", 6) && seen && !here) {
				pcg_fail(&err, "%s: the server is gone (nobody listens any more)",
					 vurl);
				goto fail;
			}
			continue;
		}
		last = pcg_now();
		seen = 1;
		if (proto_parse(zmq_msg_data(&m), zmq_msg_size(&m), r, &err) < 0) {
			zmq_msg_close(&m);
			pcg_err_prefix(&err, vurl);
			goto fail;
		}
		if (r->id != q->id) { /* not ours: a late reply to an earlier request */
			zmq_msg_close(&m);
			continue;
		}
		if (r->type == PROTO_PROGRESS) {
			const proto_progress *pg = &r->progress;
			if (pg->n_samples > 0 && path) {
				/* a player that starts with the first chunk: how late
				 * each chunk comes after the audio before it has played
				 * (> 0: an underrun) */
				const double at = pcg_now() - t0;
				if (!got_audio)
					t_first = at, lag = 0;
				else if (at - t_first - played > lag)
					lag = at - t_first - played;
				if (got_audio && at - last_audio > gap) /* a stall, as heard */
					gap = at - last_audio;
				last_audio = at;
				got_audio = 1;
				played += (double)pg->n_samples / (pg->rate > 0 ? pg->rate : 16000);
				int bad = 0;
				if (to_stdout) {
					bad = stream_pcm(&so, pg->rate, pg->samples, pg->n_samples,
							 &err) < 0;
				} else {
					if (file == NULL &&
					    (file = audio_open(path, pg->rate, fmt, &err)) == NULL)
						bad = 1;
					/* the samples may lie at any alignment in the message */
					int16_t *tmp = bad ? NULL : malloc(pg->n_samples * 2);
					if (!bad && tmp == NULL)
						bad = !pcg_fail(&err, "out of memory");
					if (!bad) {
						memcpy(tmp, pg->samples, pg->n_samples * 2);
						bad = audio_append_s16(file, tmp, pg->n_samples,
								       &err) < 0;
					}
					free(tmp);
				}
				if (bad) {
					zmq_msg_close(&m);
					send_cancel(sock, q->id);
					goto fail;
				}
			}
			if (pg->queue > 0 && !show && !quiet && !told_queue++)
				fprintf(stderr, "%s: queued, %d requests ahead\n", prog, pg->queue);
			if (show && pg->queue > 0)
				fprintf(stderr, "\r%s: waiting, %d requests ahead   ", prog,
					pg->queue);
			else if (show && pg->pos > 0)
				fprintf(stderr, "\r%s: %d tokens, %.2f s of audio, %.1f s   ", prog,
					pg->pos, pg->pos / 50.0, pcg_now() - t0);
			zmq_msg_close(&m);
			continue;
		}
		if (show)
			fprintf(stderr, "\r\033[K");
		if (r->type == PROTO_ERROR) {
			print_error(&r->error);
			zmq_msg_close(&m);
			goto out;
		}
		if (r->type != PROTO_RESULT || r->result.n_stats < PROTO_STAT_POS0) {
			fprintf(stderr, "%s: unexpected reply '%s'\n", prog, proto_type_name(r->type));
			zmq_msg_close(&m);
			goto out;
		}
		if (file && audio_commit(&file, &err) < 0) {
			zmq_msg_close(&m);
			goto fail;
		}
		if (to_stdout)
			stream_finish(&so);
		if (path && !got_audio && !to_stdout)
			fprintf(stderr, "%s: no audio came (no speech tokens): %s not written\n",
				prog, path);
		print_result(&r->result, path, got_audio ? t_first : -1, lag, gap);
		zmq_msg_close(&m);
		rc = 0;
		break;
	}
	goto out;
fail:
	fprintf(stderr, "%s%s: %s\n", show ? "\n" : "", prog, err.msg);
out:
	audio_abort(&file);
	return rc;
}

/* Batch mode: one utterance per line of standard input, each into
 * DIR/NNNN.wav numbered by its line (an empty line makes no file); each path
 * written is printed on standard output as it is done. Returns 0 when every
 * line was spoken, 1 when one failed (the others are still spoken), or
 * 128 + the signal that stopped it. */
static int synth_batch(void *sock, proto_msg *q, proto_msg *r, const char *vurl)
{
	struct stat st;
	pcg_err err = { "" };
	char *line = NULL, path[4200];
	size_t cap = 0;
	ssize_t len;
	int n = 0, failed = 0, done = 0, rc = 0;

	if (mkdir(outdir, 0777) < 0 && errno != EEXIST) {
		fprintf(stderr, "%s: --output-dir %s: %s\n", prog, outdir, strerror(errno));
		return 1;
	}
	if (stat(outdir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "%s: --output-dir %s: not a directory\n", prog, outdir);
		return 1;
	}
	while (!interrupted && (len = getline(&line, &cap, stdin)) >= 0) {
		n++;
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (strspn(line, " \t") == (size_t)len)
			continue;
		snprintf(path, sizeof path, "%s/%04d.wav", outdir, n);
		if (proto_synth_text(&q->synth, line, (size_t)len, &err) < 0) {
			fprintf(stderr, "%s: line %d: %s: not spoken\n", prog, n, err.msg);
			failed++;
			continue;
		}
		if (!quiet)
			fprintf(stderr, "%s: line %d -> %s\n", prog, n, path);
		rc = synth_one(sock, q, r, path, vurl);
		if (rc >= 128)
			break;
		if (rc != 0) {
			fprintf(stderr, "%s: line %d not spoken\n", prog, n);
			failed++;
		} else if (access(path, F_OK) == 0) {
			printf("%s\n", path);
			fflush(stdout);
			done++;
		}
	}
	free(line);
	if (rc >= 128)
		return rc;
	if (interrupted)
		return 128 + interrupted;
	if (!quiet || failed)
		fprintf(stderr, "%s: %d utterances written to %s, %d failed\n", prog, done, outdir,
			failed);
	return failed ? 1 : 0;
}

/* --policy-args "name=x,name=x" for the policy called pname (mtp-NAME:
 * NAME's) into q, checked against lib/speculate/policy.c's table. Returns 0, or -1 with
 * err. */
static int parse_policy_args(const char *list, const char *pname, proto_synth *q, pcg_err *err)
{
	const int kind = policy_kind_from_name(strncmp(pname, "mtp-", 4) ? pname : pname + 4);
	const policy_info *pi = policy_info_of(kind);
	char buf[256], *save = NULL;

	q->n_args = 0;
	if (list == NULL)
		return 0;
	if (pi == NULL)
		return pcg_fail(err, "--policy-args: --policy %s takes no parameters", pname);
	if (strlen(list) >= sizeof buf)
		return pcg_fail(err, "--policy-args: too long");
	strcpy(buf, list);
	for (char *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(it, '='), *end;
		if (eq == NULL)
			return pcg_fail(err, "--policy-args: '%s': want NAME=X", it);
		*eq = '\0';
		const int a = policy_arg_index(kind, it);
		if (a < 0)
			return pcg_fail(err, "--policy-args: --policy %s takes no parameter '%s'",
					pi->name, it);
		errno = 0;
		const double v = strtod(eq + 1, &end);
		const policy_arg_info *ai = &pi->args[a];
		if (errno || end == eq + 1 || *end || !(v >= ai->min && v <= ai->max) ||
		    (ai->integer && v != (double)(long long)v))
			return pcg_fail(err, "--policy-args: %s=%s: want %s from %.10g to %.10g", it,
					eq + 1, ai->integer ? "a whole number" : "a number", ai->min,
					ai->max);
		if (q->n_args == PROTO_MAX_ARGS)
			return pcg_fail(err, "--policy-args: more than %d", PROTO_MAX_ARGS);
		snprintf(q->arg_name[q->n_args], sizeof q->arg_name[0], "%s", it);
		q->arg_val[q->n_args++] = v;
	}
	return 0;
}

/* The request checked as the verifier will check it (synth.h), a failure
 * named by the flag that set the field. */
static int request_check(const proto_synth *y, pcg_err *err)
{
	static const char *const flags[] = {
		[PROTO_SF_LOOKAHEAD] = "--lookahead", [PROTO_SF_TEMP] = "--temp",
		[PROTO_SF_TOP_K] = "--top-k", [PROTO_SF_TOP_P] = "--top-p", [PROTO_SF_BETA] = "--beta",
		[PROTO_SF_MAX_TOKENS] = "--max-tokens", [PROTO_SF_SPEAKER] = "--speaker",
		[PROTO_SF_VITERBI_K] = "--viterbi-k", [PROTO_SF_CHUNK] = "--chunk",
		[PROTO_SF_LEFT] = "--chunk-left", [PROTO_SF_RIGHT] = "--chunk-right",
		[PROTO_SF_FIRST] = "--chunk-first",
		[PROTO_SF_ARGS] = "--policy-args", [PROTO_SF_PROMPT_TEXT] = "--prompt-text",
	};
	proto_synth_field f;

	if (proto_synth_check(y, &f, err) == 0)
		return 0;
	const char *flag = (size_t)f < sizeof flags / sizeof *flags && flags[f] ? flags[f]
			   : proto_synth_field_name(f);
	pcg_err_prefix(err, flag);
	return -1;
}

/* ---- main, in steps ----
 *
 * Each step returns GO_ON, or the exit status to stop with. */
enum { GO_ON = -1 };

/* --lookahead L (not auto): a number of drafts; 0, or -1 with err. */
static int parse_lookahead(pcg_err *err)
{
	char *end;
	long l = strtol(lookahead_s, &end, 10);

	if (end == lookahead_s || *end != '\0' || l < 1 || l > PROTO_MAX_LOOKAHEAD) {
		snprintf(err->msg, sizeof err->msg, "--lookahead '%s': a number of drafts "
			 "from 1 to %d, or auto", lookahead_s, PROTO_MAX_LOOKAHEAD);
		return -1;
	}
	lookahead = (int)l;
	return 0;
}

/* 1. the options and the operands: --help and --policy help answered here,
 * the policy, the lookahead and --policy-args checked before anything runs;
 * *first: the operand TEXT (argc: none). */
static int options(int argc, char **argv, int *first)
{
	pcg_err err = { "" };
	char names[256];

	snprintf(policy_opt_help, sizeof policy_opt_help, "%s, none (the target alone), "
		 "mtp-viterbi, or mtp-NAME (the target's MTP heads draft, NAME verifies); "
		 "'help' describes them", policy_names(names, sizeof names, ", "));
	const int f = *first = pcg_opts_parse(opts, argc, argv, &err);
	if (f == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (!strcmp(policy_name, "help")) {
		policy_help();
		return 0;
	}
	if (policy_check(policy_name, &err) < 0) { /* 1, as when the verifier refused it */
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return 1;
	}
	if (f >= 0 && strcmp(lookahead_s, "auto") && parse_lookahead(&err) < 0)
		return pcg_usage_error(prog, SYNOPSIS, opts, err.msg);
	if (f >= 0 && parse_policy_args(policy_args, policy_name, &args_msg, &err) < 0)
		return pcg_usage_error(prog, SYNOPSIS, opts, err.msg);
	const int batch = outdir != NULL;
	if (f >= 0 && batch && f == argc - 1 && strcmp(argv[f], "-")) {
		fprintf(stderr, "%s: --output-dir reads its utterances from standard input, one "
			"per line: give no TEXT (or -)\n", prog);
		return 2;
	}
	if (f < 0 || (!do_ping && !batch && f != argc - 1) ||
	    ((do_ping || batch) && f < argc - (batch ? 1 : 0))) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
				       f < 0 ? err.msg : "one TEXT (or -) is needed");
	}
	return GO_ON;
}

/* 2. the flags that go together, or not: where the audio goes and the
 * cloning prompt. */
static int check_flags(void)
{
	const int to_stdout = out && !strcmp(out, "-");
	audio_format fmt = AUDIO_WAV;

	if (outdir != NULL && out) {
		fprintf(stderr, "%s: -o and --output-dir: give one (a batch writes DIR/NNNN.wav)\n",
			prog);
		return 2;
	}
	if (raw && !to_stdout) {
		fprintf(stderr, "%s: --raw goes with -o - (for a file, name it .raw)\n", prog);
		return 2;
	}
	/* a device, a FIFO or /dev/stdout has no extension: WAV, as for -o - */
	if (out && !to_stdout && audio_format_from_path(out, &fmt) < 0 && !pcg_out_through(out)) {
		const char *dot = strrchr(out, '.');
		if (dot && (!strcasecmp(dot, ".mp3") || !strcasecmp(dot, ".ogg") ||
			    !strcasecmp(dot, ".opus")))
			fprintf(stderr, "%s: -o %s: %s is not written here (.wav, .flac, .raw are): "
				"pipe the WAV through sox, pcg-synth -o - TEXT | sox -t wav - %s "
				"(pcg-httpd serves mp3 and opus itself)\n", prog, out, dot + 1, out);
		else
			fprintf(stderr, "%s: -o %s: unknown extension (.wav, .flac, .raw)\n", prog,
				out);
		return 2;
	}
	if (!prompt_wav != !prompt_text) {
		fprintf(stderr, "%s: --prompt-wav and --prompt-text go together (the recording and "
			"what it says)\n", prog);
		return 2;
	}
	return GO_ON;
}

/* What the request holds apart from its message, freed at the end. */
typedef struct held {
	char *text, *asg;
	pcg_bytes prompt;
} held;

/* 3a. the text: the operand, or standard input for "-". */
static int read_text(proto_synth *y, const char *arg, held *h)
{
	pcg_err err = { "" };

	h->text = strcmp(arg, "-") ? strdup(arg) : read_all(stdin, sizeof y->text);
	if (h->text == NULL) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return 1;
	}
	if (proto_synth_text(y, h->text, strlen(h->text), &err) < 0) {
		fprintf(stderr, "%s: TEXT: %s\n", prog, err.msg);
		return 2;
	}
	return GO_ON;
}

/* 3b. --asg: the file sent with the request; text_stdin: the text came
 * from standard input, which cannot give both. */
static int read_asg(proto_synth *y, int text_stdin, held *h)
{
	if (!strcmp(asg_path, "-") && text_stdin) {
		fprintf(stderr, "%s: the text and --asg cannot both come from stdin\n", prog);
		return 2;
	}
	FILE *f = strcmp(asg_path, "-") ? fopen(asg_path, "rb") : stdin;
	size_t cap = PROTO_MAX_MSG - (1 << 20), n = 0;
	h->asg = f ? malloc(cap + 1) : NULL;
	if (h->asg)
		n = fread(h->asg, 1, cap + 1, f);
	if (f && f != stdin)
		fclose(f);
	if (h->asg == NULL || n == 0 || n > cap) {
		fprintf(stderr, "%s: --asg %s: %s\n", prog, asg_path,
			!f ? strerror(errno) : n > cap ? "too large to send" : "empty");
		return 1;
	}
	y->asg = h->asg;
	y->asg_len = n;
	return GO_ON;
}

/* 3c. --prompt-wav and --prompt-text: the voice to clone. */
static int read_prompt(proto_synth *y, held *h)
{
	pcg_err perr = { "" };

	if (strlen(prompt_text) >= sizeof y->prompt_text) {
		fprintf(stderr, "%s: --prompt-text longer than %zu bytes\n", prog,
			sizeof y->prompt_text - 1);
		return 2;
	}
	if (pcg_bytes_open(prompt_wav, 0, &h->prompt, &perr) < 0)
		return pcg_report(prog, &perr);
	if (h->prompt.size == 0 || h->prompt.size > PROTO_MAX_MSG - (2u << 20)) {
		fprintf(stderr, "%s: --prompt-wav %s: %s\n", prog, prompt_wav,
			h->prompt.size ? "too large to send" : "empty");
		return 1;
	}
	y->prompt_audio = h->prompt.data;
	y->prompt_audio_len = (size_t)h->prompt.size;
	snprintf(y->prompt_text, sizeof y->prompt_text, "%s", prompt_text);
	return GO_ON;
}

/* 3d. the options into the request, checked as the verifier will check
 * them. */
static int fill_request(proto_synth *y)
{
	pcg_err err = { "" };

	snprintf(y->policy, sizeof y->policy, "%s", policy_name);
	y->beta = (float)beta;
	y->n_args = args_msg.n_args;
	memcpy(y->arg_name, args_msg.arg_name, sizeof y->arg_name);
	memcpy(y->arg_val, args_msg.arg_val, sizeof y->arg_val);
	y->lookahead = lookahead;
	y->sequential = sequential;
	y->samp = (pcg_sampling){ (float)temp, top_k, (float)top_p };
	y->seed = (uint64_t)seed;
	y->max_tokens = max_tokens;
	y->speaker = speaker;
	y->viterbi_k = viterbi_k;
	y->f16 = f16;
	y->chunk = chunk;
	/* the default first chunk, not asked for, never beyond --chunk */
	y->first = pcg_opts_given(opts, "chunk-first") || chunk_first <= chunk ? chunk_first : chunk;
	y->left = chunk_left;
	y->right = chunk_right;
	/* audio: per request (synth_one), with the stream it travels in */
	if (request_check(y, &err) < 0)
		return pcg_usage_error(prog, SYNOPSIS, opts, err.msg);
	return GO_ON;
}

/* 3. the request: a ping, or a synth of TEXT (argv[first]; a batch's
 * texts come one by one, in synth_batch). */
static int make_request(proto_msg *q, char **argv, int first, held *h)
{
	proto_synth *y = &q->synth;
	const int batch = outdir != NULL;
	int rc = GO_ON;

	if (do_ping) {
		proto_init(q, PROTO_PING, 0);
		return GO_ON;
	}
	proto_init(q, PROTO_SYNTH, 0);
	proto_synth_defaults(y);
	if (!batch)
		rc = read_text(y, argv[first], h);
	if (rc == GO_ON && asg_path)
		rc = read_asg(y, batch || !strcmp(argv[first], "-"), h);
	if (rc == GO_ON && prompt_wav)
		rc = read_prompt(y, h);
	return rc == GO_ON ? fill_request(y) : rc;
}

/* 4. the verifier's address, and the CURVE keys to reach it. pcg-up's
 * pipeline, not one the user names: if it is not up, say so at once (a
 * verifier named by --verifier may still be starting: ZeroMQ waits for it
 * until the timeout). */
static int find_verifier(void)
{
	static char ubuf[4200];
	pcg_err err = { "" };
	const int pcg_up = url == NULL && !(getenv("PCG_VERIFIER") && *getenv("PCG_VERIFIER"));

	if (url == NULL)
		url = net_default_verifier(ubuf, sizeof ubuf);
	if (net_curve_setup(curve_key, NULL, curve_server, &err) < 0) {
		pcg_report(prog, &err);
		return 1;
	}
	if (pcg_up && no_listener(url, &err)) {
		pcg_report(prog, &err);
		return 1;
	}
	return GO_ON;
}

/* 5. the synth (or the batch) on its socket, an interruption cancelling
 * it. */
static int synth(void *ctx, proto_msg *q, proto_msg *r)
{
	pcg_err err = { "" };
	struct sigaction sa;
	void *sock;
	int rc = 1;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN); /* a closed pipe is a write error, then a cancel */
	if ((sock = net_client(ctx, url, &err)) == NULL)
		pcg_report(prog, &err);
	else if (outdir != NULL)
		rc = synth_batch(sock, q, r, url);
	else
		rc = synth_one(sock, q, r, out, url);
	net_close(&sock);
	return rc;
}

int main(int argc, char **argv)
{
	proto_msg *q = NULL, *r = NULL;
	held h = { 0 };
	int first, rc = options(argc, argv, &first);

	if (rc == GO_ON)
		rc = check_flags();
	if (rc == GO_ON) {
		q = calloc(1, sizeof *q), r = calloc(1, sizeof *r);
		rc = q == NULL || r == NULL ? 1 : make_request(q, argv, first, &h);
	}
	if (rc == GO_ON)
		rc = find_verifier();
	if (rc == GO_ON) {
		void *ctx = zmq_ctx_new();
		rc = do_ping ? do_ping_call(ctx, url, q, r) : synth(ctx, q, r);
		zmq_ctx_term(ctx);
	}
	free(h.text);
	free(h.asg);
	pcg_bytes_close(&h.prompt);
	free(q);
	free(r);
	return rc;
}
