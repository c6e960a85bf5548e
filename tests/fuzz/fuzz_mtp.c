/* fuzz_mtp.c: libFuzzer target for the MTP heads file reader
 * (mtp_from_memory, the checks mtp_open runs: the safetensors header, the
 * metadata, the tensor names, dtypes and shapes against the model's width)
 * and, for an input that opens, every head's residual block and the heads'
 * logits. The target model is a stand-in of width HIDDEN (that of
 * tests/fixtures/mtp/tied-f16) whose lm_head reads the blocks' outputs; the
 * reader needs nothing else of it. pcg_matmul is a plain product here that
 * reads every weight (matmul.c's kernels are tested against one in
 * test_matmul) and traps on the misaligned f32 data its contract forbids.
 * Corpus: tests/fuzz/corpus/mtp (README.md). */
#include <stddef.h>
#include <stdint.h>

#include "matmul.h"
#include "model.h"
#include "mtp.h"

#define HIDDEN 48

/* The stand-in: a config, nothing else (model.c is not linked). */
struct llama_model {
	llama_config c;
};

const llama_config *llama_get_config(const llama_model *m) { return &m->c; }

/* Reads every output of the heads (so ASan sees their extent); logits [B][1]. */
int llama_lm_head(const llama_model *m, const float *h, int B, const llama_rows *rows,
		  float *logits, pcg_err *err)
{
	(void)rows;
	(void)err;
	for (int b = 0; b < B; b++) {
		float s = 0.0f;
		for (int j = 0; j < m->c.hidden; j++)
			s += h[(size_t)b * m->c.hidden + j];
		logits[b] = s;
	}
	return 0;
}

/* y[b * ldy + r] = sum_k x[b * K + k] * W[r0 + r][k], one weight row at a time. */
void pcg_matmul(float *y, int ldy, const float *x, int B, const pcg_mat *W, int r0, int nr)
{
	static float row[4096];
	const size_t es = pcg_dtype_size(W->dtype);

	if (W->cols > 4096 || (W->dtype == PCG_F32 && ((uintptr_t)W->data & 3u) != 0))
		__builtin_trap();
	for (int r = 0; r < nr; r++) {
		pcg_to_f32(row, (const char *)W->data + (size_t)(r0 + r) * W->cols * es, W->dtype,
			   (size_t)W->cols);
		for (int b = 0; b < B; b++) {
			float s = 0.0f;
			for (int k = 0; k < W->cols; k++)
				s += x[(size_t)b * W->cols + k] * row[k];
			y[(size_t)b * ldy + r] = s;
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const llama_model model = { .c = { .hidden = HIDDEN } };
	static float hs[HIDDEN], out[HIDDEN], logits[MTP_MAX_HEADS];
	static volatile float sink;
	pcg_err err;
	mtp_heads *h = mtp_from_memory(&model, data, size, "fuzz", &err);

	if (h == NULL)
		return 0;
	for (int j = 0; j < HIDDEN; j++)
		hs[j] = (float)(j % 7) * 0.25f - 0.75f;
	for (int i = 0; i < mtp_n_heads(h); i++)
		if (mtp_hidden(h, i, hs, out, &err) == 0)
			sink = out[HIDDEN - 1];
	if (mtp_logits(h, hs, 0, mtp_n_heads(h), NULL, logits, &err) == 0)
		sink = logits[0];
	mtp_close(&h);
	return 0;
}
