/* asg-build: builds the Acoustic Similarity Groups of a target model's
 * speech-token embeddings (or of any [n, d] matrix in a safetensors file)
 * and writes the ASG file the verifier loads (man/asg.5).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "clock.h"
#include "asg_build.h"
#include "device.h"
#include "llasa.h"
#include "model.h"
#include "opts.h"
#include "safetensors.h"
#include "tokenizer.h"

static const char *prog = "asg-build";
static const char *SYNOPSIS =
	"(--model DIR | --embeddings FILE) [--tensor NAME] [--rows A:B] [--theta X]\n"
	"       [--topk K] [--weights equal|similarity] [--knn K] [--threads N] [--device DEV]\n"
	"       -o FILE";

static const char *model_dir, *emb_path, *tensor, *rows_s, *weights_s, *out_path, *device_s;
static double theta;
static int topk, knn, threads, quiet;

static const pcg_opt opts[] = {
	{ "model", PCG_OPT_STR, &model_dir, NULL, 1, 0, "DIR",
	  "target model directory: the embedding rows of its speech tokens" },
	{ "embeddings", PCG_OPT_STR, &emb_path, NULL, 1, 0, "FILE",
	  "a .safetensors file holding an [n, d] matrix (f32, f16 or bf16)" },
	{ "tensor", PCG_OPT_STR, &tensor, "model.embed_tokens.weight", 1, 0, "NAME",
	  "the matrix's tensor name" },
	{ "rows", PCG_OPT_STR, &rows_s, NULL, 1, 0, "A:B",
	  "rows A..B-1 (default: the speech tokens of --model, all rows of --embeddings)" },
	{ "theta", PCG_OPT_FLOAT, &theta, "0.4", 0, 0.999999, "X",
	  "cosine threshold of Eq. 1 (the paper: 0.38-0.45)" },
	{ "topk", PCG_OPT_INT, &topk, "0", 0, INT_MAX, "K",
	  "keep at most the K most similar tokens per G(t) (0: all)" },
	{ "weights", PCG_OPT_STR, &weights_s, "equal", 1, 0, "W",
	  "equal (1/N(t), Eq. 3) or similarity (by cosine, normalised per token)" },
	{ "knn", PCG_OPT_INT, &knn, "0", 0, 65536, "K",
	  "write a neighbour file for the lantern policy instead: each token's K nearest "
	  "(0: groups)" },
	{ "threads", PCG_OPT_INT, &threads, "0", 0, 1024, "N", "threads (0: all cores)" },
	{ "device", PCG_OPT_STR, &device_s, "cpu", 1, 0, "DEV",
	  "where the products run: cpu, cuda or cuda:N" },
	{ "output", PCG_OPT_STR, &out_path, NULL, 1, 0, "FILE",
	  "the ASG file (also -o FILE; - for standard output)" },
	{ "quiet", PCG_OPT_FLAG, &quiet, NULL, 1, 0, NULL, "no progress or summary on stderr" },
	{ NULL },
};

/* Progress: a line every 5 s once the run has taken 5 s, so small runs
 * stay quiet. Work is counted in row pairs; it is shown as rows done. */
typedef struct progress {
	double start, last;
	int n;
} progress;

static void on_progress(void *ctx, double done, double total)
{
	progress *p = ctx;
	double t = pcg_now(), el = t - p->start, rows = p->n * (done / total);

	if (quiet || t - p->last < 5.0 || done <= 0 || done >= total)
		return;
	p->last = t;
	double left = el * (total - done) / done;
	fprintf(stderr, "%s: %.1f%% (%.0f of %d rows), %.0f rows/s, %d:%02d left\n", prog,
		100.0 * done / total, rows, p->n, rows / el, (int)left / 60, (int)left % 60);
}

/* The speech rows of a model directory, looked up by token string in its
 * tokenizer.json (<|s_0|> and the count of consecutive <|s_N|>). */
static int speech_rows(const char *dir, long *a, long *b, pcg_err *err)
{
	char path[4200];
	tokenizer *t;
	llasa_vocab v;
	int rc;

	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	t = tok_load(path, err);
	if (t == NULL)
		return -1;
	rc = llasa_vocab_init(t, &v, err);
	tok_free(&t);
	if (rc < 0) {
		pcg_err_prefix(err, path);
		return -1;
	}
	*a = v.speech_first;
	*b = (long)v.speech_first + v.speech_count;
	return 0;
}

static int parse_rows(const char *s, long *a, long *b)
{
	char *end;

	errno = 0;
	*a = strtol(s, &end, 10);
	if (errno || end == s || *end != ':' || *a < 0)
		return -1;
	s = end + 1;
	*b = strtol(s, &end, 10);
	return errno || end == s || *end || *b <= *a ? -1 : 0;
}

/* Rows [a, b) of the tensor as f32 (a = b = -1: all rows). */
static float *load_rows(const char *path, const char *name, long *a, long *b, int *d,
			pcg_err *err)
{
	char dir[4200], llm[256];
	st_ckpt *c = st_open(model_dir ? llama_checkpoint_dir(path, dir, sizeof dir) : path, err);
	const st_tensor *t;
	float *E = NULL;

	if (c == NULL)
		return NULL;
	t = st_find(c, name);
	/* a Llasa+ checkpoint's backbone is under llm. (lib/engine/model.h) */
	snprintf(llm, sizeof llm, "llm.%s", name);
	if (t == NULL && model_dir && (t = st_find(c, llm)) != NULL)
		name = llm;
	if (t == NULL) {
		pcg_fail(err, "%s: no tensor '%s'", path, name);
		goto out;
	}
	if (t->ndim != 2 || t->dtype == PCG_DTYPE_OTHER) {
		pcg_fail(err, "%s: tensor '%s': need a 2-D f32, f16 or bf16 matrix, found %d-D %s",
			 path, name, t->ndim, t->dtype_name);
		goto out;
	}
	if (*a < 0)
		*a = 0, *b = (long)t->shape[0];
	if (*b > t->shape[0] || *b - *a > INT_MAX || t->shape[1] < 1 || t->shape[1] > INT_MAX) {
		pcg_fail(err, "%s: tensor '%s' is [%lld, %lld]: rows %ld:%ld out of range", path,
			 name, (long long)t->shape[0], (long long)t->shape[1], *a, *b);
		goto out;
	}
	*d = (int)t->shape[1];
	E = malloc((size_t)(*b - *a) * *d * sizeof *E);
	if (E == NULL) {
		pcg_fail(err, "out of memory for %ld x %d floats", *b - *a, *d);
		goto out;
	}
	pcg_to_f32(E, (const unsigned char *)t->data + (size_t)*a * *d * pcg_dtype_size(t->dtype),
		   t->dtype, (size_t)(*b - *a) * *d);
out:
	st_close(&c); /* the mapping goes: only the f32 copy stays resident */
	return E;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	asg_build_opts o = { 0 };
	progress pr;
	long a = -1, b = -1;
	float *E = NULL;
	asg *g = NULL;
	int d = 0, first, rc = 1;
	pcg_device device = pcg_device_cpu();

	/* -o is the one short option: the options table speaks --output. */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "-o"))
			argv[i] = "--output";
	first = pcg_opts_parse(opts, argc, argv, &err);
	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	const char *bad = first < 0 ? err.msg
		: first != argc ? "unexpected argument"
		: !out_path ? "-o FILE is required"
		: !model_dir == !emb_path ? "give one of --model DIR and --embeddings FILE"
		: rows_s && parse_rows(rows_s, &a, &b) < 0 ? "--rows: want A:B with 0 <= A < B"
		: strcmp(weights_s, "equal") && strcmp(weights_s, "similarity")
		? "--weights: want equal or similarity"
		: knn && (pcg_opts_given(opts, "theta") || pcg_opts_given(opts, "topk") ||
			  pcg_opts_given(opts, "weights"))
		? "--knn takes no --theta, --topk or --weights (it keeps the K nearest, weighted by "
		  "cosine)"
		: knn && strcmp(device_s, "cpu") ? "--knn runs on the CPU: leave out --device"
		: pcg_device_parse(device_s, &device, &err) < 0 ? err.msg : NULL;
	if (bad)
		return pcg_usage_error(prog, SYNOPSIS, opts, bad);
	/* Before the rows are read: a missing GPU should not cost the load. */
	if (pcg_device_check(device, &err) < 0)
		goto fail;
	pr.start = pr.last = pcg_now();
	if (model_dir && !rows_s && speech_rows(model_dir, &a, &b, &err) < 0) {
		fprintf(stderr, "%s: %s (give --rows A:B for a model without LLaSA's speech tokens)\n",
			prog, err.msg);
		return 1;
	}
	E = load_rows(model_dir ? model_dir : emb_path, tensor, &a, &b, &d, &err);
	if (E == NULL)
		goto fail;

	pr.n = (int)(b - a);
	o.theta = theta;
	o.topk = topk;
	o.weights = strcmp(weights_s, "similarity") ? ASG_W_EQUAL : ASG_W_SIMILARITY;
	o.token_offset = (uint32_t)a;
	o.threads = threads;
	o.device = device_s;
	o.progress = on_progress;
	o.progress_ctx = &pr;
	if (a > UINT32_MAX) {
		pcg_fail(&err, "--rows: start %ld does not fit the file's 32-bit token offset", a);
		goto fail;
	}
	g = knn ? asg_build_knn(E, (int)(b - a), d, knn, &o, &err)
		: asg_build(E, (int)(b - a), d, &o, &err);
	free(E);
	E = NULL;
	if (g == NULL || asg_write(g, out_path, &err) < 0)
		goto fail;
	if (!quiet) {
		struct rusage ru;
		getrusage(RUSAGE_SELF, &ru);
		asg_print_stats(stderr, g, "asg-build: ");
		char dev[16];
		fprintf(stderr, "%s: rows\t%ld:%ld of %s, %d columns\n", prog, a, b,
			model_dir ? model_dir : emb_path, d);
		fprintf(stderr, "%s: device\t%s\n", prog, pcg_device_name(device, dev, sizeof dev));
		fprintf(stderr, "%s: seconds\t%.1f\n", prog, pcg_now() - pr.start);
		fprintf(stderr, "%s: peak_rss_mb\t%.0f\n", prog, ru.ru_maxrss / 1024.0);
	}
	rc = 0;
	goto out;
fail:
	pcg_report(prog, &err);
out:
	free(E);
	asg_close(&g);
	return rc;
}
