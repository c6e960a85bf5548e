#!/bin/sh
# bench/speedup.sh: what speculation buys end to end, as a user meets it:
# the four processes brought up by pcg-up with its defaults (the shipped
# voice unless MODEL=DIR), each policy against --policy none on the same
# sentences, alternating policy by policy within each sentence, the audio
# written to a file (-o) unless TOKENS=1. Beside each measured figure the
# cost model's prediction (lib/speculate/costmodel.c, through bench-costmodel) from
# terms measured apart from the run it predicts: the target's step and block
# slope and the draft's step as the servers measured them (the verifier's
# log), the fixed cost of a round from the none runs (1 / their tokens per
# second minus a step), and the acceptance per position the policy's runs
# measured. The start of each utterance (the prompt's prefill in both
# models and the first round: a request for 2 tokens, timed apart) is
# taken as measured, and the rest of it predicted.
# Usage: bench/speedup.sh [N_SENTENCES] [POLICY...]
#   default 10 sentences of bench/everyday-sentences.tsv and the policies
#   none sd pcg lantern mtp-pcg mtp-viterbi sd:seq pcg:seq (":seq": the
#   same policy with --sequential rounds). Extra pcg-up flags in UP_FLAGS,
#   extra pcg-synth flags in SYNTH_FLAGS.
set -eu
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PWD/scripts:$PATH"
work=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}/speedup
export PCG_RUNTIME_DIR="$work/rt"
n=${1:-10}
[ $# -gt 0 ] && shift
pols=${*:-none sd pcg lantern mtp-pcg mtp-viterbi sd:seq pcg:seq}
mkdir -p "$work"
trap 'pcg-down >/dev/null 2>&1' EXIT
# shellcheck disable=SC2086
pcg-up ${MODEL:+--target "$MODEL"} ${UP_FLAGS:-} >/dev/null
: >"$work/runs"
head -n "$n" bench/everyday-sentences.tsv | cut -f 3 >"$work/text"
i=0
while IFS= read -r text; do
	i=$((i + 1))
	for p in $pols; do
		pol=${p%:seq} seq=
		[ "$pol" = "$p" ] || seq=--sequential
		out="-o $work/out.wav"
		[ "${TOKENS:-0}" = 1 ] && out=--tokens
		# the start alone: the prompt's prefill in both models and the
		# first round (2 tokens), which the cost model of rounds leaves out
		# shellcheck disable=SC2086
		first=$(pcg-synth --policy "$pol" $seq --tokens ${SYNTH_FLAGS:-} --max-tokens 2 "$text" \
			2>&1 >/dev/null | awk '/^tokens / { for (k = 1; k <= NF; k++) if ($k == "in") print $(k + 1) }')
		# shellcheck disable=SC2086
		pcg-synth --policy "$pol" $seq $out ${SYNTH_FLAGS:-} "$text" 2>&1 >/dev/null |
			awk -v p="$p" -v first="$first" '
			/^tokens / { tok = $2; for (k = 1; k <= NF; k++) if ($k == "in") sec = $(k + 1) }
			/^policy / { L = 0; if ($0 ~ /auto \(/) { L = $5; sub(/^\(/, "", L) } else L = $4; sub(/,/, "", L)
				     np = 0; dr = 100; for (k = 1; k <= NF; k++) if ($k ~ /%$/) { v = $k; sub(/%/, "", v); if ($(k + 3) == "drafting,") dr = v; else pp = v } }
			/^rounds / { gsub(",", ""); r = $2; mal = $13 }
			/^acceptance per position:/ { for (k = 4; k <= NF && k < 12; k++) a[k - 3] = $k; na = NF - 3 }
			END { printf "%s %s %s %s %s %s %s", p, tok, sec, r, mal, L, pp
			      for (k = 1; k <= 7; k++) printf " %s", (k <= na ? a[k] : 0); printf " %s %s\n", first, dr }' \
			>>"$work/runs"
	done
done <"$work/text"
terms=$(sed -n 's/.*cost model: target step \([0-9.]*\) ms, block slope \([0-9.]*\), draft step \([0-9.]*\) ms, trip \([0-9.]*\) ms, MTP head \([0-9.]*\) ms, overlap \([0-9.]*\).*/\1 \2 \3 \4 \5 \6/p' "$PCG_RUNTIME_DIR/verifier.log" | head -n 1)
set -- $terms
step=$1 slope=$2 dstep=$3 head=$5 ovl=$6
# the target's step back to back (its runs, the target alone): the step
# where the verifier did not learn it
rstep=$(sed -n 's/.*cost model: .*target step back to back \([0-9.]*\) ms.*/\1/p' "$PCG_RUNTIME_DIR/verifier.log" | head -n 1)
[ -n "$rstep" ] && [ "$rstep" != 0.000 ] || rstep=$step
printf "cost terms (the verifier's, learnt): target step %s ms (back to back %s ms), block slope %s, draft step %s ms, MTP head %s ms, overlap %s\n" \
	"$step" "$rstep" "$slope" "$dstep" "$head" "$ovl"
# per policy: tokens, seconds, rounds-weighted acceptance per position, mean L
awk '{ tok[$1] += $2; sec[$1] += $3; r[$1] += $4; L[$1] += $6 * $4; pp[$1] += $7 * $4
       for (k = 1; k <= 7; k++) a[$1, k] += $(7 + k) * $4; f[$1] += $15; d[$1] += $16 * $4; n[$1]++ }
END { for (p in tok) { printf "%s %.0f %.4f %.0f %.4f %.1f", p, tok[p], sec[p], r[p], L[p] / r[p], pp[p] / r[p]
                       for (k = 1; k <= 7; k++) printf " %.4f", a[p, k] / r[p]; printf " %.4f %d %.4f\n", f[p], n[p], d[p] / r[p] / 100 } }' \
	"$work/runs" >"$work/sum"
none_tps=$(awk '$1 == "none" { print $2 / $3 }' "$work/sum")
[ -n "$none_tps" ] || { echo "speedup.sh: no none runs to compare with" >&2; exit 1; }
# none's rounds after its start: a step back to back and the fixed cost each
fixed=$(awk -v s="$rstep" '$1 == "none" { f = 1000 * ($3 - $14) / ($2 - 2 * $15) - s
	printf "%.4f", f < 0 ? 0 : f }' "$work/sum")
printf "fixed cost of a round, from none's rounds after the start: %s ms\n" "$fixed"
printf "%-14s %9s %8s %6s %6s %9s %7s %10s %9s\n" policy tokens/s "vs none" MAL L drafting piped predicted "meas/pred"
for p in $pols; do
	line=$(awk -v p="$p" '$1 == p' "$work/sum")
	[ -n "$line" ] || continue
	set -- $line
	tps=$(awk -v a="$2" -v b="$3" 'BEGIN { printf "%.1f", a / b }')
	mal=$(awk -v t="$2" -v r="$4" 'BEGIN { printf "%.2f", t / r }')
	acc="$7,$8,$9,${10},${11},${12},${13}"
	case $p in
	none) kind=none ;; mtp-viterbi) kind=viterbi ;; mtp-*) kind=mtp ;; *) kind=sequential ;;
	esac
	# most rounds drafted ahead: pipelined
	[ "$kind" != sequential ] || [ "${6%.*}" -lt 50 ] || kind=pipelined
	nh=0
	[ "$kind" != mtp ] || nh=3 # pcg-synth's auto asks for 3 heads at each position
	rate=$(bench-costmodel --costs "$step,$dstep,$slope,$fixed,$head,$ovl" --run-step "$rstep" \
		--kind "$kind" --heads $nh \
		--accept "$acc" --drafting "${16}" \
		--lookahead "$(awk -v l="$5" -v d="${16}" 'BEGIN { print (d > 0 ? l / d : 0) }')" |
		sed -n 's/^\([0-9.]*\) tokens.s predicted.*/\1/p')
	# the start as measured, the rest at the predicted rate
	pred=$(awk -v t="$2" -v f="${14}" -v n="${15}" -v r="$rate" 'BEGIN { printf "%.2f", t / (f + (t - 2 * n) / r) }')
	awk -v p="$p" -v t="$tps" -v b="$none_tps" -v m="$mal" -v L="$5" -v pr="$pred" -v pp="$6" -v d="${16}" \
		'BEGIN { printf "%-14s %9.1f %7.2fx %6.2f %6.2f %8.0f%% %6.0f%% %10.1f %9.2f\n", p, t, t / b, m, L, 100 * d, pp, pr, t / pr }'
done
