/* pcg-tokenize: the text front end from the command line: text to ids (as
 * Hugging Face tokenizers), ids to text, and the ids of a LLaSA prompt.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llasa.h"
#include "opts.h"
#include "tokenizer.h"

static const char *prog = "pcg-tokenize";
static const char *SYNOPSIS =
	"--tokenizer FILE [--bos] [TEXT | -]\n"
	"       pcg-tokenize --tokenizer FILE --decode [--skip-special] ID...\n"
	"       pcg-tokenize --tokenizer FILE --llasa-prompt --text TEXT"
	" [--prompt-text TEXT --prompt-codes FILE] [--date DATE]";

static const char *tok_path, *text, *prompt_text, *codes_path, *date;
static int bos, decode, skip_special, llasa;

static const pcg_opt opts[] = {
	{ "tokenizer", PCG_OPT_STR, &tok_path, NULL, 1, 0, "FILE", "a Hugging Face tokenizer.json, or a GGUF file (its tokenizer)" },
	{ "bos", PCG_OPT_FLAG, &bos, NULL, 1, 0, NULL, "put <|begin_of_text|> before the text's ids" },
	{ "decode", PCG_OPT_FLAG, &decode, NULL, 1, 0, NULL, "print the text of the ids given" },
	{ "skip-special", PCG_OPT_FLAG, &skip_special, NULL, 1, 0, NULL,
	  "with --decode: leave special tokens out" },
	{ "llasa-prompt", PCG_OPT_FLAG, &llasa, NULL, 1, 0, NULL, "print the ids of a LLaSA prompt" },
	{ "text", PCG_OPT_STR, &text, NULL, 1, 0, "TEXT", "LLaSA: the text to speak" },
	{ "prompt-text", PCG_OPT_STR, &prompt_text, NULL, 1, 0, "TEXT",
	  "LLaSA cloning: the transcript of the prompt audio (put right before --text)" },
	{ "prompt-codes", PCG_OPT_STR, &codes_path, NULL, 1, 0, "FILE",
	  "LLaSA cloning: the prompt audio's speech codes, whitespace-separated (- for stdin)" },
	{ "date", PCG_OPT_STR, &date, LLASA_DEFAULT_DATE, 1, 0, "DATE",
	  "LLaSA: the chat template's \"Today Date\"" },
	{ NULL },
};

/* All of a stream, NUL-terminated (the length counts any NUL inside). */
static char *slurp(FILE *f, size_t *n)
{
	size_t cap = 1 << 16;
	char *buf = malloc(cap);

	*n = 0;
	while (buf) {
		*n += fread(buf + *n, 1, cap - *n - 1, f);
		if (ferror(f)) {
			free(buf);
			return NULL;
		}
		if (feof(f)) {
			buf[*n] = 0;
			return buf;
		}
		char *p = realloc(buf, cap *= 2);
		if (p == NULL)
			free(buf);
		buf = p;
	}
	return NULL;
}

static int print_ids(const int *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%s%d", i ? " " : "", ids[i]);
	putchar('\n');
	return 0;
}

static int encode(const tokenizer *t, const char *arg, pcg_err *err)
{
	char *buf = NULL;
	size_t len;
	int *ids = NULL, rc = -1;
	size_t n;

	if (arg == NULL || !strcmp(arg, "-")) {
		if ((buf = slurp(stdin, &len)) == NULL)
			return pcg_fail(err, "stdin: read error or out of memory");
		arg = buf;
	} else {
		len = strlen(arg);
	}
	if (tok_encode(t, arg, len, &ids, &n, err) == 0) {
		if (bos) {
			int b = tok_token_id(t, "<|begin_of_text|>", 17);
			if (b < 0) {
				pcg_fail(err, "--bos: the tokenizer has no <|begin_of_text|> token");
				goto out;
			}
			printf("%d%s", b, n ? " " : "");
		}
		rc = print_ids(ids, n);
	}
out:
	free(ids);
	free(buf);
	return rc;
}

/* Ids from the command line; a malformed one is a usage error (2). */
static int parse_id(const char *s, int *id)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < 0 || v > INT_MAX)
		return -1;
	*id = (int)v;
	return 0;
}

static int decode_ids(const tokenizer *t, char **args, int n_args, pcg_err *err)
{
	int *ids = malloc((n_args ? (size_t)n_args : 1) * sizeof *ids);
	size_t len;
	char *s;

	if (ids == NULL)
		return pcg_fail(err, "out of memory");
	for (int i = 0; i < n_args; i++)
		parse_id(args[i], &ids[i]); /* checked before loading */
	s = tok_decode(t, ids, (size_t)n_args, skip_special, &len, err);
	free(ids);
	if (s == NULL)
		return -1;
	fwrite(s, 1, len, stdout);
	putchar('\n');
	free(s);
	return 0;
}

/* Whitespace-separated codes from a file (or stdin for "-"). */
static int read_codes(const char *path, int **codes, size_t *n, pcg_err *err)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	size_t len, cap = 0;
	char *buf, *p, *end;

	*codes = NULL;
	*n = 0;
	if (f == NULL)
		return pcg_fail(err, "%s: %s", path, strerror(errno));
	buf = slurp(f, &len);
	if (f != stdin)
		fclose(f);
	if (buf == NULL)
		return pcg_fail(err, "%s: read error or out of memory", path);
	for (p = buf;; p = end) {
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (*p == 0)
			break;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || errno || v < INT_MIN || v > INT_MAX ||
		    (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) {
			int w = (int)strcspn(p, " \t\r\n");
			pcg_fail(err, "%s: code %zu: '%.*s' is not an integer", path, *n + 1,
				 w < 20 ? w : 20, p);
			goto fail;
		}
		if (*n == cap) {
			int *q = realloc(*codes, (cap = cap ? 2 * cap : 256) * sizeof *q);
			if (q == NULL) {
				pcg_fail(err, "out of memory");
				goto fail;
			}
			*codes = q;
		}
		(*codes)[(*n)++] = (int)v;
	}
	if (p != buf + len) {
		pcg_fail(err, "%s: NUL byte in the file", path);
		goto fail;
	}
	free(buf);
	return 0;
fail:
	free(buf);
	free(*codes);
	*codes = NULL;
	return -1;
}

static int llasa_prompt_out(const tokenizer *t, pcg_err *err)
{
	llasa_vocab v;
	llasa_prompt p = { text, prompt_text, NULL, 0, date };
	int *codes = NULL, *ids = NULL, rc = -1;
	size_t n;

	if (llasa_vocab_init(t, &v, err) < 0)
		return -1;
	if (codes_path && read_codes(codes_path, &codes, &p.n_codes, err) < 0)
		return -1;
	p.codes = codes;
	if (llasa_prompt_ids(t, &v, &p, &ids, &n, err) == 0)
		rc = print_ids(ids, n);
	free(codes);
	free(ids);
	return rc;
}

/* The usage error of this command line, or NULL when it is fine. */
static const char *misuse(int n_args, char **args)
{
	if (!tok_path)
		return "--tokenizer FILE is required";
	if (decode + llasa > 1)
		return "--decode and --llasa-prompt exclude each other";
	if (!llasa && (text || prompt_text || codes_path || pcg_opts_given(opts, "date")))
		return "--text, --prompt-text, --prompt-codes and --date need --llasa-prompt";
	if (bos && (decode || llasa))
		return "--bos is for encoding text";
	if (skip_special && !decode)
		return "--skip-special needs --decode";
	if (llasa && !text)
		return "--llasa-prompt needs --text";
	if (llasa && !prompt_text != !codes_path)
		return "--prompt-text and --prompt-codes go together";
	if (llasa && n_args > 0)
		return "--llasa-prompt takes no arguments";
	if (!decode && !llasa && n_args > 1)
		return "one TEXT at most (quote it, or use - for stdin)";
	for (int i = 0, id; decode && i < n_args; i++)
		if (parse_id(args[i], &id) < 0)
			return "--decode: the arguments must be ids (integers >= 0)";
	return NULL;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	tokenizer *t = NULL;
	const char *why;
	int first = pcg_opts_parse(opts, argc, argv, &err), rc;

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || (why = misuse(argc - first, argv + first)) != NULL) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg : why);
	}
	t = tok_open(tok_path, &err);
	if (t == NULL)
		rc = -1;
	else if (decode)
		rc = decode_ids(t, argv + first, argc - first, &err);
	else if (llasa)
		rc = llasa_prompt_out(t, &err);
	else
		rc = encode(t, first < argc ? argv[first] : NULL, &err);
	if (rc == 0 && fflush(stdout) != 0)
		rc = pcg_fail(&err, "stdout: write failed");
	if (rc < 0)
		pcg_report(prog, &err);
	tok_free(&t);
	return rc < 0 ? 1 : 0;
}
