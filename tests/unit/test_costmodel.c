/* test_costmodel.c: lib/speculate/costmodel.c against its closed forms, and its choice
 * of lookahead against a brute-force search of the same formulas; a
 * simulation of pipelined rounds (Bernoulli acceptance, the round's costs
 * as lib/speculate spends them) checks the pipelined formula's share of
 * rounds that find their drafts ready; bad --costs strings name the field. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "costmodel.h"
#include "rng.h"

static int near(double a, double b, double tol)
{
	return fabs(a - b) <= tol * fmax(1, fabs(b));
}

/* Rounds of lib/speculate simulated: each draft position accepted with
 * probability a[i] given the ones before; pipelined, a round whose drafts
 * and first draft ahead were all accepted leaves the next round's drafts
 * ready, otherwise the next round drafts first. Returns tokens / second. */
static double simulate(const cost_terms *c, cost_kind kind, const double *a, int L, int rounds,
		       uint64_t seed)
{
	pcg_rng rng;
	double t = 0, tokens = 0;
	int ready = 0;

	pcg_rng_init(&rng, seed, 0);
	for (int r = 0; r < rounds; r++) {
		const double blk = c->step * (1 + c->slope * L);
		int k = 0;
		while (k < L && pcg_rng_uniform(&rng) < a[k])
			k++;
		tokens += k + 1;
		if (kind == COST_SEQUENTIAL) {
			t += 2 * c->trip + L * c->draft + blk;
			continue;
		}
		if (!ready)
			t += c->trip + L * c->draft;
		t += c->trip + fmax(blk, (L + 1) * c->draft);
		/* the first draft ahead is checked when all L were accepted */
		ready = k == L && pcg_rng_uniform(&rng) < a[L];
	}
	return tokens / t;
}

int main(void)
{
	pcg_err err = { "" };
	const double a[8] = { 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1 };
	cost_terms c;

	/* E(L) = 1 + a1 + a1 a2 + ... */
	CHECK(near(cost_tokens_per_round(a, 0), 1, 1e-12));
	CHECK(near(cost_tokens_per_round(a, 1), 1.8, 1e-12));
	CHECK(near(cost_tokens_per_round(a, 3), 1 + 0.8 + 0.56 + 0.336, 1e-12));

	CHECK(cost_terms_parse("2,0.5,0.25,0.1", &c, &err) == 0);
	CHECK(near(c.step, 2e-3, 1e-12) && near(c.draft, 0.5e-3, 1e-12) &&
	      near(c.slope, 0.25, 1e-12) && near(c.trip, 0.1e-3, 1e-12));
	/* the closed forms of costmodel.h */
	const double blk3 = 2e-3 * (1 + 0.25 * 3);
	CHECK(near(cost_round_seconds(&c, COST_NONE, a, 3), 2.1e-3, 1e-12));
	CHECK(near(cost_round_seconds(&c, COST_SEQUENTIAL, a, 3), 0.2e-3 + 1.5e-3 + blk3, 1e-12));
	CHECK(near(cost_round_seconds(&c, COST_MTP, a, 3), 0.1e-3 + blk3, 1e-12));
	/* the heads: each of L at each of the block's L + 1 positions; Viterbi
	 * scores one position and keeps every head's token */
	cost_terms h;
	CHECK(cost_terms_parse("2,0,0.25,0.1,0.05", &h, &err) == 0 && near(h.head, 0.05e-3, 1e-12));
	CHECK(near(cost_round_seconds(&h, COST_MTP, a, 3), 0.1e-3 + blk3 + 12 * 0.05e-3, 1e-12));
	const double e3 = 1 + 0.8 + 0.56 + 0.336; /* E(3): the block it scores */
	CHECK(near(cost_round_seconds(&h, COST_VITERBI, a, 3),
		   0.1e-3 + 2e-3 * (1 + 0.25 * (e3 - 1)) + 3 * 0.05e-3, 1e-12));
	h.heads = 3; /* 3 heads asked for at each position of a block of 2 */
	CHECK(near(cost_round_seconds(&h, COST_MTP, a, 1),
		   0.1e-3 + 2e-3 * (1 + 0.25) + 6 * 0.05e-3, 1e-12));
	h.heads = 0;
	const double all[4] = { 1, 1, 1, 1 };
	CHECK(near(cost_tokens_per_second(&h, COST_VITERBI, all, 3),
		   4 / (0.1e-3 + 2e-3 * 1.75 + 0.15e-3), 1e-12));
	const double full = 0.8 * 0.7 * 0.6 * 0.5;
	CHECK(near(cost_round_seconds(&c, COST_PIPELINED, a, 3),
		   0.1e-3 + blk3 + (1 - full) * (0.1e-3 + 1.5e-3), 1e-12));
	CHECK(near(cost_tokens_per_second(&c, COST_NONE, a, 3), 1 / 2.1e-3, 1e-12));
	/* the target alone's runs: a trip for 16 tokens; a run of 1 is a token a trip */
	cost_terms run = c;
	run.run = 16;
	CHECK(near(cost_round_seconds(&run, COST_NONE, a, 1), 2e-3 + 0.1e-3 / 16, 1e-12));
	run.run = 1;
	CHECK(near(cost_round_seconds(&run, COST_NONE, a, 1), 2.1e-3, 1e-12));
	/* its steps back to back (run_step) where measured; drafting rounds
	 * keep the step from cold caches */
	run.run_step = 1.5e-3;
	CHECK(near(cost_round_seconds(&run, COST_NONE, a, 1), 1.6e-3, 1e-12));
	CHECK(near(cost_round_seconds(&run, COST_SEQUENTIAL, a, 3), 0.2e-3 + 1.5e-3 + blk3, 1e-12));
	/* a draft slower than the block: the longer of the two */
	cost_terms slow = c;
	slow.draft = 2e-3;
	CHECK(near(cost_round_seconds(&slow, COST_PIPELINED, a, 1),
		   0.1e-3 + 4e-3 + (1 - 0.8 * 0.7) * (0.1e-3 + 2e-3), 1e-12));

	/* overlap 1: the draft's steps ahead add to the block */
	cost_terms ov;
	CHECK(cost_terms_parse("2,0.5,0.25,0.1,0,1", &ov, &err) == 0 && near(ov.overlap, 1, 1e-12));
	CHECK(near(cost_round_seconds(&ov, COST_PIPELINED, a, 3),
		   0.1e-3 + blk3 + 2e-3 + (1 - full) * (0.1e-3 + 1.5e-3), 1e-12));

	/* the best lookahead is the brute-force argmax of the same formula */
	for (int kind = COST_SEQUENTIAL; kind <= COST_MTP; kind++) {
		int best = 1;
		for (int L = 2; L <= 7; L++)
			if (cost_tokens_per_second(&c, kind, a, L) >
			    cost_tokens_per_second(&c, kind, a, best))
				best = L;
		CHECKF(cost_best_lookahead(&c, kind, a, 7) == best, "kind %d: %d, want %d", kind,
		       cost_best_lookahead(&c, kind, a, 7), best);
	}
	/* certain acceptance and free blocks: the longest; none accepted: 1 */
	const double one[8] = { 1, 1, 1, 1, 1, 1, 1, 1 }, zero[8] = { 0 };
	cost_terms free_blk = { .step = 1e-3, .draft = 0.1e-3, .trip = 0.1e-3 };
	CHECK(cost_best_lookahead(&free_blk, COST_PIPELINED, one, 7) == 7);
	CHECK(cost_best_lookahead(&c, COST_PIPELINED, zero, 7) == 1);

	/* the pipelined formula against simulated rounds (200,000 each, so
	 * the simulation's relative error is below 0.5 %) */
	for (int L = 1; L <= 5; L++)
		for (int kind = COST_SEQUENTIAL; kind <= COST_PIPELINED; kind++) {
			const double want = cost_tokens_per_second(&c, kind, a, L);
			const double got = simulate(&c, kind, a, L, 200000, 7 + (uint64_t)L);
			CHECKF(near(got, want, 0.01), "L %d, kind %d: simulated %.1f tokens/s, the "
			       "formula %.1f", L, kind, got, want);
		}

	/* bad strings name what is wrong */
	static const struct { const char *s, *want; } bad[] = {
		{ "", "target step" }, { "1", "separated by commas" }, { "1,2,3", "separated by commas" },
		{ "1,2,3,4,5,0.5,7", "trailing" }, { "1,2,3,4,5,2", "overlap" }, { "1,2,3,4;", "trailing" }, { "0,1,1,1", "must be > 0" },
		{ "1,-1,1,1", "draft step" }, { "1,x,1,1", "draft step" },
		{ "1,1,nan,1", "block slope" }, { "1,1,1,1e9", "trip" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		err.msg[0] = '\0';
		CHECKF(cost_terms_parse(bad[i].s, &c, &err) < 0 && strstr(err.msg, bad[i].want),
		       "'%s': want an error naming '%s', got '%s'", bad[i].s, bad[i].want,
		       err.msg);
	}
	return check_done("test_costmodel");
}
