/* fuzz_gguf.c: libFuzzer target for the GGUF reader (gguf_from_memory) and
 * what reads a file's metadata after it: llama_config_from_gguf and
 * tok_from_gguf. Every tensor of a file that opens is read whole, and the
 * first block of each one the engine can use is dequantised. Built with
 * clang -fsanitize=fuzzer,address,undefined; `make test` runs the committed
 * corpus (tests/fuzz/corpus/gguf) once; longer runs: see tests/fuzz/README.
 *
 * The corpus started from tests/fixtures/gguf/{tiny-llama,types}.gguf, the
 * file of `test_gguf --write` and a six-token tokenizer GGUF, grew in a run
 * of 3,885,400 executions in 76 s (-max_len=24000, no crash) and was merged
 * (-merge=1: 355 inputs, 6534 features, 2166 edges); later runs: README.md. */
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "gguf.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static float v[256];
	static volatile unsigned sink;
	pcg_err err;
	llama_config c;
	gguf_file *f = gguf_from_memory(data, size, &err);
	tokenizer *t;

	if (f == NULL)
		return 0;
	for (int i = 0; i < gguf_n_tensors(f); i++) {
		const gguf_tensor *x = gguf_tensor_at(f, i);
		const uint8_t *p = x->data;
		unsigned s = 0;
		for (size_t j = 0; j < x->nbytes; j++)
			s += p[j];
		sink = s;
		if (x->dtype != PCG_DTYPE_OTHER && x->ne[0] >= pcg_dtype_block(x->dtype))
			pcg_to_f32(v, x->data, x->dtype, (size_t)pcg_dtype_block(x->dtype));
	}
	for (int i = 0; i < gguf_n_kv(f); i++) {
		const char *key = gguf_key(f, i), *s;
		gguf_type et;
		size_t n, len;
		double d;
		if (gguf_get_arr(f, key, &et, &n, &err) == 0 && n > 0 &&
		    gguf_arr_str(f, key, n - 1, &s, &len, &err) == 0 && len > 0)
			sink = (unsigned char)s[len - 1];
		if (gguf_get_arr(f, key, &et, &n, &err) == 0 && n > 0 &&
		    gguf_arr_num(f, key, n - 1, &d, &err) == 0)
			sink = d > 0;
	}
	sink = (unsigned)llama_config_from_gguf(f, &c, &err);
	t = tok_from_gguf(f, &err);
	tok_free(&t);
	gguf_close(&f);
	return 0;
}
