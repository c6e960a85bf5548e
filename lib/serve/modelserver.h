/* modelserver.h: the model server behind draftd and targetd: one model, many
 * sessions, each a KV cache brought to the position a request names
 * (truncate, append), then "propose" (sample n tokens autoregressively and
 * return them with their distributions) or "score" (one forward pass over
 * the block, the distributions of its last n positions). The two programs
 * differ only in their defaults; see man/draftd.8 and man/targetd.8. */
#ifndef PCG_MODELSERVER_H
#define PCG_MODELSERVER_H

#include <signal.h>

#include "err.h"
#include "proto.h"

typedef enum ms_role { MS_DRAFT, MS_TARGET } ms_role;

typedef struct ms_config {
	const char *prog;       /* name in logs: draftd, targetd */
	const char *model_dir;
	const char *listen_url;
	const int *layers;      /* a layer subset, or NULL */
	int n_layers;
	long long kv_mem;       /* KV cache budget in bytes */
	const char *device;     /* "cpu", "cuda", "cuda:N"; NULL: the CPU */
	int draft;              /* a draft server: a Llasa+ checkpoint's heads are not run
				 * (only the target's are asked for) */
} ms_config;

/* Loads the model, binds listen_url on ctx and serves until *stop is set
 * (pcg_daemon_run; ctx NULL: a context of its own). Several servers may run
 * as threads of one process on one ctx (inproc:// endpoints: the verifier's
 * --local mode). Returns 0, or 1 with the reason printed. */
int modelserver_serve(void *ctx, const ms_config *cfg, volatile sig_atomic_t *stop);

/* A model server in this process without a socket: the tests and pcg-sim
 * drive lib/speculate's rounds through it. cfg->listen_url is not used. */
typedef struct ms_local ms_local;
ms_local *modelserver_local(const ms_config *cfg, pcg_err *err);
/* Serves one request into rep as the socket server does (the same checks,
 * passes and reply), as a client would parse it (its vectors dense f32 in
 * the server's memory until the next request: read them with
 * proto_vector). */
void modelserver_handle(ms_local *m, const proto_msg *q, proto_msg *rep);
void modelserver_local_free(ms_local **m);

/* Parses "0,1,15" into layers (at most max). Returns the count or -1. */
/* The serving loop's wait before a batched pass (modelserver.c, "Sessions
 * come back together"): the seconds to wait at time now for the n sessions
 * the last pass (of `pass` seconds, ended at pass_end) answered at
 * replied[i], pending[i] when their next request is already in; 0: run. */
double modelserver_gather_wait(double now, double pass_end, double pass, const double *replied,
			       const int *pending, int n);

int modelserver_parse_layers(const char *s, int *layers, int max, pcg_err *err);

/* The whole program: parses argv, serves until SIGTERM or SIGINT. Returns
 * the exit status (0, 1 failure, 2 usage). */
int modelserver_main(int argc, char **argv, ms_role role);

#endif
