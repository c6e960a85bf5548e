/* err.h: the one error policy of libpcg.
 *
 * Library functions return 0 on success and -1 on failure (or a pointer and
 * NULL), and on failure write one line into a pcg_err that the caller owns.
 * The message names what is wrong ("model.safetensors: tensor 'x': data_offsets
 * end 12 beyond data size 8"); programs print it as "prog: message".
 */
#ifndef PCG_ERR_H
#define PCG_ERR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcg_err {
	char msg[512];
} pcg_err;

/* Formats a message into err (which may be NULL) and returns -1, so that
 * `return pcg_fail(err, "...")` reads as one step. */
int pcg_fail(pcg_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* pcg_fail with the arguments in ap. */
int pcg_vfail(pcg_err *err, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/* Prefixes err->msg with "prefix: " (used to add a file name on the way up). */
void pcg_err_prefix(pcg_err *err, const char *prefix);

#ifdef __cplusplus
}
#endif

#endif
