#!/bin/sh
# bench/vs-tree.sh: one policy through this tree's pipeline and through
# another build's (OTHER=DIR, a checkout of an earlier commit, built), each
# brought up by its own pcg-up with its defaults, sentence by sentence in
# turn (so the drift of a shared machine hits both alike), audio written to
# a file: what a change did to the speed a user gets.
# Usage: OTHER=DIR bench/vs-tree.sh [N_SENTENCES] [POLICY]   (default 10, none)
set -eu
cd "$(dirname "$0")/.."
here=$PWD
other=${OTHER:?OTHER=DIR: a built checkout of the commit to compare with}
n=${1:-10}
pol=${2:-none}
work=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}/vs-tree
mkdir -p "$work"
down() {
	PCG_RUNTIME_DIR="$work/a" "$here/scripts/pcg-down" >/dev/null 2>&1 || true
	PCG_RUNTIME_DIR="$work/b" "$other/scripts/pcg-down" >/dev/null 2>&1 || true
}
trap down EXIT
PCG_RUNTIME_DIR="$work/a" "$here/scripts/pcg-up" >/dev/null
PCG_RUNTIME_DIR="$work/b" "$other/scripts/pcg-up" >/dev/null
: >"$work/runs"
head -n "$n" bench/everyday-sentences.tsv | cut -f 3 | while IFS= read -r text; do
	for t in a b; do
		root=$here
		[ $t = a ] || root=$other
		PCG_RUNTIME_DIR="$work/$t" "$root/bin/pcg-synth" --policy "$pol" -o "$work/$t.wav" "$text" \
			2>&1 >/dev/null | awk -v t=$t '/^tokens / { for (k = 1; k <= NF; k++) if ($k == "in") print t, $2, $(k + 1) }' \
			>>"$work/runs"
	done
done
awk -v pol="$pol" '{ tok[$1] += $2; sec[$1] += $3 }
END { a = tok["a"] / sec["a"]; b = tok["b"] / sec["b"]
      printf "policy %s: this tree %.1f tokens/s, the other %.1f tokens/s: %.2fx\n", pol, a, b, a / b }' \
	"$work/runs"
