/* safetensors.h: read-only, mmapped access to Hugging Face safetensors
 * checkpoints, single-file or sharded (model.safetensors.index.json).
 *
 * File format: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [a, b], "data_offsets": [begin, end]},
 *  "__metadata__": {...}}, then the data; offsets are relative to the data.
 * Everything in the header is validated before any tensor is handed out:
 * header length within the file, JSON well formed, known dtype strings,
 * shapes of non-negative integers whose product times the element size
 * equals end - begin without overflow, offsets within the data, tensors not
 * overlapping, names unique. A hostile file gives an error, never a crash.
 */
#ifndef PCG_SAFETENSORS_H
#define PCG_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"

#define ST_MAX_DIMS 8

typedef struct st_tensor {
	const char *name;
	pcg_dtype dtype;          /* PCG_DTYPE_OTHER for I64, U8, F64, ... */
	const char *dtype_name;   /* as written in the file: "BF16", "I64", ... */
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	int64_t numel;
	const void *data;         /* into the mapping; may be unaligned */
	size_t nbytes;
} st_tensor;

/* A checkpoint: one .safetensors file, or a directory holding
 * model.safetensors or model.safetensors.index.json plus its shards. */
typedef struct st_ckpt st_ckpt;

/* Opens path: a directory (model.safetensors.index.json is preferred over
 * model.safetensors when both exist) or a single .safetensors file. Shard
 * names in the index must be plain file names in the same directory (no
 * '/'), every tensor the index names must be in the shard it names.
 * Only the tensors the index names are exposed: others found in a shard are
 * validated with it but not listed. Gaps between tensors in a file are
 * accepted; overlaps are not.
 * Returns NULL and fills err on failure. */
st_ckpt *st_open(const char *path, pcg_err *err);

/* One .safetensors file's size bytes from memory (copied), validated as
 * st_open validates a file, named name in errors: for checking an image
 * before it is written, and for the fuzz target. */
st_ckpt *st_from_memory(const void *data, size_t size, const char *name, pcg_err *err);

/* Unmaps and frees; sets *c to NULL. NULL is fine. */
void st_close(st_ckpt **c);

/* Number of tensors, and the i-th tensor (0 <= i < st_count, in no set order). */
int st_count(const st_ckpt *c);
const st_tensor *st_get(const st_ckpt *c, int i);

/* The tensor called name, or NULL. */
const st_tensor *st_find(const st_ckpt *c, const char *name);

/* Total bytes mapped (all shards). */
size_t st_mapped_bytes(const st_ckpt *c);

/* Drops the file pages under t once the caller has copied it out (a reader
 * that converts every tensor would otherwise hold the copies and the mapped
 * file at once). The mapping is read-only and private: a later read of t
 * pages it in again. A copy in memory (st_from_memory) is left alone. */
void st_drop(const st_ckpt *c, const st_tensor *t);

/* The "__metadata__" value of key (validated as a string on open), from
 * the first file that has it; NULL when no file has it. The string lives as
 * long as c. */
const char *st_metadata(const st_ckpt *c, const char *key);

/* Writes a single-file safetensors as fileio.h says (a file: atomically,
 * from a temporary one, fsync, rename).
 * Tensors are written in the given order with data 8-byte aligned; names
 * must be unique. metadata may be NULL (else a JSON object as a string).
 * "8-byte aligned" is the start of the data section (the header is padded
 * with spaces); tensors follow each other without gaps, because the
 * reference reader refuses gaps, so a tensor is 8-byte aligned in the file
 * when the tensors before it add up to a multiple of 8 bytes. Only F32, F16
 * and BF16 can be written. On failure nothing is left at path nor a
 * temporary file (an existing file at path stays as it was). */
typedef struct st_out {
	const char *name;
	pcg_dtype dtype;
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	const void *data;
} st_out;
int st_write(const char *path, const st_out *t, int n, const char *metadata_json,
	     pcg_err *err);

#endif
