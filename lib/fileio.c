/* fileio.c: atomic whole-file writes (see fileio.h). */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int write_fd(int fd, const void *data, size_t n)
{
	const char *p = data;

	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int pcg_write_file(const char *path, const void *data, size_t n, mode_t mode, pcg_err *err)
{
	char tmp[4200];
	int fd;

	if (!strcmp(path, "-"))
		return fflush(stdout) == 0 && write_fd(STDOUT_FILENO, data, n) == 0
			? 0 : pcg_fail(err, "stdout: %s", strerror(errno));
	if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
		return pcg_fail(err, "%s: path too long", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return pcg_fail(err, "%s: %s", tmp, strerror(errno));
	if (write_fd(fd, data, n) < 0 || fsync(fd) != 0) {
		pcg_fail(err, "%s: %s", tmp, strerror(errno));
		close(fd);
		unlink(tmp);
		return -1;
	}
	if (close(fd) != 0 || rename(tmp, path) != 0) {
		pcg_fail(err, "%s: %s", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}
