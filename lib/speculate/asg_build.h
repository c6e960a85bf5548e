/* asg_build.h: building Acoustic Similarity Groups from the speech
 * tokens' embeddings (PCG paper, section 2.1; the groups and their file:
 * lib/formats/asg.h), on the CPU (tiles of one sgemm each) or a CUDA device
 * (lib/cuda/cuda_asg.h). asg-build is its program.
 */
#ifndef PCG_ASG_BUILD_H
#define PCG_ASG_BUILD_H

#include <stdint.h>

#include "asg.h"
#include "err.h"

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

#endif
