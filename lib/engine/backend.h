/* backend.h: the operations of the Llama forward pass, on the CPU or on a
 * GPU, behind one interface. lib/engine/model.c writes the forward pass once
 * against the functions below; each backend implements them as a table
 * (lib/engine/backend_impl.h): the CPU's is lib/engine/backend.c, CUDA's
 * lib/cuda/backend.cu. A backend is opened on a device (lib/engine/device.h).
 *
 * Pointers given to the operations are the backend's memory: host memory
 * for the CPU, device memory for a GPU (from pcg_backend_alloc). Activations
 * are f32 [rows, width] row-major; weights are pcg_mat in their checkpoint
 * dtype (on a GPU, copied to the device once by pcg_backend_upload_mat).
 * Every operation returns 0, or -1 with err; a CUDA failure names the file,
 * line and call. Operations on one backend are issued from one thread at a
 * time and run in order (CUDA: one stream); download waits for what came
 * before it.
 */
#ifndef PCG_BACKEND_H
#define PCG_BACKEND_H

#include <stddef.h>

#include "device.h"
#include "err.h"
#include "matmul.h"
#include "sampling.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcg_backend pcg_backend;

/* The backend of dev (checked with pcg_device_check first): the CPU's is
 * static and always there; a GPU's is created (CUDA: stream, cuBLAS
 * handle). Returns NULL with err when the device cannot be used. */
pcg_backend *pcg_backend_open(pcg_device dev, pcg_err *err);
/* Frees a GPU's backend (the CPU's stays); sets *be to NULL. NULL is fine. */
void pcg_backend_close(pcg_backend **be);

/* 1 when be's pointers are host memory (the CPU backend): callers that may
 * read or write them directly ask this. */
int pcg_backend_is_host(const pcg_backend *be);

/* Memory: alloc zeroes nothing; grow keeps the first keep bytes; free of
 * NULL does nothing. */
int pcg_backend_alloc(pcg_backend *be, void **p, size_t bytes, const char *what, pcg_err *err);
void pcg_backend_free(pcg_backend *be, void *p);
int pcg_backend_grow(pcg_backend *be, void **p, size_t keep, size_t bytes, const char *what,
		     pcg_err *err);
/* Host to backend, backend to host (waits for the work before it). */
int pcg_backend_upload(pcg_backend *be, void *dst, const void *src, size_t bytes,
		       pcg_err *err);
int pcg_backend_download(pcg_backend *be, void *dst, const void *src, size_t bytes,
			 pcg_err *err);

/* Uploads a weight matrix in its dtype: *dst describes the copy (for the
 * CPU backend, *dst = *src and nothing is copied). *owned gets the memory to
 * free with pcg_backend_free, or NULL. */
int pcg_backend_upload_mat(pcg_backend *be, pcg_mat *dst, const pcg_mat *src, void **owned,
			   const char *what, pcg_err *err);

/* x[t] = f32(E[tokens[t]]) for t < n; tokens in host memory, in range. */
int pcg_backend_embed(pcg_backend *be, float *x, const pcg_mat *E, const int *tokens, int n,
		      pcg_err *err);
/* out[t] = w * (x[t] * rsqrt(mean(x[t]^2) + eps)), rows of H, t < T. */
int pcg_backend_rmsnorm(pcg_backend *be, float *out, const float *x, const float *w, int T,
			int H, float eps, pcg_err *err);
/* y[b * ldy + r] = sum_k x[b * K + k] * W[r0 + r][k], b < B, r < nr. */
int pcg_backend_matmul(pcg_backend *be, float *y, int ldy, const float *x, int B,
		       const pcg_mat *W, int r0, int nr, pcg_err *err);
/* matmul where each row of x gets what it gets in a product of at most
 * PCG_MATMUL_SMALL rows, whatever B is: a batch of several sequences'
 * rows, each as alone (CPU: bit for bit, pcg_matmul_rows). */
int pcg_backend_matmul_rows(pcg_backend *be, float *y, int ldy, const float *x, int B,
			    const pcg_mat *W, int r0, int nr, pcg_err *err);
/* Rotate-half RoPE of T rows of n_heads heads (row stride n_heads * hd)
 * at positions pos0.., angles pos * inv_freq[i] (inv_freq: backend memory). */
int pcg_backend_rope(pcg_backend *be, float *x, int T, int n_heads, int hd, int pos0,
		     const float *inv_freq, pcg_err *err);
/* Causal grouped-query attention of T queries q [T, n_heads * hd] at
 * positions pos0.. over k, v [pos0 + T, n_kv_heads * hd] into out. */
int pcg_backend_attention(pcg_backend *be, float *out, const float *q, const float *k,
			  const float *v, int T, int pos0, int n_heads, int n_kv_heads, int hd,
			  pcg_err *err);
/* x[i] += y[i], i < n. */
int pcg_backend_add(pcg_backend *be, float *x, const float *y, size_t n, pcg_err *err);
/* g[i] = silu(g[i]) * u[i], i < n. */
int pcg_backend_swiglu(pcg_backend *be, float *g, const float *u, size_t n, pcg_err *err);
/* pcg_probs (lib/core/sampling.h) of each of rows rows of n logits into p (may
 * equal logits). */
int pcg_backend_probs(pcg_backend *be, float *p, const float *logits, int rows, int n,
		      const pcg_sampling *s, pcg_err *err);

/* The backend_open hooks of the device kinds (lib/engine/device.c's table), on
 * device index of the kind: the CPU's (lib/engine/backend.c) and, in a build with
 * CUDA, CUDA's (lib/cuda/backend.cu). Callers use pcg_backend_open. */
pcg_backend *pcg_cpu_backend_open(int index, pcg_err *err);
pcg_backend *pcg_cuda_backend_open(int index, pcg_err *err);

#ifdef __cplusplus
}
#endif

#endif
