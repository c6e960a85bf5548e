/* fuzz_proto.c: libFuzzer target for the message decoder (proto_parse), the
 * code that reads every byte a peer sends. Built with clang
 * -fsanitize=fuzzer,address,undefined; `make test` runs the committed
 * corpus (tests/fuzz/corpus/proto) once; longer runs: see tests/fuzz/README. */
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static proto_msg m;
	static float v[1 << 16];
	pcg_err err;

	if (proto_parse(data, size, &m, &err) == 0 && m.type == PROTO_PROBS && m.probs.n_vec > 0 &&
	    m.probs.width <= (int)(sizeof v / sizeof v[0])) /* reads the payload's last bytes: */
		proto_vector(&m.probs, m.probs.n_vec - 1, v);
	return 0;
}
