/* pcg-run: runs the Llama forward pass of a checkpoint over given token ids:
 * dumps the logits of every position, or prints the greedy continuation.
 * The smallest way to check the engine against Hugging Face transformers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "model.h"
#include "opts.h"
#include "sampling.h"

static const char *prog = "pcg-run";
static const char *SYNOPSIS =
	"--model DIR --tokens ID,ID,... [--dump-logits FILE] [--generate N] [--threads N]";

static const char *model_dir, *tokens_s, *dump_path;
static int generate, threads;

static const pcg_opt opts[] = {
	{ "model", PCG_OPT_STR, &model_dir, NULL, 1, 0, "PATH",
	  "Hugging Face model directory (config.json, *.safetensors) or GGUF file" },
	{ "tokens", PCG_OPT_STR, &tokens_s, NULL, 1, 0, "IDS", "token ids, comma-separated" },
	{ "dump-logits", PCG_OPT_STR, &dump_path, NULL, 1, 0, "FILE",
	  "write the logits of every position as raw little-endian f32 [positions x vocab]" },
	{ "generate", PCG_OPT_INT, &generate, "0", 0, 1 << 20, "N",
	  "print the greedy continuation of N tokens" },
	{ "threads", PCG_OPT_INT, &threads, "0", 0, 1024, "N", "threads (0: all cores)" },
	{ NULL },
};

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	llama_model *m = NULL;
	llama_kv *kv = NULL;
	float *logits = NULL;
	int *tokens = NULL, n = 0, rc = 1;
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || first != argc || !model_dir || !tokens_s) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg
			: first != argc ? "unexpected argument" : "--model and --tokens are required");
	}
	if (pcg_parse_ids(tokens_s, &tokens, &n) < 0) {
		fprintf(stderr, "%s: --tokens: '%s' is not a comma-separated list of ids\n", prog,
			tokens_s);
		return 2;
	}
	pcg_set_threads(threads);
	m = llama_open(model_dir, NULL, &err);
	if (m == NULL)
		goto fail;
	kv = llama_kv_new(m);
	const int V = llama_get_config(m)->vocab;
	const int n_out = dump_path ? n : 1;
	logits = malloc((size_t)n_out * V * sizeof *logits);
	if (kv == NULL || logits == NULL) {
		pcg_fail(&err, "out of memory");
		goto fail;
	}
	if (llama_forward(m, kv, tokens, n, n_out, NULL, logits, &err) < 0)
		goto fail;
	/* Written whole to a temporary name and renamed: never a partial file. */
	if (dump_path &&
	    pcg_write_file(dump_path, logits, (size_t)n * V * sizeof *logits, 0644, &err) < 0)
		goto fail;
	if (generate > 0 || !dump_path) {
		/* Greedy: argmax (first index on ties, as torch.argmax), fed back. */
		int steps = generate > 0 ? generate : 1;
		int tok = pcg_argmax(logits + (size_t)(n_out - 1) * V, V);
		for (int i = 0; i < steps; i++) {
			printf("%s%d", i ? " " : "", tok);
			if (i + 1 == steps)
				break;
			if (llama_forward(m, kv, &tok, 1, 1, NULL, logits, &err) < 0)
				goto fail;
			tok = pcg_argmax(logits, V);
		}
		printf("\n");
		if (fflush(stdout) != 0) {
			pcg_fail(&err, "stdout: write failed");
			goto fail;
		}
	}
	rc = 0;
	goto out;
fail:
	pcg_report(prog, &err);
out:
	free(logits);
	free(tokens);
	llama_kv_free(&kv);
	llama_close(&m);
	return rc;
}
