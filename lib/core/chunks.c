/* chunks.c: the chunk schedule (see chunks.h). */
#include "chunks.h"

#include <assert.h>

int pcg_chunk_end(int s, int chunk, int first)
{
	assert(chunk >= 1 && s >= 0);
	/* The starts of the growing chunks are (2^k - 1) first, and the one
	 * at s is 2^k first = s + first codes long: the size doubles from
	 * first, and is held at chunk once it would pass it. */
	if (first < 1 || first >= chunk || s + first >= chunk)
		return s + chunk;
	return s + s + first;
}

int pcg_chunk_check(int chunk, int first, pcg_err *err)
{
	if (first >= 0 && first <= chunk)
		return 0;
	if (chunk == 0)
		return pcg_fail(err, "%d: want 0 with chunk 0 (the whole utterance at once)", first);
	return pcg_fail(err, "%d: want 0 to %d, the chunk (0 or %d: every chunk %d codes)", first,
			chunk, chunk, chunk);
}
