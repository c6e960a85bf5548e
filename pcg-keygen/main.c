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

static const char *prog = "pcg-keygen";

/* Writes text to path.tmp with mode, then renames it into place. */
static int write_file(const char *path, const char *text, mode_t mode)
{
	char tmp[4200];
	int fd;
	size_t n = strlen(text);

	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0 || write(fd, text, n) != (ssize_t)n || fsync(fd) != 0 || close(fd) != 0 ||
	    rename(tmp, path) != 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	char pub[41], sec[41], path[4096], text[256];
	struct stat st;

	if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: %s NAME\n  writes NAME.key (keypair, mode 0600) and NAME.pub\n", prog);
		return 0;
	}
	if (argc != 2 || argv[1][0] == '-' || strlen(argv[1]) > 4000) {
		fprintf(stderr, "usage: %s NAME\n", prog);
		return 2;
	}
	snprintf(path, sizeof path, "%s.key", argv[1]);
	if (stat(path, &st) == 0) { /* a secret key is never overwritten */
		fprintf(stderr, "%s: %s exists; remove it first\n", prog, path);
		return 1;
	}
	if (zmq_curve_keypair(pub, sec) != 0) {
		fprintf(stderr, "%s: zmq_curve_keypair: %s (libzmq without CURVE?)\n", prog,
			zmq_strerror(zmq_errno()));
		return 1;
	}
	snprintf(text, sizeof text, "public %s\nsecret %s\n", pub, sec);
	if (write_file(path, text, 0600) < 0)
		return 1;
	snprintf(path, sizeof path, "%s.pub", argv[1]);
	snprintf(text, sizeof text, "%s\n", pub);
	return write_file(path, text, 0644) < 0 ? 1 : 0;
}
