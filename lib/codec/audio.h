/* audio.h: mono float samples to an audio file through libsndfile, written
 * by lib/core/fileio.c (see fileio.h) so that a file at the final path is always
 * complete:
 *
 *   a regular file (or a new one) is replaced atomically: a temporary file
 *   .NAME.XXXXXX.partial in the destination directory (O_EXCL, so
 *   concurrent writers never share one), every write checked, sf_close
 *   checked, the file re-opened and its header checked against the frames
 *   written (libsndfile writes the header at close and can lose an error
 *   there), fsync and close checked, rename over the final path, fsync of
 *   the directory. On any failure the temporary file is removed and
 *   whatever was at the final path stays as it was. A symbolic link is
 *   followed and its target replaced so.
 *
 * "-" (standard output), /dev/stdout, a character device or a FIFO is
 * written through: raw as it is; WAV with a header whose sizes say
 * "unknown" (0xFFFFFFFF, as streaming writers do: it cannot seek back to
 * fill them) when it is a pipe; FLAC only when it can seek (libsndfile
 * seeks back to finish it). A write error there (/dev/full) is an error.
 */
#ifndef PCG_AUDIO_H
#define PCG_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef enum audio_format {
	AUDIO_WAV,      /* "wav":     WAV, 16-bit PCM */
	AUDIO_WAV_F32,  /* "wav-f32": WAV, 32-bit float */
	AUDIO_FLAC,     /* "flac":    FLAC, 16-bit */
	AUDIO_RAW,      /* "raw":     headerless signed 16-bit little-endian */
	AUDIO_RAW_F32,  /* "raw-f32": headerless float32 little-endian */
} audio_format;

/* The format called name (the strings above); -1 if none. */
int audio_format_parse(const char *name, audio_format *f);
/* The format implied by a path's extension (.wav, .flac, .raw, .pcm; "-" is
 * raw); -1 if none. */
int audio_format_from_path(const char *path, audio_format *f);
const char *audio_format_name(audio_format f);

typedef struct audio_out audio_out;

/* Starts writing mono audio at rate Hz in format f to path ("-": standard
 * output). 16-bit formats clip samples to [-1, 1]. Returns NULL with err
 * naming the path on failure. */
audio_out *audio_open(const char *path, int rate, audio_format f, pcg_err *err);

/* Appends n samples. A non-finite sample is an error (naming its index):
 * no format can hold it meaningfully. */
int audio_append(audio_out *a, const float *x, size_t n, pcg_err *err);

/* Appends n 16-bit samples, stored as given by the 16-bit formats. */
int audio_append_s16(audio_out *a, const int16_t *x, size_t n, pcg_err *err);

/* Samples to 16 bits exactly as the 16-bit formats store them (libsndfile's
 * clipping conversion: x * 2^31 rounded and clipped to int32, its high 16
 * bits), so that audio sent as 16-bit PCM is the file's to the byte.
 * A NaN becomes 0. */
void audio_to_s16(const float *x, int16_t *y, size_t n);

/* Finishes the file and moves it to its path (see above). Frees *a and
 * sets it to NULL, on success and on failure. */
int audio_commit(audio_out **a, pcg_err *err);

/* Gives up: removes the temporary file; frees *a and sets it to NULL. */
void audio_abort(audio_out **a);

/* audio_open + audio_append + audio_commit. */
int audio_write(const char *path, const float *x, size_t n, int rate, audio_format f,
		pcg_err *err);

/* Reads every format libsndfile reads (WAV, FLAC, Ogg Vorbis, Opus, MP3,
 * AIFF, ...) from path ("-": standard input, for formats that stream), mixed
 * down to mono (the mean of the channels, as librosa does) and resampled to
 * rate Hz with libsamplerate's best sinc converter, into a malloc'd *out of
 * *n samples (the caller frees). More than max_seconds of audio is an error
 * that says so, before it is all decoded. A file libsndfile cannot open, or
 * one that ends before its header says (a truncated file), is an error
 * naming the file. Returns 0 or -1. */
int audio_read(const char *path, int rate, double max_seconds, float **out, size_t *n,
	       pcg_err *err);
/* The same for a file's size bytes in memory (an upload), named name. */
int audio_read_memory(const void *data, size_t size, const char *name, int rate,
		      double max_seconds, float **out, size_t *n, pcg_err *err);

#endif
