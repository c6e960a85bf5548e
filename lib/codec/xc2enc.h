/* xc2enc.h: the X-codec2 encoder, 16 kHz speech to codes, as the original
 * inference.py runs it (../shared/research/llasa-xcodec2.md section 3):
 *
 *   wav, padded right to a multiple of 320 plus one frame (T codes)
 *   semantic: SeamlessM4T log-mel features (80 bins, stacked by 2: 160 at
 *     50 Hz) of the wav padded by 160 each side -> Wav2Vec2Bert's first 16
 *     Conformer layers (hidden_states[16]) -> SemanticEncoder (3 convs)
 *   acoustic: CodecEnc (BigCodec: weight-normed convs, 5 strided blocks of
 *     anti-aliased SnakeBeta residual units, hop 320)
 *   cat(semantic, acoustic) -> fc_prior -> the quantizer's project_in ->
 *     FSQ levels [4]*8, bounded twice (vector-quantize-pytorch 1.17.8's
 *     ResidualFSQ) and rounded -> one code in [0, 65536) per 20 ms.
 *
 * Weights: the encoder half of HKUSTAudio/xcodec2's model.safetensors
 * (semantic_model.*, SemanticEncoder_module.*, CodecEnc.*, fc_prior.*,
 * generator.quantizer.project_in.*), the same file codec-decode reads. The
 * Wav2Vec2Bert layers after the 16th are never read. All arithmetic is f32
 * (the front end's FFT and mel sums in double, as numpy runs them).
 */
#ifndef PCG_XC2ENC_H
#define PCG_XC2ENC_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"

#define XC2E_RATE 16000
#define XC2E_HOP 320
#define XC2E_LAYER 16     /* hidden_states[16]: the layers run */
#define XC2E_FEAT 160     /* 80 mel bins x 2 frames */

typedef struct xc2e_model xc2e_model;

/* Shapes read from the checkpoint. */
typedef struct xc2e_info {
	int hidden;      /* Wav2Vec2Bert width (1024) */
	int heads;       /* its attention heads (16) */
	int ffn;         /* its feed-forward width (4096) */
	int layers;      /* layers run: min(16, present) */
	int ngf;         /* CodecEnc's first width (48) */
	int codec_dim;   /* CodecEnc's output width (1024) */
	int prior_dim;   /* fc_prior's width (2048) */
	int levels;      /* FSQ digits (8), each of 4 levels */
	size_t params;   /* parameters read */
	size_t bf16_bytes; /* the Conformer's matrices held as bf16 (0: all f32) */
} xc2e_info;

/* Opens PATH: a directory holding model.safetensors, or the file. All in f32
 * (the parity mode). */
xc2e_model *xc2e_open(const char *path, pcg_err *err);
/* The same with the Conformer's matrices (the bulk: 16 x 25 M parameters at
 * full size) kept in wdtype: PCG_F32, or PCG_BF16 (rounded to nearest even:
 * half the memory; products in f32 on widened tiles, lib/engine/matmul.c). */
xc2e_model *xc2e_open_dtype(const char *path, pcg_dtype wdtype, pcg_err *err);
void xc2e_close(xc2e_model **m);
const xc2e_info *xc2e_get_info(const xc2e_model *m);

/* Codes of n samples for n samples of 16 kHz mono in [-1, 1]: T =
 * n / 320 + 1 of them. */
int xc2e_n_codes(size_t n);

/* Each stage's output, for tests and diagnostics: any pointer may be NULL;
 * the caller's arrays hold T rows of the stated width. */
typedef struct xc2e_stages {
	float *features;  /* [T][160] */
	float *hidden;    /* [T][hidden]: Wav2Vec2Bert's hidden_states[16] */
	float *semantic;  /* [T][codec_dim] */
	float *acoustic;  /* [T][codec_dim] */
	float *prior;     /* [T][prior_dim] */
	float *prequant;  /* [T][levels]: project_in's output, before the bounds */
	double seconds[3]; /* out: wall time of the features, the semantic and
			    * the acoustic branch */
} xc2e_stages;

/* Encodes wav[0..n) into codes[T] (T = xc2e_n_codes(n)); st may be NULL
 * (not const: its seconds are filled).
 * Returns 0, or -1 with err (out of memory, a prompt of no samples). */
int xc2e_encode(xc2e_model *m, const float *wav, size_t n, int32_t *codes, xc2e_stages *st,
		pcg_err *err);

/* The front end alone: the SeamlessM4T features [T][160] of wav[0..n)
 * (the padding as xc2e_encode does it). */
int xc2e_features(const float *wav, size_t n, float *feat, pcg_err *err);

/* One FSQ digit of 4 levels: the value project_in gives, bounded twice,
 * rounded half to even: -2..1. */
int xc2e_fsq_digit(float z);

#endif
