/* bench/messaging.c: the cost of messaging per round of speculative
 * decoding, as the verifier pays it: one propose (L = 3 drafts) to a draft
 * server and one score (L + 1 = 4 positions) to a target server, with
 * distributions over V = 65,537 rows (LLaSA's speech range and the end
 * token), as f32 and as f16, over inproc://, ipc:// and tcp:// loopback.
 * The servers run as threads of this process on a model small enough that
 * the messaging shows; each round's overhead is its wall time minus the
 * compute time the servers report. Prints the median and p90 over the
 * rounds and the bytes of the replies. Sampling is temperature 1 with no
 * truncation (dense vectors) unless --top-k or --top-p truncate it (then
 * the servers send the kept entries alone).
 * Usage: bench-messaging --model DIR [--rounds N] [--top-k K] [--top-p P]
 * (DIR: a model whose vocabulary ends with 65,536 speech tokens, e.g.
 * pcg-mkmodel --speech 65536)
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "clock.h"
#include "client.h"
#include "model.h"
#include "modelserver.h"
#include "opts.h"
#include "proto.h"

static const char *model_dir, *transport;
static int rounds, width, top_k;
static double top_p;
static const pcg_opt opts[] = {
	{ "model", PCG_OPT_STR, &model_dir, NULL, 1, 0, "DIR", "model directory" },
	{ "rounds", PCG_OPT_INT, &rounds, "100", 5, 100000, "N", "rounds per configuration" },
	{ "width", PCG_OPT_INT, &width, "65537", 2, 65537, "N",
	  "rows per distribution (65,537: LLaSA's; small: the latency of a round alone)" },
	{ "top-k", PCG_OPT_INT, &top_k, "0", 0, 65537, "K", "sampling's top-k (0: off)" },
	{ "top-p", PCG_OPT_FLOAT, &top_p, "1", 1e-6, 1, "P", "sampling's top-p (1: off)" },
	{ "transport", PCG_OPT_STR, &transport, "all", 1, 0, "T", "inproc, ipc, tcp or all" },
	{ NULL },
};

static volatile sig_atomic_t stop;

typedef struct srv {
	pthread_t th;
	void *ctx;
	ms_config cfg;
} srv;

static void *serve(void *a)
{
	srv *s = a;
	modelserver_serve(s->ctx, &s->cfg, &stop);
	return NULL;
}

/* Makes q a request of type t of session 1 + f16 over the context of ctxlen
 * ids, then x[0..n_x), asking for n vectors. */
static void request(proto_msg *q, proto_type t, int f16, const llama_rows *rows, int ctxlen,
		    const int *x, int n_x, int n)
{
	proto_init(q, t, 0);
	proto_model_req *r = proto_model_mut(q);
	r->session = 1 + (uint64_t)f16;
	r->n = n;
	r->samp = (pcg_sampling){ 1, top_k, (float)top_p };
	r->rows = *rows;
	r->f16 = f16;
	for (int i = 0; i < ctxlen; i++)
		r->append[r->n_append++] = 1 + i % 200;
	for (int i = 0; i < n_x; i++)
		r->append[r->n_append++] = x[i];
	if (t == PROTO_PROPOSE)
		q->propose.seed = 5;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first < 0 || first == PCG_OPTS_HELP || model_dir == NULL) {
		pcg_opts_usage(first == PCG_OPTS_HELP ? stdout : stderr, "bench-messaging",
			       "--model DIR [--rounds N] [--top-k K] [--top-p P] [--transport T]", opts);
		return first == PCG_OPTS_HELP ? 0 : 2;
	}
	llama_model *m = llama_open(model_dir, NULL, &err);
	if (m == NULL) {
		fprintf(stderr, "bench-messaging: %s\n", err.msg);
		return 1;
	}
	const int V = llama_get_config(m)->vocab;
	llama_close(&m);
	if (V < 65536 + 3) {
		fprintf(stderr, "bench-messaging: %s has %d tokens; want 65,536 speech tokens\n",
			model_dir, V);
		return 1;
	}
	const llama_rows rows = { 2, { V - (width - 1), V - 65536 - 3 }, { V, V - 65536 - 2 } };
	char ipc[3][256];
	const char *transports[3] = { "inproc", "ipc", "tcp" };
	snprintf(ipc[0], sizeof ipc[0], "/tmp/pcg-bench-msg-%d-d.sock", (int)getpid());
	snprintf(ipc[1], sizeof ipc[1], "/tmp/pcg-bench-msg-%d-t.sock", (int)getpid());
	pcg_set_threads(1);
	printf("messaging per round (propose L=3 + score 4 positions, V=%d, top-k %d, top-p %g), "
	       "median of %d rounds\n", width, top_k, top_p, rounds);
	for (int tr = 0; tr < 3; tr++) {
		if (strcmp(transport, "all") && strcmp(transport, transports[tr]))
			continue;
		char d_url[300], t_url[300];
		if (tr == 0) {
			snprintf(d_url, sizeof d_url, "inproc://d");
			snprintf(t_url, sizeof t_url, "inproc://t");
		} else if (tr == 1) {
			snprintf(d_url, sizeof d_url, "ipc://%s", ipc[0]);
			snprintf(t_url, sizeof t_url, "ipc://%s", ipc[1]);
		} else {
			snprintf(d_url, sizeof d_url, "tcp://127.0.0.1:%d", 17000 + (int)getpid() % 20000);
			snprintf(t_url, sizeof t_url, "tcp://127.0.0.1:%d", 17001 + (int)getpid() % 20000);
		}
		void *ctx = zmq_ctx_new();
		srv s[2] = { { .ctx = ctx, .cfg = { "draftd", model_dir, d_url, NULL, 0, 1LL << 30, NULL } },
			     { .ctx = ctx, .cfg = { "targetd", model_dir, t_url, NULL, 0, 1LL << 30, NULL } } };
		stop = 0;
		for (int i = 0; i < 2; i++)
			pthread_create(&s[i].th, NULL, serve, &s[i]);
		pcg_client *d = client_new(ctx, d_url, 10000, 1, &err);
		pcg_client *t = client_new(ctx, t_url, 10000, 1, &err);
		proto_msg *q = calloc(1, sizeof *q), *r = calloc(1, sizeof *r);
		double *over = malloc((size_t)rounds * sizeof *over);
		for (int f16 = 0; f16 < 2; f16++) {
			int ctxlen = 8, ok = 1;
			double bytes = 0;
			for (int k = -3; k < rounds && ok; k++) { /* 3 warm-up rounds */
				double t0 = pcg_now(), compute = 0;
				request(q, PROTO_PROPOSE, f16, &rows, ctxlen, NULL, 0, 3);
				ok &= client_call(d, q, r, &err) == 0 && r->type == PROTO_PROBS;
				compute += ok && r->probs.n_stats ? r->probs.stats[0] : 0;
				bytes += k >= 0 ? (double)r->len : 0;
				int x[3] = { 0 };
				if (ok)
					memcpy(x, r->probs.x, sizeof x);
				request(q, PROTO_SCORE, f16, &rows, ctxlen, x, 3, 4);
				ok &= client_call(t, q, r, &err) == 0 && r->type == PROTO_PROBS;
				compute += ok && r->probs.n_stats ? r->probs.stats[0] : 0;
				bytes += k >= 0 ? (double)r->len : 0;
				if (k >= 0)
					over[k] = pcg_now() - t0 - compute;
			}
			if (!ok) {
				fprintf(stderr, "bench-messaging: %s: %s %s\n", transports[tr],
					err.msg, r->type == PROTO_ERROR ? r->error.msg : "");
				return 1;
			}
			qsort(over, (size_t)rounds, sizeof *over, cmp);
			printf("%-6s %s: %7.3f ms per round (p90 %.3f ms), replies of %.4f MB per round\n",
			       transports[tr], f16 ? "f16" : "f32", over[rounds / 2] * 1e3,
			       over[rounds * 9 / 10] * 1e3, bytes / rounds / 1e6);
		}
		client_free(&d);
		client_free(&t);
		stop = 1;
		for (int i = 0; i < 2; i++)
			pthread_join(s[i].th, NULL);
		zmq_ctx_term(ctx);
		free(q);
		free(r);
		free(over);
	}
	return 0;
}
