/* fuzz_asg.c: libFuzzer target for the ASG file reader (asg_from_memory,
 * the same validation asg_open runs on a file) and, for an input that
 * opens, everything a reader of the view walks: every group's members and
 * weights, every token's groups, the statistics, and the lantern policy's
 * use of it as a neighbour file. The whole input is the image. Corpus: tests/fuzz/corpus/asg (README.md). */
#include <stddef.h>
#include <stdint.h>

#include "asg.h"
#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static volatile double sink;
	pcg_err err;
	asg *a = asg_from_memory(data, size, "fuzz", &err);

	if (a == NULL)
		return 0;
	const asg_view *v = asg_get(a);
	double s = 0.0;
	for (uint32_t k = 0; k < v->M; k++)
		for (uint64_t j = v->grp_start[k]; j < v->grp_start[k + 1]; j++)
			s += v->grp_w[j] * v->grp_tok[j];
	for (uint32_t t = 0; t < v->n; t++)
		for (uint64_t j = v->tok_start[t]; j < v->tok_start[t + 1]; j++)
			s += v->tok_w[j] * v->tok_grp[j];
	asg_stats st;
	asg_stats_get(a, &st);
	sink = s + st.mean_size;
	/* as a neighbour file: lantern either refuses it or builds its lists */
	policy_params pp = { .kind = POLICY_LANTERN, .groups = a, .end_token = -1 };
	policy *pl = v->n <= (1u << 16) ? policy_new(&pp, (int)v->n, &err) : NULL;
	policy_free(&pl);
	asg_close(&a);
	return 0;
}
