/* test_audio.c: the atomic audio writer. Every format reads back through
 * libsndfile with the rate, channel count, frame count and samples written;
 * a failure anywhere (bad directory, a file-size limit standing in for a
 * full disk, a non-finite sample) leaves nothing at the final path and no
 * temporary file, and an existing file there stays as it was.
 */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "audio.h"
#include "check.h"

static char dir[512];

/* Files in dir whose name ends in .partial. */
static int partials(void)
{
	return check_partials(dir);
}

static void formats(const float *x, size_t n)
{
	static const struct {
		const char *ext;
		audio_format f;
		int sf_format;
		double tol; /* read-back error: half a 16-bit step, or exact */
	} cases[] = {
		{ "wav", AUDIO_WAV, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 1.0 / 32768 },
		{ "f.wav", AUDIO_WAV_F32, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 0 },
		{ "flac", AUDIO_FLAC, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 1.0 / 32768 },
	};
	pcg_err err = { "" };
	char path[600];
	float *back = malloc(n * sizeof *back);

	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		snprintf(path, sizeof path, "%s/out.%s", dir, cases[i].ext);
		CHECKF(audio_write(path, x, n, 16000, cases[i].f, &err) == 0, "%s", err.msg);
		SF_INFO info = { 0 };
		SNDFILE *sf = sf_open(path, SFM_READ, &info);
		CHECKF(sf != NULL, "%s: %s", path, sf_strerror(NULL));
		if (sf == NULL)
			continue;
		CHECK(info.samplerate == 16000 && info.channels == 1);
		CHECK(info.frames == (sf_count_t)n && info.format == cases[i].sf_format);
		CHECK(sf_readf_float(sf, back, (sf_count_t)n) == (sf_count_t)n);
		sf_close(sf);
		double worst = 0;
		for (size_t k = 0; k < n; k++) {
			/* 16-bit formats clip to [-1, 1] */
			double want = cases[i].tol ? fmax(-1.0, fmin(1.0, x[k])) : x[k];
			worst = fmax(worst, fabs(back[k] - want));
		}
		CHECKF(worst <= cases[i].tol * 1.01 + 1e-9, "%s: read-back error %g", path, worst);
	}
	/* raw: exactly the bytes */
	snprintf(path, sizeof path, "%s/out.raw", dir);
	CHECK(audio_write(path, x, n, 16000, AUDIO_RAW_F32, &err) == 0);
	FILE *f = fopen(path, "rb");
	CHECK(f && fread(back, sizeof *back, n, f) == n && fgetc(f) == EOF);
	CHECK(memcmp(back, x, n * sizeof *x) == 0);
	if (f)
		fclose(f);
	CHECK(audio_write(path, x, n, 16000, AUDIO_RAW, &err) == 0);
	struct stat st;
	CHECK(stat(path, &st) == 0 && (size_t)st.st_size == 2 * n);
	CHECK(partials() == 0);
	free(back);
}

static void failures(const float *x, size_t n)
{
	pcg_err err = { "" };
	char path[600];
	audio_format f;

	/* a directory that does not exist */
	snprintf(path, sizeof path, "%s/no/such/out.wav", dir);
	CHECK(audio_write(path, x, n, 16000, AUDIO_WAV, &err) == -1);
	CHECKF(strstr(err.msg, "no/such/out.wav") != NULL, "%s", err.msg);
	/* a path that is a directory */
	CHECK(audio_write(dir, x, n, 16000, AUDIO_WAV, &err) == -1);
	/* a non-finite sample: error naming it, old file kept */
	snprintf(path, sizeof path, "%s/keep.wav", dir);
	CHECK(audio_write(path, x, 100, 16000, AUDIO_WAV, &err) == 0);
	float *bad = malloc(n * sizeof *bad);
	memcpy(bad, x, n * sizeof *bad);
	bad[n / 2] = NAN;
	CHECK(audio_write(path, bad, n, 16000, AUDIO_WAV, &err) == -1);
	CHECKF(strstr(err.msg, "not finite") != NULL, "%s", err.msg);
	SF_INFO info = { 0 };
	SNDFILE *sf = sf_open(path, SFM_READ, &info);
	CHECK(sf != NULL && info.frames == 100);
	if (sf)
		sf_close(sf);
	free(bad);
	/* standard output: FLAC needs a file to seek in (tests/kmeans.sh tries
	 * WAV and FLAC on pipes and files) */
	{
		int fds[2], saved = dup(1);
		CHECK(pipe(fds) == 0 && dup2(fds[1], 1) == 1);
		CHECK(audio_open("-", 16000, AUDIO_FLAC, &err) == NULL &&
		      strstr(err.msg, "FLAC needs a file") != NULL);
		dup2(saved, 1);
		close(saved);
		close(fds[0]);
		close(fds[1]);
	}
	CHECK(audio_format_from_path("a/b.FLAC", &f) == 0 && f == AUDIO_FLAC);
	CHECK(audio_format_from_path("a.b/c", &f) == -1);
	CHECK(audio_format_from_path("-", &f) == 0 && f == AUDIO_RAW);
	CHECK(audio_format_parse("wav-f32", &f) == 0 && f == AUDIO_WAV_F32);
	CHECK(audio_format_parse("mp3", &f) == -1);
	CHECK(partials() == 0);

	/* A full disk, played by RLIMIT_FSIZE in a child: writes past 8 kB
	 * fail with EFBIG (the FLAC of this signal is 16.5 kB). Nothing may be
	 * left behind; the old file stays. */
	for (int k = 0; k < 3; k++) {
		const audio_format fk = k == 0 ? AUDIO_WAV : k == 1 ? AUDIO_FLAC : AUDIO_RAW_F32;
		pid_t pid = fork();
		if (pid == 0) {
			struct rlimit rl = { 8000, 8000 };
			pcg_err e2 = { "" };
			signal(SIGXFSZ, SIG_IGN);
			setrlimit(RLIMIT_FSIZE, &rl);
			int rc = audio_write(path, x, n, 16000, fk, &e2);
			if (rc == 0)
				_exit(3);
			fprintf(stderr, "disk full (%s): %s\n", audio_format_name(fk), e2.msg);
			_exit(strstr(e2.msg, "keep.wav") ? 0 : 4);
		}
		int status = -1;
		waitpid(pid, &status, 0);
		CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		       "%s under a file-size limit: status %d", audio_format_name(fk), status);
		CHECK(partials() == 0);
		info.frames = 0;
		sf = sf_open(path, SFM_READ, &info);
		CHECK(sf != NULL && info.frames == 100);
		if (sf)
			sf_close(sf);
	}
}

/* audio_to_s16 gives the bytes libsndfile writes for the same floats in a
 * 16-bit file (random values over and beyond full scale, halves of a step,
 * the extremes), and audio_append_s16 stores them as given. */
static void s16(void)
{
	const size_t n = 200000;
	float *x = malloc(n * sizeof *x);
	int16_t *y = malloc(n * sizeof *y), *z = malloc(n * sizeof *z);
	char path[600];
	pcg_err err = { "" };
	uint64_t r = 12345;

	for (size_t i = 0; i < n; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		double u = (double)(r >> 11) / 9007199254740992.0;
		x[i] = i % 3 ? (float)(3 * u - 1.5)
			     : (float)((double)((int)(u * 70000) - 35000) + (i % 2) * 0.5) / 32768.0f;
	}
	x[0] = 1.0f, x[1] = -1.0f, x[2] = 0.5f / 32768, x[3] = -0.5f / 32768, x[4] = 0.0f;
	snprintf(path, sizeof path, "%s/s16.raw", dir);
	CHECKF(audio_write(path, x, n, 16000, AUDIO_RAW, &err) == 0, "%s", err.msg);
	FILE *f = fopen(path, "rb");
	CHECK(f && fread(z, 2, n, f) == n);
	if (f)
		fclose(f);
	audio_to_s16(x, y, n);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += y[i] != z[i];
	CHECKF(bad == 0, "%zu of %zu samples differ from libsndfile's", bad, n);
	audio_out *a = audio_open(path, 16000, AUDIO_RAW, &err);
	CHECK(a && audio_append_s16(a, y, n, &err) == 0 && audio_commit(&a, &err) == 0);
	f = fopen(path, "rb");
	memset(z, 0, n * sizeof *z);
	CHECK(f && fread(z, 2, n, f) == n && !memcmp(y, z, n * sizeof *z));
	if (f)
		fclose(f);
	free(x);
	free(y);
	free(z);
}

int main(void)
{
	const size_t n = 16000 * 2;
	float *x = malloc(n * sizeof *x);

	snprintf(dir, sizeof dir, "%s/audio", check_tmpdir());
	mkdir(dir, 0755);
	/* a chirp with a few samples beyond full scale (clipped in 16-bit) */
	for (size_t i = 0; i < n; i++)
		x[i] = 0.8f * sinf(0.01f * i + 1e-6f * i * i) * (i % 5000 == 0 ? 2.0f : 1.0f);
	formats(x, n);
	failures(x, n);
	s16();
	free(x);
	return check_done("test_audio");
}
