#!/bin/sh
# bench/first-audio.sh: a listener's wait, as pcg-synth reports it, on
# LLaSA-1B's shape with a full-size X-codec2 decoder (random weights): one
# pipeline (pcg-up with its defaults, the codec as its fourth process), one
# listener at a time, TOKENS speech tokens (default 250: 5 s of audio)
# written to a WAV, the default growing chunks (--chunk-first 5) and fixed
# chunks (--chunk-first 25) in turn, REPS times each; then the same request
# tokens only (no codec). One line per run: time to first audio, worst lag
# behind a player that starts at the first chunk, the whole request, and
# tokens/s.
# Usage: bench/first-audio.sh   (after bench/llasa1b.sh made the GGUF files)
# Environment: BENCH_CACHE, MODEL (default the Q4_0 GGUF of bench/llasa1b.sh),
#   CODEC (X-codec2 weights; default made by bench-codec --keep in the
#   cache, 748 MB), TOKENS, REPS (default 2)
set -eu
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PWD/scripts:$PATH"
cache=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}
model=${MODEL:-$cache/llasa-1b-q4_0.gguf}
codec=${CODEC:-$cache/xcodec2-random}
tokens=${TOKENS:-250}
reps=${REPS:-2}
[ -f "$model" ] || { echo "first-audio.sh: $model: make it with bench/llasa1b.sh" >&2; exit 1; }
[ -f "$codec/model.safetensors" ] || bench-codec --keep "$codec" --reps 1 --max-seconds 5 >/dev/null
work=$(mktemp -d "${TMPDIR:-/tmp}/pcg-first-audio.XXXXXX")
export PCG_RUNTIME_DIR="$work/rt"
trap 'pcg-down >/dev/null 2>&1; rm -rf "$work"' EXIT INT TERM
pcg-up --target "$model" --draft-layers 0 --codec-weights "$codec" >/dev/null
text="The river was wide and slow under the morning fog."
run() { # label, pcg-synth flags...
	label=$1
	shift
	pcg-synth --policy none --max-tokens "$tokens" --seed 1 "$@" "$text" 2>&1 >/dev/null |
		awk -v l="$label" '
		/^tokens / { tok = $2; for (k = 1; k <= NF; k++) if ($k == "in") sec = $(k + 1) }
		/^first audio after/ { first = $4; lag = $10 }
		END { printf "%-22s first audio %6s s  worst lag %6s s  whole %6.2f s  %5.1f tokens/s\n",
		      l, first == "" ? "-" : first, lag == "" ? "-" : lag, sec, tok / sec }'
}
i=0
while [ $i -lt "$reps" ]; do
	run "growing (first 5)" -o "$work/a.wav"
	run "fixed (first 25)" --chunk-first 25 -o "$work/b.wav"
	run "tokens only" --tokens
	i=$((i + 1))
done
