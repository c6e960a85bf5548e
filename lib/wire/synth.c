/* synth.c: a synth request's defaults and its check (see synth.h). */
#include "synth.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "chunks.h"
#include "sampling.h"

void proto_synth_defaults(proto_synth *s)
{
	/* all but the text, as proto_init clears a synth */
	memset(s, 0, offsetof(proto_synth, text) + 1);
	snprintf(s->policy, sizeof s->policy, "%s", PROTO_SYNTH_POLICY);
	s->beta = (float)PROTO_SYNTH_BETA;
	s->samp = (pcg_sampling){ (float)PROTO_SYNTH_TEMP, PROTO_SYNTH_TOP_K,
				  (float)PROTO_SYNTH_TOP_P };
	s->seed = PROTO_SYNTH_SEED;
	s->max_tokens = PROTO_SYNTH_MAX_TOKENS;
	s->viterbi_k = PROTO_SYNTH_VITERBI_K;
	s->stream = 1;
	s->chunk = PROTO_SYNTH_CHUNK;
	s->left = PROTO_SYNTH_LEFT;
	s->right = PROTO_SYNTH_RIGHT;
	s->first = PROTO_SYNTH_FIRST;
}

int proto_synth_text(proto_synth *s, const char *text, size_t len, pcg_err *err)
{
	if (len >= sizeof s->text)
		return pcg_fail(err, "%zu bytes of text: a request holds %zu at most", len,
				sizeof s->text - 1);
	if (memchr(text, '\0', len))
		return pcg_fail(err, "the text holds a NUL byte");
	memcpy(s->text, text, len);
	s->text[len] = '\0';
	return 0;
}

/* An integer field in [lo, hi] (note: what its values mean): 0, or -1
 * with *field f. */
static int in_range(int v, int lo, int hi, const char *note, proto_synth_field f,
		    proto_synth_field *field, pcg_err *err)
{
	if (v >= lo && v <= hi)
		return 0;
	*field = f;
	return pcg_fail(err, "%d: want %d to %d%s", v, lo, hi, note);
}

/* Sampling: pcg_sampling_check's, told apart by field (the temperature
 * alone first). */
static int check_sampling(const pcg_sampling *p, proto_synth_field *field, pcg_err *err)
{
	const pcg_sampling t = { p->temperature, 0, 1.0f };

	if (pcg_sampling_check(&t, err) < 0) {
		*field = PROTO_SF_TEMP;
		return -1;
	}
	if (pcg_sampling_check(p, err) < 0) {
		*field = PROTO_SF_TOP_P;
		return -1;
	}
	return in_range(p->top_k, 0, INT32_MAX, " (0: off)", PROTO_SF_TOP_K, field, err);
}

/* What goes together: the audio travels in progress messages, and a
 * prompt's text transcribes its audio. */
static int check_together(const proto_synth *s, proto_synth_field *field, pcg_err *err)
{
	if (s->audio && !s->stream) {
		*field = PROTO_SF_AUDIO;
		return pcg_fail(err, "the audio travels in progress messages: ask for stream too");
	}
	if (s->prompt_text[0] != '\0' && s->prompt_audio_len == 0) {
		*field = PROTO_SF_PROMPT_TEXT;
		return pcg_fail(err, "without 'prompt_audio': send the audio it transcribes");
	}
	return 0;
}

int proto_synth_check(const proto_synth *s, proto_synth_field *field, pcg_err *err)
{
	*field = PROTO_SF_NONE;
	if (in_range(s->lookahead, 0, PROTO_MAX_LOOKAHEAD, " drafts a round (0: auto)",
		     PROTO_SF_LOOKAHEAD,
		     field, err) < 0 ||
	    check_sampling(&s->samp, field, err) < 0)
		return -1;
	if (!(s->beta >= 0.0f) || isinf(s->beta)) {
		*field = PROTO_SF_BETA;
		return pcg_fail(err, "%g: must be finite and >= 0", (double)s->beta);
	}
	if (in_range(s->max_tokens, 1, PROTO_MAX_APPEND, "", PROTO_SF_MAX_TOKENS, field, err) < 0 ||
	    in_range(s->speaker, 0, 65535, "", PROTO_SF_SPEAKER, field, err) < 0 ||
	    in_range(s->viterbi_k, 0, 1 << 20, " (0: 8)", PROTO_SF_VITERBI_K, field, err) < 0 ||
	    in_range(s->chunk, 0, PROTO_MAX_APPEND, " codes (0: all at the end)", PROTO_SF_CHUNK,
		     field, err) < 0 ||
	    in_range(s->left, 0, PROTO_MAX_APPEND, "", PROTO_SF_LEFT, field, err) < 0 ||
	    in_range(s->right, 0, PROTO_MAX_APPEND, "", PROTO_SF_RIGHT, field, err) < 0)
		return -1;
	if (pcg_chunk_check(s->chunk, s->first, err) < 0) {
		*field = PROTO_SF_FIRST;
		return -1;
	}
	if (in_range(s->n_args, 0, PROTO_MAX_ARGS, "", PROTO_SF_ARGS, field, err) < 0)
		return -1;
	return check_together(s, field, err);
}

const char *proto_synth_field_name(proto_synth_field f)
{
	static const char *const names[] = {
		[PROTO_SF_NONE] = "", [PROTO_SF_LOOKAHEAD] = "n", [PROTO_SF_TEMP] = "temp",
		[PROTO_SF_TOP_K] = "top_k", [PROTO_SF_TOP_P] = "top_p", [PROTO_SF_BETA] = "beta",
		[PROTO_SF_MAX_TOKENS] = "max_tokens", [PROTO_SF_SPEAKER] = "speaker",
		[PROTO_SF_VITERBI_K] = "viterbi_k", [PROTO_SF_CHUNK] = "chunk",
		[PROTO_SF_LEFT] = "left", [PROTO_SF_RIGHT] = "right", [PROTO_SF_FIRST] = "first",
		[PROTO_SF_ARGS] = "args",
		[PROTO_SF_AUDIO] = "audio", [PROTO_SF_PROMPT_TEXT] = "prompt_text",
	};
	return (unsigned)f < sizeof names / sizeof *names ? names[f] : "?";
}
