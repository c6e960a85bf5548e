/* fileio.c: atomic whole-file writes (see fileio.h). */
#include "fileio.h"

#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
	pcg_out o;

	if (!strcmp(path, "-"))
		return fflush(stdout) == 0 && write_fd(STDOUT_FILENO, data, n) == 0
			? 0 : pcg_fail(err, "stdout: %s", strerror(errno));
	if (pcg_out_open(&o, path, mode, err) < 0)
		return -1;
	pcg_out_write(&o, data, n);
	return pcg_out_commit(&o, err);
}

int pcg_out_open(pcg_out *o, const char *path, mode_t mode, pcg_err *err)
{
	o->fd = -1;
	o->failed = 0;
	o->path = strdup(path);
	o->tmp = NULL;
	if (o->path == NULL || asprintf(&o->tmp, "%s.tmp", path) < 0) {
		o->tmp = NULL;
		pcg_out_abort(o);
		return pcg_fail(err, "%s: out of memory", path);
	}
	o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (o->fd < 0) {
		pcg_fail(err, "%s: cannot create: %s", o->tmp, strerror(errno));
		free(o->tmp);
		o->tmp = NULL; /* nothing to remove */
		pcg_out_abort(o);
		return -1;
	}
	return 0;
}

void pcg_out_write(pcg_out *o, const void *data, size_t n)
{
	if (o->fd >= 0 && !o->failed && write_fd(o->fd, data, n) < 0)
		o->failed = errno ? errno : EIO;
}

int pcg_out_commit(pcg_out *o, pcg_err *err)
{
	int rc = -1;

	if (o->fd < 0)
		pcg_fail(err, "%s: not open", o->path ? o->path : "output");
	else if (o->failed)
		pcg_fail(err, "%s: write: %s", o->tmp, strerror(o->failed));
	else if (fsync(o->fd) < 0)
		pcg_fail(err, "%s: write: %s", o->tmp, strerror(errno));
	else {
		int c = close(o->fd);
		o->fd = -1;
		if (c < 0)
			pcg_fail(err, "%s: write: %s", o->tmp, strerror(errno));
		else if (rename(o->tmp, o->path) < 0)
			pcg_fail(err, "%s: rename: %s", o->path, strerror(errno));
		else {
			free(o->tmp);
			o->tmp = NULL; /* renamed: nothing to remove */
			rc = 0;
		}
	}
	pcg_out_abort(o);
	return rc;
}

void pcg_out_abort(pcg_out *o)
{
	if (o->fd >= 0)
		close(o->fd);
	o->fd = -1;
	if (o->tmp != NULL)
		unlink(o->tmp);
	free(o->tmp);
	free(o->path);
	o->tmp = o->path = NULL;
}

/* Reads all of fd into a malloc'd buffer (pipes, standard input). */
static unsigned char *read_all(int fd, uint64_t *size, const char *name, pcg_err *err)
{
	size_t cap = 1 << 16, len = 0;
	unsigned char *b = malloc(cap);

	if (b == NULL) {
		pcg_fail(err, "%s: out of memory", name);
		return NULL;
	}
	for (;;) {
		ssize_t r;
		if (len == cap) {
			unsigned char *nb = realloc(b, cap *= 2);
			if (nb == NULL) {
				free(b);
				pcg_fail(err, "%s: out of memory", name);
				return NULL;
			}
			b = nb;
		}
		r = read(fd, b + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			pcg_fail(err, "%s: %s", name, strerror(errno));
			free(b);
			return NULL;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	*size = len;
	return b;
}

int pcg_image_open(const char *path, uint64_t min_map, pcg_image *im, pcg_err *err)
{
	const int is_stdin = !strcmp(path, "-");
	const char *name = is_stdin ? "stdin" : path;
	struct stat st;
	int fd, rc = -1;

	memset(im, 0, sizeof *im);
	fd = is_stdin ? 0 : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		pcg_fail(err, "%s: %s", name, strerror(errno));
		goto out;
	}
	if (S_ISREG(st.st_mode) && (uint64_t)st.st_size >= min_map) {
		im->map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (im->map == MAP_FAILED) {
			pcg_fail(err, "%s: mmap: %s", name, strerror(errno));
			im->map = NULL;
			goto out;
		}
		im->map_len = (size_t)st.st_size;
		im->size = (uint64_t)st.st_size;
		im->data = im->map;
	} else {
		im->buf = read_all(fd, &im->size, name, err);
		if (im->buf == NULL)
			goto out;
		im->data = im->buf;
	}
	rc = 0;
out:
	if (fd > 0)
		close(fd);
	return rc;
}

void pcg_image_own(pcg_image *im, unsigned char *buf, uint64_t size)
{
	pcg_image_close(im);
	im->buf = buf;
	im->data = buf;
	im->size = size;
}

int pcg_image_copy(pcg_image *im, const void *data, size_t size, const char *name,
		   pcg_err *err)
{
	unsigned char *b = malloc(size ? size : 1);

	if (b == NULL)
		return pcg_fail(err, "%s: out of memory", name);
	memcpy(b, data, size);
	pcg_image_own(im, b, size);
	return 0;
}

void pcg_image_close(pcg_image *im)
{
	if (im->map)
		munmap(im->map, im->map_len);
	free(im->buf);
	memset(im, 0, sizeof *im);
}

static int cmp_span(const void *a, const void *b)
{
	const pcg_span *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* Sorted by (begin, end), each range must begin at or after the furthest
 * end so far. */
int pcg_spans_overlap(pcg_span *sp, int n)
{
	uint64_t reach = 0;

	qsort(sp, (size_t)n, sizeof *sp, cmp_span);
	for (int i = 0; i < n; i++) {
		if (sp[i].begin < reach && sp[i].begin != sp[i].end)
			return i;
		if (sp[i].end > reach)
			reach = sp[i].end;
	}
	return -1;
}

int pcg_json_fail(pcg_err *err, const char *what, const void *json_error)
{
	const json_error_t *je = json_error;

	if (je->line < 1)
		return pcg_fail(err, "%s: %s", what, je->text);
	return pcg_fail(err, "%s: not valid JSON at line %d, column %d: %s", what, je->line,
			je->column, je->text);
}

int pcg_config_beside(const char *weights, char *buf, size_t n)
{
	struct stat st;
	const char *slash;

	if (stat(weights, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(buf, n, "%s/config.json", weights);
	else if ((slash = strrchr(weights, '/')) != NULL)
		snprintf(buf, n, "%.*s/config.json", (int)(slash - weights), weights);
	else
		snprintf(buf, n, "config.json");
	return stat(buf, &st) == 0 && S_ISREG(st.st_mode);
}
