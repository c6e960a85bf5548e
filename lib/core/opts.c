/* opts.c: table-driven command-line flags (see opts.h). */
#include "opts.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPTS 128
static unsigned char given[MAX_OPTS];

static int set_value(const pcg_opt *o, const char *v, pcg_err *err)
{
	char *end;
	double d;

	switch (PCG_OPT_TYPE(o)) {
	case PCG_OPT_STR:
		*(const char **)o->dst = v;
		return 0;
	case PCG_OPT_FLAG:
		*(int *)o->dst = v ? atoi(v) != 0 : 1;
		return 0;
	case PCG_OPT_INT: {
		errno = 0;
		long l = strtol(v, &end, 10);
		if (errno || end == v || *end || l < -2147483647L || l > 2147483647L)
			return pcg_fail(err, "--%s: '%s' is not an integer", o->name, v);
		d = (double)l;
		if (o->min <= o->max && (d < o->min || d > o->max))
			return pcg_fail(err, "--%s: %ld out of range [%g, %g]", o->name, l, o->min,
					o->max);
		*(int *)o->dst = (int)l;
		return 0;
	}
	case PCG_OPT_SIZE: {
		errno = 0;
		double s = strtod(v, &end);
		if (errno || end == v || !isfinite(s))
			return pcg_fail(err, "--%s: '%s' is not a size", o->name, v);
		if (*end == 'K' || *end == 'k') s *= 1024.0, end++;
		else if (*end == 'M' || *end == 'm') s *= 1048576.0, end++;
		else if (*end == 'G' || *end == 'g') s *= 1073741824.0, end++;
		if (*end || s < 0 || s > 9.2e18)
			return pcg_fail(err, "--%s: '%s' is not a size (N, NK, NM or NG)", o->name, v);
		if (o->min <= o->max && (s < o->min || s > o->max))
			return pcg_fail(err, "--%s: %s out of range [%g, %g]", o->name, v, o->min,
					o->max);
		*(long long *)o->dst = (long long)s;
		return 0;
	}
	case PCG_OPT_FLOAT:
		errno = 0;
		d = strtod(v, &end);
		if (errno || end == v || *end || !isfinite(d))
			return pcg_fail(err, "--%s: '%s' is not a number", o->name, v);
		if (o->min <= o->max && (d < o->min || d > o->max))
			return pcg_fail(err, "--%s: %g out of range [%g, %g]", o->name, d, o->min,
					o->max);
		*(double *)o->dst = d;
		return 0;
	}
	return pcg_fail(err, "--%s: bad option type", o->name);
}

int pcg_opts_parse(const pcg_opt *opts, int argc, char **argv, pcg_err *err)
{
	char **pos;
	int npos = 0, i, k;

	memset(given, 0, sizeof given);
	for (k = 0; opts[k].name; k++) {
		const pcg_opt *o = &opts[k];
		if (o->def == NULL) {
			switch (PCG_OPT_TYPE(o)) {
			case PCG_OPT_STR: *(const char **)o->dst = NULL; break;
			case PCG_OPT_FLOAT: *(double *)o->dst = 0; break;
			case PCG_OPT_SIZE: *(long long *)o->dst = 0; break;
			default: *(int *)o->dst = 0; break;
			}
		} else if (set_value(o, o->def, err) < 0) {
			return -1;
		}
	}
	pos = malloc((size_t)(argc + 1) * sizeof *pos);
	if (pos == NULL)
		return pcg_fail(err, "out of memory");
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *eq, *val = NULL;
		size_t len;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			free(pos);
			return PCG_OPTS_HELP;
		}
		if (!strcmp(a, "--version")) { /* as every tool does: print, exit */
			const char *slash = strrchr(argv[0], '/');
			printf("%s (pcg-tts) %s\n", slash ? slash + 1 : argv[0], PCG_VERSION);
			fflush(stdout);
			free(pos);
			exit(ferror(stdout) ? 1 : 0);
		}
		if (!strcmp(a, "--")) {
			for (i++; i < argc; i++)
				pos[npos++] = argv[i];
			break;
		}
		if (a[0] == '-' && a[1] != '-' && a[1] != '\0' && a[2] == '\0')
			a += 1; /* -x: the one-letter option x */
		else if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
			pos[npos++] = argv[i]; /* positional; "-" (stdin) included */
			continue;
		} else
			a += 2;
		eq = strchr(a, '=');
		len = eq ? (size_t)(eq - a) : strlen(a);
		for (k = 0; opts[k].name; k++)
			if (strlen(opts[k].name) == len && !strncmp(opts[k].name, a, len))
				break;
		if (!opts[k].name) {
			free(pos);
			return pcg_fail(err, "unknown option %s", argv[i]);
		}
		if (eq)
			val = eq + 1;
		else if (PCG_OPT_TYPE(&opts[k]) != PCG_OPT_FLAG) {
			if (i + 1 >= argc) {
				free(pos);
				return pcg_fail(err, "--%s needs a value", opts[k].name);
			}
			val = argv[++i];
		}
		if (set_value(&opts[k], val, err) < 0) {
			free(pos);
			return -1;
		}
		if (k < MAX_OPTS)
			given[k] = 1;
	}
	for (k = 0; opts[k].name; k++)
		if ((opts[k].type & PCG_OPT_REQUIRED) && !(k < MAX_OPTS && given[k])) {
			free(pos);
			return pcg_fail(err, "%s%s is required", opts[k].name[1] ? "--" : "-",
					opts[k].name);
		}
	/* Positional arguments go last, in order. */
	for (i = 0; i < npos; i++)
		argv[argc - npos + i] = pos[i];
	free(pos);
	return argc - npos;
}

int pcg_opts_given(const pcg_opt *opts, const char *name)
{
	for (int k = 0; opts[k].name && k < MAX_OPTS; k++)
		if (!strcmp(opts[k].name, name))
			return given[k];
	return 0;
}

void pcg_opts_usage(FILE *f, const char *prog, const char *synopsis, const pcg_opt *opts)
{
	fprintf(f, "usage: %s %s\n", prog, synopsis);
	for (int k = 0; opts[k].name; k++) {
		const pcg_opt *o = &opts[k];
		char lhs[64];
		snprintf(lhs, sizeof lhs, "%s%s%s%s", o->name[1] ? "--" : "-", o->name,
			 o->metavar ? " " : "", o->metavar ? o->metavar : "");
		fprintf(f, "  %-24s %s", lhs, o->help);
		if (o->def && PCG_OPT_TYPE(o) != PCG_OPT_FLAG)
			fprintf(f, " (default %s)", o->def);
		fputc('\n', f);
	}
	fprintf(f, "  %-24s %s\n  %-24s %s\n", "-h, --help", "this help", "--version",
		"the version of pcg-tts");
}

int pcg_usage_error(const char *prog, const char *synopsis, const pcg_opt *opts,
		    const char *msg)
{
	fprintf(stderr, "%s: %s\n", prog, msg);
	pcg_opts_usage(stderr, prog, synopsis, opts);
	return 2;
}

int pcg_report(const char *prog, const pcg_err *err)
{
	fprintf(stderr, "%s: %s\n", prog, err->msg);
	return 1;
}

int pcg_parse_ids(const char *s, int **out, int *n)
{
	int cap = 16, *v = malloc(cap * sizeof *v);

	*n = 0;
	if (v == NULL)
		return -1;
	while (*s) {
		char *end;
		long id;
		errno = 0;
		id = strtol(s, &end, 10);
		if (end == s || errno || id < 0 || id > INT_MAX || (*end && *end != ',')) {
			free(v);
			return -1;
		}
		if (*n == cap) {
			int *w = realloc(v, (cap *= 2) * sizeof *v);
			if (w == NULL) {
				free(v);
				return -1;
			}
			v = w;
		}
		v[(*n)++] = (int)id;
		s = *end ? end + 1 : end;
	}
	*out = v;
	return *n > 0 ? 0 : -1;
}
