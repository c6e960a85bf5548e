/* bench/forward.c: the engine on a checkpoint, e.g. LLaSA-1B's shape from
 * `pcg-mkmodel --preset llasa-1b`: prefill, autoregressive decode tokens/s
 * with the full lm_head and with the LLaSA speech range only, the cost of a
 * verification block of L+1 positions relative to one position, and peak
 * RSS relative to the checkpoint size. All measured side by side in one run;
 * a block and one position alternate pass by pass (blockpair).
 * On a GPU (--device cuda) with --bandwidth GB/s, also the decode step
 * against the memory-bandwidth bound: the weight bytes one step reads (every
 * layer's matrices and the lm_head rows of the speech range) over the
 * bandwidth.
 * With --batch N, instead: B = 1, 2, 4, .. N sequences, each with its own
 * cache after --ctx positions, decoding --batch-block positions a step
 * (speech range), as one llama_forward_batch a step against one
 * llama_forward per sequence, alternated step by step.
 * With --phonemes R, also the decode of a phoneme voice (the shipped one):
 * its phoneme tokens go into the context at their frames, R a frame on
 * average, with the frame's speech token, as the pipeline feeds them.
 * Usage: bench-forward --model PATH [--threads N] [--ctx N] [--steps N] [--block N]
 *        [--device DEV] [--bandwidth GBPS] [--layers LIST] [--phonemes R]
 *        [--batch N [--batch-block N]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "clock.h"
#include "matmul.h"
#include "model.h"
#include "qmatmul.h"
#include "opts.h"

static const char *model_dir, *device, *layers_s;
static double bandwidth, phonemes;
static int phoneme_group;
static int threads, ctx, steps, block, prefill, speech_begin, speech_end, end_token, batch, batch_block;
static const pcg_opt opts[] = {
	{ "model", PCG_OPT_STR, &model_dir, NULL, 1, 0, "PATH", "model directory or GGUF file" },
	{ "threads", PCG_OPT_INT, &threads, "2", 0, 1024, "N", "threads" },
	{ "ctx", PCG_OPT_INT, &ctx, "64", 1, 100000, "N", "prompt positions before decoding" },
	{ "steps", PCG_OPT_INT, &steps, "16", 1, 100000, "N", "decode steps per measurement" },
	{ "block", PCG_OPT_INT, &block, "4", 2, 8, "N", "verification block size (L+1)" },
	{ "prefill", PCG_OPT_INT, &prefill, "128", 0, 4096, "N",
	  "a prompt of N positions prefilled warm, timed (0: not)" },
	{ "speech-begin", PCG_OPT_INT, &speech_begin, "-1", -1, 1 << 30, "ID",
	  "first speech token (-1: vocab - 65536)" },
	{ "speech-end", PCG_OPT_INT, &speech_end, "-1", -1, 1 << 30, "ID",
	  "one past the last speech token (-1: vocab)" },
	{ "end-token", PCG_OPT_INT, &end_token, "-1", -1, 1 << 30, "ID",
	  "end-of-speech token (-1: speech-begin - 3)" },
	{ "device", PCG_OPT_STR, &device, "cpu", 1, 0, "DEV", "cpu, cuda or cuda:N" },
	{ "layers", PCG_OPT_STR, &layers_s, NULL, 1, 0, "LIST",
	  "run only these layers, e.g. 0,1 (a draft made of the target's first layers)" },
	{ "bandwidth", PCG_OPT_FLOAT, &bandwidth, "0", 0, 1e6, "GBPS",
	  "memory bandwidth for the bound (H100 SXM: 3350; 0: not shown)" },
	{ "phonemes", PCG_OPT_FLOAT, &phonemes, "0", 0, 8, "R",
	  "also a phoneme voice's decode: R phoneme tokens a frame fed with the frames' "
	  "tokens, --phoneme-group at a time, no output at them (0: not)" },
	{ "phoneme-group", PCG_OPT_INT, &phoneme_group, "2", 1, 8, "K",
	  "phoneme tokens fed together (a voice with next-phoneme tokens: 2)" },
	{ "batch", PCG_OPT_INT, &batch, "0", 0, 256, "N",
	  "only time 1, 2, 4 .. N sequences batched against one by one (0: off)" },
	{ "batch-block", PCG_OPT_INT, &batch_block, "1", 1, 8, "N",
	  "positions per sequence and step with --batch" },
	{ NULL },
};

/* The CPU's model name, for the record of every benchmark row. */
static const char *cpu_name(void)
{
	static char name[128] = "unknown";
	char line[256];
	FILE *f = fopen("/proc/cpuinfo", "r");

	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
			snprintf(name, sizeof name, "%s", strchr(line, ':') + 2);
			name[strcspn(name, "\n")] = '\0';
			break;
		}
	if (f)
		fclose(f);
	return name;
}

static void die(const char *what, const pcg_err *err)
{
	fprintf(stderr, "bench-forward: %s: %s\n", what, err->msg);
	exit(1);
}

/* Seconds per step of `steps` single-token decode steps from the context;
 * with ph > 0, a phoneme voice's: ph phoneme tokens a frame on average go
 * in with the frames' tokens, phoneme_group of them in the step where they
 * are due (the pipeline's feed: the last token, then the phoneme tokens,
 * one output, at the last). */
static double decode(llama_model *m, llama_kv *kv, const llama_rows *rows, float *logits,
		     double ph)
{
	pcg_err err;
	int tok[1 + 8] = { 100 };
	double t, due = 0;

	llama_kv_truncate(kv, ctx, &err);
	t = pcg_now();
	for (int i = 0; i < steps; i++) {
		int n = 1;
		due += ph;
		if (ph > 0 && due >= phoneme_group) {
			due -= phoneme_group;
			for (int k = 0; k < phoneme_group; k++)
				tok[n++] = 1 + (i + k) % 64;
		}
		if (llama_forward(m, kv, tok, n, 1, rows, logits, &err) < 0)
			die("decode", &err);
		tok[0] = (tok[0] * 7 + 13) % 1000;
	}
	return (pcg_now() - t) / steps;
}

/* Seconds per forward of n positions at the context, best of reps. */
static double blockf(llama_model *m, llama_kv *kv, int n, const llama_rows *rows,
		     float *logits, int reps)
{
	pcg_err err;
	int toks[8] = { 11, 12, 13, 14, 15, 16, 17, 18 };
	double best = 1e30;

	for (int r = 0; r < reps; r++) {
		llama_kv_truncate(kv, ctx, &err);
		double t = pcg_now();
		if (llama_forward(m, kv, toks, n, n, rows, logits, &err) < 0)
			die("block", &err);
		t = pcg_now() - t;
		best = t < best ? t : best;
	}
	return best;
}

/* One position and n, alternated reps times (each the best of its reps):
 * both measured in the same minutes, so the machine's drift does not
 * land on one side of the ratio. */
static void blockpair(llama_model *m, llama_kv *kv, int n, const llama_rows *rows,
		      float *logits, int reps, double *one, double *blk)
{
	*one = *blk = 1e30;
	for (int r = 0; r < reps; r++) {
		const double t1 = blockf(m, kv, 1, rows, logits, 1);
		const double tn = blockf(m, kv, n, rows, logits, 1);
		*one = t1 < *one ? t1 : *one;
		*blk = tn < *blk ? tn : *blk;
	}
}

static int cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Seconds per step of B sequences (caches kv[0..B), from ctx) decoding
 * batch_block positions a step: t[0] one llama_forward per sequence, t[1]
 * one llama_forward_batch. The two alternate step by step, on the same
 * caches (so at the same context lengths), and each is the median of its
 * steps: the bursts of a shared machine hit both alike and drop out. */
static void decode_batch(llama_model *m, llama_kv **kv, int B, const llama_rows *rows,
			 float *logits, int count, double t[2])
{
	llama_seq seqs[256];
	int toks[256][8];
	double *dt = malloc((size_t)2 * steps * sizeof *dt);
	pcg_err err;

	if (dt == NULL)
		exit(1);
	for (int b = 0; b < B; b++) {
		llama_kv_truncate(kv[b], ctx, &err);
		for (int i = 0; i < batch_block; i++)
			toks[b][i] = 100 + 17 * b + i;
		seqs[b] = (llama_seq){ kv[b], toks[b], batch_block, batch_block,
				       logits + (size_t)b * batch_block * count, NULL, NULL };
	}
	for (int s = 0; s < steps; s++) {
		for (int way = 0; way < 2; way++) {
			double t0 = pcg_now();
			if (way == 1) {
				if (llama_forward_batch(m, seqs, B, rows, NULL, &err) < 0)
					die("batch", &err);
			} else {
				for (int b = 0; b < B; b++)
					if (llama_forward(m, kv[b], toks[b], batch_block, batch_block,
							  rows, seqs[b].out, &err) < 0)
						die("decode", &err);
			}
			dt[way * steps + s] = pcg_now() - t0;
			for (int b = 0; b < B; b++)
				for (int i = 0; i < batch_block; i++)
					toks[b][i] = (toks[b][i] * 7 + 13) % 1000;
		}
	}
	for (int way = 0; way < 2; way++) {
		qsort(dt + way * steps, (size_t)steps, sizeof *dt, cmp_double);
		t[way] = dt[way * steps + steps / 2];
	}
	free(dt);
}

/* --batch: the table of B = 1, 2, 4 .. batch, batched against one by one. */
static void bench_batch(llama_model *m, const llama_rows *speech, const int *prompt)
{
	const int count = llama_rows_count(m, speech);
	llama_kv **kv = calloc((size_t)batch, sizeof *kv);
	float *logits = malloc((size_t)batch * batch_block * count * sizeof *logits);
	double t[2];
	pcg_err err;

	if (kv == NULL || logits == NULL)
		exit(1);
	for (int b = 0; b < batch; b++) {
		kv[b] = llama_kv_new(m);
		if (kv[b] == NULL)
			exit(1);
		if (llama_forward(m, kv[b], prompt, ctx, 0, NULL, NULL, &err) < 0)
			die("prefill", &err);
	}
	printf("%d sequences of %d position%s a step, speech range (%d rows), median of %d "
	       "steps each way, alternated:\n", batch, batch_block, batch_block > 1 ? "s" : "",
	       count, steps);
	printf("    B  rows  one by one tokens/s  batched tokens/s  speed-up\n");
	decode_batch(m, kv, 1, speech, logits, count, t); /* warm up */
	for (int B = 1; B <= batch; B = B < batch && 2 * B > batch ? batch : 2 * B) {
		decode_batch(m, kv, B, speech, logits, count, t);
		const double tok = (double)B * batch_block;
		printf("  %3d  %4d  %19.2f  %16.2f  %7.2fx\n", B, B * batch_block, tok / t[0],
		       tok / t[1], t[0] / t[1]);
		fflush(stdout);
	}
	for (int b = 0; b < batch; b++)
		llama_kv_free(&kv[b]);
	free(kv);
	free(logits);
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP || first < 0 || model_dir == NULL) {
		if (first < 0 && first != PCG_OPTS_HELP)
			fprintf(stderr, "bench-forward: %s\n", err.msg);
		pcg_opts_usage(first == PCG_OPTS_HELP ? stdout : stderr, "bench-forward",
			       "--model DIR [options]", opts);
		return first == PCG_OPTS_HELP ? 0 : 2;
	}
	pcg_set_threads(threads);
	double t0 = pcg_now();
	llama_open_opts oo = { .device = device };
	if (layers_s && pcg_parse_ids(layers_s, (int **)&oo.layers, &oo.n_layers) < 0) {
		fprintf(stderr, "bench-forward: --layers: '%s' is not a list of layer numbers\n",
			layers_s);
		return 2;
	}
	llama_model *m = llama_open(model_dir, &oo, &err);
	if (m == NULL)
		die("load", &err);
	const llama_config *c = llama_get_config(m);
	double t_load = pcg_now() - t0;
	int sb = speech_begin >= 0 ? speech_begin : c->vocab - 65536;
	int se = speech_end >= 0 ? speech_end : c->vocab;
	if (sb < 3)
		sb = 3;
	llama_rows speech = { 2, { sb, end_token >= 0 ? end_token : sb - 3 },
			      { se, (end_token >= 0 ? end_token : sb - 3) + 1 } };
	llama_kv *kv = llama_kv_new(m);
	float *logits = malloc((size_t)8 * c->vocab * sizeof *logits);
	int *prompt = malloc((size_t)ctx * sizeof *prompt);
	if (!kv || !logits || !prompt)
		return 1;
	for (int i = 0; i < ctx; i++)
		prompt[i] = (i * 31 + 7) % (c->vocab < 1000 ? c->vocab : 1000);

	pcg_blas_warn("bench-forward");
	if (batch > 0) {
		printf("model %s: hidden %d, layers %d, heads %d/%d, ffn %d, vocab %d, %.2f GB "
		       "mapped\ncpu %s; threads %d, kernels %s (float) %s (quantised), ctx %d\n",
		       model_dir, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->ffn,
		       c->vocab, llama_mapped_bytes(m) / 1e9, cpu_name(), threads,
		       pcg_matmul_isa(), pcg_qmatmul_path(), ctx);
		bench_batch(m, &speech, prompt);
		goto out;
	}
	t0 = pcg_now();
	if (llama_forward(m, kv, prompt, ctx, 1, NULL, logits, &err) < 0)
		die("prefill", &err);
	double t_prefill = pcg_now() - t0;

	/* Warm the page cache and the CPU, then measure side by side, twice
	 * interleaved so that drift of the machine hits both alike. */
	decode(m, kv, NULL, logits, 0);
	double full = 1e30, sp = 1e30, sph = 1e30;
	for (int r = 0; r < 2; r++) {
		double a = decode(m, kv, NULL, logits, 0), b = decode(m, kv, &speech, logits, 0);
		double v = phonemes > 0 ? decode(m, kv, &speech, logits, phonemes) : 1e30;
		full = a < full ? a : full;
		sp = b < sp ? b : sp;
		sph = v < sph ? v : sph;
	}
	double one, blk, one_full, blk_full, one8, blk8;
	blockpair(m, kv, block, &speech, logits, 9, &one, &blk);
	blockpair(m, kv, block, NULL, logits, 5, &one_full, &blk_full);
	if (block == 8)
		one8 = one, blk8 = blk;
	else
		blockpair(m, kv, 8, &speech, logits, 5, &one8, &blk8);
	/* a prompt's prefill, warm (the first one above paid the page faults) */
	double pre = 1e30;
	int *pp = malloc((size_t)prefill * sizeof *pp);
	float *last = malloc((size_t)c->vocab * sizeof *last);
	if (pp == NULL || last == NULL)
		return 1;
	for (int i = 0; i < prefill; i++)
		pp[i] = (i * 37 + 5) % (c->vocab < 1000 ? c->vocab : 1000);
	for (int r = 0; r < 2 && prefill > 0; r++) {
		llama_kv_truncate(kv, 0, &err);
		double t = pcg_now();
		if (llama_forward(m, kv, pp, prefill, 1, NULL, last, &err) < 0)
			die("prefill", &err);
		t = pcg_now() - t;
		pre = t < pre ? t : pre;
	}
	free(pp);
	free(last);

	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double file_gb = llama_mapped_bytes(m) / 1e9, rss_gb = ru.ru_maxrss * 1024.0 / 1e9;
	printf("model %s: hidden %d, layers %d, heads %d/%d, ffn %d, vocab %d, %.2f GB mapped\n",
	       model_dir, c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->ffn, c->vocab,
	       file_gb);
	printf("cpu %s; threads %d, kernels %s (float) %s (quantised), load %.2f s, prefill %d "
	       "positions %.2f s (%.1f pos/s)\n", cpu_name(), threads, pcg_matmul_isa(),
	       pcg_qmatmul_path(), t_load, ctx, t_prefill, ctx / t_prefill);
	printf("decode full lm_head (%d rows):   %6.2f tokens/s (%.1f ms/token)\n", c->vocab,
	       1 / full, full * 1e3);
	printf("decode speech range (%d rows): %6.2f tokens/s (%.1f ms/token), %.2fx full\n",
	       se - sb + 1, 1 / sp, sp * 1e3, full / sp);
	if (phonemes > 0)
		printf("decode speech range, %.3f phoneme tokens a frame (%d at a time): %6.2f "
		       "tokens/s (%.2f ms/token), %.2fx without\n", phonemes, phoneme_group,
		       1 / sph, sph * 1e3, sph / sp);
	printf("block of %d vs 1 position, speech range: %.1f ms vs %.1f ms = %.2fx\n", block,
	       blk * 1e3, one * 1e3, blk / one);
	printf("block of %d vs 1 position, full lm_head: %.1f ms vs %.1f ms = %.2fx\n", block,
	       blk_full * 1e3, one_full * 1e3, blk_full / one_full);
	if (block != 8)
		printf("block of 8 vs 1 position, speech range: %.1f ms vs %.1f ms = %.2fx\n",
		       blk8 * 1e3, one8 * 1e3, blk8 / one8);
	if (prefill > 0)
		printf("prefill of %d positions (warm): %.2f s = %.1f positions/s\n", prefill, pre,
		       prefill / pre);
	printf("peak RSS %.2f GB = %.2fx the checkpoint\n", rss_gb, rss_gb / file_gb);
	if (bandwidth > 0) {
		/* bytes per weight from the file: its size over the parameter count */
		const double H = c->hidden, qd = (double)c->n_heads * c->head_dim;
		const double kvd = (double)c->n_kv_heads * c->head_dim;
		const double layer = 2 * qd * H + 2 * kvd * H + 3 * (double)c->ffn * H;
		const double params = c->n_layers * layer + (c->tie ? 1 : 2) * (double)c->vocab * H;
		const double es = llama_mapped_bytes(m) / params;
		const double bytes = (llama_n_layers(m) * layer + (se - sb + 1) * H) * es;
		const double bound = bytes / (bandwidth * 1e9);
		printf("bandwidth bound: %.3f GB per step / %.0f GB/s = %.3f ms; decode (speech "
		       "range) %.3f ms = %.2fx the bound; block of %d = %.2fx one step\n",
		       bytes / 1e9, bandwidth, bound * 1e3, sp * 1e3, sp / bound, block, blk / one);
	}
out:
	llama_kv_free(&kv);
	llama_close(&m);
	free(logits);
	free(prompt);
	free((int *)oo.layers);
	return 0;
}
