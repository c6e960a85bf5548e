/* costmodel.h: what a round of speculative decoding should cost, and the
 * lookahead that makes it pay.
 *
 * A round verifies L drafts in one pass of the target over a block of L + 1
 * positions. With a the acceptance of each draft position given that the
 * ones before it were accepted (a[0] the first), a round emits
 *
 *   E(L) = 1 + a1 + a1 a2 + ... + a1..aL          tokens
 *
 * (the accepted drafts, then one corrected or bonus token). What it costs:
 *
 *   sequential:  2 trips + L draft steps + block(L + 1)
 *   pipelined:   1 trip + max(B, D) + overlap min(B, D)
 *                + (1 - F) (1 trip + L draft steps),
 *                B = block(L + 1), D = (L + 1) draft steps
 *
 *   MTP heads:   1 trip + block(L + 1) + (L + 1) H head (H heads asked for
 *                at each position: L, or more when the next round may want them)
 *   mtp-viterbi: 1 trip + block(E(L)) + L head, for E(L) tokens (a = 1:
 *                every head's token is kept, unless a round stops short;
 *                the target has not seen the tokens kept last round, so
 *                its score runs them all)
 *
 * where block(n) = step (1 + slope (n - 1)) is the target's pass over n
 * positions, a trip is the fixed cost of one request to a server and back
 * beyond its compute, head the cost of one MTP head at one position (its
 * product, its lm_head over the rows, its softmax), and F = a1..a(L+1) the
 * share of rounds whose drafts and first draft ahead were all accepted,
 * overlap what running the two at once costs beyond the longer (0: they
 * run apart, on their own cores or hosts; 1: no better than one after the
 * other, as two servers sharing the same cores or memory can be):
 * only then are the next round's drafts ready when the verdict comes
 * (lib/speculate/speculate.c); after a rejection the draft drafts again while the
 * target waits. The target alone costs a step per token and a trip per
 * request: a token a request, or a run of them that the target samples
 * itself (run tokens a trip); its steps come one after another with no
 * other model's in between, so they are the warm step (run_step) where it
 * was measured, not the step from cold caches a drafting round pays.
 */
#ifndef PCG_COSTMODEL_H
#define PCG_COSTMODEL_H

#include "err.h"

/* The measured terms, in seconds (slope: each further position of a block
 * as a share of a step). */
typedef struct cost_terms {
	double step;   /* the target's decode step */
	double draft;  /* the draft's decode step (0: MTP heads) */
	double slope;  /* block(n) = step (1 + slope (n - 1)) */
	double trip;   /* a request to a server and back, beyond its compute */
	double head;   /* one MTP head at one position (0: none measured) */
	double overlap; /* in [0, 1]: the draft and the target at once, beyond the longer */
	int heads;     /* MTP heads a score asks for at each position (0: L); not parsed */
	int run;       /* tokens a request of the target alone brings (its runs, which
			* share a trip; 0 or 1: a trip a token); not parsed */
	double run_step; /* the target's step back to back, as it steps alone (no
			  * other model between two of its steps; 0: step); not parsed */
} cost_terms;

/* Which round: the target alone, drafts from a draft server (one after the
 * other, or pipelined), or the target's MTP heads. */
typedef enum { COST_NONE, COST_SEQUENTIAL, COST_PIPELINED, COST_MTP, COST_VITERBI } cost_kind;

/* The target's step when it steps alone: run_step where measured, else step. */
double cost_alone_step(const cost_terms *c);

/* E(L) from the conditional acceptances a[0..L) (a[i] in [0, 1]). */
double cost_tokens_per_round(const double *a, int L);

/* The expected seconds of a round of L drafts; a must hold L + 1 values
 * for COST_PIPELINED (a[L]: the first draft ahead, checked against the
 * block's last vector). */
double cost_round_seconds(const cost_terms *c, cost_kind kind, const double *a, int L);

/* Predicted tokens per second: E(L) / the round's seconds. */
double cost_tokens_per_second(const cost_terms *c, cost_kind kind, const double *a, int L);

/* The L in [1, max_l] with the most tokens per second; a[0..max_l] (one
 * more than max_l for COST_PIPELINED's draft ahead). */
int cost_best_lookahead(const cost_terms *c, cost_kind kind, const double *a, int max_l);

/* Parses "STEP_MS,DRAFT_MS,SLOPE,TRIP_MS[,HEAD_MS[,OVERLAP]]" (milliseconds
 * but the slope and the overlap; the form of verifier --costs) into c.
 * Returns 0, or -1 with err naming the field. */
int cost_terms_parse(const char *s, cost_terms *c, pcg_err *err);

/* Measures a model's terms where it runs, as a server does once (at its
 * first ping): the fastest of a few decode steps and of a few blocks of 4
 * positions, each from cold caches (in a pipeline the other processes run
 * between two steps of a model), at an utterance's context (16 positions
 * for a model beyond 256 MB, whose weights dwarf its cache), over the output
 * rows rows (NULL: the whole vocabulary). step in seconds, slope as in
 * cost_terms; warm (unless NULL) the fastest of a few steps one right after
 * another, caches warm, as the target alone steps (cost_terms's run_step).
 * Returns 0, or -1 with err. */
struct llama_model;
struct llama_rows;
struct mtp_heads;
struct pcg_sampling;
int cost_measure(struct llama_model *m, const struct llama_rows *rows, double *step,
		 double *slope, double *warm, pcg_err *err);

/* What one of m's MTP heads h costs at one position, as a score with heads
 * spends it (its product, the heads' lm_head over rows, its softmax with
 * samp), the
 * fastest of a few per head from cold caches: cost_terms's head, in seconds
 * (0 when it cannot be measured). h NULL: m's Llasa+ heads (lib/engine/model.h),
 * whose decoder layers run in every pass of m (so in its step): their
 * lm_head and softmax. */
double cost_measure_heads(struct mtp_heads *h, const struct llama_model *m,
			  const struct llama_rows *rows, const struct pcg_sampling *samp);

/* The median of v[0..n) (v is sorted); 0 for n < 1. */
double cost_median(double *v, int n);

#endif
