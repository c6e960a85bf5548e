/* bench/costmodel.c: lib/speculate/costmodel.c's prediction for measured terms, so
 * that a bench can print it beside what it measured (bench/speedup.sh):
 * tokens per second of a round of L drafts, from the target's step, the
 * draft's step, a block's slope, the fixed cost of a trip and the
 * acceptance per draft position (the share of rounds that accepted it, as
 * pcg-synth's "acceptance per position" prints it). With --lookahead 0 it
 * also prints the lookahead the model finds best and what it predicts.
 * --drafting SHARE mixes in rounds of the target alone, as lookahead auto
 * runs them where drafting would not pay.
 * Usage: bench-costmodel --costs STEP_MS,DRAFT_MS,SLOPE,TRIP_MS
 *          --kind none|sequential|pipelined|mtp|viterbi [--accept A1,A2,...] [--lookahead L]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "opts.h"

static const char *costs, *kind_s, *accept_s;
static double lookahead, drafting, run_step;
static int heads;

static const pcg_opt opts[] = {
	{ "costs", PCG_OPT_STR | PCG_OPT_REQUIRED, &costs, NULL, 1, 0, "S,D,B,T[,H]",
	  "the target's step (ms), the draft's step (ms), a block's slope, a trip (ms), "
	  "an MTP head at one position (ms)" },
	{ "kind", PCG_OPT_STR, &kind_s, "pipelined", 1, 0, "KIND",
	  "none, sequential, pipelined, mtp or viterbi" },
	{ "accept", PCG_OPT_STR, &accept_s, "", 0, 0, "A1,A2,...",
	  "the share of rounds that accepted draft position 1, 2, ..." },
	{ "lookahead", PCG_OPT_FLOAT, &lookahead, "0", 0, 15, "L",
	  "drafts a drafting round (a mean is rounded; 0: the best, as auto chooses)" },
	{ "heads", PCG_OPT_INT, &heads, "0", 0, 16, "H",
	  "mtp: the heads a score asks for at each position (0: the lookahead)" },
	{ "drafting", PCG_OPT_FLOAT, &drafting, "1", 0, 1, "SHARE",
	  "the share of rounds that draft; the others are the target's alone" },
	{ "run-step", PCG_OPT_FLOAT, &run_step, "0", 0, 1e6, "MS",
	  "the target's step back to back, its rounds alone (0: the step)" },
	{ NULL },
};

int main(int argc, char **argv)
{
	static const char *kinds[] = { "none", "sequential", "pipelined", "mtp", "viterbi" };
	pcg_err err = { "" };
	cost_terms c;
	double u[16] = { 0 }, a[17];
	int n = 0, kind = -1;

	int first = pcg_opts_parse(opts, argc, argv, &err);
	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, "bench-costmodel", "--costs S,D,B,T [options]", opts);
		return 0;
	}
	if (first < 0 || first != argc)
		return pcg_usage_error("bench-costmodel", "--costs S,D,B,T [options]", opts,
				       first < 0 ? err.msg : "no operands");
	for (int i = 0; i < 5; i++)
		if (!strcmp(kind_s, kinds[i]))
			kind = i;
	if (kind < 0)
		return pcg_usage_error("bench-costmodel", "--costs S,D,B,T [options]", opts,
				       "--kind: none, sequential, pipelined, mtp or viterbi");
	if (cost_terms_parse(costs, &c, &err) < 0) {
		fprintf(stderr, "bench-costmodel: %s\n", err.msg);
		return 2;
	}
	c.heads = heads;
	c.run_step = run_step * 1e-3;
	for (const char *p = accept_s; *p && n < 16;) {
		char *end;
		u[n++] = strtod(p, &end);
		if (end == p) {
			fprintf(stderr, "bench-costmodel: --accept '%s': numbers separated by commas\n",
				accept_s);
			return 2;
		}
		p = *end == ',' ? end + 1 : end;
	}
	/* the conditional acceptance of each position from the unconditional
	 * shares; a position not measured takes the last one's */
	for (int i = 0; i < 17; i++) {
		const double prev = i == 0 ? 1 : u[i - 1];
		a[i] = i < n ? (prev > 0 ? u[i] / prev : 0) : i > 0 ? a[i - 1] : 0;
		if (a[i] > 1)
			a[i] = 1;
	}
	int L = (int)(lookahead + 0.5);
	if (L < 1) {
		L = cost_best_lookahead(&c, (cost_kind)kind, a, 7);
		printf("best lookahead %d\n", L);
	}
	const double e = kind == COST_NONE ? 1.0 : cost_tokens_per_round(a, L);
	const double t = cost_round_seconds(&c, (cost_kind)kind, a, L);
	const double t1 = cost_round_seconds(&c, COST_NONE, a, 1);
	const double d = kind == COST_NONE ? 0 : drafting;
	printf("%.1f tokens/s predicted (a drafting round %.3f ms, %.3f tokens; %.0f%% of rounds "
	       "drafting)\n", (d * e + (1 - d)) / (d * t + (1 - d) * t1), t * 1e3, e, 100 * d);
	return 0;
}
