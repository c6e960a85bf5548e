/* speculate.h: the round loop of speculative decoding, one session at a
 * time, one round per call, with no socket of its own.
 *
 * A session is one utterance: the prompt (text, or a phoneme voice's
 * speaker and espeak-ng phonemes), the policy and its parameters, and the
 * state between rounds (the context, the committed speech tokens, the
 * servers' sync positions, the statistics). A round is
 *
 *   0. a phoneme voice: the phoneme tokens due at this frame go in; those
 *      due at later frames of the round go in among the drafts (1, 2);
 *   1. draft: x_1..x_L and p_1..p_L (a "propose" to the draft server, which
 *      carries the forced tokens due among the drafts so that the draft
 *      conditions on them; or the target's MTP heads from the previous
 *      round, which cannot see a forced token: MTP rounds stop short of
 *      the next one);
 *   2. target: q_1..q_{L+1} in one "score" of [last committed, x_1..x_L]
 *      with the forced tokens in place (their own vectors are not used);
 *   3. the policy (lib/speculate/policy.h) keeps a prefix of the drafts and emits a
 *      corrected or bonus token (or mtp-viterbi's path, or one token of q
 *      when the target runs alone);
 *   4. commit up to the end token or max_tokens; a forced token is committed
 *      with certainty before the token it precedes, and counts neither as
 *      drafted nor as accepted.
 *
 * Pipelined (the default): while the target scores the block, the draft
 * drafts Lnext + 1 tokens on from x_Lr (spec_io's start and finish), as if
 * all were accepted; when x_1..x_Lr are, the first of them is verified
 * against q_{Lr+1} in place of the bonus token, and when it is accepted the
 * rest are the next round's drafts. The lookahead is the request's, or
 * (n = 0, auto) chosen before each round by lib/speculate/costmodel.c from the
 * acceptance so far and env->costs, with the target alone where drafting
 * would not pay.
 *
 * The model servers are reached through spec_io: the verifier passes its
 * clients (lib/serve/client.h), pcg-sim and the tests a server in this process
 * (modelserver_local). Every random draw comes from the request's seed and
 * the round number, so a session gives the same tokens however its rounds
 * interleave with other sessions'. A new policy is a lib/speculate/policy.h kind:
 * the loop does not change.
 */
#ifndef PCG_SPECULATE_H
#define PCG_SPECULATE_H

#include <stdint.h>

#include "asg.h"
#include "costmodel.h"
#include "err.h"
#include "llasa.h"
#include "proto.h"
#include "tm.h"
#include "tokenizer.h"
#include "voice.h"

/* What sessions share, read-only while they run. */
typedef struct spec_env {
	const tokenizer *tok;
	const llasa_vocab *voc;
	const voice_info *voice; /* a phoneme voice, or NULL */
	int unk_phone;           /* its token for a phoneme it does not know */
	int unk_next;            /* and for a next phoneme it does not know (<|n__|>) */
	const tmat *tm;          /* mtp-viterbi's transition matrix, or NULL */
	const asg *knn;          /* lantern's neighbour file (asg-build --knn), or NULL */
	cost_terms costs;        /* what a step, a draft step, a block and a trip cost
				  * (lib/speculate/costmodel.c): --lookahead auto chooses by them;
				  * all 0: SPEC_COSTS */
	int run_tokens;          /* policy none: the tokens the target samples a
				  * request, 1 to PROTO_MAX_N (1: one a round, drawn
				  * here); 0: grown from 1 to about a tenth of a
				  * second of the target's time */
	int target_heads;        /* the MTP heads the target has (its pong's heads=):
				  * an MTP rule with lookahead auto asks for at most
				  * these; 0: not known (SPEC_MTP_HEADS), -1: none */
} spec_env;

/* The lookahead auto considers 1..SPEC_AUTO_MAX_L (a block of at most 8
 * positions: the batched small products); MTP rounds with n = 0 ask for
 * SPEC_MTP_HEADS heads. */
#define SPEC_AUTO_MAX_L 7
#define SPEC_MTP_HEADS 3
/* The cost terms auto assumes when none were measured (ms, ms, share, ms):
 * a draft a quarter of the target's step, a block of 4 at 2x a step. */
#define SPEC_COSTS "1,0.25,0.33,0.2"

enum { SPEC_DRAFT, SPEC_TARGET };

/* One request to a model server (stage SPEC_DRAFT or SPEC_TARGET): fills r
 * with the reply (an error reply is a reply: return 0). r's vectors are
 * read before the next call. Returns -1 with err when no reply came. */
typedef struct spec_io {
	int (*call)(void *ctx, int stage, proto_msg *q, proto_msg *r, pcg_err *err);
	/* Optional (NULL: call them one after the other): a request in two
	 * halves, so that the draft drafts ahead while the target verifies.
	 * start sends q to stage (q may be reused at once); finish waits for
	 * its reply into r (q is the request again, for a retry). Each returns
	 * 0 or -1 with err; a stage has at most one request started. */
	int (*start)(void *ctx, int stage, proto_msg *q, pcg_err *err);
	int (*finish)(void *ctx, int stage, proto_msg *q, proto_msg *r, pcg_err *err);
	void *ctx;
} spec_io;


typedef struct spec_session spec_session;

/* A session for the synth request req (its text, policy, beta, lookahead,
 * sampling, seed, max_tokens, speaker, viterbi_k, f16, args, sequential; a
 * lookahead of 0 is auto: chosen each round by the cost model) with the ASG
 * groups (for pcg; borrowed until spec_free), named id at the servers.
 * Returns NULL with err saying what in the request is wrong (a bad request)
 * or out of memory. */
/* A synth's policy name: "none", a rule of policy.h, or "mtp-" (the
 * target's MTP heads draft) and "viterbi" or a rule. Sets *mtp, *viterbi,
 * *is_none (the target alone, or mtp-viterbi's path unverified) and *kind
 * (the rule, or -1); returns 0, or -1 when the name is none of these. Every
 * program that checks a policy name checks it here. */
int spec_policy_parse(const char *name, int *mtp, int *viterbi, int *is_none, int *kind);

spec_session *spec_new(const spec_env *env, const proto_synth *req, const asg *groups,
		       uint64_t id, pcg_err *err);
/* spec_new for zero-shot cloning: codes[0..n_codes) are the prompt audio's
 * speech codes (req->prompt_text its transcript), placed as the model card
 * places them (llasa.h). A phoneme voice takes no prompt; a code beyond the
 * model's speech tokens is a bad request. */
spec_session *spec_new_prompt(const spec_env *env, const proto_synth *req, const asg *groups,
			      uint64_t id, const int32_t *codes, size_t n_codes, pcg_err *err);
void spec_free(spec_session **s);

/* Runs one round. Returns 1 when the utterance is complete (the end token,
 * max_tokens, or a phoneme voice's last frame), 0 when more rounds are
 * due, -1 with err on a server's error or no reply (the session can go on
 * no further). */
int spec_round(spec_session *s, const spec_io *io, pcg_err *err);

/* The speech tokens committed so far (model ids). */
const int *spec_tokens(const spec_session *s, int *n);

/* The context so far (model ids): the prompt, then the speech tokens with
 * a phoneme voice's forced tokens among them, each right before the frame
 * it is due at. */
const int *spec_context(const spec_session *s, int *n);

/* Tokens emitted by the last round, and for pcg each one's group label
 * (lib/speculate/policy.h: -1 for a bonus token and for other policies); tokens cut
 * by max_tokens or the end token are not among them. */
int spec_last_round(const spec_session *s, const int **tokens, const int **groups);

/* Fills rep with the "result" of the session so far: the tokens and stats. */
void spec_result(const spec_session *s, uint64_t req_id, proto_msg *rep);

/* Tells the servers they may drop the session's caches (a lost drop costs
 * only memory until they evict it). */
void spec_drop(spec_session *s, const spec_io *io);

#endif
