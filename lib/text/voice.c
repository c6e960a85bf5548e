/* voice.c: the phoneme voice's front end: libespeak-ng with phoneme events,
 * and voice.json. See voice.h. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <espeak-ng/speak_lib.h>

#include "voice.h"
#include "fileio.h"

/* voice.json's fields from root (taken over: freed here); path names it in
 * errors. */
static int from_json(json_t *root, const char *path, voice_info *v, pcg_err *err)
{
	json_t *sp;
	const char *s;
	int rc = -1;

	if (!json_is_object(root)) {
		pcg_fail(err, "%s: not a JSON object", path);
		goto out;
	}
	s = json_string_value(json_object_get(root, "frontend"));
	if (s == NULL || strcmp(s, "espeak-ng")) {
		pcg_fail(err, "%s: field 'frontend': want \"espeak-ng\"", path);
		goto out;
	}
	s = json_string_value(json_object_get(root, "codec"));
	if (s == NULL || strlen(s) >= sizeof v->codec) {
		pcg_fail(err, "%s: field 'codec': missing or too long", path);
		goto out;
	}
	strcpy(v->codec, s);
	json_t *sr = json_object_get(root, "sample_rate"), *hop = json_object_get(root, "hop");
	if (!json_is_integer(sr) || json_integer_value(sr) < 1000 || json_integer_value(sr) > 192000) {
		pcg_fail(err, "%s: field 'sample_rate': want an integer in [1000, 192000]", path);
		goto out;
	}
	if (!json_is_integer(hop) || json_integer_value(hop) < 1 || json_integer_value(hop) > 65536) {
		pcg_fail(err, "%s: field 'hop': want an integer in [1, 65536]", path);
		goto out;
	}
	v->sample_rate = (int)json_integer_value(sr);
	v->hop = (int)json_integer_value(hop);
	sp = json_object_get(root, "speakers");
	if (!json_is_array(sp) || json_array_size(sp) == 0 ||
	    json_array_size(sp) > VOICE_MAX_SPEAKERS) {
		pcg_fail(err, "%s: field 'speakers': want 1 to %d speakers", path, VOICE_MAX_SPEAKERS);
		goto out;
	}
	for (size_t i = 0; i < json_array_size(sp); i++) {
		json_t *o = json_array_get(sp, i);
		const char *name = json_string_value(json_object_get(o, "voice"));
		json_t *p = json_object_get(o, "pitch"), *r = json_object_get(o, "rate");
		voice_speaker *k = &v->speakers[i];
		if (name == NULL || !*name || strlen(name) >= sizeof k->voice ||
		    !json_is_integer(p) || json_integer_value(p) < 0 || json_integer_value(p) > 99 ||
		    !json_is_integer(r) || json_integer_value(r) < 80 || json_integer_value(r) > 450) {
			pcg_fail(err, "%s: speakers[%zu]: want voice (a name), pitch (0-99) and "
				 "rate (80-450)", path, i);
			goto out;
		}
		strcpy(k->voice, name);
		k->pitch = (int)json_integer_value(p);
		k->rate = (int)json_integer_value(r);
	}
	v->n_speakers = (int)json_array_size(sp);
	json_t *nx = json_object_get(root, "next_phoneme");
	if (nx != NULL && !json_is_boolean(nx)) {
		pcg_fail(err, "%s: field 'next_phoneme': want true or false", path);
		goto out;
	}
	v->next_phoneme = nx != NULL && json_is_true(nx);
	rc = 0;
out:
	json_decref(root);
	return rc;
}

int voice_load(const char *path, voice_info *v, pcg_err *err)
{
	json_error_t je;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);

	memset(v, 0, sizeof *v);
	if (root == NULL)
		return pcg_json_fail(err, path, &je);
	return from_json(root, path, v, err);
}

int voice_parse(const char *json, size_t len, const char *name, voice_info *v, pcg_err *err)
{
	json_error_t je;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);

	memset(v, 0, sizeof *v);
	if (root == NULL)
		return pcg_json_fail(err, name, &je);
	return from_json(root, name, v, err);
}

static int espeak_rate; /* 0: not initialised yet; -1: failed */

/* libespeak-ng is opened on the first voice spoken, not linked: it pulls in
 * audio output (libpcaudio, PulseAudio, ALSA, X11, systemd: 25 libraries)
 * that a server which never speaks a phoneme voice would load at every
 * start, and that a machine without espeak-ng would need to start at all.
 * The types are the header's; the functions come from dlsym. */
static struct {
	int (*Initialize)(espeak_AUDIO_OUTPUT, int, const char *, int);
	void (*SetSynthCallback)(t_espeak_callback *);
	espeak_ERROR (*SetVoiceByName)(const char *);
	espeak_ERROR (*SetVoiceByProperties)(espeak_VOICE *);
	espeak_ERROR (*SetParameter)(espeak_PARAMETER, int, int);
	espeak_ERROR (*Synth)(const void *, size_t, unsigned int, espeak_POSITION_TYPE,
			      unsigned int, unsigned int, unsigned int *, void *);
	espeak_ERROR (*Synchronize)(void);
} es;

/* Opens libespeak-ng.so.1 once; 0 when every function was found. */
static int espeak_open(pcg_err *err)
{
	static void *lib;
	static char why[200];

	if (lib != NULL)
		return 0;
	if (why[0] != '\0')
		return pcg_fail(err, "%s", why);
	void *h = dlopen("libespeak-ng.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(why, sizeof why, "espeak-ng: cannot open libespeak-ng.so.1 (%s): install "
			 "espeak-ng (Debian: apt install libespeak-ng1 espeak-ng-data)", dlerror());
		return pcg_fail(err, "%s", why);
	}
#define ES(f) ((*(void **)&es.f = dlsym(h, "espeak_" #f)) != NULL)
	if (!(ES(Initialize) && ES(SetSynthCallback) && ES(SetVoiceByName) &&
	      ES(SetVoiceByProperties) && ES(SetParameter) && ES(Synth) && ES(Synchronize))) {
		snprintf(why, sizeof why, "espeak-ng: libespeak-ng.so.1 lacks the espeak_ API (%s)",
			 dlerror());
		dlclose(h);
		return pcg_fail(err, "%s", why);
	}
#undef ES
	lib = h;
	return 0;
}

/* What the synthesis callback collects. */
typedef struct collect {
	voice_phone *ph;
	int n_ph, cap_ph;
	long *sample; /* the start sample of each phoneme */
	short *wav;
	size_t n, cap;
	int want_wav, oom;
} collect;

static int on_synth(short *wav, int n, espeak_EVENT *ev)
{
	collect *c = ev->user_data;

	for (; ev->type != espeakEVENT_LIST_TERMINATED; ev++) {
		if (ev->type != espeakEVENT_PHONEME || c->oom)
			continue;
		if (c->n_ph == c->cap_ph) {
			int cap = c->cap_ph ? 2 * c->cap_ph : 64;
			voice_phone *p = realloc(c->ph, cap * sizeof *p);
			long *s = p ? realloc(c->sample, cap * sizeof *s) : NULL;
			if (p)
				c->ph = p;
			if (s == NULL) {
				c->oom = 1;
				continue;
			}
			c->sample = s;
			c->cap_ph = cap;
		}
		memcpy(c->ph[c->n_ph].name, ev->id.string, 8);
		c->ph[c->n_ph].name[8] = '\0';
		c->sample[c->n_ph++] = ev->sample;
	}
	if (wav && n > 0) {
		if (c->want_wav && c->n + n > c->cap) {
			size_t cap = c->cap ? 2 * c->cap : 65536;
			while (cap < c->n + n)
				cap *= 2;
			short *w = realloc(c->wav, cap * sizeof *w);
			if (w == NULL) {
				c->oom = 1;
				return 1;
			}
			c->wav = w;
			c->cap = cap;
		}
		if (c->want_wav)
			memcpy(c->wav + c->n, wav, n * sizeof *wav);
		c->n += n;
	}
	return c->oom;
}

/* Speaks with the engine of this process (see voice_speak). */
static int speak_here(const voice_speaker *s, const char *text, int sample_rate, int hop,
		      int want_wav, voice_render *out, pcg_err *err)
{
	collect c = { .want_wav = want_wav };
	int rc = -1;

	memset(out, 0, sizeof *out);
	if (sample_rate <= 0 || hop <= 0)
		return pcg_fail(err, "voice: sample rate %d and hop %d must be positive", sample_rate,
				hop);
	if (espeak_open(err) < 0)
		return -1;
	if (espeak_rate == 0) {
		/* DONT_EXIT: a missing data directory is an error, not exit(). */
		espeak_rate = es.Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, NULL,
						espeakINITIALIZE_PHONEME_EVENTS |
						espeakINITIALIZE_DONT_EXIT);
		if (espeak_rate <= 0)
			espeak_rate = -1;
		else
			es.SetSynthCallback(on_synth);
	}
	if (espeak_rate < 0) {
		pcg_fail(err, "espeak-ng: cannot initialise (is espeak-ng-data installed?)");
		goto out;
	}
	/* As the espeak-ng program does: a voice name, else a language
	 * ("en-gb+m1": language and variant). */
	espeak_VOICE sel = { .languages = s->voice };
	if (es.SetVoiceByName(s->voice) != EE_OK && es.SetVoiceByProperties(&sel) != EE_OK) {
		pcg_fail(err, "espeak-ng: no voice '%s'", s->voice);
		goto out;
	}
	if (es.SetParameter(espeakRATE, s->rate, 0) != EE_OK ||
	    es.SetParameter(espeakPITCH, s->pitch, 0) != EE_OK) {
		pcg_fail(err, "espeak-ng: cannot set rate %d and pitch %d", s->rate, s->pitch);
		goto out;
	}
	/* Plain UTF-8 text: no SSML, so markup in the text is read, not obeyed. */
	if (es.Synth(text, strlen(text) + 1, 0, POS_CHARACTER, 0, espeakCHARS_UTF8, NULL, &c) !=
		    EE_OK ||
	    es.Synchronize() != EE_OK) {
		pcg_fail(err, "espeak-ng: synthesis failed");
		goto out;
	}
	if (c.oom) {
		pcg_fail(err, "voice: out of memory");
		goto out;
	}
	/* Frames as the corpus counts them: resample n samples to n' =
	 * round(n * sample_rate / espeak_rate), then n' / hop whole frames. A
	 * phoneme starting at sample t starts at frame round(t' / hop). */
	const long long R = espeak_rate;
	long long n16 = ((long long)c.n * 2 * sample_rate + R) / (2 * R);
	out->n_frames = (int)(n16 / hop);
	for (int i = 0; i < c.n_ph; i++) {
		long long f = ((long long)c.sample[i] * 2 * sample_rate + R * hop) / (2 * R * hop);
		if (f >= out->n_frames)
			continue;
		c.ph[out->n_ph] = c.ph[i];
		c.ph[out->n_ph++].frame = (int)f;
	}
	out->ph = c.ph;
	c.ph = NULL;
	out->wav_rate = espeak_rate;
	out->n_samples = c.n;
	if (want_wav) {
		out->wav = c.wav;
		c.wav = NULL;
	}
	rc = 0;
out:
	free(c.ph);
	free(c.sample);
	free(c.wav);
	return rc;
}

/* What the child writes to the parent: this, then the phonemes, then the
 * samples when asked for. */
typedef struct reply {
	int32_t ok, n_ph, n_frames, wav_rate, has_wav;
	uint64_t n_samples;
	char msg[sizeof(pcg_err)];
} reply;

static int write_all(int fd, const void *p, size_t n)
{
	for (const char *b = p; n > 0;) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n)
{
	for (char *b = p; n > 0;) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* libespeak-ng carries state from one synthesis to the next in a process
 * (the same text comes out some hundred samples longer the second time,
 * and again different the third), and re-initialising it in place hangs.
 * So each text is spoken by a child process with a fresh engine, as the
 * corpus was (one pcg-phonemize per sentence): the same text and speaker
 * always give the same phonemes and frames. A fork costs about a
 * millisecond next to the synthesis. */
int voice_speak(const voice_speaker *s, const char *text, int sample_rate, int hop, int want_wav,
		voice_render *out, pcg_err *err)
{
	int fds[2], status = 0;
	reply h = { 0 };
	pid_t pid;

	memset(out, 0, sizeof *out);
	if (pipe2(fds, O_CLOEXEC) < 0)
		return pcg_fail(err, "voice: pipe: %s", strerror(errno));
	if ((pid = fork()) < 0) {
		close(fds[0]);
		close(fds[1]);
		return pcg_fail(err, "voice: fork: %s", strerror(errno));
	}
	if (pid == 0) {
		pcg_err e = { "" };
		voice_render r;
		close(fds[0]);
		memset(&h, 0, sizeof h);
		h.ok = speak_here(s, text, sample_rate, hop, want_wav, &r, &e) == 0;
		if (h.ok) {
			h.n_ph = r.n_ph;
			h.n_frames = r.n_frames;
			h.wav_rate = r.wav_rate;
			h.has_wav = r.wav != NULL;
			h.n_samples = r.n_samples;
		}
		memcpy(h.msg, e.msg, sizeof h.msg);
		int bad = write_all(fds[1], &h, sizeof h) < 0 ||
			  (h.ok && write_all(fds[1], r.ph, (size_t)r.n_ph * sizeof *r.ph) < 0) ||
			  (h.ok && h.has_wav &&
			   write_all(fds[1], r.wav, r.n_samples * sizeof *r.wav) < 0);
		_exit(bad ? 1 : 0);
	}
	close(fds[1]);
	int rc = read_all(fds[0], &h, sizeof h);
	if (rc == 0 && h.ok) {
		if (h.n_ph < 0 || h.n_ph > (1 << 24) || h.n_frames < 0 ||
		    h.n_samples > ((uint64_t)1 << 32)) {
			rc = pcg_fail(err, "voice: bad reply from the synthesis process");
		} else {
			out->n_ph = h.n_ph;
			out->n_frames = h.n_frames;
			out->wav_rate = h.wav_rate;
			out->n_samples = (size_t)h.n_samples;
			out->ph = malloc(((size_t)h.n_ph + 1) * sizeof *out->ph);
			if (h.has_wav)
				out->wav = malloc((h.n_samples + 1) * sizeof *out->wav);
			if (out->ph == NULL || (h.has_wav && out->wav == NULL))
				rc = pcg_fail(err, "voice: out of memory");
			else if (read_all(fds[0], out->ph, (size_t)h.n_ph * sizeof *out->ph) < 0 ||
				 (h.has_wav &&
				  read_all(fds[0], out->wav, out->n_samples * sizeof *out->wav) < 0))
				rc = pcg_fail(err, "voice: the synthesis process stopped early");
		}
	} else if (rc == 0) {
		h.msg[sizeof h.msg - 1] = '\0';
		if (err)
			memcpy(err->msg, h.msg, sizeof h.msg);
		rc = -1;
	}
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (rc < 0 && h.ok == 0 && h.msg[0] == '\0')
		pcg_fail(err, "espeak-ng: the synthesis process died (status %d)", status);
	if (rc < 0)
		voice_render_free(out);
	return rc;
}

void voice_render_free(voice_render *r)
{
	free(r->ph);
	free(r->wav);
	memset(r, 0, sizeof *r);
}

void voice_phone_token(const char *name, char *buf, size_t size)
{
	snprintf(buf, size, "<|p_%s|>", name);
}

void voice_next_token(const char *name, char *buf, size_t size)
{
	snprintf(buf, size, "<|n_%s|>", name);
}

void voice_speaker_token(int speaker, char *buf, size_t size)
{
	snprintf(buf, size, "<|spk_%d|>", speaker);
}
