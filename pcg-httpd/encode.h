/* encode.h: the audio of one HTTP response, from the pipeline's 16-bit
 * samples to the bytes of the format the client asked for, as it arrives:
 *
 *   s16 at the codec's rate -> time stretch (speed != 1: librubberband)
 *   -> resampling to 24 kHz (libsamplerate) -> 16-bit -> the container
 *
 * 24 kHz is what OpenAI's speech endpoint sends in every format (its "pcm"
 * is raw 24 kHz 16-bit little-endian mono), so clients that play or parse
 * its audio get what they expect. librubberband is the time stretcher of
 * Debian's audio tools (Audacity, Ardour, ffmpeg's rubberband filter): it
 * changes the tempo and keeps the pitch; run in its real-time mode it takes
 * the audio chunk by chunk. libsamplerate's band-limited sinc converter
 * (medium quality by default) does the resampling; both stream, so the audio goes out
 * as it is made.
 *
 * Containers: pcm (raw s16le), wav (a 44-byte header whose RIFF and data
 * sizes are 0xFFFFFFFF, "unknown", as a streamed WAV carries them; the true
 * sizes when the whole file is taken at the end), and through libsndfile's
 * virtual I/O, which writes into a memory buffer that the caller drains:
 * flac, mp3 (MPEG layer III by LAME) and opus (in Ogg). Bytes drained are
 * gone: when libsndfile seeks back at the end to patch a header (FLAC's
 * STREAMINFO totals, MP3's LAME tag frame) that was sent already, the
 * patch is dropped whole, and the file says "unknown" there, as a live
 * stream does; a file taken whole at the end gets every patch. No format
 * needs the file buffered whole. aac is not written (libsndfile has no AAC
 * encoder).
 */
#ifndef PCG_HTTPD_ENCODE_H
#define PCG_HTTPD_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define ENC_RATE 24000 /* Hz, every format */

typedef enum enc_format {
	ENC_MP3,
	ENC_OPUS,
	ENC_AAC,
	ENC_FLAC,
	ENC_WAV,
	ENC_PCM,
} enc_format;
#define ENC_N_FORMATS 6

/* The format called name ("mp3", ...); -1 if none. */
int enc_format_parse(const char *name, enc_format *f);
const char *enc_format_name(enc_format f);
/* The Content-Type of its responses ("audio/mpeg", ...). */
const char *enc_content_type(enc_format f);
/* Whether this build can write it (libsndfile built with LAME, Opus...):
 * asked of libsndfile once and remembered. */
int enc_supported(enc_format f);

typedef struct enc enc;

/* libsamplerate's converter called name: "fastest", "medium" or "best"
 * (its sinc converters: 80, 90 and 97 % of the band kept; from 16 kHz,
 * about 2, 4 and 16 ms of CPU per second of audio on a Zen 4 core); -1
 * if none. */
int enc_resampler_parse(const char *name);

/* A new encoder: speed in [0.25, 4] (1: no stretch), resampler from
 * enc_resampler_parse. whole: the caller takes the bytes only after
 * enc_finish (a response with a Content-Length), so a WAV's header says its
 * true sizes; else (a stream) it says "unknown", whenever its bytes are
 * taken, so that a stream's bytes do not depend on its timing. NULL with
 * err when the format cannot be written. */
enc *enc_new(enc_format f, double speed, int resampler, int whole, pcg_err *err);
void enc_free(enc **e);

/* Feeds n samples, s16le bytes (any alignment), at rate Hz (every call the
 * same rate). Returns 0 or -1 with err. */
int enc_feed(enc *e, const void *s16le, size_t n, int rate, pcg_err *err);
/* The end of the audio: flushes the stretcher, the resampler and the
 * container. Returns 0 or -1. */
int enc_finish(enc *e, pcg_err *err);

/* The encoded bytes not taken yet (*n of them), and taking n of them.
 * After enc_finish with none taken, they are the whole file. */
const unsigned char *enc_bytes(const enc *e, size_t *n);
void enc_take(enc *e, size_t n);

/* Samples given to the container so far (at ENC_RATE). */
size_t enc_samples(const enc *e);

#endif
