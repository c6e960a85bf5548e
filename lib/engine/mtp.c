/* mtp.c: the multi-token prediction heads (see mtp.h and man/mtp.5):
 * opening and checking the heads file against the target's config, and the
 * heads' logits from the target's final hidden state.
 */
#include "mtp.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"
#include "weights.h"

struct head {
	pcg_mat w;  /* (hidden, hidden), nn.Linear layout [out, in] */
	float *b;   /* (hidden) */
};

struct mtp_heads {
	const llama_model *m; /* borrowed */
	st_ckpt *ck;
	pcg_weights w;        /* the tensors taken from ck, the f32 biases, scratch */
	struct head *heads;
	int n, hidden;
	float *u;             /* (n, hidden): the residual blocks' outputs */
};

/* "mtp_heads" as written: a plain decimal in 1..MTP_MAX_HEADS. */
static int parse_heads(const char *s, int *n)
{
	char *end;
	long v;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end != '\0' || v < 1 || v > MTP_MAX_HEADS)
		return -1;
	*n = (int)v;
	return 0;
}

/* Whether name is mtp.<i>.weight or mtp.<i>.bias for some i < n, spelled as
 * the writer spells it (no leading zeros). */
static int expected_name(const char *name, int n)
{
	char want[64];

	for (int i = 0; i < n; i++) {
		snprintf(want, sizeof want, "mtp.%d.weight", i);
		if (strcmp(name, want) == 0)
			return 1;
		snprintf(want, sizeof want, "mtp.%d.bias", i);
		if (strcmp(name, want) == 0)
			return 1;
	}
	return 0;
}

/* Names from a file are shown with anything unprintable as '?'. */
static void shown_name(char *out, size_t size, const char *name)
{
	size_t i;

	for (i = 0; name[i] && i + 1 < size; i++)
		out[i] = name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '?';
	out[i] = '\0';
}

/* The heads of m from ck, which they take (closed on failure): the checks
 * mtp_open documents, with errors prefixed by name. */
static mtp_heads *heads_from(const llama_model *m, st_ckpt *ck, const char *name, pcg_err *err)
{
	const int H = llama_get_config(m)->hidden;
	mtp_heads *h;
	char tname[64];
	const char *fmt;

	h = calloc(1, sizeof *h);
	if (h == NULL) {
		st_close(&ck);
		pcg_fail(err, "%s: out of memory", name);
		return NULL;
	}
	h->m = m;
	h->hidden = H;
	h->ck = ck;
	h->w.ck = ck;

	fmt = st_metadata(h->ck, "format");
	if (fmt == NULL || strcmp(fmt, "pcg-mtp") != 0) {
		char s[64];
		shown_name(s, sizeof s, fmt ? fmt : "");
		pcg_fail(err, "__metadata__ format is %s%s%s, not \"pcg-mtp\"", fmt ? "\"" : "",
			 fmt ? s : "missing", fmt ? "\"" : "");
		goto fail;
	}
	if (parse_heads(st_metadata(h->ck, "mtp_heads"), &h->n) < 0) {
		char s[64];
		const char *v = st_metadata(h->ck, "mtp_heads");
		shown_name(s, sizeof s, v ? v : "(missing)");
		pcg_fail(err, "__metadata__ mtp_heads '%s' is not a number of heads in 1..%d", s,
			 MTP_MAX_HEADS);
		goto fail;
	}
	/* Every tensor is one the metadata announces: a file with more heads
	 * than it says, or anything else, is refused rather than half used. */
	for (int i = 0; i < st_count(h->ck); i++) {
		const char *tn = st_get(h->ck, i)->name;
		if (!expected_name(tn, h->n)) {
			char s[128];
			shown_name(s, sizeof s, tn);
			pcg_fail(err, "tensor '%s' not expected (mtp_heads is %d: mtp.0 .. mtp.%d)",
				 s, h->n, h->n - 1);
			goto fail;
		}
	}

	h->heads = wt_alloc(&h->w, (size_t)h->n * sizeof *h->heads);
	h->u = wt_alloc(&h->w, (size_t)h->n * H * sizeof *h->u);
	if (h->heads == NULL || h->u == NULL) {
		pcg_fail(err, "out of memory");
		goto fail;
	}
	for (int i = 0; i < h->n; i++) {
		snprintf(tname, sizeof tname, "mtp.%d.weight", i);
		if (wt_mat(&h->w, &h->heads[i].w, tname, H, H, -1, err) < 0)
			goto fail_count;
		snprintf(tname, sizeof tname, "mtp.%d.bias", i);
		if ((h->heads[i].b = wt_vec(&h->w, tname, H, err)) == NULL)
			goto fail_count;
	}
	return h;

fail_count:
	/* A tensor missing because the metadata announces more heads than stored. */
	if (st_count(h->ck) != 2 * h->n && err != NULL) {
		size_t len = strlen(err->msg);
		snprintf(err->msg + len, sizeof err->msg - len,
			 " (__metadata__ mtp_heads is %d: %d tensors wanted, %d stored)", h->n,
			 2 * h->n, st_count(h->ck));
	}
fail:
	pcg_err_prefix(err, name);
	mtp_close(&h);
	return NULL;
}

mtp_heads *mtp_open(const llama_model *m, const char *path, pcg_err *err)
{
	struct stat sb;
	char file[4096];
	st_ckpt *ck;

	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		if ((size_t)snprintf(file, sizeof file, "%s/" MTP_FILE_NAME, path) >= sizeof file) {
			pcg_fail(err, "%s: path too long", path);
			return NULL;
		}
	} else if ((size_t)snprintf(file, sizeof file, "%s", path) >= sizeof file) {
		pcg_fail(err, "%s: path too long", path);
		return NULL;
	}
	ck = st_open(file, err); /* its errors name the file */
	return ck ? heads_from(m, ck, file, err) : NULL;
}

mtp_heads *mtp_from_memory(const llama_model *m, const void *data, size_t size,
			   const char *name, pcg_err *err)
{
	st_ckpt *ck = st_from_memory(data, size, name, err); /* its errors name it */

	return ck ? heads_from(m, ck, name, err) : NULL;
}

void mtp_close(mtp_heads **hp)
{
	mtp_heads *h = hp ? *hp : NULL;

	if (h == NULL)
		return;
	wt_release(&h->w);
	st_close(&h->ck);
	free(h);
	*hp = NULL;
}

int mtp_n_heads(const mtp_heads *h) { return h->n; }

/* out = hs + SiLU(W hs + b) */
static void residual_block(const struct head *hd, const float *hs, float *out, int H)
{
	/* W_i h: nn.Linear, one row of activations (the streaming kernel) */
	pcg_matmul(out, H, hs, 1, &hd->w, 0, H);
	for (int j = 0; j < H; j++) {
		float a = out[j] + hd->b[j];
		out[j] = hs[j] + a / (1.0f + expf(-a));
	}
}

int mtp_hidden(mtp_heads *h, int i, const float *hs, float *out, pcg_err *err)
{
	if (i < 0 || i >= h->n)
		return pcg_fail(err, "head %d out of range (%d heads)", i, h->n);
	residual_block(&h->heads[i], hs, out, h->hidden);
	return 0;
}

int mtp_logits(mtp_heads *h, const float *hs, int first, int count, const llama_rows *rows,
	       float *logits, pcg_err *err)
{
	const int H = h->hidden;

	if (first < 0 || count < 1 || first > h->n - count)
		return pcg_fail(err, "heads %d..%d out of range (%d heads)", first,
				first + count - 1, h->n);
	for (int i = 0; i < count; i++)
		residual_block(&h->heads[first + i], hs, h->u + (size_t)i * H, H);
	/* All heads through lm_head at once: the weights stream from memory once. */
	return llama_lm_head(h->m, h->u, count, rows, logits, err);
}

int mtp_write(const char *path, int n, int hidden, const float *W, const float *b,
	      pcg_dtype dtype, pcg_err *err)
{
	const size_t hh = (size_t)hidden * hidden, es = pcg_dtype_size(dtype);
	st_out t[2 * MTP_MAX_HEADS];
	char names[2 * MTP_MAX_HEADS][32], meta[96];
	unsigned char *buf;
	int rc;

	if (n < 1 || n > MTP_MAX_HEADS || hidden < 1)
		return pcg_fail(err, "%s: %d heads of width %d (1..%d heads)", path, n, hidden,
				MTP_MAX_HEADS);
	if (es == 0)
		return pcg_fail(err, "%s: dtype must be f32, f16 or bf16", path);
	buf = malloc((size_t)n * (hh + hidden) * es);
	if (buf == NULL)
		return pcg_fail(err, "%s: out of memory", path);
	for (int i = 0; i < n; i++) {
		unsigned char *wd = buf + (size_t)i * (hh + hidden) * es, *bd = wd + hh * es;
		const float *ws = W + (size_t)i * hh, *bs = b + (size_t)i * hidden;
		if (dtype == PCG_F32) {
			memcpy(wd, ws, hh * es);
			memcpy(bd, bs, (size_t)hidden * es);
		} else if (dtype == PCG_F16) {
			pcg_f32_to_f16_n((uint16_t *)(void *)wd, ws, hh);
			pcg_f32_to_f16_n((uint16_t *)(void *)bd, bs, (size_t)hidden);
		} else {
			uint16_t *w16 = (uint16_t *)(void *)wd, *b16 = (uint16_t *)(void *)bd;
			for (size_t j = 0; j < hh; j++)
				w16[j] = pcg_f32_to_bf16(ws[j]);
			for (int j = 0; j < hidden; j++)
				b16[j] = pcg_f32_to_bf16(bs[j]);
		}
		snprintf(names[2 * i], sizeof names[0], "mtp.%d.weight", i);
		snprintf(names[2 * i + 1], sizeof names[0], "mtp.%d.bias", i);
		t[2 * i] = (st_out){ names[2 * i], dtype, 2, { hidden, hidden }, wd };
		t[2 * i + 1] = (st_out){ names[2 * i + 1], dtype, 1, { hidden }, bd };
	}
	snprintf(meta, sizeof meta, "{\"mtp_heads\": \"%d\", \"format\": \"pcg-mtp\"}", n);
	rc = st_write(path, t, 2 * n, meta, err);
	free(buf);
	return rc;
}
