/* http.h: the HTTP/1.1 server under pcg-httpd.
 *
 * One poll loop owns every connection while it reads: it accepts, counts
 * connections per client address, reads each request's head and then its
 * body under deadlines for the whole of each (a client that sends one byte
 * now and then is cut off as surely as a silent one), and refuses what
 * HTTP/1.1 (RFC 9112) does not allow instead of guessing: a request line
 * or a header it cannot read, two different Content-Lengths, a
 * Content-Length beside Transfer-Encoding, a transfer coding other than
 * chunked (501), a chunk larger than the body may be. Every refusal is
 * answered, then the connection is closed after the client's rest is read
 * for a moment (so that the answer is not lost to a reset).
 *
 * A request that is complete, body and all, goes to a thread of its own,
 * which writes the response (blocking, with the idle time as the send
 * timeout) and gives the connection back to the loop for the next request.
 * A client that shuts down its sending side after its request still gets
 * the response: the end of its input ends the connection only once the
 * response is written.
 */
#ifndef PCG_HTTPD_HTTP_H
#define PCG_HTTPD_HTTP_H

#include <stddef.h>
#include <sys/socket.h>

#include "err.h"

/* One request, from its head to the end of its response. Strings point
 * into the connection's buffers and stay valid until the request ends. */
typedef struct http_req {
	const char *method;       /* "GET", "POST", ... */
	const char *path;         /* the target before '?', as sent (not decoded) */
	const char *query;        /* after '?'; "" if none */
	int minor;                /* HTTP/1.minor */
	int head_only;            /* HEAD: the response has no body */
	long long content_length; /* -1: none (or chunked) */
	int chunked;
	char peer[64];            /* the client's address */
	int fd;                   /* the connection, to watch while working */
	char *body;               /* NUL-terminated; NULL if none */
	size_t len;
	int tag;                  /* the application's, set by on_head */
	int status;               /* the status answered; 0: none yet */
	double t0;                /* when the head was complete (CLOCK_MONOTONIC, s) */
	char why[600];            /* for the log: what went wrong */
	struct http_conn *conn;
} http_req;

typedef struct http_cfg {
	int max_conns;            /* connections at once; beyond, 503 and closed */
	int max_per_client;       /* from one address at once; beyond, 429 and closed */
	int head_ms;              /* a request head must arrive within this */
	int body_ms;              /* and its body within this after the head */
	int idle_ms;              /* an idle kept-alive connection; a client that reads nothing */
	/* In the loop, after the head, before anything is allocated for the
	 * request: the most bytes its body may have, or -1 having answered
	 * (http_reply), which ends the request. Must not block. */
	long long (*on_head)(http_req *rq, void *arg);
	/* In the request's thread, once its body is in: answers it
	 * (http_reply, or http_stream_*). */
	void (*on_request)(http_req *rq, void *arg);
	/* A request that ended in the loop (refused by on_head or by HTTP
	 * itself), for the log. status and why say what happened; method and
	 * path are "-" where the head could not be read. */
	void (*on_refused)(const http_req *rq, void *arg);
	void *arg;
} http_cfg;

typedef struct http_server http_server;

/* Listens on addr. NULL with err on failure. */
http_server *http_new(const struct sockaddr *addr, socklen_t addr_len, const http_cfg *cfg,
		      pcg_err *err);
/* The TCP port it listens on. */
int http_port(const http_server *s);
/* Serves until http_stop; then closes every connection, waits for the
 * requests in flight to end (their sockets are shut down) and returns 0. */
int http_run(http_server *s);
/* Makes http_run return; callable from any thread. */
void http_stop(http_server *s);
void http_free(http_server **s);

/* The value of a header (the first of that name; case-insensitive), or NULL. */
const char *http_header(const http_req *rq, const char *name);

/* The query parameter name, decoded (%XX, '+' for space) into buf with a
 * NUL after it. Returns its length in bytes (which counts any NUL that was
 * sent as %00, so a caller can tell), -1 if absent, -2 if it does not fit
 * or is malformed. */
int http_query(const http_req *rq, const char *name, char *buf, size_t n);

/* A whole response. type NULL: none. extra: more header lines, each ending
 * in "\r\n", or NULL. Returns 0, or -1 if the client is gone. */
int http_reply(http_req *rq, int status, const char *type, const char *extra, const void *body,
	       size_t len);

/* An interim 100 Continue, before the response, to an HTTP/1.1 client
 * (which must take any number of them, RFC 9110 15.2). Written to a client
 * that closed its connection, it brings back a reset: the one way to tell
 * a close from a half-close. Returns 0 (written), 1 (not: the response has
 * begun, or HTTP/1.0, which has no interim responses), -1 (the client is
 * gone). */
int http_continue(http_req *rq);

/* A response of unknown length: chunked (close-delimited for HTTP/1.0).
 * http_stream_end with complete 0 ends it as broken (the connection closes
 * without the last chunk, so the client can tell). Each returns 0, or -1
 * if the client is gone. */
int http_stream_begin(http_req *rq, int status, const char *type, const char *extra);
int http_stream_write(http_req *rq, const void *p, size_t n);
int http_stream_end(http_req *rq, int complete);

#endif
