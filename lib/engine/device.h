/* device.h: where a program computes. A device is a kind (the CPU, CUDA)
 * and an index among the devices of that kind; programs take
 * --device cpu|cuda|cuda:N and look the name up here.
 *
 * The kinds are one table (lib/engine/device.c): each entry names the kind and
 * holds its hooks, NULL where the kind has no such code: how many devices
 * the machine has, the forward pass's backend (lib/engine/backend.h), asg_build's
 * similar pairs (lib/speculate/asg_build.h) and the X-codec2 decoder (lib/codec/xcodec2.h).
 * CUDA's hooks open its code, a shared object, on the first call
 * (lib/engine/cudaload.c), so that a program on the CPU never maps it. A
 * kind this build lacks (CUDA without nvcc) stays in the table without
 * hooks, so that asking for it says how to get it. A new kind (Vulkan,
 * Metal, ROCm) is its own files and one entry there.
 */
#ifndef PCG_DEVICE_H
#define PCG_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct asg_pair;
struct pcg_backend;
struct xc2_model;

typedef struct pcg_device_kind {
	const char *name;     /* as --device says it: "cpu", "cuda" */
	const char *label;    /* in messages: "CUDA" */
	int indexed;          /* 1: name:N is device N (name alone: 0); 0: name alone */
	int host;             /* 1: the CPU (its memory is the program's) */
	const char *missing;  /* a kind this build lacks: how to get it; else NULL */
	/* Devices of the kind on this machine: 0 when there are none (not an
	 * error), -1 with err for any other failure. NULL: one (the CPU). */
	int (*count)(pcg_err *err);
	/* The forward pass's backend on device index (lib/engine/backend.h). */
	struct pcg_backend *(*backend_open)(int index, pcg_err *err);
	/* asg_build's similar pairs on device index, as lib/cuda/cuda_asg.h says;
	 * NULL: the kind has none (the CPU's are lib/speculate/asg_build.c's own). */
	int (*asg_pairs)(int index, const float *E, int n, int d, float theta, int rows,
			 void (*progress)(void *ctx, double done, double total),
			 void *progress_ctx, struct asg_pair **pairs, size_t *npairs,
			 pcg_err *err);
	/* The X-codec2 decoder on device index, as lib/cuda/cuda_xcodec2.h says
	 * (open, decode as an xc2_decoder, close); NULL: the kind has none (the
	 * CPU's is xc2_decode). */
	void *(*xc2_open)(const struct xc2_model *m, int index, pcg_err *err);
	int (*xc2_decode)(void *dec, const int32_t *codes, int T, float *out, pcg_err *err);
	void (*xc2_close)(void *dec);
} pcg_device_kind;

typedef struct pcg_device {
	const pcg_device_kind *kind;
	int index;            /* among the kind's devices: 0, 1, ... */
} pcg_device;

/* Looks s up in the table of kinds: "cpu", "cuda" (cuda:0) or "cuda:N".
 * NULL or "" is the CPU. Returns 0, or -1 with err naming the text and the
 * names there are ("device 'x': want cpu, cuda or cuda:N"). */
int pcg_device_parse(const char *s, pcg_device *dev, pcg_err *err);

/* The CPU. */
pcg_device pcg_device_cpu(void);

/* 1 when dev is the CPU. */
static inline int pcg_device_is_host(pcg_device dev) { return dev.kind->host; }

/* Checks that dev can be used here: the CPU always; another kind when the
 * build has it and the machine has that many devices of it. Returns 0, or
 * -1 with err saying what is missing. */
int pcg_device_check(pcg_device dev, pcg_err *err);

/* "cpu" or "cuda:N" into buf (at least 16 bytes); returns buf. */
const char *pcg_device_name(pcg_device dev, char *buf, int len);

#ifdef __cplusplus
}
#endif

#endif
