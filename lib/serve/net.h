/* net.h: ZeroMQ sockets with the limits every socket of the pipeline needs
 * (ZMQ_MAXMSGSIZE, finite timeouts, LINGER 0), endpoint policy (tcp on a
 * real interface only with CURVE keys and a ZAP allow-list; loopback and
 * ipc without), and framed send/receive that
 * never trusts the size or number of frames a peer sends.
 *
 * Servers use a ROUTER socket and answer each request to the peer that sent
 * it; clients use a DEALER socket, number their requests, and drop replies
 * whose id is not the one they wait for (a late reply after a timeout).
 */
#ifndef PCG_NET_H
#define PCG_NET_H

#include <stddef.h>
#include <zmq.h>

#include "err.h"
#include "proto.h"

/* The CURVE keys of this process, for every socket it opens afterwards:
 * key_path (this process's keypair), allow_path (servers: the clients let
 * in), peers_path (clients: the servers' public keys). Any may be NULL.
 * Returns 0, or -1 with err naming the file and line. */
int net_curve_setup(const char *key_path, const char *allow_path, const char *peers_path,
		    pcg_err *err);

/* Checks an endpoint URL: inproc://, ipc://PATH, tcp://HOST:PORT with HOST
 * a loopback address (127.0.0.0/8, localhost, [::1]), or any tcp when CURVE
 * is set up for that side (server: keypair and allow-list; client: keypair
 * and the server's key). */
int net_endpoint_ok(const char *url, int server, pcg_err *err);

/* Whether an ipc:// endpoint has a listener: 0 when its socket file is
 * missing or nobody accepts on it (a server that is gone), else 1 (and 1
 * for other transports, which cannot be asked cheaply). */
int net_listening(const char *url);

/* A bound ROUTER socket for a server; NULL with err on failure. */
void *net_server(void *ctx, const char *url, pcg_err *err);
/* The verifier a client talks to when none is named: $PCG_VERIFIER, else
 * the one pcg-up starts, ipc in its runtime directory ($PCG_RUNTIME_DIR,
 * else $XDG_RUNTIME_DIR/pcg-tts, else ${TMPDIR:-/tmp}/pcg-tts-UID; see
 * pcg-runtime). Written into buf (n bytes) unless it is the variable. */
const char *net_default_verifier(char *buf, size_t n);

/* net_server whose peers may each have sndhwm messages queued (set before
 * the bind, which copies the options for the connections it accepts). */
void *net_server_hwm(void *ctx, const char *url, int sndhwm, pcg_err *err);
/* A connected DEALER socket for a client. Over tcp its handshake is watched
 * (libzmq's socket monitor) so that net_recv reports a server that refuses
 * it; close it with net_close, which stops the monitor. */
void *net_client(void *ctx, const char *url, pcg_err *err);
void net_close(void **sock);
/* Closes a server socket bound to url and removes the file of an ipc://
 * endpoint, which libzmq may leave behind. */
void net_server_close(void **sock, const char *url);

/* A received request: the peer's routing frames and the body, which stays
 * in libzmq's message (no copy) until net_req_free. */
typedef struct net_req {
	unsigned char route[256];
	size_t route_len;
	int delim;            /* the peer is a REQ socket: an empty frame follows the route */
	zmq_msg_t msg;        /* holds the body */
	const unsigned char *body;
	size_t len;
} net_req;

/* Server: waits up to timeout_ms for one request. Returns 1 with *r filled
 * (free it with net_req_free), 0 on timeout or EINTR, -1 with err for a
 * malformed one (too many frames, bad routing): such a message is drained
 * and counted, not answered. */
int net_recv_req(void *sock, net_req *r, int timeout_ms, pcg_err *err);
/* Server: sends body back to the peer of r (a copy). */
int net_reply(void *sock, const net_req *r, const void *body, size_t len, pcg_err *err);
/* net_reply that never waits: a peer whose queue is full (it does not read
 * its replies) loses this one instead of stalling the server. */
int net_reply_nowait(void *sock, const net_req *r, const void *body, size_t len, pcg_err *err);
void net_req_free(net_req *r);

/* A server's handler: fills rep (a reply, or an error) for the parsed req. */
typedef void net_handler(void *ctx, const proto_msg *req, proto_msg *rep);

typedef struct net_counts {
	unsigned long served, errors, dropped;
} net_counts;

/* What a server that answers each request at once needs: parse the request
 * in place (a parse error becomes a bad-request reply naming the field),
 * let handle fill the reply, send it back, count it, and log errors as
 * "prog: ...". Replies are packed into a few buffers that are reused once
 * libzmq is done with them (sent, or over inproc closed by the receiver),
 * so that a reply of megabytes costs no fresh pages and no copy on this
 * side. pcg_daemon_run (lib/serve/service.h) brings the requests. */
typedef struct net_responder net_responder;
net_responder *net_responder_new(const char *prog, net_handler *handle, void *ctx);
/* Answers r on sock. Returns 0, or -1 when out of memory. */
int net_respond(net_responder *s, void *sock, const net_req *r, net_counts *counts);
void net_responder_free(net_responder **s);

/* Client: sends one message (a single frame). A tcp handshake that failed
 * already is an error, as for net_recv. */
int net_send(void *sock, const void *body, size_t len, pcg_err *err);
/* Client: waits up to timeout_ms for one single-frame message; returns 1
 * with *msg holding it (read it in place; the caller closes it with
 * zmq_msg_close), 0 on timeout, -1 with err (then *msg needs no close).
 * A tcp handshake that cannot succeed is such an error, said as soon as
 * libzmq reports it: "this client's key is not allowed" (the server's ZAP
 * handler refused it), "the server's key does not match" (a CURVE server
 * dropped the handshake twice: the client sealed its HELLO for another
 * key, or the server is a plain one), "the server does not use CURVE" or
 * "the server uses CURVE". */
int net_recv(void *sock, zmq_msg_t *msg, int timeout_ms, pcg_err *err);

#endif
