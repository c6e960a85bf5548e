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
 * typical (Medusa, Cai et al. 2024, section 2.3.1) accept when
 *        q(x) > min(epsilon, alpha exp(-H(q))), H(q) = -sum q log q; on
 *        rejection draw from q. Not exact; acceptance rate
 *        sum_x p(x) [q(x) > min(epsilon, alpha exp(-H(q)))].
 * topk   (Llasa+, Tian et al. 2025) accept when x is among the k most probable
 *        tokens of q (ties at the k-th value count as in); on rejection draw
 *        from q. Not exact; acceptance rate sum_{x in top-k(q)} p(x).
 * lantern (LANTERN, Jang et al., ICLR 2025) relaxed acceptance over latent
 *        neighbourhoods N(x) (asg-build --knn: each token's K nearest in the
 *        target's embedding space): mass is moved onto a token x with
 *        p(x) > q(x) from its neighbours y with q(y) > p(y), at most k of
 *        them (tokens with p > 1e-4 only), until x's deficit is filled, a total of delta is moved over
 *        all tokens, or none is left; the result q' is a distribution with
 *        TV(q', q) <= delta (the paper's bound), and the round is sd against
 *        q': accept min(1, q'(x) / p(x)), residual norm([q' - p]+). The
 *        output follows q' exactly, so its TV from q is at most delta. (The
 *        paper's code spends delta per draft token, which bounds each
 *        token's relaxed target but not the output: up to 2.6 delta on the
 *        distributions of test_policy_rules.c; here delta is spent once per position.)
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

/* The kinds, one per rule of policy_rules.h: POLICY_SD, POLICY_SSD, ... */
typedef enum policy_kind {
#define POLICY_RULE(KIND, name) POLICY_##KIND,
#include "policy_rules.h"
#undef POLICY_RULE
	POLICY_N_KINDS
} policy_kind;

#define POLICY_MAX_ARGS 4

/* A parameter of a rule beyond the sampling: its name (the flag of pcg-sim
 * and the key of the protocol's "args"), its range and default. */
typedef struct policy_arg_info {
	const char *name;
	double min, max, def;
	int integer;          /* a whole number (k) */
	const char *help;
} policy_arg_info;

/* What a rule needs beyond p and q. */
enum {
	POLICY_NEEDS_ASG = 1, /* an ASG (asg-build) */
	POLICY_NEEDS_KNN = 2, /* a neighbour file (asg-build --knn K) */
};

/* What each kind is, for the programs that list, document or validate
 * them: one row per kind, written in the rule's own file. */
typedef struct policy_info {
	const char *name;
	const char *summary;   /* what it accepts, one line */
	const char *guarantee; /* what its output promises, one line */
	int n_args;
	policy_arg_info args[POLICY_MAX_ARGS];
	unsigned needs;        /* POLICY_NEEDS_* */
} policy_info;

/* The row of kind k, or NULL past the last. */
const policy_info *policy_info_of(int k);

/* The kind called name ("sd", "ssd", "pcg", ...), or -1. */
int policy_kind_from_name(const char *name);
const char *policy_kind_name(policy_kind k);

/* The index of parameter name in kind's args, or -1. */
int policy_arg_index(int kind, const char *name);

/* The kinds' names into buf, separated by ", " and the last by last_sep
 * (" or ": "sd, ssd, pcg or greedy"). Returns buf. */
const char *policy_names(char *buf, size_t size, const char *last_sep);

#define POLICY_MAX_L 32
#define POLICY_DEFAULT_TRIALS 64

typedef struct policy_params {
	policy_kind kind;
	double beta;         /* ssd: tolerance, >= 0 (the SSD paper uses 0.4) */
	const asg *groups;   /* pcg: the ASG (borrowed); NULL: every token a singleton;
			      * lantern: the neighbour file (asg-build --knn) */
	int max_trials;      /* pcg: thinning trials before the exact residual; 0: default */
	int end_token;       /* id in [0, V) that ends generation; -1: none */
	double arg[POLICY_MAX_ARGS]; /* the rule's parameters, in the order of its info's args */
	unsigned arg_set;    /* bit i: arg[i] was given; the others take their defaults */
} policy_params;

/* One checked draft position. */
typedef struct policy_step {
	int draft;      /* x_i */
	int accepted;
	double ratio;   /* the acceptance probability used: sd min(1, q/p), ssd that
			 * + beta capped at 1, pcg min(1, Q_c/P_c), lantern
			 * min(1, q'/p), greedy, typical and topk 0 or 1 */
	int group;      /* pcg: K_i; otherwise -1 */
	double pm, qm;  /* pcg: P_c(G_K), Q_c(G_K); lantern p(x), q'(x); otherwise
			 * p(x), q(x) */
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
 * an argument out of its range, an ASG covering more than V tokens, a
 * missing neighbour file, end_token out of range. */
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
