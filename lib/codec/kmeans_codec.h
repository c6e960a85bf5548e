/* kmeans_codec.h: the "kmeans-gl" speech codec of the demo voice (codes ->
 * 16 kHz waveform). A code is the index of a k-means centroid of
 * log-magnitude STFT frames (50 frames a second: hop 320 at 16 kHz); decoding
 * looks up each code's centroid, takes exp() as the magnitude and recovers a
 * phase by Griffin-Lim (tools/voice/train_codec.py trains the centroids;
 * tests/ref/make_kmeans_fixtures.py is the numpy reference of this decoder).
 *
 * The decoder, exactly (F = n_fft / 2 + 1 bins, w = periodic Hann window of
 * n_fft, L = hop * T samples):
 *
 *   M[t, f]   = exp(centroids[codes[t], f])
 *   X[t, f]   = M[t, f] * exp(i * 2 pi * u(seed, t * F + f))    initial phase
 *   n_iter times:
 *     x = istft(X);  Y = stft(x);  X = M * Y / |Y|   (|Y| < 1e-12: X = M)
 *   out = istft(X)
 *
 *   istft (as torch.istft, center=True, length=L): frame t is
 *     irfft(X[t]) * w added at t * hop; divided by sum of w^2 over the frames;
 *     samples [n_fft / 2, n_fft / 2 + L) kept.
 *   stft (as torch.stft, center=True, zero padding): frame t is
 *     rfft(w * x[t * hop - n_fft / 2 ...]), t in [0, T).
 *   u(seed, i): splitmix64(seed + (i + 1) * 0x9E3779B97F4A7C15), top 24 bits
 *     / 2^24: a uniform in [0, 1) that numpy computes the same way.
 *
 * A model directory holds model.safetensors (tensor "centroids" [K, F],
 * F32, F16 or BF16) and config.json:
 *   {"codec": "kmeans-gl", "sample_rate": 16000, "n_fft": 1024, "hop": 320,
 *    "n_iter": 32, "seed": 0, "codebook_size": K}
 *
 * Threads: a model is read-only after kmc_open (FFTW plans are made there);
 * several threads may decode with it at once.
 */
#ifndef PCG_KMEANS_CODEC_H
#define PCG_KMEANS_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct kmc_config {
	int sample_rate;   /* 16000 */
	int n_fft;         /* even, 16 .. 8192 */
	int hop;           /* samples per code, 1 .. n_fft */
	int n_iter;        /* Griffin-Lim iterations, 0 .. 10000 */
	uint64_t seed;     /* of the initial phase */
	int codebook;      /* K, 1 .. 1 << 20 */
} kmc_config;

/* Reads config.json at path: every key above is required except seed
 * (default 0); "codec" must be "kmeans-gl". Errors name the key. */
int kmc_config_load(const char *path, kmc_config *c, pcg_err *err);

typedef struct kmc_model kmc_model;

/* Opens the codec: weights is model.safetensors or its directory, config
 * the config.json (NULL: config.json beside the weights). The centroids
 * must be [codebook, n_fft / 2 + 1]; the error names the tensor. */
kmc_model *kmc_open(const char *weights, const char *config, pcg_err *err);
void kmc_close(kmc_model **m);

const kmc_config *kmc_get_config(const kmc_model *m);

/* Decodes codes[0..T) into out[0 .. hop * T). Every code must be in
 * [0, codebook); the error names the first position that is not. */
int kmc_decode(const kmc_model *m, const int32_t *codes, int T, float *out, pcg_err *err);

/* The initial phase's uniform u(seed, i) (exposed for the tests). */
float kmc_uniform(uint64_t seed, uint64_t i);

#endif
