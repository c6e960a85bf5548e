#!/bin/sh
# tests/kmeans.sh: codec-decode --codec kmeans-gl as a user drives it, on the
# committed tiny codebook (tests/fixtures/kmeans/tiny): a valid 16 kHz mono
# WAV with 320 samples per code, raw float output equal to the C decoder's
# (tests/unit/test_kmeans_codec.c checks that against the numpy reference),
# errors naming the position of a bad code and leaving no file, and the
# options that go with xcodec2 only refused as usage errors.
. "${PCG_ROOT:-.}/tests/shlib"
FX="$ROOT/tests/fixtures/kmeans/tiny"
u() { od -A n -t "u$1" -j "$2" -N "$1" "$3" | tr -d ' '; }
size() { wc -c <"$1" | tr -d ' '; }

cd "$T" || exit 1
ncodes=$(wc -w <"$FX/codes.txt" | tr -d ' ')
samples=$((ncodes * 320))
CD="codec-decode --codec kmeans-gl --weights $FX"

# --- usage
expect 2 "unknown codec" codec-decode --codec kmeans --weights "$FX" --codes "$FX/codes.txt" -o a.wav
err_has "xcodec2, kmeans-gl or auto"
expect 2 "--daemon with codes" $CD --daemon --codes "$FX/codes.txt"
err_has "not --codes or -o"

# --- a WAV: RIFF, PCM, mono, 16 kHz, 16-bit, 320 samples per code
expect 0 "decode to WAV" $CD --codes "$FX/codes.txt" -o a.wav
expect 0 "--codec auto (the default) reads the codec from config.json" \
	codec-decode --weights "$FX" --codes "$FX/codes.txt" -o auto.wav
same a.wav auto.wav "auto picks kmeans-gl"
[ "$(head -c 4 a.wav)" = RIFF ] && ok "RIFF" || bad "not RIFF"
[ "$(u 2 20 a.wav)" = 1 ] && ok "PCM" || bad "format tag $(u 2 20 a.wav)"
[ "$(u 2 22 a.wav)" = 1 ] && ok "mono" || bad "$(u 2 22 a.wav) channels"
[ "$(u 4 24 a.wav)" = 16000 ] && ok "16 kHz" || bad "rate $(u 4 24 a.wav)"
[ "$(u 4 40 a.wav)" = $((2 * samples)) ] && ok "data: 320 samples per code ($samples)" ||
	bad "data chunk $(u 4 40 a.wav) bytes, want $((2 * samples))"

# --- --chunk: the streaming decode (what the daemon sends), same length; a
# chunk as long as the utterance is the whole decode
expect 0 "--chunk 10 --context 20 --lookahead 2" $CD --codes "$FX/codes.txt" -o c.wav --chunk 10 \
	--context 20 --lookahead 2
[ "$(u 4 40 c.wav)" = $((2 * samples)) ] && ok "chunked: the same length" || bad "chunked length"
expect 0 "--chunk beyond the utterance" $CD --codes "$FX/codes.txt" -o w.wav --chunk 100000
same a.wav w.wav "a chunk of the whole utterance = the whole decode"

# --- WAV and FLAC on standard output: a piped WAV streams (sizes "unknown",
# the file's samples); FLAC needs a file to seek in (a redirect), not a pipe
$CD --codes "$FX/codes.txt" -o - --format wav 2>err | cat >p.wav
[ "$(u 4 40 p.wav)" = 4294967295 ] && [ "$(u 4 4 p.wav)" = 4294967295 ] &&
	ok "piped WAV: sizes 0xFFFFFFFF" || bad "piped WAV header: $(u 4 40 p.wav)"
tail -c +45 a.wav >a.pcm; tail -c +45 p.wav >p.pcm
same a.pcm p.pcm "piped WAV: the file's samples"
$CD --codes "$FX/codes.txt" -o - --format flac 2>err | cat >p.flac
grep -q "FLAC needs a file it can seek in" err && ok "FLAC on a pipe: refused, says why" ||
	bad "FLAC on a pipe: $(cat err)"
expect 0 "FLAC to a redirected standard output" sh -c "$CD --codes $FX/codes.txt -o - --format flac >r.flac"
$CD --codes "$FX/codes.txt" -o f.flac 2>/dev/null
same f.flac r.flac "FLAC on standard output = the FLAC file"

# --- raw float: the model file or its directory, text or int32 codes, same samples
expect 0 "raw float to stdout" $CD --codes "$FX/codes.txt" -o - --format raw-f32
[ "$(size out)" = $((4 * samples)) ] && ok "raw-f32: 4 bytes x $samples" || bad "raw-f32 size $(size out)"
cp out whole.f32
expect 0 "the weights file, config beside it" codec-decode --codec kmeans-gl \
	--weights "$FX/model.safetensors" --codes - -o - --format raw-f32 <"$FX/codes.txt"
same out whole.f32 "file = directory, stdin = file"
awk '{ for (i = 1; i <= NF; i++) printf "%d%s", $i + 128264, (i < NF ? " " : " 128261\n") }' \
	"$FX/codes.txt" >ids.txt
expect 0 "--llasa-ids" $CD --codes ids.txt --llasa-ids -o - --format raw-f32
same out whole.f32 "LLaSA ids = codes"

# --- bad input: exit 1, the position named, nothing written
echo "4 5 16 6" >bad.txt
expect 1 "code out of range" $CD --codes bad.txt -o b.wav
err_has "position 2"
err_has "bad.txt"
echo "4 -1" >bad.txt
expect 1 "negative code" $CD --codes bad.txt -o b.wav
err_has "position 1"
: >empty.txt
expect 1 "no codes" $CD --codes empty.txt -o b.wav
err_has "no codes"
expect 1 "xcodec2 config for kmeans-gl" $CD --config "$ROOT/tests/fixtures/xcodec2/tiny/config.json" \
	--codes "$FX/codes.txt" -o b.wav
err_has "'codec'"
expect 1 "missing weights" codec-decode --codec kmeans-gl --weights nowhere --codes "$FX/codes.txt" -o b.wav
err_has "nowhere"
[ ! -e b.wav ] && ok "no output file after errors" || bad "output file after an error"

finish
