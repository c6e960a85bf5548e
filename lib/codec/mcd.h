/* mcd.h: mel-cepstral distortion after dynamic time warping (MCD-DTW)
 * between two recordings, the distance the evaluation tools report.
 *
 * The recipe (defaults in mcd_config_default; librosa configured the same
 * way is the reference, tests/ref/make_mcd_fixtures.py):
 *
 *   audio      mono (channels averaged), floats in [-1, 1] as libsndfile
 *              reads them; both files at the same rate
 *   frames     25 ms periodic Hann window, hop 5 ms, centred: frame t is
 *              centred on sample t * hop, zeros beyond the ends, so a
 *              recording of n samples has 1 + n / hop frames (librosa's
 *              stft with center=True, pad_mode="constant")
 *   spectrum   |FFT|^2 (FFTW, single precision), n_fft the power of two at
 *              or above the window length (512 at 16 kHz)
 *   mel        40 triangular HTK-mel bands from 0 Hz to rate / 2, peak 1,
 *              no area normalisation (librosa.filters.mel htk=True norm=None)
 *   log        natural log of the band power, floored at 1e-10
 *   cepstrum   orthonormal DCT-II (scipy norm="ortho"), c0 dropped,
 *              c1 .. c24 kept
 *   DTW        steps (1,1), (0,1), (1,0), weight 1 each, the local cost the
 *              Euclidean distance of the cepstra; both ends aligned; ties go
 *              to the diagonal, then (0,1), then (1,0) (librosa's order)
 *   MCD        (10 / ln 10) * sqrt(2 * sum_d (c_d - c'_d)^2) averaged over
 *              the frame pairs of the path, in dB
 *
 * No silence is removed: every frame counts, and the leading and trailing
 * silence of each file is aligned by the DTW like any other frame.
 */
#ifndef PCG_MCD_H
#define PCG_MCD_H

#include <stddef.h>

#include "err.h"

typedef struct mcd_config {
	double frame_ms;  /* window length (25) */
	double hop_ms;    /* frame step (5) */
	int n_mels;       /* mel bands (40) */
	int n_ceps;       /* cepstra kept after c0 is dropped (24: c1 .. c24) */
	double log_floor; /* band power floor before the log (1e-10) */
} mcd_config;

typedef struct mcd_result {
	double mcd_db;         /* the distortion, dB */
	size_t frames_a;       /* frames of each file */
	size_t frames_b;
	size_t path_len;       /* frame pairs on the DTW path */
	int rate;              /* the common sample rate */
	int channels_a;        /* channels before the mixdown */
	int channels_b;
} mcd_result;

/* The recipe above. */
void mcd_config_default(mcd_config *c);

/* Checks c for sample rate rate (window of at least 2 samples, hop of at
 * least 1, bands and cepstra in range). Returns 0 or -1 with err. */
int mcd_config_check(const mcd_config *c, int rate, pcg_err *err);

/* Reads an audio file (anything libsndfile reads) and mixes it to mono.
 * Returns the samples (malloc, the caller frees) and sets *n, *rate and
 * *channels, or NULL with err naming the path (unreadable, not audio, no
 * samples). */
float *mcd_read(const char *path, size_t *n, int *rate, int *channels, pcg_err *err);

/* The cepstra of x (n > 0 samples at rate): *frames rows of c->n_ceps
 * doubles, row t for frame t (malloc, the caller frees). Returns 0 or -1
 * with err. */
int mcd_cepstra(const float *x, size_t n, int rate, const mcd_config *c, double **cep,
		size_t *frames, pcg_err *err);

/* DTW of a (na rows) against b (nb rows), dim doubles a row, as above.
 * Sets *mcd_db and *path_len. Memory is O(nb), time O(na * nb * dim).
 * Returns 0 or -1 with err (no frames, out of memory). */
int mcd_dtw(const double *a, size_t na, const double *b, size_t nb, int dim, double *mcd_db,
	    size_t *path_len, pcg_err *err);

/* The whole recipe on two files. Returns 0 or -1 with err naming the file
 * (or both rates when they differ). */
int mcd_files(const char *path_a, const char *path_b, const mcd_config *c, mcd_result *r,
	      pcg_err *err);

#endif
