/* test_attention.c: one head's attention (attention.h) in every float
 * family this CPU has, against a float64 reference: head sizes that fit
 * the SIMD kernels and one that does not (the portable loop then), cache
 * lengths on both sides of a vector's width, 1 to 4 query heads a kv head
 * (each head's result bit for bit what it gets alone), rows further apart
 * than a head (the cache's kv_dim), score spreads wide enough that most of exp
 * underflows, and a query that must pick one position out of many.
 *
 * Tolerance, with M = sum_j p_j |v_j| and S = max_j scale * sum_i |q_i k_ji|:
 *   |out - ref| <= 2 ((hd + 8) S + n + 16) 2^-24 M + 1e-30.
 * A float32 dot product of hd terms is within hd 2^-24 of its exact value
 * relative to sum |q k| (Higham 3.1), which moves exp(s - max) by that
 * relative amount twice (s and max); exp itself is within 2 ulp; the sum
 * of n terms of p is within n 2^-24 of itself relative, and so is the sum
 * of p v relative to M. A wrong position, weight or lane costs of the
 * order of one p_j |v_j|, far above this for the sizes here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "check.h"
#include "matmul.h"

static double frand(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return ((*s >> 8) & 0xffff) / 65536.0 - 0.5;
}

/* the reference and its tolerance at each output element */
static void reference(double *ref, double *tol, const float *q, const float *k, const float *v,
		      int n, int hd, size_t ld, float scale)
{
	double *s = malloc((size_t)n * sizeof *s), mx = -INFINITY, sum = 0, S = 0;

	for (int j = 0; j < n; j++) {
		double d = 0, a = 0;
		for (int i = 0; i < hd; i++) {
			d += (double)q[i] * k[(size_t)j * ld + i];
			a += fabs((double)q[i] * k[(size_t)j * ld + i]);
		}
		s[j] = d * scale;
		S = fmax(S, a * scale);
		mx = fmax(mx, s[j]);
	}
	for (int j = 0; j < n; j++) {
		s[j] = exp(s[j] - mx);
		sum += s[j];
	}
	for (int i = 0; i < hd; i++) {
		double o = 0, m = 0;
		for (int j = 0; j < n; j++) {
			o += s[j] / sum * v[(size_t)j * ld + i];
			m += s[j] / sum * fabs(v[(size_t)j * ld + i]);
		}
		ref[i] = o;
		tol[i] = 2.0 * ((hd + 8) * S + n + 16) * 0x1p-24 * m + 1e-30;
	}
	free(s);
}

/* G heads over n positions of head size hd, rows ld apart, q and k of
 * amplitude amp; with pick, each q is a multiple of position pick's key
 * (its score stands out) */
static int check_case(const char *isa, int G, int n, int hd, size_t ld, double amp, int pick,
		      unsigned seed)
{
	float *q = malloc((size_t)G * hd * sizeof *q), *out = malloc((size_t)G * hd * sizeof *out);
	float *k = malloc((size_t)n * ld * sizeof *k), *v = malloc((size_t)n * ld * sizeof *v);
	float *sc = malloc((size_t)G * ((size_t)n + 16) * sizeof *sc);
	double *ref = malloc((size_t)hd * sizeof *ref), *tol = malloc((size_t)hd * sizeof *tol);
	const float scale = 1.0f / sqrtf((float)hd);
	int bad = 0;

	for (size_t i = 0; i < (size_t)n * ld; i++) {
		k[i] = (float)(amp * frand(&seed));
		v[i] = (float)frand(&seed);
	}
	for (int i = 0; i < G * hd; i++)
		q[i] = pick >= 0 ? (float)((8 + i / hd) * k[(size_t)pick * ld + i % hd])
				 : (float)(amp * frand(&seed));
	pcg_attend_kernel(hd)(out, q, G, k, v, n, hd, ld, scale, sc);
	for (int g = 0; g < G; g++) {
		const float *og = out + (size_t)g * hd;
		reference(ref, tol, q + (size_t)g * hd, k, v, n, hd, ld, scale);
		for (int i = 0; i < hd; i++)
			if (!(fabs(og[i] - ref[i]) <= tol[i])) {
				if (bad++ < 3)
					fprintf(stderr, "%s G=%d n=%d hd=%d amp=%g pick=%d: head %d "
						"out[%d] = %.9g, want %.9g +- %.3g\n", isa, G, n, hd, amp,
						pick, g, i, og[i], ref[i], tol[i]);
			}
		if (pick >= 0 && hd >= 32) /* the picked position's value: its score
					    * stands out by 20 or more */
			for (int i = 0; i < hd; i++)
				bad += fabs(og[i] - v[(size_t)pick * ld + i]) > 1e-3;
	}
	free(q);
	free(out);
	free(k);
	free(v);
	free(sc);
	free(ref);
	free(tol);
	return bad;
}

/* a head's result does not depend on the heads beside it: G heads at once
 * give each, bit for bit, what it gets alone */
static int check_alone(int G, int n, int hd, unsigned seed)
{
	const size_t ld = (size_t)hd * 2;
	float *q = malloc((size_t)G * hd * sizeof *q), *out = malloc((size_t)G * hd * sizeof *out);
	float *one = malloc((size_t)hd * sizeof *one);
	float *k = malloc((size_t)n * ld * sizeof *k), *v = malloc((size_t)n * ld * sizeof *v);
	float *sc = malloc((size_t)G * ((size_t)n + 16) * sizeof *sc);
	int bad = 0;

	for (size_t i = 0; i < (size_t)n * ld; i++) {
		k[i] = (float)frand(&seed);
		v[i] = (float)frand(&seed);
	}
	for (int i = 0; i < G * hd; i++)
		q[i] = (float)frand(&seed);
	pcg_attend_kernel(hd)(out, q, G, k, v, n, hd, ld, 0.125f, sc);
	for (int g = 0; g < G; g++) {
		pcg_attend_kernel(hd)(one, q + (size_t)g * hd, 1, k, v, n, hd, ld, 0.125f, sc);
		bad += memcmp(one, out + (size_t)g * hd, (size_t)hd * sizeof *one) != 0;
	}
	free(q);
	free(out);
	free(one);
	free(k);
	free(v);
	free(sc);
	return bad;
}

/* exp through the kernel: two positions, scores 0 and d, v_0 and v_1 unit
 * vectors, so out[1] / out[0] = exp(d): within 4 ulp of exp (2 for exp, 2
 * for the division and the scaling by 1 / sum) for d in [-87, 0] */
static int check_exp(const char *isa)
{
	enum { HD = 8 };
	float q[HD] = { 1 }, k[2 * HD] = { 0 }, v[2 * HD] = { 0 }, out[HD], sc[2 + 16];
	int bad = 0;

	v[0] = 1;
	v[HD + 1] = 1;
	for (int i = 0; i <= 20000; i++) {
		k[HD] = (float)(-87.0 * i / 20000);
		pcg_attend_kernel(HD)(out, q, 1, k, v, 2, HD, HD, 1.0f, sc);
		const double want = exp((double)k[HD]), got = (double)out[1] / out[0];
		if (!(fabs(got - want) <= 4 * 0x1p-24 * want)) {
			if (bad++ < 3)
				fprintf(stderr, "%s: exp(%.9g) = %.9g, want %.9g\n", isa, k[HD], got,
					want);
		}
	}
	return bad;
}

int main(void)
{
	static const char *isas[] = { "avx512-bf16", "avx512", "avx2", "neon", "generic" };
	static const int hds[] = { 64, 128, 96, 8, 32, 12 };
	static const int ns[] = { 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 64, 100, 257 };
	int tried = 0;

	for (size_t a = 0; a < sizeof isas / sizeof isas[0]; a++) {
		if (pcg_matmul_set_isa(isas[a]) < 0)
			continue;
		tried++;
		int bad = 0;
		unsigned seed = 7;
		for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
			for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
				const int hd = hds[h], n = ns[i];
				const int G = 1 + (int)(i % 4); /* 1 to 4 heads a kv head */
				bad += check_case(isas[a], G, n, hd, (size_t)hd * G, 1.0, -1, seed++);
				bad += check_case(isas[a], G, n, hd, 3 * (size_t)hd + 4, 2.0, -1,
						  seed++);
				/* scores hundreds apart: most of exp underflows */
				bad += check_case(isas[a], G, n, hd, 2 * (size_t)hd, 40.0, -1, seed++);
				bad += check_case(isas[a], G, n, hd, (size_t)hd, 4.0, n / 2, seed++);
			}
		CHECKF(bad == 0, "%s: %d elements beyond the bound", isas[a], bad);
		bad = check_alone(4, 37, 64, 11) + check_alone(3, 100, 128, 12);
		CHECKF(bad == 0, "%s: %d heads differ from themselves alone", isas[a], bad);
		bad = check_exp(isas[a]);
		CHECKF(bad == 0, "%s: exp beyond 4 ulp at %d points", isas[a], bad);
	}
	CHECK(tried >= 1);
	return check_done("test_attention");
}
