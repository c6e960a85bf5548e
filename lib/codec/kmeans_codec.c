/* kmeans_codec.c: the kmeans-gl decoder (centroid lookup, Griffin-Lim through
 * FFTW single-precision real FFTs), step by step as kmeans_codec.h writes it
 * and tests/ref/make_kmeans_fixtures.py computes it in numpy. Its prefix
 * kmc_ is the file's name shortened (k-means codec).
 */
#include "kmeans_codec.h"
#include "fileio.h"

#include <errno.h>
#include <fftw3.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dtype.h"
#include "safetensors.h"
#include "weights.h"

struct kmc_model {
	kmc_config cfg;
	int F;              /* n_fft / 2 + 1 */
	float *logmag;      /* (codebook, F) */
	float *win;         /* (n_fft) periodic Hann */
	fftwf_plan r2c, c2r;
};

/* ------------------------------------------------------------------ config */

static int key_int(const json_t *root, const char *key, int required, long long lo,
		   long long hi, long long *out, pcg_err *err)
{
	const json_t *v = json_object_get(root, key);

	if (v == NULL)
		return required ? pcg_fail(err, "'%s' missing", key) : 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return pcg_fail(err, "'%s': an integer in [%lld, %lld] expected", key, lo, hi);
	*out = json_integer_value(v);
	return 0;
}

int kmc_config_load(const char *path, kmc_config *c, pcg_err *err)
{
	json_error_t je;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	const json_t *name;
	long long rate = 0, n_fft = 0, hop = 0, n_iter = 0, seed = 0, k = 0;
	int rc = -1;

	if (root == NULL)
		return pcg_json_fail(err, path, &je);
	if (!json_is_object(root)) {
		pcg_fail(err, "not a JSON object");
		goto out;
	}
	name = json_object_get(root, "codec");
	if (!json_is_string(name) || strcmp(json_string_value(name), "kmeans-gl")) {
		pcg_fail(err, "'codec': \"kmeans-gl\" expected");
		goto out;
	}
	if (key_int(root, "sample_rate", 1, 1000, 384000, &rate, err) < 0 ||
	    key_int(root, "n_fft", 1, 16, 8192, &n_fft, err) < 0 ||
	    key_int(root, "hop", 1, 1, 8192, &hop, err) < 0 ||
	    key_int(root, "n_iter", 1, 0, 10000, &n_iter, err) < 0 ||
	    key_int(root, "seed", 0, 0, LLONG_MAX, &seed, err) < 0 ||
	    key_int(root, "codebook_size", 1, 1, 1 << 20, &k, err) < 0)
		goto out;
	if (n_fft % 2) {
		pcg_fail(err, "'n_fft': must be even");
		goto out;
	}
	if (hop > n_fft) {
		pcg_fail(err, "'hop': at most n_fft (%lld)", n_fft);
		goto out;
	}
	c->sample_rate = (int)rate;
	c->n_fft = (int)n_fft;
	c->hop = (int)hop;
	c->n_iter = (int)n_iter;
	c->seed = (uint64_t)seed;
	c->codebook = (int)k;
	rc = 0;
out:
	json_decref(root);
	if (rc < 0)
		pcg_err_prefix(err, path);
	return rc;
}

/* ------------------------------------------------------------------ model */

float kmc_uniform(uint64_t seed, uint64_t i)
{
	uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return (float)(z >> 40) / 16777216.0f;
}

kmc_model *kmc_open(const char *weights, const char *config, pcg_err *err)
{
	char cpath[4200];
	kmc_model *m = calloc(1, sizeof *m);
	st_ckpt *ck = NULL;
	pcg_weights w = { 0 };
	const st_tensor *t;
	float *a = NULL, *b = NULL;
	struct stat st;
	int n;

	if (m == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	if (stat(weights, &st) < 0) {
		pcg_fail(err, "%s: %s", weights, strerror(errno));
		goto fail;
	}
	if (config == NULL) {
		pcg_config_beside(weights, cpath, sizeof cpath);
		config = cpath;
	}
	if (kmc_config_load(config, &m->cfg, err) < 0)
		goto fail;
	n = m->cfg.n_fft;
	m->F = n / 2 + 1;
	if ((ck = st_open(weights, err)) == NULL)
		goto fail;
	w.ck = ck;
	if ((t = wt_need(&w, "centroids", m->cfg.codebook, m->F, -1, err)) == NULL)
		goto fail;
	m->logmag = malloc((size_t)m->cfg.codebook * m->F * sizeof *m->logmag);
	m->win = malloc((size_t)n * sizeof *m->win);
	a = fftwf_malloc((size_t)n * sizeof *a);
	b = fftwf_malloc((size_t)m->F * sizeof(fftwf_complex));
	if (m->logmag == NULL || m->win == NULL || a == NULL || b == NULL) {
		pcg_fail(err, "out of memory");
		goto fail;
	}
	pcg_to_f32(m->logmag, t->data, t->dtype, (size_t)m->cfg.codebook * m->F);
	for (size_t i = 0; i < (size_t)m->cfg.codebook * m->F; i++)
		if (!isfinite(m->logmag[i]) || m->logmag[i] > 80.0f) {
			pcg_fail(err, "tensor 'centroids': value %g at %zu: a log-magnitude must be "
				 "finite and at most 80", m->logmag[i], i);
			goto fail;
		}
	/* torch.hann_window(n) (periodic): 0.5 - 0.5 cos(2 pi j / n). */
	for (int j = 0; j < n; j++)
		m->win[j] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * j / n));
	/* Plans once, here; kmc_decode runs them on its own (equally aligned)
	 * arrays through the new-array execute functions, which are thread-safe. */
	m->r2c = fftwf_plan_dft_r2c_1d(n, a, (fftwf_complex *)b, FFTW_ESTIMATE);
	m->c2r = fftwf_plan_dft_c2r_1d(n, (fftwf_complex *)b, a, FFTW_ESTIMATE);
	if (m->r2c == NULL || m->c2r == NULL) {
		pcg_fail(err, "FFTW: no plan for n_fft %d", n);
		goto fail;
	}
	fftwf_free(a);
	fftwf_free(b);
	wt_release(&w);
	st_close(&ck);
	return m;
fail:
	fftwf_free(a);
	fftwf_free(b);
	wt_release(&w);
	st_close(&ck);
	kmc_close(&m);
	return NULL;
}

void kmc_close(kmc_model **mp)
{
	kmc_model *m = mp ? *mp : NULL;

	if (m == NULL)
		return;
	if (m->r2c)
		fftwf_destroy_plan(m->r2c);
	if (m->c2r)
		fftwf_destroy_plan(m->c2r);
	free(m->logmag);
	free(m->win);
	free(m);
	*mp = NULL;
}

const kmc_config *kmc_get_config(const kmc_model *m)
{
	return &m->cfg;
}

/* ------------------------------------------------------------------ decode */

/* istft of X (T, F) into buf (the overlap-add, n_fft + hop * (T - 1) samples)
 * times inv (1 / sum of w^2; 0 outside the kept samples): buf then holds the
 * zero-padded signal stft reads, at the positions it reads it. */
static void istft(const kmc_model *m, const fftwf_complex *X, int T, float *frame,
		  fftwf_complex *spec, float *buf, const float *inv, size_t nbuf)
{
	int n = m->cfg.n_fft, F = m->F, hop = m->cfg.hop;

	memset(buf, 0, nbuf * sizeof *buf);
	for (int t = 0; t < T; t++) {
		/* c2r overwrites its input: a copy. irfft ignores the imaginary
		 * parts of DC and Nyquist; FFTW is told so explicitly. */
		memcpy(spec, X + (size_t)t * F, (size_t)F * sizeof *spec);
		spec[0][1] = 0.0f;
		spec[F - 1][1] = 0.0f;
		fftwf_execute_dft_c2r(m->c2r, spec, frame);
		float *o = buf + (size_t)t * hop;
		for (int j = 0; j < n; j++)
			o[j] += frame[j] * m->win[j] * (1.0f / n);
	}
	for (size_t i = 0; i < nbuf; i++)
		buf[i] *= inv[i];
}

int kmc_decode(const kmc_model *m, const int32_t *codes, int T, float *out, pcg_err *err)
{
	int n = m->cfg.n_fft, F = m->F, hop = m->cfg.hop, half = n / 2;
	size_t L = (size_t)hop * T, nbuf = (size_t)n + (size_t)hop * (T - 1);
	float *mag = NULL, *buf = NULL, *inv = NULL, *frame = NULL;
	fftwf_complex *X = NULL, *spec = NULL;
	int rc = -1;

	if (T <= 0)
		return pcg_fail(err, "no codes");
	for (int t = 0; t < T; t++)
		if (codes[t] < 0 || codes[t] >= m->cfg.codebook)
			return pcg_fail(err, "position %d: code %d not in [0, %d)", t, codes[t],
					m->cfg.codebook);
	mag = malloc((size_t)T * F * sizeof *mag);
	buf = malloc(nbuf * sizeof *buf);
	inv = malloc(nbuf * sizeof *inv);
	X = fftwf_malloc((size_t)T * F * sizeof *X);
	spec = fftwf_malloc((size_t)F * sizeof *spec);
	frame = fftwf_malloc((size_t)n * sizeof *frame);
	if (!mag || !buf || !inv || !X || !spec || !frame) {
		pcg_fail(err, "out of memory for %d codes", T);
		goto out;
	}

	/* The window normalisation of torch.istft: 1 / sum of w^2 over the
	 * frames, on the samples kept; 0 elsewhere (the zero padding of stft). */
	memset(buf, 0, nbuf * sizeof *buf);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < n; j++)
			buf[(size_t)t * hop + j] += m->win[j] * m->win[j];
	for (size_t i = 0; i < nbuf; i++)
		inv[i] = (i >= (size_t)half && i < half + L && buf[i] > 1e-11f) ? 1.0f / buf[i] : 0.0f;

	/* M = exp(centroid); X = M with the seeded initial phase. */
	for (int t = 0; t < T; t++) {
		const float *c = m->logmag + (size_t)codes[t] * F;
		for (int f = 0; f < F; f++) {
			size_t i = (size_t)t * F + f;
			float ph = 2.0f * (float)M_PI * kmc_uniform(m->cfg.seed, i);
			mag[i] = expf(c[f]);
			X[i][0] = mag[i] * cosf(ph);
			X[i][1] = mag[i] * sinf(ph);
		}
	}

	for (int it = 0; it < m->cfg.n_iter; it++) {
		/* x = istft(X); Y = stft(x); X = M * Y / |Y|. */
		istft(m, X, T, frame, spec, buf, inv, nbuf);
		for (int t = 0; t < T; t++) {
			const float *x = buf + (size_t)t * hop;
			for (int j = 0; j < n; j++)
				frame[j] = x[j] * m->win[j];
			fftwf_execute_dft_r2c(m->r2c, frame, spec);
			for (int f = 0; f < F; f++) {
				size_t i = (size_t)t * F + f;
				float re = spec[f][0], im = spec[f][1];
				float a = sqrtf(re * re + im * im);
				if (a < 1e-12f) {
					X[i][0] = mag[i];
					X[i][1] = 0.0f;
				} else {
					X[i][0] = mag[i] * (re / a);
					X[i][1] = mag[i] * (im / a);
				}
			}
		}
	}
	istft(m, X, T, frame, spec, buf, inv, nbuf);
	memcpy(out, buf + half, L * sizeof *out);
	for (size_t i = 0; i < L; i++)
		if (!isfinite(out[i])) {
			pcg_fail(err, "sample %zu not finite", i);
			goto out;
		}
	rc = 0;
out:
	free(mag);
	free(buf);
	free(inv);
	fftwf_free(X);
	fftwf_free(spec);
	fftwf_free(frame);
	return rc;
}
