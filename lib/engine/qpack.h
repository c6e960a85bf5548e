/* qpack.h: block-quantised weights repacked at load into groups of 16
 * interleaved rows, so that one unpacked weight vector serves 16 output rows
 * (one lane each) and every position of a block (lib/engine/qpack.c says how).
 * The file on disk is unchanged; the packed copy replaces the mapped pages
 * in memory. Q8_0, Q4_0, Q4_K and Q6_K, on CPUs with AVX-512 VNNI. */
#ifndef PCG_QPACK_H
#define PCG_QPACK_H

#include <stddef.h>

#include "matmul.h"

#define PCG_QPACK_ROWS 16 /* rows per group */

/* Whether W's dtype and shape pack on this CPU (and the quantised path
 * chosen is the one that reads packs). */
int pcg_qpack_ok(const pcg_mat *W);

/* Whether a product with W runs on its packed rows (it has them, and the
 * quantised path chosen reads them). */
int pcg_qpack_active(const pcg_mat *W);

/* Bytes of the packed copy of W (rows rounded up to a group). */
size_t pcg_qpack_bytes(const pcg_mat *W);

/* Packs W into dst (pcg_qpack_bytes, 64-byte aligned); rows past W->rows
 * in the last group are zero. */
void pcg_qpack(void *dst, const pcg_mat *W);

/* y[b * ldy + r] = row r0 + r of W times x[b], from W->packed, for any B:
 * each group of 16 rows is applied to every position in blocks of 8 while
 * it is in cache, and each position's sums are the same whatever the
 * block, so a block gives bit for bit what single steps give. Returns -1
 * when out of memory (nothing written). */
int pcg_qpack_matmul(float *y, int ldy, const float *x, int B, const pcg_mat *W, int r0,
		     int nr);

#endif
