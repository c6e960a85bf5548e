/* sampling.c: temperature, top-k, top-p and softmax on a vector of logits,
 * with the semantics of Hugging Face transformers' warpers (see sampling.h),
 * and inverse-CDF sampling from the result.
 *
 * Removed tokens are set to -inf, as the warpers' filter_value, so that each
 * step reads like the Python it mirrors and the final softmax gives them 0.
 * Speed matters because the engine calls this for every draft and target
 * position on 65,537 logits: top-k finds its threshold with a k-element
 * heap in one pass, exp is computed only for the tokens that survive, and
 * only top-p sorts (a radix sort), and only the survivors of top-k.
 */
#include "sampling.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int pcg_sampling_check(const pcg_sampling *s, pcg_err *err)
{
	if (!(s->temperature >= 0.0f) || isinf(s->temperature))
		return pcg_fail(err, "temperature %g: must be finite and >= 0 (0 = greedy)",
				(double)s->temperature);
	if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
		return pcg_fail(err, "top_p %g: must be in (0, 1] (1 = off)", (double)s->top_p);
	return 0;
}

int pcg_argmax(const float *x, int n)
{
	int i, best = 0;

	if (n < 1)
		return -1;
	for (i = 1; i < n; i++)
		if (x[i] > x[best] || isnan(x[best]))
			best = i;
	return best;
}

static void one_hot(float *probs, int n, int hot)
{
	int i;

	for (i = 0; i < n; i++)
		probs[i] = 0.0f;
	probs[hot] = 1.0f;
}

/* Restores the heap property below node i of a min-heap of k floats. */
static void sift_down(float *heap, int k, int i)
{
	for (;;) {
		int least = i, l = 2 * i + 1, r = l + 1;
		float t;

		if (l < k && heap[l] < heap[least])
			least = l;
		if (r < k && heap[r] < heap[least])
			least = r;
		if (least == i)
			return;
		t = heap[i];
		heap[i] = heap[least];
		heap[least] = t;
		i = least;
	}
}

/* The k-th largest of x[0..n), 1 <= k <= n: a min-heap holds the k largest
 * seen so far, its root the k-th. One pass that mostly compares with the
 * root, O(n log k) at worst (ascending input), x untouched. */
static float kth_largest(const float *x, int n, int k, float *heap)
{
	int i;

	for (i = 0; i < k; i++)
		heap[i] = x[i];
	for (i = k / 2 - 1; i >= 0; i--)
		sift_down(heap, k, i);
	for (i = k; i < n; i++) {
		if (x[i] > heap[0]) {
			heap[0] = x[i];
			sift_down(heap, k, 0);
		}
	}
	return heap[0];
}

/* TopKLogitsWarper: remove every token below the k-th largest, so ties
 * with the k-th are all kept. The heap lives on the stack up to
 * TOP_K_STACK tokens, which covers the top-k values people use. */
#define TOP_K_STACK 1024

static int top_k(float *x, int n, int k, pcg_err *err)
{
	float stack[TOP_K_STACK], *heap = stack, kth;
	int i;

	if (k <= 0 || k >= n)
		return 0;
	if (k > TOP_K_STACK) {
		heap = malloc((size_t)k * sizeof *heap);
		if (heap == NULL)
			return pcg_fail(err, "top_k %d: out of memory", k);
	}
	kth = kth_largest(x, n, k, heap);
	if (heap != stack)
		free(heap);
	for (i = 0; i < n; i++)
		if (x[i] < kth)
			x[i] = -INFINITY;
	return 0;
}

/* A key whose unsigned order is the order of the floats (no NaN): flip all
 * bits of negatives, set the sign bit of the others. -0 becomes +0, so the
 * two zeros tie as they compare. */
static uint32_t order_key(float f)
{
	uint32_t u;

	if (f == 0.0f)
		f = 0.0f;
	memcpy(&u, &f, sizeof u);
	return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

static float key_float(uint32_t key)
{
	uint32_t u = (key & 0x80000000u) ? key & 0x7fffffffu : ~key;
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

/* A token as one word: its logit's order key above, its index below. */
static uint64_t token_word(float x, int i)
{
	return (uint64_t)order_key(x) << 32 | (uint32_t)i;
}

static float word_logit(uint64_t w)
{
	return key_float((uint32_t)(w >> 32));
}

static int word_index(uint64_t w)
{
	return (int)(uint32_t)w;
}

/* Sorts m token words by key, stably: an LSD
 * radix sort on the four bytes of the key, O(m), where qsort took ~15 ms on
 * 65,537 tokens. tmp has room for m words; returns a or tmp, whichever
 * holds the result. A byte that is the same in every word is skipped. */
static uint64_t *radix_sort(uint64_t *a, uint64_t *tmp, int m)
{
	int shift, i, d;

	for (shift = 32; shift < 64; shift += 8) {
		int count[256] = { 0 }, sum = 0;
		uint64_t *t;

		for (i = 0; i < m; i++)
			count[(a[i] >> shift) & 0xff]++;
		if (count[(a[0] >> shift) & 0xff] == m)
			continue;
		for (d = 0; d < 256; d++) {
			int c = count[d];
			count[d] = sum;
			sum += c;
		}
		for (i = 0; i < m; i++)
			tmp[count[(a[i] >> shift) & 0xff]++] = a[i];
		t = a;
		a = tmp;
		tmp = t;
	}
	return a;
}

/* TopPLogitsWarper: sort ascending, softmax, cumulative sum, remove the
 * tokens whose cumulative probability is <= 1 - top_p except the last (the
 * most likely). Tokens already at -inf have probability 0, so they would be
 * removed again; only the finite ones are sorted. Ties sort by index (the
 * words are gathered in index order and the sort is stable), which is what
 * torch.sort does for up to 16 elements; above that torch's sort is not
 * stable and HF's choice among tied tokens at the boundary is arbitrary. */
static int top_p(float *x, int n, float p, pcg_err *err)
{
	uint64_t *words, *sorted;
	double total = 0.0, cum = 0.0, cut = 1.0 - (double)p, max;
	int i, m = 0;

	if (p >= 1.0f)
		return 0;
	for (i = 0; i < n; i++)
		m += x[i] > -INFINITY;
	if (m <= 1)
		return 0;
	words = malloc(2 * (size_t)m * sizeof *words);
	if (words == NULL)
		return pcg_fail(err, "top_p: out of memory for %d tokens", m);
	for (i = 0, m = 0; i < n; i++)
		if (x[i] > -INFINITY)
			words[m++] = token_word(x[i], i);
	sorted = radix_sort(words, words + m, m);

	max = word_logit(sorted[m - 1]);
	for (i = 0; i < m; i++)
		total += exp(word_logit(sorted[i]) - max);
	for (i = 0; i < m - 1; i++) {
		cum += exp(word_logit(sorted[i]) - max) / total;
		if (cum > cut)
			break;
		x[word_index(sorted[i])] = -INFINITY;
	}
	free(words);
	return 0;
}

/* Softmax over the finite entries, in place; -inf gives exactly 0. max is
 * the largest entry (the caller knows it), subtracted so exp cannot
 * overflow; exp and the sum are in double, so the result is the exact
 * softmax of the f32 inputs to within f32 rounding. */
static void softmax(float *x, int n, double max)
{
	double sum = 0.0, scale;
	int i;

	for (i = 0; i < n; i++) {
		if (x[i] > -INFINITY) {
			double e = exp(x[i] - max);
			x[i] = (float)e;
			sum += e;
		} else {
			x[i] = 0.0f;
		}
	}
	scale = 1.0 / sum;
	for (i = 0; i < n; i++)
		x[i] = (float)(x[i] * scale);
}

/* Temperature, top-k (0 < k < n, k <= TOP_K_STACK) and softmax, top-p off,
 * in two passes over the logits with the bits of the steps one at a time:
 * the k-th largest logit found with the bad ones and the largest (the
 * scaled vector's k-th largest is the k-th largest scaled, x / T being
 * non-decreasing), then the tokens whose scaled logit top_k keeps, and exp
 * on them alone in index order (softmax's sum, in the same order); the
 * rest are 0. Each pass takes BLOCK logits at a time, looking at them one
 * by one only where one may count (block_above, against the raw logits: no
 * division on the way). Returns 1 when done, 0 when the steps one at a
 * time must run (a bad logit, all -inf, a temperature that overflows: they
 * say which; more than KEPT_MAX ties kept): probs is then untouched. */
#define KEPT_MAX 2048
#define BLOCK 16
typedef float f4 __attribute__((vector_size(16)));
typedef int32_t i4 __attribute__((vector_size(16)));

/* Whether one of x[0..BLOCK) is above `above`, or not below +inf (a bad
 * logit): four lanes at a time (GCC's vector extension, SSE2 or NEON). */
static int block_above(const float *x, float above)
{
	const f4 a = { above, above, above, above };
	const f4 inf = { INFINITY, INFINITY, INFINITY, INFINITY };
	i4 f = { 0, 0, 0, 0 };

	for (int j = 0; j < BLOCK; j += 4) {
		f4 v;
		memcpy(&v, x + j, sizeof v);
		f |= (v > a) | ~(v < inf);
	}
	return (f[0] | f[1] | f[2] | f[3]) != 0;
}

static int probs_top_k(const float *logits, int n, const pcg_sampling *s, float *probs)
{
	float heap[TOP_K_STACK], kv[KEPT_MAX];
	int kept[KEPT_MAX], m = 0, best = 0, i;
	const int k = s->top_k;
	const float T = s->temperature;

	for (i = 0; i < k; i++) {
		if (!(logits[i] < INFINITY))
			return 0;
		heap[i] = logits[i];
		if (logits[i] > logits[best])
			best = i;
	}
	for (int j = k / 2 - 1; j >= 0; j--)
		sift_down(heap, k, j);
	while (i < n) {
		const int e = n - i < BLOCK ? n : i + BLOCK;
		if (e - i == BLOCK && !block_above(logits + i, heap[0])) {
			i = e;
			continue;
		}
		for (; i < e; i++) {
			const float x = logits[i];
			if (!(x < INFINITY))
				return 0;
			if (x > heap[0]) { /* the largest so far is in the heap */
				heap[0] = x;
				sift_down(heap, k, 0);
				if (x > logits[best])
					best = i;
			}
		}
	}
	/* x / 1 is x: no case for T = 1 */
	const float max = logits[best] / T, kth = heap[0] / T;
	if (logits[best] == -INFINITY || isinf(max))
		return 0;
	/* a block none of whose logits reaches lo has none kept: x / T >= kth
	 * needs x >= kth T within a few roundings, and lo is below that */
	const double t = (double)kth * T;
	const float lo = kth == -INFINITY ? -INFINITY : (float)(t - fabs(t) * 0x1p-20) - FLT_MIN;
	for (i = 0; i < n;) {
		const int e = n - i < BLOCK ? n : i + BLOCK;
		if (e - i == BLOCK && !block_above(logits + i, lo)) {
			i = e;
			continue;
		}
		for (; i < e; i++) {
			const float v = logits[i] / T;
			if (v >= kth) {
				if (m == KEPT_MAX)
					return 0;
				kv[m] = v;
				kept[m++] = i;
			}
		}
	}
	double sum = 0.0;
	for (int j = 0; j < m; j++) { /* -inf among the kept gives 0 */
		const double e = kv[j] > -INFINITY ? exp(kv[j] - (double)max) : 0.0;
		kv[j] = (float)e;
		sum += e;
	}
	const double scale = 1.0 / sum;
	memset(probs, 0, (size_t)n * sizeof *probs);
	for (int j = 0; j < m; j++)
		probs[kept[j]] = (float)(kv[j] * scale);
	return 1;
}

int pcg_probs(const float *logits, int n, const pcg_sampling *s, float *probs,
	      pcg_err *err)
{
	float max;
	int i, best;

	if (n < 1)
		return pcg_fail(err, "%d logits: need at least 1", n);
	if (pcg_sampling_check(s, err) < 0)
		return -1;
	if (s->temperature > 0.0f && s->top_k > 0 && s->top_k < n && s->top_k <= TOP_K_STACK &&
	    s->top_p >= 1.0f && probs_top_k(logits, n, s, probs))
		return 0;
	/* One pass finds both bad logits and the first maximum. */
	for (i = 0, best = 0; i < n; i++) {
		if (!(logits[i] < INFINITY))
			return pcg_fail(err, "logit %d is %s", i, isnan(logits[i]) ? "NaN" : "+inf");
		if (logits[i] > logits[best])
			best = i;
	}
	if (logits[best] == -INFINITY)
		return pcg_fail(err, "all %d logits are -inf", n);

	if (s->temperature == 0.0f) {
		one_hot(probs, n, best);
		return 0;
	}
	/* TemperatureLogitsWarper: scores / temperature, in f32 as torch does
	 * (ties and the top-k threshold then match HF bit for bit). */
	if (s->temperature != 1.0f) {
		for (i = 0; i < n; i++)
			probs[i] = logits[i] / s->temperature;
	} else if (probs != logits) {
		memcpy(probs, logits, (size_t)n * sizeof *probs);
	}
	/* A temperature so small that the largest logit overflows is T -> 0. */
	if (isinf(probs[best])) { /* +inf, or -inf when the largest logit is negative */
		one_hot(probs, n, best);
		return 0;
	}
	/* The largest scaled logit: top-k and top-p keep it or a tie of it
	 * (not always index best: top-p keeps the last of tied maxima). */
	max = probs[best];
	if (top_k(probs, n, s->top_k, err) < 0 || top_p(probs, n, s->top_p, err) < 0)
		return -1;
	softmax(probs, n, max);
	return 0;
}

/* Whether one of x[0..BLOCK) is above 0. */
static int block_positive(const float *x)
{
	const f4 z = { 0, 0, 0, 0 };
	i4 f = { 0, 0, 0, 0 };

	for (int j = 0; j < BLOCK; j += 4) {
		f4 v;
		memcpy(&v, x + j, sizeof v);
		f |= v > z;
	}
	return (f[0] | f[1] | f[2] | f[3]) != 0;
}

/* Blocks of zeros (a truncated distribution's, mostly) are passed over
 * BLOCK entries at a time; the sums are the same, in the same order. */
int pcg_sample(const float *probs, int n, double u)
{
	double total = 0.0, target, cum = 0.0;
	int i, last = -1;

	for (i = 0; i < n; i++) {
		if (i % BLOCK == 0 && i + BLOCK <= n && !block_positive(probs + i)) {
			i += BLOCK - 1;
			continue;
		}
		if (probs[i] > 0.0f)
			total += probs[i];
	}
	if (!(total > 0.0))
		return -1;
	target = u * total;
	/* Same additions in the same order as total, so cum ends at total. */
	for (i = 0; i < n; i++) {
		if (i % BLOCK == 0 && i + BLOCK <= n && !block_positive(probs + i)) {
			i += BLOCK - 1;
			continue;
		}
		if (!(probs[i] > 0.0f))
			continue;
		cum += probs[i];
		last = i;
		if (target < cum)
			return i;
	}
	return last; /* u * total rounded up to total */
}
