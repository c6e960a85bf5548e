/* costmodel.c: what a round should cost (see costmodel.h). */
#include "costmodel.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "clock.h"
#include "model.h"
#include "mtp.h"
#include "sampling.h"

double cost_tokens_per_round(const double *a, int L)
{
	double e = 1, run = 1;

	for (int i = 0; i < L; i++) {
		run *= a[i];
		e += run;
	}
	return e;
}

double cost_alone_step(const cost_terms *c)
{
	return c->run_step > 0 ? c->run_step : c->step;
}

static double block(const cost_terms *c, int n)
{
	return c->step * (1 + c->slope * (n - 1));
}

double cost_round_seconds(const cost_terms *c, cost_kind kind, const double *a, int L)
{
	switch (kind) {
	case COST_NONE:
		return c->trip / (c->run > 1 ? c->run : 1) + cost_alone_step(c);
	case COST_MTP:
		return c->trip + block(c, L + 1) + (L + 1) * (c->heads > 0 ? c->heads : L) * c->head;
	case COST_VITERBI: /* the tokens it kept last round, new to the target */
		return c->trip + c->step * (1 + c->slope * (cost_tokens_per_round(a, L) - 1)) +
		       L * c->head;
	case COST_SEQUENTIAL:
		return 2 * c->trip + L * c->draft + block(c, L + 1);
	case COST_PIPELINED: {
		double full = 1;
		for (int i = 0; i <= L; i++)
			full *= a[i];
		const double b = block(c, L + 1), d = (L + 1) * c->draft;
		const double both = fmax(b, d) + c->overlap * fmin(b, d);
		return c->trip + both + (1 - full) * (c->trip + L * c->draft);
	}
	}
	return c->trip + c->step;
}

double cost_tokens_per_second(const cost_terms *c, cost_kind kind, const double *a, int L)
{
	const double t = cost_round_seconds(c, kind, a, L);
	const double e = kind == COST_NONE ? 1 : cost_tokens_per_round(a, L);

	return t > 0 ? e / t : 0;
}

int cost_best_lookahead(const cost_terms *c, cost_kind kind, const double *a, int max_l)
{
	int best = 1;
	double best_r = -1;

	for (int L = 1; L <= max_l; L++) {
		const double r = cost_tokens_per_second(c, kind, a, L);
		if (r > best_r * (1 + 1e-9)) { /* ties: the shorter block */
			best_r = r;
			best = L;
		}
	}
	return best;
}

int cost_terms_parse(const char *s, cost_terms *c, pcg_err *err)
{
	static const char *name[6] = { "target step (ms)", "draft step (ms)", "block slope",
				       "trip (ms)", "MTP head (ms)", "overlap" };
	double v[6] = { 0 };
	const char *p = s;

	for (int i = 0; i < 6; i++) {
		char *end;
		errno = 0;
		v[i] = strtod(p, &end);
		if (end == p || errno != 0 || !isfinite(v[i]) || v[i] < 0 || v[i] > 1e6)
			return pcg_fail(err, "costs '%s': the %s is not a number >= 0 (the form is "
					"STEP_MS,DRAFT_MS,SLOPE,TRIP_MS[,HEAD_MS[,OVERLAP]])", s,
					name[i]);
		if (i < 3 && *end != ',')
			return pcg_fail(err, "costs '%s': 4 to 6 numbers separated by commas: "
					"STEP_MS,DRAFT_MS,SLOPE,TRIP_MS[,HEAD_MS[,OVERLAP]]", s);
		if (i >= 3 && *end == '\0')
			break;
		if (i >= 3 && (i == 5 || *end != ','))
			return pcg_fail(err, "costs '%s': trailing '%s'", s, end);
		p = end + 1;
	}
	if (v[0] <= 0)
		return pcg_fail(err, "costs '%s': the target step must be > 0 ms", s);
	if (v[5] > 1)
		return pcg_fail(err, "costs '%s': the overlap is a share in [0, 1]", s);
	*c = (cost_terms){ .step = v[0] * 1e-3, .draft = v[1] * 1e-3, .slope = v[2],
			   .trip = v[3] * 1e-3, .head = v[4] * 1e-3, .overlap = v[5] };
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double cost_median(double *v, int n)
{
	if (n < 1)
		return 0;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return v[n / 2];
}

/* Pushes a model's weights out of the caches, as the other processes of a
 * pipeline do between two of its steps (a model of a few MB that stays in
 * cache steps twice as fast as it does there): a walk over a buffer of
 * EVICT bytes, beyond the last-level cache. */
#define EVICT (64u << 20)
static void evict(double *buf)
{
	for (size_t i = 0; buf != NULL && i < EVICT / sizeof *buf; i += 8)
		buf[i] += 1;
}

int cost_measure(llama_model *m, const llama_rows *rows, double *step, double *slope,
		 double *warm, pcg_err *err)
{
	enum { REPS = 7, BLOCK = 4, MAX_CTX = 192 };
	/* a context of the length an utterance runs at (attention is a share
	 * of a small model's step), except where its prefill would take long:
	 * a model beyond 256 MB reads so many weights a step that the cache
	 * is a small share of it */
	const int CTX = llama_mapped_bytes(m) > (256u << 20) ? 16 : MAX_CTX;
	double *buf = calloc(EVICT / sizeof(double), sizeof(double));
	const int V = llama_get_config(m)->vocab, count = llama_rows_count(m, rows);
	int tok[MAX_CTX];
	double best[BLOCK + 1] = { 0 };
	llama_kv *kv = llama_kv_new(m);
	float *logits = malloc((size_t)BLOCK * count * sizeof *logits);
	int rc = -1;

	if (kv == NULL || logits == NULL) {
		pcg_fail(err, "out of memory");
		goto out;
	}
	for (int i = 0; i < CTX; i++)
		tok[i] = (i * 7919) % V;
	if (llama_forward(m, kv, tok, CTX, 0, rows, NULL, err) < 0)
		goto out;
	/* one step, then a block, REPS times each, rolled back every time, each
	 * from cold caches; the fastest of each (what another process's burst
	 * adds is noise), the first of each left out (it warms the code) */
	for (int r = 0; r <= REPS; r++)
		for (int n = 1; n <= BLOCK; n += BLOCK - 1) {
			evict(buf);
			const double t = pcg_now();
			if (llama_forward(m, kv, tok, n, n, rows, logits, err) < 0 ||
			    llama_kv_truncate(kv, CTX, err) < 0)
				goto out;
			const double dt = pcg_now() - t;
			if (r > 0 && (best[n] == 0 || dt < best[n]))
				best[n] = dt;
		}
	/* steps one right after another, as the target alone runs them (a
	 * loop of their own: one step after the eviction is not yet warm) */
	for (int r = 0; warm != NULL && r <= REPS; r++) {
		const double t = pcg_now();
		if (llama_forward(m, kv, tok, 1, 1, rows, logits, err) < 0 ||
		    llama_kv_truncate(kv, CTX, err) < 0)
			goto out;
		const double dt = pcg_now() - t;
		if (r > 0 && (best[0] == 0 || dt < best[0]))
			best[0] = dt;
	}
	if (warm != NULL)
		*warm = best[0];
	*step = best[1];
	*slope = *step > 0 ? (best[BLOCK] / *step - 1) / (BLOCK - 1) : 0;
	if (*slope < 0)
		*slope = 0;
	rc = 0;
out:
	free(buf);
	free(logits);
	llama_kv_free(&kv);
	return rc;
}

double cost_measure_heads(mtp_heads *h, const llama_model *m, const llama_rows *rows,
			  const pcg_sampling *samp)
{
	const int H = llama_get_config(m)->hidden, nh = h ? mtp_n_heads(h) : llama_n_mtp(m);
	const int width = llama_rows_count(m, rows);
	double *buf = calloc(EVICT / sizeof(double), sizeof(double));
	float *hs = malloc((size_t)(nh > 0 ? nh : 1) * H * sizeof *hs);
	float *logits = malloc((size_t)nh * width * sizeof *logits);
	float *pr = malloc((size_t)width * sizeof *pr);
	pcg_err err = { "" };
	double best = 0;

	for (int r = 0; nh > 0 && hs && logits && pr && r < 6; r++) {
		for (int i = 0; i < nh * H; i++)
			hs[i] = (float)((i * 37 + r) % 17) / 17.0f - 0.5f;
		evict(buf);
		const double t = pcg_now();
		if (h ? mtp_logits(h, hs, 0, nh, rows, logits, &err) < 0
		      : llama_lm_head(m, hs, nh, rows, logits, &err) < 0)
			break;
		for (int k = 0; k < nh; k++)
			pcg_probs(logits + (size_t)k * width, width, samp, pr, &err);
		const double dt = (pcg_now() - t) / nh;
		if (r > 0 && (best == 0 || dt < best)) /* the first warms the code */
			best = dt;
	}
	free(buf);
	free(hs);
	free(logits);
	free(pr);
	return best;
}
