/* codec-decode: speech codes to an audio file, one shot. Reads X-codec2 codes
 * (text or raw int32, or LLaSA token ids), runs the decoder of the checkpoint
 * users download (HKUSTAudio/xcodec2 model.safetensors), and writes WAV, FLAC
 * or raw PCM through libsndfile, atomically (lib/codec/audio.h). --codec kmeans-gl
 * decodes the demo voice's codec instead (lib/codec/kmeans_codec.h); --codec auto
 * (the default) takes the codec its config.json names. --device cuda[:N]
 * decodes X-codec2 on a GPU (lib/cuda/cuda_xcodec2.h); kmeans-gl is CPU-only.
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "chunks.h"
#include "fileio.h"
#include "codes.h"
#include "daemon.h"
#include "device.h"
#include "kmeans_codec.h"
#include "matmul.h"
#include "net.h"
#include "opts.h"
#include "service.h"
#include "xcodec2.h"

static const char *prog = "codec-decode";
static const char *SYNOPSIS =
	"--weights FILE|DIR --codes FILE|- -o OUT [--codec xcodec2|kmeans-gl] [--config FILE]\n"
	"       [--codes-format text|i32] [--llasa-ids] [--format FMT]\n"
	"       [--chunk N [--chunk-first N] [--context N] [--lookahead N]]\n"
	"       [--device cpu|cuda[:N]] [--threads N]";

static const char *codec, *weights, *config_path, *codes_path, *codes_fmt_s, *out_path,
	*format_s, *device_s;
static int llasa_ids, speech_offset, end_id, chunk, chunk_first, context, lookahead, threads;
static int daemon_mode;
static const char *listen_url, *curve_key, *curve_allow;

static const pcg_opt opts[] = {
	{ "codec", PCG_OPT_STR, &codec, "auto", 1, 0, "NAME",
	  "xcodec2, kmeans-gl (the demo voice: k-means frames, Griffin-Lim), or auto: "
	  "the \"codec\" named in the weights' config.json (xcodec2 when none)" },
	{ "weights", PCG_OPT_STR, &weights, NULL, 1, 0, "FILE|DIR",
	  "the codec checkpoint: model.safetensors or its directory" },
	{ "config", PCG_OPT_STR, &config_path, NULL, 1, 0, "FILE",
	  "the decoder's shape (default: config.json beside the weights if present, "
	  "else full size)" },
	{ "codes", PCG_OPT_STR, &codes_path, NULL, 1, 0, "FILE|-", "the codes ('-': stdin)" },
	{ "codes-format", PCG_OPT_STR, &codes_fmt_s, "text", 1, 0, "text|i32",
	  "decimal integers, or raw little-endian int32" },
	{ "llasa-ids", PCG_OPT_FLAG, &llasa_ids, NULL, 1, 0, NULL,
	  "the input is LLaSA token ids: subtract --speech-offset" },
	{ "speech-offset", PCG_OPT_INT, &speech_offset, "128264", 0, 2147483647, "ID",
	  "with --llasa-ids: the id of code 0" },
	{ "end-id", PCG_OPT_INT, &end_id, "128261", -1, 2147483647, "ID",
	  "with --llasa-ids: an end token to drop when last (-1: none)" },
	{ "o", PCG_OPT_STR, &out_path, NULL, 1, 0, "OUT", "the output file ('-': standard output; WAV there says its length is unknown)" },
	{ "format", PCG_OPT_STR, &format_s, NULL, 1, 0, "FMT",
	  "wav, wav-f32, flac, raw or raw-f32 (default: from the -o extension)" },
	{ "chunk", PCG_OPT_INT, &chunk, "0", 0, 1 << 24, "N",
	  "decode in chunks of N codes (streaming approximation; 0: whole utterance)" },
	{ "chunk-first", PCG_OPT_INT, &chunk_first, "0", 0, 1 << 24, "N",
	  "with --chunk: the first chunk N codes, each next one twice the one before up to "
	  "--chunk, as pcg-synth streams them (its default: 5; 0: every chunk --chunk codes)" },
	{ "context", PCG_OPT_INT, &context, "150", 0, 1 << 24, "N",
	  "with --chunk: earlier codes decoded with each chunk, audio dropped" },
	{ "lookahead", PCG_OPT_INT, &lookahead, "0", 0, 1 << 24, "N",
	  "with --chunk: later codes decoded with each chunk, audio dropped" },
	{ "device", PCG_OPT_STR, &device_s, "cpu", 1, 0, "cpu|cuda[:N]",
	  "where X-codec2 decodes: the CPU, or CUDA device N (cuda: device 0)" },
	{ "threads", PCG_OPT_INT, &threads, "0", 0, 1024, "N", "threads (0: all cores)" },
	{ "daemon", PCG_OPT_FLAG, &daemon_mode, NULL, 1, 0, NULL,
	  "serve the pipeline: decode the tokens of each session, return its audio chunk by chunk" },
	{ "listen", PCG_OPT_STR, &listen_url, "tcp://127.0.0.1:7603", 1, 0, "URL",
	  "with --daemon: the endpoint to bind" },
	{ "curve-key", PCG_OPT_STR, &curve_key, NULL, 1, 0, "FILE",
	  "with --daemon: this server's CURVE keypair (pcg-keygen)" },
	{ "curve-allow", PCG_OPT_STR, &curve_allow, NULL, 1, 0, "FILE",
	  "with --daemon: public keys of the clients let in" },
	{ NULL },
};

static int usage_error(const char *msg)
{
	return pcg_usage_error(prog, SYNOPSIS, opts,
		msg);
}

/* config.json in the weights' directory (or beside the weights file). */
static int find_config(char *buf, size_t n)
{
	return pcg_config_beside(weights, buf, n);
}

/* --codec auto: the codec config.json beside the weights names. */
static const char *detect_codec(void)
{
	char cpath[4200];
	const char *name = "xcodec2", *s;
	json_t *root;

	if (config_path)
		snprintf(cpath, sizeof cpath, "%s", config_path);
	else if (!find_config(cpath, sizeof cpath))
		return name;
	if ((root = json_load_file(cpath, 0, NULL)) == NULL)
		return name; /* the loader of the codec then names the problem */
	s = json_string_value(json_object_get(root, "codec"));
	if (s && !strcmp(s, "kmeans-gl"))
		name = "kmeans-gl";
	json_decref(root);
	return name;
}

static int dec_xc2(void *m, const int32_t *codes, int T, float *out, pcg_err *err)
{
	return xc2_decode(m, codes, T, out, err);
}

static int dec_kmc(void *m, const int32_t *codes, int T, float *out, pcg_err *err)
{
	return kmc_decode(m, codes, T, out, err);
}

/* The X-codec2 decoder on the device --device names: fn(ctx, ...); a
 * GPU's through its device kind's hooks (lib/engine/device.h). */
typedef struct decoder {
	xc2_decoder fn;
	void *ctx;
	void (*close)(void *ctx); /* NULL: the CPU's (ctx is the model) */
} decoder;

/* m on device (checked by pcg_device_check before). */
static int decoder_open(decoder *d, xc2_model *m, pcg_device device, pcg_err *err)
{
	const pcg_device_kind *k = device.kind;

	memset(d, 0, sizeof *d);
	d->fn = dec_xc2;
	d->ctx = m;
	if (pcg_device_is_host(device))
		return 0;
	if (k->xc2_open == NULL)
		return pcg_fail(err, "device %s:%d: X-codec2 has no decoder for %s devices",
				k->name, device.index, k->label);
	if ((d->ctx = k->xc2_open(m, device.index, err)) == NULL)
		return -1;
	d->fn = k->xc2_decode;
	d->close = k->xc2_close;
	return 0;
}

static void decoder_close(decoder *d)
{
	if (d->close != NULL && d->ctx != NULL)
		d->close(d->ctx);
	d->close = NULL;
	d->ctx = NULL;
}

/* --codec kmeans-gl: codes to out_path (returns 0 or 1 with err filled). */
static int decode_kmeans(const int32_t *codes, size_t n, audio_format fmt, pcg_err *err)
{
	kmc_model *km = kmc_open(weights, config_path, err);
	const kmc_config *kc;
	float *wav = NULL;
	int rc = 1;

	if (km == NULL)
		return 1;
	kc = kmc_get_config(km);
	if (n == 0) {
		pcg_fail(err, "%s: no codes", strcmp(codes_path, "-") ? codes_path : "stdin");
		goto out;
	}
	if (n > (size_t)1 << 24) {
		pcg_fail(err, "%zu codes: more than one call can decode", n);
		goto out;
	}
	if (codes_check(codes, n, kc->codebook, err) < 0) {
		pcg_err_prefix(err, strcmp(codes_path, "-") ? codes_path : "stdin");
		goto out;
	}
	if ((wav = malloc(n * kc->hop * sizeof *wav)) == NULL) {
		pcg_fail(err, "out of memory for %zu samples", n * kc->hop);
		goto out;
	}
	/* --chunk: as xc2_decode_chunked, and as the daemon streams it */
	const int T = (int)n, C = chunk > 0 ? chunk : T, hop = kc->hop;
	float *tmp = malloc((size_t)hop * ((C < T ? C : T) + (size_t)context + lookahead) *
			    sizeof *tmp);
	if (tmp == NULL) {
		pcg_fail(err, "out of memory");
		goto out;
	}
	for (int s = 0, e; s < T; s = e) {
		e = pcg_chunk_end(s, C, chunk > 0 ? chunk_first : 0);
		e = e < T ? e : T;
		const int a = s - context > 0 ? s - context : 0;
		const int z = e + lookahead < T ? e + lookahead : T;
		if (kmc_decode(km, codes + a, z - a, tmp, err) < 0) {
			free(tmp);
			goto out;
		}
		memcpy(wav + (size_t)s * hop, tmp + (size_t)(s - a) * hop,
		       (size_t)(e - s) * hop * sizeof *wav);
	}
	free(tmp);
	if (audio_write(out_path, wav, n * kc->hop, kc->sample_rate, fmt, err) < 0)
		goto out;
	rc = 0;
out:
	free(wav);
	kmc_close(&km);
	return rc;
}

int main(int argc, char **argv)
{
	/* as a server of the pipeline, its OpenMP threads wait as the model
	 * servers' do (lib/serve/service.h) */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--daemon"))
			pcg_daemon_openmp(argv);
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err), rc = 1;
	audio_format fmt;
	codes_format cfmt;
	xc2_config cfg;
	xc2_model *m = NULL;
	int32_t *codes = NULL;
	float *wav = NULL;
	size_t n = 0;
	char cpath[4200], dname[32];
	pcg_device device;
	decoder dec = { 0 };

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0)
		return usage_error(err.msg);
	if (first != argc)
		return usage_error("unexpected argument");
	if (strcmp(codec, "xcodec2") && strcmp(codec, "kmeans-gl") && strcmp(codec, "auto"))
		return usage_error("--codec: xcodec2, kmeans-gl or auto");
	if (!strcmp(codec, "auto") && weights)
		codec = detect_codec();
	if (pcg_device_parse(device_s, &device, &err) < 0)
		return usage_error(err.msg);
	if (!pcg_device_is_host(device) && !strcmp(codec, "kmeans-gl"))
		return usage_error("--device: kmeans-gl decodes on the CPU only");
	if (daemon_mode) {
		if (!weights || codes_path || out_path)
			return usage_error("--daemon takes --weights (and --config, --listen), not --codes or -o");
		if (net_curve_setup(curve_key, curve_allow, NULL, &err) < 0)
			goto fail;
		if (net_endpoint_ok(listen_url, 1, &err) < 0)
			return usage_error(err.msg);
		if (pcg_device_check(device, &err) < 0)
			goto fail;
		pcg_set_threads(threads);
		signal(SIGXFSZ, SIG_IGN);
		codec_ops ops;
		if (!strcmp(codec, "kmeans-gl")) {
			kmc_model *km = kmc_open(weights, config_path, &err);
			if (km == NULL)
				goto fail;
			const kmc_config *kc = kmc_get_config(km);
			ops = (codec_ops){ "kmeans-gl", kc->sample_rate, kc->hop, kc->codebook, km,
					   dec_kmc };
			rc = codec_daemon(listen_url, &ops);
			kmc_close(&km);
			goto out;
		}
		if (config_path ? xc2_config_load(config_path, &cfg, &err) < 0
				: find_config(cpath, sizeof cpath) ? xc2_config_load(cpath, &cfg, &err) < 0
								   : (xc2_config_default(&cfg), 0))
			goto fail;
		if ((m = xc2_open(weights, &cfg, &err)) == NULL ||
		    decoder_open(&dec, m, device, &err) < 0)
			goto fail;
		if (!pcg_device_is_host(device))
			fprintf(stderr, "%s: X-codec2 on %s\n", prog,
				pcg_device_name(device, dname, sizeof dname));
		ops = (codec_ops){ "xcodec2", cfg.sample_rate, cfg.hop, xc2_config_codebook(&cfg),
				   dec.ctx, dec.fn };
		rc = codec_daemon(listen_url, &ops);
		goto out;
	}
	if (!weights || !codes_path || !out_path)
		return usage_error("--weights, --codes and -o are required");
	if (!strcmp(codes_fmt_s, "text"))
		cfmt = CODES_TEXT;
	else if (!strcmp(codes_fmt_s, "i32"))
		cfmt = CODES_I32;
	else
		return usage_error("--codes-format: text or i32");
	if (format_s ? audio_format_parse(format_s, &fmt) < 0
		     : audio_format_from_path(out_path, &fmt) < 0)
		return usage_error(format_s ? "--format: wav, wav-f32, flac, raw or raw-f32"
				   : "-o: unknown extension (.wav, .flac, .raw); give --format");
	if (!chunk && (pcg_opts_given(opts, "context") || pcg_opts_given(opts, "lookahead")))
		return usage_error("--context and --lookahead go with --chunk");
	if (!chunk && pcg_opts_given(opts, "chunk-first"))
		return usage_error("--chunk-first goes with --chunk");
	if (pcg_chunk_check(chunk, chunk_first, &err) < 0) {
		pcg_err_prefix(&err, "--chunk-first");
		return usage_error(err.msg);
	}
	/* Before anything is read: a device that is not there fails at once. */
	if (pcg_device_check(device, &err) < 0)
		goto fail;
	pcg_set_threads(threads);
	/* Past a file-size limit, write() then fails with EFBIG and the temporary
	 * file is removed, instead of the process dying with it left behind. */
	signal(SIGXFSZ, SIG_IGN);

	/* The codes first: a bad input fails before the weights are mapped. */
	FILE *f = strcmp(codes_path, "-") ? fopen(codes_path, "rb") : stdin;
	if (f == NULL) {
		fprintf(stderr, "%s: %s: %s\n", prog, codes_path, strerror(errno));
		return 1;
	}
	if (codes_read(f, cfmt, &codes, &n, &err) < 0 ||
	    (llasa_ids && codes_from_ids(codes, &n, speech_offset, 65536, end_id, &err) < 0)) {
		if (f != stdin)
			fclose(f);
		pcg_err_prefix(&err, strcmp(codes_path, "-") ? codes_path : "stdin");
		goto fail;
	}
	if (f != stdin)
		fclose(f);
	if (!strcmp(codec, "kmeans-gl")) {
		rc = decode_kmeans(codes, n, fmt, &err);
		if (rc)
			goto fail;
		goto out;
	}

	if (config_path ? xc2_config_load(config_path, &cfg, &err) < 0
			: find_config(cpath, sizeof cpath) ? xc2_config_load(cpath, &cfg, &err) < 0
							   : (xc2_config_default(&cfg), 0))
		goto fail;
	if (n == 0) {
		pcg_fail(&err, "%s: no codes", strcmp(codes_path, "-") ? codes_path : "stdin");
		goto fail;
	}
	if (n > (size_t)1 << 24) {
		pcg_fail(&err, "%zu codes: more than one call can decode", n);
		goto fail;
	}
	if (codes_check(codes, n, xc2_config_codebook(&cfg), &err) < 0) {
		pcg_err_prefix(&err, strcmp(codes_path, "-") ? codes_path : "stdin");
		goto fail;
	}
	m = xc2_open(weights, &cfg, &err);
	if (m == NULL || decoder_open(&dec, m, device, &err) < 0)
		goto fail;
	wav = malloc(n * cfg.hop * sizeof *wav);
	if (wav == NULL) {
		pcg_fail(&err, "out of memory for %zu samples", n * cfg.hop);
		goto fail;
	}
	if (chunk ? xc2_decode_chunked_with(&cfg, dec.fn, dec.ctx, codes, (int)n, chunk,
					    chunk_first, context, lookahead, wav, &err)
		  : dec.fn(dec.ctx, codes, (int)n, wav, &err))
		goto fail;
	if (audio_write(out_path, wav, n * cfg.hop, cfg.sample_rate, fmt, &err) < 0)
		goto fail;
	rc = 0;
	goto out;
fail:
	pcg_report(prog, &err);
out:
	free(wav);
	free(codes);
	decoder_close(&dec);
	xc2_close(&m);
	return rc;
}
