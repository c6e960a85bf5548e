/* dtype.h: element types of checkpoint tensors and their conversions to f32.
 *
 * bf16 is the top half of an IEEE f32; f16 is IEEE half precision. The
 * conversions here are exact (every bf16/f16 value is an f32 value).
 *
 * The block types are ggml's quantised formats, in its exact byte layouts
 * (lib/core/quant.h): a row of n elements is n / block elements stored as
 * n / block blocks of block_bytes each, so a GGUF file's tensors are used
 * in place. Their conversion to f32 is ggml's dequantisation.
 */
#ifndef PCG_DTYPE_H
#define PCG_DTYPE_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pcg_dtype {
	PCG_F32,
	PCG_F16,
	PCG_BF16,
	PCG_Q8_0, /* blocks of 32: f16 scale, 32 int8 */
	PCG_Q4_0, /* blocks of 32: f16 scale, 32 4-bit values - 8 */
	PCG_Q4_K, /* super-blocks of 256: 8 x 32 with 6-bit scales and mins */
	PCG_Q5_K, /* super-blocks of 256: as Q4_K with a fifth bit */
	PCG_Q6_K, /* super-blocks of 256: 16 x 16 with int8 scales */
	PCG_DTYPE_OTHER, /* a valid file dtype the engine cannot compute with */
} pcg_dtype;

static inline float pcg_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Round to nearest even, as torch does when it casts f32 to bf16. */
static inline uint16_t pcg_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float pcg_f16_to_f32(uint16_t h);
uint16_t pcg_f32_to_f16(float f);

/* Bytes per element of a float type; 0 for a block type and PCG_DTYPE_OTHER
 * (use pcg_dtype_row_bytes for those). */
size_t pcg_dtype_size(pcg_dtype t);
/* Elements per block: 1 for f32/f16/bf16, 32 or 256 for a block type, 0 for
 * PCG_DTYPE_OTHER. */
int pcg_dtype_block(pcg_dtype t);
/* Bytes per block (per element for a float type); 0 for PCG_DTYPE_OTHER. */
size_t pcg_dtype_block_bytes(pcg_dtype t);
/* Bytes of a row of n elements; 0 when n is not a multiple of the block. */
size_t pcg_dtype_row_bytes(pcg_dtype t, int64_t n);
/* 1 for the quantised block types. */
int pcg_dtype_is_quant(pcg_dtype t);
const char *pcg_dtype_name(pcg_dtype t);

/* Converts n f32 values to f16 (round to nearest even). */
void pcg_f32_to_f16_n(uint16_t *dst, const float *src, size_t n);

/* Converts n elements of type t at src (any alignment) to f32 at dst. For a
 * block type, src is the start of a block and n a multiple of the block
 * (lib/core/quant.h: pcg_dequantize). */
void pcg_to_f32(float *dst, const void *src, pcg_dtype t, size_t n);

#ifdef __cplusplus
}
#endif

#endif
