/* library.cu: the entry point of libpcg-cuda.so, and the libpcg functions
 * the CUDA code calls, each a call through the program's table
 * (lib/cuda/library.h says why). In the library only: the CUDA tests link
 * the other CUDA objects with libpcg itself. */
#include "cuda/library.h"

#include <stdio.h>

/* The program's functions, from pcg_cuda_library_open on. No CUDA call is
 * reached before it: every one goes through the kind it returns. */
static const pcg_cuda_host *host;

extern "C" {

int pcg_fail(pcg_err *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	host->vfail(err, fmt, ap);
	va_end(ap);
	return -1;
}

void pcg_err_prefix(pcg_err *err, const char *prefix)
{
	host->err_prefix(err, prefix);
}

size_t pcg_dtype_size(pcg_dtype t)
{
	return host->dtype_size(t);
}

const char *pcg_dtype_name(pcg_dtype t)
{
	return host->dtype_name(t);
}

int pcg_sampling_check(const pcg_sampling *s, pcg_err *err)
{
	return host->sampling_check(s, err);
}

const xc2_config *xc2_get_config(const xc2_model *m)
{
	return host->xc2_get_config(m);
}

const xc2_tensors *xc2_get_tensors(const xc2_model *m)
{
	return host->xc2_get_tensors(m);
}

int xc2_check_codes(const xc2_config *c, const int32_t *codes, int T, pcg_err *err)
{
	return host->xc2_check_codes(c, codes, T, err);
}

void xc2_fsq(const xc2_config *c, const int32_t *codes, int T, float *fsq)
{
	host->xc2_fsq(c, codes, T, fsq);
}

extern const pcg_device_kind pcg_cuda_kind; /* kind.cu */

/* The one name the library exports (the objects build with
 * -fvisibility=hidden). */
__attribute__((visibility("default"))) pcg_cuda_library_open_fn pcg_cuda_library_open;

const pcg_device_kind *pcg_cuda_library_open(const pcg_cuda_host *h, pcg_err *err)
{
	if (h->abi != PCG_CUDA_LIBRARY_ABI || h->size != sizeof *h ||
	    h->kind_size != sizeof(pcg_device_kind)) {
		snprintf(err->msg, sizeof err->msg,
			 "built for another version of pcg-tts (interface %d, this program's %d): "
			 "rebuild and reinstall both", PCG_CUDA_LIBRARY_ABI, h->abi);
		return NULL;
	}
#define PCG_CUDA_NAME_(name, type) name,
#define PCG_CUDA_SIZE_(name, type) sizeof(type),
	static const char *const names[] = { PCG_CUDA_STRUCTS(PCG_CUDA_NAME_) };
	static const size_t mine[] = { PCG_CUDA_STRUCTS(PCG_CUDA_SIZE_) };
	for (int i = 0; i < PCG_CUDA_N_STRUCTS; i++)
		if (h->struct_size[i] != mine[i]) {
			snprintf(err->msg, sizeof err->msg,
				 "built from other headers than this program: %s is %zu bytes in "
				 "the library and %zu in the program; rebuild and reinstall both",
				 names[i], mine[i], h->struct_size[i]);
			return NULL;
		}
	host = h;
	return &pcg_cuda_kind;
}

} /* extern "C" */
