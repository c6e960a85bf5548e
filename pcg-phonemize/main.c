/* pcg-phonemize: the phoneme voice's front end on the command line: speaks
 * a text with espeak-ng as one speaker and prints its phonemes with the
 * codec frame where each starts, and with --wav writes espeak-ng's audio.
 * The corpus of the demo voice is made with it, so that training and the
 * verifier see the same timings. See man/pcg-phonemize.1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "opts.h"
#include "voice.h"

static const char *prog = "pcg-phonemize";
static const char *SYNOPSIS = "[--voice-file FILE --speaker N | --voice NAME --pitch N --rate N] "
			      "[--wav FILE] [--tokens] TEXT";

static const char *voice_file, *voice_name, *wav_path;
static int speaker, pitch, rate, sample_rate, hop, tokens;

static const pcg_opt opts[] = {
	{ "voice-file", PCG_OPT_STR, &voice_file, NULL, 1, 0, "FILE",
	  "a model's voice.json: its speakers, sample rate and hop" },
	{ "speaker", PCG_OPT_INT, &speaker, "0", 0, VOICE_MAX_SPEAKERS - 1, "N",
	  "with --voice-file: the speaker" },
	{ "voice", PCG_OPT_STR, &voice_name, "en-us", 1, 0, "NAME",
	  "without --voice-file: espeak-ng voice and variant" },
	{ "pitch", PCG_OPT_INT, &pitch, "50", 0, 99, "N", "without --voice-file: pitch" },
	{ "rate", PCG_OPT_INT, &rate, "175", 80, 450, "N",
	  "without --voice-file: words per minute" },
	{ "sample-rate", PCG_OPT_INT, &sample_rate, "16000", 1000, 192000, "HZ",
	  "without --voice-file: the codec's sample rate" },
	{ "hop", PCG_OPT_INT, &hop, "320", 1, 65536, "N",
	  "without --voice-file: the codec's samples per frame" },
	{ "wav", PCG_OPT_STR, &wav_path, NULL, 1, 0, "FILE",
	  "also write espeak-ng's audio (its own rate, 16-bit WAV)" },
	{ "tokens", PCG_OPT_FLAG, &tokens, NULL, 1, 0, NULL,
	  "print the model's prompt text (speaker and phoneme tokens) instead" },
	{ NULL },
};

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	voice_info vi;
	voice_speaker spk = { "", 0, 0 };
	voice_render r = { 0 };
	char tok[32];
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || argc - first != 1) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg : "one TEXT is required");
	}
	if (voice_file) {
		if (voice_load(voice_file, &vi, &err) < 0) {
			pcg_report(prog, &err);
			return 1;
		}
		if (speaker >= vi.n_speakers) {
			fprintf(stderr, "%s: --speaker %d: the voice has %d speakers\n", prog, speaker,
				vi.n_speakers);
			return 2;
		}
		spk = vi.speakers[speaker];
		sample_rate = vi.sample_rate;
		hop = vi.hop;
	} else {
		if (strlen(voice_name) >= sizeof spk.voice) {
			fprintf(stderr, "%s: --voice: name too long\n", prog);
			return 2;
		}
		strcpy(spk.voice, voice_name);
		spk.pitch = pitch;
		spk.rate = rate;
	}
	if (voice_speak(&spk, argv[first], sample_rate, hop, wav_path != NULL, &r, &err) < 0)
		goto fail;
	if (wav_path) {
		float *x = malloc((r.n_samples + 1) * sizeof *x);
		if (x == NULL) {
			pcg_fail(&err, "out of memory");
			goto fail;
		}
		for (size_t i = 0; i < r.n_samples; i++)
			x[i] = r.wav[i] / 32768.0f;
		int rc = audio_write(wav_path, x, r.n_samples, r.wav_rate, AUDIO_WAV, &err);
		free(x);
		if (rc < 0)
			goto fail;
	}
	if (tokens) {
		voice_speaker_token(speaker, tok, sizeof tok);
		fputs(tok, stdout);
		for (int i = 0; i < r.n_ph; i++) {
			voice_phone_token(r.ph[i].name, tok, sizeof tok);
			fputs(tok, stdout);
		}
		putchar('\n');
	} else {
		printf("# frames %d samples %zu rate %d\n", r.n_frames, r.n_samples, r.wav_rate);
		for (int i = 0; i < r.n_ph; i++)
			printf("%d\t%s\n", r.ph[i].frame, r.ph[i].name);
	}
	voice_render_free(&r);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: stdout: write failed\n", prog);
		return 1;
	}
	return 0;
fail:
	voice_render_free(&r);
	pcg_report(prog, &err);
	return 1;
}
