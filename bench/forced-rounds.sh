#!/bin/bash
# bench/forced-rounds.sh: rounds across a phoneme voice's forced tokens,
# measured side by side against a build that cuts rounds at them.
#
#   bench/forced-rounds.sh [OLD_BIN]
#
# Runs the demo voice's pipeline from this tree's bin/ and, when OLD_BIN (the
# bin/ of another build, for example a worktree of an earlier commit) is
# given, a second pipeline from it at the same time; then sd and pcg on the
# first N (default 40) held-out verses of bench/table1-sentences.tsv, seed
# 1, each request sent to one pipeline then to the other, so that both see
# the same load. Prints per build and policy the rounds, drafted and
# accepted tokens, the acceptance rate, the mean acceptance length (1 +
# accepted / rounds) and tokens/s (speech tokens over the summed request
# times).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
n=${N:-40}
work=$(mktemp -d)
trap 'for b in new old; do PCG_RUNTIME_DIR=$work/rt-$b "$here/scripts/pcg-down" >/dev/null 2>&1 || true; done; rm -rf "$work"' EXIT
builds="new"
[ $# -ge 1 ] && builds="new old"
up() { PCG_RUNTIME_DIR=$work/rt-$1 PCG_BIN=$2 "$here/scripts/pcg-up" >/dev/null; }
up new "$here/bin"
[ $# -ge 1 ] && up old "$(cd "$1" && pwd)"
head -n "$n" "$here/bench/table1-sentences.tsv" >"$work/texts"
for pol in sd pcg; do
	while IFS='	' read -r id spk text; do
		for b in $builds; do
			bin=$here/bin
			[ "$b" = new ] || bin=$(cd "$1" && pwd)
			PCG_RUNTIME_DIR=$work/rt-$b "$bin/pcg-synth" --policy "$pol" --seed 1 \
				--speaker "$spk" -- "$text" 2>&1 >/dev/null |
				awk -v b="$b" -v p="$pol" '/^tokens / { t = $2; for (i = 1; i <= NF; i++) if ($i == "in") s = $(i + 1) }
					/^rounds / { gsub(",", ""); r = $2; d = $4; a = $6 }
					END { print b, p, r, d, a, t, s }' >>"$work/runs"
		done
	done <"$work/texts"
done
awk '{ k = $1 " " $2; r[k] += $3; d[k] += $4; a[k] += $5; t[k] += $6; s[k] += $7 }
END {
	printf "%-4s %-4s %7s %8s %8s %7s %6s %6s %8s\n", "build", "pol", "rounds", "drafted",
		"accepted", "tokens", "rate", "MAL", "tok/s"
	for (k in r) { split(k, x, " ")
		printf "%-5s %-4s %7d %8d %8d %7d %6.3f %6.3f %8.1f\n", x[1], x[2], r[k], d[k], a[k],
			t[k], a[k] / d[k], 1 + a[k] / r[k], t[k] / s[k] } }' "$work/runs" | sort
