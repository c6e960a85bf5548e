/* test_rogue.c: a rogue client sends malformed, truncated, oversized and
 * mis-framed messages to targetd while a good client is served: every good
 * request gets its right answer, the server counts and drops what it cannot
 * read (its count of dropped messages, from its log, is at least the number
 * of misframed messages sent), and its memory stays flat (RSS after 3000 bad messages within 16 MB
 * of RSS before them). Bounded: a few seconds. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "check.h"
#include "client.h"
#include "proto.h"

#define MODEL "tests/fixtures/llama/gqa-f32"

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

static int good_round(pcg_client *c, proto_msg *q, proto_msg *r, int i)
{
	pcg_err err;
	proto_init(q, PROTO_SCORE, 0);
	proto_model_req *s = &q->score.req;
	s->session = 1 + (uint64_t)(i % 3);
	s->n_append = 4;
	memcpy(s->append, (const int32_t[]){ 1, 2, 3, 4 + i % 50 }, 4 * sizeof *s->append);
	s->n = 2;
	s->samp = (pcg_sampling){ 1, 0, 1 };
	s->rows = (llama_rows){ 1, { 0 }, { 384 } };
	return client_call(c, q, r, &err) == 0 && r->type == PROTO_PROBS && r->probs.n_vec == 2 &&
	       r->probs.width == 384;
}

int main(void)
{
	char url[512], logpath[512];
	pcg_err err;

	if (access("bin/targetd", X_OK) != 0)
		SKIP("bin/targetd not built");
	snprintf(url, sizeof url, "ipc://%s/rogue.sock", check_tmpdir());
	snprintf(logpath, sizeof logpath, "%s/targetd.log", check_tmpdir());
	pid_t pid = fork();
	if (pid == 0) {
		if (freopen(logpath, "w", stderr) == NULL)
			_exit(126);
		execl("bin/targetd", "targetd", "--model", MODEL, "--listen", url, "--threads", "1",
		      (char *)NULL);
		_exit(127);
	}
	void *ctx = zmq_ctx_new();
	pcg_client *good = client_new(ctx, url, 3000, 3, &err);
	proto_msg *q = calloc(1, sizeof *q), *r = calloc(1, sizeof *r);
	int served = 0;
	for (int i = 0; i < 20; i++)
		served += good_round(good, q, r, i);
	CHECK(served == 20);
	long before = rss_kb(pid);

	void *rogue = zmq_socket(ctx, ZMQ_DEALER);
	int linger = 0, hwm = 100000;
	zmq_setsockopt(rogue, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(rogue, ZMQ_SNDHWM, &hwm, sizeof hwm);
	zmq_connect(rogue, url);
	void *req = zmq_socket(ctx, ZMQ_REQ);
	zmq_setsockopt(req, ZMQ_LINGER, &linger, sizeof linger);
	zmq_connect(req, url);

	unsigned seed = 4242;
	void *valid;
	size_t vlen;
	good_round(good, q, r, 0);
	q->type = PROTO_SCORE;
	proto_pack(q, &valid, &vlen, &err);
	unsigned char *buf = malloc(vlen + 64);
	int good_ok = 0, good_n = 0, misframed = 0;
	for (int i = 0; i < 3000; i++) {
		seed = seed * 1103515245u + 12345u;
		switch (seed % 6) {
		case 0: /* a valid message, truncated */
			zmq_send(rogue, valid, (seed >> 8) % vlen, ZMQ_DONTWAIT);
			break;
		case 1: /* bytes flipped */
			memcpy(buf, valid, vlen);
			for (int k = 0; k < 4; k++)
				buf[((seed >> (4 + k)) * 2654435761u) % vlen] ^= (unsigned char)(seed >> 9);
			zmq_send(rogue, buf, vlen, ZMQ_DONTWAIT);
			break;
		case 2: /* the allocation bombs msgpack-c would honour */
			zmq_send(rogue, "\xdd\xff\xff\xff\xff", 5, ZMQ_DONTWAIT);
			zmq_send(rogue, "\xdf\x0f\xff\xff\xff\x00", 6, ZMQ_DONTWAIT);
			break;
		case 3: /* too many frames */
			misframed++;
			for (int k = 0; k < 6; k++)
				zmq_send(rogue, "x", 1, (k < 5 ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT);
			break;
		case 4: /* a REQ peer with garbage (framed with the empty delimiter) */
			if (i % 50 != 4)
				break;
			zmq_send(req, "\x81\xa1v\x07", 4, 0);
			{
				char tmp[512];
				zmq_pollitem_t it = { req, 0, ZMQ_POLLIN, 0 };
				if (zmq_poll(&it, 1, 1000) > 0)
					zmq_recv(req, tmp, sizeof tmp, 0); /* an error reply */
				else { /* no reply: reopen the REQ socket, as Lazy Pirate does */
					zmq_close(req);
					req = zmq_socket(ctx, ZMQ_REQ);
					zmq_setsockopt(req, ZMQ_LINGER, &linger, sizeof linger);
					zmq_connect(req, url);
				}
			}
			break;
		default: /* empty frame */
			zmq_send(rogue, "", 0, ZMQ_DONTWAIT);
			break;
		}
		if (i % 100 == 0) {
			good_n++;
			good_ok += good_round(good, q, r, i);
		}
	}
	/* One message over ZMQ_MAXMSGSIZE: libzmq drops the rogue's connection. */
	size_t big = PROTO_MAX_MSG + 1024;
	char *huge = calloc(1, big);
	zmq_send(rogue, huge, big, ZMQ_DONTWAIT);
	free(huge);
	for (int i = 0; i < 10; i++) {
		good_n++;
		good_ok += good_round(good, q, r, i);
	}
	long after = rss_kb(pid);
	printf("good requests: %d of %d served; RSS %ld kB before, %ld kB after\n", good_ok, good_n,
	       before, after);
	CHECKF(good_ok == good_n, "good client not served: %d of %d", good_ok, good_n);
	CHECKF(before > 0 && after - before < 16 * 1024, "RSS grew from %ld to %ld kB", before, after);

	zmq_close(rogue);
	zmq_close(req);
	client_free(&good);
	zmq_ctx_term(ctx);
	kill(pid, SIGTERM);
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* The server counted what it dropped and what it answered with an
	 * error: its last log line says so. */
	unsigned long n_served = 0, n_errors = 0, n_dropped = 0;
	char line[512];
	int found = 0;
	FILE *lf = fopen(logpath, "r");
	while (lf && fgets(line, sizeof line, lf)) {
		const char *at = strstr(line, "stopping: ");
		if (at && sscanf(at, "stopping: %lu served, %lu errors, %lu dropped", &n_served,
				 &n_errors, &n_dropped) == 3)
			found = 1;
	}
	if (lf)
		fclose(lf);
	printf("targetd counted %lu served, %lu errors, %lu dropped (%d misframed sent)\n",
	       n_served, n_errors, n_dropped, misframed);
	CHECKF(found, "no 'stopping: ... dropped' line in %s", logpath);
	CHECKF(n_dropped >= (unsigned long)misframed, "dropped %lu < %d misframed messages sent",
	       n_dropped, misframed);
	CHECKF(n_errors > 0 && n_served >= (unsigned long)good_n, "errors %lu, served %lu",
	       n_errors, n_served);
	free(valid);
	free(buf);
	free(q);
	free(r);
	return check_done("test_rogue");
}
