/* bench/membw.c: the machine's memory read bandwidth, STREAM-like.
 *
 * What it measures: the rate at which N threads can read a buffer much
 * larger than the caches (default 1 GiB) from DRAM, with 64-byte vector
 * loads (AVX-512 where the CPU has it, else AVX2, else 64-bit scalar) and
 * nothing else but an XOR into registers. Each thread reads its own
 * contiguous slice, the slices having been first touched by the same
 * thread. The result is GB/s (1e9 bytes/s), the best and the median of
 * --reps passes over the whole buffer.
 *
 * Why: decoding one token of a LLaSA model (a Llama body, batch 1) reads
 * every weight once from memory, with a few flops per byte: all the layers
 * and the output head (for the tied LLaSA-1B and -3B, the embedding table
 * itself; only one row of it is read as the input embedding). That decode
 * is bound by memory bandwidth, so bytes-of-weights / read_gbs is a floor
 * on the time of one token (LLaSA-1B in bf16: 1.95 GB of layers + 0.79 GB
 * of head = 2.74 GB), and a decode's effective GB/s compared with read_gbs
 * says how close an engine (pcg-tts's or llama.cpp's) is to that floor on
 * this machine.
 *
 * Usage: bench-membw [--mib N] [--threads N] [--reps N]
 *   --mib      buffer size in MiB (default 1024)
 *   --threads  OpenMP threads (default 2)
 *   --reps     passes timed (default 10), after one untimed warm-up pass
 *
 * Output: the CPU model name (/proc/cpuinfo), the load path, and one
 * parseable line, e.g.
 *   membw threads=2 mib=1024 read_gbs=31.52 median_gbs=30.87 reps=10 path=avx512
 * where read_gbs is the best pass (the least disturbed on a shared machine).
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define LINE 64 /* bytes per load and per cache line */

typedef uint64_t (*read_fn)(const char *p, size_t nlines);

/* The XORs keep the loads from being optimised away and cost one cycle
 * each; eight independent accumulators keep eight loads in flight. */
__attribute__((target("avx512f"))) static uint64_t read_avx512(const char *p, size_t nlines)
{
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
	__m512i a4 = a0, a5 = a0, a6 = a0, a7 = a0;
	size_t i = 0;
	for (; i + 8 <= nlines; i += 8) {
		const char *q = p + i * LINE;
		a0 = _mm512_xor_si512(a0, _mm512_load_si512((const void *)(q + 0 * LINE)));
		a1 = _mm512_xor_si512(a1, _mm512_load_si512((const void *)(q + 1 * LINE)));
		a2 = _mm512_xor_si512(a2, _mm512_load_si512((const void *)(q + 2 * LINE)));
		a3 = _mm512_xor_si512(a3, _mm512_load_si512((const void *)(q + 3 * LINE)));
		a4 = _mm512_xor_si512(a4, _mm512_load_si512((const void *)(q + 4 * LINE)));
		a5 = _mm512_xor_si512(a5, _mm512_load_si512((const void *)(q + 5 * LINE)));
		a6 = _mm512_xor_si512(a6, _mm512_load_si512((const void *)(q + 6 * LINE)));
		a7 = _mm512_xor_si512(a7, _mm512_load_si512((const void *)(q + 7 * LINE)));
	}
	for (; i < nlines; i++)
		a0 = _mm512_xor_si512(a0, _mm512_load_si512((const void *)(p + i * LINE)));
	a0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)),
			      _mm512_xor_si512(_mm512_xor_si512(a4, a5), _mm512_xor_si512(a6, a7)));
	uint64_t v[8];
	_mm512_storeu_si512((void *)v, a0);
	return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const char *p, size_t nlines)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	__m256i a4 = a0, a5 = a0, a6 = a0, a7 = a0;
	size_t i = 0;
	for (; i + 4 <= nlines; i += 4) {
		const __m256i *q = (const __m256i *)(p + i * LINE);
		a0 = _mm256_xor_si256(a0, _mm256_load_si256(q + 0));
		a1 = _mm256_xor_si256(a1, _mm256_load_si256(q + 1));
		a2 = _mm256_xor_si256(a2, _mm256_load_si256(q + 2));
		a3 = _mm256_xor_si256(a3, _mm256_load_si256(q + 3));
		a4 = _mm256_xor_si256(a4, _mm256_load_si256(q + 4));
		a5 = _mm256_xor_si256(a5, _mm256_load_si256(q + 5));
		a6 = _mm256_xor_si256(a6, _mm256_load_si256(q + 6));
		a7 = _mm256_xor_si256(a7, _mm256_load_si256(q + 7));
	}
	for (; i < nlines; i++) {
		const __m256i *q = (const __m256i *)(p + i * LINE);
		a0 = _mm256_xor_si256(a0, _mm256_load_si256(q + 0));
		a1 = _mm256_xor_si256(a1, _mm256_load_si256(q + 1));
	}
	a0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3)),
			      _mm256_xor_si256(_mm256_xor_si256(a4, a5), _mm256_xor_si256(a6, a7)));
	uint64_t v[4];
	_mm256_storeu_si256((__m256i *)v, a0);
	return v[0] + v[1] + v[2] + v[3];
}

static uint64_t read_scalar(const char *p, size_t nlines)
{
	const uint64_t *q = (const uint64_t *)p;
	uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
	for (size_t i = 0; i < nlines; i++, q += LINE / 8) {
		a0 ^= q[0];
		a1 ^= q[1];
		a2 ^= q[2];
		a3 ^= q[3];
		a4 ^= q[4];
		a5 ^= q[5];
		a6 ^= q[6];
		a7 ^= q[7];
	}
	return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

static void cpu_model(char *out, size_t n)
{
	snprintf(out, n, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, "model name", 10) != 0)
			continue;
		char *v = strchr(line, ':');
		if (!v)
			break;
		v++;
		while (*v == ' ' || *v == '\t')
			v++;
		v[strcspn(v, "\n")] = 0;
		snprintf(out, n, "%s", v);
		break;
	}
	fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void usage(void)
{
	fprintf(stderr, "usage: bench-membw [--mib N] [--threads N] [--reps N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	long mib = 1024;
	int threads = 2, reps = 10;
	for (int i = 1; i < argc; i++) {
		if (i + 1 < argc && !strcmp(argv[i], "--mib"))
			mib = atol(argv[++i]);
		else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
			threads = atoi(argv[++i]);
		else if (i + 1 < argc && !strcmp(argv[i], "--reps"))
			reps = atoi(argv[++i]);
		else
			usage();
	}
	if (mib < 1 || threads < 1 || reps < 1)
		usage();

	__builtin_cpu_init();
	read_fn fn = read_scalar;
	const char *path = "scalar";
	if (__builtin_cpu_supports("avx512f")) {
		fn = read_avx512;
		path = "avx512";
	} else if (__builtin_cpu_supports("avx2")) {
		fn = read_avx2;
		path = "avx2";
	}

	size_t bytes = (size_t)mib << 20;
	size_t nlines = bytes / LINE;
	/* 2 MiB alignment (and size, as aligned_alloc wants a multiple), so
	 * that transparent huge pages can back it. */
	size_t huge = (size_t)1 << 21;
	char *buf = aligned_alloc(huge, (bytes + huge - 1) / huge * huge);
	if (!buf) {
		fprintf(stderr, "bench-membw: cannot allocate %ld MiB\n", mib);
		return 1;
	}
	madvise(buf, bytes, MADV_HUGEPAGE);

	char cpu[256];
	cpu_model(cpu, sizeof cpu);
	printf("cpu: %s\n", cpu);
	printf("path: %s, %d threads, %ld MiB, %d reps\n", path, threads, mib, reps);
	fflush(stdout);

	omp_set_dynamic(0);
	double *gbs = malloc(sizeof(double) * reps);
	uint64_t sink = 0;
	double t0 = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
	{
		int nt = omp_get_num_threads(), t = omp_get_thread_num();
		size_t lo = nlines * t / nt, hi = nlines * (t + 1) / nt;
		char *p = buf + lo * LINE;
		/* first touch by the reading thread; distinct words */
		uint64_t *w = (uint64_t *)buf;
		for (size_t i = lo * (LINE / 8); i < hi * (LINE / 8); i++)
			w[i] = (i + 1) * 0x9e3779b97f4a7c15ull;
		sink += fn(p, hi - lo); /* warm-up pass */
		for (int r = 0; r < reps; r++) {
#pragma omp barrier
#pragma omp master
			t0 = omp_get_wtime();
#pragma omp barrier
			sink += fn(p, hi - lo);
#pragma omp barrier
#pragma omp master
			gbs[r] = (double)bytes / (omp_get_wtime() - t0) / 1e9;
		}
	}
	qsort(gbs, reps, sizeof *gbs, cmp_double);
	double best = gbs[reps - 1];
	double median = reps % 2 ? gbs[reps / 2] : 0.5 * (gbs[reps / 2 - 1] + gbs[reps / 2]);

	for (char *c = cpu; *c; c++)
		if (*c == ' ')
			*c = '_';
	printf("# checksum %016llx\n", (unsigned long long)sink);
	printf("membw threads=%d mib=%ld read_gbs=%.2f median_gbs=%.2f reps=%d path=%s cpu=%s\n",
	       threads, mib, best, median, reps, path, cpu);
	free(gbs);
	free(buf);
	return 0;
}
