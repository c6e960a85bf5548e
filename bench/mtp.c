/* bench/mtp.c: the cost of the multi-token prediction heads next to the
 * decode step they ride on, e.g. on LLaSA-1B's shape from `pcg-mkmodel
 * --preset llasa-1b`: one decode step (llama_forward_batch, as the model
 * server runs it), the same step with the final state asked for too (must
 * cost the same), and
 * the n heads' logits from that state, with the full lm_head and with the
 * LLaSA speech range only; the fastest of 3 interleaved rounds of each.
 * Random heads are written to a scratch file. A Llasa+ model (its own
 * heads: decoder layers that run at every position, lib/engine/model.h) is timed
 * instead as a decode step without its heads (the model opened with
 * no_mtp), with them, and their lm_head over both heads' outputs: what the
 * heads add to a round, against the target's step.
 * Usage: bench-mtp --model DIR [--heads N] [--threads N] [--ctx N] [--steps N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "model.h"
#include "mtp.h"
#include "opts.h"

static const char *model_dir, *heads_path;
static int n_heads, threads, ctx, steps;
static const pcg_opt opts[] = {
	{ "model", PCG_OPT_STR, &model_dir, NULL, 1, 0, "DIR", "model directory" },
	{ "heads", PCG_OPT_INT, &n_heads, "4", 1, MTP_MAX_HEADS, "N", "heads" },
	{ "heads-file", PCG_OPT_STR, &heads_path, NULL, 1, 0, "FILE",
	  "heads to use (default: random heads in a scratch file)" },
	{ "threads", PCG_OPT_INT, &threads, "2", 0, 1024, "N", "threads" },
	{ "ctx", PCG_OPT_INT, &ctx, "64", 1, 100000, "N", "prompt positions before decoding" },
	{ "steps", PCG_OPT_INT, &steps, "16", 1, 100000, "N", "steps per measurement" },
	{ NULL },
};

static void die(const char *what, const pcg_err *err)
{
	fprintf(stderr, "bench-mtp: %s: %s\n", what, err->msg);
	exit(1);
}

/* Seconds per decode step from the context over rows (NULL: the whole
 * vocabulary), with the final states (hidden) and the Llasa+ heads' outputs
 * (hs [n_mtp][H]) each asked for unless NULL: one pass of the batched
 * forward, as the model server runs it. */
static double decode(llama_model *m, llama_kv *kv, const llama_rows *rows, float *logits,
		     float *hidden, float *hs)
{
	pcg_err err;
	int tok = 100;
	double t;

	llama_kv_truncate(kv, ctx, &err);
	t = pcg_now();
	for (int i = 0; i < steps; i++) {
		llama_seq s = { kv, &tok, 1, 1, logits, hidden, hs };
		if (llama_forward_batch(m, &s, 1, rows, NULL, &err) < 0)
			die("decode", &err);
		tok = (tok * 7 + 13) % 1000;
	}
	return (pcg_now() - t) / steps;
}

static double heads(mtp_heads *h, const float *hidden, const llama_rows *rows, float *logits)
{
	pcg_err err;
	double t = pcg_now();

	for (int i = 0; i < steps; i++)
		if (mtp_logits(h, hidden, 0, mtp_n_heads(h), rows, logits, &err) < 0)
			die("heads", &err);
	return (pcg_now() - t) / steps;
}

/* lm_head over n vectors hs. */
static double lm_heads(llama_model *m, const float *hs, int n, const llama_rows *rows,
		       float *logits)
{
	pcg_err err;
	double t = pcg_now();

	for (int i = 0; i < steps; i++)
		if (llama_lm_head(m, hs, n, rows, logits, &err) < 0)
			die("lm_head", &err);
	return (pcg_now() - t) / steps;
}

/* The Llasa+ heads of model_dir against the step of its backbone. */
static int bench_llasa_plus(llama_model *m)
{
	pcg_err err = { "" };
	llama_open_opts o = { .no_mtp = 1 };
	llama_model *b = llama_open(model_dir, &o, &err);
	if (b == NULL)
		die("backbone", &err);
	const llama_config *c = llama_get_config(m);
	const int H = c->hidden, V = c->vocab, n = llama_n_mtp(m);
	llama_kv *kv = llama_kv_new(m), *kb = llama_kv_new(b);
	int *prompt = malloc((size_t)ctx * sizeof *prompt);
	float *logits = malloc((size_t)(n + 1) * V * sizeof *logits);
	/* the block's final state, then the heads' outputs: targetd puts them
	 * through lm_head together, so what the heads add is lm_head over 1 + n
	 * rows less lm_head over 1 */
	float *hs = malloc((size_t)(n + 1) * H * sizeof *hs);
	if (!kv || !kb || !prompt || !logits || !hs)
		return fprintf(stderr, "bench-mtp: out of memory\n"), 1;
	for (int i = 0; i < ctx; i++)
		prompt[i] = (i * 31 + 7) % V;
	if (llama_forward(m, kv, prompt, ctx, 1, NULL, logits, &err) < 0 ||
	    llama_forward(b, kb, prompt, ctx, 1, NULL, logits, &err) < 0)
		die("prefill", &err);
	const int sb = V > 65536 + 8 ? V - 65536 : V / 2;
	llama_rows speech = { 2, { sb, sb - 3 }, { V, sb - 2 } };
	double t_b = 1e30, t_m = 1e30, t_l1 = 1e30, t_ln = 1e30;
	/* the steps over the speech rows, as targetd runs them in the pipeline */
	decode(b, kb, &speech, logits, NULL, NULL);
	decode(m, kv, &speech, logits, NULL, hs + H);
	memcpy(hs, hs + H, (size_t)H * sizeof *hs);
	for (int r = 0; r < 3; r++) {
		double x = decode(b, kb, &speech, logits, NULL, NULL);
		double y = decode(m, kv, &speech, logits, NULL, hs + H);
		double z1 = lm_heads(m, hs, 1, &speech, logits);
		double zn = lm_heads(m, hs, n + 1, &speech, logits);
		t_b = x < t_b ? x : t_b;
		t_m = y < t_m ? y : t_m;
		t_l1 = z1 < t_l1 ? z1 : t_l1;
		t_ln = zn < t_ln ? zn : t_ln;
	}
	const double t_lm = t_ln - t_l1;
	printf("model %s (Llasa+, %d heads): hidden %d, vocab %d, %d layers, %d threads, "
	       "context %d\n", model_dir, n, H, V, llama_n_layers(m), pcg_get_threads(), ctx);
	printf("decode step, backbone alone (speech rows): %5.3f ms\n", t_b * 1e3);
	printf("decode step with the heads' layers:     %8.3f ms\n", t_m * 1e3);
	printf("their lm_head rows, speech rows (%d): %6.3f ms\n", llama_rows_count(m, &speech),
	       t_lm * 1e3);
	printf("%d heads per step:                       %8.3f ms (%.3f decode steps)\n", n,
	       (t_m - t_b + t_lm) * 1e3, (t_m - t_b + t_lm) / t_b);
	free(prompt);
	free(logits);
	free(hs);
	llama_kv_free(&kv);
	llama_kv_free(&kb);
	llama_close(&b);
	llama_close(&m);
	return 0;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	char tmp[] = "/tmp/bench-mtp.XXXXXX", path[64] = "";
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, "bench-mtp", "--model DIR [options]", opts);
		return 0;
	}
	if (first != argc || model_dir == NULL) {
		fprintf(stderr, "bench-mtp: %s\n", first < 0 ? err.msg : "--model is required");
		return 2;
	}
	pcg_set_threads(threads);
	llama_model *m = llama_open(model_dir, NULL, &err);
	if (m == NULL)
		die("model", &err);
	if (llama_n_mtp(m) > 0 && heads_path == NULL)
		return bench_llasa_plus(m);
	const llama_config *c = llama_get_config(m);
	const int H = c->hidden, V = c->vocab;
	if (heads_path == NULL) {
		/* Values do not matter for the time; the dtype is the model's. */
		size_t nw = (size_t)n_heads * H * H;
		float *W = calloc(nw, sizeof *W), *b = calloc((size_t)n_heads * H, sizeof *b);
		if (W == NULL || b == NULL || mkdtemp(tmp) == NULL)
			return fprintf(stderr, "bench-mtp: out of memory\n"), 1;
		for (size_t i = 0; i < nw; i++)
			W[i] = 1e-3f * (float)((i * 2654435761u) % 1000) - 0.5f;
		snprintf(path, sizeof path, "%s/mtp.safetensors", tmp);
		if (mtp_write(path, n_heads, H, W, b, PCG_BF16, &err) < 0)
			die("write heads", &err);
		free(W);
		free(b);
		heads_path = path;
	}
	mtp_heads *h = mtp_open(m, heads_path, &err);
	if (h == NULL)
		die("heads", &err);
	const int n = mtp_n_heads(h);
	llama_kv *kv = llama_kv_new(m);
	int *prompt = malloc((size_t)ctx * sizeof *prompt);
	float *logits = malloc((size_t)(n + 1) * V * sizeof *logits);
	float *hidden = malloc((size_t)H * sizeof *hidden);
	if (kv == NULL || prompt == NULL || logits == NULL || hidden == NULL)
		return fprintf(stderr, "bench-mtp: out of memory\n"), 1;
	for (int i = 0; i < ctx; i++)
		prompt[i] = (i * 31 + 7) % V;
	if (llama_forward(m, kv, prompt, ctx, 1, NULL, logits, &err) < 0)
		die("prefill", &err);
	/* LLaSA's output rows: the speech tokens and the end token. */
	const int sb = V > 65536 + 8 ? V - 65536 : V / 2;
	llama_rows speech = { 2, { sb, sb - 3 }, { V, sb - 2 } };

	/* Interleaved rounds, the fastest of each kept: the machine may be shared. */
	double t_fwd = 1e30, t_hid = 1e30, t_full = 1e30, t_rows = 1e30;
	decode(m, kv, NULL, logits, NULL, NULL); /* warm up: the mapping is paged in */
	for (int r = 0; r < 3; r++) {
		double a = decode(m, kv, NULL, logits, NULL, NULL),
		       b = decode(m, kv, NULL, logits, hidden, NULL);
		double c = heads(h, hidden, NULL, logits), d = heads(h, hidden, &speech, logits);
		t_fwd = a < t_fwd ? a : t_fwd;
		t_hid = b < t_hid ? b : t_hid;
		t_full = c < t_full ? c : t_full;
		t_rows = d < t_rows ? d : t_rows;
	}
	printf("model %s: hidden %d, vocab %d, %d layers, %d threads, context %d\n", model_dir,
	       H, V, llama_n_layers(m), pcg_get_threads(), ctx);
	printf("decode step:                            %8.3f ms\n", t_fwd * 1e3);
	printf("decode step, with its final state:      %8.3f ms\n", t_hid * 1e3);
	printf("%d heads, full vocabulary:               %8.3f ms (%.2f decode steps)\n", n,
	       t_full * 1e3, t_full / t_fwd);
	printf("%d heads, speech rows (%d):           %8.3f ms (%.2f decode steps)\n", n,
	       llama_rows_count(m, &speech), t_rows * 1e3, t_rows / t_fwd);
	if (path[0] == '/') {
		unlink(path);
		rmdir(tmp);
	}
	free(prompt);
	free(logits);
	free(hidden);
	mtp_close(&h);
	llama_kv_free(&kv);
	llama_close(&m);
	return 0;
}
