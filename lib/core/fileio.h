/* fileio.h: the files of every program: output files written one way
 * (below); input files read whole when small (pcg_read_small) or mapped or
 * read for reading in place (pcg_bytes); where a model's config.json lies;
 * the check that no two items of a file share a byte (pcg_spans_overlap);
 * jansson's parse errors in words (pcg_json_fail).
 *
 * An output path is written according to what is there:
 *
 *   "-", /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: the open
 *   descriptor (a pipe, a terminal, or the file the shell opened, with its
 *   offset and append mode), written through;
 *   a character device or a FIFO (/dev/null, /dev/full, a named pipe): opened
 *   for writing, never created, truncated or replaced, and written through
 *   (as cp or sox write to it); a FIFO waits for its reader;
 *   a symbolic link: followed to the file it names (through every link, a
 *   dangling one included), which is then written as below or above;
 *   a regular file, or nothing: replaced atomically. The bytes go to a new
 *   file DIR/.NAME.XXXXXX.partial (a random name created with
 *   O_EXCL | O_NOFOLLOW, so nothing planted under a name is followed),
 *   which is flushed to disk and renamed over DIR/NAME only when complete:
 *   a reader never sees a partial file, and a failure leaves what was at
 *   NAME as it was. A file replaced keeps its mode, owner and group (where
 *   the process may set them: a private file stays private); a new one
 *   gets mode & ~umask. The temporary file is removed on every error path,
 *   and on every catchable signal whose default ends the process (SIGINT,
 *   SIGTERM, SIGHUP, SIGPIPE, SIGXFSZ, SIGUSR1, SIGALRM, the faults, the
 *   real-time signals, ...) when the program leaves it at its default
 *   action (a program with its own handler aborts the writer); those of an
 *   earlier run killed outright (.NAME.XXXXXX.partial of this user, older
 *   than a day) are removed by the next run that writes NAME;
 *   anything else (a directory, a block device, a socket): refused.
 *
 * A write error is kept and reported by the commit, so a device that fails
 * (/dev/full: "No space left on device") fails the program. */
#ifndef PCG_FILEIO_H
#define PCG_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

/* Writes n bytes to path (see above) with the given mode (before the umask)
 * for a file it creates. Returns 0, or -1 with err naming the file. */
int pcg_write_file(const char *path, const void *data, size_t n, mode_t mode, pcg_err *err);

/* The same written piece by piece (a file too big to build in memory):
 * open starts it, write appends (a failure is kept: the next calls do
 * nothing and commit reports it), commit finishes it (flush, close, and for
 * a replaced file the rename), abort gives up (the temporary file removed).
 * Every call but open is safe after a failed one; commit or abort ends it.
 * Each returns 0, or -1 with err naming the file. */
typedef struct pcg_out {
	int fd;          /* -1: closed */
	int failed;      /* errno of the first failed write, 0 if none */
	int through;     /* 1: written in place (a descriptor, device or FIFO) */
	char *name;      /* the path given, for messages ("-": standard output) */
	char *path;      /* the file replaced (a link's target), or NULL */
	char *tmp;       /* the temporary file while it exists, else NULL */
} pcg_out;
int pcg_out_open(pcg_out *o, const char *path, mode_t mode, pcg_err *err);
void pcg_out_write(pcg_out *o, const void *data, size_t n);
int pcg_out_commit(pcg_out *o, pcg_err *err);
void pcg_out_abort(pcg_out *o);

/* 1 when path would be written through ("-", a descriptor's name, a
 * character device or a FIFO, or a link to one), else 0. */
int pcg_out_through(const char *path);

/* A small file read whole (a key, an allow-list, a token): it must be a
 * regular file (a device, a FIFO or a directory is refused without reading
 * it) of at most max bytes. *data is malloc'd, NUL-terminated, *n bytes
 * long (the caller frees). Returns 0, or -1 with err naming the file. */
int pcg_read_small(const char *path, size_t max, char **data, size_t *n, pcg_err *err);

/* A file's bytes for reading in place: mapped when it is a regular file of
 * at least min_map bytes, read into memory otherwise (pipes, standard input,
 * and files too short to be valid, whose reader then reports them). */
typedef struct pcg_bytes {
	const unsigned char *data; /* size bytes, in map or buf */
	uint64_t size;
	void *map;                 /* mmapped, or NULL */
	size_t map_len;
	unsigned char *buf;        /* malloc'd, or NULL */
} pcg_bytes;

/* Opens path ("-": standard input). Returns 0, or -1 with err naming the file. */
int pcg_bytes_open(const char *path, uint64_t min_map, pcg_bytes *im, pcg_err *err);

/* A copy of size bytes in memory (malloc'd: aligned for every array of a
 * file image). Returns 0, or -1 with err naming name. */
int pcg_bytes_copy(pcg_bytes *im, const void *data, size_t size, const char *name,
		   pcg_err *err);

/* The path of config.json in the weights' directory, or beside the weights
 * file (a directory is taken whole), into buf. Returns 1 when it is a regular
 * file, else 0 (buf holds the path looked at). */
int pcg_config_beside(const char *weights, char *buf, size_t n);

/* Takes over a malloc'd buffer of size bytes (an image built in memory). */
void pcg_bytes_own(pcg_bytes *im, unsigned char *buf, uint64_t size);

/* Unmaps or frees; leaves im empty. */
void pcg_bytes_close(pcg_bytes *im);

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
