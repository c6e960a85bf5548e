/* synth.h: a synth request (proto.h's proto_synth) as the clients build it
 * and the verifier takes it: its defaults and bounds, once.
 *
 * pcg-synth and pcg-httpd start every request from proto_synth_defaults
 * and their options from the same values (spelt for an option table with
 * PROTO_STR), and check what they built with proto_synth_check before it
 * is sent; proto_parse checks every synth it reads with it too, so that a
 * client finds out what the verifier would refuse, with the flag or the
 * JSON field its user typed: the check says which field failed, and each
 * caller names it its own way.
 */
#ifndef PCG_SYNTH_H
#define PCG_SYNTH_H

#include <stddef.h>

#include "err.h"
#include "proto.h"

/* The defaults: pcg-synth(1)'s and pcg-httpd(8)'s. Sampling is LLaSA's;
 * lookahead 0 is auto (the verifier's cost model chooses each round's). */
#define PROTO_SYNTH_POLICY "pcg"
#define PROTO_SYNTH_BETA 0.4
#define PROTO_SYNTH_TEMP 0.8
#define PROTO_SYNTH_TOP_K 50
#define PROTO_SYNTH_TOP_P 1
#define PROTO_SYNTH_SEED 1
#define PROTO_SYNTH_MAX_TOKENS 1500 /* 30 s at 50 tokens a second */
#define PROTO_SYNTH_VITERBI_K 8     /* also what the verifier takes for 0 */
#define PROTO_SYNTH_CHUNK 25        /* codes: half a second */
#define PROTO_SYNTH_FIRST 5         /* the first chunk's codes (then 10, 20, 25, ...): the
				     * first audio after a tenth of a second of codes */
#define PROTO_SYNTH_LEFT 50
#define PROTO_SYNTH_RIGHT 4

/* What the programs let a user ask, inside the protocol's bounds: a seed
 * that an int and JSON hold exactly, and sampling and beta in the ranges
 * that make sense (the wire takes any seed, temperature and beta). */
#define PROTO_SYNTH_SEED_MAX 2147483647
#define PROTO_SYNTH_TEMP_MAX 100
#define PROTO_SYNTH_TOP_K_MAX (1 << 30)
#define PROTO_SYNTH_TOP_P_MIN 1e-6
#define PROTO_SYNTH_BETA_MAX 1

/* A number above as the text of an option's default: PROTO_STR(PROTO_SYNTH_TEMP)
 * is "0.8". */
#define PROTO_STR_(x) #x
#define PROTO_STR(x) PROTO_STR_(x)

/* The fields proto_synth_check may refuse. */
typedef enum proto_synth_field {
	PROTO_SF_NONE,
	PROTO_SF_LOOKAHEAD,
	PROTO_SF_TEMP,
	PROTO_SF_TOP_K,
	PROTO_SF_TOP_P,
	PROTO_SF_BETA,
	PROTO_SF_MAX_TOKENS,
	PROTO_SF_SPEAKER,
	PROTO_SF_VITERBI_K,
	PROTO_SF_CHUNK,
	PROTO_SF_LEFT,
	PROTO_SF_RIGHT,
	PROTO_SF_FIRST,
	PROTO_SF_ARGS,
	PROTO_SF_AUDIO,       /* audio without stream */
	PROTO_SF_PROMPT_TEXT, /* a prompt's text without its audio */
} proto_synth_field;

/* Makes s a request with the defaults above, stream on, no text, no audio:
 * every other field zero or empty. */
void proto_synth_defaults(proto_synth *s);

/* The text to speak, len bytes (no NUL among them). Returns 0, or -1 with
 * err (naming the limit) when it does not fit the message. */
int proto_synth_text(proto_synth *s, const char *text, size_t len, pcg_err *err);

/* Checks s against the protocol's bounds, those the verifier holds every
 * synth to: lookahead 0 (auto) to PROTO_MAX_LOOKAHEAD, sampling
 * (pcg_sampling_check, top_k >= 0), beta finite and >= 0, max_tokens 1 to
 * PROTO_MAX_APPEND, speaker, viterbi_k, the chunking (first 0 to chunk:
 * pcg_chunk_check), at most
 * PROTO_MAX_ARGS policy parameters, audio only with stream, a prompt's text
 * only with its audio. The policy's name is lib/speculate's to check
 * (spec_policy_parse). Returns 0, or -1 with *field the first field that
 * fails and err what is wrong with its value, without its name: the caller
 * names it (proto_synth_field_name: as on the wire). */
int proto_synth_check(const proto_synth *s, proto_synth_field *field, pcg_err *err);

/* The field's name on the wire ("n", "temp", ...); pcg-protocol(7). */
const char *proto_synth_field_name(proto_synth_field f);

#endif
