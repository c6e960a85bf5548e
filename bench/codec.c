/* bench/codec.c: the X-codec2 decoder at full size (hidden 1024, 12
 * transformer blocks, about 187 M multiply-adds per code): real-time factor
 * (decode time / audio time) for utterances of 5 s and 30 s, peak RSS, and,
 * with --snr, how far chunked (streaming) decoding is from whole-utterance
 * decoding. Without --weights it writes a full-size decoder with seeded
 * random weights (unit-gain matrices, as tests/ref/make_xcodec2_fixtures.py)
 * into a temporary directory first, in a child process so that the peak RSS
 * reported is the decoder's alone; --keep DIR writes them there instead and
 * keeps them (a directory codec-decode and pcg-up --codec-weights take), or
 * reuses the file a former run left. --device cuda[:N] times the decoder on
 * a GPU (lib/cuda/cuda_xcodec2.h, through the device kind's hooks, as
 * codec-decode --device).
 * Usage: bench-codec [--weights DIR | --keep DIR] [--device DEV] [--threads N] [--reps N]
 *        [--snr]
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "device.h"
#include "matmul.h"
#include "opts.h"
#include "safetensors.h"
#include "xcodec2.h"

#include "../tests/unit/numeric.h"

static const char *weights, *keep, *device_s;
static int threads, reps, snr, max_seconds;
static const pcg_opt opts[] = {
	{ "weights", PCG_OPT_STR, &weights, NULL, 1, 0, "DIR",
	  "a full-size checkpoint (default: random weights in a temporary directory)" },
	{ "keep", PCG_OPT_STR, &keep, NULL, 1, 0, "DIR",
	  "write the random weights into DIR and keep them (reused when there)" },
	{ "device", PCG_OPT_STR, &device_s, "cpu", 1, 0, "cpu|cuda[:N]",
	  "where the decoder runs (--snr: the CPU only)" },
	{ "threads", PCG_OPT_INT, &threads, "2", 0, 1024, "N", "threads" },
	{ "reps", PCG_OPT_INT, &reps, "3", 1, 100, "N", "repetitions (the best is reported)" },
	{ "max-seconds", PCG_OPT_INT, &max_seconds, "30", 1, 3600, "N",
	  "skip utterances longer than N seconds" },
	{ "snr", PCG_OPT_FLAG, &snr, NULL, 1, 0, NULL,
	  "also chunked decoding vs whole, for several chunk sizes" },
	{ NULL },
};

/* CPU seconds of all threads of this process. */
static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec * 1e-6;
}

static void die(const char *what, const pcg_err *err)
{
	fprintf(stderr, "bench-codec: %s: %s\n", what, err->msg);
	exit(1);
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
/* Uniform in [-1, 1) (xorshift64*: fast, and quality is not the point). */
static float urand(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (float)((rng * 2685821657736338717ULL) >> 40) / (float)(1 << 23) - 1.0f;
}

/* Writes the decoder tensors of the full-size config to path with random
 * values as the reference fixtures have them (uniform instead of normal):
 * matrices of variance 1/fan_in, biases and norm biases of standard
 * deviation 0.1, norm weights 1 + that. */
static void write_random(const char *path)
{
	xc2_config c;
	st_out t[256];
	float *bufs[256];
	int n = 0;
	pcg_err err;

	xc2_config_default(&c);
	const int C = c.hidden, N = 4 * c.hop;
#define T(nm, d0, d1, d2, kind) do { \
		int64_t d_[3] = { (d0), (d1), (d2) }; \
		int nd_ = (d1) < 0 ? 1 : (d2) < 0 ? 2 : 3; \
		size_t ne_ = 1; \
		for (int i_ = 0; i_ < nd_; i_++) ne_ *= (size_t)d_[i_]; \
		float *p_ = malloc(ne_ * sizeof *p_); \
		if (p_ == NULL) { perror("malloc"); exit(1); } \
		float a_ = (kind) == 0 ? sqrtf(3.0f * (float)(d0) / (float)ne_) : 0.17f; \
		for (size_t i_ = 0; i_ < ne_; i_++) \
			p_[i_] = ((kind) == 2 ? 1.0f : 0.0f) + a_ * urand(); \
		t[n].name = strdup(nm); t[n].dtype = PCG_F32; t[n].ndim = nd_; \
		memcpy(t[n].shape, d_, sizeof d_); t[n].data = p_; bufs[n++] = p_; \
	} while (0)
	char nm[160];
	T("generator.quantizer.project_in.weight", c.n_levels, c.vq_dim, -1, 0);
	T("generator.quantizer.project_in.bias", c.n_levels, -1, -1, 1);
	T("generator.quantizer.project_out.weight", c.vq_dim, c.n_levels, -1, 0);
	T("generator.quantizer.project_out.bias", c.vq_dim, -1, -1, 1);
	T("fc_post_a.weight", C, c.vq_dim, -1, 0);
	T("fc_post_a.bias", C, -1, -1, 1);
	T("generator.backbone.embed.weight", C, C, 7, 0);
	T("generator.backbone.embed.bias", C, -1, -1, 1);
	for (int net = 0; net < 2; net++)
		for (int b = 0; b < 2; b++) {
			const char *pre = net ? "post_net" : "prior_net";
#define R(suffix, d1, d2, kind) \
			snprintf(nm, sizeof nm, "generator.backbone.%s.%d.%s", pre, b, suffix); \
			T(nm, C, d1, d2, kind);
			R("norm1.weight", -1, -1, 2) R("norm1.bias", -1, -1, 1)
			R("conv1.weight", C, 3, 0) R("conv1.bias", -1, -1, 1)
			R("norm2.weight", -1, -1, 2) R("norm2.bias", -1, -1, 1)
			R("conv2.weight", C, 3, 0) R("conv2.bias", -1, -1, 1)
#undef R
		}
	for (int l = 0; l < c.depth; l++) {
#define B(suffix, d0, d1, kind) \
		snprintf(nm, sizeof nm, "generator.backbone.transformers.%d.%s", l, suffix); \
		T(nm, d0, d1, -1, kind);
		B("att_norm.weight", C, -1, 2) B("att.c_attn.weight", 3 * C, C, 0)
		B("att.c_proj.weight", C, C, 0) B("ffn_norm.weight", C, -1, 2)
		B("mlp.fc1.weight", c.ffn, C, 0) B("mlp.fc2.weight", C, c.ffn, 0)
#undef B
	}
	T("generator.backbone.final_layer_norm.weight", C, -1, -1, 2);
	T("generator.backbone.final_layer_norm.bias", C, -1, -1, 1);
	T("generator.head.out.weight", N + 2, C, -1, 0);
	T("generator.head.out.bias", N + 2, -1, -1, 1);
	T("generator.head.istft.window", N, -1, -1, 1);
#undef T
	/* 1.5x on the log-magnitude rows, as the reference fixtures. */
	for (int i = 0; i < n; i++)
		if (!strcmp(t[i].name, "generator.head.out.weight"))
			for (size_t k = 0; k < (size_t)(N / 2 + 1) * C; k++)
				bufs[i][k] *= 1.5f;
	if (st_write(path, t, n, NULL, &err) < 0)
		die("writing random weights", &err);
	for (int i = 0; i < n; i++) {
		free(bufs[i]);
		free((char *)t[i].name);
	}
}

static int cpu_decode(void *m, const int32_t *codes, int T, float *out, pcg_err *err)
{
	return xc2_decode(m, codes, T, out, err);
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	char dir[256] = "", path[300];
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, "bench-codec",
			       "[--weights DIR | --keep DIR] [--device DEV] [--threads N] [--reps N] [--snr]",
			       opts);
		return 0;
	}
	if (first != argc) {
		fprintf(stderr, "bench-codec: %s\n", first < 0 ? err.msg : "unexpected argument");
		return 2;
	}
	pcg_device device;
	if (pcg_device_parse(device_s, &device, &err) < 0) {
		fprintf(stderr, "bench-codec: --device: %s\n", err.msg);
		return 2;
	}
	if (weights && keep) {
		fprintf(stderr, "bench-codec: --weights and --keep: give one\n");
		return 2;
	}
	if (snr && !pcg_device_is_host(device)) {
		fprintf(stderr, "bench-codec: --snr: chunked decoding runs on the CPU only\n");
		return 2;
	}
	/* Before minutes of writing weights: a device that is not there fails at once. */
	if (pcg_device_check(device, &err) < 0)
		die("device", &err);
	struct stat st;
	if (keep) {
		snprintf(path, sizeof path, "%s/model.safetensors", keep);
		if (stat(path, &st) == 0)
			weights = keep;
		else if (mkdir(keep, 0777) < 0 && errno != EEXIST) {
			fprintf(stderr, "bench-codec: %s: %s\n", keep, strerror(errno));
			return 1;
		}
	}
	if (weights == NULL) {
		if (keep == NULL) {
			snprintf(dir, sizeof dir, "%s/bench-codec.XXXXXX",
				 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
			if (mkdtemp(dir) == NULL) {
				perror("mkdtemp");
				return 1;
			}
			snprintf(path, sizeof path, "%s/model.safetensors", dir);
		}
		double t0 = pcg_now();
		pid_t pid = fork();
		if (pid == 0) {
			write_random(path);
			_exit(0);
		}
		int status;
		waitpid(pid, &status, 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return 1;
		printf("random full-size weights written in %.1f s\n", pcg_now() - t0);
		weights = keep ? keep : dir;
	}
	pcg_set_threads(threads);
	xc2_config cfg;
	xc2_config_default(&cfg);
	double t0 = pcg_now();
	xc2_model *m = xc2_open(weights, &cfg, &err);
	if (m == NULL)
		die("open", &err);
	printf("opened in %.3f s (%.0f MB mapped); %d threads, %s kernels\n", pcg_now() - t0,
	       xc2_mapped_bytes(m) / 1e6, pcg_get_threads(), pcg_matmul_isa());
	/* The decoder on the device: the CPU's, or a GPU's through its hooks. */
	void *dec = m;
	int (*decode)(void *, const int32_t *, int, float *, pcg_err *) = cpu_decode;
	if (!pcg_device_is_host(device)) {
		char dname[64];
		if (device.kind->xc2_open == NULL) {
			fprintf(stderr, "bench-codec: %s: no X-codec2 decoder for %s devices\n",
				device_s, device.kind->label);
			return 1;
		}
		t0 = pcg_now();
		if ((dec = device.kind->xc2_open(m, device.index, &err)) == NULL)
			die("device", &err);
		decode = device.kind->xc2_decode;
		printf("copied to %s in %.3f s\n", pcg_device_name(device, dname, sizeof dname),
		       pcg_now() - t0);
	}

	static const int seconds[] = { 5, 30 };
	float *wav30 = NULL;
	int32_t *codes = NULL;
	for (int s = 0; s < 2; s++) {
		const int T = seconds[s] * 50;
		if (seconds[s] > max_seconds)
			continue;
		codes = realloc(codes, T * sizeof *codes);
		float *wav = malloc((size_t)T * cfg.hop * sizeof *wav);
		uint32_t r = 12345;
		for (int i = 0; i < T; i++) {
			r = r * 1664525u + 1013904223u;
			codes[i] = (int32_t)(r >> 16);
		}
		double best = INFINITY, best_cpu = INFINITY;
		for (int k = 0; k < reps; k++) {
			double c0 = cpu_seconds();
			t0 = pcg_now();
			if (decode(dec, codes, T, wav, &err) < 0)
				die("decode", &err);
			double dt = pcg_now() - t0, dc = cpu_seconds() - c0;
			best = dt < best ? dt : best;
			best_cpu = dc < best_cpu ? dc : best_cpu;
		}
		/* CPU time / threads is what the wall time would be on an idle
		 * machine (the shared one is often busy with other jobs). */
		printf("%2d s of audio (%4d codes): best of %d: %.3f s wall (RTF %.3f), "
		       "%.3f s CPU (CPU/threads RTF %.3f), %.1f GMAC/s\n",
		       seconds[s], T, reps, best, best / seconds[s], best_cpu,
		       best_cpu / pcg_get_threads() / seconds[s], 186.98e6 * T / best / 1e9);
		if (s == 1)
			wav30 = wav;
		else
			free(wav);
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("peak RSS %.0f MB (weights mapped: %.0f MB)\n", ru.ru_maxrss / 1024.0,
	       xc2_mapped_bytes(m) / 1e6);

	if (snr && max_seconds >= 30) {
		/* The first 10 s of the 30 s codes, whole vs chunked. */
		const int T = 500;
		const size_t n = (size_t)T * cfg.hop;
		float *whole = malloc(n * sizeof *whole), *ch = malloc(n * sizeof *ch);
		static const int chunks[] = { 25, 50, 100 }, lefts[] = { 0, 50, 150 };
		static const int rights[] = { 0, 5, 25 };
		if (xc2_decode(m, codes, T, whole, &err) < 0)
			die("decode", &err);
		printf("chunked vs whole, 10 s utterance: SNR in dB (time per chunk)\n");
		printf("  chunk  context  lookahead    SNR   ms/chunk\n");
		for (int a = 0; a < 3; a++)
			for (int b = 0; b < 3; b++)
				for (int c = 0; c < 3; c++) {
					if (c > 0 && b != 2)
						continue; /* lookahead only with the default context */
					t0 = pcg_now();
					if (xc2_decode_chunked(m, codes, T, chunks[a], 0, lefts[b], rights[c], ch,
							       &err) < 0)
						die("chunked", &err);
					double dt = pcg_now() - t0;
					printf("  %5d  %7d  %9d  %5.1f  %8.0f\n", chunks[a], lefts[b],
					       rights[c], snr_db(whole, ch, n),
					       dt * 1e3 / ((T + chunks[a] - 1) / chunks[a]));
					fflush(stdout);
				}
		free(whole);
		free(ch);
	}
	free(wav30);
	free(codes);
	if (dec != m)
		device.kind->xc2_close(dec);
	xc2_close(&m);
	if (dir[0]) {
		unlink(path);
		rmdir(dir);
	}
	return 0;
}
