/* audio.c: atomic audio files through libsndfile (see audio.h). */
#include "audio.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
	int fd;
	int to_stdout;
	int created;      /* tmp exists and is ours to remove */
	SNDFILE *sf;
	char *path, *tmp; /* final and temporary names (NULL for stdout) */
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

static void free_out(audio_out *a)
{
	free(a->path);
	free(a->tmp);
	free(a);
}

/* A new file dir/.base.XXXXXX.partial, created with O_EXCL and mode 0666
 * (less the umask, as any new file). */
static int make_temp(audio_out *a, pcg_err *err)
{
	const char *slash = strrchr(a->path, '/');
	const int dlen = slash ? (int)(slash - a->path) + 1 : 0;
	const char *base = slash ? slash + 1 : a->path;
	static const char digits[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	struct timespec ts;

	if (*base == '\0')
		return pcg_fail(err, "%s: not a file name", a->path);
	a->tmp = malloc(strlen(a->path) + 32);
	if (a->tmp == NULL)
		return pcg_fail(err, "out of memory");
	clock_gettime(CLOCK_REALTIME, &ts);
	unsigned long long r = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)getpid() << 20);
	for (int tries = 0; tries < 100; tries++) {
		char suf[7];
		for (int i = 0; i < 6; i++) {
			r = r * 6364136223846793005ULL + 1442695040888963407ULL;
			suf[i] = digits[(r >> 33) % 36];
		}
		suf[6] = '\0';
		sprintf(a->tmp, "%.*s.%s.%s.partial", dlen, a->path, base, suf);
		a->fd = open(a->tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
		if (a->fd >= 0) {
			a->created = 1;
			return 0;
		}
		if (errno != EEXIST)
			return pcg_fail(err, "%s: %s", a->path, strerror(errno));
	}
	return pcg_fail(err, "%s: no free temporary name", a->path);
}

static void le32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16), p[3] = (unsigned char)(v >> 24);
}

/* A 44-byte WAV header, mono, 16-bit PCM or 32-bit float, sizes unknown. */
static int write_wav_header(int fd, int rate, int f32, pcg_err *err)
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
			return pcg_fail(err, "standard output: %s", strerror(errno));
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
	a->fd = -1;
	if ((int)f < 0 || (int)f >= N_FORMATS || rate < 1) {
		pcg_fail(err, "%s: bad format or rate", path);
		goto fail;
	}
	a->to_stdout = !strcmp(path, "-");
	/* Standard output that is a file: libsndfile writes there as to any
	 * file. A pipe: WAV gets a header whose sizes say "unknown" (the
	 * largest, as streaming writers do; libsndfile cannot write WAV to a
	 * pipe), then the samples as raw; FLAC cannot be finished there. */
	if (a->to_stdout && f == AUDIO_FLAC && lseek(STDOUT_FILENO, 0, SEEK_CUR) < 0) {
		pcg_fail(err, "standard output: FLAC needs a file it can seek in, not a pipe; "
			 "use WAV, which streams, or name a file");
		goto fail;
	}
	const int wav_out = a->to_stdout && (f == AUDIO_WAV || f == AUDIO_WAV_F32) &&
			    lseek(STDOUT_FILENO, 0, SEEK_CUR) < 0;
	if (wav_out && write_wav_header(STDOUT_FILENO, rate, f == AUDIO_WAV_F32, err) < 0)
		goto fail;
	if (wav_out)
		f = a->fmt = f == AUDIO_WAV ? AUDIO_RAW : AUDIO_RAW_F32;
	a->path = strdup(path);
	if (a->path == NULL) {
		pcg_fail(err, "out of memory");
		goto fail;
	}
	if (a->to_stdout)
		a->fd = STDOUT_FILENO;
	else if (make_temp(a, err) < 0)
		goto fail;
	info.samplerate = rate;
	info.channels = 1;
	info.format = formats[f].sf_format;
	a->sf = sf_open_fd(a->fd, SFM_WRITE, &info, SF_FALSE);
	if (a->sf == NULL) {
		pcg_fail(err, "%s: %s", path, sf_strerror(NULL));
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

int audio_append(audio_out *a, const float *x, size_t n, pcg_err *err)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return pcg_fail(err, "%s: sample %zu is not finite", a->path,
					a->frames + i);
	/* sf_writef_float takes sf_count_t; write in pieces of at most 1 M. */
	for (size_t done = 0; done < n;) {
		sf_count_t k = n - done < (1u << 20) ? (sf_count_t)(n - done) : (1 << 20);
		if (sf_writef_float(a->sf, x + done, k) != k)
			return pcg_fail(err, "%s: %s", a->to_stdout ? "standard output" : a->path,
					sf_error(a->sf) ? sf_strerror(a->sf) : "write failed");
		done += (size_t)k;
		a->frames += (size_t)k;
	}
	return 0;
}

int audio_append_s16(audio_out *a, const int16_t *x, size_t n, pcg_err *err)
{
	for (size_t done = 0; done < n;) {
		sf_count_t k = n - done < (1u << 20) ? (sf_count_t)(n - done) : (1 << 20);
		if (sf_writef_short(a->sf, x + done, k) != k)
			return pcg_fail(err, "%s: %s", a->to_stdout ? "standard output" : a->path,
					sf_error(a->sf) ? sf_strerror(a->sf) : "write failed");
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

/* The file at a->tmp holds what was written: the header's frame count,
 * rate, channels and format, or for raw the size. */
static int verify(const audio_out *a, pcg_err *err)
{
	if (is_raw(a->fmt)) {
		struct stat st;
		if (stat(a->tmp, &st) != 0)
			return pcg_fail(err, "%s: %s", a->tmp, strerror(errno));
		if ((size_t)st.st_size != a->frames * formats[a->fmt].bytes)
			return pcg_fail(err, "%s: %lld bytes written, want %zu", a->path,
					(long long)st.st_size, a->frames * formats[a->fmt].bytes);
		return 0;
	}
	SF_INFO info = { 0 };
	SNDFILE *sf = sf_open(a->tmp, SFM_READ, &info);
	if (sf == NULL)
		return pcg_fail(err, "%s: written file does not read back: %s", a->path,
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
				"want %zu at %d Hz", a->path, (long long)total,
				(long long)info.frames, info.samplerate, a->frames, a->rate);
	return 0;
}

int audio_commit(audio_out **ap, pcg_err *err)
{
	audio_out *a = *ap;
	int rc;

	rc = sf_close(a->sf);
	a->sf = NULL;
	if (rc != 0) {
		pcg_fail(err, "%s: %s", a->path, sf_error_number(rc));
		goto fail;
	}
	if (a->to_stdout) {
		free_out(a);
		*ap = NULL;
		return 0;
	}
	if (fsync(a->fd) != 0) {
		pcg_fail(err, "%s: %s", a->path, strerror(errno));
		goto fail;
	}
	rc = close(a->fd);
	a->fd = -1;
	if (rc != 0) {
		pcg_fail(err, "%s: %s", a->path, strerror(errno));
		goto fail;
	}
	if (verify(a, err) < 0)
		goto fail;
	if (rename(a->tmp, a->path) != 0) {
		pcg_fail(err, "%s: %s", a->path, strerror(errno));
		goto fail;
	}
	a->created = 0;
	/* The rename is durable once the directory is on disk too. This is
	 * best effort: the complete file is in place already, and some file
	 * systems refuse fsync on a directory. */
	{
		const char *slash = strrchr(a->path, '/');
		char *dir = slash ? strndup(a->path, (size_t)(slash - a->path) + 1) : strdup(".");
		int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
		if (dfd >= 0) {
			(void)fsync(dfd);
			close(dfd);
		}
		free(dir);
	}
	free_out(a);
	*ap = NULL;
	return 0;
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
	if (!a->to_stdout && a->fd >= 0)
		close(a->fd);
	if (a->created)
		unlink(a->tmp);
	free_out(a);
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
