/* prompts.c: see prompts.h. */
#include "prompts.h"

#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "xc2enc.h"

typedef struct entry {
	unsigned char hash[crypto_hash_sha256_BYTES];
	int32_t *codes;
	size_t n;
	uint64_t used;       /* the clock of its last use; 0: empty */
} entry;

struct pcg_prompts {
	char *encoder;
	pcg_dtype dtype;
	xc2e_model *m;       /* loaded on first use, under encode */
	pthread_mutex_t lock, encode;
	entry *e;
	int cap;
	uint64_t clock;
};

pcg_prompts *pcg_prompts_new(const char *encoder, pcg_dtype dtype, int capacity, pcg_err *err)
{
	pcg_prompts *p = calloc(1, sizeof *p);

	if (p == NULL || (p->e = calloc((size_t)capacity, sizeof *p->e)) == NULL ||
	    (p->encoder = strdup(encoder)) == NULL || sodium_init() < 0) {
		if (p)
			free(p->e);
		free(p);
		pcg_fail(err, "out of memory");
		return NULL;
	}
	p->dtype = dtype;
	p->cap = capacity;
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->encode, NULL);
	return p;
}

void pcg_prompts_free(pcg_prompts **pp)
{
	pcg_prompts *p = pp ? *pp : NULL;

	if (p == NULL)
		return;
	for (int i = 0; i < p->cap; i++)
		free(p->e[i].codes);
	free(p->e);
	xc2e_close(&p->m);
	free(p->encoder);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->encode);
	free(p);
	*pp = NULL;
}

/* A copy of the cached codes of hash into *codes, or 0 when not cached. */
static int lookup(pcg_prompts *p, const unsigned char *hash, int32_t **codes, size_t *n)
{
	int found = 0;

	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < p->cap && !found; i++) {
		entry *e = &p->e[i];
		if (e->used && memcmp(e->hash, hash, sizeof e->hash) == 0 &&
		    (*codes = malloc(e->n * sizeof **codes)) != NULL) {
			memcpy(*codes, e->codes, e->n * sizeof **codes);
			*n = e->n;
			e->used = ++p->clock;
			found = 1;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return found;
}

/* Keeps a copy of codes for hash in the least recently used slot. */
static void insert(pcg_prompts *p, const unsigned char *hash, const int32_t *codes, size_t n)
{
	int32_t *c = malloc(n * sizeof *c);

	if (c == NULL)
		return; /* not cached: encoded again next time */
	memcpy(c, codes, n * sizeof *c);
	pthread_mutex_lock(&p->lock);
	entry *old = &p->e[0];
	for (int i = 1; i < p->cap; i++)
		if (p->e[i].used < old->used)
			old = &p->e[i];
	free(old->codes);
	memcpy(old->hash, hash, sizeof old->hash);
	old->codes = c;
	old->n = n;
	old->used = ++p->clock;
	pthread_mutex_unlock(&p->lock);
}

static int encode(pcg_prompts *p, const void *audio, size_t len, const char *name,
		  int32_t **codes, size_t *n, pcg_err *err)
{
	float *wav = NULL;
	size_t ns = 0;
	int rc = -1;

	if (audio_read_memory(audio, len, name, XC2E_RATE, PCG_PROMPT_MAX_SECONDS, &wav, &ns,
			      err) < 0)
		return -1;
	pthread_mutex_lock(&p->encode);
	if (p->m == NULL && (p->m = xc2e_open_dtype(p->encoder, p->dtype, err)) == NULL) {
		pcg_err_prefix(err, p->encoder);
		goto out;
	}
	const int T = xc2e_n_codes(ns);
	if ((*codes = malloc((size_t)T * sizeof **codes)) == NULL) {
		pcg_fail(err, "out of memory");
		goto out;
	}
	if (xc2e_encode(p->m, wav, ns, *codes, NULL, err) < 0) {
		free(*codes);
		*codes = NULL;
		goto out;
	}
	*n = (size_t)T;
	rc = 0;
out:
	pthread_mutex_unlock(&p->encode);
	free(wav);
	return rc;
}

int pcg_prompts_codes(pcg_prompts *p, const void *audio, size_t len, const char *name,
		      int32_t **codes, size_t *n, int *hit, pcg_err *err)
{
	unsigned char hash[crypto_hash_sha256_BYTES];

	*codes = NULL;
	*n = 0;
	*hit = 0;
	crypto_hash_sha256(hash, audio, len);
	if (lookup(p, hash, codes, n)) {
		*hit = 1;
		return 0;
	}
	if (encode(p, audio, len, name, codes, n, err) < 0)
		return -1;
	insert(p, hash, *codes, *n);
	return 0;
}
