/* gguf.h: GGUF files (llama.cpp's model format, versions 2 and 3), read
 * mapped and validated, and written all-or-nothing.
 *
 * File format (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv;
 * n_kv pairs of (string key, u32 value type, value); n_tensors infos of
 * (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset);
 * padding to general.alignment (default 32); the tensor data, each tensor
 * at its offset from the start of the data (a multiple of the alignment).
 * A string is u64 length + bytes (no NUL); an array is u32 element type,
 * u64 count, the elements. ne[0] is the innermost dimension: a Hugging
 * Face matrix [rows, cols] is ne = {cols, rows}.
 *
 * Everything is validated before a tensor is handed out: magic, version,
 * counts and lengths bounded by the file size, value types, nested arrays
 * (at most 8 deep), bools 0 or 1, keys and tensor names non-empty without
 * NUL bytes and unique, general.alignment a uint32 power of two, 0 to 4
 * dimensions each positive with no overflow, a known ggml type with ne[0]
 * a multiple of its block, offsets aligned, every tensor within the file
 * and no two tensors sharing a byte. A hostile file gives an error, never
 * a crash. Strings are not checked for UTF-8 (their users do that).
 */
#ifndef PCG_GGUF_H
#define PCG_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"

/* Value types of the metadata, as GGUF numbers them. */
typedef enum gguf_type {
	GGUF_UINT8 = 0,
	GGUF_INT8 = 1,
	GGUF_UINT16 = 2,
	GGUF_INT16 = 3,
	GGUF_UINT32 = 4,
	GGUF_INT32 = 5,
	GGUF_FLOAT32 = 6,
	GGUF_BOOL = 7,
	GGUF_STRING = 8,
	GGUF_ARRAY = 9,
	GGUF_UINT64 = 10,
	GGUF_INT64 = 11,
	GGUF_FLOAT64 = 12,
} gguf_type;

/* ggml's tensor type numbers for the types the engine computes with. */
enum {
	GGML_TYPE_F32 = 0,
	GGML_TYPE_F16 = 1,
	GGML_TYPE_Q4_0 = 2,
	GGML_TYPE_Q8_0 = 8,
	GGML_TYPE_Q4_K = 12,
	GGML_TYPE_Q5_K = 13,
	GGML_TYPE_Q6_K = 14,
	GGML_TYPE_BF16 = 30,
};

#define GGUF_MAX_DIMS 4

typedef struct gguf_tensor {
	const char *name;
	pcg_dtype dtype;        /* PCG_DTYPE_OTHER for a type the engine cannot use */
	int ggml_type;          /* as stored */
	const char *type_name;  /* ggml's name for it: "Q8_0", "Q3_K", "IQ2_XXS", ... */
	int ndim;
	int64_t ne[GGUF_MAX_DIMS]; /* ne[0] innermost; unused dimensions are 1 */
	const void *data;       /* into the mapping; every type's size is known */
	size_t nbytes;          /* ne[0] / block * block bytes * ne[1] * ne[2] * ne[3] */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Opens and maps path. Returns NULL with err naming the file and what is
 * wrong with it. */
gguf_file *gguf_open(const char *path, pcg_err *err);
/* A file image already in memory (tests, fuzzing): the same validation;
 * data must outlive the result. */
gguf_file *gguf_from_memory(const void *data, size_t size, pcg_err *err);
void gguf_close(gguf_file **f);
/* 1 when the file at path starts with the GGUF magic. */
int gguf_is_gguf(const char *path);

uint32_t gguf_version(const gguf_file *f);
/* The bytes mapped (0 for a file read into memory or gguf_from_memory). */
size_t gguf_mapped_bytes(const gguf_file *f);
/* general.alignment, or 32: tensor data offsets are multiples of it. */
size_t gguf_alignment(const gguf_file *f);

/* Metadata. gguf_find_key: the index of key, or -1 (keys are looked up by
 * binary search). gguf_key: NULL when i is out of range; gguf_kv_type needs
 * 0 <= i < gguf_n_kv. The typed getters return 0, -1 with err when the key
 * is absent ("KEY: missing") or has another type; gguf_get_int accepts any
 * integer type whose value fits in int64, gguf_get_float any integer or
 * float type (converted to double). Strings point into the file. */
int gguf_n_kv(const gguf_file *f);
int gguf_find_key(const gguf_file *f, const char *key);
const char *gguf_key(const gguf_file *f, int i);
gguf_type gguf_kv_type(const gguf_file *f, int i);
int gguf_get_int(const gguf_file *f, const char *key, int64_t *v, pcg_err *err);
int gguf_get_float(const gguf_file *f, const char *key, double *v, pcg_err *err);
int gguf_get_bool(const gguf_file *f, const char *key, int *v, pcg_err *err);
/* A string value: its bytes (not NUL-terminated) and length, in the mapping. */
int gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len, pcg_err *err);
/* An array value: its element type and count. */
int gguf_get_arr(const gguf_file *f, const char *key, gguf_type *type, size_t *n, pcg_err *err);
/* Element i of an array of strings / of numbers (any integer, float or bool
 * element type, converted); i at or beyond the count is an error. Both take
 * constant time (string arrays are indexed when the file is opened). */
int gguf_arr_str(const gguf_file *f, const char *key, size_t i, const char **s, size_t *len,
		 pcg_err *err);
int gguf_arr_num(const gguf_file *f, const char *key, size_t i, double *v, pcg_err *err);

/* Tensors, in file order (gguf_tensor_at: NULL when i is out of range);
 * gguf_find_tensor: NULL when there is none of that name. The pointers live
 * as long as the file. */
int gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
/* ggml's name of a tensor type number ("Q3_K"), or NULL for an unknown one. */
const char *gguf_ggml_type_name(int ggml_type);

/* ---------------------------------------------------------------- writing */

typedef struct gguf_writer gguf_writer;

/* Starts a file (version 3, alignment 32, or general.alignment when it is
 * set with gguf_set_u32); nothing is written to path until
 * gguf_writer_finish, which writes it through lib/core/fileio.c. The setters
 * copy what they are given; a key set twice, an empty key or an alignment
 * that is not a power of two is an error. */
gguf_writer *gguf_writer_new(pcg_err *err);
void gguf_writer_free(gguf_writer **w);

int gguf_set_u32(gguf_writer *w, const char *key, uint32_t v, pcg_err *err);
int gguf_set_i32(gguf_writer *w, const char *key, int32_t v, pcg_err *err);
int gguf_set_f32(gguf_writer *w, const char *key, float v, pcg_err *err);
int gguf_set_bool(gguf_writer *w, const char *key, int v, pcg_err *err);
int gguf_set_str(gguf_writer *w, const char *key, const char *v, pcg_err *err);
/* Arrays: n elements copied. */
int gguf_set_arr_str(gguf_writer *w, const char *key, const char *const *v, size_t n,
		     pcg_err *err);
int gguf_set_arr_i32(gguf_writer *w, const char *key, const int32_t *v, size_t n, pcg_err *err);
int gguf_set_arr_f32(gguf_writer *w, const char *key, const float *v, size_t n, pcg_err *err);

/* A tensor of dtype (F32, F16, BF16 or a block type) and shape ne (ne[0]
 * innermost). Its bytes come from fill(ctx, index, dst, nbytes), called once
 * in order while gguf_writer_finish writes, so a large model is quantised
 * tensor by tensor and never held whole; fill returns 0 or -1 with err. */
typedef int (*gguf_fill_fn)(void *ctx, int index, void *dst, size_t nbytes, pcg_err *err);
int gguf_add_tensor(gguf_writer *w, const char *name, pcg_dtype dtype, int ndim,
		    const int64_t *ne, gguf_fill_fn fill, void *ctx, int index, pcg_err *err);

/* Writes everything to path as fileio.h says (a file: a temporary one,
 * fsynced and renamed over path; on failure path is untouched and the
 * temporary file removed). Tensors are laid out in the order
 * they were added, each padded to the alignment; one buffer as large as the
 * largest tensor is held while writing (zeroed before each fill). The
 * writer stays valid (free it with gguf_writer_free). */
int gguf_writer_finish(gguf_writer *w, const char *path, pcg_err *err);

#endif
