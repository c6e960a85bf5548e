#!/bin/sh
# bench/pipeline.sh: end-to-end tokens/s of the target alone (none) against
# sd, ssd and pcg through the four-process pipeline, in one run, on a model
# made here: a random Llama of 8 layers with the LLaSA vocabulary layout
# (hidden 256), whose first layer is the draft, and its ASG. Random weights
# accept little: the numbers measure the machinery, not a voice.
# Usage: bench/pipeline.sh [SEEDS] (default 3 seeds per policy)
set -eu
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PWD/scripts:$PATH"
work=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}/pipeline
export PCG_RUNTIME_DIR="$work/rt"
seeds=${1:-3}
mkdir -p "$work"
m=$work/model
if [ ! -f "$m/asg" ]; then
	pcg-mkmodel --out "$m" --hidden 256 --heads 8 --kv-heads 4 --ffn 768 --layers 8 --std 0.3 >/dev/null
	asg-build --model "$m" --theta 0.3 --quiet -o "$m/asg"
fi
trap 'pcg-down >/dev/null 2>&1' EXIT
pcg-up --target "$m" --draft-layers 0 --asg "$m/asg" >/dev/null
text="The quick brown fox jumps over the lazy dog, twice."
: >"$work/runs"
for pol in none sd ssd pcg; do
	for s in $(seq 1 "$seeds"); do
		pcg-synth --policy "$pol" --seed "$s" --max-tokens 300 "$text" 2>&1 >/dev/null |
			awk -v pol="$pol" '
			/^tokens / { tok = $2; for (i = 1; i <= NF; i++) if ($i == "in") sec = $(i + 1) }
			/^rounds / { gsub(",", ""); r = $2; a = $9; l = $13 }
			/^time: / { for (i = 1; i <= NF; i++) if ($i == "messaging") ms = $(i + 1) }
			END { print pol, tok, sec, r, a, l, ms }' >>"$work/runs"
	done
done
awk '{ tok[$1] += $2; sec[$1] += $3; r[$1] += $4; a[$1] += $5; l[$1] += $6; ms[$1] += $7; n[$1]++ }
END {
	printf "%-7s %10s %9s %8s %8s %10s\n", "policy", "tokens/s", "speedup", "accept", "MAL", "msg ms/rd"
	split("none sd ssd pcg", order, " ")
	base = tok["none"] / sec["none"]
	for (k = 1; k <= 4; k++) {
		p = order[k]
		printf "%-7s %10.1f %8.2fx %8.3f %8.3f %10.3f\n", p, tok[p] / sec[p],
			tok[p] / sec[p] / base, a[p] / n[p], l[p] / n[p], 1000 * ms[p] / r[p]
	}
}' "$work/runs"
