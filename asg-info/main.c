/* asg-info: checks an ASG file (checksum and structure) and prints its header
 * and statistics, or its groups one per line.
 */
#include <stdio.h>
#include <string.h>

#include "asg.h"
#include "opts.h"

static const char *prog = "asg-info";
static const char *SYNOPSIS = "[--groups] FILE";

static int groups;

static const pcg_opt opts[] = {
	{ "groups", PCG_OPT_FLAG, &groups, NULL, 1, 0, NULL,
	  "print the groups instead, one per line: k: t1 t2 ..." },
	{ NULL },
};

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);
	const asg_view *v;
	asg *a;

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || argc - first != 1) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg : "one FILE is required");
	}
	a = asg_open(argv[first], &err); /* verifies the checksum and the structure */
	if (a == NULL) {
		pcg_die(prog, &err);
		return 1;
	}
	v = asg_get(a);
	if (groups) {
		for (uint32_t k = 0; k < v->M; k++) {
			printf("%u:", k);
			for (uint64_t j = v->grp_start[k]; j < v->grp_start[k + 1]; j++)
				printf(" %u", v->grp_tok[j]);
			putchar('\n');
		}
	} else {
		printf("file\t%s\n", argv[first]);
		asg_print_stats(stdout, a, "");
		printf("checksum_ok\tyes\n");
	}
	asg_close(&a);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: stdout: write failed\n", prog);
		return 1;
	}
	return 0;
}
