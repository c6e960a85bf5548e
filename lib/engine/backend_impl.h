/* backend_impl.h: what a backend of lib/engine/backend.h implements: the table of
 * its operations and the struct the wrappers of backend.h reach it
 * through. Included by the backends only (lib/engine/backend.c,
 * lib/cuda/backend.cu); everyone else calls backend.h, whose comments are
 * the contracts of the operations of the same names. A new backend fills a
 * pcg_backend_ops by name and returns a pcg_backend from its device kind's
 * backend_open hook (lib/engine/device.h).
 */
#ifndef PCG_BACKEND_IMPL_H
#define PCG_BACKEND_IMPL_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcg_backend_ops {
	int (*alloc)(pcg_backend *be, void **p, size_t bytes, const char *what, pcg_err *err);
	void (*free)(pcg_backend *be, void *p);
	int (*grow)(pcg_backend *be, void **p, size_t keep, size_t bytes, const char *what,
		    pcg_err *err);
	int (*upload)(pcg_backend *be, void *dst, const void *src, size_t bytes, pcg_err *err);
	int (*download)(pcg_backend *be, void *dst, const void *src, size_t bytes, pcg_err *err);
	int (*embed)(pcg_backend *be, float *x, const pcg_mat *E, const int *tokens, int n,
		     pcg_err *err);
	int (*rmsnorm)(pcg_backend *be, float *out, const float *x, const float *w, int T, int H,
		       float eps, pcg_err *err);
	int (*matmul)(pcg_backend *be, float *y, int ldy, const float *x, int B, const pcg_mat *W,
		      int r0, int nr, pcg_err *err);
	int (*matmul_rows)(pcg_backend *be, float *y, int ldy, const float *x, int B,
			   const pcg_mat *W, int r0, int nr, pcg_err *err);
	int (*rope)(pcg_backend *be, float *x, int T, int n_heads, int hd, int pos0,
		    const float *inv_freq, pcg_err *err);
	int (*attention)(pcg_backend *be, float *out, const float *q, const float *k,
			 const float *v, int T, int pos0, int n_heads, int n_kv_heads, int hd,
			 pcg_err *err);
	int (*add)(pcg_backend *be, float *x, const float *y, size_t n, pcg_err *err);
	int (*swiglu)(pcg_backend *be, float *g, const float *u, size_t n, pcg_err *err);
	int (*probs)(pcg_backend *be, float *p, const float *logits, int rows, int n,
		     const pcg_sampling *s, pcg_err *err);
	/* Frees be and what it holds (pcg_backend_close; the CPU's: nothing). */
	void (*close)(pcg_backend *be);
} pcg_backend_ops;

struct pcg_backend {
	const pcg_backend_ops *ops;
	int host;            /* 1: pointers are host memory (the CPU backend) */
	void *ctx;           /* the backend's own state */
};

#ifdef __cplusplus
}
#endif

#endif
