#!/bin/sh
# bench/auto-vs-none.sh: does --lookahead auto keep its promise, never slower
# than the target alone? LLaSA-1B's shape (random weights, the files of
# bench/llasa1b.sh) through the pipeline with pcg-up's defaults: the target
# alone (policy none) and sd under auto with a Q4_0 copy of the target as
# the draft, --temp 1 --top-k 0, TOKENS speech tokens, the two policies in
# turn REPEAT times; the median tokens/s of each, their ratio, and what auto
# did (the share of rounds that drafted, the cost model's prediction).
# Random weights make a quantised copy's acceptance what quantisation
# leaves (high); what auto must get right is whether drafting pays on this
# CPU, where the draft's step may be no faster than the target's.
#
# Usage: bench/auto-vs-none.sh   (after bench/llasa1b.sh and
#   bench/llasa1b-pipeline.sh made the files)
# Environment: BENCH_CACHE (as bench/llasa1b.sh), PRESET (llasa-1b),
#   TOKENS (default 100), REPEAT (default 3), THREADS (per server, default
#   2), TARGETS (file types of the target, default "q8_0 bf16"); pin a CPU
#   family with PCG_MATMUL_ISA and PCG_QPATH (e.g. avx2), as the servers
#   read them.
set -eu
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PWD/scripts:$PATH"
cache=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}
preset=${PRESET:-llasa-1b}
tokens=${TOKENS:-100}
repeat=${REPEAT:-3}
threads=${THREADS:-2}
export PCG_RUNTIME_DIR="$cache/rt-auto"
model=$cache/$preset-random-bf16
for f in "$model/config.json" "$cache/$preset-q8_0.gguf" "$cache/$preset-q4_0.gguf"; do
	[ -s "$f" ] || { echo "run bench/llasa1b.sh and bench/llasa1b-pipeline.sh first ($f)" >&2; exit 1; }
done
trap 'pcg-down >/dev/null 2>&1' EXIT
text="The quick brown fox jumps over the lazy dog, twice."
echo "== $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $threads threads per server, $tokens speech tokens, ISA ${PCG_MATMUL_ISA:-native}, quantised path ${PCG_QPATH:-native}, load $(cut -d' ' -f1 /proc/loadavg)"

# one POLICY: prints "TOKENS_PER_S DRAFTING_SHARE PREDICTED"
one() {
	pcg-synth --policy "$1" --seed 1 --temp 1 --top-k 0 --max-tokens "$tokens" "$text" 2>&1 >/dev/null |
		awk '/^tokens / { for (i = 1; i <= NF; i++) if ($i == "tokens/s") r = $(i - 1) }
		     /^policy / { for (i = 1; i <= NF; i++) if ($i == "rounds" && $(i + 1) == "drafting,") d = $(i - 2) }
		     /^cost model: / { p = $3 }
		     END { print r + 0, d == "" ? "-" : d, p == "" ? "-" : p }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for f in ${TARGETS:-q8_0 bf16}; do
	t=$cache/$preset-$f.gguf
	[ "$f" != bf16 ] || t=$model
	pcg-up --threads "$threads" --target "$t" --draft "$cache/$preset-q4_0.gguf" >/dev/null
	one none >/dev/null # warm: the mapped weights' page faults
	: >"$cache/none.txt"
	: >"$cache/sd.txt"
	i=0
	while [ "$i" -lt "$repeat" ]; do
		one none >>"$cache/none.txt"
		one sd >>"$cache/sd.txt"
		i=$((i + 1))
	done
	pcg-down >/dev/null
	n=$(cut -d' ' -f1 "$cache/none.txt" | median)
	s=$(cut -d' ' -f1 "$cache/sd.txt" | median)
	printf '%-5s target, q4_0 draft: none %6.2f tokens/s, sd auto %6.2f tokens/s = %.2fx none; sd drafting in %s of rounds, predicted %s tokens/s (medians of %d)\n' \
		"$f" "$n" "$s" "$(echo "$s $n" | awk '{ print ($2 > 0 ? $1 / $2 : 0) }')" \
		"$(tail -n 1 "$cache/sd.txt" | cut -d' ' -f2)" "$(tail -n 1 "$cache/sd.txt" | cut -d' ' -f3)" "$repeat"
done
