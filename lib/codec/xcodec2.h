/* xcodec2.h: the X-codec2 decoder (speech codes -> 16 kHz waveform) on the CPU,
 * computing what the original code computes (zhenye234/X-Codec-2.0
 * vq/codec_decoder_vocos.py and inference.py):
 *
 *   FSQ dequantisation -> project_out -> fc_post_a -> VocosBackbone (conv k7,
 *   2 ResNet blocks, N transformer blocks, 2 ResNet blocks, LayerNorm) ->
 *   ISTFT head (log-magnitude and phase, inverse real FFT, overlap-add).
 *
 * Weights come straight from the checkpoint users download
 * (HKUSTAudio/xcodec2 model.safetensors, keys generator.* and fc_post_a.*;
 * everything else in the file is ignored). Matrices stay in the mapping in
 * their dtype (f32, f16 or bf16); vectors are copied to f32.
 *
 * The decoder is not causal: GroupNorm statistics and attention span the
 * whole utterance, so xc2_decode() sees all codes at once.
 * xc2_decode_chunked() is the streaming approximation (left context).
 *
 * Threads: the products run on the OpenMP team of pcg_set_threads() (call it
 * first, as the programs do; it also makes OpenBLAS single-threaded inside
 * those threads). A model is read-only after xc2_open: several threads may
 * decode with it at once.
 */
#ifndef PCG_XCODEC2_H
#define PCG_XCODEC2_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "matmul.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XC2_MAX_LEVELS 16

/* The decoder's shape. Field names follow transformers' Xcodec2Config,
 * which is also the config.json key (hidden_size may be given as the
 * original repository's codec_decoder_hidden_size). */
typedef struct xc2_config {
	int hidden;       /* hidden_size: 1024 */
	int depth;        /* num_hidden_layers: transformer blocks, 12 */
	int heads;        /* num_attention_heads: 16 */
	int ffn;          /* intermediate_size: 4 * hidden */
	int vq_dim;       /* quantization_dim: 2048 */
	int n_levels;     /* len(quantization_levels): 8 */
	int levels[XC2_MAX_LEVELS]; /* quantization_levels: [4] * 8 */
	int hop;          /* product of downsampling_ratios: 320 samples per code */
	int sample_rate;  /* sampling_rate: 16000 */
} xc2_config;

/* GroupNorm groups of the ResNet blocks (fixed in the original code). */
#define XC2_GROUPS 32

/* The full-size decoder of HKUSTAudio/xcodec2. */
void xc2_config_default(xc2_config *c);

/* Reads a config.json: the full-size values, then every known key found in
 * the file (unknown keys are ignored, so the Hub's config.json reads as the
 * full-size decoder). A key of the wrong type or out of range, or a
 * model_type other than "xcodec2", is an error naming the key. */
int xc2_config_load(const char *path, xc2_config *c, pcg_err *err);

/* Checks the values of c (ranges, hidden divisible by heads and by
 * XC2_GROUPS, the codebook within int32). */
int xc2_config_check(const xc2_config *c, pcg_err *err);

/* Codebook size: the product of the levels (65,536 at full size). */
int64_t xc2_config_codebook(const xc2_config *c);

typedef struct xc2_model xc2_model;

/* Opens the decoder in weights (a .safetensors file, or a directory with
 * model.safetensors or an index and shards) with the shape c (NULL: full
 * size). Fails naming the tensor when one is missing, of another shape or
 * of a dtype other than F32, F16, BF16. */
xc2_model *xc2_open(const char *weights, const xc2_config *c, pcg_err *err);
void xc2_close(xc2_model **m);

const xc2_config *xc2_get_config(const xc2_model *m);
/* Bytes of the checkpoint mapped (all of it, encoder included). */
size_t xc2_mapped_bytes(const xc2_model *m);

/* The decoder's tensors as xc2_open loaded them, for another backend to
 * copy (lib/cuda/xcodec2.cu). Matrices are in their checkpoint dtype,
 * [rows, cols] row-major (a convolution's [out, in * k]); vectors are f32.
 * Shapes in the comments: C = hidden, N = n_fft = 4 * hop. The tensors live
 * as long as the model. */
typedef struct xc2_resblock {
	const float *norm1_w, *norm1_b; /* (C) */
	pcg_mat conv1;                  /* (C, C * 3) */
	const float *conv1_b;           /* (C) */
	const float *norm2_w, *norm2_b; /* (C) */
	pcg_mat conv2;                  /* (C, C * 3) */
	const float *conv2_b;           /* (C) */
} xc2_resblock;

typedef struct xc2_tblock {
	const float *att_norm; /* (C) */
	pcg_mat c_attn;        /* (3C, C): q, k, v, each heads x head_dim */
	pcg_mat c_proj;        /* (C, C) */
	const float *ffn_norm; /* (C) */
	pcg_mat fc1;           /* (ffn, C) */
	pcg_mat fc2;           /* (C, ffn) */
} xc2_tblock;

typedef struct xc2_tensors {
	pcg_mat project_out;            /* (vq_dim, n_levels) */
	const float *project_out_b;     /* (vq_dim) */
	pcg_mat fc_post_a;              /* (C, vq_dim) */
	const float *fc_post_a_b;       /* (C) */
	pcg_mat embed;                  /* (C, C * 7) */
	const float *embed_b;           /* (C) */
	xc2_resblock prior[2], post[2];
	xc2_tblock *tb;                 /* (depth) */
	const float *ln_w, *ln_b;       /* (C) */
	pcg_mat head;                   /* (N + 2, C) */
	const float *head_b;            /* (N + 2) */
	const float *window;            /* (N): periodic Hann, not in the checkpoint */
} xc2_tensors;

const xc2_tensors *xc2_get_tensors(const xc2_model *m);

/* 0 when codes[0..T) can be decoded in one call (T >= 1, n_fft * T within
 * an int, every code in [0, codebook)); else -1 with err naming the first
 * position out of range. Every decoder calls it first. */
int xc2_check_codes(const xc2_config *c, const int32_t *codes, int T, pcg_err *err);

/* The first step of every decoder, FSQ dequantisation of checked codes:
 * fsq[t * n_levels + j] = (digit_j(codes[t]) - levels[j] / 2) / (levels[j] / 2),
 * the input of project_out. */
void xc2_fsq(const xc2_config *c, const int32_t *codes, int T, float *fsq);

/* Decodes codes[0..T) into out[0 .. hop * T). Every code must be in
 * [0, codebook); the error names the first position that is not. */
int xc2_decode(const xc2_model *m, const int32_t *codes, int T, float *out, pcg_err *err);

/* The backbone's output for codes[0..T) (after the final LayerNorm, before
 * the head) into feat[0 .. T * hidden), row-major [T, hidden]: what the
 * parity fixtures store to tell a backbone error from a head error. */
int xc2_features(const xc2_model *m, const int32_t *codes, int T, float *feat, pcg_err *err);

/* The streaming approximation: codes in chunks of `chunk`, the first of
 * `first` and each next one twice the one before up to `chunk` when first
 * is 1 to chunk - 1 (lib/core/chunks.h: the chunks the pipeline streams;
 * first 0: all of `chunk`), each decoded together with up to `left` earlier
 * codes before it and up to `right` later ones after it; the audio of those
 * context codes is dropped and the chunks' audio is concatenated. A first
 * chunk that covers the utterance (or left and right covering everything)
 * gives exactly xc2_decode's output. */
int xc2_decode_chunked(const xc2_model *m, const int32_t *codes, int T, int chunk, int first,
		       int left, int right, float *out, pcg_err *err);

/* A whole-utterance decoder with xc2_decode's contract, on some backend. */
typedef int (*xc2_decoder)(void *ctx, const int32_t *codes, int T, float *out, pcg_err *err);

/* xc2_decode_chunked with each call made by dec(ctx, ...) for a decoder of
 * shape c (xc2_cuda_decode, say). */
int xc2_decode_chunked_with(const xc2_config *c, xc2_decoder dec, void *ctx,
			    const int32_t *codes, int T, int chunk, int first, int left, int right,
			    float *out, pcg_err *err);

#ifdef __cplusplus
}
#endif

#endif
