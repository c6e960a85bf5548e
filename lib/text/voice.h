/* voice.h: the front end of a phoneme voice (the demo voice): text to
 * phonemes with their timings by libespeak-ng, and the voice description
 * (voice.json in the model directory) that says which speakers and which
 * codec the model was trained with.
 *
 * A phoneme voice's prompt is LLaSA's, with the text replaced by a speaker
 * token and phoneme tokens ("<|spk_2|><|p_h|><|p_@|>..."), and its speech
 * is interleaved with forced phoneme tokens: the token <|p_X|> comes right
 * before the first speech token of phoneme X, at the frame where espeak-ng
 * starts it. The model never has to learn the alignment of text and speech;
 * the verifier inserts the forced tokens (see man/verifier.8).
 *
 * voice.json:
 *   { "frontend": "espeak-ng", "codec": "kmeans-gl", "sample_rate": 16000,
 *     "hop": 320, "speakers": [ { "voice": "en-us+m3", "pitch": 45,
 *     "rate": 160 }, ... ], "next_phoneme": false }
 * With "next_phoneme" true (optional, default false) each phoneme's forced
 * token is followed by a token of the phoneme after it, <|n_Y|> (the last
 * phoneme's: <|n__|>), so that every frame sees where its phoneme goes.
 * Frame f of the codec covers samples [f*hop, (f+1)*hop) at sample_rate;
 * espeak-ng's own rate (22,050 Hz) is converted exactly as the corpus tool
 * resamples (n' = round(n * sample_rate / 22050)).
 */
#ifndef PCG_VOICE_H
#define PCG_VOICE_H

#include <stddef.h>

#include "err.h"

#define VOICE_MAX_SPEAKERS 64

typedef struct voice_speaker {
	char voice[64]; /* espeak-ng voice and variant, as "en-us+m3" */
	int pitch;      /* 0..99 */
	int rate;       /* words per minute, 80..450 */
} voice_speaker;

typedef struct voice_info {
	char codec[32];
	int sample_rate, hop;
	int n_speakers;
	voice_speaker speakers[VOICE_MAX_SPEAKERS];
	int next_phoneme;   /* force <|n_Y|> after each <|p_X|> */
} voice_info;

/* Reads voice.json. Fails naming the field that is missing or wrong. */
int voice_load(const char *path, voice_info *v, pcg_err *err);

/* The same from len bytes of JSON in memory, named name in errors. */
int voice_parse(const char *json, size_t len, const char *name, voice_info *v, pcg_err *err);

/* One phoneme: espeak-ng's name and the codec frame where it starts. */
typedef struct voice_phone {
	char name[9];
	int frame;
} voice_phone;

typedef struct voice_render {
	voice_phone *ph; /* in order; frames non-decreasing, < n_frames */
	int n_ph;
	int n_frames;    /* frames of the whole utterance */
	short *wav;      /* espeak-ng's samples when asked for, else NULL */
	size_t n_samples;
	int wav_rate;    /* espeak-ng's sample rate */
} voice_render;

/* Speaks text as speaker s with espeak-ng: the phonemes with their start
 * frames for a codec of sample_rate and hop, and with want_wav the audio.
 * Phonemes that start at or after the last frame are dropped. Each call
 * speaks in a child process with a fresh engine, so that the same text and
 * speaker always give the same result (see voice.c). Free with
 * voice_render_free. */
int voice_speak(const voice_speaker *s, const char *text, int sample_rate, int hop, int want_wav,
		voice_render *out, pcg_err *err);
void voice_render_free(voice_render *r);

/* The token string of a phoneme ("<|p_" name "|>"), of the phoneme that
 * comes next ("<|n_" name "|>") and of a speaker ("<|spk_" n "|>") into buf. */
void voice_phone_token(const char *name, char *buf, size_t size);
void voice_next_token(const char *name, char *buf, size_t size);
void voice_speaker_token(int speaker, char *buf, size_t size);

#endif
