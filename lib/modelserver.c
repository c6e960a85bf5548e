/* modelserver.c: draftd and targetd (see modelserver.h). One poll loop:
 * receive, validate, serve, reply; signal handlers only set a flag. */
#include "modelserver.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "model.h"
#include "net.h"
#include "device.h"
#include "opts.h"
#include "proto.h"
#include "rng.h"
#include "mtp.h"
#include "sampling.h"

typedef struct session {
	uint64_t id;
	llama_kv *kv;
	int32_t *tokens; /* the ids in the cache, so a resent prefix is not recomputed */
	int cap;
	uint64_t last_use;
} session;

typedef struct server {
	const char *prog;
	llama_model *model;
	session *s;
	int n, cap;
	uint64_t clock;
	long long kv_mem;
	float *logits, *probs; /* PROTO_MAX_N x vocab */
	unsigned long evicted;
	mtp_heads *heads;      /* the model directory's mtp.safetensors, or NULL */
	float *hidden;         /* PROTO_MAX_N x hidden: final states of a score */
	float *hprobs;         /* PROTO_MAX_N x (1 + heads) x vocab, with heads */
} server;

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static void logf_(const server *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(const server *sv, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", sv->prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static session *find(server *sv, uint64_t id)
{
	for (int i = 0; i < sv->n; i++)
		if (sv->s[i].id == id)
			return &sv->s[i];
	return NULL;
}

static void drop(server *sv, session *x)
{
	llama_kv_free(&x->kv);
	free(x->tokens);
	*x = sv->s[--sv->n];
}

static session *create(server *sv, uint64_t id, pcg_err *err)
{
	if (sv->n == sv->cap) {
		int cap = sv->cap ? 2 * sv->cap : 8;
		session *s = realloc(sv->s, (size_t)cap * sizeof *s);
		if (s == NULL) {
			pcg_fail(err, "out of memory for sessions");
			return NULL;
		}
		sv->s = s;
		sv->cap = cap;
	}
	session *x = &sv->s[sv->n];
	memset(x, 0, sizeof *x);
	x->id = id;
	x->kv = llama_kv_new(sv->model);
	if (x->kv == NULL) {
		pcg_fail(err, "out of memory for a KV cache");
		return NULL;
	}
	sv->n++;
	return x;
}

/* Least recently used sessions go until the caches fit in --kv-mem; the one
 * just served stays. A client whose session went gets "unknown-session". */
static void evict(server *sv, uint64_t keep)
{
	for (;;) {
		size_t total = 0;
		session *lru = NULL;
		for (int i = 0; i < sv->n; i++) {
			total += llama_kv_bytes(sv->s[i].kv);
			if (sv->s[i].id != keep && (!lru || sv->s[i].last_use < lru->last_use))
				lru = &sv->s[i];
		}
		if ((long long)total <= sv->kv_mem || lru == NULL)
			return;
		logf_(sv, "evicting session %llu (kv %zu bytes, total %zu > --kv-mem %lld)",
		      (unsigned long long)lru->id, llama_kv_bytes(lru->kv), total, sv->kv_mem);
		drop(sv, lru);
		sv->evicted++;
	}
}

/* Brings x to pos tokens, then appends toks[0..n), reusing cached positions
 * whose ids match, and computes the last n_out positions' logits into
 * sv->logits, or with samp their probabilities into out (computed where the
 * model runs: on a GPU only probabilities come back). */
static int extend(server *sv, session *x, int pos, const int32_t *toks, int n, int n_out,
		  const llama_rows *rows, const pcg_sampling *samp, float *out, float *hidden,
		  pcg_err *err)
{
	int keep = pos, i = 0, len = llama_kv_len(x->kv);

	while (i < n - n_out && keep < len && x->tokens[keep] == toks[i])
		keep++, i++;
	if (llama_kv_truncate(x->kv, keep, err) < 0)
		return -1;
	if (keep + n - i > x->cap) {
		int cap = (keep + n - i) * 2;
		int32_t *t = realloc(x->tokens, (size_t)cap * sizeof *t);
		if (t == NULL)
			return pcg_fail(err, "out of memory");
		x->tokens = t;
		x->cap = cap;
	}
	if ((samp ? llama_forward_probs(sv->model, x->kv, (const int *)toks + i, n - i, n_out,
					rows, samp, out, hidden, err)
		  : llama_forward_hidden(sv->model, x->kv, (const int *)toks + i, n - i, n_out,
					 rows, sv->logits, hidden, err)) < 0) {
		llama_kv_truncate(x->kv, keep, NULL);
		return -1;
	}
	memcpy(x->tokens + keep, toks + i, (size_t)(n - i) * sizeof *toks);
	return 0;
}

static int row_token(const llama_rows *rows, int idx)
{
	for (int i = 0; i < rows->n; i++) {
		int len = rows->end[i] - rows->begin[i];
		if (idx < len)
			return rows->begin[i] + idx;
		idx -= len;
	}
	return -1;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Whether the sampler leaves zeros: then the reply is worth sending as the
 * nonzero entries alone (proto decides per vector by size; either way the
 * client reads the same vector). */
static int truncates(const pcg_sampling *s, int width)
{
	return s->temperature == 0 || (s->top_k > 0 && s->top_k < width) || s->top_p < 1;
}

/* Serves one parsed request into rep; errors become error replies. */
static void serve(server *sv, const proto_msg *q, proto_msg *rep)
{
	pcg_err err = { "" };
	const llama_config *c = llama_get_config(sv->model);
	session *x;

	rep->id = q->id;
	switch (q->type) {
	case PROTO_PING:
		rep->type = PROTO_PONG;
		snprintf(rep->msg, sizeof rep->msg,
			 "%s layers=%d vocab=%d hidden=%d heads=%d sessions=%d", sv->prog,
			 llama_n_layers(sv->model), c->vocab, c->hidden,
			 sv->heads ? mtp_n_heads(sv->heads) : 0, sv->n);
		return;
	case PROTO_DROP:
		if ((x = find(sv, q->session)) != NULL)
			drop(sv, x);
		rep->type = PROTO_OK;
		return;
	case PROTO_PROPOSE:
	case PROTO_SCORE:
		break;
	default:
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "a server does not take '%s'",
			    proto_type_name(q->type));
		return;
	}
	for (int i = 0; i < q->rows.n; i++)
		if (q->rows.end[i] > c->vocab) {
			proto_error(rep, q->id, PROTO_E_BAD_REQUEST,
				    "field 'rows': [%d, %d) beyond the vocabulary of %d", q->rows.begin[i],
				    q->rows.end[i], c->vocab);
			return;
		}
	const int width = llama_rows_count(sv->model, &q->rows);
	x = find(sv, q->session);
	if (x == NULL || q->pos > llama_kv_len(x->kv)) {
		if (q->pos != 0) {
			proto_error(rep, q->id, PROTO_E_UNKNOWN_SESSION,
				    "session %llu: not held up to position %d; resend from 0",
				    (unsigned long long)q->session, q->pos);
			return;
		}
		if (x == NULL && (x = create(sv, q->session, &err)) == NULL) {
			proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
			return;
		}
	}
	x->last_use = ++sv->clock;

	const int n_out = q->type == PROTO_SCORE ? q->n : 1;
	const int nh = q->type == PROTO_SCORE ? q->heads : 0;
	if (nh > 0 && (sv->heads == NULL || nh > mtp_n_heads(sv->heads))) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "field 'heads': %d MTP heads asked, "
			    "the model has %d (%s)", nh, sv->heads ? mtp_n_heads(sv->heads) : 0,
			    MTP_FILE_NAME);
		return;
	}
	/* Probabilities straight from the pass, except for a score with MTP
	 * heads, which tempers the heads' logits alike on the host. */
	if (extend(sv, x, q->pos, q->append, q->n_append, n_out, &q->rows,
		   nh > 0 ? NULL : &q->samp, sv->probs, nh > 0 ? sv->hidden : NULL, &err) < 0) {
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
		return;
	}
	rep->type = PROTO_PROBS;
	rep->width = width;
	rep->f16 = q->f16;
	rep->sparse = truncates(&q->samp, width);
	rep->probs = sv->probs;
	rep->n_x = 0;
	if (q->type == PROTO_SCORE && nh == 0) {
		rep->n_vec = q->n;
		return;
	}
	if (q->type == PROTO_SCORE) {
		/* Per position: q, then the heads' distributions, tempered alike. */
		const int H = llama_get_config(sv->model)->hidden;
		float *hl = sv->probs; /* the heads' logits: nh x width of scratch */
		for (int i = 0; i < q->n; i++) {
			float *out = sv->hprobs + (size_t)i * (1 + nh) * width;
			pcg_probs(sv->logits + (size_t)i * width, width, &q->samp, out, &err);
			if (mtp_logits(sv->heads, sv->hidden + (size_t)i * H, 0, nh, &q->rows, hl,
				       &err) < 0) {
				proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
				return;
			}
			for (int k = 0; k < nh; k++)
				pcg_probs(hl + (size_t)k * width, width, &q->samp,
					  out + (size_t)(1 + k) * width, &err);
		}
		rep->probs = sv->hprobs;
		rep->n_vec = q->n * (1 + nh);
		return;
	}
	/* propose: x_i ~ p_i, fed back to get p_{i+1}; x_n is not fed. */
	pcg_rng rng;
	pcg_rng_init(&rng, q->seed, 0);
	for (int i = 0; i < q->n; i++) {
		float *p = sv->probs + (size_t)i * width;
		if (i > 0) { /* p_0 came with the appended tokens */
			int32_t tok = rep->x[i - 1];
			if (extend(sv, x, llama_kv_len(x->kv), &tok, 1, 1, &q->rows, &q->samp, p,
				   NULL, &err) < 0) {
				proto_error(rep, q->id, PROTO_E_INTERNAL, "%s", err.msg);
				return;
			}
		}
		int idx = pcg_sample(p, width, pcg_rng_uniform(&rng));
		rep->x[rep->n_x++] = row_token(&q->rows, idx < 0 ? 0 : idx);
	}
	rep->n_vec = q->n;
}

/* net_serve's handler: serve, time the compute, evict beyond the budget. */
static void handle(void *ctx, const proto_msg *q, proto_msg *rep)
{
	server *sv = ctx;
	double t0 = now();

	serve(sv, q, rep);
	rep->n_stats = 1;
	rep->stats[0] = now() - t0;
	if (rep->type == PROTO_PROBS || rep->type == PROTO_OK)
		evict(sv, q->session);
}

int modelserver_serve(void *ctx, const ms_config *cfg, volatile sig_atomic_t *stop_flag)
{
	pcg_err err = { "" };
	server sv = { .prog = cfg->prog };
	void *sock = NULL;
	int rc = 1;

	llama_open_opts lo = { .layers = cfg->n_layers ? cfg->layers : NULL,
			       .n_layers = cfg->n_layers, .device = cfg->device };
	sv.model = llama_open(cfg->model_dir, &lo, &err);
	if (sv.model == NULL)
		goto fail;
	sv.kv_mem = cfg->kv_mem;
	const int V = llama_get_config(sv.model)->vocab;
	sv.logits = malloc((size_t)PROTO_MAX_N * V * sizeof(float));
	sv.probs = malloc((size_t)PROTO_MAX_N * V * sizeof(float));
	if (!sv.logits || !sv.probs) {
		pcg_fail(&err, "out of memory");
		goto fail;
	}
	/* MTP heads beside the model (a draft made of a layer subset has none:
	 * they read the whole target's last state). */
	char hpath[4200];
	snprintf(hpath, sizeof hpath, "%s/%s", cfg->model_dir, MTP_FILE_NAME);
	if (cfg->n_layers == 0 && access(hpath, F_OK) == 0) {
		if ((sv.heads = mtp_open(sv.model, hpath, &err)) == NULL)
			goto fail;
		const int nh = mtp_n_heads(sv.heads), H = llama_get_config(sv.model)->hidden;
		sv.hidden = malloc((size_t)PROTO_MAX_N * H * sizeof(float));
		sv.hprobs = malloc((size_t)PROTO_MAX_N * (1 + nh) * V * sizeof(float));
		if (!sv.hidden || !sv.hprobs) {
			pcg_fail(&err, "out of memory for %d MTP heads", nh);
			goto fail;
		}
	}
	sock = net_server(ctx, cfg->listen_url, &err);
	if (sock == NULL)
		goto fail;
	logf_(&sv, "serving %s (%d layers, %d MTP heads) on %s", cfg->model_dir,
	      llama_n_layers(sv.model), sv.heads ? mtp_n_heads(sv.heads) : 0, cfg->listen_url);

	net_counts nc = { 0 };
	if (net_serve(sock, cfg->prog, handle, &sv, stop_flag, &nc) < 0) {
		pcg_fail(&err, "out of memory");
		goto fail;
	}
	logf_(&sv, "stopping: %lu served, %lu errors, %lu dropped, %lu evicted", nc.served, nc.errors,
	      nc.dropped, sv.evicted);
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "%s: %s\n", cfg->prog, err.msg);
out:
	net_server_close(&sock, cfg->listen_url);
	while (sv.n > 0)
		drop(&sv, &sv.s[0]);
	free(sv.s);
	free(sv.logits);
	free(sv.probs);
	free(sv.hidden);
	free(sv.hprobs);
	mtp_close(&sv.heads);
	llama_close(&sv.model);
	return rc;
}

int modelserver_parse_layers(const char *s, int *layers, int max, pcg_err *err)
{
	int n = 0;

	while (s && *s) {
		char *end;
		long l = strtol(s, &end, 10);
		if (end == s || l < 0 || l > 100000 || (*end && *end != ',') || n == max)
			return pcg_fail(err, "'%s' is not a comma-separated list of layers", s);
		layers[n++] = (int)l;
		s = *end ? end + 1 : end;
	}
	return n;
}

static const char *model_dir, *listen_url, *layers_s, *curve_key, *curve_allow, *device;
static int threads;
static long long kv_mem;

int modelserver_main(int argc, char **argv, ms_role role)
{
	const char *prog = role == MS_DRAFT ? "draftd" : "targetd";
	const pcg_opt opts[] = {
		{ "model", PCG_OPT_STR, &model_dir, NULL, 1, 0, "PATH", "model directory or GGUF file" },
		{ "listen", PCG_OPT_STR, &listen_url,
		  role == MS_DRAFT ? "tcp://127.0.0.1:7601" : "tcp://127.0.0.1:7602", 1, 0, "URL",
		  "endpoint to bind (inproc://, ipc://PATH, tcp://127.0.0.1:PORT)" },
		{ "layers", PCG_OPT_STR, &layers_s, NULL, 1, 0, "LIST",
		  "serve only these layers of the checkpoint, e.g. 0,1,15 (a draft)" },
		{ "kv-mem", PCG_OPT_SIZE, &kv_mem, "2G", 1 << 20, 1e15, "BYTES",
		  "KV cache budget; least recently used sessions are evicted beyond it" },
		{ "threads", PCG_OPT_INT, &threads, "0", 0, 1024, "N", "threads (0: all cores)" },
		{ "device", PCG_OPT_STR, &device, "cpu", 1, 0, "DEV",
		  "where the model runs: cpu, cuda or cuda:N" },
		{ "curve-key", PCG_OPT_STR, &curve_key, NULL, 1, 0, "FILE",
		  "this server's CURVE keypair (pcg-keygen); needed for tcp beyond loopback" },
		{ "curve-allow", PCG_OPT_STR, &curve_allow, NULL, 1, 0, "FILE",
		  "public keys of the clients let in (one per line)" },
		{ NULL },
	};
	const char *synopsis = "--model DIR [--listen URL] [--layers LIST] [--kv-mem BYTES] [--threads N] "
			       "[--device DEV] [--curve-key FILE --curve-allow FILE]";
	pcg_err err = { "" };
	int layers[1024], n_layers;

	/* Servers of a pipeline share cores and take turns. OpenMP threads that
	 * spin after each parallel region (libgomp's default) steal the cores
	 * from the other process: 8x slower rounds measured on 2 cores with a
	 * tiny model. libgomp reads OMP_WAIT_POLICY when it is loaded, before
	 * main, so set it and start again; a user's own setting wins. */
	char self[4096];
	ssize_t sl;
	if (getenv("OMP_WAIT_POLICY") == NULL &&
	    (sl = readlink("/proc/self/exe", self, sizeof self - 1)) > 0) {
		self[sl] = '\0';
		setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
		execv(self, argv); /* the real path: ps shows the program's name */
		/* could not: go on with the default */
	}
	int first = pcg_opts_parse(opts, argc, argv, &err);
	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, synopsis, opts);
		return 0;
	}
	if (first < 0 || first != argc || model_dir == NULL) {
		fprintf(stderr, "%s: %s\n", prog, first < 0 ? err.msg
			: first != argc ? "unexpected argument" : "--model DIR is required");
		pcg_opts_usage(stderr, prog, synopsis, opts);
		return 2;
	}
	if ((n_layers = modelserver_parse_layers(layers_s, layers, 1024, &err)) < 0) {
		fprintf(stderr, "%s: --layers: %s\n", prog, err.msg);
		return 2;
	}
	int dev;
	if (pcg_device_parse(device, &dev, &err) < 0) {
		fprintf(stderr, "%s: --device: %s\n", prog, err.msg);
		return 2;
	}
	if (pcg_device_check(dev, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return 1;
	}
	if (net_curve_setup(curve_key, curve_allow, NULL, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return 1;
	}
	if (net_endpoint_ok(listen_url, 1, &err) < 0) {
		fprintf(stderr, "%s: --listen: %s\n", prog, err.msg);
		return 2;
	}
	pcg_set_threads(threads);

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal; /* no SA_RESTART: zmq_poll returns EINTR */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	void *ctx = zmq_ctx_new();
	if (ctx == NULL) {
		fprintf(stderr, "%s: zmq_ctx_new failed\n", prog);
		return 1;
	}
	ms_config cfg = { prog, model_dir, listen_url, layers, n_layers, kv_mem, device };
	int rc = modelserver_serve(ctx, &cfg, &stop);
	zmq_ctx_term(ctx);
	return rc;
}
