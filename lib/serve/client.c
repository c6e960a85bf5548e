/* client.c: Lazy Pirate requests to a pipeline server (see client.h). */
#include "client.h"
#include "clock.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "net.h"

struct pcg_client {
	void *ctx, *sock;
	char *url;
	int timeout_ms, tries, ms_per_pos;
	int (*alive)(void *);
	void *alive_ctx;
	uint64_t next_id;
	proto_buf req;   /* requests are packed here, reused */
	zmq_msg_t last;  /* the last reply, as received: rep points into it */
	int have_last;
	uint64_t pending_id; /* the request client_wait waits for */
	int pending, sent, wait_ms;
	unsigned long resent, stale;
};

static uint64_t first_id(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	/* Distinct across restarts of the client, so an old reply never matches. */
	return ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec;
}

pcg_client *client_new(void *ctx, const char *url, int timeout_ms, int tries, pcg_err *err)
{
	pcg_client *c = calloc(1, sizeof *c);

	if (c == NULL || (c->url = strdup(url)) == NULL) {
		free(c);
		pcg_fail(err, "out of memory");
		return NULL;
	}
	c->ctx = ctx;
	c->timeout_ms = timeout_ms;
	c->tries = tries < 1 ? 1 : tries;
	c->next_id = first_id();
	c->sock = net_client(ctx, url, err);
	if (c->sock == NULL) {
		client_free(&c);
		return NULL;
	}
	return c;
}

void client_free(pcg_client **cp)
{
	pcg_client *c = cp ? *cp : NULL;

	if (c == NULL)
		return;
	net_close(&c->sock);
	free(c->url);
	proto_buf_free(&c->req);
	if (c->have_last)
		zmq_msg_close(&c->last);
	free(c);
	*cp = NULL;
}

void client_set_alive(pcg_client *c, int (*alive)(void *ctx), void *ctx)
{
	c->alive = alive;
	c->alive_ctx = ctx;
}

/* net_recv with a deadline, in slices of a second when there is a probe. */
static int recv_probed(pcg_client *c, zmq_msg_t *m, double until, int *gone, pcg_err *err)
{
	for (;;) {
		double left = until - 1e3 * pcg_now();
		int slice = left <= 0 ? 0 : left > 1000 && c->alive ? 1000 : (int)left;
		int got = net_recv(c->sock, m, slice, err);
		if (got != 0 || 1e3 * pcg_now() >= until)
			return got;
		if (c->alive && !c->alive(c->alive_ctx)) {
			*gone = 1;
			return 0;
		}
	}
}

void client_set_ms_per_position(pcg_client *c, int ms)
{
	c->ms_per_pos = ms < 0 ? 0 : ms;
}

/* The deadline of one try: the base timeout, and ms_per_pos for every
 * position the request makes the server compute (those it appends, and the
 * tokens a propose drafts one step at a time) beyond what one round
 * computes (PROTO_MAX_N): a round keeps the base timeout, so a dead server
 * is found as fast as before; a prompt's prefill gets time in proportion. */
static int deadline_ms(const pcg_client *c, const proto_msg *req)
{
	const proto_model_req *r = proto_model(req);
	long long work = 0, ms;

	if (r != NULL)
		work = r->n_append + (req->type == PROTO_PROPOSE ? r->n : 0) - PROTO_MAX_N;
	ms = c->timeout_ms + (long long)c->ms_per_pos * (work > 0 ? work : 0);
	return ms > 24LL * 3600 * 1000 ? 24 * 3600 * 1000 : (int)ms;
}

int client_send(pcg_client *c, proto_msg *req, pcg_err *err)
{
	req->id = c->next_id++;
	c->pending = 0;
	if (proto_pack_buf(req, &c->req, err) < 0)
		return -1;
	c->wait_ms = deadline_ms(c, req);
	c->pending_id = req->id;
	c->pending = 1;
	if (c->have_last) { /* the previous reply, which a rep may still point into */
		zmq_msg_close(&c->last);
		c->have_last = 0;
	}
	/* a failed send is tried again by client_wait, on a fresh socket */
	c->sent = net_send(c->sock, c->req.data, c->req.len, err) == 0;
	return 0;
}

int client_wait(pcg_client *c, proto_msg *rep, pcg_err *err)
{
	const int wait_ms = c->wait_ms;
	int gone = 0, failed = 0; /* the last try ended in an error (in err), not a timeout */

	if (!c->pending)
		return pcg_fail(err, "%s: no request to wait for", c->url);
	c->pending = 0;
	for (int t = 0; t < c->tries; t++) {
		if (t > 0 || !c->sent) {
			/* Reopen: drops whatever the old socket still queues. */
			c->resent += t > 0;
			net_close(&c->sock);
			c->sock = net_client(c->ctx, c->url, err);
			if (c->sock == NULL)
				return -1;
			failed = 1;
			if (net_send(c->sock, c->req.data, c->req.len, err) < 0)
				continue;
		}
		double until = 1e3 * pcg_now() + wait_ms;
		for (;;) {
			zmq_msg_t m;
			int got = recv_probed(c, &m, until, &gone, err);
			if (gone)
				return pcg_fail(err, "%s: the server is gone (nobody listens any more)",
						c->url);
			failed = got < 0;
			if (got <= 0)
				break; /* timeout or error: next try */
			/* Parsed where libzmq received it: no copy of the payload. */
			if (proto_parse(zmq_msg_data(&m), zmq_msg_size(&m), rep, err) < 0) {
				zmq_msg_close(&m);
				pcg_err_prefix(err, c->url);
				return -1;
			}
			if (rep->id != c->pending_id) { /* a late reply to an abandoned request */
				c->stale++;
				zmq_msg_close(&m);
				continue;
			}
			if (rep->type == PROTO_PROGRESS) { /* the server works on it: wait on */
				zmq_msg_close(&m);
				until = 1e3 * pcg_now() + wait_ms;
				continue;
			}
			zmq_msg_init(&c->last);
			zmq_msg_move(&c->last, &m);
			zmq_msg_close(&m);
			c->have_last = 1;
			return 0;
		}
	}
	/* an error says more than a timeout: a server that refused this
	 * client's key, a malformed reply */
	if (failed)
		return -1;
	return pcg_fail(err, "%s: no reply after %d tries of %d ms", c->url, c->tries, wait_ms);
}

int client_ready(pcg_client *c)
{
	zmq_pollitem_t it = { c->sock, 0, ZMQ_POLLIN, 0 };

	return c->pending && c->sent && zmq_poll(&it, 1, 0) == 1 && (it.revents & ZMQ_POLLIN);
}

int client_call(pcg_client *c, proto_msg *req, proto_msg *rep, pcg_err *err)
{
	if (client_send(c, req, err) < 0)
		return -1;
	return client_wait(c, rep, err);
}

unsigned long client_resent(const pcg_client *c) { return c->resent; }
unsigned long client_stale(const pcg_client *c) { return c->stale; }
