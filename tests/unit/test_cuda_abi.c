/* test_cuda_abi.c: the CUDA library (build/libpcg-cuda.so, opened with
 * dlopen as the programs open it) checks the size of every struct that
 * crosses the boundary (PCG_CUDA_STRUCTS in lib/cuda/library.h): a host
 * that was built as this tree is accepted; one whose pcg_mat, or any other
 * of them, differs by a field is refused with a message naming that struct,
 * as is one of another interface number. No GPU is needed: opening the
 * library touches none. Skips without a CUDA build. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cuda/library.h"

int main(void)
{
	char self[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);

	if (n <= 0)
		SKIP("cannot find this test's path");
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(path, sizeof path, "%s/../%s", self, PCG_CUDA_LIBRARY);
	if (access(path, F_OK) != 0)
		SKIP("no CUDA build (%s): nothing to check", path);
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL)
		SKIP("the CUDA library does not load here (%s)", dlerror());
	pcg_cuda_library_open_fn *open_fn =
		(pcg_cuda_library_open_fn *)dlsym(lib, PCG_CUDA_LIBRARY_OPEN);
	CHECK(open_fn != NULL);
	if (open_fn == NULL)
		return check_done("test_cuda_abi");

	pcg_cuda_host h = { .abi = PCG_CUDA_LIBRARY_ABI, .size = sizeof h,
			    .kind_size = sizeof(pcg_device_kind) };
	static const char *const names[] = {
#define NAME_(name, type) name,
		PCG_CUDA_STRUCTS(NAME_)
#undef NAME_
	};
	const size_t sizes[] = {
#define SIZE_(name, type) sizeof(type),
		PCG_CUDA_STRUCTS(SIZE_)
#undef SIZE_
	};
	memcpy(h.struct_size, sizes, sizeof sizes);
	pcg_err err = { "" };
	CHECKF(open_fn(&h, &err) != NULL, "a host built as this tree refused: %s", err.msg);

	/* each struct in turn a field larger: refused, named */
	for (int i = 0; i < PCG_CUDA_N_STRUCTS; i++) {
		pcg_cuda_host bad = h;
		bad.struct_size[i] += 8;
		pcg_err e = { "" };
		CHECKF(open_fn(&bad, &e) == NULL && strstr(e.msg, names[i]) != NULL &&
			       strstr(e.msg, "rebuild") != NULL,
		       "%s 8 bytes larger: '%s'", names[i], e.msg);
	}
	pcg_cuda_host old = h;
	old.abi = PCG_CUDA_LIBRARY_ABI - 1;
	pcg_err e = { "" };
	CHECKF(open_fn(&old, &e) == NULL && strstr(e.msg, "another version") != NULL,
	       "another interface number: '%s'", e.msg);
	printf("the library checks %d structs: accepted as built, refused with each changed\n",
	       PCG_CUDA_N_STRUCTS);
	dlclose(lib);
	return check_done("test_cuda_abi");
}
