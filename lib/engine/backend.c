/* backend.c: the CPU backend of the forward pass (host memory, OpenMP and
 * the matmul kernels of lib/engine/matmul.c), the opening of a device's backend,
 * and the wrappers through which callers reach any backend's table. Each
 * CPU operation is the transformers line it implements (modeling_llama.py). */
#include "backend_impl.h"

#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cpu_alloc(pcg_backend *be, void **p, size_t bytes, const char *what, pcg_err *err)
{
	(void)be;
	*p = malloc(bytes ? bytes : 1);
	if (*p == NULL)
		return pcg_fail(err, "%s: out of memory for %zu bytes", what, bytes);
	return 0;
}

static void cpu_free(pcg_backend *be, void *p)
{
	(void)be;
	free(p);
}

static int cpu_grow(pcg_backend *be, void **p, size_t keep, size_t bytes, const char *what,
		    pcg_err *err)
{
	(void)be;
	(void)keep; /* realloc keeps everything */
	void *q = realloc(*p, bytes ? bytes : 1);
	if (q == NULL)
		return pcg_fail(err, "%s: out of memory for %zu bytes", what, bytes);
	*p = q;
	return 0;
}

static int cpu_copy(pcg_backend *be, void *dst, const void *src, size_t bytes, pcg_err *err)
{
	(void)be;
	(void)err;
	if (dst != src)
		memcpy(dst, src, bytes);
	return 0;
}

/* inputs_embeds = embed_tokens(input_ids) */
static int cpu_embed(pcg_backend *be, float *x, const pcg_mat *E, const int *tokens, int n,
		     pcg_err *err)
{
	const size_t rb = pcg_dtype_row_bytes(E->dtype, E->cols);

	(void)be;
	(void)err;
	for (int t = 0; t < n; t++)
		pcg_to_f32(x + (size_t)t * E->cols,
			   (const unsigned char *)E->data + (size_t)tokens[t] * rb, E->dtype,
			   (size_t)E->cols);
	return 0;
}

/* LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) in f32, then * weight. */
static int cpu_rmsnorm(pcg_backend *be, float *out, const float *x, const float *w, int T,
		       int H, float eps, pcg_err *err)
{
	(void)be;
	(void)err;
	for (int t = 0; t < T; t++) {
		const float *xt = x + (size_t)t * H;
		float *ot = out + (size_t)t * H;
		float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
		for (int i = 0; i < H; i++)
			ss += xt[i] * xt[i];
		float r = 1.0f / sqrtf(ss / (float)H + eps);
		for (int i = 0; i < H; i++)
			ot[i] = w[i] * (xt[i] * r);
	}
	return 0;
}

static int cpu_matmul(pcg_backend *be, float *y, int ldy, const float *x, int B,
		      const pcg_mat *W, int r0, int nr, pcg_err *err)
{
	(void)be;
	(void)err;
	pcg_matmul(y, ldy, x, B, W, r0, nr);
	return 0;
}

static int cpu_matmul_rows(pcg_backend *be, float *y, int ldy, const float *x, int B,
			   const pcg_mat *W, int r0, int nr, pcg_err *err)
{
	(void)be;
	(void)err;
	pcg_matmul_rows(y, ldy, x, B, W, r0, nr);
	return 0;
}

/* apply_rotary_pos_emb with rotate_half: pairs (x[i], x[i + hd/2]). cos and
 * sin of pos * inv_freq in f32, as LlamaRotaryEmbedding. */
static int cpu_rope(pcg_backend *be, float *x, int T, int n_heads, int hd, int pos0,
		    const float *inv_freq, pcg_err *err)
{
	const int half = hd / 2;

	(void)be;
	(void)err;
	for (int t = 0; t < T; t++) {
		float *xt = x + (size_t)t * n_heads * hd;
		for (int i = 0; i < half; i++) {
			float a = (float)(pos0 + t) * inv_freq[i];
			float c = cosf(a), s = sinf(a);
			for (int h = 0; h < n_heads; h++) {
				float *v = xt + h * hd;
				float x1 = v[i], x2 = v[i + half];
				v[i] = x1 * c - x2 * s;
				v[i + half] = x2 * c + x1 * s;
			}
		}
	}
	return 0;
}

/* Causal attention of T queries at positions pos0.. over the cache, one
 * (query, kv head) pair per task, with the query heads that share the kv
 * head (repeat_kv: kv head = head / (n_heads / n_kv_heads)). scores =
 * q.k / sqrt(hd), softmax in f32, sum p * v: the kernel of the float family
 * in use (attention.h). */
/* Pair th of cpu_attention, with sc scratch of group (pos0 + T + 16) floats.
 * th runs over the kv heads, then the positions: the pairs that read one kv
 * head's K and V come one after another, so a block reads the cache once,
 * not once per position. */
static void attention_one(pcg_attend_fn *fn, float *out, const float *q, const float *k,
			  const float *v, int th, int T, int pos0, int nh, int nkv, int hd, int split,
			  float *sc)
{
	const int G = nh / nkv / split, kvh = th / (T * split), t = th % (T * split) / split;
	const size_t at = (size_t)t * nh * hd + ((size_t)kvh * split + th % split) * G * hd;

	fn(out + at, q + at, G, k + (size_t)kvh * hd, v + (size_t)kvh * hd, pos0 + t + 1, hd,
	   (size_t)nkv * hd, 1.0f / sqrtf((float)hd), sc);
}

static int cpu_attention(pcg_backend *be, float *out, const float *q, const float *k,
			 const float *v, int T, int pos0, int nh, int nkv, int hd, pcg_err *err)
{
	const int group = nh / nkv, threads = pcg_get_threads();
	int split = 1; /* a kv head's query heads split in parts when there are
			* fewer pairs than threads (each head's sums are the same) */
	while (split < group && group % (2 * split) == 0 && T * nkv * split < threads)
		split *= 2;
	const int tasks = T * nkv * split;
	const size_t scn = (size_t)(group / split) * ((size_t)pos0 + T + 16);
	pcg_attend_fn *fn = pcg_attend_kernel(hd);
	int failed = 0;

	(void)be;
	if (threads == 1) { /* no parallel region: even a team of one
				       * wakes futexes at its end, tens a step */
		float *sc = malloc(scn * sizeof *sc);
		for (int th = 0; sc != NULL && th < tasks; th++)
			attention_one(fn, out, q, k, v, th, T, pos0, nh, nkv, hd, split, sc);
		failed = sc == NULL;
		free(sc);
	} else {
#pragma omp parallel
		{
			float *sc = malloc(scn * sizeof *sc);
			if (sc == NULL) {
#pragma omp atomic write
				failed = 1;
			}
#pragma omp for schedule(static)
			for (int th = 0; th < tasks; th++)
				if (sc != NULL)
					attention_one(fn, out, q, k, v, th, T, pos0, nh, nkv, hd, split,
						      sc);
			free(sc);
		}
	}
	if (failed)
		return pcg_fail(err, "attention: out of memory for %d positions", pos0 + T);
	return 0;
}

static int cpu_add(pcg_backend *be, float *x, const float *y, size_t n, pcg_err *err)
{
	(void)be;
	(void)err;
	for (size_t i = 0; i < n; i++)
		x[i] += y[i];
	return 0;
}

/* LlamaMLP: act_fn(gate_proj(x)) * up_proj(x), act_fn = silu. */
static int cpu_swiglu(pcg_backend *be, float *g, const float *u, size_t n, pcg_err *err)
{
	(void)be;
	(void)err;
	for (size_t i = 0; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
	return 0;
}

static int cpu_probs(pcg_backend *be, float *p, const float *logits, int rows, int n,
		     const pcg_sampling *s, pcg_err *err)
{
	(void)be;
	for (int r = 0; r < rows; r++)
		if (pcg_probs(logits + (size_t)r * n, n, s, p + (size_t)r * n, err) < 0)
			return -1;
	return 0;
}

static void cpu_close(pcg_backend *be)
{
	(void)be; /* static: nothing to free */
}

/* By name: several ops share a signature (upload/download, add/swiglu),
 * so an order slip would compile and swap them. */
static const pcg_backend_ops cpu_ops = {
	.alloc = cpu_alloc, .free = cpu_free, .grow = cpu_grow,
	.upload = cpu_copy, .download = cpu_copy,
	.embed = cpu_embed, .rmsnorm = cpu_rmsnorm, .matmul = cpu_matmul,
	.matmul_rows = cpu_matmul_rows, .rope = cpu_rope, .attention = cpu_attention,
	.add = cpu_add, .swiglu = cpu_swiglu, .probs = cpu_probs, .close = cpu_close,
};

static pcg_backend cpu_backend = { &cpu_ops, 1, NULL };

pcg_backend *pcg_cpu_backend_open(int index, pcg_err *err)
{
	(void)index; /* one CPU */
	(void)err;
	return &cpu_backend;
}

/* ------------------------------------------------------- any backend */

pcg_backend *pcg_backend_open(pcg_device dev, pcg_err *err)
{
	char name[48];

	if (pcg_device_check(dev, err) < 0)
		return NULL;
	if (dev.kind->backend_open == NULL) {
		pcg_fail(err, "device %s: no backend for the forward pass there",
			 pcg_device_name(dev, name, sizeof name));
		return NULL;
	}
	return dev.kind->backend_open(dev.index, err);
}

void pcg_backend_close(pcg_backend **bep)
{
	pcg_backend *be = bep ? *bep : NULL;

	if (be == NULL)
		return;
	be->ops->close(be);
	*bep = NULL;
}

int pcg_backend_is_host(const pcg_backend *be) { return be->host; }

int pcg_backend_upload_mat(pcg_backend *be, pcg_mat *dst, const pcg_mat *src, void **owned,
			   const char *what, pcg_err *err)
{
	size_t bytes = (size_t)src->rows * pcg_dtype_row_bytes(src->dtype, src->cols);
	void *p;

	*owned = NULL;
	*dst = *src;
	if (pcg_backend_is_host(be))
		return 0;
	if (pcg_dtype_is_quant(src->dtype))
		return pcg_fail(err, "%s: %s weights run on the CPU only (--device cpu), or "
				"use the safetensors checkpoint on a GPU", what,
				pcg_dtype_name(src->dtype));
	if (pcg_backend_alloc(be, &p, bytes, what, err) < 0)
		return -1;
	if (pcg_backend_upload(be, p, src->data, bytes, err) < 0) {
		pcg_backend_free(be, p);
		return -1;
	}
	dst->data = p;
	*owned = p;
	return 0;
}

/* The operations, each the backend's own (contracts: backend.h). */
int pcg_backend_alloc(pcg_backend *be, void **p, size_t bytes, const char *what, pcg_err *err)
{
	return be->ops->alloc(be, p, bytes, what, err);
}

void pcg_backend_free(pcg_backend *be, void *p) { be->ops->free(be, p); }

int pcg_backend_grow(pcg_backend *be, void **p, size_t keep, size_t bytes, const char *what,
		     pcg_err *err)
{
	return be->ops->grow(be, p, keep, bytes, what, err);
}

int pcg_backend_upload(pcg_backend *be, void *dst, const void *src, size_t bytes, pcg_err *err)
{
	return be->ops->upload(be, dst, src, bytes, err);
}

int pcg_backend_download(pcg_backend *be, void *dst, const void *src, size_t bytes,
			 pcg_err *err)
{
	return be->ops->download(be, dst, src, bytes, err);
}

int pcg_backend_embed(pcg_backend *be, float *x, const pcg_mat *E, const int *tokens, int n,
		      pcg_err *err)
{
	return be->ops->embed(be, x, E, tokens, n, err);
}

int pcg_backend_rmsnorm(pcg_backend *be, float *out, const float *x, const float *w, int T,
			int H, float eps, pcg_err *err)
{
	return be->ops->rmsnorm(be, out, x, w, T, H, eps, err);
}

int pcg_backend_matmul(pcg_backend *be, float *y, int ldy, const float *x, int B,
		       const pcg_mat *W, int r0, int nr, pcg_err *err)
{
	return be->ops->matmul(be, y, ldy, x, B, W, r0, nr, err);
}

int pcg_backend_matmul_rows(pcg_backend *be, float *y, int ldy, const float *x, int B,
			    const pcg_mat *W, int r0, int nr, pcg_err *err)
{
	return be->ops->matmul_rows(be, y, ldy, x, B, W, r0, nr, err);
}

int pcg_backend_rope(pcg_backend *be, float *x, int T, int n_heads, int hd, int pos0,
		     const float *inv_freq, pcg_err *err)
{
	return be->ops->rope(be, x, T, n_heads, hd, pos0, inv_freq, err);
}

int pcg_backend_attention(pcg_backend *be, float *out, const float *q, const float *k,
			  const float *v, int T, int pos0, int n_heads, int n_kv_heads, int hd,
			  pcg_err *err)
{
	return be->ops->attention(be, out, q, k, v, T, pos0, n_heads, n_kv_heads, hd, err);
}

int pcg_backend_add(pcg_backend *be, float *x, const float *y, size_t n, pcg_err *err)
{
	return be->ops->add(be, x, y, n, err);
}

int pcg_backend_swiglu(pcg_backend *be, float *g, const float *u, size_t n, pcg_err *err)
{
	return be->ops->swiglu(be, g, u, n, err);
}

int pcg_backend_probs(pcg_backend *be, float *p, const float *logits, int rows, int n,
		      const pcg_sampling *s, pcg_err *err)
{
	return be->ops->probs(be, p, logits, rows, n, s, err);
}
