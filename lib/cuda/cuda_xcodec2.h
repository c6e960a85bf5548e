/* xcodec2.h (cuda): the X-codec2 decoder of lib/codec/xcodec2.h on a CUDA device,
 * the same steps with the products through cuBLAS and the inverse FFT through
 * cuFFT. Built only with nvcc (PCG_CUDA); programs reach it through
 * --device cuda[:N] (lib/engine/device.h).
 *
 * The CPU model is the source of the weights and of the shared steps (the
 * check of codes, FSQ dequantisation): xc2_cuda_open copies its tensors to the
 * device once, matrices in their dtype (f32, f16, bf16) and vectors in f32.
 * The CPU model may be closed afterwards.
 *
 * Precision. f32 matrices: f32 products (CUBLAS_COMPUTE_32F, no TF32), so the
 * output is the CPU's up to summation order. f16 and bf16 matrices: the
 * activations are rounded to the matrix's dtype before each product (what
 * the tensor cores multiply) and accumulated in f32, where the CPU widens
 * the weights and keeps the activations in f32. tests/cuda/test_xcodec2.c
 * derives and checks both bounds.
 *
 * Threads: an xc2_cuda has one stream and the work buffers of one call; use
 * it from one thread at a time (one per thread for more).
 */
#ifndef PCG_CUDA_XCODEC2_H
#define PCG_CUDA_XCODEC2_H

#include <stdint.h>

#include "err.h"
/* lib/codec/xcodec2.h: a plain "xcodec2.h" would name this file. */
#include "../codec/xcodec2.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xc2_cuda xc2_cuda;

/* Copies the decoder m to CUDA device `device` (an ordinal, as
 * pcg_device_parse gives). NULL with err (prefixed "cuda:N") when the device
 * cannot be used or lacks the memory. */
xc2_cuda *xc2_cuda_open(const xc2_model *m, int device, pcg_err *err);
/* Frees the device copy; sets *g to NULL. NULL is fine. */
void xc2_cuda_close(xc2_cuda **g);

/* xc2_decode on the device: codes[0..T) into out[0 .. hop * T) (host
 * memory). Work memory is allocated on the device for the call and freed
 * before it returns, on every path. */
int xc2_cuda_decode(xc2_cuda *g, const int32_t *codes, int T, float *out, pcg_err *err);

/* xc2_features on the device: the backbone's output, [T, hidden] into feat. */
int xc2_cuda_features(xc2_cuda *g, const int32_t *codes, int T, float *feat, pcg_err *err);

/* Bytes of device memory the weights take. */
size_t xc2_cuda_weight_bytes(const xc2_cuda *g);

#ifdef __cplusplus
}
#endif

#endif
