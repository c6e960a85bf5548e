/* test_xcodec2.c (cuda): the X-codec2 decoder on the GPU (lib/cuda/xcodec2.cu)
 * against the CPU decoder, its oracle (tests/unit/test_xcodec2.c holds the
 * CPU to PyTorch). On each fixture of tests/fixtures/xcodec2 (random tiny
 * decoders in the real layout), with the checkpoint's f32 weights and with
 * bf16 and f16 copies written here (every tensor rounded to nearest even, as
 * torch's .to() rounds): the backbone's output (xc2_features) and the
 * waveform, for the fixture's codes and for 1,000 random codes (rows longer
 * than a block in the softmax and the norms, GroupNorm over 1,000 frames);
 * the f32 waveform against PyTorch's too; the same bits on a second run;
 * chunked decoding through xc2_decode_chunked_with; the errors. Skips
 * without a GPU (gpu_require); XCODEC2_FULL=DIR adds the full-size random
 * decoder, as in the CPU test.
 *
 * Errors are normalised: max |GPU - CPU| / max |CPU| (gpu_norm_err).
 *
 * f32 weights: both sides compute in f32 with the same operations and
 * differ in summation order (cuBLAS's blocking and OpenBLAS's, tree
 * reductions in the norms and the softmax against loops, cuFFT against
 * FFTW) and in the last bit of expf, sinf and cosf. The CPU and PyTorch's
 * f32 differ in the same ways; on these fixtures by 1.3e-6 and 1.1e-6 on
 * peaks of 0.70 and 1.03 (test_xcodec2.c), 1.9e-6 and 1.1e-6 normalised.
 * GPU_TOL_OP_F32 = 1e-5 leaves 5 times that, for the backbone and the
 * waveform alike. Against PyTorch the CPU test's own limits apply.
 *
 * f16 and bf16 weights: the CPU multiplies the weights (widened exactly)
 * with f32 activations; the GPU first rounds the activations to the weights'
 * dtype, unit roundoff u = 2^-12 (f16) or 2^-9 (bf16), and accumulates in
 * f32. One product's outputs move by W (d .* x) with |d_i| <= u of random
 * sign: an rms relative error of u / sqrt(3), about u at the maximum. The
 * n products that round their input (project_out, fc_post_a, embed, 4 ResNet
 * convolutions before the transformers and 4 after, 4 per transformer
 * block, the head: n = 12 + 4 depth for the waveform, one fewer for the
 * features) round independently, so their errors add in quadrature:
 * sqrt(n) u / sqrt(3) rms; the norms carry relative errors through without
 * growing them. The head turns relative errors of log-magnitude and phase
 * into errors of exp() and of the angle, about doubling the waveform's.
 * Emulating the rounding on the CPU (the CPU decoder with its activations
 * rounded before each product, on these bf16 and f16 copies, 60 to 1,000
 * codes) gave rms feature errors in bf16 of 0.0038 (tiny, depth 2) and
 * 0.0047 (tiny-levels, depth 1), where sqrt(n) u / sqrt(3) predicts 0.0049
 * and 0.0044; normalised errors of the features 0.0036 to 0.0085 (bf16) and
 * 0.00044 to 0.00095 (f16), of the waveform 0.0079 to 0.016 (bf16) and
 * 0.0010 to 0.0017 (f16). The limit is GPU_TOL_OP_BF16 or _F16 (8 u per
 * product: u at the maximum, 2 for the head, 4 of margin) times sqrt(n):
 * 0.062 to 0.072 in bf16, 0.0077 to 0.0089 in f16, 4 to 15 times the
 * emulated errors, while a wrong dtype, index or layout gives errors of
 * order 1 (and the f32 runs hold the arithmetic to 1e-5).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/fixture.h"
#include "../unit/numeric.h"
#include "cuda/cuda_xcodec2.h"
#include "dtype.h"
#include "gpu.h"
#include "matmul.h"
#include "safetensors.h"
#include "xcodec2.h"

#define FIXTURES "tests/fixtures/xcodec2"
#define RANDOM_CODES 1000

static const pcg_dtype dtypes[] = { PCG_F32, PCG_BF16, PCG_F16 };

static double tolerance(pcg_dtype dt, int depth, int waveform)
{
	const int n = 11 + 4 * depth + waveform;

	if (dt == PCG_BF16)
		return GPU_TOL_OP_BF16 * sqrt(n);
	if (dt == PCG_F16)
		return GPU_TOL_OP_F16 * sqrt(n);
	return GPU_TOL_OP_F32;
}

/* The checkpoint of dir with every tensor converted to dt, written under
 * the test's directory; returns the path (a static buffer) or NULL. */
static const char *convert(const char *dir, pcg_dtype dt)
{
	static char out[512];
	pcg_err err = { "" };
	st_ckpt *ck = st_open(dir, &err);
	int n, ok = 1;

	CHECKF(ck != NULL, "%s", err.msg);
	if (ck == NULL)
		return NULL;
	n = st_count(ck);
	st_out *t = calloc((size_t)n, sizeof *t);
	uint16_t **half = calloc((size_t)n, sizeof *half);
	for (int i = 0; i < n && t && half; i++) {
		const st_tensor *s = st_get(ck, i);
		t[i].name = s->name;
		t[i].dtype = dt;
		t[i].ndim = s->ndim;
		memcpy(t[i].shape, s->shape, sizeof t[i].shape);
		float *f = malloc((size_t)s->numel * sizeof *f + 1);
		half[i] = malloc((size_t)s->numel * sizeof **half + 1);
		if (f == NULL || half[i] == NULL || s->dtype == PCG_DTYPE_OTHER) {
			free(f);
			ok = 0;
			break;
		}
		pcg_to_f32(f, s->data, s->dtype, (size_t)s->numel);
		for (int64_t j = 0; j < s->numel; j++)
			half[i][j] = dt == PCG_BF16 ? pcg_f32_to_bf16(f[j]) : pcg_f32_to_f16(f[j]);
		free(f);
		t[i].data = half[i];
	}
	snprintf(out, sizeof out, "%s/xc2-%s.safetensors", check_tmpdir(), pcg_dtype_name(dt));
	CHECKF(ok && t && half, "%s: converting to %s: out of memory", dir, pcg_dtype_name(dt));
	if (ok && t && half)
		CHECKF((ok = st_write(out, t, n, NULL, &err) == 0), "%s", err.msg);
	for (int i = 0; half && i < n; i++)
		free(half[i]);
	free(half);
	free(t);
	st_close(&ck);
	return ok ? out : NULL;
}

static int gpu_decoder(void *g, const int32_t *codes, int T, float *out, pcg_err *err)
{
	return xc2_cuda_decode(g, codes, T, out, err);
}

/* GPU against CPU on codes[0..T): features and waveform, the same bits twice. */
static void compare(const char *what, xc2_model *m, xc2_cuda *g, const int32_t *codes, int T,
		    pcg_dtype dt)
{
	const xc2_config *c = xc2_get_config(m);
	const size_t nf = (size_t)T * c->hidden, nw = (size_t)T * c->hop;
	float *fc = malloc(nf * sizeof *fc), *fg = malloc(nf * sizeof *fg);
	float *wc = malloc(nw * sizeof *wc), *wg = malloc(nw * sizeof *wg);
	float *again = malloc(nw * sizeof *again);
	pcg_err err = { "" };

	if (!fc || !fg || !wc || !wg || !again) {
		CHECKF(0, "%s: out of memory", what);
		goto out;
	}
	CHECKF(xc2_features(m, codes, T, fc, &err) == 0, "%s", err.msg);
	CHECKF(xc2_cuda_features(g, codes, T, fg, &err) == 0, "%s: %s", what, err.msg);
	CHECKF(xc2_decode(m, codes, T, wc, &err) == 0, "%s", err.msg);
	CHECKF(xc2_cuda_decode(g, codes, T, wg, &err) == 0, "%s: %s", what, err.msg);
	const double ef = gpu_norm_err(fg, fc, nf), ew = gpu_norm_err(wg, wc, nw);
	const double tf = tolerance(dt, c->depth, 0), tw = tolerance(dt, c->depth, 1);
	printf("%s, %s, %d codes: features %.3g (limit %.3g), waveform %.3g (limit %.3g)\n", what,
	       pcg_dtype_name(dt), T, ef, tf, ew, tw);
	CHECKF(ef <= tf, "%s, %s: features: normalised error %.3g > %.3g", what,
	       pcg_dtype_name(dt), ef, tf);
	CHECKF(ew <= tw, "%s, %s: waveform: normalised error %.3g > %.3g", what,
	       pcg_dtype_name(dt), ew, tw);
	CHECKF(xc2_cuda_decode(g, codes, T, again, &err) == 0, "%s: %s", what, err.msg);
	CHECKF(memcmp(again, wg, nw * sizeof *wg) == 0, "%s, %s: a second run differs", what,
	       pcg_dtype_name(dt));
out:
	free(fc);
	free(fg);
	free(wc);
	free(wg);
	free(again);
}

/* The f32 waveform against PyTorch's, with test_xcodec2.c's limits (the
 * full-size decoder: 5 dB less, for sums of up to 7,168 terms). */
static void against_torch(const char *dir, xc2_cuda *g, const int32_t *codes, int T, int hop,
			  int full)
{
	const double min_snr = full ? 105.0 : 110.0;
	char path[512];
	size_t n;
	pcg_err err = { "" };

	snprintf(path, sizeof path, "%s/wav.f32", dir);
	float *ref = read_f32(path, &n);
	float *wav = malloc((size_t)T * hop * sizeof *wav);
	CHECKF(ref && n == (size_t)T * hop && wav, "%s: wav.f32 missing or of the wrong size", dir);
	if (ref && n == (size_t)T * hop && wav &&
	    xc2_cuda_decode(g, codes, T, wav, &err) == 0) {
		const double mad = max_diff(wav, ref, n), snr = snr_db(ref, wav, n);
		printf("%s: GPU against PyTorch: max abs %.3g, SNR %.1f dB\n", dir, mad, snr);
		CHECKF(mad <= 1e-5, "%s: GPU against PyTorch: max abs error %.3g > 1e-5", dir, mad);
		CHECKF(snr >= min_snr, "%s: GPU against PyTorch: SNR %.1f dB < %.0f", dir, snr,
		       min_snr);
	} else {
		CHECKF(0, "%s: %s", dir, err.msg);
	}
	free(ref);
	free(wav);
}

/* Chunked decoding with the GPU's whole-utterance decoder against the CPU's. */
static void chunked(xc2_model *m, xc2_cuda *g, const int32_t *codes, int T)
{
	const xc2_config *c = xc2_get_config(m);
	const size_t n = (size_t)T * c->hop;
	float *wc = malloc(n * sizeof *wc), *wg = malloc(n * sizeof *wg);
	pcg_err err = { "" };

	if (wc && wg) {
		CHECKF(xc2_decode_chunked(m, codes, T, 25, 5, 50, 5, wc, &err) == 0, "%s", err.msg);
		CHECKF(xc2_decode_chunked_with(c, gpu_decoder, g, codes, T, 25, 5, 50, 5, wg, &err) ==
			       0, "%s", err.msg);
		const double e = gpu_norm_err(wg, wc, n);
		printf("chunks of 5, 10, 20, 25, ..., context 50 / 5: %.3g\n", e);
		CHECKF(e <= GPU_TOL_OP_F32, "chunked: normalised error %.3g > %g", e, GPU_TOL_OP_F32);
	}
	free(wc);
	free(wg);
}

/* Bad codes are named by position; no codes is an error; a device that is
 * not there fails to open, naming it. */
static void errors(xc2_model *m, xc2_cuda *g, int n_devices)
{
	const int64_t book = xc2_config_codebook(xc2_get_config(m));
	int32_t codes[5] = { 1, 2, (int32_t)book, 3, 4 };
	float out[5 * 320];
	pcg_err err = { "" };

	CHECK(xc2_get_config(m)->hop <= 320);
	CHECK(xc2_cuda_decode(g, codes, 5, out, &err) == -1);
	CHECKF(strstr(err.msg, "position 2") != NULL, "%s", err.msg);
	codes[2] = -1;
	CHECK(xc2_cuda_features(g, codes, 5, out, &err) == -1);
	CHECKF(strstr(err.msg, "position 2") != NULL, "%s", err.msg);
	CHECK(xc2_cuda_decode(g, codes, 0, out, &err) == -1);
	xc2_cuda *none = xc2_cuda_open(m, n_devices, &err);
	CHECK(none == NULL);
	CHECKF(strstr(err.msg, "cuda:") != NULL, "%s", err.msg);
	xc2_cuda_close(&none);
}

static void fixture(const char *dir, int n_devices, int full)
{
	char path[512];
	pcg_err err = { "" };
	xc2_config cfg;
	size_t nb;

	snprintf(path, sizeof path, "%s/config.json", dir);
	CHECKF(xc2_config_load(path, &cfg, &err) == 0, "%s", err.msg);
	snprintf(path, sizeof path, "%s/codes.i32", dir);
	int32_t *codes = read_bytes(path, &nb);
	int32_t *rnd = malloc(RANDOM_CODES * sizeof *rnd);
	const int T = (int)(nb / sizeof *codes);
	CHECKF(codes && T > 0 && rnd, "%s: codes.i32 missing", dir);
	if (!codes || T == 0 || !rnd) {
		free(codes);
		free(rnd);
		return;
	}
	uint64_t s = 0x9e3779b97f4a7c15u; /* fixed seed */
	for (int i = 0; i < RANDOM_CODES; i++) {
		s = s * 6364136223846793005u + 1442695040888963407u;
		rnd[i] = (int32_t)((s >> 33) % (uint64_t)xc2_config_codebook(&cfg));
	}
	for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
		if (full && dtypes[d] != PCG_F32)
			break;
		const char *w = dtypes[d] == PCG_F32 ? dir : convert(dir, dtypes[d]);
		if (w == NULL)
			continue;
		xc2_model *m = xc2_open(w, &cfg, &err);
		CHECKF(m != NULL, "%s", err.msg);
		xc2_cuda *g = m ? xc2_cuda_open(m, 0, &err) : NULL;
		CHECKF(m == NULL || g != NULL, "%s", err.msg);
		if (g != NULL) {
			printf("%s, %s: %.2f MB of weights on the device\n", dir,
			       pcg_dtype_name(dtypes[d]), xc2_cuda_weight_bytes(g) / 1e6);
			compare(dir, m, g, codes, T, dtypes[d]);
			if (!full)
				compare(dir, m, g, rnd, RANDOM_CODES, dtypes[d]);
			if (dtypes[d] == PCG_F32) {
				against_torch(dir, g, codes, T, cfg.hop, full);
				chunked(m, g, codes, T);
				if (!full)
					errors(m, g, n_devices);
			}
		}
		xc2_cuda_close(&g);
		CHECK(g == NULL);
		xc2_close(&m);
		if (w != dir)
			remove(w);
	}
	free(codes);
	free(rnd);
}

int main(void)
{
	const int n = gpu_require("test_xcodec2 (cuda)");
	const char *full = getenv("XCODEC2_FULL");

	pcg_set_threads(0);
	/* the CPU keeps f32 activations (its default for bf16 weights would
	 * round them to bf16, matmul.h) */
	if (pcg_matmul_set_isa("avx512") < 0)
		printf("cpu kernels %s\n", pcg_matmul_isa());
	fixture(FIXTURES "/tiny", n, 0);
	fixture(FIXTURES "/tiny-levels", n, 0);
	if (full != NULL && *full)
		fixture(full, n, 1);
	return check_done("test_xcodec2 (cuda)");
}
