/* llasa.c: LLaSA's speech vocabulary and prompt (see llasa.h), rendered the
 * way transformers renders the Llama 3.1 chat template. */
#include "llasa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tokens the prompt relies on: if one were missing, the prompt would be
 * BPE'd as text and the model would see something it was not trained on. */
static const char *REQUIRED[] = {
	"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
	"<|TEXT_UNDERSTANDING_START|>", "<|TEXT_UNDERSTANDING_END|>",
	"<|SPEECH_GENERATION_START|>", "<|SPEECH_GENERATION_END|>",
};

static int id_of(const tokenizer *t, const char *s)
{
	return tok_token_id(t, s, strlen(s));
}

int llasa_vocab_init(const tokenizer *t, llasa_vocab *v, pcg_err *err)
{
	char name[32];

	for (size_t i = 0; i < sizeof REQUIRED / sizeof REQUIRED[0]; i++)
		if (id_of(t, REQUIRED[i]) < 0)
			return pcg_fail(err, "the tokenizer has no %s token", REQUIRED[i]);
	v->end_id = id_of(t, "<|SPEECH_GENERATION_END|>");
	v->start_id = id_of(t, "<|SPEECH_GENERATION_START|>");
	v->speech_first = id_of(t, "<|s_0|>");
	if (v->speech_first < 0)
		return pcg_fail(err, "the tokenizer has no <|s_0|> token");
	/* Codes map to ids by addition, so the range must have no holes. */
	for (v->speech_count = 1;; v->speech_count++) {
		snprintf(name, sizeof name, "<|s_%d|>", v->speech_count);
		int id = id_of(t, name);
		if (id < 0)
			break;
		if (id != v->speech_first + v->speech_count)
			return pcg_fail(err, "%s has id %d, not %d: the speech ids are not consecutive",
					name, id, v->speech_first + v->speech_count);
	}
	return 0;
}

int llasa_code_to_id(const llasa_vocab *v, int code)
{
	return code >= 0 && code < v->speech_count ? v->speech_first + code : -1;
}

int llasa_id_to_code(const llasa_vocab *v, int id)
{
	return id >= v->speech_first && id - v->speech_first < v->speech_count
		? id - v->speech_first : -1;
}

/* Appends s to *buf (a growing string). */
static int put(char **buf, size_t *len, size_t *cap, const char *s)
{
	size_t n = strlen(s);

	if (*len + n + 1 > *cap) {
		size_t c = *cap ? *cap : 1024;
		while (*len + n + 1 > c)
			c *= 2;
		char *p = realloc(*buf, c);
		if (p == NULL)
			return -1;
		*buf = p;
		*cap = c;
	}
	memcpy(*buf + *len, s, n + 1);
	*len += n;
	return 0;
}

char *llasa_prompt_render(const llasa_vocab *v, const llasa_prompt *p, size_t *len,
			  pcg_err *err)
{
	const char *date = p->date ? p->date : LLASA_DEFAULT_DATE;
	const char *ptext = p->prompt_text ? p->prompt_text : "";
	const char *fields[3][2] = { { "text", p->text }, { "prompt text", ptext }, { "date", date } };
	char *buf = NULL, code[32];
	size_t n = 0, cap = 0;
	int ok;

	for (int i = 0; i < 3; i++) {
		if (fields[i][1] == NULL) {
			pcg_fail(err, "%s: missing", fields[i][0]);
			return NULL;
		}
		if (tok_check_utf8(fields[i][1], strlen(fields[i][1]), err) < 0) {
			pcg_err_prefix(err, fields[i][0]);
			return NULL;
		}
	}
	/* The template trims each message's content; both start and end with a
	 * tag here, so trimming changes nothing and is left out. */
	ok = put(&buf, &n, &cap, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
		 "Cutting Knowledge Date: December 2023\nToday Date: ") == 0 &&
	     put(&buf, &n, &cap, date) == 0 &&
	     put(&buf, &n, &cap, "\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
		 "Convert the text to speech:<|TEXT_UNDERSTANDING_START|>") == 0 &&
	     put(&buf, &n, &cap, ptext) == 0 && put(&buf, &n, &cap, p->text) == 0 &&
	     put(&buf, &n, &cap, "<|TEXT_UNDERSTANDING_END|><|eot_id|><|start_header_id|>assistant"
		 "<|end_header_id|>\n\n<|SPEECH_GENERATION_START|>") == 0;
	for (size_t i = 0; ok && i < p->n_codes; i++) {
		if (llasa_code_to_id(v, p->codes[i]) < 0) {
			pcg_fail(err, "prompt code %d (at %zu) is not in [0, %d)", p->codes[i], i,
				 v->speech_count);
			free(buf);
			return NULL;
		}
		snprintf(code, sizeof code, "<|s_%d|>", p->codes[i]);
		ok = put(&buf, &n, &cap, code) == 0;
	}
	if (!ok) {
		pcg_fail(err, "out of memory");
		free(buf);
		return NULL;
	}
	if (len)
		*len = n;
	return buf;
}

int llasa_prompt_ids(const tokenizer *t, const llasa_vocab *v, const llasa_prompt *p, int **ids,
		     size_t *n, pcg_err *err)
{
	size_t len;
	char *s = llasa_prompt_render(v, p, &len, err);

	*ids = NULL;
	*n = 0;
	if (s == NULL)
		return -1;
	int rc = tok_encode(t, s, len, ids, n, err);
	free(s);
	return rc;
}
