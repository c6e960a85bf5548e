/* fileio.h: files written whole and atomically: to PATH.tmp, flushed to
 * disk, renamed over PATH only when complete, so a reader never sees a
 * partial file and a failure leaves no file at PATH. */
#ifndef PCG_FILEIO_H
#define PCG_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

#include "err.h"

/* Writes n bytes to path ("-": standard output) with the given mode
 * (before the umask). Returns 0, or -1 with err naming the file. */
int pcg_write_file(const char *path, const void *data, size_t n, mode_t mode, pcg_err *err);

#endif
