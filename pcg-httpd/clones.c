/* clones.c: see clones.h. Voices are added, never removed, so a pointer
 * handed out stays valid; one lock guards the table. */
#include "clones.h"

#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audio.h"
#include "err.h"
#include "prompts.h"

static clone_voice *voices[CLONES_MAX];
static int n_voices;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 63)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.'))
			return 0;
	return 1;
}

static const clone_voice *refuse(int *status, int code, char *msg, size_t n, const char *fmt,
				 const char *a)
{
	*status = code;
	snprintf(msg, n, fmt, a);
	return NULL;
}

const clone_voice *clones_add(const char *name, const char *transcript, const void *audio,
			      size_t len, int *status, char *msg, size_t msg_len)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	pcg_err err = { "" };
	float *wav;
	size_t ns;

	if (!name_ok(name))
		return refuse(status, 400, msg, msg_len, "Invalid 'name' '%.64s': 1 to 63 letters, "
			      "digits, '-', '_' or '.'.", name);
	if (strlen(transcript) >= sizeof voices[0]->transcript)
		return refuse(status, 400, msg, msg_len, "The 'transcript' is longer than %s "
			      "bytes.", "4095");
	if (len == 0 || len > CLONES_MAX_BYTES)
		return refuse(status, 400, msg, msg_len, "The recording is %s: send the audio "
			      "file (WAV, FLAC, Ogg, MP3; up to 30 s) as the body.",
			      len ? "larger than 32 MB" : "empty");
	if (audio_read_memory(audio, len, "the recording", 16000, PCG_PROMPT_MAX_SECONDS, &wav,
			      &ns, &err) < 0)
		return refuse(status, 400, msg, msg_len, "%s.", err.msg);
	free(wav);
	if (sodium_init() < 0)
		return refuse(status, 500, msg, msg_len, "%s", "libsodium failed to start");
	crypto_hash_sha256(h, audio, len);
	char id[32];
	snprintf(id, sizeof id, "voice_");
	for (int i = 0; i < 8; i++)
		snprintf(id + 6 + 2 * i, sizeof id - 6 - 2 * i, "%02x", h[i]);

	pthread_mutex_lock(&lock);
	clone_voice *v = NULL;
	for (int i = 0; i < n_voices; i++)
		if (!strcmp(voices[i]->name, name)) {
			v = voices[i];
			break;
		}
	if (v != NULL) {
		const int same = !strcmp(v->id, id) && !strcmp(v->transcript, transcript);
		pthread_mutex_unlock(&lock);
		return same ? v : refuse(status, 409, msg, msg_len, "A voice named '%s' exists "
					 "with another recording: choose another name.", name);
	}
	if (n_voices == CLONES_MAX) {
		pthread_mutex_unlock(&lock);
		return refuse(status, 507, msg, msg_len, "%s", "This server holds 64 voices, its "
			      "most: restart it to start again.");
	}
	if ((v = calloc(1, sizeof *v)) == NULL || (v->audio = malloc(len)) == NULL) {
		free(v);
		pthread_mutex_unlock(&lock);
		return refuse(status, 500, msg, msg_len, "%s", "Out of memory.");
	}
	snprintf(v->id, sizeof v->id, "%s", id);
	snprintf(v->name, sizeof v->name, "%s", name);
	snprintf(v->transcript, sizeof v->transcript, "%s", transcript);
	memcpy(v->audio, audio, len);
	v->len = len;
	v->seconds = ns / 16000.0;
	v->created = (long long)time(NULL);
	voices[n_voices++] = v;
	pthread_mutex_unlock(&lock);
	return v;
}

const clone_voice *clones_find(const char *s)
{
	const clone_voice *v = NULL;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < n_voices && v == NULL; i++)
		if (!strcmp(voices[i]->id, s) || !strcmp(voices[i]->name, s))
			v = voices[i];
	pthread_mutex_unlock(&lock);
	return v;
}

json_t *clones_json(const clone_voice *v)
{
	return json_pack("{s:s,s:s,s:s,s:I,s:s,s:f}", "id", v->id, "object", "audio.voice",
			 "name", v->name, "created_at", (json_int_t)v->created, "transcript",
			 v->transcript, "seconds", v->seconds);
}

void clones_list(json_t *array)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < n_voices; i++)
		json_array_append_new(array, clones_json(voices[i]));
	pthread_mutex_unlock(&lock);
}
