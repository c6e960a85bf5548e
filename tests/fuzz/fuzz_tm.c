/* fuzz_tm.c: libFuzzer target for the transition-matrix file reader
 * (tm_from_memory, the validation tm_open runs) and, for an input that
 * opens, every row's entries, a few log-probabilities and a submatrix.
 * Corpus: tests/fuzz/corpus/tm (README.md). */
#include <stddef.h>
#include <stdint.h>

#include "tm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static volatile double sink;
	pcg_err err;
	tmat *t = tm_from_memory(data, size, "fuzz", &err);

	if (t == NULL)
		return 0;
	const tm_view *v = tm_get(t);
	double s = 0.0, sub[16];
	uint32_t tok[4];
	for (uint32_t a = 0; a < v->n && a < 4096; a++)
		s += tm_logq(t, a, a) + tm_logq(t, a, v->n - 1 - a);
	for (int i = 0; i < 4; i++)
		tok[i] = v->n ? (uint32_t)(i * 7919u) % v->n : 0;
	if (v->n && tm_submatrix(t, tok, 4, sub, &err) == 0)
		s += sub[5];
	sink = s;
	tm_close(&t);
	return 0;
}
