#!/bin/sh
# bench/eval-codec.sh: the intelligibility and distortion of the demo voice's
# codec round trip (tools/voice/train_codec.py, codec-decode --codec
# kmeans-gl) on the held-out utterances of its corpus: Whisper base WER of
# the original and of the decoded speech, and the MCD-DTW between them.
# Usage: bench/eval-codec.sh [SENTENCES]   (default 400: 40 held out)
# Needs make, espeak-ng, bible-kjv, python3 with numpy, torch and
# safetensors (tools/voice/README.md), and make eval-deps.
# BENCH_DIR=DIR keeps the files there (default: a temporary directory).
set -eu
N=${1:-400}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATH="$ROOT/bin:$ROOT/scripts:$PATH"
W=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$W/rt"

python3 "$ROOT/tools/voice/make_corpus.py" --out "$W/corpus" --sentences "$N" --jobs 2
python3 "$ROOT/tools/voice/train_codec.py" --corpus "$W/corpus" --out "$W/codec"
ids=$(awk -F '\t' '$3 == "heldout" { print $1 }' "$W/corpus/metadata.tsv")
for id in $ids; do
	codec-decode --codec kmeans-gl --weights "$W/codec" --codes "$W/codec/codes/$id.txt" \
		-o "$W/rt/$id.wav"
done
awk -F '\t' -v c="$W/corpus" -v r="$W/rt" '
	NR == 1 { print "id\ttext\twav\tref" >(c "/orig.tsv"); print "id\ttext\twav\tref" >(r "/rt.tsv"); next }
	$3 == "heldout" {
		print $1 "\t" $4 "\t" c "/wav/" $1 ".wav\t" >(c "/orig.tsv")
		print $1 "\t" $4 "\t" r "/" $1 ".wav\t" c "/wav/" $1 ".wav" >(r "/rt.tsv")
	}' "$W/corpus/metadata.tsv"
echo "== the original speech"
pcg-eval --threads 2 --json "$W/orig.json" "$W/corpus/orig.tsv" | grep '^#'
echo "== the codec round trip, MCD against the original"
pcg-eval --threads 2 --json "$W/rt.json" "$W/rt/rt.tsv" | grep '^#'
