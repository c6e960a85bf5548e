#!/bin/sh
# tests/codec.sh: codec-decode as a user drives it, on the committed tiny
# X-codec2 fixture: exit codes (0 ok, 1 failure, 2 usage), every output format
# with a valid 16 kHz mono header and 320 samples per code, raw PCM to stdout,
# text / int32 / LLaSA-id input giving the same audio, chunks fixed or
# growing (--chunk-first) and a bad first chunk refused, errors naming the
# position of a bad code, and no file at the final path after any failure;
# --device: a malformed one is a usage error, and without a GPU (or without
# the CUDA build) cuda is a one-line error naming the device, exit 1, no file
# (with a GPU it decodes instead: tests/cuda/test_xcodec2.c checks the audio).
. "${PCG_ROOT:-.}/tests/shlib"
FX="$ROOT/tests/fixtures/xcodec2/tiny"
# u N OFFSET FILE: the little-endian unsigned integer of N bytes at OFFSET.
u() { od -A n -t "u$1" -j "$2" -N "$1" "$3" | tr -d ' '; }
size() { wc -c <"$1" | tr -d ' '; }
no_partials() {
	if ls -a "$1" | grep -q '\.partial$'; then bad "temporary file left in $1"; else ok "no temporary file in $1"; fi
}

cd "$T" || exit 1
ncodes=$(wc -w <"$FX/codes.txt" | tr -d ' ')
samples=$((ncodes * 320))
CD="codec-decode --weights $FX"

# --- usage
expect 2 "no arguments" codec-decode
err_has "--weights, --codes and -o are required"
expect 2 "other codec" $CD --codec encodec --codes "$FX/codes.txt" -o a.wav
expect 2 "bad --codes-format" $CD --codes "$FX/codes.txt" --codes-format csv -o a.wav
err_has "--codes-format"
expect 2 "unknown extension" $CD --codes "$FX/codes.txt" -o a.mp3
err_has "--format"
expect 2 "bad --format" $CD --codes "$FX/codes.txt" -o a.wav --format ogg
expect 0 "WAV to standard output (a file here)" $CD --codes "$FX/codes.txt" -o - --format wav
[ "$(head -c 4 "$T/out")" = RIFF ] && ok "a WAV on standard output" || bad "no WAV on stdout"
expect 2 "--context without --chunk" $CD --codes "$FX/codes.txt" -o a.wav --context 10
expect 2 "negative --chunk" $CD --codes "$FX/codes.txt" -o a.wav --chunk -1

# --- formats: WAV PCM16, WAV float, FLAC, raw to stdout
expect 0 "decode to WAV" $CD --codes "$FX/codes.txt" -o a.wav
[ "$(head -c 4 a.wav)" = RIFF ] && [ "$(dd if=a.wav bs=1 skip=8 count=4 2>/dev/null)" = WAVE ] &&
	ok "RIFF/WAVE" || bad "not a RIFF/WAVE file"
[ "$(u 2 20 a.wav)" = 1 ] && ok "PCM" || bad "format tag $(u 2 20 a.wav)"
[ "$(u 2 22 a.wav)" = 1 ] && ok "mono" || bad "$(u 2 22 a.wav) channels"
[ "$(u 4 24 a.wav)" = 16000 ] && ok "16 kHz" || bad "rate $(u 4 24 a.wav)"
[ "$(u 2 34 a.wav)" = 16 ] && ok "16-bit" || bad "$(u 2 34 a.wav) bits"
[ "$(u 4 40 a.wav)" = $((2 * samples)) ] && ok "data: 320 samples per code ($samples)" ||
	bad "data chunk $(u 4 40 a.wav) bytes, want $((2 * samples))"
[ "$(size a.wav)" = $((44 + 2 * samples)) ] && ok "WAV size" || bad "WAV size $(size a.wav)"
expect 0 "decode to float WAV" $CD --codes "$FX/codes.txt" -o f.wav --format wav-f32
[ "$(u 2 20 f.wav)" = 3 ] && [ "$(u 2 34 f.wav)" = 32 ] && ok "IEEE float, 32-bit" ||
	bad "float WAV: tag $(u 2 20 f.wav), $(u 2 34 f.wav) bits"
[ "$(size f.wav)" -ge $((4 * samples)) ] && ok "float WAV size" || bad "float WAV size"
expect 0 "decode to FLAC" $CD --codes "$FX/codes.txt" -o a.flac
[ "$(head -c 4 a.flac)" = fLaC ] && ok "FLAC magic" || bad "not FLAC"
expect 0 "raw PCM16 to stdout" $CD --codes "$FX/codes.txt" -o -
[ "$(size out)" = $((2 * samples)) ] && ok "raw: 2 bytes x $samples" || bad "raw size $(size out)"
dd if=a.wav bs=44 skip=1 2>/dev/null | cmp -s - out && ok "raw = the WAV's samples" ||
	bad "raw differs from the WAV data"
expect 0 "raw float to stdout" $CD --codes - -o - --format raw-f32 <"$FX/codes.txt"
[ "$(size out)" = $((4 * samples)) ] && ok "raw-f32: 4 bytes x $samples" || bad "raw-f32 size"
cp out whole.f32

# --- inputs: int32, LLaSA ids (with the end token), the weights file + config beside it
expect 0 "int32 codes" codec-decode --weights "$FX/model.safetensors" --codes "$FX/codes.i32" \
	--codes-format i32 -o - --format raw-f32
cmp -s out whole.f32 && ok "int32 input = text input" || bad "int32 input gives other audio"
awk '{ for (i = 1; i <= NF; i++) printf "%d%s", $i + 128264, (i < NF ? " " : " 128261\n") }' \
	"$FX/codes.txt" >ids.txt
expect 0 "--llasa-ids" $CD --codes ids.txt --llasa-ids -o - --format raw-f32
cmp -s out whole.f32 && ok "LLaSA ids = codes" || bad "LLaSA ids give other audio"
expect 0 "--chunk larger than the utterance" $CD --codes "$FX/codes.txt" --chunk 1000 -o - --format raw-f32
cmp -s out whole.f32 && ok "one chunk = whole" || bad "one chunk differs from whole"
expect 0 "--chunk 25 --context 50 --lookahead 5" $CD --codes "$FX/codes.txt" --chunk 25 \
	--context 50 --lookahead 5 -o - --format raw-f32
[ "$(size out)" = $((4 * samples)) ] && ok "chunked: same length" || bad "chunked length"
cp out fixed.f32
# growing chunks (5, 10, 20, 25, ...: pcg-synth's default); a first chunk of
# --chunk is the fixed chunks; one beyond --chunk, or without it, is refused
expect 0 "--chunk 25 --chunk-first 5" $CD --codes "$FX/codes.txt" --chunk 25 --chunk-first 5 \
	--context 50 --lookahead 5 -o - --format raw-f32
[ "$(size out)" = $((4 * samples)) ] && ! cmp -s out fixed.f32 &&
	ok "growing chunks: same length, other samples" || bad "growing chunks: $(size out) bytes"
expect 0 "--chunk 25 --chunk-first 25" $CD --codes "$FX/codes.txt" --chunk 25 --chunk-first 25 \
	--context 50 --lookahead 5 -o - --format raw-f32
cmp -s out fixed.f32 && ok "--chunk-first 25 = fixed chunks" || bad "--chunk-first 25 differs"
expect 0 "--chunk 1000 --chunk-first 100" $CD --codes "$FX/codes.txt" --chunk 1000 \
	--chunk-first 100 -o - --format raw-f32
cmp -s out whole.f32 && ok "a first chunk over the utterance = whole" || bad "first chunk 100 differs"
expect 2 "--chunk-first beyond --chunk" $CD --codes "$FX/codes.txt" --chunk 25 --chunk-first 26 -o a.wav
err_has "--chunk-first: 26: want 0 to 25"
expect 2 "--chunk-first without --chunk" $CD --codes "$FX/codes.txt" --chunk-first 5 -o a.wav
err_has "--chunk-first goes with --chunk"

# --- bad input: exit 1, the position named, nothing written
echo "4 5 65536 6" >bad.txt
expect 1 "code out of range" $CD --codes bad.txt -o b.wav
err_has "position 2"
err_has "bad.txt"
[ ! -e b.wav ] && ok "no output file" || bad "output file after an error"
echo "4 5 x 6" >bad.txt
expect 1 "not a number" $CD --codes bad.txt -o b.wav
err_has "position 2"
echo "128264 5 128300" >bad.txt
expect 1 "LLaSA id not a speech token" $CD --codes bad.txt --llasa-ids -o b.wav
err_has "position 1"
printf '\001\000\000' >bad.i32
expect 1 "int32 input of 3 bytes" $CD --codes bad.i32 --codes-format i32 -o b.wav
: >empty.txt
expect 1 "no codes" $CD --codes empty.txt -o b.wav
err_has "no codes"
expect 1 "missing weights" codec-decode --weights nowhere --codes "$FX/codes.txt" -o b.wav
err_has "nowhere"
mkdir -p noconf && cp "$FX/model.safetensors" noconf/
expect 1 "tiny weights read as full size" codec-decode --weights noconf --codes "$FX/codes.txt" -o b.wav
err_has "generator.quantizer.project_out.weight"
printf '{"hidden_size": "64"}' >bad.json
expect 1 "bad config" $CD --config bad.json --codes "$FX/codes.txt" -o b.wav
err_has "hidden_size"
[ ! -e b.wav ] && ok "still no output file" || bad "output file after an error"

# --- atomic output: a bad directory, a full disk (file-size limit), the old file kept
expect 1 "output into a missing directory" $CD --codes "$FX/codes.txt" -o no/such/b.wav
err_has "no/such/b.wav"
cp a.wav keep.wav
( ulimit -f 16; $CD --codes "$FX/codes.txt" -o keep.wav ) >out 2>err
[ $? -eq 1 ] && ok "disk full: exit 1" || bad "disk full: exit $?: $(cat err)"
grep -q "keep.wav" err && ok "disk full: the file named" || bad "disk full: $(cat err)"
cmp -s keep.wav a.wav && ok "disk full: the old file is intact" || bad "disk full: old file changed"
( ulimit -f 16; $CD --codes "$FX/codes.txt" -o new.flac --format flac ) >out 2>err
[ ! -e new.flac ] && ok "disk full: no FLAC at the final path" || bad "partial FLAC left"

# --- --device
KM="$ROOT/tests/fixtures/kmeans/tiny"
expect 2 "--device bogus" $CD --codes "$FX/codes.txt" -o d.wav --device bogus
err_has "device 'bogus'"
expect 2 "--device cuda:x" $CD --codes "$FX/codes.txt" -o d.wav --device cuda:x
expect 2 "--device cuda with kmeans-gl" codec-decode --weights "$KM" --codes "$KM/codes.txt" \
	-o d.wav --device cuda
err_has "kmeans-gl decodes on the CPU only"
expect 0 "--device cpu" $CD --codes "$FX/codes.txt" -o d.wav --device cpu
cmp -s d.wav a.wav && ok "--device cpu = the default" || bad "--device cpu gives other audio"
rm -f d.wav
$CD --codes "$FX/codes.txt" -o d.wav --device cuda >out 2>err
rc=$?
if [ $rc -eq 0 ]; then
	ok "--device cuda: a GPU is here and decoded; the no-GPU error is not checked"
	[ "$(size d.wav)" = "$(size a.wav)" ] && ok "GPU: WAV of the same size" || bad "GPU: WAV size $(size d.wav)"
else
	[ $rc -eq 1 ] && ok "--device cuda without a GPU: exit 1" || bad "--device cuda: exit $rc: $(cat err)"
	[ "$(wc -l <err | tr -d ' ')" = 1 ] && ok "one line" || bad "$(wc -l <err) lines: $(cat err)"
	# no GPU here, or a build without the CUDA backend (make CUDA=0): either says so
	grep -q "codec-decode: device cuda:0: \(no CUDA device on this machine\|this build has no CUDA backend\)" err &&
		ok "the error says why: $(cat err)" || bad "--device cuda: $(cat err)"
	[ ! -e d.wav ] && ok "--device cuda: no output file" || bad "--device cuda: output file left"
	expect 1 "--device cuda:1" $CD --codes "$FX/codes.txt" -o d.wav --device cuda:1
	err_has "cuda:1"
	expect 1 "--daemon --device cuda" timeout 20 codec-decode --daemon --weights "$FX" \
		--device cuda --listen "ipc://$T/codec.sock"
	err_has "device cuda:0"
fi
no_partials .

finish
