/* weights.h: the tensors of a checkpoint as the engines take them: checked
 * against the shape their config implies (an error names the tensor, the
 * shape it has and the one wanted), matrices used in place from the mapping
 * in their dtype, small vectors widened to f32. Copies (the vectors, a rare
 * misaligned f32 matrix) belong to the pcg_weights and go with it. */
#ifndef PCG_WEIGHTS_H
#define PCG_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "matmul.h"
#include "safetensors.h"

typedef struct pcg_weights {
	const st_ckpt *ck; /* borrowed */
	void **owned;
	int n_owned;
} pcg_weights;

/* Memory that lives as long as w (freed by wt_release). NULL when out of memory. */
void *wt_alloc(pcg_weights *w, size_t bytes);

/* The tensor name with shape {d0, d1, d2}; a trailing -1 means fewer
 * dimensions. Its dtype must be F32, F16 or BF16. */
const st_tensor *wt_need(const pcg_weights *w, const char *name, int64_t d0, int64_t d1,
			 int64_t d2, pcg_err *err);

/* A matrix [d0, d1 * d2] (d2: a convolution's kernel size, or -1) in place. */
int wt_mat(pcg_weights *w, pcg_mat *out, const char *name, int64_t d0, int64_t d1, int64_t d2,
	   pcg_err *err);

/* A vector of n values widened to f32 (owned by w). */
float *wt_vec(pcg_weights *w, const char *name, int64_t n, pcg_err *err);

/* Frees what w owns (not the checkpoint). */
void wt_release(pcg_weights *w);

#endif
