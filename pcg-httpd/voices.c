/* voices.c: the voices a request may name (see voices.h). */
#include "voices.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const voices_openai[] = {
	"alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
	"verse", "marin", "cedar", NULL,
};

int voices_load(const char *path, model_voices *v, pcg_err *err)
{
	json_error_t je;
	json_t *root, *spk;

	memset(v, 0, sizeof *v);
	if (path == NULL) {
		v->n = 1;
		snprintf(v->name[0], sizeof v->name[0], "default");
		return 0;
	}
	if ((root = json_load_file(path, 0, &je)) == NULL)
		return pcg_fail(err, "%s: line %d: %s", path, je.line, je.text);
	spk = json_object_get(root, "speakers");
	if (!json_is_array(spk) || json_array_size(spk) == 0 ||
	    json_array_size(spk) > VOICES_MAX_SPEAKERS) {
		json_decref(root);
		return pcg_fail(err, "%s: 'speakers' is not an array of 1 to %d speakers", path,
				VOICES_MAX_SPEAKERS);
	}
	v->n = (int)json_array_size(spk);
	for (int i = 0; i < v->n; i++) {
		json_t *s = json_array_get(spk, (size_t)i);
		const char *name = json_string_value(json_object_get(s, "name"));
		if (name == NULL)
			name = json_string_value(json_object_get(s, "voice"));
		snprintf(v->name[i], sizeof v->name[i], "%s", name ? name : "");
	}
	json_decref(root);
	return 0;
}

/* The speaker a "voice" names: an OpenAI voice (in order, modulo the
 * speakers), a speaker's number (integer or string) or its name; -1 if
 * none. */
static int speaker_of(const model_voices *v, const json_t *j)
{
	if (json_is_integer(j)) {
		json_int_t k = json_integer_value(j);
		return k >= 0 && k < v->n ? (int)k : -1;
	}
	if (json_is_object(j)) /* a custom voice {"id": ...}: its id */
		j = json_object_get(j, "id");
	const char *s = json_string_value(j);
	if (s == NULL || *s == '\0')
		return -1;
	for (int i = 0; voices_openai[i]; i++)
		if (!strcmp(s, voices_openai[i]))
			return i % v->n;
	char *end;
	errno = 0;
	long k = strtol(s, &end, 10);
	if (*end == '\0' && errno == 0 && k >= 0 && k < v->n && s[0] >= '0' && s[0] <= '9')
		return (int)k;
	for (int i = 0; i < v->n; i++)
		if (!strcmp(s, v->name[i]))
			return i;
	return -1;
}

int voices_find(const model_voices *v, const json_t *j, int *speaker, const clone_voice **clone)
{
	*clone = NULL;
	if ((*speaker = speaker_of(v, j)) >= 0)
		return 0;
	/* none of the model's own: one registered by a recording, by its id or
	 * its name (none can take a built-in name) */
	const json_t *id = json_is_object(j) ? json_object_get(j, "id") : j;
	if (json_is_string(id))
		*clone = clones_find(json_string_value(id));
	if (*clone == NULL)
		return -1;
	*speaker = 0;
	return 0;
}

int voices_reserved(const model_voices *v, const char *s)
{
	for (int i = 0; voices_openai[i]; i++)
		if (!strcasecmp(s, voices_openai[i]))
			return 1;
	for (int i = 0; i < v->n; i++)
		if (!strcasecmp(s, v->name[i]))
			return 1;
	if (*s == '\0')
		return 0;
	for (const char *p = s; *p; p++) /* a speaker's number, any number of them */
		if (*p < '0' || *p > '9')
			return 0;
	return 1;
}

const char *voices_describe(const model_voices *v, char *buf, size_t n)
{
	size_t k = 0, count = 0;

	while (voices_openai[count])
		count++;
	for (size_t i = 0; i < count && k < n; i++) /* "a, b or c" */
		k += (size_t)snprintf(buf + k, n - k, "%s%s", i == 0 ? "" : i + 1 == count ?
				      " or " : ", ", voices_openai[i]);
	if (k < n)
		k += (size_t)snprintf(buf + k, n - k, ", or a speaker of this model by number (0 to "
				      "%d) or by name (", v->n - 1);
	for (int i = 0; i < v->n && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", v->name[i]);
	if (k < n)
		snprintf(buf + k, n - k, ")");
	return buf;
}

