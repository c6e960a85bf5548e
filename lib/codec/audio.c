/* audio.c: audio files through libsndfile, replaced atomically or written
 * through by lib/core/fileio.c (see audio.h). */
#include "audio.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

static const struct {
	const char *name;
	int sf_format;
	int bytes; /* per sample, for the raw size check */
} formats[] = {
	[AUDIO_WAV] = { "wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 2 },
	[AUDIO_WAV_F32] = { "wav-f32", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 4 },
	[AUDIO_FLAC] = { "flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 2 },
	[AUDIO_RAW] = { "raw", SF_FORMAT_RAW | SF_FORMAT_PCM_16 | SF_ENDIAN_LITTLE, 2 },
	[AUDIO_RAW_F32] = { "raw-f32", SF_FORMAT_RAW | SF_FORMAT_FLOAT | SF_ENDIAN_LITTLE, 4 },
};
#define N_FORMATS ((int)(sizeof formats / sizeof formats[0]))

struct audio_out {
	audio_format fmt;
	int rate;
	pcg_out out;      /* the temporary file, or what is written through */
	SNDFILE *sf;
	size_t frames;
};

int audio_format_parse(const char *name, audio_format *f)
{
	for (int i = 0; i < N_FORMATS; i++)
		if (!strcmp(name, formats[i].name)) {
			*f = (audio_format)i;
			return 0;
		}
	return -1;
}

int audio_format_from_path(const char *path, audio_format *f)
{
	const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');

	if (!strcmp(path, "-")) {
		*f = AUDIO_RAW;
		return 0;
	}
	if (dot == NULL || (slash && dot < slash))
		return -1;
	if (!strcasecmp(dot, ".wav"))
		*f = AUDIO_WAV;
	else if (!strcasecmp(dot, ".flac"))
		*f = AUDIO_FLAC;
	else if (!strcasecmp(dot, ".raw") || !strcasecmp(dot, ".pcm"))
		*f = AUDIO_RAW;
	else
		return -1;
	return 0;
}

const char *audio_format_name(audio_format f)
{
	return (int)f >= 0 && (int)f < N_FORMATS ? formats[f].name : "?";
}

static int is_raw(audio_format f)
{
	return f == AUDIO_RAW || f == AUDIO_RAW_F32;
}

static void le32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16), p[3] = (unsigned char)(v >> 24);
}

/* A 44-byte WAV header, mono, 16-bit PCM or 32-bit float, sizes unknown. */
static int write_wav_header(int fd, const char *name, int rate, int f32, pcg_err *err)
{
	unsigned char h[44];
	const int bytes = f32 ? 4 : 2;

	memcpy(h, "RIFF", 4);
	le32(h + 4, 0xffffffffu);
	memcpy(h + 8, "WAVEfmt ", 8);
	le32(h + 16, 16);
	h[20] = f32 ? 3 : 1, h[21] = 0;      /* IEEE float or PCM */
	h[22] = 1, h[23] = 0;                /* mono */
	le32(h + 24, (uint32_t)rate);
	le32(h + 28, (uint32_t)rate * bytes);
	h[32] = (unsigned char)bytes, h[33] = 0, h[34] = (unsigned char)(8 * bytes), h[35] = 0;
	memcpy(h + 36, "data", 4);
	le32(h + 40, 0xffffffffu);
	for (size_t done = 0; done < sizeof h;) {
		ssize_t w = write(fd, h + done, sizeof h - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return pcg_fail(err, "%s: write: %s", name, w ? strerror(errno) : "nothing written");
		done += (size_t)w;
	}
	return 0;
}

audio_out *audio_open(const char *path, int rate, audio_format f, pcg_err *err)
{
	audio_out *a = calloc(1, sizeof *a);
	SF_INFO info = { 0 };

	if (a == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	a->fmt = f;
	a->rate = rate;
	a->out.fd = -1;
	if ((int)f < 0 || (int)f >= N_FORMATS || rate < 1) {
		pcg_fail(err, "%s: bad format or rate", path);
		goto fail;
	}
	if (pcg_out_open(&a->out, path, 0666, err) < 0)
		goto fail;
	/* Written through to a file (standard output redirected, a device):
	 * libsndfile writes there as to any file. A pipe: WAV gets a header
	 * whose sizes say "unknown" (the largest, as streaming writers do;
	 * libsndfile cannot write WAV to a pipe), then the samples as raw;
	 * FLAC cannot be finished there. */
	const int pipe = a->out.through && lseek(a->out.fd, 0, SEEK_CUR) < 0;
	if (pipe && f == AUDIO_FLAC) {
		pcg_fail(err, "%s: FLAC needs a file it can seek in, not a pipe; "
			 "use WAV, which streams, or name a file", a->out.name);
		goto fail;
	}
	const int wav_out = pipe && (f == AUDIO_WAV || f == AUDIO_WAV_F32);
	if (wav_out && write_wav_header(a->out.fd, a->out.name, rate, f == AUDIO_WAV_F32, err) < 0)
		goto fail;
	if (wav_out)
		f = a->fmt = f == AUDIO_WAV ? AUDIO_RAW : AUDIO_RAW_F32;
	info.samplerate = rate;
	info.channels = 1;
	info.format = formats[f].sf_format;
	a->sf = sf_open_fd(a->out.fd, SFM_WRITE, &info, SF_FALSE);
	if (a->sf == NULL) {
		pcg_fail(err, "%s: %s", a->out.name, sf_strerror(NULL));
		goto fail;
	}
	/* libsndfile wraps around on float -> int overflow unless told to clip. */
	if ((formats[f].sf_format & SF_FORMAT_SUBMASK) != SF_FORMAT_FLOAT)
		sf_command(a->sf, SFC_SET_CLIPPING, NULL, SF_TRUE);
	return a;
fail:
	audio_abort(&a);
	return NULL;
}

/* libsndfile's words for a failed write, with the system's reason when it
 * has one (a device that is full). */
static int write_failed(audio_out *a, int sys, pcg_err *err)
{
	if (sys != 0 && (!sf_error(a->sf) || sf_error(a->sf) == SF_ERR_SYSTEM))
		return pcg_fail(err, "%s: write: %s", a->out.name, strerror(sys));
	return pcg_fail(err, "%s: %s", a->out.name,
			sf_error(a->sf) ? sf_strerror(a->sf) : "write failed");
}

int audio_append(audio_out *a, const float *x, size_t n, pcg_err *err)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return pcg_fail(err, "%s: sample %zu is not finite", a->out.name,
					a->frames + i);
	/* sf_writef_float takes sf_count_t; write in pieces of at most 1 M. */
	for (size_t done = 0; done < n;) {
		sf_count_t k = n - done < (1u << 20) ? (sf_count_t)(n - done) : (1 << 20);
		errno = 0;
		if (sf_writef_float(a->sf, x + done, k) != k)
			return write_failed(a, errno, err);
		done += (size_t)k;
		a->frames += (size_t)k;
	}
	return 0;
}

int audio_append_s16(audio_out *a, const int16_t *x, size_t n, pcg_err *err)
{
	for (size_t done = 0; done < n;) {
		sf_count_t k = n - done < (1u << 20) ? (sf_count_t)(n - done) : (1 << 20);
		errno = 0;
		if (sf_writef_short(a->sf, x + done, k) != k)
			return write_failed(a, errno, err);
		done += (size_t)k;
		a->frames += (size_t)k;
	}
	return 0;
}

void audio_to_s16(const float *x, int16_t *y, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		double t = (double)x[i] * 2147483648.0;
		int32_t v = t >= 2147483647.0 ? INT32_MAX : t <= -2147483648.0 ? INT32_MIN
			  : t == t ? (int32_t)lrint(t) : 0;
		y[i] = (int16_t)(v >> 16);
	}
}

/* The file at a->out.tmp holds what was written: the header's frame count,
 * rate, channels and format, or for raw the size. */
static int verify(const audio_out *a, pcg_err *err)
{
	if (is_raw(a->fmt)) {
		struct stat st;
		if (fstat(a->out.fd, &st) != 0)
			return pcg_fail(err, "%s: %s", a->out.tmp, strerror(errno));
		if ((size_t)st.st_size != a->frames * formats[a->fmt].bytes)
			return pcg_fail(err, "%s: %lld bytes written, want %zu", a->out.name,
					(long long)st.st_size, a->frames * formats[a->fmt].bytes);
		return 0;
	}
	SF_INFO info = { 0 };
	SNDFILE *sf = sf_open(a->out.tmp, SFM_READ, &info);
	if (sf == NULL)
		return pcg_fail(err, "%s: written file does not read back: %s", a->out.name,
				sf_strerror(NULL));
	/* The header alone is not enough: libFLAC writes the frame count into
	 * the header at the end even when the data before it was lost (seen
	 * with a file-size limit), so every frame is decoded and counted. */
	float buf[4096];
	sf_count_t got, total = 0;
	while ((got = sf_readf_float(sf, buf, 4096)) > 0)
		total += got;
	int read_err = sf_error(sf);
	sf_close(sf);
	if (info.frames != (sf_count_t)a->frames || total != info.frames || read_err ||
	    info.samplerate != a->rate || info.channels != 1 ||
	    info.format != formats[a->fmt].sf_format)
		return pcg_fail(err, "%s: written file reads back as %lld of %lld frames at %d Hz, "
				"want %zu at %d Hz", a->out.name, (long long)total,
				(long long)info.frames, info.samplerate, a->frames, a->rate);
	return 0;
}

int audio_commit(audio_out **ap, pcg_err *err)
{
	audio_out *a = *ap;
	int rc;

	errno = 0;
	rc = sf_close(a->sf);
	a->sf = NULL;
	if (rc != 0) {
		if (rc == SF_ERR_SYSTEM && errno != 0)
			pcg_fail(err, "%s: write: %s", a->out.name, strerror(errno));
		else
			pcg_fail(err, "%s: %s", a->out.name, sf_error_number(rc));
		goto fail;
	}
	/* a file about to replace another is read back first */
	if (!a->out.through && verify(a, err) < 0)
		goto fail;
	rc = pcg_out_commit(&a->out, err);
	free(a);
	*ap = NULL;
	return rc;
fail:
	audio_abort(ap);
	return -1;
}

void audio_abort(audio_out **ap)
{
	audio_out *a = ap ? *ap : NULL;

	if (a == NULL)
		return;
	if (a->sf)
		sf_close(a->sf);
	pcg_out_abort(&a->out);
	free(a);
	*ap = NULL;
}

int audio_write(const char *path, const float *x, size_t n, int rate, audio_format f,
		pcg_err *err)
{
	audio_out *a = audio_open(path, rate, f, err);

	if (a == NULL)
		return -1;
	if (audio_append(a, x, n, err) < 0) {
		audio_abort(&a);
		return -1;
	}
	return audio_commit(&a, err);
}
