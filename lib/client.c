/* client.c: Lazy Pirate requests to a pipeline server (see client.h). */
#include "client.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "net.h"

struct pcg_client {
	void *ctx, *sock;
	char *url;
	int timeout_ms, tries, ms_per_pos;
	uint64_t next_id;
	proto_buf req;   /* requests are packed here, reused */
	zmq_msg_t last;  /* the last reply, as received: rep->probs points into it */
	int have_last;
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
	long long work = 0, ms;

	if (req->type == PROTO_SCORE || req->type == PROTO_PROPOSE)
		work = req->n_append + (req->type == PROTO_PROPOSE ? req->n : 0) - PROTO_MAX_N;
	ms = c->timeout_ms + (long long)c->ms_per_pos * (work > 0 ? work : 0);
	return ms > 24LL * 3600 * 1000 ? 24 * 3600 * 1000 : (int)ms;
}

int client_call(pcg_client *c, proto_msg *req, proto_msg *rep, pcg_err *err)
{
	const int wait_ms = deadline_ms(c, req);

	req->id = c->next_id++;
	if (proto_pack_buf(req, &c->req, err) < 0)
		return -1;
	if (c->have_last) { /* the previous reply, which rep may still point into */
		zmq_msg_close(&c->last);
		c->have_last = 0;
	}
	for (int t = 0; t < c->tries; t++) {
		if (t > 0) {
			/* Reopen: drops whatever the old socket still queues. */
			c->resent++;
			net_close(&c->sock);
			c->sock = net_client(c->ctx, c->url, err);
			if (c->sock == NULL)
				break;
		}
		if (net_send(c->sock, c->req.data, c->req.len, err) < 0)
			continue;
		for (;;) {
			zmq_msg_t m;
			int got = net_recv(c->sock, &m, wait_ms, err);
			if (got <= 0)
				break; /* timeout or error: next try */
			/* Parsed where libzmq received it: no copy of the payload. */
			if (proto_parse(zmq_msg_data(&m), zmq_msg_size(&m), rep, err) < 0) {
				zmq_msg_close(&m);
				pcg_err_prefix(err, c->url);
				return -1;
			}
			if (rep->id != req->id) { /* a late reply to an abandoned request */
				c->stale++;
				zmq_msg_close(&m);
				continue;
			}
			zmq_msg_init(&c->last);
			zmq_msg_move(&c->last, &m);
			zmq_msg_close(&m);
			c->have_last = 1;
			return 0;
		}
	}
	return pcg_fail(err, "%s: no reply after %d tries of %d ms", c->url, c->tries, wait_ms);
}

unsigned long client_resent(const pcg_client *c) { return c->resent; }
unsigned long client_stale(const pcg_client *c) { return c->stale; }
