/* check.h: every CUDA runtime, cuBLAS and cuFFT call of the CUDA backend
 * goes through one of these macros, which turn a failure into pcg_fail()
 * with the file, the line and the call, and return -1 from the enclosing
 * function. Device memory comes from pcg_cuda_alloc, whose error says how
 * much was asked for and how much the device has free. No managed memory. */
#ifndef PCG_CUDA_CHECK_H
#define PCG_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cufft.h>
#include <stddef.h>

#include "err.h"

#define CU_CHECK(call, err) \
	do { \
		cudaError_t e_ = (call); \
		if (e_ != cudaSuccess) { \
			(void)cudaGetLastError(); /* reported here, not again later */ \
			return pcg_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, \
					cudaGetErrorString(e_)); \
		} \
	} while (0)

/* A kernel launch: the launch error, at once (the asynchronous errors
 * surface at the next synchronising call, itself checked). A failed call
 * is cleared from the runtime's last error (cudaGetLastError) as it is
 * reported: otherwise a later launch's check would find it and fail with
 * an error that is not its own (a bad device ordinal, say). */
#define CU_LAUNCH(err) CU_CHECK(cudaGetLastError(), err)

#define CUBLAS_CHECK(call, err) \
	do { \
		cublasStatus_t s_ = (call); \
		if (s_ != CUBLAS_STATUS_SUCCESS) \
			return pcg_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, \
					cublasGetStatusString(s_)); \
	} while (0)

#define CUFFT_CHECK(call, err) \
	do { \
		cufftResult r_ = (call); \
		if (r_ != CUFFT_SUCCESS) \
			return pcg_fail(err, "%s:%d: %s: cuFFT error %d", __FILE__, __LINE__, \
					#call, (int)r_); \
	} while (0)

#ifdef __cplusplus
extern "C" {
#endif

/* cudaMalloc of bytes for what (named in the error); out of memory says
 * how much the device has free. *p is NULL on failure. */
int pcg_cuda_alloc(void **p, size_t bytes, const char *what, pcg_err *err);

#ifdef __cplusplus
}
#endif

#endif
