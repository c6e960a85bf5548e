/* asg-info: checks an ASG file (checksum and structure) and prints its header
 * and statistics, or its groups one per line (lib/core/image.c's info main).
 */
#include <stdio.h>

#include "asg.h"
#include "image.h"

static void *open_asg(const char *path, pcg_err *err) { return asg_open(path, err); }
static void stats(FILE *f, const void *a) { asg_print_stats(f, a, ""); }

static void groups(FILE *f, const void *a)
{
	const asg_view *v = asg_get(a);

	for (uint32_t k = 0; k < v->M; k++) {
		fprintf(f, "%u:", k);
		for (uint64_t j = v->grp_start[k]; j < v->grp_start[k + 1]; j++)
			fprintf(f, " %u", v->grp_tok[j]);
		fputc('\n', f);
	}
}

static void close_asg(void *a) { asg_close((asg **)&a); }

int main(int argc, char **argv)
{
	const pcg_img_info info = { "asg-info", "groups",
				    "print the groups instead, one per line: k: t1 t2 ...",
				    open_asg, stats, groups, close_asg };

	return pcg_img_info_main(&info, argc, argv);
}
