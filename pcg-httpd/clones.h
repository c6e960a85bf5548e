/* clones.h: the voices users register by a recording (POST
 * /v1/audio/voices): a name, what the recording says, and its bytes. A
 * speech whose "voice" names one (by its id or its name) sends the
 * recording and the transcript with each piece's synth; the verifier
 * encodes a recording once and keeps its codes by the bytes' hash, so only
 * the first speech pays for the encoding.
 *
 * With a directory (pcg-httpd --voices DIR) every voice is also a file
 * there, DIR/ID.voice, written whole and atomically (a temporary file,
 * flushed, renamed over the name), and the voices are read back at start:
 * a file that is not a voice, or whose bytes do not match the hash it
 * carries, is skipped with a line in the log. The file:
 *
 *   pcg-voice 1\n
 *   {"id", "name", "transcript", "created_at", "seconds", "bytes", "sha256"}\n
 *   the recording's bytes ("bytes" of them; "sha256" their hash)
 *
 * Names are 1 to 63 bytes of letters, digits, '-', '_' and '.', starting
 * with a letter; a name the model's voices answer to (reserved()), or one
 * that starts with "voice_" (the ids' prefix), cannot be registered.
 */
#ifndef PCG_HTTPD_CLONES_H
#define PCG_HTTPD_CLONES_H

#include <jansson.h>
#include <stddef.h>

#include "err.h"

#define CLONES_MAX_BYTES (32 << 20) /* one recording's bytes at most */
/* a .voice file at most: the recording and its header line */
#define CLONES_MAX_FILE (CLONES_MAX_BYTES + (1 << 20))
#define CLONES_NAME_MAX 63

typedef struct clone_voice {
	char id[32];                  /* "voice_" and 16 hex digits of the hash of
				       * name, transcript and recording */
	char name[64];
	char transcript[4096];
	char sha256[65];              /* of the recording, in hex */
	unsigned char *audio;
	size_t len;
	double seconds;               /* of audio */
	long long created;            /* Unix time */
	long long seq;                /* the order of registration */
	int refs;                     /* speeches using it */
	int pending;                  /* its file is being written */
	int gone;                     /* deleted: freed with its last reference */
} clone_voice;

/* How a full store takes one more voice. */
enum clones_evict { CLONES_REFUSE, CLONES_OLDEST };

/* Starts the store: at most max voices, dir NULL for memory only (created
 * if missing, else its voices read back; logs each file skipped as
 * "prog: ..."). reserved(name) says whether a name belongs to the model's
 * voices. Returns 0, or -1 with err. */
int clones_open(const char *dir, int max, enum clones_evict evict,
		int (*reserved)(const char *name), const char *prog, pcg_err *err);

/* Registers a recording of len bytes (checked: audio libsndfile reads, at
 * most 30 s) named name (name_len bytes: a NUL among them is refused)
 * saying transcript. The same name, transcript and bytes again give the
 * same voice. Returns the voice as JSON, or NULL with an HTTP status (400
 * bad input, 409 the name is taken or the store is full, 500 it could not
 * be written), an error code and a message. */
json_t *clones_add(const char *name, size_t name_len, const char *transcript,
		   const void *audio, size_t len, int *status, const char **code, char *msg,
		   size_t msg_len);

/* Deletes the voice with id (or name) s: its file too. Returns it as
 * OpenAI's deleted object, or NULL (status 404) with a message. */
json_t *clones_delete(const char *s, int *status, char *msg, size_t msg_len);

/* The voice called s (an id or a name), held until clones_release, or NULL. */
const clone_voice *clones_find(const char *s);
void clones_release(const clone_voice *v);

/* One voice as JSON, or NULL if none is called s. */
json_t *clones_get(const char *s);

/* Appends the voices to a JSON array (as GET /v1/audio/voices lists them). */
void clones_list(json_t *array);

#endif
