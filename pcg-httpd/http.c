/* http.c: see http.h. The loop is one poll over the listening socket, a
 * pipe the request threads give connections back through, and every
 * connection that is reading or closing; a connection handed to a thread
 * is not polled until it comes back, so only one thread touches it at a
 * time. */
#include "http.h"
#include "clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define IN_MAX (16 * 1024)     /* a connection's input buffer */
#define HEAD_MAX (8 * 1024)    /* a request head at most: beyond, 431 */
#define TARGET_MAX 2048        /* a request target at most: beyond, 414 */
#define HEADERS_MAX 64         /* header lines at most: beyond, 431 */
#define LINE_MAX_CHUNK 1024    /* a chunk-size line (extensions included) or trailer */
#define LINGER_MS 1000         /* after a refusal, the client's rest is read this long */
#define LINGER_BYTES (1 << 20) /* or this much */

enum state { C_HEAD, C_BODY, C_BUSY, C_WRITE, C_LINGER };
enum chunk { K_SIZE, K_DATA, K_DATA_END, K_TRAILER };

typedef struct http_conn {
	http_server *srv;
	int fd, slot;
	enum state state;
	int family;
	unsigned char addr[16];  /* the client's, for the per-client count */
	double deadline;         /* of the state */
	int started;             /* a byte of this head arrived */
	int served;              /* requests answered on it */
	int close_after;         /* no further request on this connection */
	int streaming, stream_ok;
	char in[IN_MAX];
	size_t in_len;
	char head[HEAD_MAX + 1]; /* the head, its lines NUL-terminated */
	char target[TARGET_MAX + 1];
	const char *names[HEADERS_MAX], *values[HEADERS_MAX];
	int n_headers;
	long long limit;         /* the body's bytes at most */
	long long left;          /* of a Content-Length body, still to come */
	enum chunk kstate;
	unsigned long long kleft; /* of the chunk */
	size_t cap;
	char *out;               /* a response the loop writes */
	size_t out_len, out_off;
	size_t discarded;
	http_req rq;
} http_conn;

struct http_server {
	http_cfg cfg;
	int lfd, wake[2], port;
	http_conn **conns;
	int n_conns, busy;
	atomic_int stopping;
};

static const char *reason(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 411: return "Length Required";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 417: return "Expectation Failed";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	case 507: return "Insufficient Storage";
	default: return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Server Error";
	}
}

/* ---- server ---- */

http_server *http_new(const struct sockaddr *addr, socklen_t addr_len, const http_cfg *cfg,
		      pcg_err *err)
{
	http_server *s = calloc(1, sizeof *s);
	int one = 1;

	if (s == NULL || (s->conns = calloc((size_t)cfg->max_conns, sizeof *s->conns)) == NULL) {
		free(s);
		pcg_fail(err, "out of memory");
		return NULL;
	}
	s->cfg = *cfg;
	s->wake[0] = s->wake[1] = -1;
	s->lfd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->lfd < 0 || setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(s->lfd, addr, addr_len) < 0 || listen(s->lfd, 1024) < 0 ||
	    pipe2(s->wake, O_CLOEXEC) < 0 || fcntl(s->wake[0], F_SETFL, O_NONBLOCK) < 0) {
		pcg_fail(err, "%s", strerror(errno));
		http_free(&s);
		return NULL;
	}
	union {
		struct sockaddr sa;
		struct sockaddr_in v4;
		struct sockaddr_in6 v6;
	} a;
	socklen_t n = sizeof a;
	if (getsockname(s->lfd, &a.sa, &n) == 0)
		s->port = ntohs(a.sa.sa_family == AF_INET6 ? a.v6.sin6_port : a.v4.sin_port);
	return s;
}

int http_port(const http_server *s)
{
	return s->port;
}

void http_stop(http_server *s)
{
	http_conn *none = NULL;
	atomic_store(&s->stopping, 1);
	if (write(s->wake[1], &none, sizeof none) < 0) {
		/* the loop wakes within a second anyway */
	}
}

void http_free(http_server **ps)
{
	http_server *s = *ps;
	if (s == NULL)
		return;
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->wake[0] >= 0)
		close(s->wake[0]);
	if (s->wake[1] >= 0)
		close(s->wake[1]);
	free(s->conns);
	free(s);
	*ps = NULL;
}

/* ---- connections ---- */

static void conn_close(http_conn *c)
{
	http_server *s = c->srv;
	close(c->fd);
	s->conns[c->slot] = NULL;
	s->n_conns--;
	free(c->out);
	free(c->rq.body);
	free(c);
}

/* Back to reading the next request. */
static void conn_reset_request(http_conn *c)
{
	char peer[sizeof c->rq.peer];
	memcpy(peer, c->rq.peer, sizeof peer);
	free(c->rq.body);
	memset(&c->rq, 0, sizeof c->rq);
	memcpy(c->rq.peer, peer, sizeof peer);
	c->rq.conn = c;
	c->rq.fd = c->fd;
	c->n_headers = 0;
	c->streaming = c->stream_ok = 0;
	c->cap = 0;
	c->state = C_HEAD;
	c->started = 0;
}

static void peer_name(http_conn *c, const struct sockaddr *a)
{
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *v4 = (const void *)a;
		c->family = AF_INET;
		memcpy(c->addr, &v4->sin_addr, 4);
		inet_ntop(AF_INET, &v4->sin_addr, c->rq.peer, sizeof c->rq.peer);
	} else if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *v6 = (const void *)a;
		c->family = AF_INET6;
		memcpy(c->addr, &v6->sin6_addr, 16);
		inet_ntop(AF_INET6, &v6->sin6_addr, c->rq.peer, sizeof c->rq.peer);
	}
}

/* JSON's string escapes for a message of ours. */
static size_t json_escape(char *dst, size_t n, const char *s)
{
	size_t k = 0;
	for (; *s && k + 7 < n; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\') {
			dst[k++] = '\\';
			dst[k++] = (char)ch;
		} else if (ch < 0x20) {
			k += (size_t)snprintf(dst + k, n - k, "\\u%04x", ch);
		} else {
			dst[k++] = (char)ch;
		}
	}
	dst[k] = '\0';
	return k;
}

/* The response head; len -1: chunked (or close-delimited). */
static int head_line(http_req *rq, char *buf, size_t n, int status, const char *type,
		     const char *extra, long long len)
{
	http_conn *c = rq->conn;
	char ln[64] = "";
	if (len >= 0)
		snprintf(ln, sizeof ln, "Content-Length: %lld\r\n", len);
	else if (rq->minor >= 1)
		snprintf(ln, sizeof ln, "Transfer-Encoding: chunked\r\n");
	if (len < 0 && rq->minor < 1)
		c->close_after = 1; /* HTTP/1.0: the end of the body is the end of the connection */
	/* HTTP/1.1 in the status line whatever the request's (RFC 9110 6.2) */
	return snprintf(buf, n, "HTTP/1.1 %d %s\r\n%s%s%s%s%s%s\r\n", status, reason(status), type ? "Content-Type: " : "", type ? type : "",
			type ? "\r\n" : "", ln, c->close_after ? "Connection: close\r\n" : "",
			extra ? extra : "");
}

static int send_v(http_conn *c, struct iovec *v, int n_v);

static int send_all(http_conn *c, const void *p, size_t n)
{
	const char *b = p;
	while (n > 0) {
		ssize_t k = send(c->fd, b, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			c->close_after = 1;
			return -1;
		}
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

int http_reply(http_req *rq, int status, const char *type, const char *extra, const void *body,
	       size_t len)
{
	http_conn *c = rq->conn;
	char head[1024];

	if (rq->status)
		return -1; /* answered already */
	rq->status = status;
	if (c->state != C_BUSY)
		c->close_after = 1; /* refused in the loop: the body is not read */
	int h = head_line(rq, head, sizeof head, status, type, extra, (long long)len);
	if (h < 0 || (size_t)h >= sizeof head)
		h = (int)strlen(head);
	if (rq->head_only)
		len = 0;
	if (c->state != C_BUSY) { /* the loop writes it, never blocking */
		char *out = malloc((size_t)h + len);
		if (out == NULL)
			return -1;
		memcpy(out, head, (size_t)h);
		if (len)
			memcpy(out + h, body, len);
		free(c->out);
		c->out = out;
		c->out_len = (size_t)h + len;
		c->out_off = 0;
		return 0;
	}
	struct iovec v[2] = { { head, (size_t)h }, { (void *)body, len } };
	return send_v(c, v, len ? 2 : 1);
}

int http_continue(http_req *rq)
{
	http_conn *c = rq->conn;
	if (rq->status || c->state != C_BUSY || rq->minor < 1)
		return 1;
	return send_all(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
}

int http_stream_begin(http_req *rq, int status, const char *type, const char *extra)
{
	http_conn *c = rq->conn;
	char head[1024];
	if (rq->status || c->state != C_BUSY)
		return -1;
	rq->status = status;
	c->streaming = 1;
	int h = head_line(rq, head, sizeof head, status, type, extra, -1);
	if (h < 0 || (size_t)h >= sizeof head)
		return -1;
	return send_all(c, head, (size_t)h);
}

/* Writes the n_v pieces of v whole, in one system call where they fit
 * (one segment, not one per piece). */
static int send_v(http_conn *c, struct iovec *v, int n_v)
{
	size_t total = 0;
	int i = 0;
	for (int k = 0; k < n_v; k++)
		total += v[k].iov_len;
	while (total > 0) {
		struct msghdr m = { .msg_iov = v + i, .msg_iovlen = (size_t)(n_v - i) };
		ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			c->close_after = 1;
			return -1;
		}
		total -= (size_t)w;
		while (w > 0) {
			if ((size_t)w >= v[i].iov_len) {
				w -= (ssize_t)v[i].iov_len;
				v[i].iov_len = 0;
				i++;
			} else {
				v[i].iov_base = (char *)v[i].iov_base + w;
				v[i].iov_len -= (size_t)w;
				w = 0;
			}
		}
	}
	return 0;
}

int http_stream_write(http_req *rq, const void *p, size_t n)
{
	http_conn *c = rq->conn;
	char size[24];
	if (n == 0 || rq->head_only)
		return 0;
	if (rq->minor < 1)
		return send_all(c, p, n);
	int k = snprintf(size, sizeof size, "%zx\r\n", n);
	struct iovec v[3] = { { size, (size_t)k }, { (void *)p, n }, { "\r\n", 2 } };
	return send_v(c, v, 3);
}

int http_stream_end(http_req *rq, int complete)
{
	http_conn *c = rq->conn;
	c->stream_ok = complete;
	if (!complete) {
		c->close_after = 1;
		return 0;
	}
	if (rq->minor < 1 || rq->head_only)
		return 0;
	return send_all(c, "0\r\n\r\n", 5);
}

/* ---- what the loop answers itself ---- */

/* Answers status with OpenAI's error JSON and closes after. */
static void refuse(http_conn *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void refuse(http_conn *c, int status, const char *fmt, ...)
{
	http_server *s = c->srv;
	char msg[sizeof c->rq.why / 2], esc[sizeof msg * 2], body[sizeof esc + 128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	json_escape(esc, sizeof esc, msg);
	int n = snprintf(body, sizeof body, "{\n  \"error\": {\n    \"message\": \"%s\",\n    "
			 "\"type\": \"invalid_request_error\",\n    \"param\": null,\n    "
			 "\"code\": null\n  }\n}\n", esc);
	c->close_after = 1;
	if (c->rq.method == NULL)
		c->rq.method = c->rq.path = "-";
	c->rq.head_only = 0;
	snprintf(c->rq.why, sizeof c->rq.why, "%s", msg);
	http_reply(&c->rq, status, "application/json", NULL, body, n > 0 ? (size_t)n : 0);
	c->state = C_WRITE;
	c->deadline = pcg_now() + s->cfg.idle_ms / 1000.0;
	if (s->cfg.on_refused)
		s->cfg.on_refused(&c->rq, s->cfg.arg);
}

/* ---- the head ---- */

static int tchar(int ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* The end of the head in the input (after its empty line), or 0. */
static size_t head_end(const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (b[i] != '\n')
			continue;
		if (i + 1 < n && b[i + 1] == '\n')
			return i + 2;
		if (i + 2 < n && b[i + 1] == '\r' && b[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

const char *http_header(const http_req *rq, const char *name)
{
	const http_conn *c = rq->conn;
	for (int i = 0; i < c->n_headers; i++)
		if (!strcasecmp(c->names[i], name))
			return c->values[i];
	return NULL;
}

/* Whether the comma-separated list v holds token t (case-insensitive). */
static int has_token(const char *v, const char *t)
{
	const size_t n = strlen(t);
	while (v && *v) {
		while (*v == ' ' || *v == '\t' || *v == ',')
			v++;
		size_t k = strcspn(v, ", \t");
		if (k == n && !strncasecmp(v, t, n))
			return 1;
		v += k;
	}
	return 0;
}

/* Parses the head of len bytes at the start of the input. Returns 0, or
 * an HTTP status having refused. */
static int parse_head(http_conn *c, size_t len)
{
	http_req *rq = &c->rq;
	char *p = c->head, *end = c->head + len;

	memcpy(c->head, c->in, len);
	c->head[len] = '\0';
	/* lines: LF, or CRLF; a CR anywhere else is refused */
	char *lines[HEADERS_MAX + 2];
	int n_lines = 0;
	while (p < end) {
		char *lf = memchr(p, '\n', (size_t)(end - p));
		if (lf == NULL)
			break;
		size_t ll = (size_t)(lf - p);
		if (ll && p[ll - 1] == '\r')
			ll--;
		p[ll] = '\0';
		if (memchr(p, '\0', ll)) {
			refuse(c, 400, "Bad request: a NUL byte in the request head.");
			return 400;
		}
		if (ll == 0)
			break; /* the empty line */
		if (n_lines == HEADERS_MAX + 1) {
			refuse(c, 431, "Request header fields too large: at most %d header lines.",
			       HEADERS_MAX);
			return 431;
		}
		lines[n_lines++] = p;
		p = lf + 1;
	}
	for (int i = 0; i < n_lines; i++)
		for (const char *q = lines[i]; *q; q++)
			if (((unsigned char)*q < 0x20 && *q != '\t') || *q == 0x7f) {
				refuse(c, 400, "Bad request: a control byte (a stray CR?) in the "
				       "request head.");
				return 400;
			}
	/* the request line: METHOD SP TARGET SP HTTP/1.x */
	char *line = lines[0], *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (sp1 == NULL || sp2 == NULL || strchr(sp2 + 1, ' ') || sp1 == line || sp2 == sp1 + 1) {
		refuse(c, 400, "Bad request: the request line is not 'METHOD TARGET HTTP/1.1'.");
		return 400;
	}
	*sp1 = *sp2 = '\0';
	const char *version = sp2 + 1;
	for (const char *q = line; *q; q++)
		if (!tchar(*q) || q - line >= 16) {
			const int st = q - line >= 16 ? 501 : 400;
			refuse(c, st, "Bad request: the method is not a method of HTTP.");
			return st;
		}
	if (!strcmp(version, "HTTP/1.1")) {
		rq->minor = 1;
	} else if (!strcmp(version, "HTTP/1.0")) {
		rq->minor = 0;
	} else if (!strncmp(version, "HTTP/", 5) && version[5] >= '0' && version[5] <= '9' &&
		   version[6] == '.' && version[7] >= '0' && version[7] <= '9' && !version[8]) {
		rq->minor = 1;
		refuse(c, 505, "HTTP version not supported: %s (this server speaks HTTP/1.1).",
		       version);
		return 505;
	} else {
		rq->minor = 1;
		refuse(c, 400, "Bad request: the request line is not 'METHOD TARGET HTTP/1.1'.");
		return 400;
	}
	const char *target = sp1 + 1;
	if (strlen(target) > TARGET_MAX) {
		refuse(c, 414, "The request target is longer than %d bytes.", TARGET_MAX);
		return 414;
	}
	if (target[0] != '/') {
		refuse(c, 400, "Bad request: the target must be a path starting with '/'.");
		return 400;
	}
	memcpy(c->target, target, strlen(target) + 1);
	char *qm = strchr(c->target, '?');
	if (qm)
		*qm = '\0';
	rq->method = line;
	rq->path = c->target;
	rq->query = qm ? qm + 1 : "";
	rq->head_only = !strcmp(line, "HEAD");
	/* the header fields: NAME ":" OWS VALUE OWS */
	for (int i = 1; i < n_lines; i++) {
		char *h = lines[i], *colon = strchr(h, ':');
		if (*h == ' ' || *h == '\t') {
			refuse(c, 400, "Bad request: a folded header line (obsolete, refused).");
			return 400;
		}
		if (colon == NULL || colon == h) {
			refuse(c, 400, "Bad request: a header line without a name and a ':'.");
			return 400;
		}
		*colon = '\0';
		for (const char *q = h; *q; q++)
			if (!tchar(*q)) {
				refuse(c, 400, "Bad request: a header name with a character HTTP does "
				       "not allow (a space before ':'?).");
				return 400;
			}
		char *v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		char *e = v + strlen(v);
		while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
			*--e = '\0';
		c->names[c->n_headers] = h;
		c->values[c->n_headers++] = v;
	}
	/* framing: one Content-Length, or chunked alone (RFC 9112 6.1, 6.3) */
	long long cl = -1;
	int n_te = 0, n_host = 0;
	const char *te = NULL;
	for (int i = 0; i < c->n_headers; i++) {
		if (!strcasecmp(c->names[i], "Host"))
			n_host++;
		if (!strcasecmp(c->names[i], "Transfer-Encoding")) {
			n_te++;
			te = c->values[i];
		}
		if (strcasecmp(c->names[i], "Content-Length"))
			continue;
		const char *v = c->values[i];
		long long x = 0;
		if (!*v) {
			refuse(c, 400, "Bad request: an empty Content-Length.");
			return 400;
		}
		for (; *v; v++) {
			if (*v < '0' || *v > '9') {
				refuse(c, 400, "Bad request: Content-Length '%.40s' is not a number.",
				       c->values[i]);
				return 400;
			}
			x = x > (1LL << 50) ? x : x * 10 + (*v - '0'); /* huge stays huge */
		}
		if (cl >= 0 && cl != x) {
			refuse(c, 400, "Bad request: two different Content-Lengths.");
			return 400;
		}
		cl = x;
	}
	if (rq->minor >= 1 && n_host != 1) {
		refuse(c, 400, "Bad request: an HTTP/1.1 request needs exactly one Host header "
		       "(it has %d).", n_host);
		return 400;
	}
	if (n_te) {
		if (rq->minor < 1) {
			refuse(c, 400, "Bad request: Transfer-Encoding in an HTTP/1.0 request.");
			return 400;
		}
		if (cl >= 0) {
			refuse(c, 400, "Bad request: Content-Length and Transfer-Encoding together.");
			return 400;
		}
		if (n_te > 1 || strcasecmp(te, "chunked")) {
			int only_chunked = 1;
			for (int i = 0; i < c->n_headers; i++)
				if (!strcasecmp(c->names[i], "Transfer-Encoding")) {
					char tmp[256];
					snprintf(tmp, sizeof tmp, "%s", c->values[i]);
					for (char *t = strtok(tmp, ", \t"); t; t = strtok(NULL, ", \t"))
						only_chunked &= !strcasecmp(t, "chunked");
				}
			if (only_chunked) {
				refuse(c, 400, "Bad request: chunked more than once.");
				return 400;
			}
			refuse(c, 501, "Transfer-Encoding '%.60s' is not implemented: send the body "
			       "as it is, or chunked.", te);
			return 501;
		}
		rq->chunked = 1;
	}
	rq->content_length = cl;
	/* every Connection header counts (a list may be split over several) */
	int keep = 0, close_ = 0;
	for (int i = 0; i < c->n_headers; i++)
		if (!strcasecmp(c->names[i], "Connection")) {
			keep |= has_token(c->values[i], "keep-alive");
			close_ |= has_token(c->values[i], "close");
		}
	if (close_ || (rq->minor < 1 && !keep))
		c->close_after = 1;
	return 0;
}

/* ---- the body ---- */

static int body_room(http_conn *c, size_t more)
{
	http_req *rq = &c->rq;
	if (rq->len + more + 1 <= c->cap)
		return 0;
	size_t cap = c->cap ? c->cap : 4096;
	while (cap < rq->len + more + 1)
		cap *= 2;
	if ((long long)cap > c->limit + 1)
		cap = (size_t)c->limit + 1;
	char *b = realloc(rq->body, cap);
	if (b == NULL)
		return -1;
	rq->body = b;
	c->cap = cap;
	return 0;
}

/* Takes what the input holds of the body. Returns 1 when the body is
 * complete, 0 for more, -1 having refused. */
static int take_body(http_conn *c)
{
	http_req *rq = &c->rq;
	size_t used = 0;
	int done = 0;

	if (!rq->chunked) {
		size_t k = c->in_len < (size_t)c->left ? c->in_len : (size_t)c->left;
		if (k && body_room(c, k) < 0) {
			refuse(c, 500, "The server is out of memory.");
			return -1;
		}
		if (k) /* an empty body may have no buffer: no memcpy from or to NULL */
			memcpy(rq->body + rq->len, c->in, k);
		rq->len += k;
		c->left -= (long long)k;
		used = k;
		done = c->left == 0;
	}
	while (rq->chunked && !done && used < c->in_len) {
		char *p = c->in + used;
		size_t avail = c->in_len - used;
		if (c->kstate == K_DATA) {
			size_t k = avail < c->kleft ? avail : (size_t)c->kleft;
			memcpy(rq->body + rq->len, p, k);
			rq->len += k;
			c->kleft -= k;
			used += k;
			if (c->kleft == 0)
				c->kstate = K_DATA_END;
			continue;
		}
		char *lf = memchr(p, '\n', avail);
		if (lf == NULL) {
			if (avail > LINE_MAX_CHUNK) {
				refuse(c, 400, "Bad request: a chunk-size line or trailer longer than "
				       "%d bytes.", LINE_MAX_CHUNK);
				return -1;
			}
			break;
		}
		size_t ll = (size_t)(lf - p); /* the line without its CRLF */
		/* every line of the chunked framing ends in CRLF (RFC 9112 7.1):
		 * a bare LF is read otherwise by some proxies (smuggling) */
		if (ll == 0 || p[ll - 1] != '\r') {
			refuse(c, 400, "Bad request: a line of the chunked body ends in a bare LF, "
			       "not CRLF.");
			return -1;
		}
		ll--;
		used += (size_t)(lf - p) + 1;
		if (c->kstate == K_DATA_END) {
			if (ll != 0) {
				refuse(c, 400, "Bad request: a chunk's data is not followed by CRLF.");
				return -1;
			}
			c->kstate = K_SIZE;
		} else if (c->kstate == K_TRAILER) {
			if (ll == 0)
				done = 1;
		} else { /* K_SIZE: HEX [; extensions] */
			unsigned long long x = 0;
			size_t i = 0;
			for (; i < ll; i++) {
				int ch = p[i], d = ch >= '0' && ch <= '9' ? ch - '0'
					   : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
					   : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
				if (d < 0)
					break;
				if (x > (unsigned long long)c->limit) /* stays over: no overflow */
					continue;
				x = x * 16 + (unsigned)d;
			}
			/* 1*HEXDIG, then only BWS ";" extensions (RFC 9112 7.1.1):
			 * "49 junk" or "0 junk" is refused, not read as 49 or 0 */
			size_t e = i;
			while (e < ll && (p[e] == ' ' || p[e] == '\t'))
				e++;
			int bad = i == 0 || (e < ll && p[e] != ';');
			for (size_t j = e; !bad && j < ll; j++)
				bad = (unsigned char)p[j] < 0x20 && p[j] != '\t';
			if (bad) {
				refuse(c, 400, "Bad request: a chunk-size line that is not hexadecimal "
				       "digits, optionally followed by ;extensions.");
				return -1;
			}
			if (x > (unsigned long long)(c->limit - (long long)rq->len)) {
				refuse(c, 413, "The request body is larger than %lld bytes.", c->limit);
				return -1;
			}
			if (x == 0) {
				c->kstate = K_TRAILER;
			} else {
				if (body_room(c, (size_t)x) < 0) {
					refuse(c, 500, "The server is out of memory.");
					return -1;
				}
				c->kleft = x;
				c->kstate = K_DATA;
			}
		}
	}
	memmove(c->in, c->in + used, c->in_len - used);
	c->in_len -= used;
	return done;
}

/* ---- the request's thread ---- */

static void *request_thread(void *arg)
{
	http_conn *c = arg;
	http_server *s = c->srv;
	http_req *rq = &c->rq;

	s->cfg.on_request(rq, s->cfg.arg);
	if (rq->status == 0)
		http_reply(rq, 500, NULL, NULL, NULL, 0);
	if (c->streaming && !c->stream_ok)
		c->close_after = 1;
	if (write(s->wake[1], &c, sizeof c) != sizeof c) {
		/* a pipe write of a pointer is atomic; only a closed pipe fails */
	}
	return NULL;
}

static void dispatch(http_conn *c)
{
	http_server *s = c->srv;
	pthread_attr_t at;
	pthread_t t;

	if (c->rq.body == NULL && body_room(c, 0) < 0) {
		refuse(c, 500, "The server is out of memory.");
		return;
	}
	c->rq.body[c->rq.len] = '\0';
#ifdef PCG_HTTP_FUZZ
	/* the fuzzer's: the request is complete; no thread answers it */
	c->state = C_BUSY;
	return;
#endif
	c->state = C_BUSY;
	s->busy++;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&t, &at, request_thread, c);
	pthread_attr_destroy(&at);
	if (rc != 0) {
		s->busy--;
		c->state = C_BODY;
		refuse(c, 503, "The server cannot start a thread for the request (%s).",
		       strerror(rc));
	}
}

/* Moves a connection on with what its input holds. */
static void advance(http_conn *c)
{
	http_server *s = c->srv;
	http_req *rq = &c->rq;

	if (c->state == C_HEAD) {
		/* empty lines before a request line are skipped (RFC 9112 2.2) */
		size_t skip = 0;
		while (skip < c->in_len && (c->in[skip] == '\r' || c->in[skip] == '\n'))
			skip++;
		memmove(c->in, c->in + skip, c->in_len - skip);
		c->in_len -= skip;
		/* a request line starts with a method: bytes that cannot (a TLS
		 * hello, a stray protocol) are refused now, not at the deadline */
		for (size_t i = 0; i < c->in_len && c->in[i] != ' '; i++)
			if (!tchar((unsigned char)c->in[i])) {
				refuse(c, 400, "Bad request: this is not an HTTP/1.1 request (its "
				       "first line must be 'METHOD TARGET HTTP/1.1').");
				return;
			}
		if (c->in_len && !c->started) {
			c->started = 1;
			rq->t0 = pcg_now();
			c->deadline = pcg_now() + s->cfg.head_ms / 1000.0;
		}
		size_t end = head_end(c->in, c->in_len);
		if (end == 0 || end > HEAD_MAX) {
			if (end > HEAD_MAX || c->in_len > HEAD_MAX)
				refuse(c, 431, "Request header fields too large: the head is over %d "
				       "bytes.", HEAD_MAX);
			return;
		}
		if (parse_head(c, end) != 0)
			return;
		memmove(c->in, c->in + end, c->in_len - end);
		c->in_len -= end;
		const char *expect = http_header(rq, "Expect");
		if (expect && strcasecmp(expect, "100-continue")) {
			refuse(c, 417, "Expectation '%.60s' not supported.", expect);
			return;
		}
		/* the application's turn: the token is checked before anything is
		 * allocated for the request */
		c->limit = s->cfg.on_head(rq, s->cfg.arg);
		if (c->limit < 0) {
			c->close_after = 1;
			c->state = C_WRITE;
			c->deadline = pcg_now() + s->cfg.idle_ms / 1000.0;
			if (s->cfg.on_refused)
				s->cfg.on_refused(rq, s->cfg.arg);
			return;
		}
		if (rq->content_length > c->limit) {
			refuse(c, 413, "The request body is larger than %lld bytes.", c->limit);
			return;
		}
		c->left = rq->content_length > 0 ? rq->content_length : 0;
		c->kstate = K_SIZE;
		c->state = C_BODY;
		c->deadline = pcg_now() + s->cfg.body_ms / 1000.0;
		if (expect && (rq->chunked || c->left > 0) && c->in_len == 0)
			send(c->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	if (c->state == C_BODY) {
		if (!rq->chunked && c->left == 0) {
			dispatch(c);
			return;
		}
		int r = take_body(c);
		if (r == 1)
			dispatch(c);
	}
}

/* The deadline of a connection passed. */
static void expire(http_conn *c)
{
	const http_cfg *cfg = &c->srv->cfg;
	switch (c->state) {
	case C_HEAD:
		if (!c->started && c->served) { /* an idle kept-alive connection */
			conn_close(c);
			return;
		}
		refuse(c, 408, "Request timeout: the request head did not arrive within %.3g s "
		       "(pcg-httpd --head-timeout-ms).", cfg->head_ms / 1000.0);
		return;
	case C_BODY:
		refuse(c, 408, "Request timeout: the request body did not arrive within %.3g s "
		       "(pcg-httpd --body-timeout-ms).", cfg->body_ms / 1000.0);
		return;
	default:
		conn_close(c);
	}
}

/* Input or room for output on a connection. */
static void service(http_conn *c, short revents)
{
	if (c->state == C_WRITE) {
		if (c->out == NULL) {
			conn_close(c);
			return;
		}
		if (revents & (POLLERR | POLLHUP) && !(revents & POLLOUT)) {
			conn_close(c);
			return;
		}
		ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (k <= 0) {
			conn_close(c);
			return;
		}
		c->out_off += (size_t)k;
		if (c->out_off < c->out_len)
			return;
		/* written: the client's rest is read a moment, so that closing
		 * with unread input does not reset the answer away */
		shutdown(c->fd, SHUT_WR);
		c->state = C_LINGER;
		c->deadline = pcg_now() + LINGER_MS / 1000.0;
		return;
	}
	char drop[4096];
	char *dst = c->state == C_LINGER ? drop : c->in + c->in_len;
	size_t room = c->state == C_LINGER ? sizeof drop : sizeof c->in - c->in_len;
	ssize_t k = recv(c->fd, dst, room, MSG_DONTWAIT);
	if (k < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (k <= 0) {
		if (k == 0 && (c->state == C_BODY || (c->state == C_HEAD && c->in_len > 0))) {
			refuse(c, 400, "Bad request: the connection was shut down in the middle of "
			       "the request.");
			return;
		}
		conn_close(c);
		return;
	}
	if (c->state == C_LINGER) {
		c->discarded += (size_t)k;
		if (c->discarded > LINGER_BYTES)
			conn_close(c);
		return;
	}
	c->in_len += (size_t)k;
	advance(c);
}

/* A connection a request's thread gave back. */
static void resume(http_conn *c)
{
	http_server *s = c->srv;
	s->busy--;
	if (c->close_after || atomic_load(&s->stopping)) {
		conn_close(c);
		return;
	}
	c->served++;
	conn_reset_request(c);
	c->deadline = pcg_now() + s->cfg.idle_ms / 1000.0;
	if (c->in_len)
		advance(c); /* a request sent before this one was answered */
}

static int same_client(const http_conn *a, int family, const unsigned char *addr)
{
	return a->family == family && !memcmp(a->addr, addr, family == AF_INET ? 4 : 16);
}

static void accept_some(http_server *s)
{
	for (int i = 0; i < 64; i++) {
		union {
			struct sockaddr sa;
			struct sockaddr_in v4;
			struct sockaddr_in6 v6;
		} a;
		socklen_t al = sizeof a;
		int fd = accept4(s->lfd, &a.sa, &al, SOCK_CLOEXEC);
		if (fd < 0)
			return;
		http_conn *c = calloc(1, sizeof *c);
		if (c == NULL) {
			close(fd);
			continue;
		}
		c->srv = s;
		c->fd = fd;
		peer_name(c, &a.sa);
		conn_reset_request(c);
		c->deadline = c->rq.t0 = pcg_now();
		c->deadline += s->cfg.head_ms / 1000.0;
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		struct timeval tv = { s->cfg.idle_ms / 1000, (s->cfg.idle_ms % 1000) * 1000 };
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		int mine = 0, slot = -1;
		for (int k = 0; k < s->cfg.max_conns; k++) {
			if (s->conns[k] == NULL) {
				if (slot < 0)
					slot = k;
			} else if (same_client(s->conns[k], c->family, c->addr)) {
				mine++;
			}
		}
		if (slot < 0 || mine >= s->cfg.max_per_client) {
			/* answered at once, without reading: a reset loses nothing here */
			c->slot = -1;
			c->rq.minor = 1;
			c->rq.method = c->rq.path = "-";
			c->close_after = 1;
			char msg[200];
			if (slot < 0)
				snprintf(msg, sizeof msg, "The server holds %d connections, its most "
					 "(pcg-httpd --max-connections). Try again later.",
					 s->cfg.max_conns);
			else
				snprintf(msg, sizeof msg, "Too many connections from %s: %d at once at "
					 "most (pcg-httpd --max-per-client).", c->rq.peer,
					 s->cfg.max_per_client);
			char body[400], esc[300];
			json_escape(esc, sizeof esc, msg);
			int n = snprintf(body, sizeof body, "{\"error\": {\"message\": \"%s\", \"type\": "
					 "\"requests\", \"param\": null, \"code\": "
					 "\"rate_limit_exceeded\"}}\n", esc);
			char head[256];
			int h = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: "
					 "application/json\r\nContent-Length: %d\r\nConnection: "
					 "close\r\n\r\n", slot < 0 ? 503 : 429,
					 reason(slot < 0 ? 503 : 429), n);
			struct iovec v[2] = { { head, (size_t)h }, { body, (size_t)n } };
			struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };
			if (sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
				/* nothing more to do for it */
			}
			shutdown(fd, SHUT_WR);
			c->rq.status = slot < 0 ? 503 : 429;
			snprintf(c->rq.why, sizeof c->rq.why, "%s", msg);
			if (s->cfg.on_refused)
				s->cfg.on_refused(&c->rq, s->cfg.arg);
			close(fd);
			free(c);
			continue;
		}
		c->slot = slot;
		s->conns[slot] = c;
		s->n_conns++;
	}
}

int http_run(http_server *s)
{
	const int cap = s->cfg.max_conns + 2;
	struct pollfd *pfd = calloc((size_t)cap, sizeof *pfd);
	http_conn **who = calloc((size_t)cap, sizeof *who);

	if (pfd == NULL || who == NULL) {
		free(pfd);
		free(who);
		return -1;
	}
	while (!atomic_load(&s->stopping)) {
		int n = 0;
		double t = pcg_now(), next = t + 1;
		pfd[n++] = (struct pollfd){ s->lfd, POLLIN, 0 };
		pfd[n++] = (struct pollfd){ s->wake[0], POLLIN, 0 };
		for (int k = 0; k < s->cfg.max_conns; k++) {
			http_conn *c = s->conns[k];
			if (c == NULL || c->state == C_BUSY)
				continue;
			if (t >= c->deadline) {
				expire(c);
				if ((c = s->conns[k]) == NULL)
					continue;
			}
			if (c->deadline < next)
				next = c->deadline;
			who[n] = c;
			pfd[n++] = (struct pollfd){ c->fd, c->state == C_WRITE ? POLLOUT : POLLIN, 0 };
		}
		int ms = (int)((next - t) * 1000) + 1;
		if (poll(pfd, (nfds_t)n, ms < 1 ? 1 : ms) < 0 && errno != EINTR)
			break;
		for (int i = 2; i < n; i++)
			if (pfd[i].revents)
				service(who[i], pfd[i].revents);
		if (pfd[1].revents & POLLIN) {
			http_conn *back[64];
			ssize_t k;
			while ((k = read(s->wake[0], back, sizeof back)) > 0)
				for (size_t i = 0; i < (size_t)k / sizeof *back; i++)
					if (back[i])
						resume(back[i]);
		}
		if (pfd[0].revents & POLLIN)
			accept_some(s);
	}
	/* stopping: no new connections; those in flight are cut off and waited for */
	close(s->lfd);
	s->lfd = -1;
	for (int k = 0; k < s->cfg.max_conns; k++) {
		http_conn *c = s->conns[k];
		if (c && c->state == C_BUSY)
			shutdown(c->fd, SHUT_RDWR);
		else if (c)
			conn_close(c);
	}
	while (s->busy > 0) {
		struct pollfd w = { s->wake[0], POLLIN, 0 };
		poll(&w, 1, 100);
		http_conn *back[64];
		ssize_t k;
		while ((k = read(s->wake[0], back, sizeof back)) > 0)
			for (size_t i = 0; i < (size_t)k / sizeof *back; i++)
				if (back[i]) {
					s->busy--;
					conn_close(back[i]);
				}
	}
	free(pfd);
	free(who);
	return 0;
}

/* ---- the query ---- */

static int hexval(int ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
	       : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

int http_query(const http_req *rq, const char *name, char *buf, size_t n)
{
	const char *q = rq->query;
	const size_t nl = strlen(name);
	while (*q) {
		size_t k = strcspn(q, "&");
		const char *eq = memchr(q, '=', k);
		size_t kn = eq ? (size_t)(eq - q) : k;
		if (kn == nl && !memcmp(q, name, nl)) {
			const char *v = eq ? eq + 1 : q + k, *e = q + k;
			size_t o = 0;
			for (; v < e; v++) {
				int ch = (unsigned char)*v;
				if (ch == '%') {
					if (e - v < 3 || hexval(v[1]) < 0 || hexval(v[2]) < 0)
						return -2;
					ch = hexval(v[1]) * 16 + hexval(v[2]);
					v += 2;
				} else if (ch == '+') {
					ch = ' ';
				}
				if (o + 1 >= n)
					return -2;
				buf[o++] = (char)ch;
			}
			buf[o] = '\0';
			return (int)o;
		}
		q += k;
		if (*q == '&')
			q++;
	}
	return -1;
}

#ifdef PCG_HTTP_FUZZ
/* The fuzzer's entry (tests/fuzz/fuzz_http.c): data arrives on one
 * connection in pieces of `piece` bytes, as recv would give them, through
 * the loop's own parser (advance: the head, its headers, a Content-Length
 * or chunked body); a complete request is taken as answered and the next
 * one read from what remains, as on a kept-alive connection. No socket, no
 * thread. Returns the requests completed. */
static long long fuzz_on_head(http_req *rq, void *arg)
{
	(void)rq;
	(void)arg;
	return 1 << 16;
}

int http_fuzz_feed(const unsigned char *data, size_t n, size_t piece)
{
	static http_conn *slot[1];
	http_server s = { .cfg = { .max_conns = 1, .max_per_client = 1, .head_ms = 1000,
				   .body_ms = 1000, .idle_ms = 1000, .on_head = fuzz_on_head },
			  .conns = slot, .n_conns = 1 };
	http_conn *c = calloc(1, sizeof *c);
	int done = 0;

	if (c == NULL)
		return 0;
	c->srv = &s;
	c->fd = -1;
	conn_reset_request(c);
	if (piece == 0)
		piece = 1;
	while (n > 0 && (c->state == C_HEAD || c->state == C_BODY)) {
		size_t k = n < piece ? n : piece;
		if (k > sizeof c->in - c->in_len)
			k = sizeof c->in - c->in_len;
		if (k == 0)
			break; /* a full buffer the parser did not take */
		memcpy(c->in + c->in_len, data, k);
		c->in_len += k;
		data += k;
		n -= k;
		advance(c);
		if (c->state == C_BUSY) { /* complete: the next request, as kept alive */
			done++;
			if (c->close_after)
				break;
			conn_reset_request(c);
			advance(c);
		}
	}
	free(c->out);
	free(c->rq.body);
	free(c);
	return done;
}
#endif
