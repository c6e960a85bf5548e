/* pcg-mcd: mel-cepstral distortion after dynamic time warping between two
 * recordings (lib/codec/mcd.h has the recipe), printed in dB, or with --json the
 * frame counts and the path length too.
 */
#include <jansson.h>
#include <stdio.h>

#include "mcd.h"
#include "opts.h"

static const char *prog = "pcg-mcd";
static const char *SYNOPSIS = "[--json] A.wav B.wav";

static int json;

static const pcg_opt opts[] = {
	{ "json", PCG_OPT_FLAG, &json, NULL, 1, 0, NULL,
	  "print a JSON object: mcd_db, frames_a, frames_b, path_length, sample_rate, ..." },
	{ NULL },
};

static int print_json(const char *a, const char *b, const mcd_result *r)
{
	json_t *o = json_pack("{s:s, s:s, s:f, s:I, s:I, s:I, s:i, s:i, s:i}", "a", a, "b", b,
			      "mcd_db", r->mcd_db, "frames_a", (json_int_t)r->frames_a,
			      "frames_b", (json_int_t)r->frames_b, "path_length",
			      (json_int_t)r->path_len, "sample_rate", r->rate, "channels_a",
			      r->channels_a, "channels_b", r->channels_b);
	int rc;

	if (o == NULL) /* only a path that is not UTF-8 gets here */
		return -1;
	rc = json_dumpf(o, stdout, JSON_REAL_PRECISION(10));
	putchar('\n');
	json_decref(o);
	return rc;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);
	mcd_config c;
	mcd_result r;

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || argc - first != 2) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg : "two files are required");
	}
	mcd_config_default(&c);
	if (mcd_files(argv[first], argv[first + 1], &c, &r, &err) < 0) {
		pcg_report(prog, &err);
		return 1;
	}
	if (json) {
		if (print_json(argv[first], argv[first + 1], &r) < 0) {
			fprintf(stderr, "%s: a file name is not UTF-8, JSON cannot hold it\n", prog);
			return 1;
		}
	} else {
		printf("%.4f\n", r.mcd_db);
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: stdout: write failed\n", prog);
		return 1;
	}
	return 0;
}
