#!/bin/sh
# bench/codec-encode.sh: codec-encode on a full-size X-codec2 encoder, a
# 10 s prompt, 2 threads: wall time, the encoder's RTF and its split
# (features, semantic, acoustic), and peak RSS, for the Conformer in bf16
# (the default) and in f32; the codes of both against the original's.
#
# Usage: bench/codec-encode.sh DIR   (from the repository root, after make)
#   DIR: a full-size encoder and its reference, as
#        tests/ref/make_xcodec2_enc_fixtures.py --full DIR writes them
#        (model.safetensors, wav.f32, codes.i32; 2.6 GB, random weights in
#        the checkpoint's layout), or HKUSTAudio/xcodec2 with a wav.f32.
# Environment: THREADS (default 2).
set -eu
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: bench/codec-encode.sh DIR" >&2; exit 2; }
dir=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sox -t f32 -r 16000 -c 1 "$dir/wav.f32" -e floating-point "$tmp/prompt.wav"
for dt in bf16 f32; do
	echo "== --dtype $dt, ${THREADS:-2} threads"
	/usr/bin/time -f "wall %e s, peak RSS %M KB" bin/codec-encode --weights "$dir" \
		--dtype "$dt" --threads "${THREADS:-2}" "$tmp/prompt.wav" -o "$tmp/$dt.txt"
	if [ -f "$dir/codes.i32" ]; then
		od -A n -t d4 -v "$dir/codes.i32" | tr -s ' ' '\n' | sed '/^$/d' >"$tmp/ref.txt"
		same=$(paste "$tmp/ref.txt" "$tmp/$dt.txt" | awk '$1 == $2' | wc -l)
		echo "codes equal to the original's: $same of $(wc -l <"$tmp/ref.txt")"
	fi
done
