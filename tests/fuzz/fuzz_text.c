/* fuzz_text.c: libFuzzer target for the text parsers of untrusted input
 * other than the protocol: config.json (llama_config_parse), tokenizer.json
 * (tok_parse, then an encode of a short text), speech codes as text and
 * as int32 (codes_parse), and voice.json (voice_parse). The first byte
 * picks the parser (0xff: voice.json; else its value mod 4), the rest is
 * the input (a tokenizer.json, a config.json, codes). Corpus: tests/fuzz/corpus/text (README.md). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "codes.h"
#include "config.h"
#include "tokenizer.h"
#include "voice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	pcg_err err;

	if (size < 1)
		return 0;
	const char *s = (const char *)data + 1;
	const size_t n = size - 1;
	if (data[0] == 0xff) {
		voice_info v;
		voice_parse(s, n, "fuzz", &v, &err);
		return 0;
	}
	switch (data[0] % 4) {
	case 0: {
		llama_config c;
		llama_config_parse(s, n, &c, &err);
		break;
	}
	case 1: {
		tokenizer *t = tok_parse(s, n, &err);
		if (t) {
			int *ids = NULL;
			size_t m = 0;
			tok_encode(t, "Hello, world. 123", 17, &ids, &m, &err);
			free(ids);
			tok_free(&t);
		}
		break;
	}
	default: {
		int32_t *out = NULL;
		size_t m = 0;
		codes_parse(s, n, data[0] % 4 == 2 ? CODES_TEXT : CODES_I32, &out, &m, &err);
		free(out);
		break;
	}
	}
	return 0;
}
