/* tm-info: checks a TM file (checksum and structure) and prints its header
 * and statistics, or its rows of observed successors (lib/core/image.c's info
 * main).
 */
#include <stdio.h>

#include "image.h"
#include "tm.h"

static void *open_tm(const char *path, pcg_err *err) { return tm_open(path, err); }
static void stats(FILE *f, const void *t) { tm_print_stats(f, t, ""); }

static void rows(FILE *f, const void *t)
{
	const tm_view *v = tm_get(t);

	for (uint32_t a = 0; a < v->n; a++) {
		if (v->row_start[a] == v->row_start[a + 1])
			continue;
		fprintf(f, "%u %llu:", a, (unsigned long long)v->row_total[a]);
		for (uint64_t j = v->row_start[a]; j < v->row_start[a + 1]; j++)
			fprintf(f, " %u:%llu", v->col[j], (unsigned long long)v->cnt[j]);
		fputc('\n', f);
	}
}

static void close_tm(void *t) { tm_close((tmat **)&t); }

int main(int argc, char **argv)
{
	const pcg_img_info info = { "tm-info", "rows",
				    "print the rows instead, one per line: a total: b:count ...",
				    open_tm, stats, rows, close_tm };

	return pcg_img_info_main(&info, argc, argv);
}
