/* codec-encode: audio to X-codec2 speech codes, for a LLaSA cloning prompt.
 * Reads any file libsndfile reads (mixed down to mono, resampled to 16 kHz
 * with libsamplerate), runs the encoder half of the checkpoint users
 * download (HKUSTAudio/xcodec2 model.safetensors, the file codec-decode
 * reads; lib/codec/xc2enc.h), and writes the codes one per line (what
 * pcg-tokenize --prompt-codes reads) or as LLaSA token ids, atomically.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audio.h"
#include "clock.h"
#include "codes.h"
#include "fileio.h"
#include "matmul.h"
#include "opts.h"
#include "xc2enc.h"

static const char *prog = "codec-encode";
static const char *SYNOPSIS =
	"--weights FILE|DIR [-o FILE] [--llasa-ids [--speech-offset ID]] [--max-seconds S]\n"
	"       [--dtype f32|bf16] [--threads N] [--quiet] AUDIO|-";

static const char *weights, *out_path, *dtype_s;
static int llasa_ids, speech_offset, threads, quiet;
static double max_seconds;

static const pcg_opt opts[] = {
	{ "weights", PCG_OPT_STR | PCG_OPT_REQUIRED, &weights, NULL, 1, 0, "FILE|DIR",
	  "the X-codec2 checkpoint: model.safetensors or its directory (the encoder half)" },
	{ "o", PCG_OPT_STR, &out_path, "-", 1, 0, "FILE",
	  "where the codes go, one per line ('-': standard output)" },
	{ "llasa-ids", PCG_OPT_FLAG, &llasa_ids, NULL, 1, 0, NULL,
	  "write LLaSA token ids (code + --speech-offset) instead of codes" },
	{ "speech-offset", PCG_OPT_INT, &speech_offset, "128264", 0, 2147418111, "ID",
	  "with --llasa-ids: the id of code 0" },
	{ "max-seconds", PCG_OPT_FLOAT, &max_seconds, "30", 0.02, 600, "S",
	  "longest audio taken (LLaSA's 2,048 tokens hold about 40 s with the text)" },
	{ "dtype", PCG_OPT_STR, &dtype_s, "bf16", 1, 0, "f32|bf16",
	  "the Conformer's matrices in memory: bf16 (half the memory) or f32 (the original's "
	  "arithmetic)" },
	{ "threads", PCG_OPT_INT, &threads, "0", 0, 1024, "N", "threads (0: all cores)" },
	{ "quiet", PCG_OPT_FLAG, &quiet, NULL, 1, 0, NULL, "no summary on standard error" },
	{ NULL },
};

/* The codes as text, one per line. */
static char *format_codes(const int32_t *codes, int T, size_t *len)
{
	char *s = malloc((size_t)T * 12 + 1);
	size_t n = 0;

	if (s == NULL)
		return NULL;
	for (int t = 0; t < T; t++)
		n += (size_t)sprintf(s + n, "%ld\n",
				     (long)codes[t] + (llasa_ids ? (long)speech_offset : 0));
	*len = n;
	return s;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);
	xc2e_model *m = NULL;
	float *wav = NULL;
	int32_t *codes = NULL;
	char *text = NULL;
	size_t n = 0, len = 0;
	int rc = 1;

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || first != argc - 1)
		return pcg_usage_error(prog, SYNOPSIS, opts,
				       first < 0 ? err.msg : first == argc ? "AUDIO is required"
				       : "one AUDIO file at a time");
	pcg_dtype wdt;
	if (strcmp(dtype_s, "f32") == 0)
		wdt = PCG_F32;
	else if (strcmp(dtype_s, "bf16") == 0)
		wdt = PCG_BF16;
	else
		return pcg_usage_error(prog, SYNOPSIS, opts, "--dtype is f32 or bf16");
	pcg_set_threads(threads);
	const double t0 = pcg_now();
	if (audio_read(argv[first], XC2E_RATE, max_seconds, &wav, &n, &err) < 0)
		goto fail;
	const double t1 = pcg_now();
	if ((m = xc2e_open_dtype(weights, wdt, &err)) == NULL) {
		pcg_err_prefix(&err, weights);
		goto fail;
	}
	const double t2 = pcg_now();
	const int T = xc2e_n_codes(n);
	if ((codes = malloc((size_t)T * sizeof *codes)) == NULL) {
		pcg_fail(&err, "out of memory");
		goto fail;
	}
	xc2e_stages st = { 0 };
	if (xc2e_encode(m, wav, n, codes, &st, &err) < 0)
		goto fail;
	const double t3 = pcg_now();
	if ((text = format_codes(codes, T, &len)) == NULL) {
		pcg_fail(&err, "out of memory");
		goto fail;
	}
	if (pcg_write_file(out_path, text, len, 0644, &err) < 0)
		goto fail;
	if (!quiet)
		fprintf(stderr, "%s: %s: %.2f s of audio, %d codes; read %.2f s, load %.2f s, "
			"encode %.2f s (RTF %.3f: features %.2f s, semantic %.2f s, acoustic "
			"%.2f s)\n", prog, argv[first], n / (double)XC2E_RATE, T, t1 - t0, t2 - t1,
			t3 - t2, (t3 - t2) / (n / (double)XC2E_RATE), st.seconds[0], st.seconds[1],
			st.seconds[2]);
	rc = 0;
	goto out;
fail:
	pcg_report(prog, &err);
out:
	free(text);
	free(codes);
	free(wav);
	xc2e_close(&m);
	return rc;
}
