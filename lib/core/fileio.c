/* fileio.c: output files written through or replaced atomically, input
 * files read whole or mapped (see fileio.h). */
#include "fileio.h"

#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ output files */

/* The temporary files that exist now, for the signal handler: a slot holds
 * a name from its creation until after its rename or unlink, so that a
 * signal between the two removes a name that is gone, never leaves one. */
#define MAX_LIVE 64
static _Atomic(char *) live[MAX_LIVE];
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
/* every catchable signal whose default ends the process: interrupted,
 * killed, a closed pipe or terminal, a file-size or CPU limit, the user
 * signals, timers, and the faults (the real-time signals are added in
 * install_handlers) */
static const int fatal_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGXFSZ, SIGXCPU,
				     SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF,
				     SIGIO, SIGPWR, SIGSYS, SIGTRAP, SIGABRT, SIGSEGV, SIGBUS,
				     SIGFPE, SIGILL };

/* Removes every temporary file, then dies of the signal as it would have
 * (SA_RESETHAND restored the default; the raise is delivered on return).
 * unlink and raise are async-signal-safe. */
static void on_fatal(int sig)
{
	const int saved = errno;

	for (int i = 0; i < MAX_LIVE; i++) {
		char *t = atomic_load(&live[i]);
		if (t != NULL)
			unlink(t);
	}
	raise(sig);
	errno = saved;
}

/* The handler goes only where the signal would kill the process: a program
 * that handles the signal itself, or ignores it, keeps its own. */
static void install_one(int sig)
{
	struct sigaction old, sa;

	if (sigaction(sig, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
	    old.sa_handler != SIG_DFL)
		return;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_fatal;
	sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

static void install_handlers(void)
{
	for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++)
		install_one(fatal_signals[i]);
	for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
		install_one(sig);
}

static void live_add(char *tmp)
{
	pthread_once(&handlers_once, install_handlers);
	for (int i = 0; i < MAX_LIVE; i++) {
		char *none = NULL;
		if (atomic_compare_exchange_strong(&live[i], &none, tmp))
			return;
	}
	/* all taken: this one is removed on the error paths only */
}

static void live_remove(const char *tmp)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		char *t = (char *)tmp;
		if (atomic_compare_exchange_strong(&live[i], &t, NULL))
			return;
	}
}

static int write_fd(int fd, const void *data, size_t n)
{
	const char *p = data;

	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w == 0)
			errno = EIO;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The descriptor a name stands for (/dev/stdout, /dev/fd/N, ...), or -1. */
static int fd_name(const char *p)
{
	const char *n = !strncmp(p, "/dev/fd/", 8) ? p + 8
		      : !strncmp(p, "/proc/self/fd/", 14) ? p + 14 : NULL;

	if (!strcmp(p, "/dev/stdout"))
		return STDOUT_FILENO;
	if (!strcmp(p, "/dev/stderr"))
		return STDERR_FILENO;
	if (n != NULL && *n && strlen(n) < 9 && strspn(n, "0123456789") == strlen(n))
		return atoi(n);
	return -1;
}

/* path with the symbolic links at its end followed, malloc'd (a dangling
 * link gives the name it points at); *fd is the descriptor the name stands
 * for, or -1. NULL with errno on failure. */
static char *follow(const char *path, int *fd)
{
	char *p = strdup(path);

	for (int hops = 0; p != NULL; hops++) {
		struct stat st;
		char target[4096], *next;
		const char *slash = strrchr(p, '/');
		ssize_t n;

		if ((*fd = fd_name(p)) >= 0 || lstat(p, &st) != 0 || !S_ISLNK(st.st_mode))
			return p;
		if (hops == 40 || (n = readlink(p, target, sizeof target - 1)) < 0) {
			if (hops == 40)
				errno = ELOOP;
			free(p);
			return NULL;
		}
		target[n] = '\0';
		/* a relative link is relative to the directory that holds it */
		if (target[0] == '/' || slash == NULL)
			next = strdup(target);
		else if (asprintf(&next, "%.*s/%s", (int)(slash - p), p, target) < 0)
			next = NULL;
		free(p);
		p = next;
	}
	return NULL;
}

/* Removes the temporary files of earlier runs for the same output name
 * (DIR/.NAME.XXXXXX.partial, regular files of this user) that are older
 * than a day: left by a process killed with SIGKILL or by a crash of the
 * machine. A younger one may be another run's, still writing. */
static void remove_stale(const char *dir, const char *base)
{
	DIR *d = opendir(dir);
	const size_t bl = strlen(base);
	const time_t now = time(NULL);
	struct dirent *e;

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		const char *n = e->d_name;
		const size_t nl = strlen(n);
		struct stat st;
		if (nl != 1 + bl + 1 + 6 + 8 || n[0] != '.' || strncmp(n + 1, base, bl) ||
		    n[1 + bl] != '.' || strcmp(n + nl - 8, ".partial"))
			continue;
		if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
		    st.st_uid == geteuid() && st.st_mtime < now - 86400)
			unlinkat(dirfd(d), n, 0);
	}
	closedir(d);
}

/* Creates the temporary file beside o->path: DIR/.NAME.XXXXXX.partial with
 * a random XXXXXX, exclusively. */
static int make_temp(pcg_out *o, mode_t mode, pcg_err *err)
{
	static const char digits[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	const char *slash = strrchr(o->path, '/');
	const int dlen = slash ? (int)(slash - o->path) + 1 : 0;
	const char *base = slash ? slash + 1 : o->path;
	unsigned char rnd[6];
	struct timespec ts;
	uint64_t r;

	if (*base == '\0' || !strcmp(base, ".") || !strcmp(base, ".."))
		return pcg_fail(err, "%s: not a file name", o->name);
	/* the name's length is bounded (NAME_MAX): a long one is cut */
	o->tmp = malloc((size_t)dlen + 200 + 32);
	if (o->tmp == NULL)
		return pcg_fail(err, "%s: out of memory", o->name);
	if (strlen(base) <= 200) {
		char *dir = dlen ? strndup(o->path, (size_t)dlen) : strdup(".");
		if (dir != NULL)
			remove_stale(dir, base);
		free(dir);
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	r = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ ((uint64_t)getpid() << 16);
	for (int tries = 0; tries < 100; tries++) {
		char suf[7];
		if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
			for (int i = 0; i < 6; i++) { /* no entropy yet: the clock's */
				r = r * 6364136223846793005ULL + 1442695040888963407ULL;
				rnd[i] = (unsigned char)(r >> 40);
			}
		for (int i = 0; i < 6; i++)
			suf[i] = digits[rnd[i] % 36];
		suf[6] = '\0';
		sprintf(o->tmp, "%.*s.%.200s.%s.partial", dlen, o->path, base, suf);
		o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
		if (o->fd >= 0) {
			live_add(o->tmp);
			return 0;
		}
		if (errno != EEXIST)
			break;
	}
	const int e = errno;
	free(o->tmp);
	o->tmp = NULL; /* nothing to remove */
	return pcg_fail(err, "%s: cannot create a temporary file in %.*s: %s", o->name,
			dlen ? dlen : 1, dlen ? o->path : ".",
			e == EEXIST ? "no free name" : strerror(e));
}

int pcg_out_open(pcg_out *o, const char *path, mode_t mode, pcg_err *err)
{
	struct stat st;
	int fd = -1;

	memset(o, 0, sizeof *o);
	o->fd = -1;
	o->name = strdup(strcmp(path, "-") ? path : "standard output");
	if (o->name == NULL)
		return pcg_fail(err, "%s: out of memory", path);
	if (!strcmp(path, "-"))
		fd = STDOUT_FILENO;
	else if ((o->path = follow(path, &fd)) == NULL) {
		pcg_fail(err, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (fd >= 0) { /* a descriptor: written where it points */
		if (fd == STDOUT_FILENO)
			fflush(stdout);
		o->through = 1;
		if ((o->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
			pcg_fail(err, "%s: %s", o->name, strerror(errno));
			goto fail;
		}
		return 0;
	}
	int have_old = 0;
	if (lstat(o->path, &st) != 0) {
		if (errno != ENOENT) {
			pcg_fail(err, "%s: %s", o->name, strerror(errno));
			goto fail;
		}
	} else if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
		o->through = 1;
		o->fd = open(o->path, O_WRONLY | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
		if (o->fd < 0 || fstat(o->fd, &st) != 0) {
			pcg_fail(err, "%s: %s", o->name, strerror(errno));
			goto fail;
		}
		if (!S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode)) {
			pcg_fail(err, "%s: replaced while it was opened; try again", o->name);
			goto fail;
		}
		return 0;
	} else if (S_ISDIR(st.st_mode)) {
		pcg_fail(err, "%s: is a directory; name a file in it", o->name);
		goto fail;
	} else if (!S_ISREG(st.st_mode)) {
		pcg_fail(err, "%s: not a regular file, character device or FIFO: "
			 "will not write to it", o->name);
		goto fail;
	} else {
		have_old = 1;
	}
	if (make_temp(o, mode, err) == 0) {
		/* a replaced file keeps its owner, group and mode (a private
		 * file stays private), where this process may set them; the
		 * owner first, as a change of owner clears set-id bits */
		if (have_old) {
			if (st.st_uid != geteuid() || st.st_gid != getegid())
				(void)fchown(o->fd, st.st_uid, st.st_gid);
			(void)fchmod(o->fd, st.st_mode & 07777);
		}
		return 0;
	}
fail:
	pcg_out_abort(o);
	return -1;
}

void pcg_out_write(pcg_out *o, const void *data, size_t n)
{
	if (o->fd >= 0 && !o->failed && write_fd(o->fd, data, n) < 0)
		o->failed = errno ? errno : EIO;
}

/* The rename is durable once the directory is on disk too: best effort,
 * since the complete file is in place already and some file systems refuse
 * fsync on a directory. */
static void sync_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, (size_t)(slash - path) + 1) : strdup(".");
	int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;

	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	free(dir);
}

int pcg_out_commit(pcg_out *o, pcg_err *err)
{
	int rc = -1;

	if (o->fd < 0)
		pcg_fail(err, "%s: not open", o->name ? o->name : "output");
	else if (o->failed)
		pcg_fail(err, "%s: write: %s", o->name, strerror(o->failed));
	else if (!o->through && fsync(o->fd) < 0)
		pcg_fail(err, "%s: write: %s", o->name, strerror(errno));
	else {
		int c = close(o->fd);
		o->fd = -1;
		if (c < 0)
			pcg_fail(err, "%s: write: %s", o->name, strerror(errno));
		else if (o->through)
			rc = 0;
		else if (rename(o->tmp, o->path) < 0)
			pcg_fail(err, "%s: rename: %s", o->name, strerror(errno));
		else {
			live_remove(o->tmp);
			free(o->tmp);
			o->tmp = NULL; /* renamed: nothing to remove */
			sync_dir(o->path);
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
	if (o->tmp != NULL) {
		unlink(o->tmp);
		live_remove(o->tmp);
	}
	free(o->tmp);
	free(o->path);
	free(o->name);
	o->tmp = o->path = o->name = NULL;
}

int pcg_out_through(const char *path)
{
	struct stat st;
	int fd = -1, through;
	char *p;

	if (!strcmp(path, "-"))
		return 1;
	if ((p = follow(path, &fd)) == NULL)
		return 0;
	through = fd >= 0 || (stat(p, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)));
	free(p);
	return through;
}

int pcg_write_file(const char *path, const void *data, size_t n, mode_t mode, pcg_err *err)
{
	pcg_out o;

	if (pcg_out_open(&o, path, mode, err) < 0)
		return -1;
	pcg_out_write(&o, data, n);
	return pcg_out_commit(&o, err);
}

int pcg_read_small(const char *path, size_t max, char **data, size_t *n, pcg_err *err)
{
	/* O_NONBLOCK: a FIFO is refused at once instead of waiting for a writer */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	struct stat st;
	char *b = NULL;
	size_t len = 0;

	*data = NULL;
	*n = 0;
	if (fd < 0 || fstat(fd, &st) != 0) {
		pcg_fail(err, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		pcg_fail(err, "%s: not a regular file (%s); name the file itself", path,
			 S_ISDIR(st.st_mode) ? "a directory" : S_ISCHR(st.st_mode) ? "a device"
			 : S_ISFIFO(st.st_mode) ? "a FIFO" : "not a file");
		goto fail;
	}
	if ((uint64_t)st.st_size > max) {
		pcg_fail(err, "%s: %lld bytes, more than the %zu such a file may have", path,
			 (long long)st.st_size, max);
		goto fail;
	}
	if ((b = malloc(max + 1)) == NULL) {
		pcg_fail(err, "%s: out of memory", path);
		goto fail;
	}
	/* up to max + 1 bytes: a file that grew since fstat is caught */
	for (;;) {
		ssize_t r = read(fd, b + len, max + 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			pcg_fail(err, "%s: %s", path, strerror(errno));
			goto fail;
		}
		if (r == 0)
			break;
		len += (size_t)r;
		if (len > max) {
			pcg_fail(err, "%s: more than the %zu bytes such a file may have", path, max);
			goto fail;
		}
	}
	close(fd);
	b[len] = '\0';
	*data = b;
	*n = len;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	free(b);
	return -1;
}

/* ------------------------------------------------------------ input files */

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

int pcg_bytes_open(const char *path, uint64_t min_map, pcg_bytes *im, pcg_err *err)
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

void pcg_bytes_own(pcg_bytes *im, unsigned char *buf, uint64_t size)
{
	pcg_bytes_close(im);
	im->buf = buf;
	im->data = buf;
	im->size = size;
}

int pcg_bytes_copy(pcg_bytes *im, const void *data, size_t size, const char *name,
		   pcg_err *err)
{
	unsigned char *b = malloc(size ? size : 1);

	if (b == NULL)
		return pcg_fail(err, "%s: out of memory", name);
	memcpy(b, data, size);
	pcg_bytes_own(im, b, size);
	return 0;
}

void pcg_bytes_close(pcg_bytes *im)
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
