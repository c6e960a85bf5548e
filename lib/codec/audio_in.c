/* audio_in.c: audio_read (audio.h): libsndfile to decode, libsamplerate to
 * resample. */
#include "audio.h"

#include <samplerate.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Mono frames of f, at most max (more is an error). */
static int read_mono(SNDFILE *f, const SF_INFO *in, const char *path, size_t max,
		     float **out, size_t *n, pcg_err *err)
{
	const int ch = in->channels;
	size_t cap = in->frames > 0 && (sf_count_t)max >= in->frames ? (size_t)in->frames : 65536;
	float *mono = malloc(cap * sizeof *mono), *buf = malloc(4096 * (size_t)ch * sizeof *buf);
	size_t len = 0;

	if (!mono || !buf) {
		free(mono);
		free(buf);
		return pcg_fail(err, "%s: out of memory", path);
	}
	for (;;) {
		const sf_count_t got = sf_readf_float(f, buf, 4096);
		if (got <= 0)
			break;
		if (len + (size_t)got > max) {
			free(mono);
			free(buf);
			return pcg_fail(err, "%s: longer than the limit of %zu samples at %d Hz", path,
					max, in->samplerate);
		}
		if (len + (size_t)got > cap) {
			while (len + (size_t)got > cap)
				cap *= 2;
			float *p = realloc(mono, cap * sizeof *p);
			if (p == NULL) {
				free(mono);
				free(buf);
				return pcg_fail(err, "%s: out of memory", path);
			}
			mono = p;
		}
		for (sf_count_t i = 0; i < got; i++) {
			double s = 0.0;
			for (int c = 0; c < ch; c++)
				s += buf[i * ch + c];
			mono[len + (size_t)i] = (float)(s / ch);
		}
		len += (size_t)got;
	}
	free(buf);
	if (sf_error(f) != SF_ERR_NO_ERROR) {
		free(mono);
		return pcg_fail(err, "%s: %s", path, sf_strerror(f));
	}
	if (in->frames > 0 && in->frames != SF_COUNT_MAX && (sf_count_t)len < in->frames) {
		free(mono);
		return pcg_fail(err, "%s: %zu of the %lld frames its header announces: a truncated "
				"file?", path, len, (long long)in->frames);
	}
	*out = mono;
	*n = len;
	return 0;
}

/* A file image in memory, read by libsndfile through its virtual I/O. */
typedef struct mem_io {
	const unsigned char *data;
	sf_count_t size, pos;
} mem_io;

static sf_count_t mem_len(void *u) { return ((mem_io *)u)->size; }
static sf_count_t mem_tell(void *u) { return ((mem_io *)u)->pos; }

static sf_count_t mem_seek(sf_count_t off, int whence, void *u)
{
	mem_io *m = u;
	sf_count_t p = whence == SEEK_SET ? off : whence == SEEK_CUR ? m->pos + off : m->size + off;

	if (p < 0 || p > m->size)
		return -1;
	return m->pos = p;
}

static sf_count_t mem_read(void *dst, sf_count_t n, void *u)
{
	mem_io *m = u;
	if (n > m->size - m->pos)
		n = m->size - m->pos;
	memcpy(dst, m->data + m->pos, (size_t)n);
	m->pos += n;
	return n;
}

static sf_count_t mem_write(const void *src, sf_count_t n, void *u)
{
	(void)src;
	(void)n;
	(void)u;
	return 0;
}

/* The opened file f (info in), named name: checked, read, mixed, resampled. */
static int read_open(SNDFILE *f, SF_INFO *in, const char *name, int check_log, int rate,
		     double max_seconds, float **out, size_t *n, pcg_err *err)
{
	float *mono = NULL;
	size_t len = 0;

	if (in->channels < 1 || in->samplerate < 1000 || in->samplerate > 768000) {
		sf_close(f);
		return pcg_fail(err, "%s: %d channels at %d Hz: not audio this can read", name,
				in->channels, in->samplerate);
	}
	char log[4096] = "";
	sf_command(f, SFC_GET_LOG_INFO, log, sizeof log);
	if (check_log && strstr(log, "(should be") != NULL) {
		/* libsndfile reads a WAV whose chunk sizes exceed the file up to
		 * its end and says so only in its log */
		sf_close(f);
		return pcg_fail(err, "%s: its header announces more audio than the file holds: "
				"a truncated file?", name);
	}
	const double secs = in->frames > 0 && in->frames != SF_COUNT_MAX ?
		(double)in->frames / in->samplerate : 0.0;
	if (secs > max_seconds) {
		sf_close(f);
		return pcg_fail(err, "%s: %.1f s of audio; the limit is %g s", name, secs,
				max_seconds);
	}
	const size_t max = (size_t)(max_seconds * in->samplerate) + 1;
	int rc = read_mono(f, in, name, max, &mono, &len, err);
	sf_close(f);
	if (rc < 0)
		return -1;
	if (len == 0) {
		free(mono);
		return pcg_fail(err, "%s: no audio in it", name);
	}
	if (in->samplerate == rate) {
		*out = mono;
		*n = len;
		return 0;
	}
	const double ratio = (double)rate / in->samplerate;
	const size_t cap = (size_t)(len * ratio) + 16;
	float *res = malloc(cap * sizeof *res);
	if (res == NULL) {
		free(mono);
		return pcg_fail(err, "%s: out of memory", name);
	}
	SRC_DATA d = { .data_in = mono, .input_frames = (long)len, .data_out = res,
		       .output_frames = (long)cap, .src_ratio = ratio, .end_of_input = 1 };
	int e = src_simple(&d, SRC_SINC_BEST_QUALITY, 1);
	free(mono);
	if (e != 0) {
		free(res);
		return pcg_fail(err, "%s: resampling %d Hz to %d Hz: %s", name, in->samplerate, rate,
				src_strerror(e));
	}
	*out = res;
	*n = (size_t)d.output_frames_gen;
	return 0;
}

int audio_read(const char *path, int rate, double max_seconds, float **out, size_t *n,
	       pcg_err *err)
{
	SF_INFO in;
	const int is_stdin = strcmp(path, "-") == 0;

	*out = NULL;
	*n = 0;
	memset(&in, 0, sizeof in);
	SNDFILE *f = is_stdin ? sf_open_fd(STDIN_FILENO, SFM_READ, &in, 0)
			      : sf_open(path, SFM_READ, &in);
	if (f == NULL)
		return pcg_fail(err, "%s: %s", path, sf_strerror(NULL));
	return read_open(f, &in, path, !is_stdin, rate, max_seconds, out, n, err);
}

int audio_read_memory(const void *data, size_t size, const char *name, int rate,
		      double max_seconds, float **out, size_t *n, pcg_err *err)
{
	SF_VIRTUAL_IO io = { mem_len, mem_seek, mem_read, mem_write, mem_tell };
	mem_io m = { data, (sf_count_t)size, 0 };
	SF_INFO in;

	*out = NULL;
	*n = 0;
	memset(&in, 0, sizeof in);
	SNDFILE *f = sf_open_virtual(&io, SFM_READ, &in, &m);
	if (f == NULL)
		return pcg_fail(err, "%s: %s", name, sf_strerror(NULL));
	return read_open(f, &in, name, 1, rate, max_seconds, out, n, err);
}
