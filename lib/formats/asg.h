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

/* asg_from_groups recording kind (ASG_W_*) as the weights' origin: the
 * builder's (lib/speculate/asg_build.h) entry. */
asg *asg_from_groups_kind(uint32_t n, uint32_t M, const uint64_t *start, const uint32_t *members,
			  const double *score, uint32_t token_offset, double theta, uint32_t topk,
			  uint32_t kind, pcg_err *err);

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
