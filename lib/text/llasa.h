/* llasa.h: LLaSA's text side: the speech vocabulary (<|s_N|> tokens, the end
 * token) and the prompt, for plain TTS and zero-shot cloning.
 *
 * Everything is looked up in the tokenizer by token string, not hard-coded,
 * so LLaSA's real layout (speech 128264.., end 128261) and the scaled-down
 * one of pcg-mkmodel both work. The prompt is the model card's chat
 *
 *   user:      "Convert the text to speech:<|TEXT_UNDERSTANDING_START|>"
 *              + prompt_text + text + "<|TEXT_UNDERSTANDING_END|>"
 *   assistant: "<|SPEECH_GENERATION_START|>" + "<|s_c|>" for each prompt code
 *
 * rendered by the Llama 3.1 chat template with continue_final_message
 * (the text stops after the assistant content):
 *
 *   <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n
 *   Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n<|eot_id|>
 *   <|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>
 *   <|start_header_id|>assistant<|end_header_id|>\n\n{assistant}
 *
 * and encoded as one string, as transformers' apply_chat_template does.
 */
#ifndef PCG_LLASA_H
#define PCG_LLASA_H

#include <stddef.h>

#include "err.h"
#include "tokenizer.h"

/* The date of the template's "Today Date:" line when none is given. */
#define LLASA_DEFAULT_DATE "26 Jul 2024"

typedef struct llasa_vocab {
	int speech_first; /* id of <|s_0|>; code c is id speech_first + c */
	int speech_count; /* S: <|s_0|> .. <|s_{S-1}|> */
	int end_id;       /* <|SPEECH_GENERATION_END|>: generation stops here */
	int start_id;     /* <|SPEECH_GENERATION_START|> */
} llasa_vocab;

/* Finds the speech tokens and tags in t. Fails (naming the token) when a
 * tag or a Llama 3 chat token is missing, or when <|s_N|> ids are not
 * consecutive from <|s_0|>. */
int llasa_vocab_init(const tokenizer *t, llasa_vocab *v, pcg_err *err);

/* The id of speech code c, or -1 when c is out of [0, S). */
int llasa_code_to_id(const llasa_vocab *v, int code);

/* The speech code of an id, or -1 when it is not a speech token. */
int llasa_id_to_code(const llasa_vocab *v, int id);

typedef struct llasa_prompt {
	const char *text;        /* what to say (UTF-8) */
	const char *prompt_text; /* cloning: the transcript of the prompt audio, put
				  * right before text, as the model card does
				  * (no separator; end it with a space if wanted);
				  * NULL: none */
	const int *codes;        /* cloning: the prompt audio's speech codes */
	size_t n_codes;
	const char *date;        /* NULL: LLASA_DEFAULT_DATE */
} llasa_prompt;

/* The rendered prompt (malloc'd, NUL-terminated; *len its length). Fails on
 * invalid UTF-8 in a field (naming the field and the byte offset) and on a
 * code out of [0, S). */
char *llasa_prompt_render(const llasa_vocab *v, const llasa_prompt *p, size_t *len,
			  pcg_err *err);

/* The prompt's ids (malloc'd into *ids, *n of them; the caller frees). */
int llasa_prompt_ids(const tokenizer *t, const llasa_vocab *v, const llasa_prompt *p, int **ids,
		     size_t *n, pcg_err *err);

#endif
