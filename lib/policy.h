/* policy.h: the verification policies of speculative decoding, one
 * interface: given L draft tokens x_1..x_L with their draft distributions
 * p_1..p_L and the target distributions q_1..q_{L+1} (all over the same V
 * tokens, tempered and truncated the same way), decide which drafts to keep
 * and emit one corrected or bonus token.
 *
 * sd     (Leviathan et al., Chen et al.) accept x with probability
 *        min(1, q(x) / p(x)); on rejection sample norm([q - p]+); when all L
 *        are accepted sample q_{L+1}. The emitted token is distributed as q.
 * ssd    (SSD paper, Eq. 5) accept if u < min(1, q(x) / p(x)) + beta,
 *        beta >= 0; rejection and bonus as sd. Lossy for beta > 0.
 * pcg    (PCG paper, Algorithm 1) over the ASG's groups G_k (asg.h), with
 *        S(t) = { k : t in G_k }, weights w_{k,t} (Eq. 2, 3) and
 *          P_c(G_k) = sum_{t in G_k} w_{k,t} p(t),
 *          Q_c(G_k) = sum_{t in G_k} w_{k,t} q(t)                    (Eq. 4)
 *        draw K ~ w_{., x} over S(x) (Eq. 6, so K ~ P_c), accept with
 *        r = min(1, Q_c(G_K) / P_c(G_K)) (Eq. 7), computed in O(|G_K|), and
 *        keep x (the paper's choice: the group is exact, the token within it
 *        follows p). On rejection sample K' from the group residual
 *          R_c(k) proportional to [Q_c(G_k) - P_c(G_k)]+              (Eq. 8)
 *        by thinning: y ~ q, K ~ w_{., y} (so K ~ Q_c), keep K with
 *        probability [1 - P_c(G_K) / Q_c(G_K)]+ (Eq. 9), else draw again;
 *        emit y, which given K is distributed as q(t) w_{K,t} / Q_c(G_K)
 *        (Eq. 10). A trial succeeds with probability TV(P_c, Q_c), so the
 *        mean number of trials is 1 / TV; after max_trials failures the
 *        residual is computed exactly over all groups, which bounds the
 *        latency and leaves the distribution exact (each branch samples
 *        R_c). The emitted group is distributed as Q_c (Eq. 11). Tokens
 *        at or beyond the ASG's n (the end token, or every token when there
 *        is no ASG) are singleton groups numbered M + (t - n).
 * greedy accept while x = argmax q (the lowest id on ties); emit argmax q of
 *        the first mismatch, or of q_{L+1}. Uses no random draws.
 *
 * Edge cases, defined for all policies: a draft with q(x) = 0 is always
 * rejected and one with p(x) = 0 < q(x) always accepted (ratio 1); a
 * residual with no mass (q <= p everywhere, which happens when q = p up to
 * rounding or when the inputs sum to 1 only within rounding) is replaced by
 * q itself, its limit; the distributions need not sum to exactly 1 (inverse
 * CDF draws scale by the actual total). An emitted end token ends the
 * block: nothing is accepted or drawn after it.
 *
 * Random draws come from the caller's pcg_rng in a fixed order, so a run is
 * reproducible from its seed. A policy holds scratch memory: use one per
 * thread.
 */
#ifndef PCG_POLICY_H
#define PCG_POLICY_H

#include "asg.h"
#include "err.h"
#include "rng.h"

typedef enum policy_kind {
	POLICY_SD,
	POLICY_SSD,
	POLICY_PCG,
	POLICY_GREEDY,
} policy_kind;

/* What each kind is, for the programs that list, document or validate them:
 * one row per kind, in the order of policy_kind. */
typedef struct policy_info {
	const char *name;
	const char *summary;  /* what it accepts and what it guarantees, one line */
	const char *params;   /* the parameters it reads beyond the sampling ("": none) */
	int needs_asg;        /* it needs an ASG (asg-build) */
} policy_info;

#define POLICY_N_KINDS (POLICY_GREEDY + 1)

/* The row of kind k, or NULL past the last. */
const policy_info *policy_info_of(int k);

/* The kind called name ("sd", "ssd", "pcg", "greedy"), or -1. */
int policy_kind_from_name(const char *name);
const char *policy_kind_name(policy_kind k);

/* The kinds' names into buf, separated by ", " and the last by last_sep
 * (" or ": "sd, ssd, pcg or greedy"). Returns buf. */
const char *policy_names(char *buf, size_t size, const char *last_sep);

#define POLICY_MAX_L 32
#define POLICY_DEFAULT_TRIALS 64

typedef struct policy_params {
	policy_kind kind;
	double beta;         /* ssd: tolerance, >= 0 (the SSD paper uses 0.4) */
	const asg *groups;   /* pcg: the ASG (borrowed); NULL: every token a singleton */
	int max_trials;      /* pcg: thinning trials before the exact residual; 0: default */
	int end_token;       /* id in [0, V) that ends generation; -1: none */
} policy_params;

/* One checked draft position. */
typedef struct policy_step {
	int draft;      /* x_i */
	int accepted;
	double ratio;   /* the acceptance probability used: sd min(1, q/p), ssd that
			 * + beta capped at 1, pcg min(1, Q_c/P_c), greedy 0 or 1 */
	int group;      /* pcg: K_i; otherwise -1 */
	double pm, qm;  /* pcg: P_c(G_K), Q_c(G_K); otherwise p(x), q(x) */
} policy_step;

typedef struct policy_result {
	int n_tokens;                     /* emitted tokens */
	int tokens[POLICY_MAX_L + 1];     /* accepted drafts, then the corrected or bonus token */
	int groups[POLICY_MAX_L + 1];     /* pcg: each emitted token's group label (the accepted
					   * K_i, the residual's K); -1 for a bonus token and
					   * for other policies */
	int n_accepted;                   /* drafts accepted */
	int n_steps;                      /* positions checked (steps[0..n_steps)) */
	int rejected;                     /* tokens[n_accepted] corrects a rejected draft */
	int bonus;                        /* tokens[L] was drawn from q_{L+1} */
	int ended;                        /* the last emitted token is the end token */
	int trials;                       /* pcg: thinning trials of the rejection; 0: none */
	int exact;                        /* pcg: the cap was hit; the residual was computed
					   * exactly over all groups */
	policy_step steps[POLICY_MAX_L];
} policy_result;

typedef struct policy policy;

/* A policy over V tokens. Fails on bad parameters: beta < 0 or not finite,
 * an ASG covering more than V tokens, end_token out of range. */
policy *policy_new(const policy_params *pp, int V, pcg_err *err);
void policy_free(policy **pol);

/* Runs one round: x[0..L) (1 <= L <= POLICY_MAX_L) with p[0..L) and
 * q[0..L], each a vector of V probabilities; q[L] may be NULL (no bonus
 * token is drawn when all are accepted); p is not read by greedy. Returns 0,
 * or -1 with err when a draft id is out of [0, V) or a distribution to be
 * sampled has no mass. */
int policy_run(policy *pol, int L, const int *x, const float *const *p, const float *const *q,
	       pcg_rng *rng, policy_result *out, pcg_err *err);

#endif
