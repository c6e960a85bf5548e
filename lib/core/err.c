/* err.c: formatting of library error messages (see err.h). */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pcg_vfail(pcg_err *err, const char *fmt, va_list ap)
{
	if (err != NULL)
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	return -1;
}

int pcg_fail(pcg_err *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	pcg_vfail(err, fmt, ap);
	va_end(ap);
	return -1;
}

void pcg_err_prefix(pcg_err *err, const char *prefix)
{
	char tmp[sizeof err->msg];

	if (err == NULL)
		return;
	/* The prefix is a path: keep its tail if the two do not fit. */
	size_t pl = strlen(prefix);
	if (pl > 200)
		prefix += pl - 200;
	snprintf(tmp, sizeof tmp, "%.200s: %.300s", prefix, err->msg);
	memcpy(err->msg, tmp, sizeof tmp);
}
