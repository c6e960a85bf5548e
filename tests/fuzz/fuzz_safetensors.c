/* fuzz_safetensors.c: libFuzzer target for the safetensors header reader
 * (st_from_memory, the validation st_open runs on a file: header length,
 * JSON, dtypes, shapes, offsets, overlaps, metadata) and, for an input that
 * opens, every tensor's bytes and the first elements of each float tensor
 * as f32. Corpus: tests/fuzz/corpus/safetensors (README.md). */
#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static float v[64];
	static volatile unsigned sink;
	pcg_err err;
	st_ckpt *c = st_from_memory(data, size, "fuzz", &err);

	if (c == NULL)
		return 0;
	for (int i = 0; i < st_count(c); i++) {
		const st_tensor *t = st_get(c, i);
		const uint8_t *p = t->data;
		unsigned s = 0;
		for (size_t j = 0; j < t->nbytes; j++)
			s += p[j];
		sink = s + (st_find(c, t->name) == t);
		if (t->dtype != PCG_DTYPE_OTHER && t->numel > 0)
			pcg_to_f32(v, t->data, t->dtype, t->numel < 64 ? (size_t)t->numel : 64);
	}
	st_close(&c);
	return 0;
}
