/* test_mtp_sd.c: mtp-sd keeps the target's distribution, on the demo voice
 * (models/demo): the statistical test of test_policy.c applied to the
 * drafts the verifier's mtp-sd mode takes, the target's own MTP heads.
 *
 * At the end of a real prompt (speaker and phoneme tokens, the first forced
 * phoneme), the target's q_1 gives x_1 (its most likely token); head k at
 * that position proposes the token after k more steps. For k = 1, 2: the
 * draft p = head k's distribution, the target's q at the same position
 * (x_1 .. x_k fed, each the target's most likely), both tempered as the
 * pipeline does (temperature 0.8, top-k 50). N rounds of lookahead 1:
 * x ~ p, then sd. The emitted tokens must be distributed as q (chi-square,
 * categories below 5 expected pooled) and the acceptance rate must be
 * sum min(p, q) (z test). Significance 0.001 / 4 per test (Bonferroni
 * over the 4 tests), fixed seeds. Skips when models/demo has no heads.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "chi2.h"
#include "llasa.h"
#include "model.h"
#include "mtp.h"
#include "policy.h"
#include "rng.h"
#include "sampling.h"
#include "tokenizer.h"
#include "voice.h"

#define TRIALS 200000
#define ALPHA (0.001 / 4)

int main(void)
{
	const char *root = getenv("PCG_ROOT");
	char dir[4096], path[4200];
	pcg_err err = { "" };

	snprintf(dir, sizeof dir, "%s/models/demo", root ? root : ".");
	snprintf(path, sizeof path, "%s/mtp.safetensors", dir);
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		SKIP("models/demo has no MTP heads (make voice)");
	fclose(f);

	llama_model *m = llama_open(dir, NULL, &err);
	CHECKF(m != NULL, "%s", err.msg);
	mtp_heads *h = m ? mtp_open(m, dir, &err) : NULL;
	CHECKF(h != NULL, "%s", err.msg);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	tokenizer *tok = tok_load(path, &err);
	CHECKF(tok != NULL, "%s", err.msg);
	llasa_vocab voc;
	voice_info vi;
	snprintf(path, sizeof path, "%s/voice.json", dir);
	if (!m || !h || !tok || llasa_vocab_init(tok, &voc, &err) < 0 ||
	    voice_load(path, &vi, &err) < 0) {
		CHECKF(0, "%s", err.msg);
		return check_done("test_mtp_sd");
	}

	/* The prompt of a sentence, as the verifier makes it, and the first
	 * forced phoneme token. */
	voice_render r;
	CHECKF(voice_speak(&vi.speakers[0], "Blessed are the meek.", vi.sample_rate, vi.hop, 0, &r,
			   &err) == 0, "%s", err.msg);
	char text[8192], t[32];
	size_t len = 0;
	voice_speaker_token(0, t, sizeof t);
	len += (size_t)snprintf(text + len, sizeof text - len, "%s", t);
	for (int i = 0; i < r.n_ph; i++) {
		voice_phone_token(r.ph[i].name, t, sizeof t);
		len += (size_t)snprintf(text + len, sizeof text - len, "%s", t);
	}
	voice_phone_token(r.ph[0].name, t, sizeof t);
	int first_ph = tok_token_id(tok, t, strlen(t));
	voice_render_free(&r);
	llasa_prompt pr = { .text = text };
	int *ids = NULL;
	size_t n = 0;
	CHECKF(llasa_prompt_ids(tok, &voc, &pr, &ids, &n, &err) == 0, "%s", err.msg);
	CHECK(first_ph >= 0);
	ids = realloc(ids, (n + 1) * sizeof *ids);
	ids[n++] = first_ph;

	const int H = llama_get_config(m)->hidden, S = voc.speech_count;
	llama_rows rows = { 1, { voc.speech_first }, { voc.speech_first + S } };
	pcg_sampling samp = { 0.8f, 50, 1.0f };
	float *hs = malloc(H * sizeof *hs), *logits = malloc(3 * (size_t)S * sizeof *logits);
	float *p = malloc((size_t)S * sizeof *p), *q = malloc((size_t)S * sizeof *q);
	float *hl = malloc(2 * (size_t)S * sizeof *hl);
	llama_kv *kv = llama_kv_new(m);
	CHECKF(llama_forward_hidden(m, kv, ids, (int)n, 1, &rows, logits, hs, &err) == 0, "%s",
	       err.msg);
	CHECKF(mtp_logits(h, hs, 0, 2, &rows, hl, &err) == 0, "%s", err.msg);

	for (int k = 1; k <= 2; k++) {
		/* feed the target's most likely token: q at k steps ahead */
		int best = 0;
		const float *lk = logits;
		for (int i = 1; i < S; i++)
			if (lk[i] > lk[best])
				best = i;
		int x = voc.speech_first + best;
		CHECKF(llama_forward(m, kv, &x, 1, 1, &rows, logits, &err) == 0, "%s", err.msg);
		CHECK(pcg_probs(logits, S, &samp, q, &err) == 0);
		CHECK(pcg_probs(hl + (size_t)(k - 1) * S, S, &samp, p, &err) == 0);

		policy_params pp = { .kind = POLICY_SD, .end_token = -1 };
		policy *pl = policy_new(&pp, S, &err);
		CHECKF(pl != NULL, "%s", err.msg);
		long *obs = calloc((size_t)S, sizeof *obs), acc = 0;
		double *e = malloc((size_t)S * sizeof *e), want = 0;
		const float *ppv[1] = { p }, *qqv[2] = { q, NULL };
		policy_result res;
		pcg_rng rng;
		pcg_rng_init(&rng, 1000 + k, 1);
		for (long i = 0; i < TRIALS && pl; i++) {
			int xr = pcg_sample(p, S, pcg_rng_uniform(&rng));
			if (policy_run(pl, 1, &xr, ppv, qqv, &rng, &res, &err) < 0) {
				CHECKF(0, "%s", err.msg);
				break;
			}
			obs[res.tokens[0]]++;
			acc += res.n_accepted;
		}
		for (int i = 0; i < S; i++) {
			e[i] = q[i];
			want += fmin(p[i], q[i]);
		}
		double stat;
		int df;
		double pv = chi2_p(obs, e, S, TRIALS, &stat, &df);
		printf("head %d: tokens ~ q: chi2(%d) = %.1f, p = %.3g; acceptance %.4f, "
		       "sum min(p, q) = %.4f\n", k, df, stat, pv, (double)acc / TRIALS, want);
		CHECKF(pv >= ALPHA, "head %d: emitted tokens not distributed as q (p = %.3g)", k, pv);
		/* z test of the acceptance rate (Bernoulli with mean want) */
		double se = sqrt(want * (1 - want) / TRIALS) + 1e-6;
		double z = ((double)acc / TRIALS - want) / se;
		double pz = erfc(fabs(z) / sqrt(2.0));
		CHECKF(pz >= ALPHA, "head %d: acceptance %.4f, want %.4f (z %.2f)", k,
		       (double)acc / TRIALS, want, z);
		free(obs);
		free(e);
		policy_free(&pl);
	}
	llama_kv_free(&kv);
	free(ids);
	free(hs);
	free(logits);
	free(p);
	free(q);
	free(hl);
	tok_free(&tok);
	mtp_close(&h);
	llama_close(&m);
	return check_done("test_mtp_sd");
}
