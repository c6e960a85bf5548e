#!/bin/sh
# bench/llasa1b-pipeline.sh: the figure users want, end to end: LLaSA-1B's
# shape (random weights, the files of bench/llasa1b.sh) through the
# four-process pipeline (pcg-up, pcg-synth), speech tokens/s and the
# real-time factor it implies (50 tokens a second of audio), for the target
# alone (policy none) in each file type, and for sd with each kind of draft
# the engine offers without training: the target's first layers
# (--draft-layers) and a Q4_0 copy of the target (a GGUF). Random weights
# make the layer draft's acceptance meaningless (it is measured, not
# chosen); the quantised draft's acceptance is a property of the
# quantisation (bench-quant measures it on the demo voice too). pcg needs
# an ASG of the 65,536 speech embeddings: given with ASG=FILE, it runs too.
#
# Usage: bench/llasa1b-pipeline.sh   (after bench/llasa1b.sh made the files)
# Environment: BENCH_CACHE (as bench/llasa1b.sh), PRESET (llasa-1b),
#   TOKENS (speech tokens per utterance, default 100), THREADS (per server,
#   default 2), ASG (an ASG file for pcg; optional), DEVICE (pcg-up --device:
#   cpu, cuda or cuda:N; default cpu), CODEC (X-codec2 weights for
#   codec-decode, the fourth process, and the audio goes to a file; default
#   none: tokens only), ONLY=bf16 (the bf16 target alone, nothing else: no
#   quantised files are made)
set -eu
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PWD/scripts:$PATH"
cache=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}
preset=${PRESET:-llasa-1b}
tokens=${TOKENS:-100}
threads=${THREADS:-2}
export PCG_RUNTIME_DIR="$cache/rt"
model=$cache/$preset-random-bf16
[ -f "$model/config.json" ] || { echo "run bench/llasa1b.sh first ($model)" >&2; exit 1; }
device=${DEVICE:-cpu}
codec=${CODEC:-}
only=${ONLY:-}
[ -z "$only" ] || [ "$only" = bf16 ] || { echo "ONLY: bf16 or nothing" >&2; exit 2; }
[ -n "$only" ] || for f in q8_0 q4_k_m q4_0; do
	[ -s "$cache/$preset-$f.gguf" ] ||
		bin/pcg-quantize --quiet --type "$f" "$model" -o "$cache/$preset-$f.gguf"
done
trap 'pcg-down >/dev/null 2>&1' EXIT
text="The quick brown fox jumps over the lazy dog, twice."
echo "== $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $threads threads per server, $tokens speech tokens, device $device${codec:+, codec-decode on $codec}"

# run NAME POLICY pcg-up-args...: one utterance, one line of results: the
# whole request (prompt prefill included: the LLaSA prompt of this text is
# about 60 positions), the first token alone (the same request cut to one
# token: the prefill), and the steady rate after it,
# (tokens - 1) / (whole - first), the real-time factor users hear once the
# audio streams.
run() {
	name=$1 pol=$2
	shift 2
	pcg-up --threads "$threads" --device "$device" ${codec:+--codec-weights "$codec"} "$@" >/dev/null
	# the first request pays the page faults of the mapped weights: warm up
	pcg-synth --policy none --seed 9 --max-tokens 8 ${codec:+-o "$cache/pipeline.wav"} "Warm up." >/dev/null 2>&1
	first=$(pcg-synth --policy "$pol" --seed 1 --max-tokens 1 ${codec:+-o "$cache/pipeline.wav"} "$text" 2>&1 >/dev/null |
		awk '/^tokens / { for (i = 1; i <= NF; i++) if ($i == "in") print $(i + 1) }')
	pcg-synth --policy "$pol" --seed 1 --max-tokens "$tokens" ${codec:+-o "$cache/pipeline.wav"} "$text" 2>&1 >/dev/null | awk -v n="$name" -v f="$first" '
		/^tokens / { tok = $2; for (i = 1; i <= NF; i++) if ($i == "in") sec = $(i + 1) }
		/^rounds / { gsub(",", ""); a = $9; l = $13 }
		END { st = (tok - 1) / (sec - f)
			printf "%-34s %6.1f tokens/s whole, first token %5.2f s, then %6.1f tokens/s = %5.2fx real time  acceptance %-6s MAL %s\n",
			n, tok / sec, f, st, st / 50, a == "" ? "-" : a, l == "" ? "-" : l }'
	pcg-down >/dev/null
}
for f in bf16 q8_0 q4_k_m q4_0; do
	t=$cache/$preset-$f.gguf
	[ "$f" != bf16 ] || t=$model
	run "$f target, none" none --target "$t"
	[ -z "$only" ] || exit 0
done
run "q8_0 target, sd, q4_0 draft" sd --target "$cache/$preset-q8_0.gguf" --draft "$cache/$preset-q4_0.gguf"
run "q8_0 target, sd, layers 0,1 draft" sd --target "$cache/$preset-q8_0.gguf" --draft-layers 0,1
run "bf16 target, sd, q4_0 draft" sd --target "$model" --draft "$cache/$preset-q4_0.gguf"
if [ -n "${ASG:-}" ]; then
	run "q8_0 target, pcg, q4_0 draft" pcg --target "$cache/$preset-q8_0.gguf" \
		--draft "$cache/$preset-q4_0.gguf" --asg "$ASG"
fi
