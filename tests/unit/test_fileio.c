/* test_fileio.c: output files as fileio.h promises, for each kind of thing
 * at the path: a regular file is replaced atomically (a new inode, the old
 * one untouched by a failure), a missing one created, a symbolic link
 * written through to its target (a chain of links, a relative link, a
 * dangling one), /dev/null, /dev/full (ENOSPC is an error), a FIFO read by
 * a child and standard output written through and never replaced, a
 * directory refused; a link planted at the old predictable temporary name
 * PATH.tmp is not followed; no temporary file is left after a commit, an
 * abort, a failed write or a SIGTERM. And small files read whole: /dev/zero,
 * a FIFO and a directory refused at once, a file over the limit refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fileio.h"

static char dir[600], sub[700];

static const char *at(const char *name)
{
	static char buf[4][1400];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
	return buf[k];
}

/* The file's bytes as a string ("" when it cannot be read). */
static const char *slurp(const char *path)
{
	static char buf[4096];
	FILE *f = fopen(path, "rb");
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = '\0';
	return buf;
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static int kind(const char *path) /* lstat's S_IFMT, 0 when nothing is there */
{
	struct stat st;
	return lstat(path, &st) == 0 ? (int)(st.st_mode & S_IFMT) : 0;
}

static int has(const pcg_err *e, const char *word)
{
	return strstr(e->msg, word) != NULL;
}

static void regular(void)
{
	pcg_err err = { "" };
	struct stat a, b;
	const mode_t mask = umask(022);

	/* missing: created with the mode less the umask */
	CHECKF(pcg_write_file(at("new"), "one", 3, 0640, &err) == 0, "%s", err.msg);
	CHECK(!strcmp(slurp(at("new")), "one"));
	CHECK(stat(at("new"), &a) == 0 && (a.st_mode & 0777) == 0640);
	/* existing: replaced by a new inode, so a reader holding the old one
	 * never sees a mixture */
	CHECKF(pcg_write_file(at("new"), "two!", 4, 0644, &err) == 0, "%s", err.msg);
	CHECK(!strcmp(slurp(at("new")), "two!"));
	CHECK(stat(at("new"), &b) == 0 && b.st_ino != a.st_ino && S_ISREG(b.st_mode));
	/* piece by piece, then an abort: the old file stays, nothing is left */
	pcg_out o;
	CHECKF(pcg_out_open(&o, at("new"), 0644, &err) == 0, "%s", err.msg);
	CHECK(!o.through && o.tmp != NULL && strstr(o.tmp, "/.new.") && kind(o.tmp) == S_IFREG);
	pcg_out_write(&o, "three", 5);
	pcg_out_abort(&o);
	CHECK(!strcmp(slurp(at("new")), "two!"));
	CHECK(check_partials(dir) == 0);
	/* a directory at the path, or a path in a missing one: refused */
	CHECK(pcg_write_file(sub, "x", 1, 0644, &err) < 0 && has(&err, "is a directory"));
	CHECK(pcg_write_file(at("no/such/f"), "x", 1, 0644, &err) < 0 && has(&err, "no/such/f") &&
	      has(&err, "No such file"));
	CHECK(pcg_write_file(at("new/"), "x", 1, 0644, &err) < 0);
	CHECK(check_partials(dir) == 0);
	umask(mask);
}

static void links(void)
{
	pcg_err err = { "" };
	char buf[1400];

	/* a link to a file in another directory: the target is replaced there,
	 * the link stays a link */
	put(at("sub/target"), "old");
	CHECK(symlink("sub/target", at("ln")) == 0);
	CHECKF(pcg_write_file(at("ln"), "new", 3, 0644, &err) == 0, "%s", err.msg);
	CHECK(kind(at("ln")) == S_IFLNK && !strcmp(slurp(at("sub/target")), "new"));
	CHECK(check_partials(dir) == 0 && check_partials(sub) == 0);
	/* a chain: an absolute link to a relative one */
	CHECK(symlink("target", at("sub/rel")) == 0);
	CHECK(symlink(at("sub/rel"), at("chain")) == 0);
	CHECKF(pcg_write_file(at("chain"), "chained", 7, 0644, &err) == 0, "%s", err.msg);
	CHECK(kind(at("chain")) == S_IFLNK && kind(at("sub/rel")) == S_IFLNK);
	CHECK(!strcmp(slurp(at("sub/target")), "chained"));
	/* dangling: the file it names is created, the link kept */
	CHECK(symlink("sub/later", at("dangling")) == 0);
	CHECKF(pcg_write_file(at("dangling"), "made", 4, 0644, &err) == 0, "%s", err.msg);
	CHECK(kind(at("dangling")) == S_IFLNK && kind(at("sub/later")) == S_IFREG);
	CHECK(!strcmp(slurp(at("sub/later")), "made"));
	/* a loop: an error, not a hang */
	CHECK(symlink("loop2", at("loop1")) == 0 && symlink("loop1", at("loop2")) == 0);
	CHECK(pcg_write_file(at("loop1"), "x", 1, 0644, &err) < 0 && has(&err, "loop1"));
	/* links planted at the old predictable temporary names: not followed */
	put(at("victim"), "V\n");
	CHECK(symlink("victim", at("y.asg.tmp")) == 0);
	CHECK(symlink(at("victim"), at("y.asg.part")) == 0);
	CHECKF(pcg_write_file(at("y.asg"), "asg", 3, 0644, &err) == 0, "%s", err.msg);
	CHECK(!strcmp(slurp(at("victim")), "V\n"));
	CHECK(kind(at("y.asg")) == S_IFREG && !strcmp(slurp(at("y.asg")), "asg"));
	CHECK(readlink(at("y.asg.tmp"), buf, sizeof buf) > 0);
	CHECK(check_partials(dir) == 0 && check_partials(sub) == 0);
}

static void devices(void)
{
	pcg_err err = { "" };
	pcg_out o;

	CHECKF(pcg_write_file("/dev/null", "x", 1, 0644, &err) == 0, "%s", err.msg);
	CHECK(kind("/dev/null") == S_IFCHR);
	CHECK(pcg_write_file("/dev/full", "x", 1, 0644, &err) < 0);
	CHECKF(has(&err, "/dev/full") && has(&err, strerror(ENOSPC)), "%s", err.msg);
	CHECK(kind("/dev/full") == S_IFCHR);
	/* piece by piece: the first failure is kept, the commit reports it */
	CHECKF(pcg_out_open(&o, "/dev/full", 0644, &err) == 0 && o.through && o.tmp == NULL,
	       "%s", err.msg);
	pcg_out_write(&o, "a", 1);
	pcg_out_write(&o, "b", 1);
	CHECK(o.failed == ENOSPC && pcg_out_commit(&o, &err) < 0 && has(&err, "/dev/full"));
	/* a link to a device is written through to it */
	CHECK(symlink("/dev/full", at("full")) == 0);
	CHECK(pcg_write_file(at("full"), "x", 1, 0644, &err) < 0 && has(&err, strerror(ENOSPC)));
	CHECK(kind(at("full")) == S_IFLNK && kind("/dev/full") == S_IFCHR);
	CHECK(check_partials("/dev") == 0);
}

/* A FIFO read by a child (as `cat` would): the bytes come through, the
 * FIFO stays one. */
static void fifo(void)
{
	pcg_err err = { "" };
	static char big[200000];
	int status = -1;

	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (char)('a' + i % 26);
	CHECK(mkfifo(at("fifo"), 0600) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		static char got[sizeof big + 1];
		size_t n = 0;
		ssize_t r;
		int fd = open(at("fifo"), O_RDONLY);
		alarm(10);
		while (fd >= 0 && n < sizeof got && (r = read(fd, got + n, sizeof got - n)) > 0)
			n += (size_t)r;
		_exit(n == sizeof big && !memcmp(got, big, n) ? 0 : 1);
	}
	CHECKF(pcg_write_file(at("fifo"), big, sizeof big, 0644, &err) == 0, "%s", err.msg);
	waitpid(pid, &status, 0);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reader: status %d", status);
	CHECK(kind(at("fifo")) == S_IFIFO && check_partials(dir) == 0);
}

/* "-", /dev/stdout and /dev/fd/N: the descriptor, here a pipe. */
static void descriptors(void)
{
	static const char *names[] = { "-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1" };
	pcg_err err = { "" };
	int fds[2], saved = dup(1);
	char got[64] = "";
	size_t n = 0;

	fflush(stdout);
	CHECK(pipe(fds) == 0 && dup2(fds[1], 1) == 1);
	for (int i = 0; i < 4; i++)
		CHECKF(pcg_write_file(names[i], "ab", 2, 0644, &err) == 0, "%s: %s", names[i],
		       err.msg);
	dup2(saved, 1);
	close(saved);
	close(fds[1]);
	for (ssize_t r; n < sizeof got - 1 && (r = read(fds[0], got + n, sizeof got - 1 - n)) > 0;)
		n += (size_t)r;
	close(fds[0]);
	CHECKF(n == 8 && !memcmp(got, "abababab", 8), "read %zu bytes: %.*s", n, (int)n, got);
	CHECK(kind("/dev/stdout") == S_IFLNK);
}

/* A write that fails half way (a file-size limit standing in for a full
 * disk) and a SIGTERM while writing: the old file stays, nothing is left. */
static void failures(void)
{
	static char big[20000];
	int status = -1;

	put(at("keep"), "kept");
	pid_t pid = fork();
	if (pid == 0) {
		struct rlimit rl = { 8000, 8000 };
		pcg_err e = { "" };
		signal(SIGXFSZ, SIG_IGN);
		setrlimit(RLIMIT_FSIZE, &rl);
		int rc = pcg_write_file(at("keep"), big, sizeof big, 0644, &e);
		fprintf(stderr, "under a file-size limit: %s\n", e.msg);
		_exit(rc < 0 && strstr(e.msg, "keep") ? 0 : 1);
	}
	waitpid(pid, &status, 0);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
	CHECK(!strcmp(slurp(at("keep")), "kept") && check_partials(dir) == 0);

	/* SIGTERM at its default (main sees to it), and every other catchable
	 * signal that would end the process: the handler fileio installed at
	 * its first output file (inherited here) removes the temporary file,
	 * then the process dies of the signal as before */
	const int sigs[] = { SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGXCPU, SIGRTMIN + 1 };
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		int ready[2];
		char c;
		CHECK(pipe(ready) == 0);
		pid = fork();
		if (pid == 0) {
			pcg_out o;
			pcg_err e = { "" };
			if (pcg_out_open(&o, at("keep"), 0644, &e) < 0)
				_exit(1);
			pcg_out_write(&o, big, sizeof big);
			(void)!write(ready[1], "r", 1);
			pause();
			_exit(2);
		}
		close(ready[1]);
		CHECK(read(ready[0], &c, 1) == 1);
		close(ready[0]);
		CHECK(check_partials(dir) == 1); /* the child's, while it writes */
		kill(pid, sigs[i]);
		waitpid(pid, &status, 0);
		CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == sigs[i], "signal %d: status %d",
		       sigs[i], status);
		CHECKF(!strcmp(slurp(at("keep")), "kept") && check_partials(dir) == 0,
		       "signal %d left a temporary file", sigs[i]);
	}
}

/* A replaced file keeps its mode (and owner and group, as root); a new one
 * gets the umask's; the temporary files of a run killed outright are
 * removed by the next run once older than a day. */
static void kept(void)
{
	pcg_err err = { "" };
	struct stat st;

	put(at("private"), "old");
	CHECK(chmod(at("private"), 0600) == 0);
	if (geteuid() == 0)
		CHECK(chown(at("private"), 65534, 65534) == 0);
	CHECKF(pcg_write_file(at("private"), "new", 3, 0644, &err) == 0, "%s", err.msg);
	CHECK(stat(at("private"), &st) == 0 && (st.st_mode & 07777) == 0600);
	if (geteuid() == 0)
		CHECKF(st.st_uid == 65534 && st.st_gid == 65534, "owner %d:%d", (int)st.st_uid,
		       (int)st.st_gid);
	CHECK(!strcmp(slurp(at("private")), "new"));
	const mode_t um = umask(027);
	CHECKF(pcg_write_file(at("fresh"), "x", 1, 0666, &err) == 0, "%s", err.msg);
	umask(um);
	CHECK(stat(at("fresh"), &st) == 0 && (st.st_mode & 07777) == 0640);

	put(at(".stale.abcdef.partial"), "dead");
	put(at(".stale.ghijkl.partial"), "young");
	struct timespec old[2] = { { time(NULL) - 2 * 86400, 0 }, { time(NULL) - 2 * 86400, 0 } };
	CHECK(utimensat(AT_FDCWD, at(".stale.abcdef.partial"), old, 0) == 0);
	CHECKF(pcg_write_file(at("stale"), "x", 1, 0644, &err) == 0, "%s", err.msg);
	CHECK(access(at(".stale.abcdef.partial"), F_OK) != 0);
	CHECK(access(at(".stale.ghijkl.partial"), F_OK) == 0); /* another run's, maybe */
	unlink(at(".stale.ghijkl.partial"));
	unlink(at("private"));
	unlink(at("fresh"));
	unlink(at("stale"));
}

static void small(void)
{
	pcg_err err = { "" };
	char *d = NULL;
	size_t n = 0;
	struct timespec t0, t1;

	put(at("key"), "public abc\n");
	CHECKF(pcg_read_small(at("key"), 100, &d, &n, &err) == 0 && n == 11 &&
	       !strcmp(d, "public abc\n"), "%s", err.msg);
	free(d);
	CHECK(pcg_read_small(at("key"), 5, &d, &n, &err) < 0 && d == NULL && has(&err, "key") &&
	      has(&err, "more than"));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(pcg_read_small("/dev/zero", 100, &d, &n, &err) < 0 && has(&err, "/dev/zero") &&
	      has(&err, "not a regular file"));
	/* a FIFO nobody writes to: refused at once, not waited for */
	CHECK(pcg_read_small(at("fifo"), 100, &d, &n, &err) < 0 && has(&err, "FIFO"));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(t1.tv_sec - t0.tv_sec < 2);
	CHECK(pcg_read_small(dir, 100, &d, &n, &err) < 0 && has(&err, "directory"));
	CHECK(pcg_read_small(at("none"), 100, &d, &n, &err) < 0 && has(&err, "none"));
}

int main(void)
{
	signal(SIGTERM, SIG_DFL);
	snprintf(dir, sizeof dir, "%s", check_tmpdir());
	snprintf(sub, sizeof sub, "%s/sub", dir);
	if (mkdir(sub, 0755) != 0) {
		perror(sub);
		return 1;
	}
	regular();
	kept();
	links();
	devices();
	fifo();
	descriptors();
	failures();
	small();
	return check_done("test_fileio");
}
