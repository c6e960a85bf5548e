/* asg.h: Acoustic Similarity Groups (PCG paper, section 2.1) and the ASG
 * file that carries them from asg-build to the verifier.
 *
 * For n tokens with embedding rows E_t, G(t) = { t' : cos(E_t, E_t') > theta }
 * (Eq. 1), optionally cut to the topk most similar; G(t) always holds t. The
 * distinct sets among G(0..n-1) are the groups G_0..G_{M-1}, numbered in the
 * order of the first token that generates each. S(t) = { k : t in G_k },
 * N(t) = |S(t)| >= 1, and the weights w_{k,t} > 0 for k in S(t) sum to 1 per
 * token (Eq. 2): equal split 1 / N(t) (Eq. 3), or proportional to a
 * similarity score. Token ids are relative to the speech range: id 0 is
 * model token token_offset.
 *
 * The file (man/asg.5) is the in-memory image: a 64-byte header, then the
 * CSR groups -> members, the reverse index tokens -> groups, and the weights
 * in both orders, every array 8-byte aligned, so an opened file is used in
 * place from its mapping. Everything is validated on open (sizes, checksum,
 * ranges, order, that the reverse index is the transpose of the groups, that
 * weights sum to 1), so a hostile file gives an error, never a crash.
 */
#ifndef PCG_ASG_H
#define PCG_ASG_H

#include <stdint.h>
#include <stdio.h>

#include "err.h"

#define ASG_VERSION 1
#define ASG_HEADER_BYTES 64

/* How the weights were chosen (informational: the file holds the values). */
enum {
	ASG_W_EQUAL = 0,      /* 1 / N(t), Eq. 3 */
	ASG_W_SIMILARITY = 1, /* proportional to the mean cosine similarity (asg_build) */
	ASG_W_GIVEN = 2,      /* given by the caller (asg_from_groups) */
};

/* A read-only view of an ASG; the arrays live as long as the asg. */
typedef struct asg_view {
	uint32_t n;            /* tokens covered: relative ids 0..n-1 */
	uint32_t token_offset; /* model id of relative token 0 */
	uint32_t M;            /* distinct groups */
	uint32_t topk;         /* 0: no top-k cut */
	uint32_t weights;      /* ASG_W_* */
	double theta;          /* cosine threshold (0 when not built from embeddings) */
	uint64_t nnz;          /* sum_k |G_k| = sum_t N(t) */
	const uint64_t *grp_start; /* [M + 1]: G_k is grp_tok[grp_start[k] .. grp_start[k + 1]) */
	const uint32_t *grp_tok;   /* [nnz]: members, ascending within a group */
	const float *grp_w;        /* [nnz]: w_{k,t} of each member */
	const uint64_t *tok_start; /* [n + 1]: S(t) is tok_grp[tok_start[t] .. tok_start[t + 1]) */
	const uint32_t *tok_grp;   /* [nnz]: groups of t, ascending */
	const float *tok_w;        /* [nnz]: w_{k,t}, the same values as grp_w */
	uint64_t bytes;            /* size of the file image */
	uint64_t checksum;         /* as stored (and verified) */
} asg_view;

typedef struct asg asg;

/* The view of a (non-NULL) asg. */
const asg_view *asg_get(const asg *a);

/* Opens an ASG file: mapped when it is a regular file, read into memory
 * otherwise; "-" reads standard input. Validates everything (see above).
 * Returns NULL with err naming the file and the problem. */
asg *asg_open(const char *path, pcg_err *err);

/* The same from size bytes in memory (copied; an ASG a request carried),
 * named name in errors. */
asg *asg_from_memory(const void *image, size_t size, const char *name, pcg_err *err);

/* Frees or unmaps; sets *a to NULL. NULL is fine. */
void asg_close(asg **a);

/* Writes the image to path as fileio.h says (a file replaced atomically,
 * an existing one untouched on failure; a device, FIFO or "-" written
 * through; a link followed). */
int asg_write(const asg *a, const char *path, pcg_err *err);

/* Makes an ASG from explicit groups: group k has the members
 * members[start[k] .. start[k + 1]) (ascending, distinct, < n, at least one),
 * and every token 0..n-1 must be in some group. score, when not NULL, holds a
 * positive score per member entry, normalised per token into the weights
 * (w_{k,t} = score_{k,t} / sum_{k' in S(t)} score_{k',t}, so Eq. 2 holds);
 * NULL gives the equal split. The groups are kept as given (duplicates too);
 * theta and topk are stored as given. Returns NULL with err on bad input. */
asg *asg_from_groups(uint32_t n, uint32_t M, const uint64_t *start, const uint32_t *members,
		     const double *score, uint32_t token_offset, double theta, uint32_t topk,
		     pcg_err *err);

/* Called from one thread at a time while asg_build computes similarities:
 * done and total are in units of row-pair products (the whole run is total). */
typedef void asg_progress_fn(void *ctx, double done, double total);

typedef struct asg_build_opts {
	double theta;          /* in [0, 1) */
	int topk;              /* 0: none, else keep at most the topk most similar (t first) */
	int weights;           /* ASG_W_EQUAL or ASG_W_SIMILARITY */
	uint32_t token_offset; /* stored in the file */
	int threads;           /* 0: all cores */
	int tile;              /* rows per tile (CPU) or per block (CUDA) of the blocked
				  product; 0: 1024 (CPU), from free device memory (CUDA) */
	asg_progress_fn *progress; /* may be NULL */
	void *progress_ctx;
	const char *device;    /* where the products run: "cpu", "cuda", "cuda:N" (as
				* llama_open_opts; lib/engine/device.h); NULL: the CPU */
} asg_build_opts;

/* A similar pair of rows, i < j, with the f32 cosine the product gave: what
 * either backend of asg_build (CPU tiles here, CUDA blocks in lib/cuda/cuda_asg.h)
 * hands to the group assembly, which both share. */
typedef struct asg_pair {
	uint32_t i, j;
	float c;
} asg_pair;

/* Builds the ASG of the n rows of E [n, d] (row-major f32), which it
 * normalises in place. Never forms the n x n similarity matrix: tiles of
 * E E^T (upper triangle only, one single-threaded sgemm per thread) are
 * thresholded as they are computed, keeping O(n * mean |G(t)|) memory.
 * On a CUDA device the same products are f32 cuBLAS GEMMs over row blocks,
 * thresholded on the device (lib/cuda/cuda_asg.h); only the pairs found come
 * back, and the groups are assembled by the same code. The result equals
 * the CPU's except where a cosine lies within rounding of theta or of a
 * top-k cut (docs/BENCHMARKS.md, "asg-build on the GPU"). A device that
 * cannot be used (no CUDA in the build, no such GPU) is an error.
 * Similarity weights: score_{k,t} = the mean of cos(E_c, E_t) over the
 * tokens c with G(c) = G_k (then normalised per token as asg_from_groups).
 * A zero row is similar to nothing: its G(t) is {t}. A row that is not
 * finite is an error. Ties at the topk cut keep the lower id. Sets the
 * thread count as pcg_set_threads(o->threads) does. */
asg *asg_build(float *E, int n, int d, const asg_build_opts *o, pcg_err *err);

/* A neighbour file in the ASG format (for the lantern policy): group t is
 * token t and its K most similar tokens by cosine (ties: the lower id; all
 * n - 1 others when n <= K), so M = n and identical sets are not merged;
 * the weights split each token's unit over the groups that hold it in
 * proportion to the cosine (at least 1e-6, as ASG_W_SIMILARITY). theta is stored as 0,
 * topk as K + 1. E is normalised in place. Rows are done in blocks of 64,
 * one single-threaded sgemm of 64 x n per OpenMP thread, so memory is
 * O(64 n) per thread plus the file. Sets threads as asg_build does. */
asg *asg_build_knn(float *E, int n, int d, int K, const asg_build_opts *o, pcg_err *err);

/* Statistics over the groups and tokens. */
typedef struct asg_stats {
	double mean_size, median_size; /* of |G_k| over the M groups */
	uint64_t max_size;
	double mean_n;                 /* mean N(t) over the n tokens */
	double singleton_share;        /* share of the M groups with one member */
	uint64_t max_n;                /* max N(t) */
} asg_stats;

void asg_stats_get(const asg *a, asg_stats *s);

/* Prints the header fields and the statistics, one "name<TAB>value" per
 * line, each line starting with prefix (asg-info's output; asg-build prints
 * it as its summary). */
void asg_print_stats(FILE *f, const asg *a, const char *prefix);

#endif
