/* opts.h: one table per program drives flag parsing, --help and validation,
 * so every default and range lives in exactly one place.
 *
 *   static pcg_opt opts[] = {
 *       { "threads", PCG_OPT_INT, &threads, "0", 0, 1024, "N", "threads (0: all cores)" },
 *       { 0 } };
 *   int first = pcg_opts_parse(opts, argc, argv, &err);
 *
 * Flags are "--name VALUE" or "--name=VALUE"; an option whose name is one
 * letter is written "-x VALUE" (as -o FILE). PCG_OPT_FLAG takes no value
 * and sets an int to 1. "--" ends the flags. Positional arguments may come
 * between flags: they are moved, in order, to argv[first..argc).
 */
#ifndef PCG_OPTS_H
#define PCG_OPTS_H

#include <stdio.h>

#include "err.h"

typedef enum pcg_opt_type {
	PCG_OPT_INT,    /* int */
	PCG_OPT_FLOAT,  /* double */
	PCG_OPT_STR,    /* const char * (points into argv or the default) */
	PCG_OPT_FLAG,   /* int, set to 1 */
	PCG_OPT_SIZE,   /* long long, accepts K, M, G suffixes (powers of 1024) */
} pcg_opt_type;

typedef struct pcg_opt {
	const char *name;
	pcg_opt_type type;
	void *dst;
	const char *def;     /* default as text; NULL: 0 / NULL */
	double min, max;     /* range for numbers; min > max: no check */
	const char *metavar; /* shown in --help */
	const char *help;
} pcg_opt;

/* Or'ed into a type: the parse fails, naming the flag, when it is not
 * given ({ "draft", PCG_OPT_STR | PCG_OPT_REQUIRED, ... }). */
#define PCG_OPT_REQUIRED 0x100
#define PCG_OPT_TYPE(o) ((pcg_opt_type)((o)->type & 0xff))

/* The release of pcg-tts, printed by every program's --version. */
#define PCG_VERSION "0.2.0"

/* Result codes besides the index of the first positional argument. */
#define PCG_OPTS_HELP (-2)

/* Sets every default, then parses. Returns the index of the first
 * positional argument (argc when none), PCG_OPTS_HELP for -h/--help, or -1
 * with err naming the flag and the problem. --version prints
 * "PROG (pcg-tts) VERSION" and exits 0, as every command-line tool does. */
int pcg_opts_parse(const pcg_opt *opts, int argc, char **argv, pcg_err *err);

/* Prints "usage: prog synopsis" and one line per flag with its default. */
void pcg_opts_usage(FILE *f, const char *prog, const char *synopsis, const pcg_opt *opts);

/* The usage error every program reports alike: "prog: msg" and the usage
 * on standard error. Returns 2, the exit status of a usage error. */
int pcg_usage_error(const char *prog, const char *synopsis, const pcg_opt *opts,
		    const char *msg);

/* Prints "prog: what failed" on standard error and returns 1, the exit
 * status of a failure; exits nothing (a program returns it from main, a
 * daemon's thread logs with it and goes on). */
int pcg_report(const char *prog, const pcg_err *err);

/* Parses a comma-separated list of token ids ("1,2,3", each in [0,
 * INT_MAX]) into a malloc'd array (*out, *n). Returns 0, or -1 on a bad or
 * empty list or out of memory (*out is then not set). */
int pcg_parse_ids(const char *s, int **out, int *n);

/* Whether flag name was given on the command line (after a parse). */
int pcg_opts_given(const pcg_opt *opts, const char *name);

#endif
