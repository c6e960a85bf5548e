/* xcodec2.cu: the X-codec2 decoder on a CUDA device, step for step as run()
 * in lib/codec/xcodec2.c (read the two side by side: the same step list, the same
 * comments, the same buffer names x, h, h2, big).
 *
 * Activations are [T, C] row-major in device memory, as on the CPU. cuBLAS
 * is column-major, where a row-major [R, K] matrix reads as its transpose
 * [K, R]; so the row-major y = x W^T (every linear layer, every convolution
 * after im2col) is the column-major y^T = W x^T: cublasGemmEx(OP_T, OP_N,
 * m = R, n = T, k = K, A = W (lda K), B = x (ldb K), C = y (ldc R)).
 * The two products of attention are strided-batched over the heads in the
 * same way (see attention()). Everything else is a small kernel of this file
 * with the CPU function's arithmetic: GroupNorm and LayerNorm statistics in
 * double, RMSNorm and softmax in float, expf/sinf/cosf of CUDA's accurate
 * library (no fast math). The head's inverse real FFT is one batched cuFFT
 * C2R plan over the T frames; cuFFT's inverse, like FFTW's, is
 * unnormalised, and the 1/N of irfft's norm="backward" is applied in the
 * overlap-add as the CPU applies it.
 *
 * Every CUDA, cuBLAS and cuFFT call is checked (cuda/check.h); device
 * memory comes from pcg_cuda_alloc, including cuBLAS's workspace and cuFFT's
 * work area. One stream per decoder: all work, copies included, is ordered
 * on it, and a call ends with a checked synchronisation.
 */
#include "cuda/cuda_xcodec2.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/check.h"
#include "cuda/reduce.cuh"
#include "cuda/rmsnorm.cuh"

#define THREADS 256                   /* per block, every kernel: a multiple of 32 */
#define MAX_BLOCKS (1u << 20)         /* elementwise kernels loop over the rest */
#define BLAS_WS_BYTES (32u << 20)     /* cuBLAS's recommended workspace on Hopper */
#define SCORES_BYTES ((size_t)512 << 20) /* attention scores of one batch of heads */

#define TRY(x) do { if ((x) < 0) return -1; } while (0)

struct xc2_cuda {
	xc2_config cfg;
	int device;
	int N;                    /* n_fft = 4 * hop */
	cudaStream_t stream;
	cublasHandle_t blas;
	void *blas_ws;            /* cuBLAS workspace (BLAS_WS_BYTES) */
	char *arena;              /* every weight, one allocation */
	size_t arena_bytes;       /* its size; while uploading, the bytes placed so far */
	xc2_tensors w;            /* the CPU's struct, pointers into arena (w.tb itself on the host) */
	int half;                 /* some matrix is f16 or bf16: the activations need a rounded copy */

	/* The work of one call, sized for T, NULL between calls. */
	float *fsq_host;          /* (T, n_levels), host */
	float *fsq;               /* (T, n_levels) */
	float *x, *h, *h2;        /* (T, C) */
	float *big;               /* (T, wide): im2col rows, q|k|v, the FFN, the head */
	void *xh;                 /* (T, wide) f16/bf16: the rounded input of a product */
	float *scores;            /* (hb, T, T) */
	int hb;                   /* heads per attention batch */
	float *stats;             /* (2, XC2_GROUPS): GroupNorm mean, 1/std */
	cufftComplex *spec;       /* (T, N/2 + 1) */
	float *frames;            /* (T, N) */
	float *wav;               /* (T * hop) */
	cufftHandle fft;          /* C2R of N points, batch T */
	int have_fft;
	void *fft_ws;             /* cuFFT work area */
};

/* ----------------------------------------------------------------- kernels */

static unsigned blocks(size_t n)
{
	const size_t b = (n + THREADS - 1) / THREADS;
	return b == 0 ? 1u : b < MAX_BLOCKS ? (unsigned)b : MAX_BLOCKS;
}

/* A grid-stride loop over [0, n). */
#define FOR_EACH(i, n) \
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
	     i += (size_t)gridDim.x * blockDim.x)

static __device__ float block_max(float v, float *sh)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	__syncthreads();
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	v = lane < (int)(blockDim.x >> 5) ? sh[lane] : -INFINITY;
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* x * sigmoid(x), as silu() of the CPU. */
static __device__ __forceinline__ float silu(float x)
{
	return x / (1.0f + expf(-x));
}

/* The input of a product rounded to the weights' dtype (to nearest even,
 * as torch casts). */
static __global__ void k_to_bf16(__nv_bfloat16 *y, const float *x, size_t n)
{
	FOR_EACH(i, n)
		y[i] = __float2bfloat16_rn(x[i]);
}

static __global__ void k_to_f16(__half *y, const float *x, size_t n)
{
	FOR_EACH(i, n)
		y[i] = __float2half_rn(x[i]);
}

/* y[t][r] += b[r] over n = T * R values. */
static __global__ void k_bias(float *y, const float *b, size_t n, int R)
{
	FOR_EACH(i, n)
		y[i] += b[i % R];
}

/* x += y */
static __global__ void k_add(float *x, const float *y, size_t n)
{
	FOR_EACH(i, n)
		x[i] += y[i];
}

static __global__ void k_silu(float *x, size_t n)
{
	FOR_EACH(i, n)
		x[i] = silu(x[i]);
}

/* conv1d's gather: col[t][i * k + j] = x[t + j - pad][i], 0 outside [0, T). */
static __global__ void k_im2col(float *col, const float *x, int T, int C, int k)
{
	const int pad = (k - 1) / 2;
	const size_t row = (size_t)C * k;

	FOR_EACH(e, (size_t)T * row) {
		const int t = (int)(e / row), r = (int)(e % row);
		const int i = r / k, j = r % k, s = t + j - pad;
		col[e] = s >= 0 && s < T ? x[(size_t)s * C + i] : 0.0f;
	}
}

/* GroupNorm statistics, one block per group: over its C/32 channels and all
 * T frames, sums in double, biased variance (as groupnorm_swish). */
static __global__ void k_gn_stats(float *mean, float *rstd, const float *x, int T, int C)
{
	__shared__ double sh[32];
	const int g = blockIdx.x, cg = C / XC2_GROUPS;
	const size_t n = (size_t)T * cg;
	double s = 0.0, q = 0.0;

	for (size_t e = threadIdx.x; e < n; e += blockDim.x) {
		const float v = x[(e / cg) * C + (size_t)g * cg + e % cg];
		s += v;
		q += (double)v * v;
	}
	s = block_sum(s, sh);
	q = block_sum(q, sh);
	if (threadIdx.x == 0) {
		const double mu = s / (double)n, var = q / (double)n - mu * mu;
		mean[g] = (float)mu;
		rstd[g] = (float)(1.0 / sqrt((var > 0 ? var : 0) + 1e-6));
	}
}

/* y = silu((x - mean) * rstd * w + b) with the statistics of each channel's group. */
static __global__ void k_gn_swish(float *y, const float *x, const float *mean, const float *rstd,
			   const float *w, const float *b, int T, int C)
{
	const int cg = C / XC2_GROUPS;

	FOR_EACH(e, (size_t)T * C) {
		const int i = (int)(e % C), g = i / cg;
		y[e] = silu((x[e] - mean[g]) * rstd[g] * w[i] + b[i]);
	}
}

/* LayerNorm(C, eps=1e-6) in place, one block per row, mean and biased
 * variance in double (two passes, as the CPU). Each thread writes only the
 * elements it read. */
static __global__ void k_layernorm(float *x, const float *w, const float *b, int C)
{
	__shared__ double sh[32];
	float *xt = x + (size_t)blockIdx.x * C;
	double s = 0.0, q = 0.0;

	for (int i = threadIdx.x; i < C; i += blockDim.x)
		s += xt[i];
	const double mu = block_sum(s, sh) / C;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		q += (xt[i] - mu) * (xt[i] - mu);
	q = block_sum(q, sh);
	const float mean = (float)mu, rstd = (float)(1.0 / sqrt(q / C + 1e-6));
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		xt[i] = (xt[i] - mean) * rstd * w[i] + b[i];
}

/* Each row of S (n wide), one block per row, becomes softmax(row). */
static __global__ void k_softmax(float *S, int n)
{
	__shared__ float sh[32];
	float *s = S + (size_t)blockIdx.x * n;
	float mx = -INFINITY, sum = 0.0f;

	for (int j = threadIdx.x; j < n; j += blockDim.x)
		mx = fmaxf(mx, s[j]);
	mx = block_max(mx, sh);
	for (int j = threadIdx.x; j < n; j += blockDim.x) {
		const float e = expf(s[j] - mx);              /* exp(s - max) */
		s[j] = e;
		sum += e;
	}
	sum = block_sum(sum, sh);
	const float inv = 1.0f / sum;
	for (int j = threadIdx.x; j < n; j += blockDim.x)
		s[j] *= inv;
}

/* The head's spectrum: p[t] = logmag [0, nb) | phase [nb, 2nb);
 * X = clip(exp(logmag), max=100) * (cos phase + i sin phase), the imaginary
 * parts of the DC and Nyquist bins zero (irfft ignores them). */
static __global__ void k_spectrum(cufftComplex *X, const float *p, int T, int N)
{
	const int nb = N / 2 + 1;

	FOR_EACH(e, (size_t)T * nb) {
		const size_t t = e / nb;
		const int k = (int)(e % nb);
		const float *pt = p + t * (N + 2);
		float mag = expf(pt[k]);
		mag = mag > 100.0f ? 100.0f : mag;
		const float ph = pt[nb + k];
		X[e].x = mag * cosf(ph);
		X[e].y = k == 0 || k == nb - 1 ? 0.0f : mag * sinf(ph);
	}
}

/* istft's fold: the frames (unnormalised inverse FFTs) times 1/N times the
 * window, overlap-added with hop, over the overlap-added squared window;
 * (N - hop) / 2 samples dropped per side. Output sample m is padded sample
 * s = m + pad, covered by the frames t with t * hop <= s < t * hop + N. */
static __global__ void k_overlap_add(float *out, const float *frames, const float *window, int T,
			      int hop)
{
	const int N = 4 * hop, pad = (N - hop) / 2;
	const float inv_n = 1.0f / (float)N;

	FOR_EACH(e, (size_t)hop * T) {
		const int s = (int)e + pad;
		const int t0 = s - N + 1 > 0 ? (s - N + 1 + hop - 1) / hop : 0;
		const int t1 = s / hop < T - 1 ? s / hop : T - 1;
		float y = 0.0f, env = 0.0f;
		for (int t = t0; t <= t1; t++) {
			const int n = s - t * hop;
			y += frames[(size_t)t * N + n] * inv_n * window[n];
			env += window[n] * window[n];
		}
		out[e] = y / env;                             /* y / window_envelope */
	}
}

/* ------------------------------------------------------------------ layers */

/* nn.Linear: y = x W^T + b for the T rows of x (b may be NULL). */
static int linear(xc2_cuda *g, float *y, const float *x, int T, const pcg_mat *W,
		  const float *b, pcg_err *err)
{
	const int R = W->rows, K = W->cols;
	const size_t n = (size_t)T * K;
	const float one = 1.0f, zero = 0.0f;
	cudaDataType_t type = CUDA_R_32F;
	const void *in = x;

	if (W->dtype == PCG_BF16) {
		k_to_bf16<<<blocks(n), THREADS, 0, g->stream>>>((__nv_bfloat16 *)g->xh, x, n);
		CU_LAUNCH(err);
		type = CUDA_R_16BF;
		in = g->xh;
	} else if (W->dtype == PCG_F16) {
		k_to_f16<<<blocks(n), THREADS, 0, g->stream>>>((__half *)g->xh, x, n);
		CU_LAUNCH(err);
		type = CUDA_R_16F;
		in = g->xh;
	}
	/* column-major y^T [R, T] = W [R, K] x^T [K, T] */
	CUBLAS_CHECK(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, R, T, K, &one, W->data, type, K,
				  in, type, K, &zero, y, CUDA_R_32F, R, CUBLAS_COMPUTE_32F,
				  CUBLAS_GEMM_DEFAULT), err);
	if (b != NULL) {
		k_bias<<<blocks((size_t)T * R), THREADS, 0, g->stream>>>(y, b, (size_t)T * R, R);
		CU_LAUNCH(err);
	}
	return 0;
}

/* nn.Conv1d(C, C, k, padding=(k-1)/2) over time: im2col into col, then
 * y = col W^T + b with W [C, C * k]. */
static int conv1d(xc2_cuda *g, float *y, const float *x, int T, int k, const pcg_mat *W,
		  const float *b, float *col, pcg_err *err)
{
	const int C = g->cfg.hidden;
	const size_t n = (size_t)T * C * k;

	k_im2col<<<blocks(n), THREADS, 0, g->stream>>>(col, x, T, C, k);
	CU_LAUNCH(err);
	return linear(g, y, col, T, W, b, err);
}

/* nonlinearity(GroupNorm(32, C, eps=1e-6)(x)) into y. */
static int groupnorm_swish(xc2_cuda *g, float *y, const float *x, int T, const float *w,
			   const float *b, pcg_err *err)
{
	const int C = g->cfg.hidden;
	float *mean = g->stats, *rstd = g->stats + XC2_GROUPS;

	k_gn_stats<<<XC2_GROUPS, THREADS, 0, g->stream>>>(mean, rstd, x, T, C);
	CU_LAUNCH(err);
	k_gn_swish<<<blocks((size_t)T * C), THREADS, 0, g->stream>>>(y, x, mean, rstd, w, b, T, C);
	CU_LAUNCH(err);
	return 0;
}

static int add(xc2_cuda *g, float *x, const float *y, size_t n, pcg_err *err)
{
	k_add<<<blocks(n), THREADS, 0, g->stream>>>(x, y, n);
	CU_LAUNCH(err);
	return 0;
}

/* ResnetBlock: h = conv2(swish(GN2(conv1(swish(GN1(x)))))); x = x + h. */
static int resblock(xc2_cuda *g, float *x, int T, const xc2_resblock *r, float *h, float *h2,
		    float *col, pcg_err *err)
{
	const int C = g->cfg.hidden;

	TRY(groupnorm_swish(g, h, x, T, r->norm1_w, r->norm1_b, err)); /* h = nonlinearity(norm1(x)) */
	TRY(conv1d(g, h2, h, T, 3, &r->conv1, r->conv1_b, col, err));  /* h = conv1(h) */
	TRY(groupnorm_swish(g, h, h2, T, r->norm2_w, r->norm2_b, err)); /* h = nonlinearity(norm2(h)) */
	TRY(conv1d(g, h2, h, T, 3, &r->conv2, r->conv2_b, col, err));   /* h = conv2(h) */
	return add(g, x, h2, (size_t)T * C, err);                      /* return x + h */
}

/* RMSNorm, one block per row: x * rsqrt(mean(x^2) + 1e-6) * w
 * (lib/cuda/rmsnorm.cuh). */
static int rmsnorm(xc2_cuda *g, float *y, const float *x, int T, const float *w, pcg_err *err)
{
	rmsnorm_kernel<<<T, THREADS, 0, g->stream>>>(y, x, w, g->cfg.hidden, 1e-6f);
	CU_LAUNCH(err);
	return 0;
}

/* scaled_dot_product_attention(q, k, v, is_causal=False) over all T frames;
 * qkv is [T, 3C] (q | k | v, each heads x d), out is [T, C]. Head h's q, k
 * and v are the [T, d] row-major blocks at qkv + h*d (+ C, + 2C) with row
 * stride 3C, which cuBLAS reads as [d, T] column-major: so
 * S^T [T, T] = K Q^T (OP_T, OP_N) is the row-major S = q k^T, and
 * y^T [d, T] = V^T S^T (OP_N, OP_N) is the row-major y = S v, written into
 * the head's d columns of out (ldc C). Batches of g->hb heads, the next
 * head d elements further (T * T in the scores). */
static int attention(xc2_cuda *g, float *out, const float *qkv, int T, pcg_err *err)
{
	const int C = g->cfg.hidden, H = g->cfg.heads, d = C / H;
	const float scale = 1.0f / sqrtf((float)d), one = 1.0f, zero = 0.0f;
	const long long TT = (long long)T * T;

	for (int h0 = 0; h0 < H; h0 += g->hb) {
		const int nh = H - h0 < g->hb ? H - h0 : g->hb;
		const float *q = qkv + (size_t)h0 * d, *k = q + C, *v = q + 2 * C;
		/* S = q k^T * scale */
		CUBLAS_CHECK(cublasSgemmStridedBatched(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, d,
						       &scale, k, 3 * C, d, q, 3 * C, d, &zero,
						       g->scores, T, TT, nh), err);
		k_softmax<<<nh * T, THREADS, 0, g->stream>>>(g->scores, T); /* over the keys */
		CU_LAUNCH(err);
		/* y = S v */
		CUBLAS_CHECK(cublasSgemmStridedBatched(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, d, T, T,
						       &one, v, 3 * C, d, g->scores, T, TT, &zero,
						       out + (size_t)h0 * d, C, d, nh), err);
	}
	return 0;
}

/* ISTFTHead with padding="same" on the head's output p [T, N + 2] into
 * g->wav: the spectrum, irfft(S, N) of every frame (one batched C2R), then
 * window, overlap-add, envelope and trim in k_overlap_add. */
static int istft(xc2_cuda *g, const float *p, int T, pcg_err *err)
{
	const int N = g->N, nb = N / 2 + 1;

	k_spectrum<<<blocks((size_t)T * nb), THREADS, 0, g->stream>>>(g->spec, p, T, N);
	CU_LAUNCH(err);
	CUFFT_CHECK(cufftExecC2R(g->fft, g->spec, g->frames), err); /* torch.fft.irfft(S, N) * N */
	k_overlap_add<<<blocks((size_t)g->cfg.hop * T), THREADS, 0, g->stream>>>(
		g->wav, g->frames, g->w.window, T, g->cfg.hop);
	CU_LAUNCH(err);
	return 0;
}

/* ------------------------------------------------------------------ decode */

/* The whole decoder, as run() in lib/codec/xcodec2.c; the backbone's output goes
 * to feat when not NULL, the waveform to out when not NULL (host memory).
 * The work buffers are g's (work_alloc). */
static int run(xc2_cuda *g, const int32_t *codes, int T, float *out, float *feat,
	       pcg_err *err)
{
	const xc2_config *c = &g->cfg;
	const xc2_tensors *w = &g->w;
	const int C = c->hidden, L = c->n_levels;
	const size_t TC = (size_t)T * C;
	float *x = g->x, *h = g->h, *h2 = g->h2, *big = g->big;

	/* (1) get_output_from_indices: FSQ codes (on the host), then project_out */
	xc2_fsq(c, codes, T, g->fsq_host);
	CU_CHECK(cudaMemcpyAsync(g->fsq, g->fsq_host, (size_t)T * L * sizeof *g->fsq,
				 cudaMemcpyHostToDevice, g->stream), err);
	TRY(linear(g, big, g->fsq, T, &w->project_out, w->project_out_b, err)); /* [T, vq_dim] */
	/* (2) vq_post_emb = fc_post_a(vq_post_emb) */
	TRY(linear(g, x, big, T, &w->fc_post_a, w->fc_post_a_b, err));          /* [T, C] */

	/* (3) VocosBackbone */
	CU_CHECK(cudaMemcpyAsync(h, x, TC * sizeof *h, cudaMemcpyDeviceToDevice, g->stream), err);
	TRY(conv1d(g, x, h, T, 7, &w->embed, w->embed_b, big, err));    /* x = self.embed(x) */
	for (int i = 0; i < 2; i++)                                     /* x = self.prior_net(x) */
		TRY(resblock(g, x, T, &w->prior[i], h, h2, big, err));
	for (int l = 0; l < c->depth; l++) {                            /* x = self.transformers(x) */
		const xc2_tblock *b = &w->tb[l];
		TRY(rmsnorm(g, h, x, T, b->att_norm, err));             /* att_norm(x) */
		TRY(linear(g, big, h, T, &b->c_attn, NULL, err));       /* q, k, v = c_attn(x) */
		TRY(attention(g, h, big, T, err));                      /* sdpa (RoPE: no effect) */
		TRY(linear(g, h2, h, T, &b->c_proj, NULL, err));        /* y = c_proj(y) */
		TRY(add(g, x, h2, TC, err));                            /* x = x + att(...) */
		TRY(rmsnorm(g, h, x, T, b->ffn_norm, err));             /* ffn_norm(x) */
		TRY(linear(g, big, h, T, &b->fc1, NULL, err));          /* fc1 */
		k_silu<<<blocks((size_t)T * c->ffn), THREADS, 0, g->stream>>>(big,
									 (size_t)T * c->ffn);
		CU_LAUNCH(err);                                         /* silu */
		TRY(linear(g, h2, big, T, &b->fc2, NULL, err));         /* fc2 */
		TRY(add(g, x, h2, TC, err));                            /* x = x + mlp(...) */
	}
	for (int i = 0; i < 2; i++)                                     /* x = self.post_net(x) */
		TRY(resblock(g, x, T, &w->post[i], h, h2, big, err));
	/* x = self.final_layer_norm(x): LayerNorm(C, eps=1e-6), biased variance */
	k_layernorm<<<T, THREADS, 0, g->stream>>>(x, w->ln_w, w->ln_b, C);
	CU_LAUNCH(err);

	if (feat != NULL)
		CU_CHECK(cudaMemcpyAsync(feat, x, TC * sizeof *x, cudaMemcpyDeviceToHost, g->stream),
			 err);

	/* (4) ISTFTHead: x_pred = self.out(x), then the inverse STFT */
	if (out != NULL) {
		TRY(linear(g, big, x, T, &w->head, w->head_b, err));    /* [T, N + 2] */
		TRY(istft(g, big, T, err));
		CU_CHECK(cudaMemcpyAsync(out, g->wav, (size_t)c->hop * T * sizeof *out,
					 cudaMemcpyDeviceToHost, g->stream), err);
	}
	CU_CHECK(cudaStreamSynchronize(g->stream), err);
	return 0;
}

/* cudaMalloc of n elements through pcg_cuda_alloc. */
template <typename E> static int dalloc(E **p, size_t n, const char *what, pcg_err *err)
{
	void *v = NULL;
	const int rc = pcg_cuda_alloc(&v, n * sizeof(E), what, err);

	*p = (E *)v;
	return rc;
}

/* The work buffers of a call on T codes (the head's only when head). On
 * failure some are allocated: work_free frees them. */
static int work_alloc(xc2_cuda *g, int T, int head, pcg_err *err)
{
	const xc2_config *c = &g->cfg;
	const int C = c->hidden, N = g->N, nb = N / 2 + 1;
	const size_t TC = (size_t)T * C, tt = (size_t)T * T * sizeof(float);
	/* the widest row: im2col (7C), the FFN, the head (N + 2), vq_dim, q|k|v (3C) */
	size_t wide = (size_t)7 * C;
	if ((size_t)c->ffn > wide) wide = c->ffn;
	if ((size_t)N + 2 > wide) wide = N + 2;
	if ((size_t)c->vq_dim > wide) wide = c->vq_dim;

	/* All heads in one batch when their scores fit SCORES_BYTES, else fewer. */
	g->hb = (size_t)c->heads * tt <= SCORES_BYTES ? c->heads
		: SCORES_BYTES / tt >= 1 ? (int)(SCORES_BYTES / tt) : 1;
	g->fsq_host = (float *)malloc((size_t)T * c->n_levels * sizeof *g->fsq_host);
	if (g->fsq_host == NULL)
		return pcg_fail(err, "out of memory decoding %d codes", T);
	TRY(dalloc(&g->fsq, (size_t)T * c->n_levels, "FSQ codes", err));
	TRY(dalloc(&g->x, TC, "activations", err));
	TRY(dalloc(&g->h, TC, "activations", err));
	TRY(dalloc(&g->h2, TC, "activations", err));
	TRY(dalloc(&g->big, (size_t)T * wide, "activations", err));
	if (g->half)
		TRY(pcg_cuda_alloc(&g->xh, (size_t)T * wide * 2, "rounded activations", err));
	TRY(dalloc(&g->scores, (size_t)g->hb * T * T, "attention scores", err));
	TRY(dalloc(&g->stats, 2 * XC2_GROUPS, "GroupNorm statistics", err));
	if (!head)
		return 0;
	TRY(dalloc(&g->spec, (size_t)T * nb, "spectra", err));
	TRY(dalloc(&g->frames, (size_t)T * N, "frames", err));
	TRY(dalloc(&g->wav, (size_t)T * c->hop, "waveform", err));

	/* T inverse real FFTs of N points: input rows of nb complex values,
	 * output rows of N reals (out of place: no padding), work area ours. */
	int n[1] = { N }, inembed[1] = { nb }, onembed[1] = { N };
	size_t ws = 0;
	CUFFT_CHECK(cufftCreate(&g->fft), err);
	g->have_fft = 1;
	CUFFT_CHECK(cufftSetAutoAllocation(g->fft, 0), err);
	CUFFT_CHECK(cufftMakePlanMany(g->fft, 1, n, inembed, 1, nb, onembed, 1, N, CUFFT_C2R, T,
				      &ws), err);
	TRY(pcg_cuda_alloc(&g->fft_ws, ws, "cuFFT work area", err));
	CUFFT_CHECK(cufftSetWorkArea(g->fft, g->fft_ws), err);
	CUFFT_CHECK(cufftSetStream(g->fft, g->stream), err);
	return 0;
}

/* Frees the work buffers after waiting for the stream (work queued before
 * a failure may still use them). A failure here is reported only when
 * nothing failed before (rc == 0): the first error is the one to read.
 * Returns rc, or -1. */
static int work_free(xc2_cuda *g, int rc, pcg_err *err)
{
	void *bufs[] = { g->fsq, g->x, g->h, g->h2, g->big, g->xh, g->scores, g->stats,
			 g->spec, g->frames, g->wav, g->fft_ws };
	cudaError_t e = cudaStreamSynchronize(g->stream);

	if (e != cudaSuccess && rc == 0)
		rc = pcg_fail(err, "%s:%d: cudaStreamSynchronize: %s", __FILE__, __LINE__,
			      cudaGetErrorString(e));
	if (g->have_fft) {
		const cufftResult r = cufftDestroy(g->fft);
		if (r != CUFFT_SUCCESS && rc == 0)
			rc = pcg_fail(err, "%s:%d: cufftDestroy: cuFFT error %d", __FILE__, __LINE__,
				      (int)r);
		g->have_fft = 0;
	}
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
		if (bufs[i] == NULL)
			continue;
		e = cudaFree(bufs[i]);
		if (e != cudaSuccess && rc == 0)
			rc = pcg_fail(err, "%s:%d: cudaFree: %s", __FILE__, __LINE__,
				      cudaGetErrorString(e));
	}
	free(g->fsq_host);
	g->fsq_host = NULL;
	g->fsq = g->x = g->h = g->h2 = g->big = g->scores = g->stats = g->frames = g->wav = NULL;
	g->xh = g->fft_ws = NULL;
	g->spec = NULL;
	return rc;
}

static int decode(xc2_cuda *g, const int32_t *codes, int T, float *out, float *feat,
		  pcg_err *err)
{
	int rc;

	if (xc2_check_codes(&g->cfg, codes, T, err) < 0)
		return -1;
	CU_CHECK(cudaSetDevice(g->device), err);
	rc = work_alloc(g, T, out != NULL, err);
	if (rc == 0)
		rc = run(g, codes, T, out, feat, err);
	return work_free(g, rc, err);
}

int xc2_cuda_decode(xc2_cuda *g, const int32_t *codes, int T, float *out, pcg_err *err)
{
	return decode(g, codes, T, out, NULL, err);
}

int xc2_cuda_features(xc2_cuda *g, const int32_t *codes, int T, float *feat, pcg_err *err)
{
	return decode(g, codes, T, NULL, feat, err);
}

/* ------------------------------------------------------------------ upload */

/* Places bytes of src in the arena: the first pass (no arena yet) only
 * counts, the second copies and gives the device address in *dst. Each
 * tensor starts 256-byte aligned, as cudaMalloc's would. */
static int put(xc2_cuda *g, const void **dst, const void *src, size_t bytes, pcg_err *err)
{
	const size_t at = g->arena_bytes;

	g->arena_bytes += (bytes + 255) / 256 * 256;
	if (g->arena == NULL)
		return 0;
	*dst = g->arena + at;
	CU_CHECK(cudaMemcpyAsync(g->arena + at, src, bytes, cudaMemcpyHostToDevice, g->stream),
		 err);
	return 0;
}

static int put_mat(xc2_cuda *g, pcg_mat *d, const pcg_mat *m, pcg_err *err)
{
	*d = *m;
	if (m->dtype != PCG_F32)
		g->half = 1;
	return put(g, &d->data, m->data, (size_t)m->rows * m->cols * pcg_dtype_size(m->dtype), err);
}

static int put_vec(xc2_cuda *g, const float **d, const float *v, int n, pcg_err *err)
{
	const void *p = NULL;

	TRY(put(g, &p, v, (size_t)n * sizeof *v, err));
	*d = (const float *)p;
	return 0;
}

static int put_resblock(xc2_cuda *g, xc2_resblock *d, const xc2_resblock *r, pcg_err *err)
{
	const int C = g->cfg.hidden;

	TRY(put_vec(g, &d->norm1_w, r->norm1_w, C, err));
	TRY(put_vec(g, &d->norm1_b, r->norm1_b, C, err));
	TRY(put_mat(g, &d->conv1, &r->conv1, err));
	TRY(put_vec(g, &d->conv1_b, r->conv1_b, C, err));
	TRY(put_vec(g, &d->norm2_w, r->norm2_w, C, err));
	TRY(put_vec(g, &d->norm2_b, r->norm2_b, C, err));
	TRY(put_mat(g, &d->conv2, &r->conv2, err));
	TRY(put_vec(g, &d->conv2_b, r->conv2_b, C, err));
	return 0;
}

/* Every tensor of t into g->w (one pass: see put). */
static int put_all(xc2_cuda *g, const xc2_tensors *t, pcg_err *err)
{
	const xc2_config *c = &g->cfg;
	const int C = c->hidden, N = g->N;
	xc2_tensors *d = &g->w;

	g->arena_bytes = 0;
	TRY(put_mat(g, &d->project_out, &t->project_out, err));
	TRY(put_vec(g, &d->project_out_b, t->project_out_b, c->vq_dim, err));
	TRY(put_mat(g, &d->fc_post_a, &t->fc_post_a, err));
	TRY(put_vec(g, &d->fc_post_a_b, t->fc_post_a_b, C, err));
	TRY(put_mat(g, &d->embed, &t->embed, err));
	TRY(put_vec(g, &d->embed_b, t->embed_b, C, err));
	for (int i = 0; i < 2; i++) {
		TRY(put_resblock(g, &d->prior[i], &t->prior[i], err));
		TRY(put_resblock(g, &d->post[i], &t->post[i], err));
	}
	for (int l = 0; l < c->depth; l++) {
		xc2_tblock *b = &d->tb[l];
		const xc2_tblock *s = &t->tb[l];
		TRY(put_vec(g, &b->att_norm, s->att_norm, C, err));
		TRY(put_mat(g, &b->c_attn, &s->c_attn, err));
		TRY(put_mat(g, &b->c_proj, &s->c_proj, err));
		TRY(put_vec(g, &b->ffn_norm, s->ffn_norm, C, err));
		TRY(put_mat(g, &b->fc1, &s->fc1, err));
		TRY(put_mat(g, &b->fc2, &s->fc2, err));
	}
	TRY(put_vec(g, &d->ln_w, t->ln_w, C, err));
	TRY(put_vec(g, &d->ln_b, t->ln_b, C, err));
	TRY(put_mat(g, &d->head, &t->head, err));
	TRY(put_vec(g, &d->head_b, t->head_b, N + 2, err));
	TRY(put_vec(g, &d->window, t->window, N, err));
	return 0;
}

static int setup(xc2_cuda *g, const xc2_tensors *t, pcg_err *err)
{
	const int depth = g->cfg.depth;
	void *arena = NULL;

	CU_CHECK(cudaSetDevice(g->device), err);
	CU_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), err);
	CUBLAS_CHECK(cublasCreate(&g->blas), err);
	CUBLAS_CHECK(cublasSetStream(g->blas, g->stream), err);
	/* After cublasSetStream, which puts cuBLAS back on its own workspace pool. */
	TRY(pcg_cuda_alloc(&g->blas_ws, BLAS_WS_BYTES, "cuBLAS workspace", err));
	CUBLAS_CHECK(cublasSetWorkspace(g->blas, g->blas_ws, BLAS_WS_BYTES), err);
	/* The default math mode: with CUBLAS_COMPUTE_32F and Sgemm, no TF32. */
	CUBLAS_CHECK(cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH), err);

	g->w.tb = (xc2_tblock *)calloc((size_t)(depth > 0 ? depth : 1), sizeof *g->w.tb);
	if (g->w.tb == NULL)
		return pcg_fail(err, "out of memory");
	TRY(put_all(g, t, err));                                   /* count */
	TRY(pcg_cuda_alloc(&arena, g->arena_bytes, "X-codec2 weights", err));
	g->arena = (char *)arena;
	TRY(put_all(g, t, err));                                   /* copy */
	CU_CHECK(cudaStreamSynchronize(g->stream), err);
	return 0;
}

xc2_cuda *xc2_cuda_open(const xc2_model *m, int device, pcg_err *err)
{
	xc2_cuda *g = (xc2_cuda *)calloc(1, sizeof *g);
	char name[32];

	if (g == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	g->cfg = *xc2_get_config(m);
	g->device = device;
	g->N = 4 * g->cfg.hop;
	if (device < 0) {
		pcg_fail(err, "cuda:%d: not a CUDA device", device);
		free(g);
		return NULL;
	}
	if (setup(g, xc2_get_tensors(m), err) < 0) {
		snprintf(name, sizeof name, "cuda:%d", device);
		pcg_err_prefix(err, name);
		xc2_cuda_close(&g);
		return NULL;
	}
	return g;
}

/* Nothing here can report a failure (no error buffer, and a broken context
 * was reported by the call that broke it): the results are ignored on
 * purpose, and the process's memory goes with the context at exit. */
void xc2_cuda_close(xc2_cuda **gp)
{
	xc2_cuda *g = gp ? *gp : NULL;
	pcg_err ignored;

	if (g == NULL)
		return;
	(void)cudaSetDevice(g->device);
	if (g->stream != NULL)
		(void)work_free(g, 0, &ignored);
	if (g->blas != NULL)
		(void)cublasDestroy(g->blas);
	if (g->blas_ws != NULL)
		(void)cudaFree(g->blas_ws);
	if (g->arena != NULL)
		(void)cudaFree(g->arena);
	if (g->stream != NULL)
		(void)cudaStreamDestroy(g->stream);
	free(g->w.tb);
	free(g);
	*gp = NULL;
	(void)cudaGetLastError(); /* leave no ignored error for the next check to find */
}

size_t xc2_cuda_weight_bytes(const xc2_cuda *g)
{
	return g->arena_bytes;
}
