/* test_voice.c: voice.json as voice_load reads it from a file and
 * voice_parse from memory: the same fields from the same bytes (the demo
 * voice's own file), and each bad field refused by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "voice.h"

static int refused(const char *json, const char *want)
{
	voice_info v;
	pcg_err err = { "" };
	int rc = voice_parse(json, strlen(json), "v.json", &v, &err);
	if (rc == 0 || strstr(err.msg, want) == NULL || strstr(err.msg, "v.json") == NULL) {
		printf("  want an error naming '%s', got %s\n", want, rc == 0 ? "success" : err.msg);
		return 0;
	}
	return 1;
}

int main(void)
{
	const char *root = getenv("PCG_ROOT");
	char path[1024];
	pcg_err err = { "" };
	voice_info a, b;

	snprintf(path, sizeof path, "%s/models/demo/voice.json", root ? root : ".");
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		SKIP("%s: not there (make voice)", path);
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf, f);
	fclose(f);
	CHECKF(voice_load(path, &a, &err) == 0, "%s", err.msg);
	CHECKF(voice_parse(buf, n, path, &b, &err) == 0, "%s", err.msg);
	CHECK(memcmp(&a, &b, sizeof a) == 0);
	CHECK(a.n_speakers == 8 && a.sample_rate == 16000 && a.hop == 320 && a.next_phoneme == 1);

	const char *ok = "{\"frontend\": \"espeak-ng\", \"codec\": \"kmeans-gl\", \"sample_rate\": "
			 "16000, \"hop\": 320, \"speakers\": [{\"voice\": \"en-us\", \"pitch\": 50, "
			 "\"rate\": 175}]}";
	CHECKF(voice_parse(ok, strlen(ok), "v.json", &b, &err) == 0 && b.n_speakers == 1 &&
	       b.next_phoneme == 0, "%s", err.msg);
	CHECK(refused("[1, 2]", "not a JSON object"));
	CHECK(refused("{\"frontend\": \"festival\"}", "frontend"));
	CHECK(refused("{\"frontend\": \"espeak-ng\", \"codec\": \"kmeans-gl\", \"sample_rate\": 5, "
		      "\"hop\": 320}", "sample_rate"));
	CHECK(refused("{\"frontend\": \"espeak-ng\", \"codec\": \"kmeans-gl\", \"sample_rate\": "
		      "16000, \"hop\": 320, \"speakers\": []}", "speakers"));
	CHECK(refused("{\"frontend\": \"espeak-ng\", \"codec\": \"kmeans-gl\", \"sample_rate\": "
		      "16000, \"hop\": 320, \"speakers\": [{\"voice\": \"en\", \"pitch\": 500, "
		      "\"rate\": 175}]}", "speakers[0]"));
	CHECK(refused("{\"frontend\": \"espeak-ng\", \"codec\": \"kmeans-gl\", \"sample_rate\": "
		      "16000, \"hop\": 320, \"speakers\": [{\"voice\": \"en\", \"pitch\": 50, "
		      "\"rate\": 175}], \"next_phoneme\": 1}", "next_phoneme"));
	CHECK(refused("{\"frontend\": \"espeak-ng\", \"frontend\": \"espeak-ng\"}", "v.json"));
	CHECK(refused("{\"frontend\": ", "v.json"));
	return check_done("test_voice");
}
