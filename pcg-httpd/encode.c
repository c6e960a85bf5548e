/* encode.c: stretch, resample and encode one response's audio as it comes
 * (see encode.h). */
#include "encode.h"

#include <pthread.h>
#include <rubberband/rubberband-c.h>
#include <samplerate.h>
#include <sndfile.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"

#define RB_BLOCK 4096 /* samples per rubberband_process call */

static const struct {
	const char *name, *type;
	int sf_format; /* 0: written here, -1: not at all */
} formats[ENC_N_FORMATS] = {
	[ENC_MP3] = { "mp3", "audio/mpeg", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III },
	[ENC_OPUS] = { "opus", "audio/opus", SF_FORMAT_OGG | SF_FORMAT_OPUS },
	[ENC_AAC] = { "aac", "audio/aac", -1 },
	[ENC_FLAC] = { "flac", "audio/flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16 },
	[ENC_WAV] = { "wav", "audio/wav", 0 },
	[ENC_PCM] = { "pcm", "audio/pcm", 0 },
};

struct enc {
	enc_format f;
	double speed;
	int resampler;         /* libsamplerate's converter */
	int in_rate;
	RubberBandState rb;
	size_t rb_drop;        /* output samples of the stretcher still to drop (its delay) */
	SRC_STATE *src;
	SNDFILE *sf;
	SF_VIRTUAL_IO vio;
	/* the output: file bytes [base, base + len) are buf[0..len); buf[0..head)
	 * were taken, so writes below base + head are dropped */
	unsigned char *buf;
	size_t len, cap, head;
	sf_count_t base, pos, size;
	int oom;
	float *fx, *fa, *fb;   /* the input as floats, the stretcher's and the resampler's output */
	size_t fx_cap, fa_cap, fb_cap;
	int16_t *s16;
	size_t s16_cap;
	size_t samples;
	int whole;             /* the bytes are taken after enc_finish: true WAV sizes */
	int finished;
};

int enc_format_parse(const char *name, enc_format *f)
{
	for (int i = 0; i < ENC_N_FORMATS; i++)
		if (!strcmp(name, formats[i].name)) {
			*f = (enc_format)i;
			return 0;
		}
	return -1;
}

const char *enc_format_name(enc_format f) { return formats[f].name; }
const char *enc_content_type(enc_format f) { return formats[f].type; }

/* ---- the output buffer, also libsndfile's virtual file ---- */

static int grow(void **p, size_t *cap, size_t want, size_t elem)
{
	if (want <= *cap)
		return 0;
	size_t c = *cap ? *cap : 4096;
	while (c < want)
		c *= 2;
	void *q = realloc(*p, c * elem);
	if (q == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

/* Writes n bytes at the file position. A write that starts on bytes
 * already taken (a header patched at the end) is dropped whole: a patch
 * is applied entirely or not at all, never half over what was sent. */
static sf_count_t out_write(const void *p, sf_count_t n, void *user)
{
	enc *e = user;
	const unsigned char *c = p;
	sf_count_t from = e->pos, to = e->pos + n;
	const sf_count_t sent = e->base + (sf_count_t)e->head;

	if (from >= sent && to > from) {
		size_t end = (size_t)(to - e->base);
		if (end > e->len) {
			if (grow((void **)&e->buf, &e->cap, end, 1) < 0) {
				e->oom = 1;
				return 0;
			}
			memset(e->buf + e->len, 0, end - e->len);
			e->len = end;
		}
		memcpy(e->buf + (from - e->base), c, (size_t)n);
	}
	e->pos = to;
	if (e->pos > e->size)
		e->size = e->pos;
	return n;
}

static sf_count_t vio_len(void *user) { return ((enc *)user)->size; }
static sf_count_t vio_tell(void *user) { return ((enc *)user)->pos; }

static sf_count_t vio_seek(sf_count_t off, int whence, void *user)
{
	enc *e = user;
	sf_count_t to = whence == SEEK_SET ? off : whence == SEEK_CUR ? e->pos + off : e->size + off;
	if (to < 0)
		return -1;
	e->pos = to;
	return to;
}

/* libsndfile reads back only what it wrote; bytes taken read as zeros. */
static sf_count_t vio_read(void *p, sf_count_t n, void *user)
{
	enc *e = user;
	if (e->pos >= e->size)
		return 0;
	if (n > e->size - e->pos)
		n = e->size - e->pos;
	for (sf_count_t i = 0; i < n; i++) {
		sf_count_t at = e->pos + i - e->base;
		((unsigned char *)p)[i] = at >= (sf_count_t)e->head && at < (sf_count_t)e->len ?
			e->buf[at] : 0;
	}
	e->pos += n;
	return n;
}

const unsigned char *enc_bytes(const enc *e, size_t *n)
{
	*n = e->len - e->head;
	return e->buf + e->head;
}

void enc_take(enc *e, size_t n)
{
	e->head += n;
	if (e->head > e->len)
		e->head = e->len;
	if (e->head == e->len || e->head > e->cap / 2) {
		memmove(e->buf, e->buf + e->head, e->len - e->head);
		e->base += (sf_count_t)e->head;
		e->len -= e->head;
		e->head = 0;
	}
}

size_t enc_samples(const enc *e) { return e->samples; }

/* ---- formats ---- */

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = v, p[1] = v >> 8, p[2] = v >> 16, p[3] = v >> 24;
}

/* A WAV's header: 16-bit mono at ENC_RATE, sizes unknown (a stream's). */
static void wav_header(unsigned char h[44])
{
	memcpy(h, "RIFF", 4);
	put32(h + 4, 0xffffffffu);
	memcpy(h + 8, "WAVEfmt ", 8);
	put32(h + 16, 16);
	h[20] = 1, h[21] = 0;                 /* PCM */
	h[22] = 1, h[23] = 0;                 /* mono */
	put32(h + 24, ENC_RATE);
	put32(h + 28, ENC_RATE * 2);
	h[32] = 2, h[33] = 0, h[34] = 16, h[35] = 0;
	memcpy(h + 36, "data", 4);
	put32(h + 40, 0xffffffffu);
}

/* A whole WAV's true RIFF and data sizes over the header's "unknown", at
 * the end, the way libsndfile patches its headers: through out_write,
 * which drops the patch if the header was taken already. Audio beyond the
 * RIFF's 32 bits keeps "unknown". */
static void wav_sizes(enc *e)
{
	const unsigned long long data = 2ull * e->samples;
	const sf_count_t end = e->pos;
	unsigned char v[4];

	if (data > 0xffffffffull - 36)
		return;
	put32(v, (uint32_t)data + 36);
	e->pos = 4;
	out_write(v, sizeof v, e);
	put32(v, (uint32_t)data);
	e->pos = 40;
	out_write(v, sizeof v, e);
	e->pos = end;
}

static SNDFILE *sf_open_enc(enc *e, int format)
{
	SF_INFO info = { .samplerate = ENC_RATE, .channels = 1, .format = format };
	e->vio = (SF_VIRTUAL_IO){ vio_len, vio_seek, vio_read, out_write, vio_tell };
	return sf_open_virtual(&e->vio, SFM_WRITE, &info, e);
}

static int supported[ENC_N_FORMATS];
static pthread_once_t probed = PTHREAD_ONCE_INIT;

/* Opens each libsndfile format once on a scratch virtual file: a build
 * without LAME or Opus says so there. */
static void probe(void)
{
	for (int i = 0; i < ENC_N_FORMATS; i++) {
		if (formats[i].sf_format <= 0) {
			supported[i] = formats[i].sf_format == 0;
			continue;
		}
		enc *e = calloc(1, sizeof *e);
		SNDFILE *sf = e ? sf_open_enc(e, formats[i].sf_format) : NULL;
		supported[i] = sf != NULL;
		if (sf)
			sf_close(sf);
		if (e)
			free(e->buf);
		free(e);
	}
}

int enc_supported(enc_format f)
{
	pthread_once(&probed, probe);
	return supported[f];
}

int enc_resampler_parse(const char *name)
{
	return !strcmp(name, "fastest") ? SRC_SINC_FASTEST : !strcmp(name, "medium") ?
	       SRC_SINC_MEDIUM_QUALITY : !strcmp(name, "best") ? SRC_SINC_BEST_QUALITY : -1;
}

enc *enc_new(enc_format f, double speed, int resampler, int whole, pcg_err *err)
{
	if (!enc_supported(f)) {
		pcg_fail(err, "%s: this build of libsndfile cannot write it", formats[f].name);
		return NULL;
	}
	enc *e = calloc(1, sizeof *e);
	if (e == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	e->f = f;
	e->speed = speed;
	e->resampler = resampler;
	e->whole = whole;
	if (f == ENC_WAV) {
		unsigned char h[44];
		wav_header(h);
		out_write(h, sizeof h, e);
	} else if (formats[f].sf_format > 0) {
		if ((e->sf = sf_open_enc(e, formats[f].sf_format)) == NULL) {
			pcg_fail(err, "%s: libsndfile: %s", formats[f].name, sf_strerror(NULL));
			enc_free(&e);
			return NULL;
		}
		/* MP3: 64 kbit/s constant (24 kHz mono speech; LAME's default
		 * would be variable) */
		if (f == ENC_MP3) {
			int mode = SF_BITRATE_MODE_CONSTANT;
			double level = 0.5;
			sf_command(e->sf, SFC_SET_BITRATE_MODE, &mode, sizeof mode);
			sf_command(e->sf, SFC_SET_COMPRESSION_LEVEL, &level, sizeof level);
		}
	}
	if (e->oom) {
		pcg_fail(err, "out of memory");
		enc_free(&e);
	}
	return e;
}

void enc_free(enc **pe)
{
	enc *e = *pe;
	if (e == NULL)
		return;
	if (e->sf)
		sf_close(e->sf);
	if (e->rb)
		rubberband_delete(e->rb);
	if (e->src)
		src_delete(e->src);
	free(e->buf);
	free(e->fx);
	free(e->fa);
	free(e->fb);
	free(e->s16);
	free(e);
	*pe = NULL;
}

/* ---- the chain ---- */

/* The last stage: n samples at ENC_RATE into the container. */
static int put_samples(enc *e, const float *x, size_t n, pcg_err *err)
{
	if (n == 0)
		return 0;
	if (grow((void **)&e->s16, &e->s16_cap, n, sizeof *e->s16) < 0)
		return pcg_fail(err, "out of memory");
	audio_to_s16(x, e->s16, n);
	if (e->sf) {
		if (sf_write_short(e->sf, e->s16, (sf_count_t)n) != (sf_count_t)n)
			return pcg_fail(err, "%s: libsndfile: %s", formats[e->f].name,
					sf_strerror(e->sf));
	} else {
		unsigned char le[2 * 512];
		for (size_t i = 0; i < n;) {
			size_t k = 0;
			for (; k < 512 && i < n; k++, i++) {
				le[2 * k] = (unsigned char)(e->s16[i] & 0xff);
				le[2 * k + 1] = (unsigned char)((uint16_t)e->s16[i] >> 8);
			}
			out_write(le, (sf_count_t)(2 * k), e);
		}
	}
	e->samples += n;
	return e->oom ? pcg_fail(err, "out of memory") : 0;
}

/* Resampling to ENC_RATE (end: the input is over, flush). */
static int resample(enc *e, const float *x, size_t n, int end, pcg_err *err)
{
	if (e->in_rate == ENC_RATE)
		return put_samples(e, x, n, err);
	const double ratio = (double)ENC_RATE / e->in_rate;
	SRC_DATA d = { .data_in = x, .input_frames = (long)n, .src_ratio = ratio,
		       .end_of_input = end };
	for (;;) {
		const size_t room = (size_t)(n * ratio) + 256;
		if (grow((void **)&e->fb, &e->fb_cap, room, sizeof *e->fb) < 0)
			return pcg_fail(err, "out of memory");
		d.data_out = e->fb;
		d.output_frames = (long)e->fb_cap;
		int rc = src_process(e->src, &d);
		if (rc != 0)
			return pcg_fail(err, "libsamplerate: %s", src_strerror(rc));
		if (put_samples(e, e->fb, (size_t)d.output_frames_gen, err) < 0)
			return -1;
		d.data_in += d.input_frames_used;
		d.input_frames -= d.input_frames_used;
		if (d.input_frames == 0 && (!end || d.output_frames_gen == 0))
			return 0;
	}
}

/* What the stretcher has ready, on to the resampler. */
static int stretch_drain(enc *e, pcg_err *err)
{
	int avail;
	while ((avail = rubberband_available(e->rb)) > 0) {
		if (grow((void **)&e->fa, &e->fa_cap, (size_t)avail, sizeof *e->fa) < 0)
			return pcg_fail(err, "out of memory");
		float *out = e->fa;
		size_t got = rubberband_retrieve(e->rb, &out, (unsigned)avail);
		size_t skip = got < e->rb_drop ? got : e->rb_drop;
		e->rb_drop -= skip;
		if (resample(e, e->fa + skip, got - skip, 0, err) < 0)
			return -1;
	}
	return 0;
}

static int stretch(enc *e, const float *x, size_t n, int final, pcg_err *err)
{
	do {
		size_t k = n < RB_BLOCK ? n : RB_BLOCK;
		rubberband_process(e->rb, &x, (unsigned)k, final && k == n);
		if (stretch_drain(e, err) < 0)
			return -1;
		x += k;
		n -= k;
	} while (n > 0);
	return 0;
}

/* The stages that depend on the input rate, at its first samples. */
static int chain_open(enc *e, int rate, pcg_err *err)
{
	int rc;
	if (rate <= 0 || rate > 384000)
		return pcg_fail(err, "sample rate %d", rate);
	e->in_rate = rate;
	if (rate != ENC_RATE && (e->src = src_new(e->resampler, 1, &rc)) == NULL)
		return pcg_fail(err, "libsamplerate: %s", src_strerror(rc));
	if (e->speed != 1.0) {
		e->rb = rubberband_new((unsigned)rate, 1, RubberBandOptionProcessRealTime |
				       RubberBandOptionThreadingNever | RubberBandOptionEngineFaster,
				       1.0 / e->speed, 1.0);
		if (e->rb == NULL)
			return pcg_fail(err, "librubberband: cannot start the stretcher");
		rubberband_set_max_process_size(e->rb, RB_BLOCK);
		/* real-time mode: pad the start with silence and drop the
		 * stretcher's delay from its output, so that n samples in
		 * give n / speed out */
		size_t pad = rubberband_get_preferred_start_pad(e->rb);
		e->rb_drop = rubberband_get_start_delay(e->rb);
		float *z = calloc(pad ? pad : 1, sizeof *z);
		if (z == NULL)
			return pcg_fail(err, "out of memory");
		rc = pad ? stretch(e, z, pad, 0, err) : 0;
		free(z);
		if (rc < 0)
			return -1;
	}
	return 0;
}

int enc_feed(enc *e, const void *s16le, size_t n, int rate, pcg_err *err)
{
	const unsigned char *p = s16le;

	if (n == 0)
		return 0;
	if (e->in_rate == 0 && chain_open(e, rate, err) < 0)
		return -1;
	if (rate != e->in_rate)
		return pcg_fail(err, "the sample rate changed from %d to %d Hz", e->in_rate, rate);
	/* the input in its own buffer: the stretcher's output goes to fa,
	 * the resampler's to fb */
	if (grow((void **)&e->fx, &e->fx_cap, n, sizeof *e->fx) < 0)
		return pcg_fail(err, "out of memory");
	for (size_t i = 0; i < n; i++)
		e->fx[i] = (int16_t)(uint16_t)(p[2 * i] | p[2 * i + 1] << 8) / 32768.0f;
	return e->rb ? stretch(e, e->fx, n, 0, err) : resample(e, e->fx, n, 0, err);
}

int enc_finish(enc *e, pcg_err *err)
{
	if (e->finished)
		return 0;
	e->finished = 1;
	if (e->rb) {
		const float zero[1] = { 0 }, *x = zero;
		rubberband_process(e->rb, &x, 0, 1);
		if (stretch_drain(e, err) < 0)
			return -1;
	}
	static const float none[1];
	if (e->src && resample(e, none, 0, 1, err) < 0)
		return -1;
	if (e->sf) {
		int rc = sf_close(e->sf);
		e->sf = NULL;
		if (rc != 0)
			return pcg_fail(err, "%s: libsndfile: %s", formats[e->f].name,
					sf_strerror(NULL));
	}
	if (e->f == ENC_WAV && e->whole)
		wav_sizes(e);
	return e->oom ? pcg_fail(err, "out of memory") : 0;
}
