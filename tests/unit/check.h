/* check.h: the few macros the C unit tests use. A failed CHECK prints file,
 * line and the expression, and the test exits 1 at check_done(). SKIP exits
 * 77 with a reason, which tests/run reports. */
#ifndef PCG_CHECK_H
#define PCG_CHECK_H

#include <stdio.h>
#include <stdlib.h>

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

/* Directory for the test's files (tests/run sets TEST_TMP). */
static inline const char *check_tmpdir(void)
{
	const char *d = getenv("TEST_TMP");
	return d && *d ? d : "/tmp";
}

#endif
