/* voices.h: the voices a request of pcg-httpd may name: the model's own
 * speakers (a phoneme voice's voice.json, or one "default"), OpenAI's
 * voice names mapped onto them, and the voices users registered by a
 * recording (clones.h), looked up after the model's own.
 */
#ifndef PCG_HTTPD_VOICES_H
#define PCG_HTTPD_VOICES_H

#include <jansson.h>
#include <stddef.h>

#include "clones.h"
#include "err.h"

#define VOICES_MAX_SPEAKERS 64

/* The speakers of the model and the names they answer to. */
typedef struct model_voices {
	int n;
	char name[VOICES_MAX_SPEAKERS][64]; /* voice.json's "name", else its "voice" */
} model_voices;

/* OpenAI's voice names, in the order they map onto the speakers (modulo
 * their number); NULL-terminated. */
extern const char *const voices_openai[];

/* Reads the speakers of a phoneme voice's voice.json; path NULL: a model
 * with one speaker ("default"). Returns 0 or -1 with err. */
int voices_load(const char *path, model_voices *v, pcg_err *err);

/* Whether s (case aside) names one of the model's own voices: an OpenAI
 * name, a speaker's name or a number. */
int voices_reserved(const model_voices *v, const char *s);

/* The voice a request's "voice" (a string, a number or {"id": ...}) names:
 * one of the model's speakers (*speaker, *clone NULL), else a registered
 * recording (*speaker 0, *clone held until clones_release). Returns 0, or
 * -1 when it names none. */
int voices_find(const model_voices *v, const json_t *j, int *speaker, const clone_voice **clone);

/* The voices in words, for an error message, into buf. */
const char *voices_describe(const model_voices *v, char *buf, size_t n);

#endif
