/* net.c: ZeroMQ sockets with limits, and framed send/receive (see net.h). */
#include "net.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "proto.h"

#define ZCHECK(call, err, what) \
	do { \
		if ((call) != 0) \
			return pcg_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, what, \
					zmq_strerror(zmq_errno())); \
	} while (0)

#define MAX_FRAMES 4 /* route, delimiter, body: anything beyond is drained */

int net_endpoint_ok(const char *url, pcg_err *err)
{
	const char *h;
	size_t n;

	if (!strncmp(url, "inproc://", 9) || !strncmp(url, "ipc://", 6))
		return url[strlen(url) - 1] != '/' ? 0 : pcg_fail(err, "%s: no path", url);
	if (strncmp(url, "tcp://", 6) != 0)
		return pcg_fail(err, "%s: not an inproc://, ipc:// or tcp:// endpoint", url);
	h = url + 6;
	n = strcspn(h, ":");
	if (h[0] == '[')
		n = strcspn(h, "]") + 1;
	if ((n == 9 && !strncmp(h, "localhost", 9)) || (n == 5 && !strncmp(h, "[::1]", 5)) ||
	    !strncmp(h, "127.", 4))
		return 0;
	return pcg_fail(err, "%s: tcp on a non-loopback address needs CURVE keys and a ZAP "
			"allow-list, which this build does not configure; refusing", url);
}

static int limits(void *s, pcg_err *err)
{
	int linger = 0, hwm = 64;
	int64_t max = PROTO_MAX_MSG;

	ZCHECK(zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger), err, "ZMQ_LINGER");
	ZCHECK(zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof max), err, "ZMQ_MAXMSGSIZE");
	ZCHECK(zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm), err, "ZMQ_SNDHWM");
	ZCHECK(zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm), err, "ZMQ_RCVHWM");
	return 0;
}

static void *open_socket(void *ctx, int type, const char *url, int bind, pcg_err *err)
{
	void *s;
	int timeo = 1000; /* sends never block long: a stuck peer is an error */

	if (net_endpoint_ok(url, err) < 0)
		return NULL;
	s = zmq_socket(ctx, type);
	if (s == NULL) {
		pcg_fail(err, "zmq_socket: %s", zmq_strerror(zmq_errno()));
		return NULL;
	}
	if (limits(s, err) < 0 ||
	    zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeo, sizeof timeo) != 0) {
		zmq_close(s);
		return NULL;
	}
	if (type == ZMQ_ROUTER) { /* unroutable replies are errors, not silent drops */
		int one = 1;
		zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
	}
	if ((bind ? zmq_bind(s, url) : zmq_connect(s, url)) != 0) {
		pcg_fail(err, "%s %s: %s", bind ? "bind" : "connect", url, zmq_strerror(zmq_errno()));
		zmq_close(s);
		return NULL;
	}
	return s;
}

void *net_server(void *ctx, const char *url, pcg_err *err)
{
	return open_socket(ctx, ZMQ_ROUTER, url, 1, err);
}

void *net_client(void *ctx, const char *url, pcg_err *err)
{
	return open_socket(ctx, ZMQ_DEALER, url, 0, err);
}

void net_close(void **sock)
{
	if (sock && *sock) {
		zmq_close(*sock);
		*sock = NULL;
	}
}

void net_server_close(void **sock, const char *url)
{
	if (sock && *sock) {
		zmq_unbind(*sock, url);
		net_close(sock);
		/* libzmq 4.3 removes the file asynchronously, if at all, when the
		 * process exits right after: remove it here. */
		if (!strncmp(url, "ipc://", 6))
			unlink(url + 6);
	}
}

static int wait_in(void *sock, int timeout_ms)
{
	zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };
	int rc = zmq_poll(&it, 1, timeout_ms);
	return rc > 0 && (it.revents & ZMQ_POLLIN) ? 1 : rc < 0 && zmq_errno() != EINTR ? -1 : 0;
}

/* Receives every frame of one message; keeps the first MAX_FRAMES. */
static int recv_frames(void *sock, zmq_msg_t *f, int *n, int *dropped)
{
	int more = 1;

	*n = 0;
	*dropped = 0;
	while (more) {
		zmq_msg_t tmp, *m = *n < MAX_FRAMES ? &f[*n] : &tmp;
		zmq_msg_init(m);
		if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(m);
			return -1;
		}
		more = zmq_msg_more(m);
		if (m == &tmp) {
			zmq_msg_close(m);
			(*dropped)++;
		} else {
			(*n)++;
		}
	}
	return 0;
}

static void close_frames(zmq_msg_t *f, int n)
{
	for (int i = 0; i < n; i++)
		zmq_msg_close(&f[i]);
}

static unsigned char *copy_body(zmq_msg_t *m, size_t *len)
{
	unsigned char *b;

	*len = zmq_msg_size(m);
	b = malloc(*len ? *len : 1);
	if (b)
		memcpy(b, zmq_msg_data(m), *len);
	return b;
}

int net_recv_req(void *sock, net_req *r, int timeout_ms, pcg_err *err)
{
	zmq_msg_t f[MAX_FRAMES];
	int n, dropped, w, rc = -1;

	memset(r, 0, sizeof *r);
	w = wait_in(sock, timeout_ms);
	if (w <= 0)
		return w < 0 ? pcg_fail(err, "zmq_poll: %s", zmq_strerror(zmq_errno())) : 0;
	if (recv_frames(sock, f, &n, &dropped) < 0)
		return zmq_errno() == EAGAIN || zmq_errno() == EINTR ? 0
			: pcg_fail(err, "zmq_msg_recv: %s", zmq_strerror(zmq_errno()));
	/* ROUTER: [route][body] from a DEALER, [route][empty][body] from a REQ. */
	if (dropped || n < 2 || n > 3 || zmq_msg_size(&f[0]) > sizeof r->route ||
	    (n == 3 && zmq_msg_size(&f[1]) != 0)) {
		pcg_fail(err, "dropped a message of %d frames: not [route][(empty)][body]", n + dropped);
		goto out;
	}
	r->route_len = zmq_msg_size(&f[0]);
	memcpy(r->route, zmq_msg_data(&f[0]), r->route_len);
	r->delim = n == 3;
	r->body = copy_body(&f[n - 1], &r->len);
	if (r->body == NULL) {
		pcg_fail(err, "out of memory for a %zu-byte message", zmq_msg_size(&f[n - 1]));
		goto out;
	}
	rc = 1;
out:
	close_frames(f, n);
	return rc;
}

static void free_body(void *data, void *hint)
{
	(void)hint;
	free(data);
}

/* The body is handed to libzmq without a copy and freed when it is sent. */
static int send_owned(void *sock, void *body, size_t len)
{
	zmq_msg_t m;

	if (zmq_msg_init_data(&m, body, len, free_body, NULL) != 0) {
		free(body);
		return -1;
	}
	if (zmq_msg_send(&m, sock, 0) < 0) {
		zmq_msg_close(&m); /* frees body */
		return -1;
	}
	return 0;
}

int net_reply_owned(void *sock, const net_req *r, void *body, size_t len, pcg_err *err)
{
	if (zmq_send(sock, r->route, r->route_len, ZMQ_SNDMORE) < 0 ||
	    (r->delim && zmq_send(sock, "", 0, ZMQ_SNDMORE) < 0)) {
		free(body);
		return pcg_fail(err, "reply: %s", zmq_strerror(zmq_errno()));
	}
	if (send_owned(sock, body, len) < 0)
		return pcg_fail(err, "reply: %s", zmq_strerror(zmq_errno()));
	return 0;
}

int net_reply(void *sock, const net_req *r, const void *body, size_t len, pcg_err *err)
{
	if (zmq_send(sock, r->route, r->route_len, ZMQ_SNDMORE) < 0 ||
	    (r->delim && zmq_send(sock, "", 0, ZMQ_SNDMORE) < 0) ||
	    zmq_send(sock, body, len, 0) < 0)
		return pcg_fail(err, "reply: %s", zmq_strerror(zmq_errno()));
	return 0;
}

void net_req_free(net_req *r)
{
	free(r->body);
	r->body = NULL;
}

int net_send(void *sock, const void *body, size_t len, pcg_err *err)
{
	if (zmq_send(sock, body, len, 0) < 0)
		return pcg_fail(err, "send: %s", zmq_strerror(zmq_errno()));
	return 0;
}

int net_recv(void *sock, void **body, size_t *len, int timeout_ms, pcg_err *err)
{
	zmq_msg_t f[MAX_FRAMES];
	int n, dropped, w;

	*body = NULL;
	w = wait_in(sock, timeout_ms);
	if (w <= 0)
		return w < 0 ? pcg_fail(err, "zmq_poll: %s", zmq_strerror(zmq_errno())) : 0;
	if (recv_frames(sock, f, &n, &dropped) < 0)
		return zmq_errno() == EAGAIN || zmq_errno() == EINTR ? 0
			: pcg_fail(err, "zmq_msg_recv: %s", zmq_strerror(zmq_errno()));
	if (n != 1 || dropped) {
		close_frames(f, n);
		return pcg_fail(err, "reply of %d frames, want 1", n + dropped);
	}
	*body = copy_body(&f[0], len);
	close_frames(f, n);
	return *body ? 1 : pcg_fail(err, "out of memory for a %zu-byte reply", *len);
}
