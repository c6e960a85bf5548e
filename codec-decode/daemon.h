/* daemon.h: codec-decode's daemon mode (see daemon.c). */
#ifndef PCG_CODEC_DAEMON_H
#define PCG_CODEC_DAEMON_H

#include <stdint.h>

#include "err.h"

/* The codec the daemon decodes with: X-codec2 or the demo voice's k-means
 * codec behind one call. */
typedef struct codec_ops {
	const char *name;
	int sample_rate, hop;
	int64_t codebook;
	void *model;
	int (*decode)(void *model, const int32_t *codes, int T, float *out, pcg_err *err);
} codec_ops;

/* Serves "audio" messages on listen_url until SIGTERM/SIGINT; returns the
 * exit status. */
int codec_daemon(const char *listen_url, const codec_ops *c);

#endif
