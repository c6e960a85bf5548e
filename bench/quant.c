/* bench/quant.c: what a quantised model costs in quality, as llama.cpp's
 * perplexity tool reports it for its quants (--kl-divergence): the
 * reference model (a Hugging Face directory, or any model file) writes a
 * sequence by sampling from a prompt with a fixed seed; each quantised file
 * then reads the same sequence position by position through the decode
 * kernels (or in blocks of --block positions, as a verification does), and
 * its next-token distribution over the rows that matter (LLaSA: the speech
 * range and the end token; --rows full: the whole vocabulary) is compared
 * with the reference's: the mean and 99th percentile of KL(ref || quant),
 * how often both put the same token first, and sum_i min(p_i, q_i): the
 * probability that standard speculative sampling accepts a token the
 * quantised model drafts for the reference (so the file's acceptance rate as
 * a draft, with no training). One line per file.
 *
 * Usage: bench-quant --model REF [--tokens N] [--seed S] [--block B]
 *                    [--rows speech|full] [--threads N] FILE.gguf ...
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matmul.h"
#include "model.h"
#include "opts.h"
#include "qmatmul.h"
#include "llasa.h"
#include "rng.h"
#include "tokenizer.h"

#include "../tests/unit/numeric.h"

static const char *ref_path, *rows_s;
static int n_tokens, seed, block, threads;
static const pcg_opt opts[] = {
	{ "model", PCG_OPT_STR, &ref_path, NULL, 1, 0, "PATH", "the reference model" },
	{ "tokens", PCG_OPT_INT, &n_tokens, "200", 2, 100000, "N", "positions compared" },
	{ "seed", PCG_OPT_INT, &seed, "1", 0, 2147483647, "S", "the reference's sampling seed" },
	{ "block", PCG_OPT_INT, &block, "1", 1, 8, "B", "positions per forward pass" },
	{ "rows", PCG_OPT_STR, &rows_s, "speech", 1, 0, "R",
	  "speech (the speech range and the end token, from the reference's tokenizer) or full" },
	{ "threads", PCG_OPT_INT, &threads, "2", 0, 1024, "N", "threads" },
	{ NULL },
};

static void die(const char *what, const pcg_err *err)
{
	fprintf(stderr, "bench-quant: %s: %s\n", what, err->msg);
	exit(1);
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Logits of every position of seq [0, n) after prompt position 0, in
 * passes of `block` positions: out [n - 1][V] (row t predicts seq[t + 1]). */
static void logits_of(llama_model *m, const int *seq, int n, const llama_rows *rows, int V,
		      float *out)
{
	pcg_err err = { "" };
	llama_kv *kv = llama_kv_new(m);

	if (kv == NULL)
		die("cache", &(pcg_err){ "out of memory" });
	for (int t = 0; t < n - 1; t += block) {
		const int b = n - 1 - t < block ? n - 1 - t : block;
		if (llama_forward(m, kv, seq + t, b, b, rows, out + (size_t)t * V, &err) < 0)
			die("forward", &err);
	}
	llama_kv_free(&kv);
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, "bench-quant", "--model REF [options] FILE.gguf ...", opts);
		return 0;
	}
	if (first < 0 || ref_path == NULL || first == argc) {
		fprintf(stderr, "bench-quant: %s\n", first < 0 ? err.msg
			: "--model REF and at least one FILE.gguf are required");
		return 2;
	}
	pcg_set_threads(threads);
	llama_model *ref = llama_open(ref_path, NULL, &err);
	if (ref == NULL)
		die(ref_path, &err);
	const llama_config *c = llama_get_config(ref);
	llama_rows rows = { 0 };
	if (!strcmp(rows_s, "speech")) {
		tokenizer *tok = tok_open(ref_path, &err);
		llasa_vocab lv;
		if (tok == NULL || llasa_vocab_init(tok, &lv, &err) < 0)
			die("the speech vocabulary", &err);
		tok_free(&tok);
		rows.n = 2;
		rows.begin[0] = lv.speech_first;
		rows.end[0] = lv.speech_first + lv.speech_count;
		rows.begin[1] = lv.end_id;
		rows.end[1] = lv.end_id + 1;
	} else if (strcmp(rows_s, "full")) {
		fprintf(stderr, "bench-quant: --rows: 'speech' or 'full'\n");
		return 2;
	}
	const llama_rows *rp = rows.n ? &rows : NULL;
	const int V = llama_rows_count(ref, rp);
	const int n = n_tokens + 1;
	int *seq = malloc((size_t)n * sizeof *seq);
	float *lr = malloc((size_t)n * V * sizeof *lr), *lq = malloc((size_t)n * V * sizeof *lq);
	double *p = malloc((size_t)V * sizeof *p), *q = malloc((size_t)V * sizeof *q);
	double *kls = malloc((size_t)n * sizeof *kls);
	if (!seq || !lr || !lq || !p || !q || !kls)
		die("memory", &(pcg_err){ "out of memory" });

	/* The reference writes the sequence: sampled at temperature 1 over the
	 * rows, from a start token. */
	{
		llama_kv *kv = llama_kv_new(ref);
		pcg_rng rng;
		pcg_rng_init(&rng, (uint64_t)seed, 0);
		seq[0] = c->bos >= 0 ? c->bos : 1;
		for (int t = 0; t < n - 1; t++) {
			if (llama_forward(ref, kv, seq + t, 1, 1, rp, lr, &err) < 0)
				die("forward", &err);
			softmax(lr, V, p);
			double u = pcg_rng_uniform(&rng), cum = 0;
			int k = V - 1;
			for (int i = 0; i < V; i++)
				if ((cum += p[i]) > u) {
					k = i;
					break;
				}
			/* row k back to a token id */
			int id = k;
			if (rp) {
				int off = k;
				for (int r = 0; r < rp->n; r++) {
					const int w = rp->end[r] - rp->begin[r];
					if (off < w) {
						id = rp->begin[r] + off;
						break;
					}
					off -= w;
				}
			}
			seq[t + 1] = id;
		}
		llama_kv_free(&kv);
	}
	logits_of(ref, seq, n, rp, V, lr);
	printf("reference %s, %d positions, rows %s (%d), block %d, cpu path %s\n", ref_path,
	       n - 1, rows_s, V, block, pcg_qmatmul_path());
	for (int f = first; f < argc; f++) {
		llama_model *m = llama_open(argv[f], NULL, &err);
		if (m == NULL)
			die(argv[f], &err);
		logits_of(m, seq, n, rp, V, lq);
		double sum = 0, acc = 0;
		int agree = 0;
		for (int t = 0; t < n - 1; t++) {
			const float *a = lr + (size_t)t * V, *b = lq + (size_t)t * V;
			softmax(a, V, p);
			softmax(b, V, q);
			double d = 0;
			for (int i = 0; i < V; i++) {
				if (p[i] > 0)
					d += p[i] * log(p[i] / (q[i] > 1e-300 ? q[i] : 1e-300));
				acc += p[i] < q[i] ? p[i] : q[i];
			}
			kls[t] = d;
			sum += d;
			agree += argmax(a, V) == argmax(b, V);
		}
		qsort(kls, (size_t)(n - 1), sizeof *kls, cmpd);
		printf("quant %s: kl_mean=%.5f kl_p99=%.5f top1=%.4f sd_accept=%.4f\n", argv[f],
		       sum / (n - 1), kls[(int)((n - 2) * 0.99)], (double)agree / (n - 1),
		       acc / (n - 1));
		llama_close(&m);
	}
	llama_close(&ref);
	free(seq);
	free(lr);
	free(lq);
	free(p);
	free(q);
	free(kls);
	return 0;
}
