#!/bin/sh
# tests/acceptance.sh: every draft the shipped voice has earns at least a
# floor of acceptance, so a speed-up that vanishes fails here rather than in
# a benchmark. The demo voice's pipeline as pcg-up starts it (its draft
# model, its ASG, its three MTP heads); each policy with --lookahead 2 on
# two fixed texts and two fixed seeds; the acceptance pooled over the four
# (accepted / drafted) must reach the floor. The floors are about 0.75x what
# the shipped voice gave when they were set (docs/BENCHMARKS.md,
# "Acceptance floors"): sd 0.45, pcg 0.54, ssd 0.64, mtp-sd 0.40, mtp-pcg
# 0.48 (the heads distilled from the target's samples; 0.34 and 0.46 before),
# mtp-viterbi 0.73; heads whose outputs are lost (as once, when they went
# through lm_head with the block's rows) accept 0.
# Then, with the lookahead left to auto, an MTP rule asks for no more heads
# than the target has: the shipped voice's three, and on a Llasa+
# checkpoint (two heads) mtp-pcg and mtp-sd run by default.
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
own_pipeline
expect 0 "pcg-up, the demo voice" pcg-up --no-warmup
texts="Then the king spoke to the people.|The quick brown fox jumps over the lazy dog."
for pf in sd:0.33 pcg:0.40 ssd:0.48 mtp-sd:0.30 mtp-pcg:0.36 mtp-viterbi:0.55; do
	pol=${pf%%:*} floor=${pf#*:}
	: >"$pol.stats"
	for seed in 1 2; do
		echo "$texts" | tr '|' '\n' | while read -r text; do
			pcg-synth --policy "$pol" --lookahead 2 --seed $seed --tokens "$text" 2>&1 >/dev/null |
				sed -n 's/^rounds [0-9]*, drafted \([0-9]*\), accepted \([0-9]*\),.*/\1 \2/p' >>"$pol.stats"
		done
	done
	runs=$(wc -l <"$pol.stats")
	rate=$(awk '{ d += $1; a += $2 } END { if (d > 0) printf "%.3f", a / d }' "$pol.stats")
	drafted=$(awk '{ d += $1 } END { print d + 0 }' "$pol.stats")
	if [ "$runs" -eq 4 ] && [ -n "$rate" ] && awk -v r="$rate" -v f="$floor" 'BEGIN { exit !(r >= f) }'; then
		ok "$pol: acceptance $rate of $drafted drafted >= $floor"
	else
		bad "$pol: acceptance '${rate:-none}' of $drafted drafted in $runs runs, floor $floor"
	fi
done
# auto: the shipped voice's three heads
expect 0 "mtp-pcg, lookahead auto" pcg-synth --policy mtp-pcg --seed 1 --tokens "Then the king spoke."
err_has "acceptance per position"
n=$(sed -n 's/^acceptance per position: //p' "$T/err" | wc -w)
[ "$n" -eq 3 ] && ok "auto asks the voice for its 3 heads" || bad "auto asked for $n heads: $(cat "$T/err")"
pcg-down >/dev/null 2>&1

# A Llasa+ checkpoint with two heads: the default lookahead asks for two.
expect 0 "a Llasa+ checkpoint (2 heads)" pcg-mkmodel --out lp --preset llasa-1b --hidden 64 \
	--layers 2 --heads 4 --kv-heads 2 --ffn 128 --std 0.3 --llasa-plus
expect 0 "its ASG" asg-build --model lp --quiet -o lp/asg
export PCG_RUNTIME_DIR="$T/rt-lp"
expect 0 "pcg-up --target lp" pcg-up --target lp --draft-layers 0 --asg lp/asg --threads 1 --no-warmup
for pol in mtp-pcg mtp-sd; do
	expect 0 "$pol with the default lookahead on 2 heads" pcg-synth --policy "$pol" --seed 3 \
		--max-tokens 40 --tokens "Hello from Llasa plus."
	n=$(sed -n 's/^acceptance per position: //p' "$T/err" | wc -w)
	[ "$n" -eq 2 ] && ok "$pol: auto asks for the model's 2 heads" || bad "$pol: $n heads: $(cat "$T/err")"
done
pcg-down >/dev/null 2>&1
finish
