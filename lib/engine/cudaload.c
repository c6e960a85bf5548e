/* cudaload.c: the CUDA entry of the table of device kinds (lib/engine/device.h) in
 * a build with CUDA. Its hooks open libpcg-cuda.so (lib/cuda/library.h) on
 * the first call, once per process, and pass each call on to the library's
 * own hooks; a program that never asks for a CUDA device never maps the
 * CUDA libraries. When the library cannot be opened, every hook fails with
 * one line saying why (dlerror) and what to do. */
#ifdef PCG_CUDA
#include "cudaload.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "cuda/library.h"

/* A program that links the CUDA objects itself (the CUDA tests) has the
 * real kind (lib/cuda/kind.cu) and uses it, rather than load a second copy
 * of that code; in the programs it is not linked and this is NULL. */
extern const pcg_device_kind pcg_cuda_kind __attribute__((weak));

static const pcg_cuda_host host = {
	.abi = PCG_CUDA_LIBRARY_ABI,
	.size = sizeof(pcg_cuda_host),
	.kind_size = sizeof(pcg_device_kind),
#define PCG_CUDA_SIZE_(name, type) sizeof(type),
	.struct_size = { PCG_CUDA_STRUCTS(PCG_CUDA_SIZE_) },
#undef PCG_CUDA_SIZE_
	.vfail = pcg_vfail,
	.err_prefix = pcg_err_prefix,
	.dtype_size = pcg_dtype_size,
	.dtype_name = pcg_dtype_name,
	.sampling_check = pcg_sampling_check,
	.xc2_get_config = xc2_get_config,
	.xc2_get_tensors = xc2_get_tensors,
	.xc2_check_codes = xc2_check_codes,
	.xc2_fsq = xc2_fsq,
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const pcg_device_kind *cuda;   /* the library's kind, once opened */
static pcg_err why;                   /* else why it could not be */

static void open_library(void)
{
	pcg_cuda_library_open_fn *open;
	void *lib;

	if (&pcg_cuda_kind != NULL) {
		cuda = &pcg_cuda_kind;
		return;
	}
	/* RTLD_LOCAL: the library's names stay its own; it exports one. */
	if ((lib = dlopen(PCG_CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		pcg_fail(&why, "cannot open the CUDA backend: %s (make builds it into build/, "
			 "make install into PREFIX/lib/pcg-tts/; it needs CUDA's cudart, "
			 "cuBLAS and cuFFT)", dlerror());
		return;
	}
	/* POSIX's way from dlsym's void * to a function pointer. */
	*(void **)&open = dlsym(lib, PCG_CUDA_LIBRARY_OPEN);
	if (open == NULL) {
		pcg_fail(&why, "cannot open the CUDA backend: %s", dlerror());
	} else if ((cuda = open(&host, &why)) != NULL) {
		return;
	} else {
		pcg_err_prefix(&why, "the CUDA backend " PCG_CUDA_LIBRARY);
	}
	dlclose(lib);
}

/* The library's kind, or NULL with err. */
static const pcg_device_kind *library(pcg_err *err)
{
	pthread_once(&once, open_library);
	if (cuda == NULL)
		pcg_fail(err, "%s", why.msg);
	return cuda;
}

static int lazy_count(pcg_err *err)
{
	const pcg_device_kind *k = library(err);

	return k != NULL ? k->count(err) : -1;
}

static struct pcg_backend *lazy_backend_open(int index, pcg_err *err)
{
	const pcg_device_kind *k = library(err);

	return k != NULL ? k->backend_open(index, err) : NULL;
}

static int lazy_asg_pairs(int index, const float *E, int n, int d, float theta, int rows,
		     void (*progress)(void *ctx, double done, double total), void *progress_ctx,
		     struct asg_pair **pairs, size_t *npairs, pcg_err *err)
{
	const pcg_device_kind *k = library(err);

	return k != NULL ? k->asg_pairs(index, E, n, d, theta, rows, progress, progress_ctx,
					pairs, npairs, err)
			 : -1;
}

static void *lazy_xc2_open(const struct xc2_model *m, int index, pcg_err *err)
{
	const pcg_device_kind *k = library(err);

	return k != NULL ? k->xc2_open(m, index, err) : NULL;
}

/* Only on a decoder xc2_open made: the library is open. */
static int lazy_xc2_decode(void *dec, const int32_t *codes, int T, float *out, pcg_err *err)
{
	return cuda->xc2_decode(dec, codes, T, out, err);
}

static void lazy_xc2_close(void *dec)
{
	cuda->xc2_close(dec);
}

const pcg_device_kind pcg_cuda_lazy_kind = {
	.name = "cuda", .label = "CUDA", .indexed = 1,
	.count = lazy_count, .backend_open = lazy_backend_open, .asg_pairs = lazy_asg_pairs,
	.xc2_open = lazy_xc2_open, .xc2_decode = lazy_xc2_decode, .xc2_close = lazy_xc2_close,
};
#endif
