/* clones.h: the voices users register by a recording (POST
 * /v1/audio/voices): a name, what the recording says, and its bytes, kept
 * in memory while the server runs. A speech whose "voice" names one (by its
 * id or its name) sends the recording and the transcript with each piece's
 * synth; the verifier encodes a recording once and keeps its codes by the
 * bytes' hash, so only the first speech pays for the encoding.
 */
#ifndef PCG_HTTPD_CLONES_H
#define PCG_HTTPD_CLONES_H

#include <jansson.h>
#include <stddef.h>

#define CLONES_MAX 64              /* voices registered at most */
#define CLONES_MAX_BYTES (32 << 20) /* one recording's bytes at most */

typedef struct clone_voice {
	char id[32];                  /* "voice_" and 16 hex digits of the bytes' SHA-256 */
	char name[64];
	char transcript[4096];
	unsigned char *audio;
	size_t len;
	double seconds;               /* of audio */
	long long created;            /* Unix time */
} clone_voice;

/* Registers a recording of len bytes (checked: audio libsndfile reads, at
 * most 30 s) named name (letters, digits, '-', '_', '.'; 1 to 63) saying
 * transcript. The same bytes again under the same name give the same voice.
 * Returns the voice (valid while the server runs), or NULL with an HTTP
 * status (400 bad input, 409 the name is taken, 507 full) and a message. */
const clone_voice *clones_add(const char *name, const char *transcript, const void *audio,
			      size_t len, int *status, char *msg, size_t msg_len);

/* The voice called s (an id or a name), or NULL. */
const clone_voice *clones_find(const char *s);

/* Appends the voices to a JSON array (as GET /v1/audio/voices lists them). */
void clones_list(json_t *array);

/* One voice as JSON. */
json_t *clones_json(const clone_voice *v);

#endif
