/* bench/asg.c: writes the embedding matrices that bench/asg.sh feeds to
 * asg-build: random Gaussian rows (at d = 2048 nearly every cosine is ~0,
 * so the groups are singletons) or clustered rows, centre + s * noise with
 * s uniform in [0.5, 1.5] per row, so that two rows of a cluster have
 * cosine 1 / sqrt((1 + s1^2)(1 + s2^2)), from 0.8 down to 0.31: at theta
 * 0.4 the groups have several members and overlap, as real ones do.
 * Usage: bench-asg --out FILE [--n N] [--d D] [--kind random|clustered]
 *        [--cluster C] [--seed S]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "opts.h"
#include "rng.h"
#include "safetensors.h"

static const char *out, *kind;
static int n, d, cluster, seed;

static const pcg_opt opts[] = {
	{ "out", PCG_OPT_STR, &out, NULL, 1, 0, "FILE", "the .safetensors file to write" },
	{ "n", PCG_OPT_INT, &n, "65536", 1, 1 << 24, "N", "rows" },
	{ "d", PCG_OPT_INT, &d, "2048", 1, 1 << 16, "D", "columns" },
	{ "kind", PCG_OPT_STR, &kind, "clustered", 1, 0, "K", "random or clustered" },
	{ "cluster", PCG_OPT_INT, &cluster, "32", 1, 1 << 20, "C", "mean rows per cluster" },
	{ "seed", PCG_OPT_INT, &seed, "1", 0, 2147483647, "S", "seed" },
	{ NULL },
};

/* Standard normal by Box-Muller. */
static float normal(pcg_rng *r)
{
	double u = pcg_rng_uniform(r), v = pcg_rng_uniform(r);
	return (float)(sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * M_PI * v));
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);
	int clustered, nc;
	uint16_t *E;
	float *centre;
	pcg_rng r;

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, "bench-asg", "--out FILE [options]", opts);
		return 0;
	}
	if (first != argc || !out || (strcmp(kind, "random") && strcmp(kind, "clustered"))) {
		fprintf(stderr, "bench-asg: %s\n", first < 0 ? err.msg : "bad usage");
		pcg_opts_usage(stderr, "bench-asg", "--out FILE [options]", opts);
		return 2;
	}
	clustered = !strcmp(kind, "clustered");
	nc = clustered ? (n + cluster - 1) / cluster : 0;
	E = malloc((size_t)n * d * sizeof *E);
	centre = malloc((size_t)(nc ? nc : 1) * d * sizeof *centre);
	if (!E || !centre) {
		fprintf(stderr, "bench-asg: out of memory\n");
		return 1;
	}
	pcg_rng_init(&r, (uint64_t)seed, 0);
	for (size_t i = 0; i < (size_t)nc * d; i++)
		centre[i] = normal(&r);
	for (int t = 0; t < n; t++) {
		const float *c = clustered ? centre + (size_t)pcg_rng_below(&r, (uint32_t)nc) * d : NULL;
		float s = clustered ? 0.5f + (float)pcg_rng_uniform(&r) : 1.0f;
		for (int i = 0; i < d; i++)
			E[(size_t)t * d + i] = pcg_f32_to_bf16((c ? c[i] : 0.0f) + s * normal(&r));
	}
	st_out o = { "embeddings", PCG_BF16, 2, { n, d }, E };
	if (st_write(out, &o, 1, NULL, &err) < 0) {
		fprintf(stderr, "bench-asg: %s\n", err.msg);
		return 1;
	}
	free(E);
	free(centre);
	return 0;
}
