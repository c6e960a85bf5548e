/* fileio.h: files written whole and atomically: to PATH.tmp, flushed to
 * disk, renamed over PATH only when complete, so a reader never sees a
 * partial file and a failure leaves no file at PATH. */
#ifndef PCG_FILEIO_H
#define PCG_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

/* Writes n bytes to path ("-": standard output) with the given mode
 * (before the umask). Returns 0, or -1 with err naming the file. */
int pcg_write_file(const char *path, const void *data, size_t n, mode_t mode, pcg_err *err);

/* The same written piece by piece (a file too big to build in memory):
 * open creates PATH.tmp, write appends (a failure is kept: the next calls
 * do nothing and commit reports it), commit flushes, closes and renames it
 * over PATH, abort removes it. Every call but open is safe after a failed
 * one; commit or abort ends it. Each returns 0, or -1 with err naming the
 * file. */
typedef struct pcg_out {
	int fd;          /* -1: closed */
	int failed;      /* errno of the first failed write, 0 if none */
	char *tmp, *path;
} pcg_out;
int pcg_out_open(pcg_out *o, const char *path, mode_t mode, pcg_err *err);
void pcg_out_write(pcg_out *o, const void *data, size_t n);
int pcg_out_commit(pcg_out *o, pcg_err *err);
void pcg_out_abort(pcg_out *o);

/* A file's bytes for reading in place: mapped when it is a regular file of
 * at least min_map bytes, read into memory otherwise (pipes, standard input,
 * and files too short to be valid, whose reader then reports them). */
typedef struct pcg_image {
	const unsigned char *data; /* size bytes, in map or buf */
	uint64_t size;
	void *map;                 /* mmapped, or NULL */
	size_t map_len;
	unsigned char *buf;        /* malloc'd, or NULL */
} pcg_image;

/* Opens path ("-": standard input). Returns 0, or -1 with err naming the file. */
int pcg_image_open(const char *path, uint64_t min_map, pcg_image *im, pcg_err *err);

/* A copy of size bytes in memory (malloc'd: aligned for every array of a
 * file image). Returns 0, or -1 with err naming name. */
int pcg_image_copy(pcg_image *im, const void *data, size_t size, const char *name,
		   pcg_err *err);

/* The path of config.json in the weights' directory, or beside the weights
 * file (a directory is taken whole), into buf. Returns 1 when it is a regular
 * file, else 0 (buf holds the path looked at). */
int pcg_config_beside(const char *weights, char *buf, size_t n);

/* Takes over a malloc'd buffer of size bytes (an image built in memory). */
void pcg_image_own(pcg_image *im, unsigned char *buf, uint64_t size);

/* Unmaps or frees; leaves im empty. */
void pcg_image_close(pcg_image *im);

/* The byte range [begin, end) of item i of a file (a tensor's data). */
typedef struct pcg_span {
	uint64_t begin, end;
	int i;
} pcg_span;

/* Sorts sp and returns the position in sp of the first range that shares a
 * byte with an earlier one, or -1 when none does. Gaps are allowed, and an
 * empty range shares no byte. */
int pcg_spans_overlap(pcg_span *sp, int n);

/* Fills err with jansson's parse error (a json_error_t) of what, in words
 * for the user: "WHAT: not valid JSON at line L, column C: TEXT", or, when
 * the file could not be read at all (jansson says line -1), "WHAT: TEXT".
 * Returns -1. */
int pcg_json_fail(pcg_err *err, const char *what, const void *json_error);

#endif
