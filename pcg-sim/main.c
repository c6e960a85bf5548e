/* pcg-sim: runs a verification policy many times on one position
 * (lookahead 1) with a fixed draft distribution p and target distribution q,
 * for offline study and tests: acceptance rate, emitted tokens, emitted
 * groups (pcg) and thinning trials.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asg.h"
#include "opts.h"
#include "policy.h"
#include "rng.h"

static const char *prog = "pcg-sim";
static const char *SYNOPSIS =
	"--policy NAME [--beta B] [--epsilon E --alpha A] [--k K] [--delta D] [--asg FILE]\n"
	"       --draft P.f32 --target Q.f32 [--trials N] [--seed S]";

static const char *policy_s, *asg_path, *draft_path, *target_path;
static int trials, seed;

/* from lib/speculate/policy.c's table, at the start of main */
static char policy_help[256], policy_want[300];

/* The fixed options, then one per parameter name of the rules (--beta,
 * --epsilon, --alpha, --k, --delta), added from lib/speculate/policy.c's table. */
#define MAX_ARG_OPTS 16
static double arg_value[MAX_ARG_OPTS];
static char arg_help[MAX_ARG_OPTS][160];
static pcg_opt opts[8 + MAX_ARG_OPTS] = {
	{ "policy", PCG_OPT_STR | PCG_OPT_REQUIRED, &policy_s, NULL, 1, 0, "P", policy_help },
	{ "asg", PCG_OPT_STR, &asg_path, NULL, 1, 0, "FILE",
	  "pcg: the ASG file (- for stdin; without it every token is its own group); "
	  "lantern: the neighbour file (asg-build --knn K)" },
	{ "draft", PCG_OPT_STR | PCG_OPT_REQUIRED, &draft_path, NULL, 1, 0, "FILE", "p: raw little-endian float32" },
	{ "target", PCG_OPT_STR | PCG_OPT_REQUIRED, &target_path, NULL, 1, 0, "FILE", "q: raw little-endian float32" },
	{ "trials", PCG_OPT_INT, &trials, "100000", 1, 2147483647, "N", "rounds to run" },
	{ "seed", PCG_OPT_INT, &seed, "1", 0, 2147483647, "S", "random seed" },
	{ NULL },
};

/* Appends an option per distinct parameter name of the rules; returns the
 * index of the first. */
static int add_arg_opts(void)
{
	int n = 0, first;

	while (opts[n].name)
		n++;
	first = n;
	for (int k = 0; policy_info_of(k); k++) {
		const policy_info *pi = policy_info_of(k);
		for (int i = 0; i < pi->n_args; i++) {
			const policy_arg_info *a = &pi->args[i];
			int j = first;
			while (j < n && strcmp(opts[j].name, a->name))
				j++;
			if (j == n && n - first < MAX_ARG_OPTS) {
				snprintf(arg_help[n - first], sizeof arg_help[0], "%s", a->help);
				opts[n] = (pcg_opt){ a->name, PCG_OPT_FLOAT, &arg_value[n - first], NULL,
						     1, 0, "X", arg_help[n - first] };
				n++;
			}
		}
	}
	opts[n] = (pcg_opt){ NULL };
	return first;
}

/* The flags given that kind does not take: the first one's name, or NULL. */
static const char *stray_arg(int kind, int first)
{
	for (int j = first; opts[j].name; j++)
		if (pcg_opts_given(opts, opts[j].name) && policy_arg_index(kind, opts[j].name) < 0)
			return opts[j].name;
	return NULL;
}

/* Reads a probability vector: float32 values, finite and >= 0, summing to 1
 * within 1e-3; normalised to sum 1. */
static float *read_probs(const char *path, int *V, pcg_err *err)
{
	FILE *f = fopen(path, "rb");
	size_t cap = 4096, len = 0, n;
	char *b = NULL;
	double sum = 0.0;

	if (f == NULL) {
		pcg_fail(err, "%s: %s", path, strerror(errno));
		return NULL;
	}
	for (;;) {
		char *w = realloc(b, cap);
		if (w == NULL) {
			pcg_fail(err, "%s: out of memory", path);
			goto fail;
		}
		b = w;
		len += fread(b + len, 1, cap - len, f);
		if (len < cap)
			break;
		cap *= 2;
	}
	if (ferror(f)) {
		pcg_fail(err, "%s: %s", path, strerror(errno));
		goto fail;
	}
	n = len / 4;
	if (len % 4 != 0 || n == 0 || n > 0x7fffffff) {
		pcg_fail(err, "%s: %zu bytes: want a non-empty sequence of float32 values", path,
			 len);
		goto fail;
	}
	float *v = (float *)b; /* realloc'd memory is aligned for float */
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(v[i]) || v[i] < 0.0f) {
			pcg_fail(err, "%s: entry %zu is %g: probabilities must be finite and >= 0",
				 path, i, (double)v[i]);
			goto fail;
		}
		sum += v[i];
	}
	if (fabs(sum - 1.0) > 1e-3) {
		pcg_fail(err, "%s: the %zu entries sum to %.9g, not 1 within 1e-3", path, n, sum);
		goto fail;
	}
	for (size_t i = 0; i < n; i++)
		v[i] = (float)(v[i] / sum);
	fclose(f);
	*V = (int)n;
	return v;
fail:
	fclose(f);
	free(b);
	return NULL;
}

int main(int argc, char **argv)
{
	const int first_arg = add_arg_opts();
	char stray[128] = "";
	policy_names(policy_help, sizeof policy_help, " or ");
	snprintf(policy_want, sizeof policy_want, "--policy: want %s", policy_help);
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err), kind, V = 0, Vq = 0, rc = 1;
	float *p = NULL, *q = NULL;
	double *cdf = NULL;
	long *tok = NULL, *grp = NULL, accepted = 0, rejections = 0, trial_sum = 0;
	long n_labels = 0;
	asg *a = NULL;
	policy *pl = NULL;
	pcg_rng rng;

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	kind = policy_s ? policy_kind_from_name(policy_s) : -1;
	const policy_info *pi = policy_info_of(kind);
	if (pi && stray_arg(kind, first_arg))
		snprintf(stray, sizeof stray, "--%s: --policy %s takes no such parameter",
			 stray_arg(kind, first_arg), pi->name);
	const char *bad = first < 0 ? err.msg
		: first != argc ? "unexpected argument"
		: kind < 0 ? policy_want
		: *stray ? stray
		: asg_path && !(pi->needs & (POLICY_NEEDS_ASG | POLICY_NEEDS_KNN))
		? "--asg is for --policy pcg and lantern"
		: !asg_path && (pi->needs & POLICY_NEEDS_KNN)
		? "--policy lantern needs --asg FILE, a neighbour file (asg-build --knn K)" : NULL;
	/* the policy's parameters: given (in range) or their defaults */
	double args[POLICY_MAX_ARGS] = { 0 };
	for (int i = 0; !bad && i < pi->n_args; i++) {
		const policy_arg_info *ai = &pi->args[i];
		int j = first_arg;
		while (strcmp(opts[j].name, ai->name))
			j++;
		const int given = pcg_opts_given(opts, ai->name);
		const double v = arg_value[j - first_arg];
		args[i] = given ? v : ai->def;
		if (given && !(v >= ai->min && v <= ai->max)) {
			snprintf(stray, sizeof stray, "--%s %.10g: want %.10g to %.10g", ai->name, v,
				 ai->min, ai->max);
			bad = stray;
		}
	}
	if (bad)
		return pcg_usage_error(prog, SYNOPSIS, opts, bad);
	p = read_probs(draft_path, &V, &err);
	q = p ? read_probs(target_path, &Vq, &err) : NULL;
	if (q == NULL)
		goto fail;
	if (V != Vq) {
		pcg_fail(&err, "%s has %d entries, %s has %d: want the same length", draft_path, V,
			 target_path, Vq);
		goto fail;
	}
	if (asg_path && (a = asg_open(asg_path, &err)) == NULL)
		goto fail;
	policy_params pp = { .kind = (policy_kind)kind, .groups = a, .end_token = -1 };
	for (int i = 0; i < pi->n_args; i++) {
		pp.arg[i] = args[i];
		pp.arg_set |= 1u << i;
	}
	if ((pl = policy_new(&pp, V, &err)) == NULL)
		goto fail;

	/* Group labels: the ASG's M groups, then one per token at or beyond n. */
	if (kind == POLICY_PCG)
		n_labels = a ? (long)asg_get(a)->M + (V - (long)asg_get(a)->n) : V;
	cdf = malloc((size_t)V * sizeof *cdf);
	tok = calloc((size_t)V, sizeof *tok);
	grp = calloc((size_t)(n_labels ? n_labels : 1), sizeof *grp);
	if (!cdf || !tok || !grp) {
		pcg_fail(&err, "out of memory");
		goto fail;
	}
	for (int i = 0; i < V; i++)
		cdf[i] = (i ? cdf[i - 1] : 0.0) + p[i];

	pcg_rng_init(&rng, (uint64_t)seed, 0);
	for (int t = 0; t < trials; t++) {
		const float *pv[1] = { p }, *qv[2] = { q, NULL };
		policy_result res;
		/* x ~ p: the first i with cdf[i] > u * total (never a zero entry) */
		double target = pcg_rng_uniform(&rng) * cdf[V - 1];
		int lo = 0, hi = V - 1;
		while (lo < hi) {
			int mid = lo + (hi - lo) / 2;
			if (cdf[mid] > target)
				hi = mid;
			else
				lo = mid + 1;
		}
		if (policy_run(pl, 1, &lo, pv, qv, &rng, &res, &err) < 0)
			goto fail;
		accepted += res.n_accepted;
		tok[res.tokens[0]]++;
		if (kind == POLICY_PCG)
			grp[res.groups[0]]++;
		if (res.rejected) {
			rejections++;
			trial_sum += res.trials;
		}
	}

	printf("accept_rate\t%.6f\n", (double)accepted / trials);
	for (int i = 0; i < V; i++)
		if (tok[i])
			printf("token\t%d\t%ld\n", i, tok[i]);
	for (long k = 0; k < n_labels; k++)
		if (grp[k])
			printf("group\t%ld\t%ld\n", k, grp[k]);
	printf("mean_trials\t%.6f\n",
	       kind == POLICY_PCG && rejections ? (double)trial_sum / rejections : 0.0);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		pcg_fail(&err, "stdout: write failed");
		goto fail;
	}
	rc = 0;
	goto out;
fail:
	rc = pcg_report(prog, &err);
out:
	policy_free(&pl);
	asg_close(&a);
	free(p);
	free(q);
	free(cdf);
	free(tok);
	free(grp);
	return rc;
}
