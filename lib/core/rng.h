/* rng.h: a seeded counter-based random generator (Philox4x32-10, Salmon et
 * al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), so that any
 * draw is a pure function of (seed, stream, counter) and a run is
 * reproducible from its seed whatever order or process computes it.
 */
#ifndef PCG_RNG_H
#define PCG_RNG_H

#include <stdint.h>

/* One Philox4x32 block with 10 rounds: out = philox(ctr, key). */
void pcg_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* A stream of draws: key = {seed low 32 bits, seed high 32 bits}, counter =
 * {block low, block high, stream low, stream high}, blocks 0, 1, 2, ... and
 * the four words of each block in order 0..3. Copying the struct forks the
 * stream (same draws). */
typedef struct pcg_rng {
	uint32_t key[2];
	uint64_t stream;
	uint64_t block;   /* next block to compute */
	uint32_t buf[4];
	int avail;        /* words left in buf, taken from buf[4 - avail] */
} pcg_rng;

void pcg_rng_init(pcg_rng *r, uint64_t seed, uint64_t stream);
uint32_t pcg_rng_u32(pcg_rng *r);
/* Uniform in [0, 1) with 53 random bits from the next two words a, b:
 * ((a >> 5) * 2^26 + (b >> 6)) / 2^53, as MT19937's genrand_res53. */
double pcg_rng_uniform(pcg_rng *r);
/* Uniform integer in [0, n), n >= 1, without modulo bias: words below
 * 2^32 mod n are rejected (so it uses one or more words); n = 0 gives 0. */
uint32_t pcg_rng_below(pcg_rng *r, uint32_t n);

/* Stateless: the uniform in [0, 1) at (seed, stream, index); equal to the
 * index-th (from 0) pcg_rng_uniform of a fresh pcg_rng_init(seed, stream)
 * stream that draws only uniforms: words 2 index and 2 index + 1, i.e.
 * words 2 (index % 2) and 2 (index % 2) + 1 of block index / 2. */
double pcg_rng_uniform_at(uint64_t seed, uint64_t stream, uint64_t index);

#endif
