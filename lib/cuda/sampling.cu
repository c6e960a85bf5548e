/* sampling.cu: pcg_cuda_probs, the tempered / top-k / top-p softmax of
 * sampling.c on the device, one thread block per row.
 *
 * A block reads its row once per pass (256 KiB at 65,537 logits, which stay
 * in L2) and writes it only in the last pass, so probs may be the logits:
 *   1. the first NaN or +inf, the first argmax, all -inf: pcg_probs's first
 *      loop; then x = logit / T, recomputed in every pass (IEEE f32
 *      division, as on the CPU: the keys and the ties are the CPU's bits);
 *   2. top-k: the k-th largest order key (sampling.c's order_key) by radix
 *      select, 4 bits per pass, 8 passes, counting the tokens per digit;
 *   3. top-p: the same radix walk over the mass exp(x - max) (in double, as
 *      the CPU) of the tokens top-k kept: the smallest key K such that the
 *      tokens with keys <= K carry more than (1 - top_p) of the total. Keys
 *      below K are removed, above K kept; of the tokens at K, the CPU's
 *      stable ascending sort meets the lowest indices first, so it removes
 *      the r of lowest index for the largest r whose mass still stays at or
 *      under the cut, and never the last one (the CPU keeps the most likely);
 *   4. softmax: expf(x - max) in f32, the sum in double, then the write.
 * Histograms: each thread adds into its own column of a 16 x THREADS array
 * of doubles in shared memory, and the columns are then summed in a fixed
 * order: no atomics (no contention when most tokens share a digit) and the
 * same sums, so the same kept set, on every run. Counts are doubles too
 * (exact below 2^53), so one routine serves both searches. Reductions go
 * through shared memory with a barrier per level; every barrier is reached
 * by all threads of the block (the branches around them depend only on
 * shared values or on the launch). */
#include "cuda/cuda_sampling.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda/check.h"

#define THREADS 512             /* per block; one block per row */
#define DIGIT 4                 /* key bits decided per radix pass */
#define BINS (1 << DIGIT)
#define LANES (THREADS / BINS)  /* threads summing the columns of one bin */
#define COLUMNS_BYTES (BINS * THREADS * sizeof(double))
#define MAX_N (1 << 28)         /* keeps i + THREADS and the copy pitch in range */
#define STATUS_ROWS 256         /* rows of status read back per copy */

static_assert(LANES * BINS == THREADS && THREADS % LANES == 0, "bins x lanes = threads");

/* A failed row says why in its first two floats of probs, which the host
 * reads back: -ROW_* and the bits of the index. A row that succeeds starts
 * with a probability, >= 0. */
enum { ROW_NAN = 1, ROW_INF = 2, ROW_ALL_NEG_INF = 3 };

/* What a block shares; the decisions are written by thread 0 between
 * barriers. */
struct row_shared {
	union {
		struct {
			int bad[THREADS];
			float value[THREADS];
			int index[THREADS];
		} first;
		double sum[THREADS];
		int count[THREADS];
	} red;
	double part[BINS][LANES];   /* each bin's columns, summed LANES ways */
	double bin[BINS];           /* the histogram of the last pass */
	int status, bad, best;
	float max;                  /* the largest logit / T */
	uint32_t prefix, mask;      /* radix search: the key bits decided */
	double rank;                /* top-k: rank of the k-th among the prefix's */
	double total, cut, below;   /* top-p: the mass of the survivors of top-k,
				     * (1 - top_p) x total, the mass below prefix */
	int tie_thread, tie_rank, tie_last;
	double inv;                 /* 1 / the sum of the kept exp(x - max) */
};

/* One row and what has been decided about it (a copy per thread). */
struct row {
	const float *logits;
	int n;
	float t;
	float max;
	int top_k, top_p;           /* on? */
	uint32_t k_key;             /* top-k keeps keys >= k_key */
	uint32_t p_key;             /* top-p removes keys < p_key, and = p_key ... */
	int tie_last;               /* ... at an index <= tie_last (-1: none) */
};

/* sampling.c's order_key: unsigned order = float order, -0 ties with +0. */
__device__ static uint32_t order_key(float f)
{
	uint32_t u = __float_as_uint(f);

	if ((u << 1) == 0)
		u = 0;
	return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

__device__ static float key_float(uint32_t key)
{
	return __uint_as_float((key & 0x80000000u) ? key & 0x7fffffffu : ~key);
}

/* A token top-k kept and not -inf: what the CPU's top-p sorts. */
__device__ static int survives_top_k(const struct row *r, float x, uint32_t key)
{
	return x > -INFINITY && (!r->top_k || key >= r->k_key);
}

__device__ static int kept(const struct row *r, int i, float x, uint32_t key)
{
	if (!survives_top_k(r, x, key))
		return 0;
	return !r->top_p || key > r->p_key || (key == r->p_key && i > r->tie_last);
}

/* Step 1: the first NaN or +inf (sh->bad), the first index of the largest
 * logit (sh->best) and logit / T there (sh->max), sh->status. */
__device__ static void scan_row(const struct row *r, struct row_shared *sh)
{
	const int t = threadIdx.x;
	int i, s, bad = INT_MAX, best = -1;
	float v = 0.0f;

	/* A thread's indices ascend, so its first hits are its lowest. */
	for (i = t; i < r->n; i += THREADS) {
		float x = r->logits[i];
		if (!(x < INFINITY)) {
			if (bad == INT_MAX)
				bad = i;
		} else if (best < 0 || x > v) {
			v = x;
			best = i;
		}
	}
	sh->red.first.bad[t] = bad;
	sh->red.first.value[t] = v;
	sh->red.first.index[t] = best;
	__syncthreads();
	for (s = THREADS / 2; s > 0; s >>= 1) {
		if (t < s) {
			int j = sh->red.first.index[t + s], k = sh->red.first.index[t];
			float vj = sh->red.first.value[t + s], vk = sh->red.first.value[t];
			if (sh->red.first.bad[t + s] < sh->red.first.bad[t])
				sh->red.first.bad[t] = sh->red.first.bad[t + s];
			if (j >= 0 && (k < 0 || vj > vk || (vj == vk && j < k))) {
				sh->red.first.value[t] = vj;
				sh->red.first.index[t] = j;
			}
		}
		__syncthreads();
	}
	if (t == 0) {
		sh->bad = sh->red.first.bad[0];
		sh->best = sh->red.first.index[0];
		sh->max = 0.0f;
		if (sh->bad < INT_MAX)
			sh->status = isnan(r->logits[sh->bad]) ? ROW_NAN : ROW_INF;
		else if (sh->red.first.value[0] == -INFINITY)
			sh->status = ROW_ALL_NEG_INF;
		else
			sh->status = 0;
		if (sh->status == 0 && r->t != 0.0f)
			sh->max = sh->red.first.value[0] / r->t;
	}
	__syncthreads();
}

/* One radix pass: over the tokens whose key matches prefix under mask, sums
 * a weight into bin (key >> shift) % BINS: 1 for every token (mass = 0), or
 * exp(x - max) in double for the tokens top-k kept (mass = 1). Leaves the
 * sums in sh->bin; returns after a barrier. */
__device__ static void histogram(const struct row *r, uint32_t prefix, uint32_t mask, int shift,
				 int mass, struct row_shared *sh, double *columns)
{
	const int t = threadIdx.x;
	double *mine = columns + t;
	double s;
	int i, b, lane;

	for (b = 0; b < BINS; b++)
		mine[b * THREADS] = 0.0;
	for (i = t; i < r->n; i += THREADS) {
		float x = r->logits[i] / r->t;
		uint32_t key = order_key(x);
		double w = 1.0;

		if ((key & mask) != prefix)
			continue;
		if (mass) {
			if (!survives_top_k(r, x, key))
				continue;
			w = exp((double)x - (double)r->max);
		}
		mine[((key >> shift) & (BINS - 1)) * THREADS] += w;
	}
	__syncthreads();
	b = t / LANES;
	lane = t % LANES;
	s = 0.0;
	for (i = lane; i < THREADS; i += LANES)
		s += columns[b * THREADS + i];
	sh->part[b][lane] = s;
	__syncthreads();
	if (t < BINS) {
		s = 0.0;
		for (lane = 0; lane < LANES; lane++)
			s += sh->part[t][lane];
		sh->bin[t] = s;
	}
	__syncthreads();
}

/* Step 2: the k-th largest key over all n tokens (-inf included, as the
 * CPU's heap), 1 <= k < n. */
__device__ static uint32_t kth_largest_key(const struct row *r, int k, struct row_shared *sh,
					   double *columns)
{
	uint32_t key;
	int shift;

	if (threadIdx.x == 0) {
		sh->prefix = 0;
		sh->mask = 0;
		sh->rank = k;
	}
	__syncthreads();
	for (shift = 32 - DIGIT; shift >= 0; shift -= DIGIT) {
		histogram(r, sh->prefix, sh->mask, shift, 0, sh, columns);
		if (threadIdx.x == 0) {
			/* The digit, from the top, whose count reaches the rank. */
			double rank = sh->rank;
			int d;

			for (d = BINS - 1; d > 0 && sh->bin[d] < rank; d--)
				rank -= sh->bin[d];
			sh->rank = rank;
			sh->prefix |= (uint32_t)d << shift;
			sh->mask |= (uint32_t)(BINS - 1) << shift;
		}
		__syncthreads();
	}
	key = sh->prefix;
	__syncthreads(); /* all have read it before sh->prefix is reused */
	return key;
}

/* Step 3a: the smallest key K whose tokens and those below it carry more
 * than the cut; sh->below is then the mass below K. When rounding leaves no
 * digit above the cut (or top_p is so small that 1 - top_p rounds to 1),
 * the highest digit with mass is taken, which ends at the largest key: all
 * but the last token removed, as the CPU does. */
__device__ static uint32_t top_p_key(const struct row *r, float top_p, struct row_shared *sh,
				     double *columns)
{
	uint32_t key;
	int shift;

	if (threadIdx.x == 0) {
		sh->prefix = 0;
		sh->mask = 0;
		sh->below = 0.0;
	}
	__syncthreads();
	for (shift = 32 - DIGIT; shift >= 0; shift -= DIGIT) {
		histogram(r, sh->prefix, sh->mask, shift, 1, sh, columns);
		if (threadIdx.x == 0) {
			double below = sh->below;
			int d;

			if (sh->mask == 0) { /* first pass: every surviving token */
				double total = 0.0;
				for (d = 0; d < BINS; d++)
					total += sh->bin[d];
				sh->total = total;
				sh->cut = (1.0 - (double)top_p) * total;
			}
			for (d = 0; d < BINS && !(below + sh->bin[d] > sh->cut); d++)
				below += sh->bin[d];
			if (d == BINS) {
				for (d = BINS - 1; d > 0 && !(sh->bin[d] > 0.0); d--)
					;
				below = sh->below;
				for (int e = 0; e < d; e++)
					below += sh->bin[e];
			}
			sh->below = below;
			sh->prefix |= (uint32_t)d << shift;
			sh->mask |= (uint32_t)(BINS - 1) << shift;
		}
		__syncthreads();
	}
	key = sh->prefix;
	__syncthreads();
	return key;
}

/* How many of ties tokens of mass e each, sorted just above mass below, the
 * CPU's ascending walk removes: the largest count c whose cumulative mass
 * below + c e is still <= cut = (1 - top_p) total, and at most ties - 1.
 * When no mass lies below the ties (they are the lightest tokens with mass,
 * as when every surviving token ties), the CPU's walk starts from exactly 0
 * and adds e / total once per tie; that loop is repeated here in the same
 * arithmetic, so that when e and total are exact (ties at the maximum, the
 * rest of mass 0) the rounding of the CPU's sum decides as on the CPU: 1/6
 * three times is not 1/2. */
__device__ static int ties_removed(double below, double cut, double total, float top_p, double e,
				  int ties)
{
	double q, cum;
	int c;

	if (below == 0.0) {
		q = e / total;
		cum = 0.0;
		for (c = 0; c < ties - 1; c++) {
			cum += q;
			if (cum > 1.0 - (double)top_p)
				break;
		}
		return c;
	}
	q = (cut - below) / e;
	if (!(q > 0.0))
		c = 0;
	else if (q >= ties - 1)
		c = ties - 1;
	else
		c = (int)q;
	while (c > 0 && below + c * e > cut)
		c--;
	while (c < ties - 1 && below + (c + 1) * e <= cut)
		c++;
	return c;
}

/* Step 3b: the index of the last tied token at r->p_key that top-p removes
 * (-1: none). Thread t counts the ties in its own contiguous segment of the
 * row, so that the segments in thread order are the index order. */
__device__ static int top_p_tie_last(const struct row *r, float top_p, struct row_shared *sh)
{
	const int t = threadIdx.x, seg = (r->n + THREADS - 1) / THREADS;
	const int lo = t * seg, hi = lo + seg < r->n ? lo + seg : r->n;
	int i, count = 0, last;

	for (i = lo; i < hi; i++)
		count += order_key(r->logits[i] / r->t) == r->p_key;
	sh->red.count[t] = count;
	__syncthreads();
	if (t == 0) {
		int ties = 0, u, c;

		for (u = 0; u < THREADS; u++)
			ties += sh->red.count[u];
		c = ties_removed(sh->below, sh->cut, sh->total, top_p,
				 exp((double)key_float(r->p_key) - (double)r->max), ties);
		sh->tie_thread = -1;
		sh->tie_last = -1;
		if (c > 0) {
			for (u = 0; c > sh->red.count[u]; u++)
				c -= sh->red.count[u];
			sh->tie_thread = u;
			sh->tie_rank = c;
		}
	}
	__syncthreads();
	if (t == sh->tie_thread) {
		int rank = 0;
		for (i = lo; i < hi; i++) {
			if (order_key(r->logits[i] / r->t) == r->p_key && ++rank == sh->tie_rank) {
				sh->tie_last = i;
				break;
			}
		}
	}
	__syncthreads();
	last = sh->tie_last;
	return last;
}

static __global__ void __launch_bounds__(THREADS) probs_kernel(const float *logits, int n,
							 pcg_sampling s, float *probs)
{
	__shared__ struct row_shared sh;
	extern __shared__ double columns[]; /* (BINS, THREADS) */
	const int t = threadIdx.x;
	float *p = probs + (size_t)blockIdx.x * n;
	struct row r;
	double sum;
	int i, k;

	r.logits = logits + (size_t)blockIdx.x * n;
	r.n = n;
	r.t = s.temperature;
	r.top_k = s.top_k > 0 && s.top_k < n;
	r.top_p = s.top_p < 1.0f;
	r.k_key = 0;
	r.p_key = 0;
	r.tie_last = -1;

	scan_row(&r, &sh);
	if (sh.status != 0) {
		if (t == 0) {
			p[0] = -(float)sh.status;
			if (n > 1)
				p[1] = __int_as_float(sh.bad);
		}
		return;
	}
	/* Temperature 0, or so small that the largest logit / T overflows. */
	if (r.t == 0.0f || isinf(sh.max)) {
		for (i = t; i < n; i += THREADS)
			p[i] = i == sh.best ? 1.0f : 0.0f;
		return;
	}
	r.max = sh.max;

	if (r.top_k)
		r.k_key = kth_largest_key(&r, s.top_k, &sh, columns);
	if (r.top_p) {
		r.p_key = top_p_key(&r, s.top_p, &sh, columns);
		r.tie_last = top_p_tie_last(&r, s.top_p, &sh);
	}

	/* Softmax over the kept tokens, max subtracted; -inf and removed: 0. */
	sum = 0.0;
	for (i = t; i < n; i += THREADS) {
		float x = r.logits[i] / r.t;
		if (kept(&r, i, x, order_key(x)))
			sum += expf(x - r.max);
	}
	sh.red.sum[t] = sum;
	__syncthreads();
	for (k = THREADS / 2; k > 0; k >>= 1) {
		if (t < k)
			sh.red.sum[t] += sh.red.sum[t + k];
		__syncthreads();
	}
	if (t == 0)
		sh.inv = 1.0 / sh.red.sum[0];
	__syncthreads();
	/* Each thread reads then writes its own entries: in place is safe. */
	for (i = t; i < n; i += THREADS) {
		float x = r.logits[i] / r.t;
		p[i] = kept(&r, i, x, order_key(x)) ? (float)(expf(x - r.max) * sh.inv) : 0.0f;
	}
}

/* The error of a failed row from its status (two floats) into err. */
static int row_error(const float status[2], int rows, int row, int n, pcg_err *err)
{
	int code = (int)-status[0], index = 0;
	char where[32];

	if (n > 1)
		memcpy(&index, &status[1], sizeof index);
	if (code == ROW_NAN || code == ROW_INF)
		pcg_fail(err, "logit %d is %s", index, code == ROW_NAN ? "NaN" : "+inf");
	else if (code == ROW_ALL_NEG_INF)
		pcg_fail(err, "all %d logits are -inf", n);
	else
		pcg_fail(err, "status %g: not one the kernel writes", (double)status[0]);
	if (rows > 1) {
		snprintf(where, sizeof where, "row %d", row);
		pcg_err_prefix(err, where);
	}
	return -1;
}

/* Reads back each row's status (its first one or two floats) in chunks,
 * which also waits for the kernel. */
static int read_status(const float *d_probs, int rows, int n, cudaStream_t st, pcg_err *err)
{
	float status[STATUS_ROWS][2];
	size_t width = (n > 1 ? 2 : 1) * sizeof(float);
	int r0, h, r;

	for (r0 = 0; r0 < rows; r0 += h) {
		h = rows - r0 < STATUS_ROWS ? rows - r0 : STATUS_ROWS;
		CU_CHECK(cudaMemcpy2DAsync(status, sizeof status[0], d_probs + (size_t)r0 * n,
					   (size_t)n * sizeof(float), width, (size_t)h,
					   cudaMemcpyDeviceToHost, st), err);
		CU_CHECK(cudaStreamSynchronize(st), err);
		for (r = 0; r < h; r++)
			if (!(status[r][0] >= 0.0f))
				return row_error(status[r], rows, r0 + r, n, err);
	}
	return 0;
}

int pcg_cuda_probs(const float *d_logits, int rows, int n, const pcg_sampling *s,
		   float *d_probs, void *stream, pcg_err *err)
{
	cudaStream_t st = (cudaStream_t)stream;

	if (n < 1)
		return pcg_fail(err, "%d logits: need at least 1", n);
	if (n > MAX_N)
		return pcg_fail(err, "%d logits: at most %d on the device", n, MAX_N);
	if (rows < 0)
		return pcg_fail(err, "%d rows: must be >= 0", rows);
	if (pcg_sampling_check(s, err) < 0)
		return -1;
	if (rows == 0)
		return 0;
	CU_CHECK(cudaFuncSetAttribute(probs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
				      (int)COLUMNS_BYTES), err);
	probs_kernel<<<rows, THREADS, COLUMNS_BYTES, st>>>(d_logits, n, *s, d_probs);
	CU_LAUNCH(err);
	return read_status(d_probs, rows, n, st, err);
}
