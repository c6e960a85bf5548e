/* pcg-synth: the client of the pipeline. Sends text to the verifier, which
 * runs speculative decoding over draftd and targetd and streams the speech
 * tokens to codec-decode; prints the statistics of the run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "client.h"
#include "net.h"
#include "opts.h"
#include "proto.h"

static const char *prog = "pcg-synth";
static const char *SYNOPSIS = "[--policy NAME] [--beta B] [--lookahead L] [-o out.wav] "
			      "[options] TEXT | -";

static const char *url, *policy, *out, *curve_key, *curve_server, *asg_path;
static double beta, temp, top_p;
static int lookahead, top_k, seed, max_tokens, timeout_ms, f16, print_tokens, do_ping, speaker;
static int viterbi_k;

static const pcg_opt opts[] = {
	{ "verifier", PCG_OPT_STR, &url, NULL, 1, 0, "URL",
	  "the verifier (default $PCG_VERIFIER, else the one pcg-up started)" },
	{ "policy", PCG_OPT_STR, &policy, "pcg", 1, 0, "NAME",
	  "sd, ssd, pcg, greedy, none (the target alone), mtp-viterbi, or mtp-sd, mtp-ssd, "
	  "mtp-pcg, mtp-greedy (the target's MTP heads draft)" },
	{ "beta", PCG_OPT_FLOAT, &beta, "0.4", 0, 1, "B", "ssd's tolerance" },
	{ "lookahead", PCG_OPT_INT, &lookahead, "3", 1, PROTO_MAX_N - 1, "L",
	  "tokens drafted per round (mtp-*: the MTP heads used)" },
	{ "viterbi-k", PCG_OPT_INT, &viterbi_k, "8", 1, 1 << 20, "K",
	  "mtp-viterbi: top-k tokens of each head in the search" },
	{ "temp", PCG_OPT_FLOAT, &temp, "0.8", 0, 100, "T", "temperature (0: greedy)" },
	{ "top-k", PCG_OPT_INT, &top_k, "50", 0, 1 << 30, "K", "top-k (0: off)" },
	{ "top-p", PCG_OPT_FLOAT, &top_p, "1", 1e-6, 1, "P", "top-p (1: off)" },
	{ "seed", PCG_OPT_INT, &seed, "1", 0, 2147483647, "N", "seed of every random draw" },
	{ "max-tokens", PCG_OPT_INT, &max_tokens, "1500", 1, PROTO_MAX_APPEND, "N",
	  "speech tokens at most (50 per second)" },
	{ "speaker", PCG_OPT_INT, &speaker, "0", 0, 65535, "N",
	  "the speaker, with a phoneme voice (the demo voice has 8)" },
	{ "o", PCG_OPT_STR, &out, NULL, 1, 0, "FILE",
	  "audio file written by codec-decode (.wav or .flac)" },
	{ "f16", PCG_OPT_FLAG, &f16, NULL, 1, 0, NULL, "distributions travel as f16" },
	{ "asg", PCG_OPT_STR, &asg_path, NULL, 1, 0, "FILE",
	  "send this ASG file with the request ('-': standard input) instead of the verifier's" },
	{ "tokens", PCG_OPT_FLAG, &print_tokens, NULL, 1, 0, NULL,
	  "print the speech tokens (model ids) on one line" },
	{ "ping", PCG_OPT_FLAG, &do_ping, NULL, 1, 0, NULL,
	  "check that the pipeline is up, print its summary" },
	{ "timeout-ms", PCG_OPT_INT, &timeout_ms, "0", 0, 86400000, "N",
	  "time to wait for the verifier (0: 60 s and 1 s per --max-tokens; a local "
	  "verifier that goes away is noticed within a second)" },
	{ "curve-key", PCG_OPT_STR, &curve_key, NULL, 1, 0, "FILE",
	  "this client's CURVE keypair (pcg-keygen); needed for tcp beyond loopback" },
	{ "curve-server", PCG_OPT_STR, &curve_server, NULL, 1, 0, "FILE",
	  "the verifier's public key (its .pub file)" },
	{ NULL },
};

/* The verifier pcg-up starts: ipc in the runtime directory (see pcg-runtime). */
static const char *default_url(char *buf, size_t n)
{
	const char *e = getenv("PCG_VERIFIER"), *d;

	if (e && *e)
		return e;
	if ((d = getenv("PCG_RUNTIME_DIR")) && *d)
		snprintf(buf, n, "ipc://%s/verifier.sock", d);
	else if ((d = getenv("XDG_RUNTIME_DIR")) && *d)
		snprintf(buf, n, "ipc://%s/pcg-tts/verifier.sock", d);
	else
		snprintf(buf, n, "ipc://%s/pcg-tts-%u/verifier.sock",
			 (d = getenv("TMPDIR")) && *d ? d : "/tmp", (unsigned)getuid());
	return buf;
}

/* Whether an ipc:// endpoint has nobody listening (no socket file, or one
 * left by a process that is gone): then a request would only wait for its
 * timeout. Other transports are not checked. */
static int no_listener(const char *url, pcg_err *err)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	const char *path = url + 6;
	int fd, rc;

	if (strncmp(url, "ipc://", 6) || strlen(path) >= sizeof a.sun_path)
		return 0;
	memcpy(a.sun_path, path, strlen(path) + 1);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return 0;
	rc = connect(fd, (struct sockaddr *)&a, sizeof a);
	close(fd);
	if (rc == 0 || (errno != ENOENT && errno != ECONNREFUSED))
		return 0;
	pcg_fail(err, "no pipeline at %s (%s): start one with pcg-up, or name a verifier "
		 "with --verifier or PCG_VERIFIER", url,
		 errno == ENOENT ? "no such socket" : "nobody listens on it");
	return 1;
}

/* The liveness probe of the client: an ipc endpoint still has a listener. */
static int listening(void *url)
{
	pcg_err e = { "" };
	return !no_listener(url, &e);
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

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int rc = 1;
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || (!do_ping && first != argc - 1) || (do_ping && first != argc)) {
		fprintf(stderr, "%s: %s\n", prog, first < 0 ? err.msg : "one TEXT (or -) is needed");
		pcg_opts_usage(stderr, prog, SYNOPSIS, opts);
		return 2;
	}
	proto_msg *q = calloc(1, sizeof *q), *r = calloc(1, sizeof *r);
	char *text = NULL, *asg_img = NULL;
	if (q == NULL || r == NULL)
		return 1;
	if (do_ping) {
		q->type = PROTO_PING;
	} else {
		text = strcmp(argv[first], "-") ? strdup(argv[first]) : read_all(stdin, sizeof q->text);
		if (text == NULL || strlen(text) >= sizeof q->text) {
			fprintf(stderr, "%s: text longer than %zu bytes\n", prog, sizeof q->text - 1);
			return 2;
		}
		if (asg_path) {
			if (!strcmp(asg_path, "-") && !strcmp(argv[first], "-")) {
				fprintf(stderr, "%s: the text and --asg cannot both come from stdin\n", prog);
				return 2;
			}
			FILE *f = strcmp(asg_path, "-") ? fopen(asg_path, "rb") : stdin;
			size_t cap = PROTO_MAX_MSG - (1 << 20), n = 0;
			asg_img = f ? malloc(cap + 1) : NULL;
			if (asg_img)
				n = fread(asg_img, 1, cap + 1, f);
			if (f && f != stdin)
				fclose(f);
			if (asg_img == NULL || n == 0 || n > cap) {
				fprintf(stderr, "%s: --asg %s: %s\n", prog, asg_path,
					!f ? strerror(errno) : n > cap ? "too large to send" : "empty");
				return 1;
			}
			q->asg = asg_img;
			q->asg_len = n;
		}
		q->type = PROTO_SYNTH;
		snprintf(q->text, sizeof q->text, "%s", text);
		snprintf(q->policy, sizeof q->policy, "%s", policy);
		q->beta = (float)beta;
		q->n = lookahead;
		q->samp = (pcg_sampling){ (float)temp, top_k, (float)top_p };
		q->seed = (uint64_t)seed;
		q->max_tokens = max_tokens;
		q->speaker = speaker;
		q->viterbi_k = viterbi_k;
		q->f16 = f16;
		/* codec-decode runs elsewhere: give it an absolute path. */
		char cwd[2048];
		if (out && out[0] != '/' && getcwd(cwd, sizeof cwd))
			snprintf(q->out, sizeof q->out, "%s/%s", cwd, out);
		else
			snprintf(q->out, sizeof q->out, "%s", out ? out : "");
	}
	char ubuf[4200];
	/* pcg-up's pipeline, not one the user names: if it is not up, say so at
	 * once (a verifier named by --verifier may still be starting: ZeroMQ
	 * waits for it until the timeout) */
	const int pcg_up = url == NULL && !(getenv("PCG_VERIFIER") && *getenv("PCG_VERIFIER"));
	if (url == NULL)
		url = default_url(ubuf, sizeof ubuf);
	if (net_curve_setup(curve_key, NULL, curve_server, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return 1;
	}
	if (pcg_up && no_listener(url, &err)) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return 1;
	}
	void *ctx = zmq_ctx_new();
	/* One try: a synthesis is not resent behind the user's back. */
	if (timeout_ms == 0) /* by the work asked for, not a fixed total */
		timeout_ms = 60000 + 1000 * (do_ping ? 0 : max_tokens);
	pcg_client *c = client_new(ctx, url, timeout_ms, 1, &err);
	if (c != NULL && !strncmp(url, "ipc://", 6))
		client_set_alive(c, listening, (void *)url);
	if (c == NULL || client_call(c, q, r, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		goto out;
	}
	if (r->type == PROTO_ERROR) {
		fprintf(stderr, "%s: verifier: %s: %s\n", prog, r->code, r->msg);
		goto out;
	}
	if (r->type == PROTO_PONG) {
		printf("%s\n", r->msg);
		rc = 0;
		goto out;
	}
	if (r->type != PROTO_RESULT || r->n_stats < 13) {
		fprintf(stderr, "%s: unexpected reply '%s'\n", prog, proto_type_name(r->type));
		goto out;
	}
	const double *s = r->stats;
	printf("policy %s, lookahead %d, seed %d\n", policy, lookahead, seed);
	printf("tokens %.0f (%.2f s of audio) in %.3f s: %.1f tokens/s\n", s[10], s[10] / 50, s[11],
	       s[5]);
	printf("rounds %.0f, drafted %.0f, accepted %.0f, acceptance rate %.3f, mean acceptance "
	       "length %.3f\n", s[0], s[1], s[2], s[3], s[4]);
	if (r->n_stats > 13) {
		printf("acceptance per position:");
		for (int i = 13; i < r->n_stats; i++)
			printf(" %.3f", s[i]);
		printf("\n");
	}
	printf("time: draft %.3f s, target %.3f s, policy %.3f s, messaging %.3f s; resends %.0f\n",
	       s[6], s[7], s[8], s[9], s[12]);
	if (out)
		printf("audio: %s\n", out);
	if (print_tokens) {
		for (int i = 0; i < r->n_append; i++)
			printf("%s%d", i ? " " : "", r->append[i]);
		printf("\n");
	}
	rc = 0;
out:
	client_free(&c);
	zmq_ctx_term(ctx);
	free(text);
	free(asg_img);
	free(q);
	free(r);
	return rc;
}
