/* test_mcd: lib/codec/mcd.h against the float64 librosa reference of
 * tests/ref/make_mcd_fixtures.py (MCD-DTW of espeak-ng speech and of
 * synthetic stereo sound at 22,050 Hz, and cepstra of a few frames), plus
 * what holds without a reference: MCD(x, x) = 0, symmetry, hand-made DTW
 * cases with their paths, the mixdown, and the errors on bad files.
 */
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mcd.h"

#define FX "tests/fixtures/speech"

/* The C front end runs the FFT in single precision, the reference in
 * double. FFTW's float error is about 1e-7 of a frame's energy, so a band
 * 60 dB under the frame's loudest moves by about 1e-1 relative, 0.1 in its
 * log; through the orthonormal DCT that is at most 0.1 * sqrt(2 / 40) = 0.02
 * on one cepstrum, and such bands are few. Measured: 5e-6 at worst. */
#define CEP_TOL 2e-3
/* MCD averages hundreds of frame distances: measured 5e-6 dB apart; the
 * bound leaves room for another FFTW or libm, and is still 1e-4 of a
 * typical value, far under any difference we would act on. */
#define MCD_TOL 5e-3

static int has(const char *msg, const char *what)
{
	if (strstr(msg, what))
		return 1;
	fprintf(stderr, "message '%s' lacks '%s'\n", msg, what);
	return 0;
}

static void check_reference(void)
{
	FILE *f = fopen(FX "/mcd.tsv", "r");
	char line[512], a[64], b[64];
	double want;
	size_t fa, fb, lp;
	int rows = 0;
	mcd_config c;

	if (f == NULL)
		SKIP("no " FX "/mcd.tsv (tests/ref/make_mcd_fixtures.py)");
	mcd_config_default(&c);
	if (fgets(line, sizeof line, f) == NULL) /* header */
		line[0] = 0;
	while (fgets(line, sizeof line, f)) {
		char pa[128], pb[128];
		mcd_result r;
		pcg_err err = { "" };

		if (sscanf(line, "%63s %63s %lf %zu %zu %zu", a, b, &want, &fa, &fb, &lp) != 6)
			continue;
		rows++;
		snprintf(pa, sizeof pa, FX "/%s", a);
		snprintf(pb, sizeof pb, FX "/%s", b);
		CHECKF(mcd_files(pa, pb, &c, &r, &err) == 0, "%s", err.msg);
		CHECKF(fabs(r.mcd_db - want) < MCD_TOL, "%s %s: %.9f dB, librosa %.9f", a, b,
		       r.mcd_db, want);
		CHECKF(r.frames_a == fa && r.frames_b == fb, "%s %s: frames %zu %zu, librosa %zu %zu",
		       a, b, r.frames_a, r.frames_b, fa, fb);
		CHECKF(r.path_len == lp, "%s %s: path %zu, librosa %zu", a, b, r.path_len, lp);
		printf("%s %s: %.6f dB (librosa %.6f), path %zu\n", a, b, r.mcd_db, want, r.path_len);
	}
	fclose(f);
	CHECKF(rows >= 5, "%d rows in mcd.tsv", rows);
}

static void check_cepstra(void)
{
	FILE *f = fopen(FX "/cepstra.tsv", "r");
	char line[4096], name[64], last[64] = "";
	double *cep = NULL, worst = 0;
	size_t frames = 0;
	int rows = 0;
	mcd_config c;

	CHECK(f != NULL);
	if (f == NULL)
		return;
	mcd_config_default(&c);
	if (fgets(line, sizeof line, f) == NULL)
		line[0] = 0;
	while (fgets(line, sizeof line, f)) {
		char *p = line, *end;
		int t, used;
		pcg_err err = { "" };

		if (sscanf(p, "%63s %d%n", name, &t, &used) != 2)
			continue;
		p += used;
		if (strcmp(name, last) != 0) {
			char path[128];
			size_t n;
			int rate, ch;
			float *x;

			free(cep);
			cep = NULL;
			snprintf(path, sizeof path, FX "/%s", name);
			x = mcd_read(path, &n, &rate, &ch, &err);
			CHECKF(x != NULL, "%s", err.msg);
			if (x == NULL)
				break;
			CHECKF(mcd_cepstra(x, n, rate, &c, &cep, &frames, &err) == 0, "%s", err.msg);
			free(x);
			if (cep == NULL)
				break;
			snprintf(last, sizeof last, "%s", name);
		}
		CHECKF(t >= 0 && (size_t)t < frames, "%s frame %d of %zu", name, t, frames);
		if (t < 0 || (size_t)t >= frames)
			continue;
		for (int d = 0; d < c.n_ceps; d++) {
			double want = strtod(p, &end), e;
			CHECK(end != p);
			p = end;
			e = fabs(cep[(size_t)t * c.n_ceps + d] - want);
			if (e > worst)
				worst = e;
			CHECKF(e < CEP_TOL, "%s frame %d c%d: %.9g, librosa %.9g", name, t, d + 1,
			       cep[(size_t)t * c.n_ceps + d], want);
		}
		rows++;
	}
	fclose(f);
	free(cep);
	CHECKF(rows >= 20, "%d rows in cepstra.tsv", rows);
	printf("cepstra: %d frames, worst difference %.3g\n", rows, worst);
}

/* DTW on hand-made sequences of one dimension, where the path is known. */
static void check_dtw(void)
{
	const double K = 10 / log(10.0) * sqrt(2.0);
	double mcd;
	size_t len;
	pcg_err err = { "" };

	/* b repeats a's first frame: (0,0) (0,1) (1,2) (2,3), cost 0. */
	double a1[] = { 0, 1, 2 }, b1[] = { 0, 0, 1, 2 };
	CHECK(mcd_dtw(a1, 3, b1, 4, 1, &mcd, &len, &err) == 0);
	CHECK(mcd == 0 && len == 4);
	/* Two frames against one: (0,0) (1,0), distances 1 and 2. */
	double a2[] = { 0, 3 }, b2[] = { 1 };
	CHECK(mcd_dtw(a2, 2, b2, 1, 1, &mcd, &len, &err) == 0);
	CHECKF(fabs(mcd - K * 1.5) < 1e-12 && len == 2, "%g, path %zu", mcd, len);
	/* All ties: the diagonal wins, path of 2, not 3. */
	double a3[] = { 5, 5 };
	CHECK(mcd_dtw(a3, 2, a3, 2, 1, &mcd, &len, &err) == 0);
	CHECK(mcd == 0 && len == 2);
	/* Two dimensions: distance sqrt(3^2 + 4^2) = 5 on the one pair. */
	double a4[] = { 0, 0 }, b4[] = { 3, 4 };
	CHECK(mcd_dtw(a4, 1, b4, 1, 2, &mcd, &len, &err) == 0);
	CHECK(fabs(mcd - 5 * K) < 1e-12 && len == 1);
	CHECK(mcd_dtw(a4, 0, b4, 1, 2, &mcd, &len, &err) == -1);
}

/* Writes n frames of ch channels of x to path as float WAV at rate (float:
 * 16-bit would scale by 32767 where reading divides by 32768). */
static int write_wav(const char *path, const float *x, sf_count_t n, int ch, int rate)
{
	SF_INFO info = { .samplerate = rate, .channels = ch,
			 .format = SF_FORMAT_WAV | SF_FORMAT_FLOAT };
	SNDFILE *sf = sf_open(path, SFM_WRITE, &info);
	int ok;

	if (sf == NULL)
		return -1;
	ok = sf_writef_float(sf, x, n) == n;
	return sf_close(sf) == 0 && ok ? 0 : -1;
}

static void check_identity_and_files(void)
{
	char stereo[512], text[512], empty[512];
	mcd_config c;
	mcd_result r, s;
	pcg_err err = { "" };
	float *x, *xx;
	size_t n;
	int rate, ch;
	FILE *f;

	mcd_config_default(&c);
	/* MCD(x, x) is exactly 0 on a path of one pair per frame. */
	CHECKF(mcd_files(FX "/b.wav", FX "/b.wav", &c, &r, &err) == 0, "%s", err.msg);
	CHECK(r.mcd_db == 0 && r.path_len == r.frames_a && r.frames_a == r.frames_b);
	/* Symmetry: the same cost and path length both ways. */
	CHECK(mcd_files(FX "/a.wav", FX "/b.wav", &c, &r, &err) == 0);
	CHECK(mcd_files(FX "/b.wav", FX "/a.wav", &c, &s, &err) == 0);
	CHECKF(fabs(r.mcd_db - s.mcd_db) < 1e-9 && r.path_len == s.path_len, "%.12f %.12f",
	       r.mcd_db, s.mcd_db);
	CHECK(r.mcd_db > 10); /* two voices are far apart */

	/* A stereo file with a.wav in both channels mixes down to a.wav. */
	x = mcd_read(FX "/a.wav", &n, &rate, &ch, &err);
	CHECK(x != NULL && rate == 16000 && ch == 1 && n > 1000);
	if (x == NULL)
		return;
	xx = malloc(2 * n * sizeof *xx);
	for (size_t i = 0; i < n; i++)
		xx[2 * i] = xx[2 * i + 1] = x[i];
	snprintf(stereo, sizeof stereo, "%s/mcd-stereo.wav", check_tmpdir());
	CHECK(write_wav(stereo, xx, (sf_count_t)n, 2, 16000) == 0);
	CHECKF(mcd_files(FX "/a.wav", stereo, &c, &r, &err) == 0, "%s", err.msg);
	CHECK(r.mcd_db == 0 && r.channels_b == 2);
	free(xx);
	free(x);

	/* Errors name the file. */
	CHECK(mcd_files(FX "/a.wav", FX "/missing.wav", &c, &r, &err) == -1);
	CHECK(has(err.msg, "missing.wav") && has(err.msg, "No such file"));
	snprintf(text, sizeof text, "%s/mcd-text.wav", check_tmpdir());
	if ((f = fopen(text, "w")) != NULL) {
		fputs("not audio at all\n", f);
		fclose(f);
	}
	CHECK(mcd_files(text, FX "/a.wav", &c, &r, &err) == -1);
	CHECK(has(err.msg, "mcd-text.wav") && has(err.msg, "not an audio file"));
	snprintf(empty, sizeof empty, "%s/mcd-empty.wav", check_tmpdir());
	CHECK(write_wav(empty, NULL, 0, 1, 16000) == 0);
	CHECK(mcd_files(FX "/a.wav", empty, &c, &r, &err) == -1);
	CHECK(has(err.msg, "mcd-empty.wav") && has(err.msg, "no samples"));
	/* Different rates: both files and both rates named. */
	CHECK(mcd_files(FX "/a.wav", FX "/d.wav", &c, &r, &err) == -1);
	CHECK(has(err.msg, "a.wav is 16000 Hz") && has(err.msg, "d.wav is 22050 Hz"));

	/* The configuration is checked. */
	c.n_ceps = c.n_mels;
	CHECK(mcd_config_check(&c, 16000, &err) == -1 && has(err.msg, "cepstra"));
	mcd_config_default(&c);
	c.hop_ms = 0.01;
	CHECK(mcd_config_check(&c, 16000, &err) == -1 && has(err.msg, "hop"));
	mcd_config_default(&c);
	CHECK(mcd_config_check(&c, 16000, &err) == 0);
}

int main(void)
{
	check_reference();
	check_cepstra();
	check_dtw();
	check_identity_and_files();
	return check_done("test_mcd");
}
