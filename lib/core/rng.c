/* rng.c: Philox4x32-10 and the streams of draws built on it (see rng.h).
 *
 * The block function follows Salmon et al., SC 2011, as Random123 does:
 * each round multiplies words 0 and 2 by two constants, mixes the high
 * halves with the other words and the round key, and the key is bumped by
 * two Weyl constants between rounds. tests/unit/test_rng.c checks it against
 * Random123's known-answer vectors.
 */
#include "rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

void pcg_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
	uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3];
	uint32_t k0 = key[0], k1 = key[1];
	int round;

	for (round = 0; round < 10; round++) {
		uint64_t p0 = (uint64_t)PHILOX_M0 * x0;
		uint64_t p1 = (uint64_t)PHILOX_M1 * x2;

		x0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0;
		x1 = (uint32_t)p1;
		x2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
		x3 = (uint32_t)p0;
		k0 += PHILOX_W0;
		k1 += PHILOX_W1;
	}
	out[0] = x0;
	out[1] = x1;
	out[2] = x2;
	out[3] = x3;
}

/* The block at (seed, stream, block): the layout rng.h documents. */
static void block_at(const uint32_t key[2], uint64_t stream, uint64_t block, uint32_t out[4])
{
	uint32_t ctr[4];

	ctr[0] = (uint32_t)block;
	ctr[1] = (uint32_t)(block >> 32);
	ctr[2] = (uint32_t)stream;
	ctr[3] = (uint32_t)(stream >> 32);
	pcg_philox4x32_10(ctr, key, out);
}

void pcg_rng_init(pcg_rng *r, uint64_t seed, uint64_t stream)
{
	r->key[0] = (uint32_t)seed;
	r->key[1] = (uint32_t)(seed >> 32);
	r->stream = stream;
	r->block = 0;
	r->avail = 0;
}

uint32_t pcg_rng_u32(pcg_rng *r)
{
	if (r->avail == 0) {
		block_at(r->key, r->stream, r->block, r->buf);
		r->block++;
		r->avail = 4;
	}
	return r->buf[4 - r->avail--];
}

/* 27 high bits from the first word and 26 from the second, as MT19937's
 * genrand_res53: (a * 2^26 + b) / 2^53 is exact in a double and < 1. */
static double res53(uint32_t first, uint32_t second)
{
	uint32_t a = first >> 5, b = second >> 6;

	return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

double pcg_rng_uniform(pcg_rng *r)
{
	uint32_t first = pcg_rng_u32(r);
	uint32_t second = pcg_rng_u32(r);

	return res53(first, second);
}

/* Rejects the 2^32 mod n lowest words, so that what is left is a whole
 * number of copies of [0, n) and x % n is exactly uniform. Fewer than half
 * the words are ever rejected (the worst is n just above 2^31), so the loop
 * ends quickly. */
uint32_t pcg_rng_below(pcg_rng *r, uint32_t n)
{
	uint32_t threshold, x;

	if (n <= 1)
		return 0;
	threshold = (uint32_t)-n % n; /* (2^32 - n) mod n == 2^32 mod n */
	do
		x = pcg_rng_u32(r);
	while (x < threshold);
	return x % n;
}

/* Uniform i of a stream uses words 2i and 2i + 1, which lie in block i / 2
 * at words 2 (i % 2) and 2 (i % 2) + 1: one block computes it. */
double pcg_rng_uniform_at(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint32_t key[2], out[4];
	int w = (int)(index & 1) * 2;

	key[0] = (uint32_t)seed;
	key[1] = (uint32_t)(seed >> 32);
	block_at(key, stream, index >> 1, out);
	return res53(out[w], out[w + 1]);
}
