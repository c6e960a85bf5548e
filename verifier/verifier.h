/* verifier.h: what the verifier's files share (private to the verifier):
 * its settings, one struct filled from the option table in main.c; the
 * stages and their replicas; a job; the state the hub (hub.c) and the
 * workers (worker.c) share; and the calls between them. main.c loads what
 * the settings name and hands over to the hub. */
#ifndef VERIFIER_H
#define VERIFIER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "asg.h"
#include "err.h"
#include "llasa.h"
#include "prompts.h"
#include "proto.h"
#include "speculate.h"
#include "tm.h"
#include "tokenizer.h"
#include "voice.h"

extern const char *const prog;

/* The settings, as the option table (main.c) fills them; main fills in the
 * defaults that depend on --local. Read-only once the hub runs. */
typedef struct verifier_cfg {
	const char *tok_path, *asg_path, *knn_path, *voice_path, *tm_path, *encoder_path;
	const char *listen_url, *draft_url, *target_url, *codec_url; /* codec: "none" */
	int n_sessions, max_queue;   /* workers; jobs that may wait beyond them */
	int timeout_ms, tries, ms_per_pos; /* the requests to the servers */
	const char *costs;           /* the cost model's terms, or NULL: learnt */
	const char *local_dir, *local_draft, *local_layers, *local_device;
	const char *curve_key, *curve_allow, *curve_peers;
} verifier_cfg;

/* The replicas of a model server: endpoints, sessions on each, and until
 * when one that stopped answering gets no new sessions. */
#define MAX_REPLICAS 16
typedef struct stage {
	const char *name;
	char *urls[MAX_REPLICAS];
	int n;
	atomic_int load[MAX_REPLICAS];
	_Atomic double dead_until[MAX_REPLICAS];
} stage;

/* An ASG image sent with a request: validated by asg_open through a memory
 * file, shared by the requests that send the same bytes while they run. */
typedef struct sent_asg {
	asg *a;
	uint64_t hash;
	int refs;
	struct sent_asg *next;
} sent_asg;

/* One synth request: queued, then run by a worker. The hub owns the list
 * and frees a job (job_free) after its final message; a worker owns a job
 * from dequeue to its final message. */
typedef struct job {
	uint64_t session;          /* the servers' session id (a ping's job: its
				    * request's id, and no req) */
	unsigned char route[256];  /* the client */
	size_t route_len;
	int delim;
	proto_msg *req;            /* a copy; req->synth.asg points to asg_img */
	void *asg_img;
	void *prompt_img;          /* and req->synth.prompt_audio to this */
	atomic_int cancel;         /* the client went away or asked */
	atomic_int cancel_told;    /* the worker logged the cancel */
	struct job *next_q;        /* the queue (under lock) */
	struct job *next;          /* the hub's list of live jobs */
} job;

typedef struct worker worker;

typedef struct verifier {
	const verifier_cfg *cfg;
	tokenizer *tok;
	llasa_vocab voc;
	spec_env env;
	asg *groups;          /* --asg */
	asg *knn;             /* --knn */
	voice_info *voice;    /* --voice: a phoneme voice, else NULL */
	tmat *tm;             /* --tm, for mtp-viterbi */
	pcg_prompts *prompts; /* --encoder: cloning prompts, encoded once */
	void *ctx;
	stage stages[2];      /* SPEC_DRAFT, SPEC_TARGET: their replicas */
	worker *workers;      /* cfg->n_sessions of them, once the hub started them */
	/* the queue of jobs waiting for a worker, and the sent ASGs */
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_mutex_t costs_lock; /* learn_costs, once */
	int costs_known;      /* the terms are learnt, or given, or given up on */
	int costs_given;      /* --costs: only the target's heads are learnt */
	int costs_tries;      /* sessions whose learning found no target */
	job *q_head, *q_tail;
	int n_queued, idle;
	sent_asg *sent;
	atomic_ullong next_session;
} verifier;

/* worker.c */

/* Splits "a,b,c" into st->urls; checks each endpoint. Returns 0 or -1. */
int stage_parse(stage *st, const char *name, const char *list, pcg_err *err);

/* The replica for a new session: the least loaded of those answering
 * (all of them when none is), other than skip (-1: none). Counts the
 * session in. */
int stage_pick(stage *st, int skip);

/* The liveness probe of a client of an ipc endpoint (url). */
int stage_listening(void *url);

/* Starts cfg->n_sessions workers (v->workers), each with its own clients
 * of the servers and a PUSH socket to inproc://verifier-out, which must be
 * bound. Returns 0, or -1 (workers_stop then frees those started). */
int workers_start(verifier *v, pcg_err *err);

/* Wakes the idle workers, shuts the context down (a busy worker's calls
 * fail, so it ends its session at its next round), joins and frees them.
 * pcg_daemon_stop must be set. */
void workers_stop(verifier *v);

/* costs.c */

/* The cost model's terms (v->env.costs), once, before the first session. */
void learn_costs(verifier *v);

/* hub.c */

/* Serves the clients on cfg->listen_url until a stop: the workers start
 * once it is bound and are stopped before it returns; the jobs left are
 * freed. Returns 0 after a stop, 1 after printing what failed. */
int hub_run(verifier *v);

/* Frees a job and its copies; *j becomes NULL. */
void job_free(job **j);

#endif
