/* fuzz_http.c: libFuzzer target for pcg-httpd's HTTP/1.1 parser, the one
 * parser that faces the network: request lines, headers and their limits,
 * Content-Length and chunked bodies (chunk sizes, extensions, trailers),
 * several requests kept alive on one connection. The input arrives in
 * pieces of a size its first byte chooses (1 to 64 bytes, or whole), as
 * recv would split it, through the loop's own code (http_fuzz_feed, built
 * with -DPCG_HTTP_FUZZ). Corpus: tests/fuzz/corpus/http (README.md). */
#include <stddef.h>
#include <stdint.h>

int http_fuzz_feed(const unsigned char *data, size_t n, size_t piece);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const size_t piece = data[0] < 192 ? (size_t)(data[0] % 64) + 1 : size;
	http_fuzz_feed(data + 1, size - 1, piece);
	return 0;
}
