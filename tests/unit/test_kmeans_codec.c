/* test_kmeans_codec.c: the kmeans-gl decoder (lib/codec/kmeans_codec.h) against the
 * float64 numpy reference of tests/ref/make_kmeans_fixtures.py (a random
 * K = 16 codebook, 40 codes, 32 Griffin-Lim iterations, seeded phase), plus
 * its errors: a code out of range names the position, a bad config.json
 * names the key, centroids of the wrong shape name the tensor.
 *
 * Tolerance. The C decoder and the reference take the same steps; the only
 * difference is float32 against float64 arithmetic. One float32 FFT of 1024
 * points has a relative error of about eps * log2(1024) = 6e-8 * 10 = 6e-7
 * (-124 dB); each iteration adds two FFTs and a renormalisation, and
 * Griffin-Lim does not damp a phase error in bins of near-zero magnitude, so
 * after 32 iterations the error can grow to ~64 times that, 4e-5 (-88 dB),
 * in the worst case. Measured: 97 dB. We ask for SNR >= 80 dB, below the
 * bound with margin, and far above what a wrong step gives (the wrong window
 * normalisation, phase seed or one iteration more or less: one more
 * iteration gives 38 dB, checked below to be under 60).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixture.h"
#include "kmeans_codec.h"
#include "numeric.h"

#define FX "tests/fixtures/kmeans/tiny"
#define MIN_SNR_DB 80.0

static int read_codes(int32_t *codes, int max)
{
	FILE *f = fopen(FX "/codes.txt", "r");
	int n = 0;

	if (f == NULL)
		return -1;
	while (n < max && fscanf(f, "%d", &codes[n]) == 1)
		n++;
	fclose(f);
	return n;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
}

static void bad_config(const char *json, const char *want)
{
	char path[512];
	pcg_err err = { "" };
	kmc_model *m;

	snprintf(path, sizeof path, "%s/config.json", check_tmpdir());
	write_file(path, json);
	m = kmc_open(FX "/model.safetensors", path, &err);
	CHECKF(m == NULL && strstr(err.msg, want), "config %s: '%s' lacks '%s'", json, err.msg, want);
	kmc_close(&m);
}

int main(void)
{
	pcg_err err = { "" };
	int32_t codes[256];
	int T = read_codes(codes, 256);
	size_t nref = 0;
	float *ref = read_f32(FX "/ref.f32", &nref), *out;
	kmc_model *m;

	if (T <= 0 || ref == NULL)
		SKIP("no fixtures in " FX " (tests/ref/make_kmeans_fixtures.py)");
	m = kmc_open(FX, NULL, &err);
	CHECKF(m != NULL, "%s", err.msg);
	if (m == NULL)
		return check_done("test_kmeans_codec");
	const kmc_config *c = kmc_get_config(m);
	CHECK(c->hop == 320 && c->n_fft == 1024 && c->sample_rate == 16000 && c->codebook == 16);
	CHECK(nref == (size_t)T * c->hop);

	/* The reference waveform. */
	out = calloc((size_t)T * c->hop, sizeof *out);
	CHECKF(kmc_decode(m, codes, T, out, &err) == 0, "%s", err.msg);
	double snr = snr_db(ref, out, nref);
	printf("%d codes, %zu samples: SNR against the float64 reference %.1f dB (want >= %.0f)\n",
	       T, nref, snr, MIN_SNR_DB);
	CHECKF(snr >= MIN_SNR_DB, "SNR %.1f dB", snr);

	/* Deterministic: the same codes give the same samples. */
	float *again = calloc(nref, sizeof *again);
	CHECK(kmc_decode(m, codes, T, again, &err) == 0);
	CHECK(memcmp(out, again, nref * sizeof *out) == 0);

	/* One code, and a prefix: the right length, finite, not silent. */
	CHECK(kmc_decode(m, codes, 1, again, &err) == 0);
	double e = 0;
	for (int i = 0; i < c->hop; i++)
		e += again[i] * again[i];
	CHECKF(isfinite(e) && e > 0, "one code: energy %g", e);

	/* The initial phase's uniforms are in [0, 1) and spread. */
	double sum = 0;
	int in = 1;
	for (int i = 0; i < 10000; i++) {
		float u = kmc_uniform(7, i);
		in &= u >= 0 && u < 1;
		sum += u;
	}
	CHECK(in);
	CHECKF(fabs(sum / 10000 - 0.5) < 0.012, "mean %g", sum / 10000); /* 4 sigma: 0.29/100 */

	/* Errors: a code out of range names the position; nothing is decoded. */
	codes[5] = 16;
	CHECK(kmc_decode(m, codes, T, out, &err) < 0);
	CHECKF(strstr(err.msg, "position 5") != NULL, "%s", err.msg);
	codes[5] = -1;
	CHECK(kmc_decode(m, codes, T, out, &err) < 0 && strstr(err.msg, "position 5"));
	CHECK(kmc_decode(m, codes, 0, out, &err) < 0);
	kmc_close(&m);
	CHECK(m == NULL);

	/* One iteration more is another waveform: the SNR check has teeth. */
	char path[512];
	snprintf(path, sizeof path, "%s/config.json", check_tmpdir());
	write_file(path, "{\"codec\": \"kmeans-gl\", \"sample_rate\": 16000, \"n_fft\": 1024, "
			 "\"hop\": 320, \"n_iter\": 33, \"seed\": 7, \"codebook_size\": 16}");
	codes[5] = 5;
	read_codes(codes, 256);
	m = kmc_open(FX "/model.safetensors", path, &err);
	CHECKF(m != NULL, "%s", err.msg);
	if (m) {
		CHECK(kmc_decode(m, codes, T, again, &err) == 0);
		double s2 = snr_db(ref, again, nref);
		printf("33 iterations instead of 32: SNR %.1f dB\n", s2);
		CHECKF(s2 < 60, "SNR %.1f", s2);
		kmc_close(&m);
	}

	bad_config("[1]", "not a JSON object");
	bad_config("{\"codec\": \"xcodec2\"}", "'codec'");
	bad_config("{\"codec\": \"kmeans-gl\", \"sample_rate\": 16000, \"n_fft\": 1023, "
		   "\"hop\": 320, \"n_iter\": 32, \"codebook_size\": 16}", "'n_fft'");
	bad_config("{\"codec\": \"kmeans-gl\", \"sample_rate\": 16000, \"n_fft\": 1024, "
		   "\"hop\": 320, \"n_iter\": 32}", "'codebook_size' missing");
	bad_config("{\"codec\": \"kmeans-gl\", \"sample_rate\": 16000, \"n_fft\": 1024, "
		   "\"hop\": 2000, \"n_iter\": 32, \"codebook_size\": 16}", "'hop'");
	bad_config("{\"codec\": \"kmeans-gl\", \"sample_rate\": 16000, \"n_fft\": 1024, "
		   "\"hop\": 320, \"n_iter\": \"32\", \"codebook_size\": 16}", "'n_iter'");
	/* The config says K = 17 or n_fft 512: the tensor's shape is wrong. */
	bad_config("{\"codec\": \"kmeans-gl\", \"sample_rate\": 16000, \"n_fft\": 1024, "
		   "\"hop\": 320, \"n_iter\": 32, \"codebook_size\": 17}", "centroids");
	bad_config("{\"codec\": \"kmeans-gl\", \"sample_rate\": 16000, \"n_fft\": 512, "
		   "\"hop\": 320, \"n_iter\": 32, \"codebook_size\": 16}", "centroids");
	m = kmc_open("nowhere", NULL, &err);
	CHECKF(m == NULL && strstr(err.msg, "nowhere"), "%s", err.msg);

	free(out);
	free(again);
	free(ref);
	return check_done("test_kmeans_codec");
}
