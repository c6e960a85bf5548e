/* mcd.c: MCD-DTW, the recipe written out in mcd.h: frames, power spectrum
 * (FFTW), HTK mel bands, log, DCT-II, then DTW over the cepstra.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sndfile.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fftw3.h>

#include "mcd.h"

/* More samples than this is a mistake (hours of audio) rather than speech. */
#define MCD_MAX_SAMPLES ((sf_count_t)1 << 28)

void mcd_config_default(mcd_config *c)
{
	c->frame_ms = 25;
	c->hop_ms = 5;
	c->n_mels = 40;
	c->n_ceps = 24;
	c->log_floor = 1e-10;
}

/* Window and hop in samples (rounded to the nearest). */
static int win_len(const mcd_config *c, int rate) { return (int)lround(c->frame_ms * rate / 1000); }
static int hop_len(const mcd_config *c, int rate) { return (int)lround(c->hop_ms * rate / 1000); }

int mcd_config_check(const mcd_config *c, int rate, pcg_err *err)
{
	if (rate <= 0 || rate > 1000000)
		return pcg_fail(err, "sample rate %d Hz out of range", rate);
	if (!(c->frame_ms > 0 && c->frame_ms <= 1000) || win_len(c, rate) < 2)
		return pcg_fail(err, "window of %g ms is under 2 samples at %d Hz", c->frame_ms, rate);
	if (!(c->hop_ms > 0 && c->hop_ms <= 1000) || hop_len(c, rate) < 1)
		return pcg_fail(err, "hop of %g ms is under 1 sample at %d Hz", c->hop_ms, rate);
	if (c->n_mels < 2 || c->n_mels > 512)
		return pcg_fail(err, "%d mel bands: want 2 to 512", c->n_mels);
	if (c->n_ceps < 1 || c->n_ceps >= c->n_mels)
		return pcg_fail(err, "%d cepstra: want 1 to %d (bands - 1)", c->n_ceps, c->n_mels - 1);
	if (!(c->log_floor > 0))
		return pcg_fail(err, "log floor %g: want > 0", c->log_floor);
	return 0;
}

float *mcd_read(const char *path, size_t *n, int *rate, int *channels, pcg_err *err)
{
	SF_INFO info = { 0 };
	SNDFILE *sf;
	float *buf = NULL, *x;
	sf_count_t got;
	int fd = open(path, O_RDONLY);

	/* open(2) first for its errno: libsndfile says "System error" alone. */
	if (fd < 0) {
		pcg_fail(err, "%s: %s", path, strerror(errno));
		return NULL;
	}
	close(fd);
	if ((sf = sf_open(path, SFM_READ, &info)) == NULL) {
		pcg_fail(err, "%s: not an audio file libsndfile reads (%s)", path, sf_strerror(NULL));
		return NULL;
	}
	if (info.channels < 1 || info.samplerate < 1) {
		pcg_fail(err, "%s: %d channels at %d Hz", path, info.channels, info.samplerate);
		goto fail;
	}
	if (info.frames <= 0) {
		pcg_fail(err, "%s: no samples", path);
		goto fail;
	}
	if (info.frames > MCD_MAX_SAMPLES) {
		pcg_fail(err, "%s: %lld samples, more than %lld", path, (long long)info.frames,
			 (long long)MCD_MAX_SAMPLES);
		goto fail;
	}
	buf = malloc((size_t)info.frames * info.channels * sizeof *buf);
	if (buf == NULL) {
		pcg_fail(err, "%s: out of memory for %lld samples", path, (long long)info.frames);
		goto fail;
	}
	got = sf_readf_float(sf, buf, info.frames);
	if (got <= 0) {
		pcg_fail(err, "%s: no samples (%s)", path, sf_strerror(sf));
		goto fail;
	}
	/* Mixdown in place: the mean of the channels. */
	x = buf;
	if (info.channels > 1)
		for (sf_count_t t = 0; t < got; t++) {
			double s = 0;
			for (int ch = 0; ch < info.channels; ch++)
				s += buf[t * info.channels + ch];
			x[t] = (float)(s / info.channels);
		}
	sf_close(sf);
	*n = (size_t)got;
	*rate = info.samplerate;
	*channels = info.channels;
	return x;
fail:
	free(buf);
	sf_close(sf);
	return NULL;
}

static double hz_to_mel(double f) { return 2595.0 * log10(1.0 + f / 700.0); }
static double mel_to_hz(double m) { return 700.0 * (pow(10.0, m / 2595.0) - 1.0); }

/* HTK-mel triangles as librosa.filters.mel(htk=True, norm=None) builds
 * them: band i rises from edge i to edge i + 1 and falls to edge i + 2,
 * the n_mels + 2 edges equally spaced in mel from 0 to rate / 2.
 * w is (n_mels, nbins); edge has n_mels + 2 places. */
static void mel_bank(double *w, double *edge, int n_mels, int nbins, int n_fft, int rate)
{
	int ne = n_mels + 2;
	double top = hz_to_mel(rate / 2.0);

	for (int i = 0; i < ne; i++)
		edge[i] = mel_to_hz(top * i / (ne - 1));
	for (int i = 0; i < n_mels; i++)
		for (int k = 0; k < nbins; k++) {
			double f = (double)k * rate / n_fft;
			double lower = (f - edge[i]) / (edge[i + 1] - edge[i]);
			double upper = (edge[i + 2] - f) / (edge[i + 2] - edge[i + 1]);
			double v = lower < upper ? lower : upper;
			w[(size_t)i * nbins + k] = v > 0 ? v : 0;
		}
}

int mcd_cepstra(const float *x, size_t n, int rate, const mcd_config *c, double **cep,
		size_t *frames, pcg_err *err)
{
	int win, hop, n_fft = 2, nbins, M, D;
	size_t T;
	float *frame = NULL;
	fftwf_complex *spec = NULL;
	fftwf_plan plan = NULL;
	double *hann = NULL, *bank = NULL, *edge = NULL, *dct = NULL, *logmel = NULL, *out = NULL;
	int rc = -1;

	if (mcd_config_check(c, rate, err) < 0)
		return -1;
	if (n == 0)
		return pcg_fail(err, "no samples");
	win = win_len(c, rate);
	hop = hop_len(c, rate);
	while (n_fft < win)
		n_fft *= 2;
	nbins = n_fft / 2 + 1;
	M = c->n_mels;
	D = c->n_ceps;
	T = 1 + n / (size_t)hop;

	frame = fftwf_malloc((size_t)n_fft * sizeof *frame);
	spec = fftwf_malloc((size_t)nbins * sizeof *spec);
	hann = malloc((size_t)win * sizeof *hann);
	bank = malloc((size_t)M * nbins * sizeof *bank);
	edge = malloc((size_t)(M + 2) * sizeof *edge);
	dct = malloc((size_t)D * M * sizeof *dct);
	logmel = malloc((size_t)M * sizeof *logmel);
	out = malloc(T * D * sizeof *out);
	if (!frame || !spec || !hann || !bank || !edge || !dct || !logmel || !out) {
		pcg_fail(err, "out of memory for %zu frames", T);
		goto done;
	}
	plan = fftwf_plan_dft_r2c_1d(n_fft, frame, spec, FFTW_ESTIMATE);
	if (plan == NULL) {
		pcg_fail(err, "FFTW: no plan for a %d-point FFT", n_fft);
		goto done;
	}
	/* Periodic Hann (scipy's get_window("hann", win, fftbins=True)). */
	for (int i = 0; i < win; i++)
		hann[i] = 0.5 - 0.5 * cos(2 * M_PI * i / win);
	mel_bank(bank, edge, M, nbins, n_fft, rate);
	/* Orthonormal DCT-II rows 1 .. D (row 0, c0, is dropped). */
	for (int k = 1; k <= D; k++)
		for (int m = 0; m < M; m++)
			dct[(size_t)(k - 1) * M + m] =
				sqrt(2.0 / M) * cos(M_PI * k * (2 * m + 1) / (2.0 * M));

	for (size_t t = 0; t < T; t++) {
		/* Frame t is centred on sample t * hop: the window sits in the middle
		 * of n_fft samples starting at t * hop - n_fft / 2, as librosa pads
		 * it. Where it sits in the FFT buffer only changes the phase. */
		long long start = (long long)t * hop - n_fft / 2 + (n_fft - win) / 2;
		double *ct = out + t * D;

		memset(frame, 0, (size_t)n_fft * sizeof *frame);
		for (int i = 0; i < win; i++) {
			long long s = start + i;
			if (s >= 0 && s < (long long)n)
				frame[i] = (float)(hann[i] * x[s]);
		}
		fftwf_execute(plan);
		for (int m = 0; m < M; m++) {
			const double *w = bank + (size_t)m * nbins;
			double e = 0;
			for (int k = 0; k < nbins; k++) {
				double re = spec[k][0], im = spec[k][1];
				e += w[k] * (re * re + im * im);
			}
			logmel[m] = log(e > c->log_floor ? e : c->log_floor);
		}
		for (int d = 0; d < D; d++) {
			const double *row = dct + (size_t)d * M;
			double s = 0;
			for (int m = 0; m < M; m++)
				s += row[m] * logmel[m];
			ct[d] = s;
		}
	}
	*cep = out;
	*frames = T;
	out = NULL;
	rc = 0;
done:
	if (plan)
		fftwf_destroy_plan(plan);
	fftwf_free(frame);
	fftwf_free(spec);
	free(hann);
	free(bank);
	free(edge);
	free(dct);
	free(logmel);
	free(out);
	return rc;
}

static double dist(const double *a, const double *b, int dim)
{
	double s = 0;
	for (int d = 0; d < dim; d++) {
		double e = a[d] - b[d];
		s += e * e;
	}
	return sqrt(s);
}

int mcd_dtw(const double *a, size_t na, const double *b, size_t nb, int dim, double *mcd_db,
	    size_t *path_len, pcg_err *err)
{
	/* Two rows of the accumulated cost and of the length of the path that
	 * reaches each cell. Backtracking follows the same choices the forward
	 * pass made, so the length carried forward is the backtracked path's. */
	double *cost = NULL;
	size_t *len = NULL;
	double *prev, *cur;
	size_t *lprev, *lcur;

	if (na == 0 || nb == 0)
		return pcg_fail(err, "no frames to align");
	cost = malloc(2 * nb * sizeof *cost);
	len = malloc(2 * nb * sizeof *len);
	if (cost == NULL || len == NULL) {
		free(cost);
		free(len);
		return pcg_fail(err, "out of memory for DTW rows of %zu frames", nb);
	}
	prev = cost;
	cur = cost + nb;
	lprev = len;
	lcur = len + nb;
	for (size_t i = 0; i < na; i++) {
		const double *ai = a + i * dim;
		for (size_t j = 0; j < nb; j++) {
			double c = dist(ai, b + j * dim, dim), best = INFINITY;
			size_t l = 0;

			if (i == 0 && j == 0) {
				best = 0;
			} else {
				/* librosa's order, strict <: the first of equal costs wins. */
				if (i > 0 && j > 0 && prev[j - 1] < best) {
					best = prev[j - 1];
					l = lprev[j - 1];
				}
				if (j > 0 && cur[j - 1] < best) {
					best = cur[j - 1];
					l = lcur[j - 1];
				}
				if (i > 0 && prev[j] < best) {
					best = prev[j];
					l = lprev[j];
				}
			}
			cur[j] = best + c;
			lcur[j] = l + 1;
		}
		double *tc = prev;
		size_t *tl = lprev;
		prev = cur;
		cur = tc;
		lprev = lcur;
		lcur = tl;
	}
	/* prev holds the last row. */
	*path_len = lprev[nb - 1];
	*mcd_db = 10.0 / log(10.0) * sqrt(2.0) * prev[nb - 1] / (double)*path_len;
	free(cost);
	free(len);
	return 0;
}

int mcd_files(const char *path_a, const char *path_b, const mcd_config *c, mcd_result *r,
	      pcg_err *err)
{
	float *xa = NULL, *xb = NULL;
	double *ca = NULL, *cb = NULL;
	size_t na = 0, nb = 0;
	int rate_b = 0, rc = -1;

	memset(r, 0, sizeof *r);
	if ((xa = mcd_read(path_a, &na, &r->rate, &r->channels_a, err)) == NULL ||
	    (xb = mcd_read(path_b, &nb, &rate_b, &r->channels_b, err)) == NULL)
		goto done;
	if (r->rate != rate_b) {
		pcg_fail(err, "sample rates differ: %s is %d Hz, %s is %d Hz", path_a, r->rate,
			 path_b, rate_b);
		goto done;
	}
	if (mcd_cepstra(xa, na, r->rate, c, &ca, &r->frames_a, err) < 0) {
		pcg_err_prefix(err, path_a);
		goto done;
	}
	if (mcd_cepstra(xb, nb, rate_b, c, &cb, &r->frames_b, err) < 0) {
		pcg_err_prefix(err, path_b);
		goto done;
	}
	if (mcd_dtw(ca, r->frames_a, cb, r->frames_b, c->n_ceps, &r->mcd_db, &r->path_len, err) < 0)
		goto done;
	rc = 0;
done:
	free(xa);
	free(xb);
	free(ca);
	free(cb);
	return rc;
}
