/* pcg-mtp: the multi-token prediction heads of a target model (man/mtp.5)
 * from the command line: prints the top-k tokens of the target's next-token
 * distribution and of every head for a prompt, or writes a heads file
 * (zero or seeded random weights) to start from or to test with.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "mtp.h"
#include "opts.h"
#include "rng.h"
#include "sampling.h"

static const char *prog = "pcg-mtp";
static const char *SYNOPSIS =
	"--model DIR --tokens ID,ID,... [--heads PATH] [--top-k K] [--rows B:E,...]\n"
	"       pcg-mtp --model DIR --init N [--std X] [--seed S] [--dtype f32|f16|bf16] [-o FILE]";

static const char *model_dir, *tokens_s, *heads_path, *rows_s, *dtype_s, *out_path;
static int top_k, init_n, threads;
static long long seed;
static double init_std;

static const pcg_opt opts[] = {
	{ "model", PCG_OPT_STR, &model_dir, NULL, 1, 0, "DIR", "the target model directory" },
	{ "tokens", PCG_OPT_STR, &tokens_s, NULL, 1, 0, "IDS",
	  "token ids, comma-separated: the prompt" },
	{ "heads", PCG_OPT_STR, &heads_path, NULL, 1, 0, "PATH",
	  "heads file, or a directory holding mtp.safetensors (default: the model directory)" },
	{ "top-k", PCG_OPT_INT, &top_k, "5", 1, 1000, "K", "tokens printed per distribution" },
	{ "rows", PCG_OPT_STR, &rows_s, NULL, 1, 0, "B:E,...",
	  "only these vocabulary ranges [B, E) (at most 4), as the decoder asks" },
	{ "init", PCG_OPT_INT, &init_n, "0", 0, MTP_MAX_HEADS, "N",
	  "write a heads file of N heads instead (W ~ N(0, std^2), b ~ N(0, (std/2)^2))" },
	{ "std", PCG_OPT_FLOAT, &init_std, "0", 0, 10, "X",
	  "--init: standard deviation; 0 gives heads that repeat the target" },
	{ "seed", PCG_OPT_SIZE, &seed, "1", 0, 9.2e18, "S", "--init: random seed" },
	{ "dtype", PCG_OPT_STR, &dtype_s, "f32", 1, 0, "T", "--init: f32, f16 or bf16" },
	{ "o", PCG_OPT_STR, &out_path, NULL, 1, 0, "FILE",
	  "--init: output (default: DIR/mtp.safetensors)" },
	{ "threads", PCG_OPT_INT, &threads, "0", 0, 1024, "N", "threads (0: all cores)" },
	{ NULL },
};

/* "B:E,B:E" into rows; the model checks the ranges against its vocabulary. */
static int parse_rows(const char *s, llama_rows *rows)
{
	rows->n = 0;
	while (*s) {
		char *end;
		long b, e;
		if (rows->n == LLAMA_MAX_RANGES)
			return -1;
		errno = 0;
		b = strtol(s, &end, 10);
		if (end == s || *end != ':' || errno || b < 0 || b > INT_MAX)
			return -1;
		s = end + 1;
		e = strtol(s, &end, 10);
		if (end == s || (*end && *end != ',') || errno || e <= b || e > INT_MAX)
			return -1;
		rows->begin[rows->n] = (int)b;
		rows->end[rows->n] = (int)e;
		rows->n++;
		s = *end ? end + 1 : end;
	}
	return rows->n > 0 ? 0 : -1;
}

/* The vocabulary id of output column j. */
static int row_token(const llama_rows *rows, int j)
{
	for (int i = 0; rows && i < rows->n; i++) {
		int len = rows->end[i] - rows->begin[i];
		if (j < len)
			return rows->begin[i] + j;
		j -= len;
	}
	return j;
}

/* One line: label, offset, then the top-k "id:probability" (softmax over
 * the columns computed; ties: the lower column). */
static void print_top(const char *label, int offset, float *logits, int n,
		      const llama_rows *rows, int k)
{
	const pcg_sampling s = { 1.0f, 0, 1.0f };
	pcg_err err;

	pcg_probs(logits, n, &s, logits, &err);
	printf("%s +%d", label, offset);
	for (int r = 0; r < k && r < n; r++) {
		int j = pcg_argmax(logits, n);
		printf(" %d:%.4f", row_token(rows, j), logits[j]);
		logits[j] = -1.0f; /* below every probability: taken */
	}
	printf("\n");
}

static int init_heads(const llama_model *m, pcg_err *err)
{
	const int H = llama_get_config(m)->hidden;
	const size_t hh = (size_t)H * H;
	pcg_dtype dt = strcmp(dtype_s, "f32") == 0 ? PCG_F32
		     : strcmp(dtype_s, "f16") == 0 ? PCG_F16 : PCG_BF16;
	float *W = calloc((size_t)init_n * hh, sizeof *W);
	float *b = calloc((size_t)init_n * H, sizeof *b);
	char path[4096];
	pcg_rng r;
	int rc;

	if (W == NULL || b == NULL) {
		free(W);
		free(b);
		return pcg_fail(err, "out of memory");
	}
	/* Box-Muller on the seeded generator: the same file for the same seed. */
	pcg_rng_init(&r, (uint64_t)seed, 0);
	for (size_t i = 0; init_std > 0 && i < (size_t)init_n * (hh + H); i++) {
		double u1 = pcg_rng_uniform(&r), u2 = pcg_rng_uniform(&r);
		double z = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)) * cos(2.0 * M_PI * u2);
		if (i < (size_t)init_n * hh)
			W[i] = (float)(init_std * z);
		else
			b[i - (size_t)init_n * hh] = (float)(init_std * 0.5 * z);
	}
	if (out_path == NULL)
		snprintf(path, sizeof path, "%s/" MTP_FILE_NAME, model_dir);
	rc = mtp_write(out_path ? out_path : path, init_n, H, W, b, dt, err);
	free(W);
	free(b);
	return rc;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	llama_model *m = NULL;
	llama_kv *kv = NULL;
	mtp_heads *h = NULL;
	llama_rows rows_buf, *rows = NULL;
	float *hid = NULL, *lg = NULL;
	int *tokens = NULL, n = 0, rc = 1;
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || first != argc || !model_dir || (!tokens_s && init_n == 0) ||
	    (tokens_s && init_n > 0)) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg
			: first != argc ? "unexpected argument"
			: !model_dir ? "--model is required"
			: "one of --tokens and --init is required");
	}
	if (strcmp(dtype_s, "f32") && strcmp(dtype_s, "f16") && strcmp(dtype_s, "bf16")) {
		fprintf(stderr, "%s: --dtype: '%s' is not f32, f16 or bf16\n", prog, dtype_s);
		return 2;
	}
	if (tokens_s && pcg_parse_ids(tokens_s, &tokens, &n) < 0) {
		fprintf(stderr, "%s: --tokens: '%s' is not a comma-separated list of ids\n", prog,
			tokens_s);
		return 2;
	}
	if (rows_s) {
		if (parse_rows(rows_s, &rows_buf) < 0) {
			fprintf(stderr, "%s: --rows: '%s' is not a list of B:E ranges, B < E (at most %d)\n",
				prog, rows_s, LLAMA_MAX_RANGES);
			free(tokens);
			return 2;
		}
		rows = &rows_buf;
	}
	pcg_set_threads(threads);
	m = llama_open(model_dir, NULL, &err);
	if (m == NULL)
		goto fail;
	if (init_n > 0) {
		if (init_heads(m, &err) < 0)
			goto fail;
		rc = 0;
		goto out;
	}
	/* a Llasa+ model's own heads, unless --heads names a file */
	const int layer_heads = heads_path ? 0 : llama_n_mtp(m);
	if (layer_heads == 0 && (h = mtp_open(m, heads_path ? heads_path : model_dir, &err)) == NULL)
		goto fail;
	const int H = llama_get_config(m)->hidden, nh = h ? mtp_n_heads(h) : layer_heads;
	const int V = llama_rows_count(m, rows);
	kv = llama_kv_new(m);
	hid = malloc((size_t)nh * H * sizeof *hid);
	lg = malloc((size_t)(nh + 1) * V * sizeof *lg);
	if (kv == NULL || hid == NULL || lg == NULL) {
		pcg_fail(&err, "out of memory");
		goto fail;
	}
	/* One forward pass: the target's next token and the state the heads
	 * read (Llasa+: the heads' outputs, from the same pass). */
	llama_seq seq = { kv, tokens, n, 1, lg, h ? hid : NULL, h ? NULL : hid };
	if (llama_forward_batch(m, &seq, 1, rows, NULL, &err) < 0)
		goto fail;
	if (h ? mtp_logits(h, hid, 0, nh, rows, lg + V, &err) < 0
	      : llama_lm_head(m, hid, nh, rows, lg + V, &err) < 0)
		goto fail;
	print_top("target", 1, lg, V, rows, top_k);
	for (int i = 0; i < nh; i++) {
		char label[32];
		/* the file's tensor names: mtp.<i> (from 0), Llasa+'s mtp_<k> */
		snprintf(label, sizeof label, h ? "mtp.%d" : "mtp_%d", h ? i : i + 1);
		print_top(label, i + 2, lg + (size_t)(i + 1) * V, V, rows, top_k);
	}
	if (fflush(stdout) != 0) {
		pcg_fail(&err, "stdout: write failed");
		goto fail;
	}
	rc = 0;
	goto out;
fail:
	pcg_report(prog, &err);
out:
	free(hid);
	free(lg);
	free(tokens);
	mtp_close(&h);
	llama_kv_free(&kv);
	llama_close(&m);
	return rc;
}
