/* dtype.h: element types of checkpoint tensors and their conversions to f32.
 *
 * bf16 is the top half of an IEEE f32; f16 is IEEE half precision. The
 * conversions here are exact (every bf16/f16 value is an f32 value).
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
	PCG_DTYPE_OTHER, /* a valid safetensors dtype the engine cannot compute with */
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

/* Bytes per element; 0 for PCG_DTYPE_OTHER. */
size_t pcg_dtype_size(pcg_dtype t);
const char *pcg_dtype_name(pcg_dtype t);

/* Converts n f32 values to f16 (round to nearest even). */
void pcg_f32_to_f16_n(uint16_t *dst, const float *src, size_t n);

/* Converts n elements of type t at src (any alignment) to f32 at dst. */
void pcg_to_f32(float *dst, const void *src, pcg_dtype t, size_t n);

#ifdef __cplusplus
}
#endif

#endif
