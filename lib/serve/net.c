/* net.c: ZeroMQ sockets with limits, and framed send/receive (see net.h). */
#include "net.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "fileio.h"
#include "proto.h"

#define ZCHECK(call, err, what) \
	do { \
		if ((call) != 0) \
			return pcg_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, what, \
					zmq_strerror(zmq_errno())); \
	} while (0)

#define MAX_FRAMES 4 /* route, delimiter, body: anything beyond is drained */

/* ---------------------------------------------------------------- CURVE */

#define MAX_KEYS 256

static struct {
	int have_key;
	char pub[41], sec[41];
	int n_allow;
	char allow[MAX_KEYS][41];
	int n_peers;
	char peer_url[MAX_KEYS][256], peer_key[MAX_KEYS][41];
	char any_peer[41]; /* a bare key in the peers file: for every URL */
	void *zap_ctx;     /* the context whose ZAP handler runs */
} curve;

static int z85_key(const char *s, size_t n)
{
	uint8_t bin[32];
	char tmp[41];

	if (n != 40)
		return 0;
	memcpy(tmp, s, 40);
	tmp[40] = '\0';
	return zmq_z85_decode(bin, tmp) != NULL;
}

/* A key or peers file is a few lines per key, at most MAX_KEYS keys. */
#define MAX_KEY_FILE (1 << 20)
#define MAX_KEY_LINE 1024

/* Calls line(words, n) for each non-empty, non-comment line of path, a
 * regular text file of at most MAX_KEY_FILE bytes (a device such as
 * /dev/zero or a FIFO is refused before it is read). */
static int read_lines(const char *path, int (*line)(char **w, int n, pcg_err *err), pcg_err *err)
{
	char *text, *p, *end, where[1100];
	size_t size;
	int no = 0, rc = 0;

	if (pcg_read_small(path, MAX_KEY_FILE, &text, &size, err) < 0)
		return -1;
	end = text + size;
	for (p = text; p < end && rc == 0;) {
		char *nl = memchr(p, '\n', (size_t)(end - p)), *eol = nl ? nl : end;
		char buf[MAX_KEY_LINE], *w[4], *save = NULL, *t;
		int n = 0;
		no++;
		snprintf(where, sizeof where, "%s:%d", path, no);
		if (memchr(p, '\0', (size_t)(eol - p)) != NULL)
			rc = pcg_fail(err, "%s: a NUL byte: not a text file", where);
		else if (eol - p >= MAX_KEY_LINE)
			rc = pcg_fail(err, "%s: longer than %d bytes", where, MAX_KEY_LINE - 1);
		if (rc < 0)
			break;
		memcpy(buf, p, (size_t)(eol - p));
		buf[eol - p] = '\0';
		p = nl ? nl + 1 : end;
		for (t = strtok_r(buf, " \t\r", &save); t && n < 4; t = strtok_r(NULL, " \t\r", &save))
			w[n++] = t;
		if (n == 0 || (w[0][0] == '#' && strlen(w[0]) != 40)) /* a key may start with '#' */
			continue;
		if ((rc = line(w, n, err)) < 0)
			pcg_err_prefix(err, where);
	}
	free(text);
	return rc;
}

static int key_line(char **w, int n, pcg_err *err)
{
	if (n != 2 || (strcmp(w[0], "public") && strcmp(w[0], "secret")) || !z85_key(w[1], strlen(w[1])))
		return pcg_fail(err, "want 'public KEY' or 'secret KEY' (40 Z85 characters)");
	memcpy(!strcmp(w[0], "public") ? curve.pub : curve.sec, w[1], 41);
	return 0;
}

static int allow_line(char **w, int n, pcg_err *err)
{
	if (n != 1 || !z85_key(w[0], strlen(w[0])))
		return pcg_fail(err, "want one public key (40 Z85 characters)");
	if (curve.n_allow == MAX_KEYS)
		return pcg_fail(err, "more than %d keys", MAX_KEYS);
	memcpy(curve.allow[curve.n_allow++], w[0], 41);
	return 0;
}

static int peer_line(char **w, int n, pcg_err *err)
{
	if (n == 1 && z85_key(w[0], strlen(w[0]))) {
		memcpy(curve.any_peer, w[0], 41);
		return 0;
	}
	if (n != 2 || strlen(w[0]) >= sizeof curve.peer_url[0] || !z85_key(w[1], strlen(w[1])))
		return pcg_fail(err, "want 'URL KEY' or one key (40 Z85 characters)");
	if (curve.n_peers == MAX_KEYS)
		return pcg_fail(err, "more than %d peers", MAX_KEYS);
	snprintf(curve.peer_url[curve.n_peers], sizeof curve.peer_url[0], "%s", w[0]);
	memcpy(curve.peer_key[curve.n_peers++], w[1], 41);
	return 0;
}

int net_curve_setup(const char *key_path, const char *allow_path, const char *peers_path,
		    pcg_err *err)
{
	/* CURVE options that cannot be honoured refuse to start: an allow list
	 * or a peer key without this side's keypair would be ignored, and the
	 * sockets left in plaintext */
	if (!key_path && (allow_path || peers_path))
		return pcg_fail(err, "%s %s without --curve-key: CURVE needs this side's keypair "
				"too (pcg-keygen NAME makes one)", allow_path ? "--curve-allow" :
				"the server's key", allow_path ? allow_path : peers_path);
	if (key_path) {
		if (read_lines(key_path, key_line, err) < 0)
			return -1;
		if (!curve.pub[0] || !curve.sec[0])
			return pcg_fail(err, "%s: needs a 'public' and a 'secret' line", key_path);
		/* the halves of one keypair: a public key that is not the
		 * secret's would be refused by every peer, later and in silence */
		char derived[41];
		if (zmq_curve_public(derived, curve.sec) != 0)
			return pcg_fail(err, "%s: libzmq cannot derive a public key (built without "
					"CURVE?): %s", key_path, zmq_strerror(zmq_errno()));
		if (strcmp(derived, curve.pub) != 0)
			return pcg_fail(err, "%s: the 'public' key is not the 'secret' key's: the two "
					"lines come from different keypairs (make one with pcg-keygen)",
					key_path);
		curve.have_key = 1;
	}
	if (allow_path && read_lines(allow_path, allow_line, err) < 0)
		return -1;
	/* fail closed: an allow list that names no key would leave CURVE off
	 * on loopback and let no client in elsewhere */
	if (allow_path && curve.n_allow == 0)
		return pcg_fail(err, "%s: no client key in the allow list: CURVE needs at least one "
				"(a client's public key, from pcg-keygen, one per line)", allow_path);
	if (peers_path && read_lines(peers_path, peer_line, err) < 0)
		return -1;
	return 0;
}

static const char *peer_key(const char *url)
{
	for (int i = 0; i < curve.n_peers; i++)
		if (!strcmp(curve.peer_url[i], url))
			return curve.peer_key[i];
	return curve.any_peer[0] ? curve.any_peer : NULL;
}

/* The ZAP handler (RFC 27): one REP socket on inproc://zeromq.zap.01 per
 * context; a CURVE client gets in when its public key is on the list. */
static void *zap_main(void *sock)
{
	for (;;) {
		zmq_msg_t f[8];
		int n = 0, more = 1;
		while (more) {
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, sock, 0) < 0) {
				zmq_msg_close(&m);
				for (int i = 0; i < n; i++)
					zmq_msg_close(&f[i]);
				zmq_close(sock); /* ETERM: the context is ending */
				return NULL;
			}
			more = zmq_msg_more(&m);
			if (n < 8)
				f[n++] = m;
			else
				zmq_msg_close(&m);
		}
		/* version, request id, domain, address, identity, mechanism, key */
		int ok = 0;
		if (n >= 7 && zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) &&
		    zmq_msg_size(&f[6]) == 32) {
			char z[41];
			zmq_z85_encode(z, zmq_msg_data(&f[6]), 32);
			for (int i = 0; i < curve.n_allow && !ok; i++)
				ok = !strcmp(z, curve.allow[i]);
		}
		zmq_send(sock, "1.0", 3, ZMQ_SNDMORE);
		if (n >= 2)
			zmq_send(sock, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
		else
			zmq_send(sock, "", 0, ZMQ_SNDMORE);
		zmq_send(sock, ok ? "200" : "400", 3, ZMQ_SNDMORE);
		zmq_send(sock, ok ? "OK" : "key not allowed", ok ? 2 : 15, ZMQ_SNDMORE);
		zmq_send(sock, "", 0, ZMQ_SNDMORE);
		zmq_send(sock, "", 0, 0);
		for (int i = 0; i < n; i++)
			zmq_msg_close(&f[i]);
	}
}

static int zap_start(void *ctx, pcg_err *err)
{
	pthread_t th;
	int linger = 0;
	void *s;

	if (curve.zap_ctx == ctx)
		return 0;
	s = zmq_socket(ctx, ZMQ_REP);
	if (s == NULL || zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
	    zmq_bind(s, "inproc://zeromq.zap.01") != 0) {
		if (s)
			zmq_close(s);
		return pcg_fail(err, "ZAP handler: %s", zmq_strerror(zmq_errno()));
	}
	if (pthread_create(&th, NULL, zap_main, s) != 0) {
		zmq_close(s);
		return pcg_fail(err, "ZAP handler: cannot start its thread");
	}
	pthread_detach(th);
	curve.zap_ctx = ctx;
	return 0;
}

static int is_loopback(const char *url)
{
	const char *h = url + 6;
	size_t n = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":");
	return (n == 9 && !strncmp(h, "localhost", 9)) || (n == 5 && !strncmp(h, "[::1]", 5)) ||
	       !strncmp(h, "127.", 4);
}

int net_endpoint_ok(const char *url, int server, pcg_err *err)
{
	if (!strncmp(url, "inproc://", 9) || !strncmp(url, "ipc://", 6))
		return url[strlen(url) - 1] != '/' ? 0 : pcg_fail(err, "%s: no path", url);
	if (strncmp(url, "tcp://", 6) != 0)
		return pcg_fail(err, "%s: not an inproc://, ipc:// or tcp:// endpoint", url);
	if (is_loopback(url))
		return 0;
	if (server && curve.have_key && curve.n_allow > 0)
		return 0;
	if (!server && curve.have_key && peer_key(url))
		return 0;
	return pcg_fail(err, "%s: tcp on a non-loopback address needs CURVE: %s", url,
			server ? "--curve-key and --curve-allow" : "--curve-key and the server's key");
}

/* ------------------------------------------------ CURVE handshake monitor */

/* A tcp client socket has a monitor: libzmq's events for it on an inproc
 * PAIR socket, read while net_recv waits, so that a handshake the server
 * refuses is reported at once and in words instead of as a timeout.
 * (libzmq reconnects and retries such a handshake forever, silently.) */
#define MAX_MONITORS 256
#define MONITOR_EVENTS (ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | \
			ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

static struct monitor {
	void *sock, *pair; /* the client socket, and the PAIR its events come on */
	char url[256];
	int curve;         /* the client speaks CURVE */
	int dropped;       /* handshakes dropped by the server since one succeeded */
} monitors[MAX_MONITORS];
static pthread_mutex_t monitors_lock = PTHREAD_MUTEX_INITIALIZER;

/* Starts monitoring s (a client about to connect to url). Without a free
 * slot, s goes unmonitored: a refusal is then a timeout, as before. */
static int monitor_start(void *ctx, void *s, const char *url, int curve_client, pcg_err *err)
{
	static atomic_uint seq;
	char ep[80];
	int linger = 0, slot = -1;
	void *pair;

	pthread_mutex_lock(&monitors_lock);
	for (int i = 0; i < MAX_MONITORS && slot < 0; i++)
		if (monitors[i].sock == NULL) {
			slot = i;
			monitors[i].sock = s; /* taken */
		}
	pthread_mutex_unlock(&monitors_lock);
	if (slot < 0)
		return 0;
	snprintf(ep, sizeof ep, "inproc://pcg-monitor-%u", atomic_fetch_add(&seq, 1));
	pair = zmq_socket(ctx, ZMQ_PAIR);
	if (zmq_socket_monitor(s, ep, MONITOR_EVENTS) != 0 || pair == NULL ||
	    zmq_setsockopt(pair, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
	    zmq_connect(pair, ep) != 0) {
		pcg_fail(err, "zmq_socket_monitor: %s", zmq_strerror(zmq_errno()));
		if (pair)
			zmq_close(pair);
		pthread_mutex_lock(&monitors_lock);
		monitors[slot].sock = NULL;
		pthread_mutex_unlock(&monitors_lock);
		return -1;
	}
	monitors[slot].pair = pair;
	monitors[slot].curve = curve_client;
	monitors[slot].dropped = 0;
	snprintf(monitors[slot].url, sizeof monitors[slot].url, "%s", url);
	return 0;
}

static struct monitor *monitor_of(void *s)
{
	struct monitor *m = NULL;

	if (s == NULL)
		return NULL;
	pthread_mutex_lock(&monitors_lock);
	for (int i = 0; i < MAX_MONITORS && m == NULL; i++)
		if (monitors[i].sock == s)
			m = &monitors[i];
	pthread_mutex_unlock(&monitors_lock);
	return m;
}

static void monitor_stop(void *s)
{
	struct monitor *m = monitor_of(s);

	if (m == NULL)
		return;
	zmq_socket_monitor(s, NULL, 0);
	zmq_close(m->pair);
	pthread_mutex_lock(&monitors_lock);
	m->pair = NULL;
	m->sock = NULL;
	pthread_mutex_unlock(&monitors_lock);
}

/* How long a probe of a server's greeting may take: on loopback it takes a
 * millisecond; a slow or silent server makes it inconclusive, not an error. */
#define PROBE_MS 500

/* ms left of PROBE_MS since t0 (CLOCK_MONOTONIC), at least 0. */
static int probe_left(const struct timespec *t0)
{
	struct timespec t;
	long ms;

	clock_gettime(CLOCK_MONOTONIC, &t);
	ms = PROBE_MS - ((t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000);
	return ms < 0 ? 0 : (int)ms;
}

/* A tcp connection to one of ai's addresses, within PROBE_MS of t0; -1 if
 * none. */
static int probe_connect(const struct addrinfo *ai, const struct timespec *t0)
{
	for (; ai != NULL; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), e = 0;
		struct pollfd p = { fd, POLLOUT, 0 };
		socklen_t el = sizeof e;
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
		    (errno == EINPROGRESS && poll(&p, 1, probe_left(t0)) == 1 &&
		     getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0))
			return fd;
		close(fd);
	}
	return -1;
}

/* Reads the security mechanism that the ZMTP 3 server at url (tcp://
 * [SOURCE;]HOST:PORT) speaks from its greeting (RFC 23: a signature of 0xFF,
 * 8 bytes, 0x7F; major and minor version; the mechanism, 20 bytes padded
 * with NULs). Only our signature and major version are sent, so the server
 * sends its whole greeting and then waits for the rest of ours, which never
 * comes: unlike libzmq's own handshake, this is no race. Fills mech and
 * returns 0, or -1 when no such greeting came within PROBE_MS. */
static int probe_mechanism(const char *url, char mech[21])
{
	static const uint8_t hello[11] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3 };
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV }, *ai = NULL;
	struct timespec t0;
	char host[256];
	const char *h = strchr(url, ';') ? strchr(url, ';') + 1 : url + 6, *port = strrchr(h, ':');
	uint8_t g[32]; /* up to the end of the mechanism */
	size_t got = 0, n;
	int fd, rc = -1;

	if (port == NULL || (size_t)(port - h) >= sizeof host)
		return -1;
	n = (size_t)(port - h);
	if (n >= 2 && h[0] == '[' && h[n - 1] == ']') { /* [IPv6] */
		h++;
		n -= 2;
	}
	memcpy(host, h, n);
	host[n] = '\0';
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (getaddrinfo(host, port + 1, &hints, &ai) != 0)
		return -1;
	fd = probe_connect(ai, &t0);
	freeaddrinfo(ai);
	if (fd < 0)
		return -1;
	if (send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello)
		goto out;
	while (got < sizeof g) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t r;
		if (poll(&p, 1, probe_left(&t0)) != 1)
			goto out;
		r = recv(fd, g + got, sizeof g - got, 0);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			goto out;
		got += r > 0 ? (size_t)r : 0;
	}
	if (g[0] != 0xff || g[9] != 0x7f || g[10] < 3)
		goto out; /* not ZMTP 3 */
	memcpy(mech, g + 12, 20);
	mech[20] = '\0';
	n = strlen(mech);
	rc = n > 0 ? 0 : -1;
	for (size_t i = 0; i < 20 && rc == 0; i++) /* upper-case letters, digits, -_.+; NULs */
		if (i < n ? !((mech[i] >= 'A' && mech[i] <= 'Z') || (mech[i] >= '0' && mech[i] <= '9') ||
			      strchr("-_.+", mech[i]))
			  : mech[i] != '\0')
			rc = -1;
out:
	close(fd);
	return rc;
}

/* Reads the events waiting on m's PAIR. Returns -1 with err when they say
 * the handshake cannot succeed, else 0. */
static int monitor_read(struct monitor *m, pcg_err *err)
{
	for (;;) {
		zmq_msg_t f;
		uint16_t event = 0;
		uint32_t value = 0;
		int more;

		zmq_msg_init(&f);
		if (zmq_msg_recv(&f, m->pair, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&f);
			return 0;
		}
		if (zmq_msg_size(&f) >= 6) { /* event (16 bits), value (32), then the address */
			memcpy(&event, zmq_msg_data(&f), 2);
			memcpy(&value, (char *)zmq_msg_data(&f) + 2, 4);
		}
		more = zmq_msg_more(&f);
		zmq_msg_close(&f);
		while (more) {
			zmq_msg_init(&f);
			more = zmq_msg_recv(&f, m->pair, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&f);
			zmq_msg_close(&f);
		}
		switch (event) {
		case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
			m->dropped = 0;
			break;
		case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
			return pcg_fail(err, "%s: this client's key is not allowed: the server refused "
					"it (ZAP status %u); add its public key %s to the server's "
					"allow list", m->url, value, curve.pub);
		case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
			if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH && m->curve)
				goto not_curve;
			if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
				goto uses_curve;
			if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
				goto mismatch;
			return pcg_fail(err, "%s: the CURVE handshake failed (ZMTP protocol error "
					"0x%x)", m->url, value);
		case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: {
			/* The server closed the connection in the handshake. With
			 * another mechanism, both ends close as soon as they have
			 * the other's greeting, often before sending the rest of
			 * their own: which end learns of the mismatch is a race
			 * that the client mostly loses (it then only sees the
			 * connection end, retry after retry). So ask the server's
			 * greeting which mechanism it speaks. */
			char mech[21];
			if (probe_mechanism(m->url, mech) == 0) {
				if (m->curve && strcmp(mech, "CURVE") != 0)
					goto not_curve;
				if (!m->curve && !strcmp(mech, "CURVE"))
					goto uses_curve;
				if (!m->curve && strcmp(mech, "NULL") != 0)
					return pcg_fail(err, "%s: the server uses %s security, which "
							"this client does not speak", m->url, mech);
			}
			/* A CURVE server drops a client whose HELLO it cannot open:
			 * sealed for another server key. Twice, so that a server
			 * going away in the middle of one handshake is not taken
			 * for it (libzmq retries within 100 ms). Without CURVE a
			 * dropped handshake says nothing of keys. */
			if (m->curve && ++m->dropped >= 2)
				goto mismatch;
			break;
		}
		}
	}
not_curve:
	return pcg_fail(err, "%s: the server does not use CURVE; give it a key and an allow list, "
			"or give this client no key for it", m->url);
uses_curve:
	return pcg_fail(err, "%s: the server uses CURVE; give this client a key (--curve-key) "
			"and the server's public key", m->url);
mismatch:
	return pcg_fail(err, "%s: the server's key does not match (or the server does not use "
			"CURVE): it dropped the CURVE handshake; check the server key this client "
			"was given", m->url);
}

/* CURVE on a socket when keys are set up (always for non-loopback tcp). */
static int secure(void *s, void *ctx, const char *url, int server, pcg_err *err)
{
	int one = 1;

	if (!curve.have_key || strncmp(url, "tcp://", 6) != 0)
		return 0;
	if (server) {
		if (curve.n_allow == 0)
			return is_loopback(url) ? 0 : pcg_fail(err, "%s: no --curve-allow list", url);
		if (zap_start(ctx, err) < 0)
			return -1;
		ZCHECK(zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, "pcg", 3), err, "ZMQ_ZAP_DOMAIN");
		ZCHECK(zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one), err, "ZMQ_CURVE_SERVER");
		ZCHECK(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, curve.sec, 40), err, "ZMQ_CURVE_SECRETKEY");
		return 0;
	}
	const char *pk = peer_key(url);
	if (pk == NULL)
		return is_loopback(url) ? 0 : pcg_fail(err, "%s: no server key for it", url);
	ZCHECK(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, pk, 40), err, "ZMQ_CURVE_SERVERKEY");
	ZCHECK(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, curve.pub, 40), err, "ZMQ_CURVE_PUBLICKEY");
	ZCHECK(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, curve.sec, 40), err, "ZMQ_CURVE_SECRETKEY");
	return 0;
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

/* A socket with the pipeline's limits; sndhwm > 0 replaces the send queue's
 * (before the bind, whose listener copies the options). */
static void *open_socket(void *ctx, int type, const char *url, int bind, int sndhwm,
			 pcg_err *err)
{
	void *s;
	int timeo = 1000; /* sends never block long: a stuck peer is an error */

	if (net_endpoint_ok(url, bind, err) < 0)
		return NULL;
	s = zmq_socket(ctx, type);
	if (s == NULL) {
		pcg_fail(err, "zmq_socket: %s", zmq_strerror(zmq_errno()));
		return NULL;
	}
	/* a tcp client's handshake is watched: see monitor_start */
	const int watch = !bind && !strncmp(url, "tcp://", 6);
	const int curve_client = watch && curve.have_key && peer_key(url) != NULL;
	if (limits(s, err) < 0 || secure(s, ctx, url, bind, err) < 0 ||
	    (watch && monitor_start(ctx, s, url, curve_client, err) < 0) ||
	    zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeo, sizeof timeo) != 0) {
		net_close(&s);
		return NULL;
	}
	if (type == ZMQ_ROUTER) { /* unroutable replies are errors, not silent drops */
		int one = 1;
		zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
		if (sndhwm > 0)
			zmq_setsockopt(s, ZMQ_SNDHWM, &sndhwm, sizeof sndhwm);
	}
	if ((bind ? zmq_bind(s, url) : zmq_connect(s, url)) != 0) {
		pcg_fail(err, "%s %s: %s", bind ? "bind" : "connect", url, zmq_strerror(zmq_errno()));
		net_close(&s);
		return NULL;
	}
	return s;
}

int net_listening(const char *url)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	const char *path = url + 6;
	int fd, rc;

	if (strncmp(url, "ipc://", 6) || strlen(path) >= sizeof a.sun_path)
		return 1;
	memcpy(a.sun_path, path, strlen(path) + 1);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return 1;
	rc = connect(fd, (struct sockaddr *)&a, sizeof a);
	close(fd);
	return rc == 0 || (errno != ENOENT && errno != ECONNREFUSED);
}

const char *net_default_verifier(char *buf, size_t n)
{
	const char *e = getenv("PCG_VERIFIER"), *d;

	if (e && *e)
		return e;
	if ((d = getenv("PCG_RUNTIME_DIR")) && *d)
		snprintf(buf, n, "ipc://%s/verifier.sock", d);
	else if ((d = getenv("XDG_RUNTIME_DIR")) && *d)
		snprintf(buf, n, "ipc://%s/pcg-tts/verifier.sock", d);
	else
		snprintf(buf, n, "ipc://%s/pcg-tts-%u/verifier.sock",
			 (d = getenv("TMPDIR")) && *d ? d : "/tmp", (unsigned)getuid());
	return buf;
}

void *net_server(void *ctx, const char *url, pcg_err *err)
{
	return open_socket(ctx, ZMQ_ROUTER, url, 1, 0, err);
}

void *net_server_hwm(void *ctx, const char *url, int sndhwm, pcg_err *err)
{
	return open_socket(ctx, ZMQ_ROUTER, url, 1, sndhwm, err);
}

void *net_client(void *ctx, const char *url, pcg_err *err)
{
	return open_socket(ctx, ZMQ_DEALER, url, 0, 0, err);
}

void net_close(void **sock)
{
	if (sock && *sock) {
		monitor_stop(*sock);
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
	/* The body stays where libzmq received it. */
	zmq_msg_init(&r->msg);
	zmq_msg_move(&r->msg, &f[n - 1]);
	r->body = zmq_msg_data(&r->msg);
	r->len = zmq_msg_size(&r->msg);
	rc = 1;
out:
	close_frames(f, n);
	return rc;
}

/* A reply buffer lent to libzmq without a copy until it has sent the
 * message (ipc, tcp: its I/O thread) or the receiver has closed it
 * (inproc); refs counts the server's hold and libzmq's, and whoever drops
 * the last frees it, so a server may stop while a reply is still out. */
typedef struct reply_buf {
	atomic_int refs;
	proto_buf b;
} reply_buf;

#define N_REPLY_BUFS 4 /* in flight at once: beyond, one-off buffers */

static void reply_unref(void *data, void *hint)
{
	reply_buf *rb = hint;

	(void)data;
	if (atomic_fetch_sub(&rb->refs, 1) == 1) {
		proto_buf_free(&rb->b);
		free(rb);
	}
}

/* A buffer of the pool that libzmq no longer holds, or a new one (kept in
 * the pool when there is room); NULL when out of memory. */
static reply_buf *reply_get(reply_buf **pool)
{
	int slot = -1;

	for (int i = 0; i < N_REPLY_BUFS; i++) {
		if (pool[i] && atomic_load(&pool[i]->refs) == 1)
			return pool[i];
		if (pool[i] == NULL && slot < 0)
			slot = i;
	}
	reply_buf *rb = calloc(1, sizeof *rb);
	if (rb == NULL)
		return NULL;
	atomic_init(&rb->refs, 1); /* the pool's hold, or libzmq's for a one-off */
	if (slot >= 0)
		pool[slot] = rb;
	return rb;
}

/* Sends rb->b's message to the peer of r; libzmq takes a hold of rb. */
static int reply_send(void *sock, const net_req *r, reply_buf *rb, int pooled, pcg_err *err)
{
	zmq_msg_t m;

	if (pooled)
		atomic_fetch_add(&rb->refs, 1);
	if (zmq_msg_init_data(&m, rb->b.data, rb->b.len, reply_unref, rb) != 0) {
		reply_unref(NULL, rb);
		return pcg_fail(err, "reply: %s", zmq_strerror(zmq_errno()));
	}
	if (zmq_send(sock, r->route, r->route_len, ZMQ_SNDMORE) < 0 ||
	    (r->delim && zmq_send(sock, "", 0, ZMQ_SNDMORE) < 0) || zmq_msg_send(&m, sock, 0) < 0) {
		zmq_msg_close(&m); /* drops libzmq's hold */
		return pcg_fail(err, "reply: %s", zmq_strerror(zmq_errno()));
	}
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

int net_reply_nowait(void *sock, const net_req *r, const void *body, size_t len, pcg_err *err)
{
	if (zmq_send(sock, r->route, r->route_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    (r->delim && zmq_send(sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) ||
	    zmq_send(sock, body, len, ZMQ_DONTWAIT) < 0)
		return pcg_fail(err, "reply: %s", zmq_strerror(zmq_errno()));
	return 0;
}

void net_req_free(net_req *r)
{
	if (r->body) {
		zmq_msg_close(&r->msg);
		r->body = NULL;
	}
}

int net_send(void *sock, const void *body, size_t len, pcg_err *err)
{
	struct monitor *m = monitor_of(sock);

	/* a handshake that failed before this send (libzmq then drops the
	 * connection's queue, and the send would only time out) */
	if (m != NULL && monitor_read(m, err) < 0)
		return -1;
	if (zmq_send(sock, body, len, 0) < 0) {
		if (zmq_errno() == EAGAIN && m != NULL && monitor_read(m, err) < 0)
			return -1;
		return pcg_fail(err, "send: %s", zmq_errno() == EAGAIN
				? "no connection took the message within the send timeout"
				: zmq_strerror(zmq_errno()));
	}
	return 0;
}

/* wait_in for a monitored client: its events are read as they come, and a
 * handshake that cannot succeed ends the wait with err. */
static int wait_monitored(void *sock, struct monitor *m, int timeout_ms, pcg_err *err)
{
	struct timespec t0, t;
	int left = timeout_ms;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		zmq_pollitem_t it[2] = { { sock, 0, ZMQ_POLLIN, 0 }, { m->pair, 0, ZMQ_POLLIN, 0 } };
		int rc = zmq_poll(it, 2, left);
		if (rc < 0)
			return zmq_errno() == EINTR ? 0
				: pcg_fail(err, "zmq_poll: %s", zmq_strerror(zmq_errno()));
		if ((it[1].revents & ZMQ_POLLIN) && monitor_read(m, err) < 0)
			return -1;
		if (it[0].revents & ZMQ_POLLIN)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t);
		left = timeout_ms - (int)((t.tv_sec - t0.tv_sec) * 1000 +
					  (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (rc == 0 || left <= 0)
			return 0;
	}
}

int net_recv(void *sock, zmq_msg_t *msg, int timeout_ms, pcg_err *err)
{
	zmq_msg_t f[MAX_FRAMES];
	struct monitor *m = monitor_of(sock);
	int n, dropped, w;

	if (m != NULL) {
		w = wait_monitored(sock, m, timeout_ms, err);
		if (w < 0)
			return -1;
	} else
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
	zmq_msg_init(msg);
	zmq_msg_move(msg, &f[0]);
	zmq_msg_close(&f[0]);
	return 1;
}

struct net_responder {
	const char *prog;
	net_handler *handle;
	void *ctx;
	proto_msg q, rep;
	reply_buf *pool[N_REPLY_BUFS];
};

net_responder *net_responder_new(const char *prog, net_handler *handle, void *ctx)
{
	net_responder *s = calloc(1, sizeof *s);

	if (s != NULL) {
		s->prog = prog;
		s->handle = handle;
		s->ctx = ctx;
	}
	return s;
}

void net_responder_free(net_responder **sp)
{
	net_responder *s = sp ? *sp : NULL;

	if (s == NULL)
		return;
	for (int i = 0; i < N_REPLY_BUFS; i++)
		if (s->pool[i])
			reply_unref(NULL, s->pool[i]); /* libzmq may still hold it */
	free(s);
	*sp = NULL;
}

int net_respond(net_responder *s, void *sock, const net_req *r, net_counts *counts)
{
	proto_msg *q = &s->q, *rep = &s->rep;
	pcg_err err = { "" };

	memset(rep, 0, sizeof *rep);
	if (proto_parse(r->body, r->len, q, &err) < 0)
		proto_error(rep, q->id, PROTO_E_BAD_REQUEST, "%s", err.msg);
	else
		s->handle(s->ctx, q, rep);
	if (rep->type == PROTO_ERROR) {
		counts->errors++;
		fprintf(stderr, "%s: request %llu: %s: %s\n", s->prog, (unsigned long long)rep->id,
			rep->error.code, rep->error.msg);
	} else {
		counts->served++;
	}
	reply_buf *rb = reply_get(s->pool);
	int pooled = 0;
	for (int i = 0; i < N_REPLY_BUFS; i++)
		pooled |= s->pool[i] == rb;
	if (rb == NULL)
		return -1;
	if (proto_pack_buf(rep, &rb->b, &err) < 0) {
		fprintf(stderr, "%s: %s\n", s->prog, err.msg);
		if (!pooled)
			reply_unref(NULL, rb);
	} else if (reply_send(sock, r, rb, pooled, &err) < 0) {
		fprintf(stderr, "%s: %s\n", s->prog, err.msg);
	}
	return 0;
}
