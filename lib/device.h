/* device.h: where a program computes: the CPU, or a CUDA device.
 *
 * Programs take --device cpu|cuda|cuda:N. The CUDA backend exists when the
 * build had nvcc (make CUDA=1, the default when nvcc is found); a build
 * without it, or a machine without a GPU, answers a request for cuda with
 * an error that says which.
 */
#ifndef PCG_DEVICE_H
#define PCG_DEVICE_H

#include "err.h"

/* The CPU; a CUDA device is its ordinal (0, 1, ...). */
#define PCG_DEVICE_CPU (-1)

/* Parses "cpu", "cuda" (device 0) or "cuda:N" into *device (PCG_DEVICE_CPU
 * or N). NULL or "" is the CPU. Returns 0, or -1 with err naming the text. */
int pcg_device_parse(const char *s, int *device, pcg_err *err);

/* 1 when this build has the CUDA backend. */
int pcg_device_have_cuda(void);

/* Checks that device can be used here: the CPU always; a CUDA ordinal when
 * the build has CUDA and the machine has that many devices. Returns 0, or -1
 * with err saying what is missing. */
int pcg_device_check(int device, pcg_err *err);

/* "cpu" or "cuda:N" into buf (at least 16 bytes); returns buf. */
const char *pcg_device_name(int device, char *buf, int len);

#endif
