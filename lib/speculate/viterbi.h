/* viterbi.h: Viterbi-based path selection over the multi-token prediction
 * heads (MTP paper, section III-C and Algorithm 1).
 *
 * Head i (1..n) gives S_i, a distribution over V tokens for position t + i.
 * The candidates are the m <= k * n distinct tokens among the top-k of every
 * head (ties: the lower id), sorted ascending. Over them the search finds
 *
 *   A* = argmax_{x_1..x_n} S_1(x_1) prod_{i=2..n} Q(x_{i-1}, x_i) S_i(x_i)
 *
 * exactly as Algorithm 1 (delta_1 = S_1, delta_t(j) = max_i delta_{t-1}(i)
 * Q(a_i, a_j) S_t(a_j)), in logs, in O(n m^2) with the m x m block of Q
 * taken from lib/formats/tm.c. The paper weights nothing: each head's probability and
 * each transition count once. As in the paper every position may take any
 * of the m candidates (S_t of a token outside head t's own top-k is still
 * its probability under head t); VITERBI_PER_HEAD restricts position t to
 * head t's top-k instead. An optional start token x_0 (the last accepted
 * token, not in the paper) adds log Q(x_0, x_1).
 */
#ifndef PCG_VITERBI_H
#define PCG_VITERBI_H

#include <stdint.h>

#include "err.h"
#include "tm.h"

enum {
	VITERBI_UNION = 0,    /* every position over all m candidates (the paper) */
	VITERBI_PER_HEAD = 1, /* position t over head t's top-k only */
};

typedef struct viterbi_opts {
	int k;         /* top-k per head, >= 1 (cut to V) */
	int64_t start; /* x_0, or -1 for none (the paper) */
	int mode;      /* VITERBI_UNION or VITERBI_PER_HEAD */
} viterbi_opts;

/* The search for the n_heads distributions probs[i * V .. (i + 1) * V)
 * (probabilities: finite, >= 0; log 0 is -inf). V <= the TM's n. Writes
 * path[0..n_heads) and, when not NULL, the log score and m. Returns -1 with
 * err on bad input. Ties go to the lower candidate token. */
int viterbi_decode(const tmat *q, const float *probs, int n_heads, int V,
		   const viterbi_opts *o, uint32_t *path, double *score, int *m, pcg_err *err);

/* The same objective by trying every path over the candidates (m^n_heads of
 * them, or k^n_heads with VITERBI_PER_HEAD); for tests, small cases only. */
int viterbi_brute(const tmat *q, const float *probs, int n_heads, int V,
		  const viterbi_opts *o, uint32_t *path, double *score, pcg_err *err);

/* The dynamic programme itself over m states given as arrays: emit[t * m +
 * j] = log S_t(cand[j]) (-inf: not allowed), logq[i * m + j] = log
 * Q(cand[i], cand[j]), start_logq[j] = log Q(x_0, cand[j]) or NULL. Writes
 * the state index of each position to idx[0..n) and returns the log score.
 * Needs 2 m doubles and n m ints of scratch in work (sizes from
 * viterbi_work_bytes). */
double viterbi_dp(int n, int m, const double *emit, const double *logq,
		  const double *start_logq, int *idx, void *work);
size_t viterbi_work_bytes(int n, int m);

#endif
