/* clones.c: see clones.h. One lock guards the table; a voice's file is
 * written outside it, the name held by a pending entry meanwhile. A voice
 * deleted or evicted while a speech uses it is freed by its last user. */
#include "clones.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audio.h"
#include "err.h"
#include "fileio.h"
#include "prompts.h"

#define MAGIC "pcg-voice 1\n"

static clone_voice **voices;
static int n_voices, max_voices;
static long long next_seq;
static enum clones_evict evict_rule;
static char *store;            /* the directory, or NULL */
static int (*is_reserved)(const char *);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void voice_free(clone_voice *v)
{
	if (v) {
		free(v->audio);
		free(v);
	}
}

/* 0, or -1 with msg: the rules of clones.h. */
static int name_check(const char *s, size_t n, char *msg, size_t msg_len)
{
	if (strlen(s) != n) {
		snprintf(msg, msg_len, "Invalid 'name': it holds a NUL byte.");
		return -1;
	}
	int ok = n >= 1 && n <= CLONES_NAME_MAX &&
		 ((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'));
	for (size_t i = 0; ok && i < n; i++)
		ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		     (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.';
	if (!ok) {
		char shown[80];
		size_t k = 0;
		for (size_t i = 0; i < n && k + 5 < sizeof shown; i++) /* control bytes shown as \xNN */
			k += (size_t)snprintf(shown + k, sizeof shown - k,
					      (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? "\\x%02x"
					      : "%c", (unsigned char)s[i]);
		snprintf(msg, msg_len, "Invalid 'name' '%s': 1 to %d letters, digits, '-', '_' or "
			 "'.', starting with a letter.", shown, CLONES_NAME_MAX);
		return -1;
	}
	if (!strncasecmp(s, "voice_", 6)) {
		snprintf(msg, msg_len, "Invalid 'name' '%s': names starting with 'voice_' are "
			 "the voices' ids.", s);
		return -1;
	}
	if (is_reserved && is_reserved(s)) {
		snprintf(msg, msg_len, "Invalid 'name' '%s': one of the model's own voices is "
			 "called so (GET /v1/audio/voices lists them).", s);
		return -1;
	}
	return 0;
}

static void hex(char *dst, const unsigned char *h, int n)
{
	for (int i = 0; i < n; i++)
		snprintf(dst + 2 * i, 3, "%02x", h[i]);
}

/* The id: of the name, the transcript and the recording together. */
static void make_id(char id[32], const char *name, const char *text, const void *audio,
		    size_t len)
{
	crypto_hash_sha256_state st;
	unsigned char h[crypto_hash_sha256_BYTES];
	crypto_hash_sha256_init(&st);
	crypto_hash_sha256_update(&st, (const unsigned char *)name, strlen(name) + 1);
	crypto_hash_sha256_update(&st, (const unsigned char *)text, strlen(text) + 1);
	crypto_hash_sha256_update(&st, audio, len);
	crypto_hash_sha256_final(&st, h);
	memcpy(id, "voice_", 6);
	hex(id + 6, h, 8);
}

static json_t *voice_json(const clone_voice *v)
{
	return json_pack("{s:s,s:s,s:s,s:I,s:s,s:f}", "id", v->id, "object", "audio.voice",
			 "name", v->name, "created_at", (json_int_t)v->created, "transcript",
			 v->transcript, "seconds", v->seconds);
}

/* ---- the files ---- */

static char *file_of(const char *id)
{
	char *p = NULL;
	if (store == NULL || asprintf(&p, "%s/%s.voice", store, id) < 0)
		return NULL;
	return p;
}

static int sync_dir(void)
{
	int fd = open(store, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	close(fd);
	return rc;
}

static int save(const clone_voice *v, pcg_err *err)
{
	json_t *j = json_pack("{s:s,s:s,s:s,s:I,s:f,s:I,s:s}", "id", v->id, "name", v->name,
			      "transcript", v->transcript, "created_at", (json_int_t)v->created,
			      "seconds", v->seconds, "bytes", (json_int_t)v->len, "sha256",
			      v->sha256);
	char *meta = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	char *path = file_of(v->id);
	json_decref(j);
	size_t ml = meta ? strlen(meta) : 0, n = strlen(MAGIC) + ml + 1 + v->len;
	unsigned char *buf = meta && path ? malloc(n) : NULL;
	int rc = -1;
	if (buf == NULL) {
		pcg_fail(err, "out of memory");
	} else {
		memcpy(buf, MAGIC, strlen(MAGIC));
		memcpy(buf + strlen(MAGIC), meta, ml);
		buf[strlen(MAGIC) + ml] = '\n';
		memcpy(buf + strlen(MAGIC) + ml + 1, v->audio, v->len);
		rc = pcg_write_file(path, buf, n, 0600, err);
		if (rc == 0)
			sync_dir(); /* the rename too */
	}
	free(buf);
	free(meta);
	free(path);
	return rc;
}

/* A voice from a file's bytes, checked whole; NULL with why. */
static clone_voice *parse_file(const char *fname, const unsigned char *b, size_t n, char *why,
			       size_t wn)
{
	const size_t ml = strlen(MAGIC);
	clone_voice *v = NULL;
	json_t *j = NULL;
	json_error_t je;
	char msg[300];

	if (n < ml || memcmp(b, MAGIC, ml)) {
		snprintf(why, wn, "not a voice file (no '%.*s' line)", (int)ml - 1, MAGIC);
		return NULL;
	}
	const unsigned char *lf = memchr(b + ml, '\n', n - ml);
	if (lf == NULL || (j = json_loadb((const char *)b + ml, (size_t)(lf - b) - ml, 0, &je)) ==
			  NULL) {
		snprintf(why, wn, "its header is not JSON");
		return NULL;
	}
	const char *id = json_string_value(json_object_get(j, "id"));
	const char *name = json_string_value(json_object_get(j, "name"));
	const char *text = json_string_value(json_object_get(j, "transcript"));
	const char *sha = json_string_value(json_object_get(j, "sha256"));
	json_t *jb = json_object_get(j, "bytes"), *jc = json_object_get(j, "created_at");
	const size_t len = n - (size_t)(lf + 1 - b);
	unsigned char h[crypto_hash_sha256_BYTES];
	char hx[65], want[32];
	if (!id || !name || !text || !sha || !json_is_integer(jb) || !json_is_integer(jc)) {
		snprintf(why, wn, "its header lacks a field");
		goto out;
	}
	if (json_integer_value(jb) != (json_int_t)len || len == 0 || len > CLONES_MAX_BYTES) {
		snprintf(why, wn, "it holds %zu bytes of audio, its header says %lld (cut short?)",
			 len, (long long)json_integer_value(jb));
		goto out;
	}
	crypto_hash_sha256(h, lf + 1, len);
	hex(hx, h, 32);
	if (strcmp(hx, sha)) {
		snprintf(why, wn, "the recording's bytes do not match its sha256");
		goto out;
	}
	if (strlen(text) >= sizeof v->transcript || name_check(name, strlen(name), msg,
							       sizeof msg) < 0) {
		snprintf(why, wn, "%s", strlen(text) >= sizeof v->transcript ? "its transcript is "
			 "too long" : msg);
		goto out;
	}
	make_id(want, name, text, lf + 1, len);
	char fwant[48];
	snprintf(fwant, sizeof fwant, "%s.voice", want);
	if (strcmp(id, want) || strcmp(fname, fwant)) {
		snprintf(why, wn, "its id does not match its name, transcript and recording");
		goto out;
	}
	if ((v = calloc(1, sizeof *v)) == NULL || (v->audio = malloc(len)) == NULL) {
		free(v);
		v = NULL;
		snprintf(why, wn, "out of memory");
		goto out;
	}
	snprintf(v->id, sizeof v->id, "%s", id);
	snprintf(v->name, sizeof v->name, "%s", name);
	snprintf(v->transcript, sizeof v->transcript, "%s", text);
	snprintf(v->sha256, sizeof v->sha256, "%s", sha);
	memcpy(v->audio, lf + 1, len);
	v->len = len;
	v->seconds = json_number_value(json_object_get(j, "seconds"));
	v->created = (long long)json_integer_value(jc);
out:
	json_decref(j);
	return v;
}

static int by_age(const void *a, const void *b)
{
	const clone_voice *x = *(clone_voice *const *)a, *y = *(clone_voice *const *)b;
	return x->created != y->created ? (x->created < y->created ? -1 : 1) : strcmp(x->id, y->id);
}

static int load(const char *prog)
{
	DIR *d = opendir(store);
	struct dirent *e;
	int skipped = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		const char *f = e->d_name;
		const size_t fl = strlen(f);
		char path[4200], why[400];
		if (f[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", store, f);
		if (fl > 4 && !strcmp(f + fl - 4, ".tmp")) { /* a write cut short */
			fprintf(stderr, "%s: --voices %s: removed %s, a voice's write cut short\n", prog,
				store, f);
			unlink(path);
			continue;
		}
		if (fl < 7 || strcmp(f + fl - 6, ".voice"))
			continue;
		/* only a regular file, and no bigger than a voice can be: an
		 * entry that is a FIFO, a device or a link to one is refused
		 * before it is read (as the key loader does) */
		char *data = NULL;
		size_t n = 0;
		pcg_err err = { "" };
		clone_voice *v = NULL;
		if (pcg_read_small(path, CLONES_MAX_FILE, &data, &n, &err) < 0) {
			snprintf(why, sizeof why, "%s", err.msg);
		} else {
			v = parse_file(f, (const unsigned char *)data, n, why, sizeof why);
			free(data);
		}
		for (int i = 0; v && i < n_voices; i++)
			if (!strcmp(voices[i]->name, v->name)) {
				snprintf(why, sizeof why, "the name '%s' is taken by %s", v->name,
					 voices[i]->id);
				voice_free(v);
				v = NULL;
			}
		if (v && n_voices == max_voices) {
			snprintf(why, sizeof why, "the store is full (--voices-max %d)", max_voices);
			voice_free(v);
			v = NULL;
		}
		if (v == NULL) {
			fprintf(stderr, "%s: --voices %s: skipped %s: %s\n", prog, store, f, why);
			skipped++;
			continue;
		}
		voices[n_voices++] = v;
	}
	closedir(d);
	qsort(voices, (size_t)n_voices, sizeof *voices, by_age);
	for (int i = 0; i < n_voices; i++)
		voices[i]->seq = next_seq++;
	return skipped;
}

int clones_open(const char *dir, int max, enum clones_evict evict,
		int (*reserved)(const char *name), const char *prog, pcg_err *err)
{
	if (sodium_init() < 0)
		return pcg_fail(err, "libsodium failed to start");
	if ((voices = calloc((size_t)max, sizeof *voices)) == NULL)
		return pcg_fail(err, "out of memory");
	max_voices = max;
	evict_rule = evict;
	is_reserved = reserved;
	if (dir == NULL)
		return 0;
	if ((store = strdup(dir)) == NULL)
		return pcg_fail(err, "out of memory");
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return pcg_fail(err, "--voices %s: cannot create: %s", dir, strerror(errno));
	if (load(prog) < 0)
		return pcg_fail(err, "--voices %s: %s", dir, strerror(errno));
	return 0;
}

/* ---- the table ---- */

/* Removes entry i; its file too. Under the lock. */
static void drop(int i)
{
	clone_voice *v = voices[i];
	char *path = file_of(v->id);
	if (path) {
		unlink(path);
		sync_dir();
	}
	free(path);
	memmove(voices + i, voices + i + 1, (size_t)(n_voices - i - 1) * sizeof *voices);
	n_voices--;
	v->gone = 1;
	if (v->refs == 0)
		voice_free(v);
}

static json_t *refuse(int *status, int code_status, const char **code, const char *c,
		      char *msg, size_t n, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static json_t *refuse(int *status, int code_status, const char **code, const char *c,
		      char *msg, size_t n, const char *fmt, ...)
{
	va_list ap;
	*status = code_status;
	*code = c;
	va_start(ap, fmt);
	vsnprintf(msg, n, fmt, ap);
	va_end(ap);
	return NULL;
}

json_t *clones_add(const char *name, size_t name_len, const char *transcript,
		   const void *audio, size_t len, int *status, const char **code, char *msg,
		   size_t msg_len)
{
	unsigned char h[crypto_hash_sha256_BYTES];
	pcg_err err = { "" };
	float *wav;
	size_t ns;

	if (name_check(name, name_len, msg, msg_len) < 0) {
		*status = 400;
		*code = "invalid_value";
		return NULL;
	}
	if (strlen(transcript) >= sizeof voices[0]->transcript)
		return refuse(status, 400, code, "invalid_value", msg, msg_len, "The 'transcript' "
			      "is longer than 4095 bytes.");
	if (len == 0 || len > CLONES_MAX_BYTES)
		return refuse(status, 400, code, "invalid_value", msg, msg_len, "The recording is "
			      "%s: send the audio file (WAV, FLAC, Ogg, MP3; up to 30 s) as the "
			      "body.", len ? "larger than 32 MB" : "empty");
	if (audio_read_memory(audio, len, "the recording", 16000, PCG_PROMPT_MAX_SECONDS, &wav,
			      &ns, &err) < 0)
		return refuse(status, 400, code, "invalid_value", msg, msg_len, "%s.", err.msg);
	free(wav);
	char id[32];
	make_id(id, name, transcript, audio, len);

	pthread_mutex_lock(&lock);
	for (int i = 0; i < n_voices; i++) {
		clone_voice *v = voices[i];
		if (strcmp(v->name, name))
			continue;
		json_t *same = !strcmp(v->id, id) && !v->pending ? voice_json(v) : NULL;
		pthread_mutex_unlock(&lock);
		return same ? same : refuse(status, 409, code, "voice_name_taken", msg, msg_len,
					    "A voice named '%s' exists with another recording or "
					    "transcript: choose another name, or delete it "
					    "(DELETE /v1/audio/voices/%s).", name, v->id);
	}
	if (n_voices == max_voices) {
		int oldest = -1;
		for (int i = 0; evict_rule == CLONES_OLDEST && i < n_voices; i++)
			if (!voices[i]->pending && (oldest < 0 || voices[i]->seq < voices[oldest]->seq))
				oldest = i;
		if (oldest < 0) {
			pthread_mutex_unlock(&lock);
			return refuse(status, 409, code, "voice_limit_reached", msg, msg_len, "This "
				      "server holds %d voices, its most (pcg-httpd --voices-max): "
				      "delete one first (DELETE /v1/audio/voices/ID).", max_voices);
		}
		drop(oldest);
	}
	clone_voice *v = calloc(1, sizeof *v);
	if (v == NULL || (v->audio = malloc(len)) == NULL) {
		free(v);
		pthread_mutex_unlock(&lock);
		return refuse(status, 500, code, "server_error", msg, msg_len, "Out of memory.");
	}
	snprintf(v->id, sizeof v->id, "%s", id);
	snprintf(v->name, sizeof v->name, "%s", name);
	snprintf(v->transcript, sizeof v->transcript, "%s", transcript);
	crypto_hash_sha256(h, audio, len);
	hex(v->sha256, h, 32);
	memcpy(v->audio, audio, len);
	v->len = len;
	v->seconds = ns / 16000.0;
	v->created = (long long)time(NULL);
	v->seq = next_seq++;
	v->pending = store != NULL;
	voices[n_voices++] = v;
	if (store == NULL) {
		json_t *j = voice_json(v);
		pthread_mutex_unlock(&lock);
		return j;
	}
	pthread_mutex_unlock(&lock);

	/* written outside the lock: the pending entry holds the name */
	const int rc = save(v, &err);
	pthread_mutex_lock(&lock);
	json_t *j = NULL;
	if (rc == 0) {
		v->pending = 0;
		j = voice_json(v);
	} else {
		for (int i = 0; i < n_voices; i++)
			if (voices[i] == v) {
				memmove(voices + i, voices + i + 1,
					(size_t)(n_voices - i - 1) * sizeof *voices);
				n_voices--;
				break;
			}
		voice_free(v);
		refuse(status, 500, code, "server_error", msg, msg_len, "The voice could not be "
		       "stored (%s).", err.msg);
	}
	pthread_mutex_unlock(&lock);
	return j;
}

static int find_index(const char *s)
{
	for (int i = 0; i < n_voices; i++)
		if (!voices[i]->pending && (!strcmp(voices[i]->id, s) || !strcmp(voices[i]->name, s)))
			return i;
	return -1;
}

json_t *clones_delete(const char *s, int *status, char *msg, size_t msg_len)
{
	pthread_mutex_lock(&lock);
	int i = find_index(s);
	if (i < 0) {
		pthread_mutex_unlock(&lock);
		*status = 404;
		snprintf(msg, msg_len, "No registered voice '%.64s': GET /v1/audio/voices lists "
			 "them (the model's own voices cannot be deleted).", s);
		return NULL;
	}
	json_t *j = json_pack("{s:s,s:s,s:s,s:b}", "id", voices[i]->id, "name", voices[i]->name,
			      "object", "audio.voice.deleted", "deleted", 1);
	drop(i);
	pthread_mutex_unlock(&lock);
	return j;
}

const clone_voice *clones_find(const char *s)
{
	clone_voice *v = NULL;
	pthread_mutex_lock(&lock);
	int i = find_index(s);
	if (i >= 0) {
		v = voices[i];
		v->refs++;
	}
	pthread_mutex_unlock(&lock);
	return v;
}

void clones_release(const clone_voice *cv)
{
	clone_voice *v = (clone_voice *)cv;
	if (v == NULL)
		return;
	pthread_mutex_lock(&lock);
	if (--v->refs == 0 && v->gone)
		voice_free(v);
	pthread_mutex_unlock(&lock);
}

json_t *clones_get(const char *s)
{
	pthread_mutex_lock(&lock);
	int i = find_index(s);
	json_t *j = i >= 0 ? voice_json(voices[i]) : NULL;
	pthread_mutex_unlock(&lock);
	return j;
}

void clones_list(json_t *array)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < n_voices; i++)
		if (!voices[i]->pending)
			json_array_append_new(array, voice_json(voices[i]));
	pthread_mutex_unlock(&lock);
}
