/* image_info.c: pcg_img_info_main (image.h), apart from image.c so that
 * the readers need not link the option parser. */
#include "image.h"

#include "opts.h"

int pcg_img_info_main(const pcg_img_info *in, int argc, char **argv)
{
	char synopsis[64];
	int listing = 0;
	const pcg_opt opts[] = {
		{ in->flag, PCG_OPT_FLAG, &listing, NULL, 1, 0, NULL, in->flag_help },
		{ NULL },
	};
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);

	snprintf(synopsis, sizeof synopsis, "[--%s] FILE", in->flag);
	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, in->prog, synopsis, opts);
		return 0;
	}
	if (first < 0 || argc - first != 1)
		return pcg_usage_error(in->prog, synopsis, opts,
				       first < 0 ? err.msg : "one FILE is required");
	void *obj = in->open(argv[first], &err);
	if (obj == NULL)
		return pcg_report(in->prog, &err);
	if (listing) {
		in->list(stdout, obj);
	} else {
		printf("file\t%s\n", argv[first]);
		in->stats(stdout, obj);
		printf("checksum_ok\tyes\n");
	}
	in->close(obj);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: stdout: write failed\n", in->prog);
		return 1;
	}
	return 0;
}
