/* check.h: the few macros the C unit tests use. A failed CHECK prints file,
 * line and the expression, and the test exits 1 at check_done(). SKIP exits
 * 77 with a reason, which tests/run reports. */
#ifndef PCG_CHECK_H
#define PCG_CHECK_H

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int check_failures;
static int check_count;

#define CHECK(cond) do { \
	check_count++; \
	if (!(cond)) { \
		check_failures++; \
		fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
	} \
} while (0)

#define CHECKF(cond, ...) do { \
	check_count++; \
	if (!(cond)) { \
		check_failures++; \
		fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
	} \
} while (0)

#define SKIP(...) do { printf(__VA_ARGS__); putchar('\n'); exit(77); } while (0)

static inline int check_done(const char *name)
{
	printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
	return check_failures ? 1 : 0;
}

/* Directory for the test's files: TEST_TMP (tests/run sets it and removes
 * it), else a fresh directory of its own under TMPDIR that is removed, with
 * what the test left in it, when the test exits. */
static char check_own_tmp[200]; /* short: the tests join names to it in small buffers */
static pid_t check_own_pid; /* a forked child leaves it to its parent */

static inline int check_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static inline void check_rm_tmp(void)
{
	if (getpid() == check_own_pid)
		nftw(check_own_tmp, check_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline const char *check_tmpdir(void)
{
	const char *d = getenv("TEST_TMP");
	if (d && *d)
		return d;
	if (!check_own_tmp[0]) {
		const char *t = getenv("TMPDIR");
		snprintf(check_own_tmp, sizeof check_own_tmp, "%s/pcg-test.XXXXXX", t && *t ? t : "/tmp");
		if (mkdtemp(check_own_tmp) == NULL) {
			perror(check_own_tmp);
			exit(2);
		}
		check_own_pid = getpid();
		atexit(check_rm_tmp);
	}
	return check_own_tmp;
}

/* The temporary files of lib/core/fileio.c (.NAME.XXXXXX.partial) left in dir: 0
 * after every write, finished or failed; -1 if dir cannot be read. */
static inline int check_partials(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		n += l > 8 && !strcmp(e->d_name + l - 8, ".partial");
	}
	closedir(d);
	return n;
}

#endif
