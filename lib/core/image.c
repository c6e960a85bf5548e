/* image.c: see image.h. */
#include "image.h"

uint64_t pcg_img_checksum(const unsigned char *b, uint64_t size)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint64_t i = 0; i + 8 <= size; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		if (i == PCG_IMG_CHECKSUM)
			w = 0;
		h = (h ^ w) * 0x100000001b3ull;
	}
	return h;
}

#define U(x) ((unsigned long long)(x))

int pcg_img_check(const unsigned char *b, uint64_t size, const pcg_img_kind *k,
		  const char *name, pcg_err *err)
{
	if (size < PCG_IMG_HEADER)
		return pcg_fail(err, "%s: %llu bytes: too short for %s file (the header is %d)",
				name, U(size), k->a_what, PCG_IMG_HEADER);
	if (memcmp(b, k->magic, sizeof k->magic) != 0)
		return pcg_fail(err, "%s: not %s file (bad magic)", name, k->a_what);
	if (pcg_get32(b, PCG_IMG_VERSION) != k->version)
		return pcg_fail(err, "%s: %s version %u; this build reads version %u", name, k->what,
				pcg_get32(b, PCG_IMG_VERSION), k->version);
	if (pcg_get64(b, PCG_IMG_BYTES) != size)
		return pcg_fail(err, "%s: truncated or extended: %llu bytes, the header says %llu",
				name, U(size), U(pcg_get64(b, PCG_IMG_BYTES)));
	const uint64_t stored = pcg_get64(b, PCG_IMG_CHECKSUM), sum = pcg_img_checksum(b, size);
	if (stored != sum)
		return pcg_fail(err, "%s: checksum mismatch (stored %016llx, computed %016llx): "
				"the file is corrupt", name, U(stored), U(sum));
	return 0;
}

void pcg_img_seal(unsigned char *b, uint64_t size, const pcg_img_kind *k)
{
	memcpy(b, k->magic, sizeof k->magic);
	pcg_put32(b, PCG_IMG_VERSION, k->version);
	pcg_put64(b, PCG_IMG_BYTES, size);
	pcg_put64(b, PCG_IMG_CHECKSUM, pcg_img_checksum(b, size));
}

int pcg_img_load(pcg_bytes *im, const char *path, const void *mem, size_t size,
		 const pcg_img_kind *k, const char *name, void *view, pcg_err *err)
{
	if (path != NULL) {
		name = strcmp(path, "-") ? path : "stdin";
		if (pcg_bytes_open(path, PCG_IMG_HEADER, im, err) < 0)
			return -1;
	} else if (pcg_bytes_copy(im, mem, size, name, err) < 0) {
		return -1;
	}
	if (pcg_img_check(im->data, im->size, k, name, err) < 0 ||
	    k->validate(im->data, im->size, name, view, err) < 0) {
		pcg_bytes_close(im);
		return -1;
	}
	return 0;
}
