/* test_codes.c: the parsers of untrusted codec input: speech codes (text and
 * int32, LLaSA ids) and the decoder's config.json. Errors must name the
 * position or the key; nothing may crash (this test also runs under ASan
 * and UBSan), including on random bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codes.h"
#include "rng.h"
#include "xcodec2.h"

static int parse(const char *s, codes_format f, int32_t **v, size_t *n, pcg_err *err)
{
	return codes_parse(s, strlen(s), f, v, n, err);
}

static void text(void)
{
	int32_t *v;
	size_t n;
	pcg_err err = { "" };

	CHECK(parse(" 1 2\n3,4\t65535 \r\n", CODES_TEXT, &v, &n, &err) == 0);
	CHECK(n == 5 && v[0] == 1 && v[3] == 4 && v[4] == 65535);
	free(v);
	CHECK(parse("", CODES_TEXT, &v, &n, &err) == 0 && n == 0 && v == NULL);
	CHECK(parse(" \n ", CODES_TEXT, &v, &n, &err) == 0 && n == 0);
	CHECK(parse("-5 +7 2147483647 -2147483648", CODES_TEXT, &v, &n, &err) == 0);
	CHECK(n == 4 && v[0] == -5 && v[1] == 7 && v[2] == INT32_MAX && v[3] == INT32_MIN);
	free(v);
	/* errors name the position and the token */
	CHECK(parse("1 2 x3 4", CODES_TEXT, &v, &n, &err) == -1 && v == NULL);
	CHECKF(strstr(err.msg, "position 2") && strstr(err.msg, "'x3'"), "%s", err.msg);
	CHECK(parse("1 2147483648", CODES_TEXT, &v, &n, &err) == -1);
	CHECKF(strstr(err.msg, "position 1"), "%s", err.msg);
	CHECK(parse("1 99999999999999999999999999", CODES_TEXT, &v, &n, &err) == -1);
	CHECKF(strstr(err.msg, "position 1") && strstr(err.msg, "..."), "%s", err.msg);
	CHECK(parse("1.5", CODES_TEXT, &v, &n, &err) == -1);
	CHECK(parse("-", CODES_TEXT, &v, &n, &err) == -1);
	CHECK(parse("1 \x01\xff", CODES_TEXT, &v, &n, &err) == -1);
	CHECKF(strstr(err.msg, "'?\?'"), "control bytes are not printed: %s", err.msg);
	/* A NUL inside the input is not a separator. */
	CHECK(codes_parse("1 2\0 3", 6, CODES_TEXT, &v, &n, &err) == -1);
}

static void i32(void)
{
	int32_t *v;
	size_t n;
	pcg_err err = { "" };
	const unsigned char b[] = { 1, 0, 0, 0, 0xff, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff };

	CHECK(codes_parse(b, sizeof b, CODES_I32, &v, &n, &err) == 0);
	CHECK(n == 3 && v[0] == 1 && v[1] == 65535 && v[2] == -1);
	free(v);
	CHECK(codes_parse(b, 7, CODES_I32, &v, &n, &err) == -1);
	CHECKF(strstr(err.msg, "7 bytes"), "%s", err.msg);
	CHECK(codes_parse(b, 0, CODES_I32, &v, &n, &err) == 0 && n == 0);
}

static void llasa(void)
{
	int32_t v[4] = { 128264, 128264 + 65535, 128264 + 7, CODES_LLASA_END };
	size_t n = 4;
	pcg_err err = { "" };

	CHECK(codes_from_ids(v, &n, CODES_LLASA_OFFSET, 65536, CODES_LLASA_END, &err) == 0);
	CHECK(n == 3 && v[0] == 0 && v[1] == 65535 && v[2] == 7);
	int32_t w[3] = { 128264, CODES_LLASA_END, 128265 };
	n = 3;
	CHECK(codes_from_ids(w, &n, CODES_LLASA_OFFSET, 65536, CODES_LLASA_END, &err) == -1);
	CHECKF(strstr(err.msg, "position 1") && strstr(err.msg, "end token"), "%s", err.msg);
	int32_t x[3] = { 128264, 5, 128264 + 65536 };
	n = 3;
	CHECK(codes_from_ids(x, &n, CODES_LLASA_OFFSET, 65536, CODES_LLASA_END, &err) == -1);
	CHECKF(strstr(err.msg, "position 1") && strstr(err.msg, "id 5"), "%s", err.msg);
	x[0] = x[1] = 128264; /* the failed call converted x[0] already */
	n = 3;
	CHECK(codes_from_ids(x, &n, CODES_LLASA_OFFSET, 65536, -1, &err) == -1);
	CHECKF(strstr(err.msg, "position 2"), "%s", err.msg);
	/* near INT32_MAX: no overflow */
	int32_t y[1] = { INT32_MAX };
	n = 1;
	CHECK(codes_from_ids(y, &n, INT32_MAX - 10, 65536, -1, &err) == 0 && y[0] == 10);

	int32_t c[3] = { 0, 65535, 65536 };
	CHECK(codes_check(c, 2, 65536, &err) == 0);
	CHECK(codes_check(c, 3, 65536, &err) == -1);
	CHECKF(strstr(err.msg, "position 2"), "%s", err.msg);
}

/* Random bytes in both formats: no crash, and on success sane output. */
static void fuzz(void)
{
	pcg_rng r;
	unsigned char buf[256];
	const char alphabet[] = "0123456789 ,\n-+x\t";

	pcg_rng_init(&r, 5, 0);
	for (int it = 0; it < 3000; it++) {
		size_t len = pcg_rng_u32(&r) % sizeof buf;
		for (size_t i = 0; i < len; i++) {
			uint32_t u = pcg_rng_u32(&r);
			buf[i] = it % 2 ? (unsigned char)u : (unsigned char)alphabet[u % 17];
		}
		int32_t *v = NULL;
		size_t n = 0;
		pcg_err err = { "" };
		int rc = codes_parse(buf, len, it % 3 ? CODES_TEXT : CODES_I32, &v, &n, &err);
		if (rc == 0)
			CHECK(n <= len);
		else
			CHECK(v == NULL && err.msg[0]);
		free(v);
	}
}

/* config.json: every known key, wrong types, ranges, the Hub's file. */
static void config(void)
{
	char path[512];
	pcg_err err = { "" };
	xc2_config c;
	static const struct {
		const char *json, *want; /* want: NULL = loads, else a piece of the error */
	} cases[] = {
		{ "{\"model_type\":\"xcodec2\",\"semantic_hidden_size\":1024,"
		  "\"codec_encoder_hidden_size\":1024,\"codec_decoder_hidden_size\":1024,"
		  "\"use_vocos\":true,\"architectures\":[\"XCodec2Model\"]}", NULL },
		{ "{}", NULL },
		{ "{\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
		  "\"quantization_dim\":128,\"quantization_levels\":[8,5,5,5],"
		  "\"downsampling_ratios\":[2,2,4,2,5],\"head_dim\":16}", NULL },
		{ "{\"model_type\":\"llama\"}", "model_type" },
		{ "{\"hidden_size\":\"64\"}", "hidden_size" },
		{ "{\"hidden_size\":48}", "GroupNorm" },
		{ "{\"hidden_size\":64,\"num_attention_heads\":5}", "num_attention_heads" },
		{ "{\"hidden_size\":64,\"num_attention_heads\":4,\"head_dim\":8}", "head_dim" },
		{ "{\"quantization_levels\":[4,1]}", "quantization_levels" },
		{ "{\"quantization_levels\":[]}", "quantization_levels" },
		{ "{\"quantization_levels\":[65536,65536,65536]}", "2^31" },
		{ "{\"quantization_levels\":4}", "quantization_levels" },
		{ "{\"downsampling_ratios\":[3,3]}", "even" },
		{ "{\"downsampling_ratios\":[1000,1000,1000]}", "hop" },
		{ "{\"num_hidden_layers\":-1}", "num_hidden_layers" },
		{ "{\"sampling_rate\":0}", "sampling_rate" },
		{ "{\"hidden_size\":1e3}", "hidden_size" },
		{ "{\"hidden_size\":99999999999999}", "hidden_size" },
		{ "[1,2]", "object" },
		{ "{\"a\":1,\"a\":2}", "line" },
		{ "{\"hidden_size\":64", "line" },
	};

	snprintf(path, sizeof path, "%s/xc2-config.json", check_tmpdir());
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		FILE *f = fopen(path, "w");
		CHECK(f != NULL);
		if (f == NULL)
			return;
		fputs(cases[i].json, f);
		fclose(f);
		int rc = xc2_config_load(path, &c, &err);
		if (cases[i].want == NULL) {
			CHECKF(rc == 0, "case %zu: %s", i, err.msg);
		} else {
			CHECKF(rc == -1 && strstr(err.msg, cases[i].want) && strstr(err.msg, path),
			       "case %zu: want an error naming '%s', got %d '%s'", i, cases[i].want, rc,
			       err.msg);
		}
	}
	/* The Hub's config.json is the full-size decoder. */
	FILE *f = fopen(path, "w");
	fputs(cases[0].json, f);
	fclose(f);
	CHECK(xc2_config_load(path, &c, &err) == 0);
	CHECK(c.hidden == 1024 && c.depth == 12 && c.heads == 16 && c.ffn == 4096);
	CHECK(c.vq_dim == 2048 && c.n_levels == 8 && c.hop == 320 && c.sample_rate == 16000);
	CHECK(xc2_config_codebook(&c) == 65536);
	/* hidden_size alone sets the MLP width to 4x, as the original. */
	f = fopen(path, "w");
	fputs("{\"hidden_size\":64,\"num_attention_heads\":4,\"quantization_levels\":[8,5,5,5],"
	      "\"downsampling_ratios\":[2,2,4,2,5]}", f);
	fclose(f);
	CHECK(xc2_config_load(path, &c, &err) == 0);
	CHECK(c.ffn == 256 && c.hop == 160 && xc2_config_codebook(&c) == 1000);
	CHECK(xc2_config_load("/nonexistent/config.json", &c, &err) == -1);
	CHECKF(strstr(err.msg, "/nonexistent/config.json"), "%s", err.msg);
	remove(path);
}

int main(void)
{
	text();
	i32();
	llasa();
	fuzz();
	config();
	return check_done("test_codes");
}
