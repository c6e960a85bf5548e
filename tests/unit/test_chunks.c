/* test_chunks.c: the chunk schedule (lib/core/chunks.c) that the verifier,
 * codec-decode's daemon and offline codec-decode share: the chunks' sizes
 * for growing and fixed schedules, written out here by hand; boundaries
 * that cover every code once; first checked against chunk. */
#include <string.h>

#include "check.h"
#include "chunks.h"

/* The sizes of the first n chunks from code 0 equal want[0..n). */
static void sizes(int chunk, int first, const int *want, int n)
{
	char got[256] = "";
	int s = 0, same = 1;

	for (int i = 0; i < n; i++) {
		const int e = pcg_chunk_end(s, chunk, first);
		snprintf(got + strlen(got), sizeof got - strlen(got), " %d", e - s);
		same &= e - s == want[i];
		s = e;
	}
	CHECKF(same, "chunk %d, first %d: sizes%s", chunk, first, got);
}

int main(void)
{
	pcg_err err = { "" };

	sizes(25, 5, (const int[]){ 5, 10, 20, 25, 25, 25 }, 6);   /* the default */
	sizes(25, 3, (const int[]){ 3, 6, 12, 24, 25, 25 }, 6);
	sizes(25, 13, (const int[]){ 13, 25, 25 }, 3);
	sizes(25, 24, (const int[]){ 24, 25, 25 }, 3);
	sizes(10, 7, (const int[]){ 7, 10, 10 }, 3);
	sizes(100, 1, (const int[]){ 1, 2, 4, 8, 16, 32, 64, 100, 100 }, 9);
	sizes(25, 25, (const int[]){ 25, 25, 25 }, 3);             /* fixed */
	sizes(25, 0, (const int[]){ 25, 25, 25 }, 3);
	sizes(1, 0, (const int[]){ 1, 1, 1 }, 3);
	sizes(1, 1, (const int[]){ 1, 1, 1 }, 3);
	/* a long run: every end beyond its start, by chunk at most */
	int s = 0, ok = 1;
	for (int i = 0; i < 100000 && ok; i++) {
		const int e = pcg_chunk_end(s, 25, 5);
		ok = e > s && e - s <= 25;
		s = e;
	}
	CHECK(ok);
	/* the check: 0 to chunk */
	CHECK(pcg_chunk_check(25, 0, &err) == 0 && pcg_chunk_check(25, 25, &err) == 0);
	CHECK(pcg_chunk_check(25, 5, &err) == 0 && pcg_chunk_check(0, 0, &err) == 0);
	CHECK(pcg_chunk_check(25, 26, &err) < 0);
	CHECKF(strstr(err.msg, "26: want 0 to 25") != NULL, "%s", err.msg);
	CHECK(pcg_chunk_check(25, -1, &err) < 0);
	CHECK(pcg_chunk_check(0, 5, &err) < 0);
	CHECKF(strstr(err.msg, "5: want 0 with chunk 0") != NULL, "%s", err.msg);
	return check_done("test_chunks");
}
