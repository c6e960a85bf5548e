/* library.h: what libpcg and libpcg-cuda.so (the .cu files of lib/cuda/
 * as a shared object) say to each other. The programs do not link CUDA:
 * libpcg opens the library with dlopen on the first use of a CUDA device
 * (lib/engine/cudaload.c), so that a run on the CPU never maps cudart, cuBLAS and
 * cuFFT (about 0.2 GB of RSS). The library exports one function,
 * pcg_cuda_library_open, which returns the CUDA entry of the table of
 * device kinds (lib/engine/device.h, lib/cuda/kind.cu).
 *
 * The CUDA code calls a few libpcg functions (errors, dtypes, the sampling
 * check, X-codec2's accessors and FSQ). The program hands the library
 * pointers to its own at open (pcg_cuda_host), and lib/cuda/library.cu
 * defines those names in the library as calls through them. Two other ways
 * were worse: linking libpcg's objects into the library would make a
 * second copy of them and of their state (xcodec2.o alone pulls in most of
 * libpcg and OpenBLAS), and resolving the names against the program
 * (-rdynamic) would depend on which members of libpcg.a each program
 * happened to link. With the table there is one copy of every function and
 * of its state, the program's, and the library links with -z defs: a new
 * call into libpcg that is not in the table fails the build, not a run.
 *
 * The CUDA tests (tests/cuda/) link the CUDA objects themselves, without
 * library.cu, so they call libpcg directly; lib/engine/cudaload.c then uses the
 * kind linked in rather than opening the library (one copy there too).
 */
#ifndef PCG_CUDA_LIBRARY_H
#define PCG_CUDA_LIBRARY_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* libpcg's headers (lib/cuda/ has a device.h and a sampling.h of its own). */
#include "../engine/device.h"
#include "../core/dtype.h"
#include "../core/err.h"
#include "../core/sampling.h"
#include "../codec/xcodec2.h"
#include "../engine/backend_impl.h"
#include "../engine/matmul.h"
#include "../speculate/asg_build.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The file dlopen looks for, through the program's RUNPATH (the Makefile:
 * next to the build tree's programs, build/, or where make install puts it,
 * PREFIX/lib/pcg-tts/) and the usual places (LD_LIBRARY_PATH first). */
#define PCG_CUDA_LIBRARY "libpcg-cuda.so"
#define PCG_CUDA_LIBRARY_OPEN "pcg_cuda_library_open"
/* Bumped when this file changes what the two sides pass. */
#define PCG_CUDA_LIBRARY_ABI 2

/* Every struct that crosses the boundary, by name: the host tells the
 * library their sizes as the program was built, and the library refuses to
 * open (naming the first that differs) when its own differ, so a library
 * left from an older build of other headers is not used. */
#define PCG_CUDA_STRUCTS(X) \
	X("pcg_device_kind", pcg_device_kind) \
	X("pcg_backend_ops", pcg_backend_ops) \
	X("struct pcg_backend", struct pcg_backend) \
	X("pcg_mat", pcg_mat) \
	X("pcg_sampling", pcg_sampling) \
	X("pcg_err", pcg_err) \
	X("xc2_config", xc2_config) \
	X("xc2_tensors", xc2_tensors) \
	X("asg_pair", asg_pair)
#define PCG_CUDA_COUNT_(name, type) +1
enum { PCG_CUDA_N_STRUCTS = 0 PCG_CUDA_STRUCTS(PCG_CUDA_COUNT_) };

/* The libpcg functions the CUDA code calls, as err.h, dtype.h, sampling.h
 * and xcodec2.h declare them. */
typedef struct pcg_cuda_host {
	int abi;          /* PCG_CUDA_LIBRARY_ABI */
	size_t size;      /* sizeof (pcg_cuda_host) */
	size_t kind_size; /* sizeof (pcg_device_kind) */
	size_t struct_size[PCG_CUDA_N_STRUCTS]; /* PCG_CUDA_STRUCTS' sizes, in order */
	int (*vfail)(pcg_err *err, const char *fmt, va_list ap);
	void (*err_prefix)(pcg_err *err, const char *prefix);
	size_t (*dtype_size)(pcg_dtype t);
	const char *(*dtype_name)(pcg_dtype t);
	int (*sampling_check)(const pcg_sampling *s, pcg_err *err);
	const xc2_config *(*xc2_get_config)(const xc2_model *m);
	const xc2_tensors *(*xc2_get_tensors)(const xc2_model *m);
	int (*xc2_check_codes)(const xc2_config *c, const int32_t *codes, int T, pcg_err *err);
	void (*xc2_fsq)(const xc2_config *c, const int32_t *codes, int T, float *fsq);
} pcg_cuda_host;

/* Keeps host (which must outlive the library) and returns the CUDA kind,
 * or NULL with err when host was built against another version of this
 * file (a library left from an older build). */
typedef const pcg_device_kind *pcg_cuda_library_open_fn(const pcg_cuda_host *host,
							 pcg_err *err);

#ifdef __cplusplus
}
#endif

#endif
