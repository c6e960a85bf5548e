/* tm-build: counts the bigrams of speech-code sequences (text, one sequence
 * per line) and writes the smoothed token transition matrix (man/tm.5) that
 * Viterbi path selection uses.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "tm.h"

static const char *prog = "tm-build";
static const char *SYNOPSIS = "-n N [--alpha A] [--prune M] [--quiet] -o FILE [FILE... | -]";

static int n, prune, quiet;
static double alpha;
static const char *out_path;

static const pcg_opt opts[] = {
	{ "n", PCG_OPT_INT, &n, "1", 1, INT32_MAX, "N", "tokens: every id is in [0, N) (required)" },
	{ "alpha", PCG_OPT_FLOAT, &alpha, "1", 1e-9, 1e6, "A",
	  "add-alpha smoothing: Q(a,b) = (c(a,b) + A) / (c(a) + A N)" },
	{ "prune", PCG_OPT_INT, &prune, "0", 0, INT32_MAX, "M",
	  "keep the M most frequent successors per row (0: all)" },
	{ "o", PCG_OPT_STR, &out_path, NULL, 1, 0, "FILE",
	  "the TM file, written atomically ('-': standard output)" },
	{ "quiet", PCG_OPT_FLAG, &quiet, NULL, 1, 0, NULL, "no summary on stderr" },
	{ NULL },
};

/* Adds the sequences of one text stream; name for messages. Returns -1 with
 * err naming the line and the position of a bad token. */
static int read_text(FILE *f, const char *name, tm_counter *c, pcg_err *err)
{
	char *line = NULL;
	size_t cap = 0, scap = 0;
	uint32_t *seq = NULL;
	unsigned long long lineno = 0;
	ssize_t len;
	int rc = 0;

	while ((len = getline(&line, &cap, f)) >= 0) {
		size_t k = 0;
		char *p = line;
		lineno++;
		for (;;) {
			char *end;
			unsigned long v;
			while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
				p++;
			if (*p == 0)
				break;
			errno = 0;
			v = *p >= '0' && *p <= '9' ? strtoul(p, &end, 10) : 0;
			if (!(*p >= '0' && *p <= '9') || errno ||
			    (*end && *end != ' ' && *end != '\t' && *end != '\r' && *end != '\n') ||
			    v >= (unsigned long)n) {
				size_t w = strcspn(p, " \t\r\n");
				rc = pcg_fail(err, "%s: line %llu, token %zu: '%.*s' is not an id in "
					      "[0, %d)", name, lineno, k + 1, (int)(w > 40 ? 40 : w),
					      p, n);
				goto out;
			}
			if (k == scap) {
				size_t nc = scap ? 2 * scap : 256;
				uint32_t *ns = realloc(seq, nc * sizeof *ns);
				if (ns == NULL) {
					rc = pcg_fail(err, "%s: out of memory", name);
					goto out;
				}
				seq = ns;
				scap = nc;
			}
			seq[k++] = (uint32_t)v;
			p = end;
		}
		if (k > 0 && tm_counter_add(c, seq, k, err) < 0) {
			rc = -1;
			goto out;
		}
	}
	if (ferror(f))
		rc = pcg_fail(err, "%s: read error", name);
out:
	free(line);
	free(seq);
	return rc;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);
	tm_counter *c = NULL;
	tmat *t = NULL;
	int rc = 1;

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || !pcg_opts_given(opts, "n") || out_path == NULL) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg
			: !pcg_opts_given(opts, "n") ? "-n N is required" : "-o FILE is required");
	}
	c = tm_counter_new((uint32_t)n, &err);
	if (c == NULL)
		goto fail;
	for (int i = first; i < argc || i == first; i++) {
		const char *path = i < argc ? argv[i] : "-";
		const int is_stdin = !strcmp(path, "-");
		FILE *f = is_stdin ? stdin : fopen(path, "r");
		int r;
		if (f == NULL) {
			pcg_fail(&err, "%s: %s", path, strerror(errno));
			goto fail;
		}
		r = read_text(f, is_stdin ? "stdin" : path, c, &err);
		if (!is_stdin)
			fclose(f);
		if (r < 0)
			goto fail;
	}
	t = tm_counter_finish(c, alpha, (uint32_t)prune, &err);
	if (t == NULL || tm_write(t, out_path, &err) < 0)
		goto fail;
	if (!quiet) {
		fprintf(stderr, "%s: sequences\t%llu\n", prog,
			(unsigned long long)tm_counter_sequences(c));
		fprintf(stderr, "%s: bigrams\t%llu\n", prog,
			(unsigned long long)tm_counter_bigrams(c));
		tm_print_stats(stderr, t, "tm-build: ");
	}
	rc = 0;
fail:
	if (rc)
		pcg_report(prog, &err);
	tm_counter_free(&c);
	tm_close(&t);
	return rc;
}
