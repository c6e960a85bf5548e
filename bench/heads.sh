#!/bin/sh
# bench/heads.sh: MTP heads chosen by what they give through the pipeline on
# held-out text. For each heads file, the shipped voice with those heads
# (models/demo's files, the heads replaced) is brought up by pcg-up with its
# defaults, and every MTP rule speaks the held-out sentences of
# bench/table1-sentences.tsv (the voice never trained on them; each by its
# speaker) at a fixed lookahead and with auto, seed 1, tokens only, beside
# --policy none on the same pipeline, policy by policy within each sentence.
# One line per heads file and policy: the acceptance rate (accepted /
# drafted), the mean acceptance length (tokens / rounds) and tokens/s, with
# the ratio to none's tokens/s measured in the same run.
# Usage: bench/heads.sh [N_SENTENCES] HEADS.safetensors...
#   (default 40 sentences; LOOKAHEAD default 3; POLICIES default
#   "mtp-sd mtp-pcg mtp-viterbi")
set -eu
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$root/bin:$root/scripts:$PATH"
n=40
case ${1:-} in [0-9]*) n=$1; shift ;; esac
[ $# -gt 0 ] || { echo "usage: bench/heads.sh [N_SENTENCES] HEADS.safetensors..." >&2; exit 2; }
L=${LOOKAHEAD:-3}
pols=${POLICIES:-mtp-sd mtp-pcg mtp-viterbi}
work=$(mktemp -d "${TMPDIR:-/tmp}/pcg-heads.XXXXXX")
export PCG_RUNTIME_DIR="$work/rt"
trap 'pcg-down >/dev/null 2>&1; rm -rf "$work"' EXIT INT TERM
head -n "$n" bench/table1-sentences.tsv | cut -f 2,3 >"$work/text"
printf "%-28s %-18s %8s %6s %9s %8s\n" heads policy accepted MAL tokens/s "vs none"
for h in "$@"; do
	[ -f "$h" ] || { echo "bench/heads.sh: $h: no such file" >&2; exit 1; }
	v="$work/voice"
	rm -rf "$v"
	mkdir -p "$v"
	for f in "$root"/models/demo/*; do ln -s "$f" "$v/"; done
	rm "$v/mtp.safetensors"
	cp "$h" "$v/mtp.safetensors"
	pcg-down >/dev/null 2>&1 || true
	pcg-up --target "$v" --draft "$root/models/demo/draft" >/dev/null
	: >"$work/runs"
	while IFS="$(printf '\t')" read -r spk text; do
		for p in none $pols "$(echo "$pols" | cut -d' ' -f1):auto"; do
			pol=${p%:auto} la="--lookahead $L"
			[ "$pol" = "$p" ] || la=
			[ "$pol" = none ] && la=
			# shellcheck disable=SC2086
			pcg-synth --policy "$pol" $la --speaker "$spk" --seed 1 --tokens "$text" 2>&1 >/dev/null |
				awk -v p="$p" '
				/^tokens / { tok = $2; for (k = 1; k <= NF; k++) if ($k == "in") sec = $(k + 1) }
				/^rounds / { gsub(",", ""); r = $2; d = $4; a = $6 }
				END { print p, tok, sec, r + 0, d + 0, a + 0 }' >>"$work/runs"
		done
	done <"$work/text"
	pcg-down >/dev/null 2>&1
	awk -v h="$(basename "$(dirname "$h")")/$(basename "$h")" '
	{ tok[$1] += $2; sec[$1] += $3; r[$1] += $4; d[$1] += $5; a[$1] += $6; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
	END { base = tok["none"] / sec["none"]
	      for (i = 1; i <= n; i++) { p = order[i]
		acc = d[p] > 0 ? sprintf("%.3f", a[p] / d[p]) : "-"
		mal = r[p] > 0 ? tok[p] / r[p] : 0
		printf "%-28s %-18s %8s %6.2f %9.1f %7.2fx\n", h, p, acc, mal,
		       tok[p] / sec[p], tok[p] / sec[p] / base } }' "$work/runs"
done
