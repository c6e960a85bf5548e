#!/bin/sh
# tests/codec-encode.sh: codec-encode as a user drives it, on the committed
# tiny X-codec2 encoder (tests/fixtures/xcodec2-enc/tiny, made by
# tests/ref/make_xcodec2_enc_fixtures.py from the original modules): with
# --dtype f32 the fixture's waveform as a float WAV gives the reference's
# codes exactly (a 16-bit WAV too, here; the bf16 default's tolerance is
# test_xc2enc's); every input format sox writes and libsndfile reads,
# stereo, 8 / 22.05 / 44.1 / 48 kHz, a 0.2 s prompt, silence give one code per
# 20 ms; a prompt over the limit, a truncated file, a file that is not audio,
# a decoder-only checkpoint give a clear error, exit 1, and nothing at the
# output path; LLaSA ids are the codes plus the offset.
. "${PCG_ROOT:-.}/tests/shlib"
FX="$ROOT/tests/fixtures/xcodec2-enc/tiny"
CE="codec-encode --weights $FX --threads 2 --dtype f32"

cd "$T" || exit 1
command -v sox >/dev/null || { echo "sox missing (scripts/install-deps installs it)"; exit 1; }
# codes CODES-FILE SECONDS: one code per 320 samples at 16 kHz, plus one
lines() { wc -l <"$1" | tr -d ' '; }
want_codes() { echo $(( $2 * 16000 / 320 + 1 )); }

# --- usage
expect 2 "no arguments" codec-encode
err_has "--weights"
expect 2 "no audio" codec-encode --weights "$FX"
err_has "AUDIO is required"
expect 2 "two audio files" $CE a.wav b.wav
expect 2 "--max-seconds out of range" $CE --max-seconds 0 a.wav

# --- the reference's codes
sox -t f32 -r 16000 -c 1 "$FX/wav.f32" -e floating-point ref.wav
od -A n -t d4 -v "$FX/codes.i32" | tr -s ' ' '\n' | sed '/^$/d' >want.txt
expect 0 "float WAV" $CE ref.wav -o got.txt
same got.txt want.txt "codes equal the original encoder's ($(lines want.txt))"
err_has "66 codes"
sox ref.wav -b 16 -D ref16.wav # -D: no dither (sox dithers at random by default)
expect 0 "16-bit WAV" $CE ref16.wav -o got16.txt
same got16.txt want.txt "a 16-bit WAV of it: the same codes"
expect 0 "to standard output" $CE ref.wav
same out want.txt "standard output: the same codes"
expect 0 "--llasa-ids" $CE --llasa-ids ref.wav -o ids.txt
awk '{ print $1 + 128264 }' want.txt >want-ids.txt
same ids.txt want-ids.txt "LLaSA ids are codes + 128264"
expect 0 "standard input" sh -c "$CE - <ref.wav"
same out want.txt "standard input: the same codes"
expect 0 "bf16 Conformer (the default)" codec-encode --weights "$FX" ref.wav -o bf16.txt
[ "$(lines bf16.txt)" = 66 ] && ok "bf16: 66 codes" || bad "bf16: $(lines bf16.txt) codes"
expect 2 "--dtype f16" $CE --dtype f16 ref.wav
err_has "--dtype is f32 or bf16"

# --- formats, channels, rates: one code per 20 ms of the 1.3 s signal
for spec in "flac:-r 16000" "ogg:-r 16000" "aiff:-r 16000" "wav:-r 8000" "wav:-r 22050" \
	"wav:-r 44100 -c 2" "flac:-r 48000 -c 2" "wav:-r 48000"; do
	ext=${spec%%:*}
	args=${spec#*:}
	name="in-$(echo "$args" | tr -d ' -').$ext"
	# shellcheck disable=SC2086
	if ! sox ref.wav -b 16 $args "$name" 2>/dev/null; then
		bad "sox could not write $name"
		continue
	fi
	expect 0 "$ext $args" $CE "$name" -o "c.txt"
	[ "$(lines c.txt)" = 66 ] && ok "$name: 66 codes" || bad "$name: $(lines c.txt) codes"
done

if command -v opusenc >/dev/null; then # Ogg Opus (48 kHz inside): libsndfile decodes it
	opusenc --quiet ref16.wav in.opus
	expect 0 "opus" $CE in.opus -o c.txt
	[ "$(lines c.txt)" = 66 ] && ok "in.opus: 66 codes" || bad "in.opus: $(lines c.txt) codes"
fi

# --- short, silent, long
sox -n -r 16000 -c 1 short.wav synth 0.2 sine 220
expect 0 "a 0.2 s prompt" $CE short.wav -o s.txt
[ "$(lines s.txt)" = 11 ] && ok "0.2 s: 11 codes" || bad "0.2 s: $(lines s.txt) codes"
sox -n -r 16000 -c 1 silence.wav trim 0 1.0
expect 0 "silence" $CE silence.wav -o z.txt
[ "$(lines z.txt)" = 51 ] && ok "1 s of silence: 51 codes" || bad "silence: $(lines z.txt) codes"
sox -n -r 16000 -c 1 long.wav synth 60 sine 200
expect 1 "a 60 s prompt over the 30 s limit" $CE long.wav -o long.txt
err_has "60.0 s of audio; the limit is 30 s"
[ ! -e long.txt ] && ok "nothing written" || bad "long.txt written"
expect 0 "a 60 s prompt with --max-seconds 60" $CE --max-seconds 60 long.wav -o long.txt
[ "$(lines long.txt)" = 3001 ] && ok "60 s: 3001 codes" || bad "60 s: $(lines long.txt) codes"

# --- bad input: a clear error, exit 1, nothing at the path
head -c 3000 ref.wav >trunc.wav
expect 1 "a truncated WAV" $CE trunc.wav -o t.txt
err_has "truncated"
[ ! -e t.txt ] && ok "nothing written" || bad "t.txt written"
sox ref.wav -r 44100 in.flac
head -c 6000 in.flac >trunc.flac
expect 1 "a truncated FLAC" $CE trunc.flac -o t.txt
[ ! -e t.txt ] && ok "nothing written" || bad "t.txt written"
printf 'not audio at all\n' >text.wav
expect 1 "a text file" $CE text.wav -o t.txt
err_has "text.wav"
expect 1 "a decoder-only checkpoint" codec-encode --weights "$ROOT/tests/fixtures/xcodec2/tiny" \
	ref.wav -o t.txt
err_has "semantic_model"
[ ! -e t.txt ] && ok "nothing written" || bad "t.txt written"
finish
