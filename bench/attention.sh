#!/bin/sh
# bench/attention.sh: what attention costs a decode step as the context
# grows: bench-forward's speech-range decode and a block of 4 at several
# contexts, for each float family named (the x86 families share one
# attention body; "generic" is the plain loop). Run it with the build before
# and after a change to attention (BENCH_FORWARD names another binary) for
# a side by side; the steps' time beyond the shortest context is attention.
#
# Usage: bench/attention.sh MODEL [THREADS] [CTX...]
# Environment: ISAS (default: the CPU's best), BENCH_FORWARD (default
#   bin/bench-forward), STEPS (default 32)
set -eu
cd "$(dirname "$0")/.."
model=$1
threads=${2:-2}
[ $# -ge 2 ] && shift 2 || shift $#
ctxs=${*:-16 128 400 800}
bf=${BENCH_FORWARD:-bin/bench-forward}
echo "== $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs, load $(cut -d ' ' -f 1 /proc/loadavg); $model, $threads threads"
for isa in ${ISAS:-default}; do
	for ctx in $ctxs; do
		out=$(if [ "$isa" = default ]; then "$bf" --model "$model" --threads "$threads" \
			--ctx "$ctx" --steps "${STEPS:-32}" --prefill 0; else PCG_MATMUL_ISA=$isa \
			"$bf" --model "$model" --threads "$threads" --ctx "$ctx" --steps "${STEPS:-32}" \
			--prefill 0; fi 2>&1)
		tps=$(echo "$out" | sed -n 's/^decode speech range[^:]*: *\([0-9.]*\) tokens.*/\1/p')
		x=$(echo "$out" | sed -n 's/^block of 4 vs 1 position, speech range: .* = \([0-9.]*\)x.*/\1/p')
		awk -v i="$isa" -v c="$ctx" -v t="$tps" -v x="$x" 'BEGIN { printf \
			"%s ctx %d: step %.3f ms (%.1f tokens/s), a block of 4 %.2fx a step\n", \
			i, c, 1000 / t, t, x }'
	done
done
