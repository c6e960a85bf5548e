/* tm.h: the token transition matrix Q(a, b) = P(next = b | current = a) over
 * n speech tokens that Viterbi-based speculative decoding uses (MTP paper,
 * section III-C), and the TM file that carries it (man/tm.5).
 *
 * Q is estimated from bigram counts c(a, b) of a corpus of code sequences,
 * smoothed by add-alpha:
 *
 *   Q(a, b) = (c(a, b) + alpha) / (c(a) + alpha * n),  c(a) = sum_b c(a, b)
 *
 * stored sparsely: per row the observed successors (ascending) with their
 * counts, and the row total c(a). An unobserved b costs nothing to store.
 * With a top-m prune only the m largest counts of each row are kept (ties:
 * the lower id) and c(a) is the sum of those kept, so each row is still a
 * distribution that sums to 1.
 *
 * The file is the in-memory image: a 64-byte header, then the CSR arrays,
 * every array 8-byte aligned, so an opened file is used in place from its
 * mapping. Everything is validated on open (size, checksum, ranges,
 * ascending columns, totals equal the row sums), so a hostile file gives an
 * error naming the problem, never a crash.
 */
#ifndef PCG_TM_H
#define PCG_TM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

#define TM_VERSION 1
#define TM_HEADER_BYTES 64

/* A read-only view; the arrays live as long as the tm. */
typedef struct tm_view {
	uint32_t n;                /* tokens: ids 0..n-1 */
	uint32_t prune;            /* successors kept per row; 0: all */
	double alpha;              /* add-alpha smoothing, > 0 */
	uint64_t nnz;              /* stored (a, b) pairs */
	uint64_t total;            /* sum of the row totals: bigrams kept */
	const uint64_t *row_start; /* [n + 1]: row a is entries row_start[a] .. row_start[a + 1] */
	const uint64_t *row_total; /* [n]: c(a), the sum of the row's counts */
	const uint64_t *cnt;       /* [nnz]: c(a, b) >= 1 */
	const uint32_t *col;       /* [nnz]: b, ascending within a row */
	uint64_t bytes;            /* size of the image */
	uint64_t checksum;         /* as stored (and verified) */
} tm_view;

/* The matrix (tmat, not tm: libc's struct tm is in <time.h>). */
typedef struct tmat tmat;

/* The view of a (non-NULL) tm. */
const tm_view *tm_get(const tmat *t);

/* Makes a TM from explicit rows: row a holds col[row_start[a] ..
 * row_start[a + 1]) (ascending, < n) with counts cnt (>= 1). prune > 0 keeps
 * the prune largest counts per row. Returns NULL with err on bad input. */
tmat *tm_from_counts(uint32_t n, double alpha, uint32_t prune, const uint64_t *row_start,
		   const uint32_t *col, const uint64_t *cnt, pcg_err *err);

/* Opens a TM file: mapped when it is a regular file, read into memory
 * otherwise; "-" reads standard input. Validates everything. Returns NULL
 * with err naming the file and the problem. */
tmat *tm_open(const char *path, pcg_err *err);

/* Validates an image held by the caller (a copy is made). name prefixes the
 * messages. For tests and for files that arrive in a message. */
tmat *tm_from_memory(const void *image, size_t size, const char *name, pcg_err *err);

/* Frees or unmaps; sets *t to NULL. NULL is fine. */
void tm_close(tmat **t);

/* Writes the image to path as fileio.h says (a file replaced atomically,
 * an existing one untouched on failure; a device, FIFO or "-" written
 * through; a link followed). */
int tm_write(const tmat *t, const char *path, pcg_err *err);

/* log Q(a, b), a, b < n (asserted: callers check ids against n first).
 * O(log deg(a)) by binary search in row a. */
double tm_logq(const tmat *t, uint32_t a, uint32_t b);

/* The dense m x m block of log Q over the tokens tok[0..m): out[i * m + j]
 * = log Q(tok[i], tok[j]). Returns -1 with err if a token is >= n. */
int tm_submatrix(const tmat *t, const uint32_t *tok, int m, double *out, pcg_err *err);

/* Counts bigrams of a corpus, sequence by sequence, in memory proportional
 * to the distinct bigrams seen (never n x n). */
typedef struct tm_counter tm_counter;

tm_counter *tm_counter_new(uint32_t n, pcg_err *err);
void tm_counter_free(tm_counter **c);

/* Adds the len - 1 bigrams of seq (no bigram across sequences). Returns -1
 * with err naming the position if an id is >= n (nothing of seq is added). */
int tm_counter_add(tm_counter *c, const uint32_t *seq, size_t len, pcg_err *err);

/* Sequences and bigrams added so far. */
uint64_t tm_counter_sequences(const tm_counter *c);
uint64_t tm_counter_bigrams(const tm_counter *c);

/* The smoothed, optionally pruned TM of what was counted. */
tmat *tm_counter_finish(tm_counter *c, double alpha, uint32_t prune, pcg_err *err);

/* Prints the header fields and statistics, one "name<TAB>value" per line,
 * each starting with prefix (tm-info's output; tm-build's summary). */
void tm_print_stats(FILE *f, const tmat *t, const char *prefix);

#endif
