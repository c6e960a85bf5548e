/* weights.c: checkpoint tensors checked and taken for the engines (see
 * weights.h). Its prefix wt_ is short for the file's name: the engines'
 * loaders call it at every tensor. */
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *wt_alloc(pcg_weights *w, size_t bytes)
{
	void *p, **o = realloc(w->owned, (w->n_owned + 1) * sizeof *o);

	if (o == NULL)
		return NULL;
	w->owned = o;
	p = malloc(bytes ? bytes : 1);
	if (p != NULL)
		w->owned[w->n_owned++] = p;
	return p;
}

const st_tensor *wt_need(const pcg_weights *w, const char *name, int64_t d0, int64_t d1,
			 int64_t d2, pcg_err *err)
{
	const st_tensor *t = st_find(w->ck, name);
	const int64_t want[3] = { d0, d1, d2 };
	const int ndim = d1 < 0 ? 1 : d2 < 0 ? 2 : 3;
	char got[96] = "", exp[96] = "";
	int same = t != NULL && t->ndim == ndim;

	if (t == NULL)
		return pcg_fail(err, "tensor '%s' missing from the checkpoint", name), NULL;
	if (t->dtype == PCG_DTYPE_OTHER)
		return pcg_fail(err, "tensor '%s': dtype %s not supported (F32, F16, BF16)", name,
				t->dtype_name), NULL;
	for (int i = 0; i < ndim && same; i++)
		same = t->shape[i] == want[i];
	if (same)
		return t;
	for (int i = 0; i < t->ndim && i < 4; i++)
		snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
			 (long long)t->shape[i]);
	for (int i = 0; i < ndim; i++)
		snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", i ? ", " : "",
			 (long long)want[i]);
	pcg_fail(err, "tensor '%s': shape [%s], the config wants [%s]", name, got, exp);
	return NULL;
}

int wt_mat(pcg_weights *w, pcg_mat *out, const char *name, int64_t d0, int64_t d1, int64_t d2,
	   pcg_err *err)
{
	const st_tensor *t = wt_need(w, name, d0, d1, d2, err);

	if (t == NULL)
		return -1;
	out->data = t->data;
	out->dtype = t->dtype;
	out->rows = (int)d0;
	out->cols = (int)(d1 * (d2 > 0 ? d2 : 1));
	/* BLAS and the kernels read f32 as floats: copy the rare misaligned one. */
	if (t->dtype == PCG_F32 && ((uintptr_t)t->data & 3u) != 0) {
		void *p = wt_alloc(w, t->nbytes);
		if (p == NULL)
			return pcg_fail(err, "tensor '%s': out of memory", name);
		memcpy(p, t->data, t->nbytes);
		out->data = p;
	}
	return 0;
}

float *wt_vec(pcg_weights *w, const char *name, int64_t n, pcg_err *err)
{
	const st_tensor *t = wt_need(w, name, n, -1, -1, err);
	float *p;

	if (t == NULL)
		return NULL;
	p = wt_alloc(w, (size_t)n * sizeof *p);
	if (p == NULL) {
		pcg_fail(err, "tensor '%s': out of memory", name);
		return NULL;
	}
	pcg_to_f32(p, t->data, t->dtype, (size_t)n);
	return p;
}

void wt_release(pcg_weights *w)
{
	for (int i = 0; i < w->n_owned; i++)
		free(w->owned[i]);
	free(w->owned);
	w->owned = NULL;
	w->n_owned = 0;
}
