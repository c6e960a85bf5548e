/* bench/tokenizer.c: the tokenizer's load time on a LLaSA-sized
 * tokenizer.json (193,800 entries, 280,147 merges, 65,800 added tokens) and
 * its encode throughput in MiB of UTF-8 per second.
 *
 * The LLaSA file is made here from the committed Llama 3 tokenizer.json.gz
 * by appending the 8 tags and 65,536 <|s_N|> tokens to added_tokens, as
 * transformers' save_pretrained writes them (2-space indent): once with
 * merges as "a b" strings (21 MB) and once as ["a", "b"] pairs, the form
 * tokenizers >= 0.20 saves (30 MB). --keep keeps the second.
 * Texts: the licences in /usr/share/common-licenses (English prose) and the
 * parity corpus of tests/fixtures/tokenizer (many scripts, emoji, long runs),
 * each repeated to --mb MiB. Run from the repository root.
 * Usage: bench-tokenizer [--reps N] [--mb N] [--keep FILE]
 */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "llasa.h"
#include "opts.h"
#include "tokenizer.h"

#define FIXTURES "tests/fixtures/tokenizer"

static int reps, mb;
static const char *keep;

static const pcg_opt opts[] = {
	{ "reps", PCG_OPT_INT, &reps, "5", 1, 1000, "N", "repetitions (the best is reported)" },
	{ "mb", PCG_OPT_INT, &mb, "4", 1, 1024, "N", "size of each encoded text in MiB" },
	{ "keep", PCG_OPT_STR, &keep, NULL, 1, 0, "FILE", "write the LLaSA tokenizer.json here" },
	{ NULL },
};

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

static void die(const char *what)
{
	fprintf(stderr, "bench-tokenizer: %s\n", what);
	exit(1);
}

/* Llama 3 + the LLaSA tokens, written to path. */
static void write_llasa(const char *path, int pairs)
{
	json_error_t je;
	FILE *p = popen("gzip -dc " FIXTURES "/llama3-tokenizer.json.gz", "r");
	json_t *root = p ? json_loadf(p, 0, &je) : NULL;

	if (p == NULL || pclose(p) != 0 || root == NULL)
		die("cannot read " FIXTURES "/llama3-tokenizer.json.gz (run from the repository root)");
	static const char *tags[8] = {
		"<|TEXT_GENERATION_START|>", "<|TEXT_GENERATION_END|>",
		"<|TEXT_UNDERSTANDING_START|>", "<|TEXT_UNDERSTANDING_END|>",
		"<|SPEECH_GENERATION_START|>", "<|SPEECH_GENERATION_END|>",
		"<|SPEECH_UNDERSTANDING_START|>", "<|SPEECH_UNDERSTANDING_END|>",
	};
	/* tokenizers >= 0.20 saves merges as pairs: ["a", "b"]. */
	json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
	for (size_t i = 0; pairs && i < json_array_size(merges); i++) {
		const char *m = json_string_value(json_array_get(merges, i)), *sp = strchr(m, ' ');
		json_array_set_new(merges, i, json_pack("[s#, s]", m, (int)(sp - m), sp + 1));
	}
	json_t *added = json_object_get(root, "added_tokens");
	for (int i = 0; i < 8 + 65536; i++) {
		char name[32];
		if (i >= 8)
			snprintf(name, sizeof name, "<|s_%d|>", i - 8);
		json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id",
			128256 + i, "content", i < 8 ? tags[i] : name, "single_word", 0, "lstrip", 0,
			"rstrip", 0, "normalized", 1, "special", 0));
	}
	char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	pcg_err err = { "" };
	if (text == NULL || pcg_write_file(path, text, strlen(text), 0644, &err) < 0)
		die(text ? err.msg : "out of memory");
	free(text);
	json_decref(root);
}

/* src repeated to n bytes, cut at a UTF-8 character boundary. */
static char *repeat(const char *src, size_t len, size_t n, size_t *out)
{
	char *s = malloc(n + 1);
	for (size_t i = 0; i < n; i += len)
		memcpy(s + i, src, i + len <= n ? len : n - i);
	while (n > 0 && ((unsigned char)src[n % len] & 0xc0) == 0x80)
		n--; /* the byte after the cut continues a character */
	s[n] = 0;
	*out = n;
	return s;
}

static char *licences(size_t *len)
{
	const char *dir = "/usr/share/common-licenses";
	DIR *d = opendir(dir);
	struct dirent *e;
	char *s = NULL, path[1024];
	size_t n = 0;

	while (d && (e = readdir(d))) {
		FILE *f;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		if (e->d_name[0] == '.' || (f = fopen(path, "rb")) == NULL)
			continue;
		s = realloc(s, n + (1 << 20));
		n += fread(s + n, 1, 1 << 20, f);
		fclose(f);
	}
	if (d)
		closedir(d);
	*len = n;
	/* Keep it to the texts that are UTF-8 (all of them, normally). */
	pcg_err err;
	return n > 0 && tok_check_utf8(s, n, &err) == 0 ? s : (free(s), NULL);
}

static char *corpus(size_t *len)
{
	json_error_t je;
	json_t *g = json_load_file(FIXTURES "/llama3.json", JSON_ALLOW_NUL, &je), *cs;
	char *s = NULL;
	size_t n = 0;

	if (g == NULL)
		die("cannot read " FIXTURES "/llama3.json");
	cs = json_object_get(g, "cases");
	for (size_t i = 0; i < json_array_size(cs); i++) {
		const json_t *t = json_object_get(json_array_get(cs, i), "text");
		size_t k = json_string_length(t);
		s = realloc(s, n + k + 1);
		memcpy(s + n, json_string_value(t), k);
		n += k;
		s[n++] = '\n';
	}
	json_decref(g);
	*len = n;
	return s;
}

static void bench_encode(const tokenizer *t, const char *name, const char *src, size_t len)
{
	size_t n, n_ids = 0;
	char *text = repeat(src, len, (size_t)mb << 20, &n);
	double best = 1e30;
	pcg_err err;

	for (int r = 0; r < reps; r++) {
		int *ids;
		double t0 = now();
		if (tok_encode(t, text, n, &ids, &n_ids, &err) < 0)
			die(err.msg);
		t0 = now() - t0;
		if (t0 < best)
			best = t0;
		free(ids);
	}
	printf("encode %-22s %5.2f MiB in %6.3f s: %6.2f MiB/s, %zu ids (%.2f bytes/id)\n", name,
	       n / 1048576.0, best, n / 1048576.0 / best, n_ids, (double)n / n_ids);
	free(text);
}

/* Writes the LLaSA tokenizer.json (merges as pairs or as "a b" strings),
 * loads it reps times and prints the times; returns the last load. */
static tokenizer *bench_load(int pairs)
{
	char path[4200];
	pcg_err err = { "" };
	tokenizer *t = NULL;
	double best = 1e30, sum = 0, cpu_best = 1e30;

	if (keep)
		snprintf(path, sizeof path, "%s", keep);
	else
		snprintf(path, sizeof path, "%s/pcg-bench-llasa-tokenizer.%d.json",
			 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	write_llasa(path, pairs);
	for (int r = 0; r < reps; r++) {
		tok_free(&t);
		double t0 = now(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
		if ((t = tok_load(path, &err)) == NULL)
			die(err.msg);
		t0 = now() - t0;
		c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
		sum += t0;
		if (t0 < best)
			best = t0;
		if (c0 < cpu_best)
			cpu_best = c0;
	}
	FILE *f = fopen(path, "rb");
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	fclose(f);
	if (!keep)
		remove(path);
	printf("load   LLaSA tokenizer.json, merges as %s: %.1f MiB, %d ids: best %.3f s"
	       " (CPU %.3f s), mean %.3f s of %d\n", pairs ? "pairs  " : "strings",
	       size / 1048576.0, tok_vocab_size(t), best, cpu_best, sum / reps, reps);
	return t;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	tokenizer *t;
	double best;
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, "bench-tokenizer", "[--reps N] [--mb N] [--keep FILE]", opts);
		return 0;
	}
	if (first != argc) {
		fprintf(stderr, "bench-tokenizer: %s\n", first < 0 ? err.msg : "unexpected argument");
		return 2;
	}
	t = bench_load(0);
	tok_free(&t);
	t = bench_load(1);

	size_t len;
	char *s = licences(&len);
	if (s)
		bench_encode(t, "licences (English)", s, len);
	free(s);
	s = corpus(&len);
	bench_encode(t, "parity corpus (mixed)", s, len);
	free(s);

	/* A cloning prompt with 15 s of prompt audio (750 codes). */
	llasa_vocab v;
	int codes[750], *ids;
	size_t n;
	for (int i = 0; i < 750; i++)
		codes[i] = (i * 7919) % 65536;
	llasa_prompt p = { "The quick brown fox jumps over the lazy dog.",
			   "This is the transcript of the prompt audio. ", codes, 750, NULL };
	if (llasa_vocab_init(t, &v, &err) < 0)
		die(err.msg);
	best = 1e30;
	for (int r = 0; r < reps * 20; r++) {
		double t0 = now();
		if (llasa_prompt_ids(t, &v, &p, &ids, &n, &err) < 0)
			die(err.msg);
		t0 = now() - t0;
		if (t0 < best)
			best = t0;
		free(ids);
	}
	printf("prompt LLaSA cloning, 750 codes: %zu ids in %.3f ms\n", n, best * 1e3);
	tok_free(&t);
	return 0;
}
