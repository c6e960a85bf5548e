/* verifier: the hub of the pipeline. Clients (pcg-synth) send "synth"
 * requests; each becomes a session of the round loop (lib/speculate/speculate.h: the
 * draft proposes L tokens at draftd, the target scores the block in one
 * pass at targetd, the policy decides what to keep), run by one of
 * --sessions worker threads, so many utterances are in flight at once and
 * their rounds interleave at the model servers, which batch them. The
 * committed tokens go to codec-decode, and the audio it returns goes back
 * to the client in "progress" messages as it comes; the last message is
 * the result with the tokens and the statistics. Requests beyond the
 * workers wait in a queue (told their position); a client that goes away
 * or sends "cancel" ends its session within a round. Only the main thread
 * touches the clients' socket. See man/verifier.8.
 * This file: the options (one settings struct), what they name loaded, the
 * local model servers, and main; the hub is hub.c, the workers worker.c,
 * the cost model's terms costs.c. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "costmodel.h"
#include "device.h"
#include "modelserver.h"
#include "net.h"
#include "opts.h"
#include "service.h"
#include "verifier.h"

const char *const prog = "verifier";
static const char *SYNOPSIS = "--tokenizer FILE [--asg FILE|-] [--knn FILE] [--listen URL] [--draft URL] "
			      "[--target URL] [--codec URL|none] [--encoder FILE|DIR] [--sessions N] [--queue N] [--timeout-ms N] "
			      "[--tries N] [--ms-per-position N]";

static verifier_cfg cfg; /* the options' values */

static const pcg_opt opts[] = {
	{ "tokenizer", PCG_OPT_STR, &cfg.tok_path, NULL, 1, 0, "FILE",
	  "the target's tokenizer.json or GGUF file (the speech vocabulary and the prompt)" },
	{ "asg", PCG_OPT_STR, &cfg.asg_path, NULL, 1, 0, "FILE",
	  "ASG file for the pcg policy (- reads standard input)" },
	{ "knn", PCG_OPT_STR, &cfg.knn_path, NULL, 1, 0, "FILE",
	  "neighbour file for the lantern policy (asg-build --knn K; "
	  "default with --local: DIR/knn when it exists)" },
	{ "voice", PCG_OPT_STR, &cfg.voice_path, NULL, 1, 0, "FILE",
	  "a phoneme voice's voice.json: espeak-ng phonemes and forced phoneme tokens "
	  "(default with --local: DIR/voice.json when it exists)" },
	{ "tm", PCG_OPT_STR, &cfg.tm_path, NULL, 1, 0, "FILE",
	  "token transition matrix (tm-build) for mtp-viterbi "
	  "(default with --local: DIR/tm when it exists)" },
	{ "encoder", PCG_OPT_STR, &cfg.encoder_path, NULL, 1, 0, "FILE|DIR",
	  "the X-codec2 checkpoint whose encoder turns a request's cloning prompt (audio) "
	  "into codes, once per file (loaded on the first prompt)" },
	{ "listen", PCG_OPT_STR, &cfg.listen_url, "tcp://127.0.0.1:7600", 1, 0, "URL",
	  "endpoint for clients" },
	{ "draft", PCG_OPT_STR, &cfg.draft_url, "tcp://127.0.0.1:7601", 1, 0, "URL[,URL...]",
	  "draftd, or replicas of it" },
	{ "target", PCG_OPT_STR, &cfg.target_url, "tcp://127.0.0.1:7602", 1, 0, "URL[,URL...]",
	  "targetd, or replicas of it: new sessions go to the least loaded; a session "
	  "moves to another when its replica stops answering" },
	{ "codec", PCG_OPT_STR, &cfg.codec_url, "none", 1, 0, "URL",
	  "codec-decode, or none (tokens only)" },
	{ "sessions", PCG_OPT_INT, &cfg.n_sessions, "8", 1, 1024, "N",
	  "utterances in flight at once (each a worker thread with its own connections)" },
	{ "queue", PCG_OPT_INT, &cfg.max_queue, "256", 0, 1 << 20, "N",
	  "requests that may wait for a session; beyond, a request gets the error busy" },
	{ "timeout-ms", PCG_OPT_INT, &cfg.timeout_ms, "3000", 10, 600000, "N",
	  "per-try timeout of a request to a server, counted from the last sign of life "
	  "(a server busy with other sessions says so every second)" },
	{ "tries", PCG_OPT_INT, &cfg.tries, "2", 1, 100, "N", "tries per request before giving up" },
	{ "ms-per-position", PCG_OPT_INT, &cfg.ms_per_pos, "250", 0, 600000, "N",
	  "more wait per position a request makes a model server compute (a prompt's prefill)" },
	{ "costs", PCG_OPT_STR, &cfg.costs, NULL, 1, 0, "STEP_MS,DRAFT_MS,SLOPE,TRIP_MS[,HEAD_MS]",
	  "the cost model's terms (the target's step, the draft's step, a block's "
	  "slope, a trip to a server, an MTP head); default: the servers' own "
	  "measures and a score's round trip, learnt before the first session" },
	{ "local", PCG_OPT_STR, &cfg.local_dir, NULL, 1, 0, "DIR",
	  "run the target (DIR) and the draft as threads of this process, on inproc:// "
	  "endpoints, instead of connecting to --draft and --target" },
	{ "local-draft", PCG_OPT_STR, &cfg.local_draft, NULL, 1, 0, "DIR",
	  "with --local: the draft model (default: DIR/draft when it exists, else the target)" },
	{ "local-draft-layers", PCG_OPT_STR, &cfg.local_layers, NULL, 1, 0, "LIST",
	  "with --local: the draft is these layers of the target" },
	{ "device", PCG_OPT_STR, &cfg.local_device, "cpu", 1, 0, "DEV",
	  "with --local: where the models run (cpu, cuda or cuda:N)" },
	{ "curve-key", PCG_OPT_STR, &cfg.curve_key, NULL, 1, 0, "FILE",
	  "this process's CURVE keypair (pcg-keygen); needed for tcp beyond loopback" },
	{ "curve-allow", PCG_OPT_STR, &cfg.curve_allow, NULL, 1, 0, "FILE",
	  "public keys of the clients let in" },
	{ "curve-peers", PCG_OPT_STR, &cfg.curve_peers, NULL, 1, 0, "FILE",
	  "the servers' public keys ('URL KEY' lines)" },
	{ NULL },
};


/* --local: a model server as a thread of this process. */
typedef struct local_server {
	pthread_t th;
	void *ctx;
	ms_config cfg;
	int started, rc;
} local_server;

static void *local_main(void *arg)
{
	local_server *ls = arg;
	ls->rc = modelserver_serve(ls->ctx, &ls->cfg, &pcg_daemon_stop);
	return NULL;
}

/* With --local DIR: DIR/name (into buf) when that file exists, else NULL. */
static const char *beside_local(char *buf, size_t size, const char *name)
{
	if (cfg.local_dir == NULL)
		return NULL;
	snprintf(buf, size, "%s/%s", cfg.local_dir, name);
	return access(buf, F_OK) == 0 ? buf : NULL;
}

/* The settings --local changes: the files beside DIR that were not named,
 * the draft (DIR/draft when it holds a model, as pcg-up does), the layers
 * of a draft cut from the target (into layers), the device, and the
 * servers' endpoints. Returns 0, or an exit status after printing why. */
static int local_settings(int *layers, int *n_layers)
{
	static char voice[4200], tm[4200], knn[4200], draft[4200];
	pcg_err err = { "" };
	pcg_device dev;

	if (cfg.local_dir == NULL)
		return 0;
	if ((*n_layers = modelserver_parse_layers(cfg.local_layers, layers, 1024, &err)) < 0) {
		fprintf(stderr, "%s: --local-draft-layers: %s\n", prog, err.msg);
		return 2;
	}
	if (pcg_device_parse(cfg.local_device, &dev, &err) < 0) {
		fprintf(stderr, "%s: --device: %s\n", prog, err.msg);
		return 2;
	}
	if (pcg_device_check(dev, &err) < 0)
		return pcg_report(prog, &err);
	cfg.draft_url = "inproc://draftd";
	cfg.target_url = "inproc://targetd";
	if (cfg.voice_path == NULL)
		cfg.voice_path = beside_local(voice, sizeof voice, "voice.json");
	if (cfg.local_draft == NULL && cfg.local_layers == NULL &&
	    beside_local(draft, sizeof draft, "draft/config.json")) {
		snprintf(draft, sizeof draft, "%s/draft", cfg.local_dir);
		cfg.local_draft = draft;
	}
	if (cfg.tm_path == NULL)
		cfg.tm_path = beside_local(tm, sizeof tm, "tm");
	if (cfg.knn_path == NULL)
		cfg.knn_path = beside_local(knn, sizeof knn, "knn");
	return 0;
}

/* An ASG (--asg, --knn) must not cover more tokens than the vocabulary's
 * speech range. */
static int asg_fits(const verifier *v, const asg *a, const char *path, pcg_err *err)
{
	if (a && asg_get(a)->n > (uint32_t)v->voc.speech_count)
		return pcg_fail(err, "%s: covers %u tokens, the vocabulary has %d speech tokens", path,
				asg_get(a)->n, v->voc.speech_count);
	return 0;
}

/* What the settings name: the tokenizer, the ASGs, the transition matrix,
 * the phoneme voice, the encoder (loaded on the first prompt), the cost
 * model's terms. Returns 0 or -1. */
static int load(verifier *v, pcg_err *err)
{
	static voice_info vi;

	v->tok = tok_open(cfg.tok_path, err);
	if (v->tok == NULL || llasa_vocab_init(v->tok, &v->voc, err) < 0)
		return -1;
	if (cfg.asg_path && (v->groups = asg_open(cfg.asg_path, err)) == NULL)
		return -1;
	if (cfg.knn_path && (v->knn = asg_open(cfg.knn_path, err)) == NULL)
		return -1;
	if (asg_fits(v, v->knn, cfg.knn_path, err) < 0)
		return -1;
	if (cfg.tm_path && (v->tm = tm_open(cfg.tm_path, err)) == NULL)
		return -1;
	if (cfg.voice_path) {
		if (voice_load(cfg.voice_path, &vi, err) < 0)
			return -1;
		v->voice = &vi;
		if (tok_token_id(v->tok, "<|p__|>", 7) < 0)
			return pcg_fail(err, "%s: the tokenizer has no pause token <|p__|>: not a "
					"phoneme voice's", cfg.voice_path);
		if (vi.next_phoneme && tok_token_id(v->tok, "<|n__|>", 7) < 0)
			return pcg_fail(err, "%s: next_phoneme is set but the tokenizer has no <|n__|>",
					cfg.voice_path);
	}
	if (asg_fits(v, v->groups, cfg.asg_path, err) < 0)
		return -1;
	v->env = (spec_env){ .tok = v->tok, .voc = &v->voc, .voice = v->voice, .tm = v->tm,
			     .knn = v->knn,
			     .unk_phone = v->voice ? tok_token_id(v->tok, "<|p__|>", 7) : 0,
			     .unk_next = v->voice ? tok_token_id(v->tok, "<|n__|>", 7) : 0 };
	const char *rt = getenv("PCG_RUN_TOKENS");
	if (rt && *rt) {
		char *end;
		long n = strtol(rt, &end, 10);
		if (*end != '\0' || n < 0 || n > PROTO_MAX_N)
			return pcg_fail(err, "PCG_RUN_TOKENS: '%s' is not a number of tokens from 0 "
					"(grown by the target's time) to %d", rt, PROTO_MAX_N);
		v->env.run_tokens = (int)n;
	}
	/* the encoder loads on the first prompt: a verifier that is sent none
	 * never holds its 1.2 GB */
	if (cfg.encoder_path &&
	    (v->prompts = pcg_prompts_new(cfg.encoder_path, PCG_BF16, 64, err)) == NULL)
		return -1;
	if (cfg.costs) {
		if (cost_terms_parse(cfg.costs, &v->env.costs, err) < 0)
			return -1;
		v->costs_given = 1;
	}
	return 0;
}

/* With --local: the target and the draft as threads on v's context. */
static int local_start(local_server ls[2], void *ctx, const int *layers, int n_layers,
		       pcg_err *err)
{
	if (cfg.local_dir == NULL)
		return 0;
	ls[0].cfg = (ms_config){ .prog = "targetd", .model_dir = cfg.local_dir,
				 .listen_url = cfg.target_url, .kv_mem = 2LL << 30,
				 .device = cfg.local_device };
	ls[1].cfg = (ms_config){ .prog = "draftd",
				 .model_dir = cfg.local_draft ? cfg.local_draft : cfg.local_dir,
				 .listen_url = cfg.draft_url, .layers = n_layers ? layers : NULL,
				 .n_layers = n_layers, .kv_mem = 2LL << 30,
				 .device = cfg.local_device, .draft = 1 };
	for (int i = 0; i < 2; i++) {
		ls[i].ctx = ctx;
		if (pthread_create(&ls[i].th, NULL, local_main, &ls[i]) != 0)
			return pcg_fail(err, "cannot start a local model server");
		ls[i].started = 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	verifier v = { .cfg = &cfg };
	local_server ls[2] = { 0 };
	int rc, layers[1024], n_layers = 0;

	/* In --local mode the model servers are threads here: passive OpenMP
	 * waiting, as draftd and targetd have it. */
	pcg_daemon_openmp(argv);
	const int first = pcg_opts_parse(opts, argc, argv, &err);
	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first >= 0 && cfg.tok_path == NULL && cfg.local_dir)
		cfg.tok_path = cfg.local_dir; /* its tokenizer.json, or a GGUF's own (tok_open) */
	if (first < 0 || first != argc || cfg.tok_path == NULL)
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg
			: first != argc ? "unexpected argument" : "--tokenizer FILE is required");
	if ((rc = local_settings(layers, &n_layers)) != 0)
		return rc;
	if (net_curve_setup(cfg.curve_key, cfg.curve_allow, cfg.curve_peers, &err) < 0)
		return pcg_report(prog, &err);
	if (net_endpoint_ok(cfg.listen_url, 1, &err) < 0 ||
	    stage_parse(&v.stages[SPEC_DRAFT], "draft", cfg.draft_url, &err) < 0 ||
	    stage_parse(&v.stages[SPEC_TARGET], "target", cfg.target_url, &err) < 0 ||
	    (strcmp(cfg.codec_url, "none") && net_endpoint_ok(cfg.codec_url, 0, &err) < 0)) {
		pcg_report(prog, &err);
		return 2;
	}
	v.stages[SPEC_DRAFT].name = "draftd";
	v.stages[SPEC_TARGET].name = "targetd";
	atomic_init(&v.next_session, ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid());
	pthread_mutex_init(&v.lock, NULL);
	pthread_mutex_init(&v.costs_lock, NULL);
	pthread_cond_init(&v.wake, NULL);
	rc = 1;
	if (load(&v, &err) < 0 || (v.ctx = zmq_ctx_new()) == NULL ||
	    local_start(ls, v.ctx, layers, n_layers, &err) < 0) {
		if (v.ctx == NULL && err.msg[0] == '\0')
			pcg_fail(&err, "out of memory");
		pcg_report(prog, &err);
	} else {
		rc = hub_run(&v);
	}
	pcg_daemon_stop = 1;
	if (v.ctx)
		zmq_ctx_shutdown(v.ctx); /* the local servers stop */
	for (int i = 0; i < 2; i++)
		if (ls[i].started) {
			pthread_join(ls[i].th, NULL);
			if (ls[i].rc != 0)
				rc = 1;
		}
	if (v.ctx)
		zmq_ctx_term(v.ctx);
	for (int sg = 0; sg < 2; sg++)
		for (int k = 0; k < MAX_REPLICAS; k++)
			free(v.stages[sg].urls[k]);
	asg_close(&v.groups);
	asg_close(&v.knn);
	tm_close(&v.tm);
	pcg_prompts_free(&v.prompts);
	tok_free(&v.tok);
	return rc;
}
