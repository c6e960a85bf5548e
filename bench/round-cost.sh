#!/bin/sh
# bench/round-cost.sh: what a round costs beyond the model's compute, the
# way a user sees it: the target alone (--policy none, tokens only) through
# the four processes that pcg-up starts with its defaults, against
# bench-forward's decode step of the same model with the same threads at
# the context the utterance runs at (its prompt and half its speech),
# alternated RUNS times. overhead = 1 / (tokens/s) - step, per token (a
# round of the target alone is one token).
# Usage: bench/round-cost.sh [RUNS]   (default 5; MODEL=DIR, default the demo voice)
set -eu
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PWD/scripts:$PATH"
work=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}/round-cost
export PCG_RUNTIME_DIR="$work/rt"
runs=${1:-5}
model=${MODEL:-models/demo}
mkdir -p "$work"
trap 'pcg-down >/dev/null 2>&1' EXIT
# shellcheck disable=SC2086
pcg-up ${MODEL:+--target "$MODEL"} >/dev/null
threads=$(tr '\0' ' ' <"/proc/$(cat "$PCG_RUNTIME_DIR/targetd.pid")/cmdline" |
	sed -n 's/.*--threads \([0-9]*\).*/\1/p')
[ "$threads" != 0 ] || threads=$(nproc)
text="Please remember to turn off the lights when you leave the office, and lock the door behind you."
# the speech tokens of the text; its phoneme prompt is about 80 positions
n=$(pcg-synth --policy none --tokens "$text" 2>/dev/null | wc -w)
ctx=$((n / 2 + 80))
printf "model %s, target threads %d, %d speech tokens, step measured at context %d\n" \
	"$model" "$threads" "$n" "$ctx"
: >"$work/runs"
for r in $(seq 1 "$runs"); do
	tps=$(pcg-synth --policy none --tokens "$text" 2>&1 >/dev/null |
		sed -n 's/^tokens .*: \([0-9.]*\) tokens.s$/\1/p')
	# the step from bench-forward's tokens/s (its ms are rounded to 0.1);
	# the idle servers wait passively, taking no core from it
	sps=$(bench-forward --model "$model" --threads "$threads" --ctx "$ctx" --steps 64 |
		sed -n 's/^decode speech range[^:]*: *\([0-9.]*\) tokens.s.*/\1/p')
	echo "$tps $sps" >>"$work/runs"
	awk -v t="$tps" -v s="$sps" 'BEGIN { printf "run: pipeline %.1f tokens/s (%.3f ms a token), bench-forward step %.3f ms: %.3f ms beyond\n", t, 1000 / t, 1000 / s, 1000 / t - 1000 / s }'
done
sort -n -k1 "$work/runs" | awk '{ t[NR] = $1; s[NR] = $2 } END { m = int((NR + 1) / 2)
	printf "median: pipeline %.3f ms a token, step %.3f ms, beyond the compute %.3f ms a round\n",
		1000 / t[m], 1000 / s[m], 1000 / t[m] - 1000 / s[m] }'
