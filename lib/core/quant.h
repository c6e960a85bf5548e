/* quant.h: ggml's block-quantised weight formats (Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K) in their exact byte layouts, so that the tensors of a GGUF file are
 * used where they are mapped: their dequantisation (the reference for every
 * kernel: gguf-py's gguf.quants gives the same values), their quantisation
 * from f32 (pcg-quantize), and the activations' int8 form that the products
 * of lib/engine/matmul.c take.
 *
 * Layouts (all little-endian, f16 = IEEE half, no padding; x = element):
 *   Q8_0, 32 per block, 34 bytes:  d; qs[32]            x[i] = d * qs[i]
 *   Q4_0, 32 per block, 18 bytes:  d; qs[16]            x[i] = d * ((qs[i] & 15) - 8),
 *                                                       x[i + 16] = d * ((qs[i] >> 4) - 8)
 *   Q4_K, 256 per block, 144 bytes: d, dmin; scales[12]; qs[128]
 *        8 sub-blocks of 32, each with a 6-bit scale sc and min m packed in
 *        scales (get_scale_min below); for chunk j < 4 of 64 elements,
 *        x[64j + l]      = d * sc[2j]   * (qs[32j + l] & 15) - dmin * m[2j]
 *        x[64j + 32 + l] = d * sc[2j+1] * (qs[32j + l] >> 4) - dmin * m[2j+1]
 *   Q5_K, 256 per block, 176 bytes: d, dmin; scales[12]; qh[32]; qs[128]
 *        as Q4_K, with bit (2j) of qh[l] the fifth bit of x[64j + l] and
 *        bit (2j + 1) that of x[64j + 32 + l]
 *   Q6_K, 256 per block, 210 bytes: ql[128]; qh[64]; scales[16] (int8); d
 *        16 sub-blocks of 16, x[i] = d * scales[i / 16] * (q[i] - 32), q 6-bit;
 *        for half h < 2 (128 elements, ql + 64h, qh + 32h) and l < 32:
 *        q[128h + l]      = (ql[l] & 15)      | ((qh[l] >> 0) & 3) << 4
 *        q[128h + l + 32] = (ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4
 *        q[128h + l + 64] = (ql[l] >> 4)      | ((qh[l] >> 4) & 3) << 4
 *        q[128h + l + 96] = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4
 */
#ifndef PCG_QUANT_H
#define PCG_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PCG_QK 32   /* elements per Q8_0 / Q4_0 block */
#define PCG_QK_K 256 /* elements per K-quant super-block */

typedef struct { uint16_t d; int8_t qs[32]; } pcg_block_q8_0;
typedef struct { uint16_t d; uint8_t qs[16]; } pcg_block_q4_0;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } pcg_block_q4_k;
typedef struct {
	uint16_t d, dmin;
	uint8_t scales[12];
	uint8_t qh[32];
	uint8_t qs[128];
} pcg_block_q5_k;
typedef struct {
	uint8_t ql[128];
	uint8_t qh[64];
	int8_t scales[16];
	uint16_t d;
} pcg_block_q6_k;

_Static_assert(sizeof(pcg_block_q8_0) == 34, "Q8_0 layout");
_Static_assert(sizeof(pcg_block_q4_0) == 18, "Q4_0 layout");
_Static_assert(sizeof(pcg_block_q4_k) == 144, "Q4_K layout");
_Static_assert(sizeof(pcg_block_q5_k) == 176, "Q5_K layout");
_Static_assert(sizeof(pcg_block_q6_k) == 210, "Q6_K layout");

/* The 6-bit scale and min of sub-block j < 8 of a Q4_K/Q5_K block, as ggml
 * packs them: j < 4 in the low 6 bits of scales[j] and scales[j + 4]; j >= 4
 * in the nibbles of scales[j + 4] with their top 2 bits in the top bits of
 * scales[j - 4] and scales[j]. */
static inline void pcg_get_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
	}
}

/* n elements (a multiple of the block) of type t at src to f32 at dst. */
void pcg_dequantize(float *dst, const void *src, pcg_dtype t, size_t n);

/* n f32 values (a multiple of the block) to type t at dst, with ggml's
 * reference quantisers (quantize_row_*_ref): Q8_0 and Q4_0 give gguf-py's
 * gguf.quants bytes exactly. Returns 0, or -1 when t is not a block type. */
int pcg_quantize(void *dst, const float *src, pcg_dtype t, size_t n);

/* ggml's per-tensor type choice of llama.cpp's quantiser for a Llama model
 * and a file type: for "q4_k_m" the tensor name (GGUF names:
 * token_embd.weight, output.weight, blk.N.attn_q.weight, attn_k, attn_v,
 * attn_output, ffn_gate, ffn_up, ffn_down) with layer N of n_layers decides
 * Q4_K / Q6_K (attn_v and ffn_down of some layers, output.weight Q6_K);
 * "q8_0", "q4_0", "q6_k", "q5_k_m", "q5_k_s", "q4_k_s" likewise (any case).
 * cols is the row length (GGUF ne[0]): a K-quant needs a multiple of 256 and
 * falls back to Q8_0, a type needs a multiple of 32 or falls back to F16.
 * Norms, rope_freqs and names not ending in "weight" stay PCG_F32. A model
 * whose output shares token_embd (no output.weight) asks for its
 * token_embd as "output.weight", as llama.cpp does. Returns the type, or
 * PCG_DTYPE_OTHER for an unknown ftype name. */
pcg_dtype pcg_quant_choose(const char *ftype, const char *tensor, int layer, int n_layers,
			   int64_t cols);

#ifdef __cplusplus
}
#endif

#endif
