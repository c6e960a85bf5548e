/* tm-info: checks a TM file (checksum and structure) and prints its header
 * and statistics, or its rows of observed successors.
 */
#include <stdio.h>
#include <string.h>

#include "opts.h"
#include "tm.h"

static const char *prog = "tm-info";
static const char *SYNOPSIS = "[--rows] FILE";

static int rows;

static const pcg_opt opts[] = {
	{ "rows", PCG_OPT_FLAG, &rows, NULL, 1, 0, NULL,
	  "print the rows instead, one per line: a total: b:count ..." },
	{ NULL },
};

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);
	const tm_view *v;
	tmat *t;

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || argc - first != 1) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg : "one FILE is required");
	}
	t = tm_open(argv[first], &err); /* verifies the checksum and the structure */
	if (t == NULL) {
		pcg_die(prog, &err);
		return 1;
	}
	v = tm_get(t);
	if (rows) {
		for (uint32_t a = 0; a < v->n; a++) {
			if (v->row_start[a] == v->row_start[a + 1])
				continue;
			printf("%u %llu:", a, (unsigned long long)v->row_total[a]);
			for (uint64_t j = v->row_start[a]; j < v->row_start[a + 1]; j++)
				printf(" %u:%llu", v->col[j], (unsigned long long)v->cnt[j]);
			putchar('\n');
		}
	} else {
		printf("file\t%s\n", argv[first]);
		tm_print_stats(stdout, t, "");
		printf("checksum_ok\tyes\n");
	}
	tm_close(&t);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: stdout: write failed\n", prog);
		return 1;
	}
	return 0;
}
