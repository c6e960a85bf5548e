/* fixture.h: reading the golden files of tests/fixtures (raw bytes, raw f32,
 * ids as text, JSON) and comparing vectors, for the parity tests; the fuzz
 * tests' fixed generator. */
#ifndef PCG_TEST_FIXTURE_H
#define PCG_TEST_FIXTURE_H

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The bytes of a file (NULL when it cannot be read), *n their count. */
static inline void *read_bytes(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	void *v;
	long sz;

	*n = 0;
	if (f == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	rewind(f);
	v = malloc(sz > 0 ? (size_t)sz : 1);
	if (v && fread(v, 1, (size_t)sz, f) != (size_t)sz) {
		free(v);
		v = NULL;
	}
	fclose(f);
	*n = (size_t)sz;
	return v;
}

/* Raw f32 values, *n their count. */
static inline float *read_f32(const char *path, size_t *n)
{
	float *v = read_bytes(path, n);

	*n /= sizeof(float);
	return v;
}

static inline int read_ids(const char *path, int *ids, int max)
{
	FILE *f = fopen(path, "r");
	int n = 0;

	if (f == NULL)
		return -1;
	while (n < max && fscanf(f, "%d", &ids[n]) == 1)
		n++;
	fclose(f);
	return n;
}

static inline double max_abs(const float *a, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++)
		m = fabs(a[i]) > m ? fabs(a[i]) : m;
	return m;
}

static inline double max_diff(const float *a, const float *b, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (!(d <= m)) /* NaN counts as infinitely far */
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

/* max |a - ref| / max |ref| over n values (the error relative to the
 * reference's scale, so one limit serves arrays of any scale); 0 when ref is
 * 0 everywhere and a equals it. NaN in a counts as infinitely wrong. */
static inline double norm_err(const float *a, const float *ref, size_t n)
{
	double num = 0.0, den = 0.0;

	for (size_t i = 0; i < n; i++) {
		const double d = fabs((double)a[i] - (double)ref[i]);
		if (isnan(a[i]) || isnan(d))
			return INFINITY;
		num = d > num ? d : num;
		den = fabs((double)ref[i]) > den ? fabs((double)ref[i]) : den;
	}
	return den > 0.0 ? num / den : num;
}

/* A JSON file; exits with its error when it cannot be read. */
static inline json_t *load_json(const char *path)
{
	json_error_t je;
	json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);

	if (j == NULL) {
		fprintf(stderr, "%s: %s (line %d)\n", path, je.text, je.line);
		exit(1);
	}
	return j;
}

/* splitmix64: the fuzz tests' own generator, so their sequences are fixed. */
static inline uint64_t fuzz_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#endif
