/* codes.c: speech codes from text or raw int32 input (see codes.h). */
#include "codes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int is_sep(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
	       c == ',';
}

static int push(int32_t **v, size_t *n, size_t *cap, int32_t x, pcg_err *err)
{
	if (*n == CODES_MAX)
		return pcg_fail(err, "more than %d codes", CODES_MAX);
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 1024;
		int32_t *p = realloc(*v, c * sizeof *p);
		if (p == NULL)
			return pcg_fail(err, "out of memory for %zu codes", c);
		*v = p;
		*cap = c;
	}
	(*v)[(*n)++] = x;
	return 0;
}

static int parse_text(const char *s, size_t len, int32_t **out, size_t *n, pcg_err *err)
{
	size_t i = 0, cap = 0;

	while (i < len) {
		size_t j;
		if (is_sep((unsigned char)s[i])) {
			i++;
			continue;
		}
		for (j = i; j < len && !is_sep((unsigned char)s[j]); j++)
			;
		/* one value: [+-]digits, at most 11 characters for an int32 */
		const size_t w = j - i;
		size_t k = i + (s[i] == '-' || s[i] == '+');
		int ok = k < j && w <= 11;
		long long x = 0;
		for (; ok && k < j; k++) {
			if (s[k] < '0' || s[k] > '9')
				ok = 0;
			else
				x = x * 10 + (s[k] - '0');
		}
		if (s[i] == '-')
			x = -x;
		if (!ok || x < INT32_MIN || x > INT32_MAX) {
			char tok[24];
			snprintf(tok, sizeof tok, "%.*s%s", (int)(w < 16 ? w : 16), s + i,
				 w > 16 ? "..." : "");
			for (char *p = tok; *p; p++)
				if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
					*p = '?';
			return pcg_fail(err, "position %zu: '%s' is not an integer", *n, tok);
		}
		if (push(out, n, &cap, (int32_t)x, err) < 0)
			return -1;
		i = j;
	}
	return 0;
}

int codes_parse(const void *buf, size_t len, codes_format fmt, int32_t **out, size_t *n,
		pcg_err *err)
{
	const unsigned char *b = buf;

	*out = NULL;
	*n = 0;
	if (fmt == CODES_TEXT) {
		if (parse_text(buf, len, out, n, err) == 0)
			return 0;
		free(*out);
		*out = NULL;
		*n = 0;
		return -1;
	}
	if (len % 4)
		return pcg_fail(err, "%zu bytes is not a whole number of int32 codes", len);
	if (len / 4 > CODES_MAX)
		return pcg_fail(err, "more than %d codes", CODES_MAX);
	if (len == 0)
		return 0;
	*out = malloc(len);
	if (*out == NULL)
		return pcg_fail(err, "out of memory for %zu codes", len / 4);
	for (size_t i = 0; i < len / 4; i++) {
		const unsigned char *p = b + 4 * i;
		uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
			     (uint32_t)p[3] << 24;
		int32_t x;
		memcpy(&x, &u, sizeof x);
		(*out)[i] = x;
	}
	*n = len / 4;
	return 0;
}

int codes_read(FILE *f, codes_format fmt, int32_t **out, size_t *n, pcg_err *err)
{
	/* Text needs about 2 bytes per code at the least, int32 needs 4. */
	const size_t limit = (size_t)CODES_MAX * 12;
	size_t len = 0, cap = 0, got;
	char *buf = NULL;
	int rc;

	*out = NULL;
	*n = 0;
	do {
		if (len == cap) {
			if (cap >= limit) {
				free(buf);
				return pcg_fail(err, "input larger than %zu bytes", limit);
			}
			cap = cap ? cap * 2 : 65536;
			char *p = realloc(buf, cap);
			if (p == NULL) {
				free(buf);
				return pcg_fail(err, "out of memory reading codes");
			}
			buf = p;
		}
		got = fread(buf + len, 1, cap - len, f);
		len += got;
	} while (got > 0);
	if (ferror(f)) {
		rc = pcg_fail(err, "read error: %s", strerror(errno));
		free(buf);
		return rc;
	}
	rc = codes_parse(buf, len, fmt, out, n, err);
	free(buf);
	return rc;
}

int codes_from_ids(int32_t *v, size_t *n, int32_t offset, int32_t count, int32_t end_id,
		   pcg_err *err)
{
	if (end_id >= 0 && *n > 0 && v[*n - 1] == end_id)
		(*n)--;
	for (size_t i = 0; i < *n; i++) {
		if (v[i] < offset || (int64_t)v[i] - offset >= count) {
			if (v[i] == end_id)
				return pcg_fail(err, "position %zu: end token %d before the last id", i,
						(int)v[i]);
			return pcg_fail(err, "position %zu: id %d is not a speech token [%d, %lld)", i,
					(int)v[i], (int)offset, (long long)offset + count);
		}
		v[i] -= offset;
	}
	return 0;
}

int codes_check(const int32_t *v, size_t n, int64_t count, pcg_err *err)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] < 0 || v[i] >= count)
			return pcg_fail(err, "position %zu: code %d out of range [0, %lld)", i,
					(int)v[i], (long long)count);
	return 0;
}
