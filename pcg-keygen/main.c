/* pcg-keygen: makes a CURVE keypair for a stage of the pipeline: NAME.key
 * (the public and the secret key, mode 0600) and NAME.pub (the public key,
 * for the peers' allow-lists and server-key files). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "opts.h"

#include "fileio.h"

static const char *prog = "pcg-keygen";

int main(int argc, char **argv)
{
	char pub[41], sec[41], path[4096], text[256];
	pcg_err err = { "" };
	struct stat st;

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: %s NAME\n  writes NAME.key (keypair, mode 0600) and NAME.pub\n", prog);
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "--version")) {
		printf("%s (pcg-tts) %s\n", prog, PCG_VERSION);
		return 0;
	}
	if (argc == 2 && argv[1][0] == '-')
		fprintf(stderr, "%s: unknown option %s\n", prog, argv[1]);
	if (argc != 2 || argv[1][0] == '-' || strlen(argv[1]) > 4000) {
		fprintf(stderr, "usage: %s NAME\n", prog);
		return 2;
	}
	/* an empty name, or one ending in '/', would write the hidden files
	 * ".key" and ".pub" */
	const size_t nl = strlen(argv[1]);
	if (nl == 0 || argv[1][nl - 1] == '/') {
		fprintf(stderr, "%s: NAME %s: give a name for the files (NAME.key and NAME.pub), "
			"such as 'server'\n", prog, nl ? "ends in '/'" : "is empty");
		return 2;
	}
	snprintf(path, sizeof path, "%s.key", argv[1]);
	/* a secret key is never overwritten, nor written through a link
	 * someone left at its name */
	if (lstat(path, &st) == 0) {
		fprintf(stderr, "%s: %s exists; remove it first\n", prog, path);
		return 1;
	}
	if (zmq_curve_keypair(pub, sec) != 0) {
		fprintf(stderr, "%s: zmq_curve_keypair: %s (libzmq without CURVE?)\n", prog,
			zmq_strerror(zmq_errno()));
		return 1;
	}
	snprintf(text, sizeof text, "public %s\nsecret %s\n", pub, sec);
	if (pcg_write_file(path, text, strlen(text), 0600, &err) < 0) {
		pcg_report(prog, &err);
		return 1;
	}
	snprintf(path, sizeof path, "%s.pub", argv[1]);
	snprintf(text, sizeof text, "%s\n", pub);
	if (pcg_write_file(path, text, strlen(text), 0644, &err) < 0) {
		pcg_report(prog, &err);
		return 1;
	}
	return 0;
}
