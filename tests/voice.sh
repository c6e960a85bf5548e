#!/bin/sh
# tests/voice.sh: the phoneme voice's front end (pcg-phonemize, lib/text/voice.c):
# frames and phonemes as espeak-ng times them, the same audio as the
# espeak-ng program, the token text, voice.json and its errors.
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1

text="Hello world, this is a test."
# --- usage
expect 2 "no text" pcg-phonemize
err_has "one TEXT is required"
expect 2 "pitch out of range" pcg-phonemize --pitch 120 "$text"
err_has "pitch"

# --- frames: a header, then non-decreasing start frames below the frame count
expect 0 "phonemize" pcg-phonemize --wav a.wav "$text"
head -n 1 out >hdr
frames=$(awk '{print $3}' hdr)
samples=$(awk '{print $5}' hdr)
[ "$(awk '{print $1, $2, $4, $6, $7}' hdr)" = "# frames samples rate 22050" ] && ok "header" ||
	bad "header: $(cat hdr)"
# frames = floor(round(samples * 16000 / 22050) / 320)
want=$(awk -v n="$samples" 'BEGIN { printf "%d", int(int(n * 16000 / 22050 + 0.5) / 320) }')
[ "$frames" = "$want" ] && ok "frames from samples ($frames)" || bad "frames $frames, want $want"
tail -n +2 out >ph
[ "$(wc -l <ph)" -ge 15 ] && ok "$(wc -l <ph | tr -d ' ') phonemes" || bad "too few phonemes: $(cat ph)"
awk -v F="$frames" 'NR > 1 && $1 < prev { exit 1 } $1 < 0 || $1 >= F { exit 1 } { prev = $1 }' ph &&
	ok "start frames non-decreasing, in [0, frames)" || bad "bad frames: $(cat ph)"
grep -q "^[0-9]*	h$" ph && grep -q "^[0-9]*	w$" ph && ok "h and w among the phonemes" ||
	bad "phonemes: $(cat ph)"

# --- the audio is the espeak-ng program's (which adds trailing silence)
[ "$(od -A n -t u4 -j 24 -N 4 a.wav | tr -d ' ')" = 22050 ] && ok "WAV at 22050 Hz" || bad "rate"
if command -v espeak-ng >/dev/null 2>&1; then
	espeak-ng -v en-us --stdout "$text" >cli.wav
	n=$((2 * samples))
	if cmp -s -n "$n" -i 44:44 a.wav cli.wav; then ok "same samples as espeak-ng"
	else bad "samples differ from espeak-ng's"; fi
else
	echo "skip: espeak-ng program not installed, audio not compared"
fi

# --- voices: variants by language name, pitch and rate change the timing
expect 0 "en-gb+m1" pcg-phonemize --voice en-gb+m1 --pitch 35 --rate 175 "$text"
expect 0 "slower" pcg-phonemize --rate 100 "$text"
slow=$(head -n 1 out | awk '{print $3}')
[ "$slow" -gt "$frames" ] && ok "rate 100 is longer ($slow > $frames frames)" ||
	bad "rate 100: $slow frames, rate 175: $frames"
expect 1 "unknown voice" pcg-phonemize --voice xx-nothing "$text"
err_has "no voice 'xx-nothing'"

# --- tokens
expect 0 "--tokens" pcg-phonemize --tokens "Hello."
out_has "<|spk_0|><|p_h|>"

# --- voice.json
cat >v.json <<EOF
{ "frontend": "espeak-ng", "codec": "kmeans-gl", "sample_rate": 16000, "hop": 320,
  "speakers": [ { "voice": "en-us+m3", "pitch": 45, "rate": 160 },
                { "voice": "en-us+f2", "pitch": 65, "rate": 150 } ] }
EOF
expect 0 "--voice-file --speaker 1" pcg-phonemize --voice-file v.json --speaker 1 --tokens "Hi."
out_has "<|spk_1|>"
expect 0 "speaker 1 is en-us+f2 at 150" pcg-phonemize --voice-file v.json --speaker 1 "$text"
head -n 1 out >a
pcg-phonemize --voice en-us+f2 --pitch 65 --rate 150 "$text" | head -n 1 >b
same a b "voice.json speaker = the same flags"
expect 2 "speaker beyond the voice" pcg-phonemize --voice-file v.json --speaker 2 "Hi."
err_has "the voice has 2 speakers"
sed 's/"hop": 320/"hop": 0/' v.json >bad1.json
expect 1 "hop 0" pcg-phonemize --voice-file bad1.json "Hi."
err_has "field 'hop'"
sed 's/espeak-ng/festival/' v.json >bad2.json
expect 1 "other front end" pcg-phonemize --voice-file bad2.json "Hi."
err_has "field 'frontend'"
sed 's/"pitch": 65/"pitch": "high"/' v.json >bad3.json
expect 1 "pitch not a number" pcg-phonemize --voice-file bad3.json "Hi."
err_has "speakers[1]"
printf '{ "frontend": ' >bad4.json
expect 1 "truncated JSON" pcg-phonemize --voice-file bad4.json "Hi."
err_has "bad4.json: not valid JSON at line 1"
expect 1 "missing file" pcg-phonemize --voice-file nothing.json "Hi."
err_has "nothing.json"

# --- hostile text: markup is read, not obeyed; empty text is silence
expect 0 "SSML-looking text" pcg-phonemize '<speak><break time="99s"/>Hi</speak>'
[ "$(head -n 1 out | awk '{print $3}')" -lt 500 ] && ok "no 99 s break" || bad "markup obeyed"
expect 0 "empty text" pcg-phonemize ""
rm -f a.wav
expect 1 "unwritable --wav" pcg-phonemize --wav nodir/a.wav "Hi."
[ ! -e nodir/a.wav ] && ok "no file" || bad "a file appeared"
finish
