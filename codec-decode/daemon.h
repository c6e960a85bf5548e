/* daemon.h: codec-decode's daemon mode (see daemon.c). */
#ifndef PCG_CODEC_DAEMON_H
#define PCG_CODEC_DAEMON_H

#include "xcodec2.h"

/* Serves "audio" messages on listen_url until SIGTERM/SIGINT; returns the
 * exit status. */
int codec_daemon(const char *listen_url, const xc2_model *m);

#endif
