/* image.h: the checked binary files of pcg-tts (the ASG, asg(5); the
 * transition matrix, tm(5)), read in place. Both start with the same
 * 64-byte header frame:
 *
 *   0   magic (8 bytes, the kind's)    8  u32 version
 *   48  u64 the file's size in bytes   56 u64 checksum
 *
 * (the kind's own fields between), then 8-byte aligned arrays; all
 * little-endian. The checksum is FNV-1a over the file as 64-bit words with
 * the checksum field read as 0: each step (h ^ w) * prime is a bijection of
 * h, so a change confined to one word always changes it. pcg_img_check is
 * the frame's half of a reader's validation (the kind checks its fields and
 * arrays after it); pcg_img_seal writes the frame once the rest is written.
 */
#ifndef PCG_IMAGE_H
#define PCG_IMAGE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "fileio.h"

#define PCG_IMG_HEADER 64
#define PCG_IMG_VERSION 8
#define PCG_IMG_BYTES 48
#define PCG_IMG_CHECKSUM 56

/* A kind of file: its magic, its name in messages ("ASG", with its article:
 * "an ASG"), the version this build reads and writes, and the checks of its
 * own structure once the frame is checked (its arrays' sizes, ranges and
 * order), which fill the kind's view of the image: 0, or -1 with err naming
 * name and what is wrong. */
typedef struct pcg_img_kind {
	char magic[8];
	const char *what, *a_what;
	uint32_t version;
	int (*validate)(const unsigned char *b, uint64_t size, const char *name, void *view,
			pcg_err *err);
} pcg_img_kind;

static inline uint32_t pcg_get32(const unsigned char *b, int off)
{
	uint32_t v;
	memcpy(&v, b + off, 4);
	return v;
}

static inline uint64_t pcg_get64(const unsigned char *b, int off)
{
	uint64_t v;
	memcpy(&v, b + off, 8);
	return v;
}

static inline void pcg_put32(unsigned char *b, int off, uint32_t v) { memcpy(b + off, &v, 4); }
static inline void pcg_put64(unsigned char *b, int off, uint64_t v) { memcpy(b + off, &v, 8); }
static inline uint64_t pcg_align8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

uint64_t pcg_img_checksum(const unsigned char *b, uint64_t size);

/* The frame of an image of size bytes: long enough for the header, the
 * kind's magic and version, the size the header states, the checksum.
 * Returns 0, or -1 with err naming name and what is wrong. */
int pcg_img_check(const unsigned char *b, uint64_t size, const pcg_img_kind *k,
		  const char *name, pcg_err *err);

/* Writes the frame (magic, version, size, checksum last) into an image of
 * size bytes whose other fields and arrays are written. */
void pcg_img_seal(unsigned char *b, uint64_t size, const pcg_img_kind *k);

/* The image of a file ("-": standard input, named "stdin") or a copy of
 * size bytes of memory (path NULL, named name), in im, its frame checked
 * and then its structure (k->validate, filling view): the one way every
 * kind of file is opened. Returns 0, or -1 with err (im then closed). */
int pcg_img_load(pcg_bytes *im, const char *path, const void *mem, size_t size,
		 const pcg_img_kind *k, const char *name, void *view, pcg_err *err);

/* The main of asg-info and tm-info: "PROG [--FLAG] FILE" opens FILE (which
 * checks the checksum and the structure) and prints "file\tFILE", the
 * kind's header and statistics and "checksum_ok\tyes", or with --FLAG its
 * listing. Exit 0, 1 (a bad file, a failed write), 2 (usage). */
typedef struct pcg_img_info {
	const char *prog, *flag, *flag_help;
	void *(*open)(const char *path, pcg_err *err);
	void (*stats)(FILE *f, const void *obj);
	void (*list)(FILE *f, const void *obj);
	void (*close)(void *obj);
} pcg_img_info;
int pcg_img_info_main(const pcg_img_info *in, int argc, char **argv);

#endif
