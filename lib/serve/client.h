/* client.h: a request/reply client of a pipeline server, in the Lazy Pirate
 * manner: every request carries a fresh id; the client waits up to a
 * timeout for the reply with that id (late replies to earlier requests are
 * dropped), and on a timeout reopens its socket and resends, up to a number
 * of tries, then gives up with an error that names the server. Requests of
 * the pipeline are idempotent (they name the position they extend from), so
 * a resend is always safe. A "progress" message with the request's id (a
 * server saying it still works on it, behind other sessions' work) starts
 * the wait again. */
#ifndef PCG_CLIENT_H
#define PCG_CLIENT_H

#include "err.h"
#include "proto.h"

typedef struct pcg_client pcg_client;

/* Connects to url. timeout_ms per try, tries >= 1. */
pcg_client *client_new(void *ctx, const char *url, int timeout_ms, int tries, pcg_err *err);
void client_free(pcg_client **c);

/* Lets each try of a propose or score wait ms more per position it asks the
 * server to compute beyond the PROTO_MAX_N of a round (default 0:
 * timeout_ms whatever the work), so a long prompt's prefill is not taken
 * for a dead server while a round still finds one after timeout_ms. */
void client_set_ms_per_position(pcg_client *c, int ms);

/* While waiting for a reply, asks alive(ctx) once a second; when it says
 * 0 (the server is gone), the call fails at once instead of waiting out its
 * timeout. NULL: no probe. */
void client_set_alive(pcg_client *c, int (*alive)(void *ctx), void *ctx);

/* Sends req (its id is set here) and parses the reply into rep, in the
 * message as received (no copy): rep's vectors and samples point into it,
 * valid until the next call or client_free.
 * Returns 0; -1 with err on timeout after all tries, on a transport error,
 * on an unparsable reply. An error reply is returned as 0 with
 * rep->type == PROTO_ERROR: the caller decides (e.g. resend the context on
 * unknown-session). */
int client_call(pcg_client *c, proto_msg *req, proto_msg *rep, pcg_err *err);

/* client_call in two halves, so that a caller can have requests to
 * several servers in flight at once: client_send packs and sends req (its
 * id set here; req may be reused at once), client_wait waits for its
 * reply, resending on a timeout as client_call does. Each returns 0 or -1
 * with err; a send that failed is retried by client_wait. A client has at
 * most one request in flight, and the previous reply is released by
 * client_send. */
int client_send(pcg_client *c, proto_msg *req, pcg_err *err);
int client_wait(pcg_client *c, proto_msg *rep, pcg_err *err);
/* Whether a message waits for client_wait (a reply, or a late one that it
 * will drop): 1 or 0, without waiting. */
int client_ready(pcg_client *c);

/* Counters: requests resent after a timeout, stale replies dropped. */
unsigned long client_resent(const pcg_client *c);
unsigned long client_stale(const pcg_client *c);

#endif
