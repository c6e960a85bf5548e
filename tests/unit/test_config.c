/* test_config.c: llama_config_parse on a LLaSA-1B-like config.json, the
 * LlamaConfig defaults, and errors that name the offending field.
 */
#include "check.h"
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The config.json of LLaSA-1B (a Llama-3.2-1B with a speech vocabulary). */
static const char llasa[] =
	"{\n"
	"  \"architectures\": [\"LlamaForCausalLM\"],\n"
	"  \"attention_bias\": false,\n"
	"  \"attention_dropout\": 0.0,\n"
	"  \"bos_token_id\": 128000,\n"
	"  \"eos_token_id\": [128001, 128008, 128009],\n"
	"  \"head_dim\": 64,\n"
	"  \"hidden_act\": \"silu\",\n"
	"  \"hidden_size\": 2048,\n"
	"  \"initializer_range\": 0.02,\n"
	"  \"intermediate_size\": 8192,\n"
	"  \"max_position_embeddings\": 131072,\n"
	"  \"mlp_bias\": false,\n"
	"  \"model_type\": \"llama\",\n"
	"  \"num_attention_heads\": 32,\n"
	"  \"num_hidden_layers\": 16,\n"
	"  \"num_key_value_heads\": 8,\n"
	"  \"pretraining_tp\": 1,\n"
	"  \"rms_norm_eps\": 1e-05,\n"
	"  \"rope_scaling\": {\n"
	"    \"factor\": 32.0,\n"
	"    \"high_freq_factor\": 4.0,\n"
	"    \"low_freq_factor\": 1.0,\n"
	"    \"original_max_position_embeddings\": 8192,\n"
	"    \"rope_type\": \"llama3\"\n"
	"  },\n"
	"  \"rope_theta\": 500000.0,\n"
	"  \"tie_word_embeddings\": true,\n"
	"  \"torch_dtype\": \"bfloat16\",\n"
	"  \"transformers_version\": \"4.45.0\",\n"
	"  \"use_cache\": true,\n"
	"  \"vocab_size\": 193800\n"
	"}\n";

/* Only the required fields; everything else takes LlamaConfig's default. */
static const char minimal[] =
	"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,"
	" \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
	" \"intermediate_size\": 128, \"vocab_size\": 100}";

static int parse(const char *json, llama_config *c, pcg_err *err)
{
	return llama_config_parse(json, strlen(json), c, err);
}

static void test_llasa(void)
{
	llama_config c;
	pcg_err err = { "" };

	CHECKF(parse(llasa, &c, &err) == 0, "%s", err.msg);
	CHECK(c.hidden == 2048 && c.n_layers == 16 && c.n_heads == 32 && c.n_kv_heads == 8);
	CHECK(c.head_dim == 64 && c.ffn == 8192 && c.vocab == 193800);
	CHECK(c.eps == 1e-5f && c.rope_theta == 500000.0f);
	CHECK(c.rope_llama3 == 1 && c.rope_factor == 32 && c.rope_low_freq == 1 &&
	      c.rope_high_freq == 4 && c.rope_orig_max_pos == 8192);
	CHECK(c.tie == 1 && c.max_pos == 131072 && c.bos == 128000);
	CHECK(c.n_eos == 3 && c.eos[0] == 128001 && c.eos[1] == 128008 && c.eos[2] == 128009);
}

static void test_defaults(void)
{
	llama_config c;
	pcg_err err = { "" };

	CHECKF(parse(minimal, &c, &err) == 0, "%s", err.msg);
	CHECK(c.n_kv_heads == 4 && c.head_dim == 16);
	CHECK(c.eps == 1e-6f && c.rope_theta == 10000.0f && c.rope_llama3 == 0);
	CHECK(c.tie == 0 && c.max_pos == 2048 && c.bos == -1 && c.n_eos == 0);

	/* model_type "llama" stands in for architectures; null means absent;
	 * a single eos id; rope_scaling "default" and the older "type" key. */
	CHECKF(parse("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
		     " \"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 100,"
		     " \"num_key_value_heads\": null, \"head_dim\": null, \"eos_token_id\": 7,"
		     " \"bos_token_id\": null, \"rope_scaling\": {\"type\": \"default\"}}",
		     &c, &err) == 0, "%s", err.msg);
	CHECK(c.n_kv_heads == 4 && c.head_dim == 16 && c.n_eos == 1 && c.eos[0] == 7 &&
	      c.bos == -1 && c.rope_llama3 == 0);

	/* transformers 5 writes rope_theta and the scaling as rope_parameters. */
	CHECKF(parse("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
		     " \"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 100,"
		     " \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\","
		     " \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
		     " \"original_max_position_embeddings\": 8192}}", &c, &err) == 0, "%s", err.msg);
	CHECK(c.rope_theta == 500000.0f && c.rope_llama3 == 1 && c.rope_factor == 8.0f &&
	      c.rope_orig_max_pos == 8192);
	CHECK(parse("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
		    " \"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 100,"
		    " \"rope_parameters\": {\"rope_theta\": 1e4, \"rope_type\": \"yarn\"}}",
		    &c, &err) == -1 && strstr(err.msg, "yarn") != NULL);
}

/* Copies src to out with its first `from` replaced by `to`. */
static void edit(char *out, size_t size, const char *src, const char *from, const char *to)
{
	const char *p = strstr(src, from);

	if (p == NULL) {
		fprintf(stderr, "test_config: '%s' not in the config\n", from);
		exit(1);
	}
	snprintf(out, size, "%.*s%s%s", (int)(p - src), src, to, p + strlen(from));
}

static const struct {
	const char *from, *to; /* edit of the LLaSA config */
	const char *expect;    /* in the message */
} bad[] = {
	{ "\"hidden_size\": 2048,", "", "hidden_size: missing" },
	{ "\"vocab_size\": 193800", "\"x\": 1", "vocab_size: missing" },
	{ "\"LlamaForCausalLM\"", "\"MistralForCausalLM\"", "architectures" },
	{ "[\"LlamaForCausalLM\"]", "\"LlamaForCausalLM\"", "architectures: not a list" },
	{ "\"model_type\": \"llama\"", "\"model_type\": \"mistral\"", "model_type" },
	{ "\"hidden_size\": 2048", "\"hidden_size\": \"2048\"", "hidden_size: not an integer" },
	{ "\"hidden_size\": 2048", "\"hidden_size\": 2048.5", "hidden_size: not an integer" },
	{ "\"hidden_size\": 2048", "\"hidden_size\": 0", "hidden_size: 0 out of range" },
	{ "\"num_hidden_layers\": 16", "\"num_hidden_layers\": -1", "num_hidden_layers: -1 out of range" },
	{ "\"intermediate_size\": 8192", "\"intermediate_size\": 0", "intermediate_size: 0" },
	{ "\"num_key_value_heads\": 8", "\"num_key_value_heads\": 0", "num_key_value_heads: 0" },
	{ "\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5",
	  "num_key_value_heads: num_attention_heads 32 is not a multiple of 5" },
	{ "\"head_dim\": 64,", "\"head_dim\": 64, \"hidden_size\": 2000,", "duplicate" },
	{ "\"hidden_size\": 2048", "\"hidden_size\": 2047", "n/a" }, /* head_dim given: fine */
	{ "\"head_dim\": 64,", "\"head_dim\": -64,", "head_dim: -64 out of range" },
	{ "\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"",
	  "rope_scaling.rope_type: \"yarn\" is not supported" },
	{ "\"factor\": 32.0,", "", "rope_scaling: factor: missing" },
	{ "\"factor\": 32.0", "\"factor\": -2", "rope_scaling: factor: -2 is not a positive" },
	{ "\"high_freq_factor\": 4.0", "\"high_freq_factor\": 1.0", "high_freq_factor" },
	{ "\"rope_scaling\": {", "\"rope_scaling\": 1, \"x\": {", "rope_scaling: not an object" },
	{ "\"rope_theta\": 500000.0", "\"rope_theta\": 0", "rope_theta: 0 is not a positive" },
	{ "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": \"1e-5\"", "rms_norm_eps: not a number" },
	{ "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act: \"gelu\" is not supported" },
	{ "\"attention_bias\": false", "\"attention_bias\": true", "attention_bias: true is not supported" },
	{ "\"mlp_bias\": false", "\"mlp_bias\": true", "mlp_bias: true is not supported" },
	{ "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": 1", "tie_word_embeddings: not a boolean" },
	{ "\"bos_token_id\": 128000", "\"bos_token_id\": 193800", "bos_token_id: 193800 not in" },
	{ "[128001, 128008, 128009]", "[1, 2, 3, 4, 5, 6, 7, 8, 9]", "eos_token_id: 9 ids" },
	{ "[128001, 128008, 128009]", "[1, \"2\"]", "eos_token_id: not an integer" },
	{ "\"vocab_size\": 193800\n}", "\"vocab_size\": 193800\n", "not valid JSON" },
};

static void test_errors(void)
{
	char text[4096];
	llama_config c, before;
	pcg_err err;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc;

		edit(text, sizeof text, llasa, bad[i].from, bad[i].to);
		memset(&c, 0x5a, sizeof c);
		before = c;
		err.msg[0] = '\0';
		rc = parse(text, &c, &err);
		if (strcmp(bad[i].expect, "n/a") == 0) {
			CHECKF(rc == 0, "%s -> %s: %s", bad[i].from, bad[i].to, err.msg);
			continue;
		}
		CHECKF(rc == -1 && strstr(err.msg, bad[i].expect) != NULL,
		       "%s -> %s: got \"%s\", want \"%s\"", bad[i].from, bad[i].to, err.msg,
		       bad[i].expect);
		CHECK(memcmp(&c, &before, sizeof c) == 0); /* untouched on failure */
	}
	CHECK(parse("[1]", &c, &err) == -1 && strstr(err.msg, "not a JSON object"));
	CHECK(parse("", &c, &err) == -1 && strstr(err.msg, "not valid JSON"));
	CHECK(llama_config_parse(llasa, 10, &c, &err) == -1); /* the length is honoured */
	/* Without architectures or model_type it is not known to be a LLaMA. */
	CHECK(parse("{\"hidden_size\": 64}", &c, &err) == -1 && strstr(err.msg, "architectures"));
	/* Without head_dim, hidden_size must divide into the heads. */
	{
		char t2[4096];

		edit(t2, sizeof t2, llasa, "\"head_dim\": 64,", "");
		edit(text, sizeof text, t2, "\"hidden_size\": 2048", "\"hidden_size\": 2047");
		CHECK(parse(text, &c, &err) == -1);
		CHECKF(strstr(err.msg, "head_dim: missing, and hidden_size 2047") != NULL, "%s", err.msg);
	}
}

static void test_load(void)
{
	char path[4200];
	llama_config c;
	pcg_err err = { "" };
	FILE *f;

	snprintf(path, sizeof path, "%s/config.%d.json", check_tmpdir(), (int)getpid());
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (f == NULL)
		return;
	fputs(llasa, f);
	fclose(f);
	CHECKF(llama_config_load(path, &c, &err) == 0, "%s", err.msg);
	CHECK(c.vocab == 193800 && c.n_eos == 3);

	f = fopen(path, "w");
	fputs("{\"architectures\": [\"LlamaForCausalLM\"]}", f);
	fclose(f);
	CHECK(llama_config_load(path, &c, &err) == -1);
	CHECKF(strstr(err.msg, path) == err.msg && strstr(err.msg, ": hidden_size: missing"),
	       "%s", err.msg);
	unlink(path);

	CHECK(llama_config_load(path, &c, &err) == -1); /* now missing */
	CHECKF(strstr(err.msg, path) == err.msg, "%s", err.msg);
}

int main(void)
{
	test_llasa();
	test_defaults();
	test_errors();
	test_load();
	return check_done("test_config");
}
