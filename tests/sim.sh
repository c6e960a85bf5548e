#!/bin/sh
# tests/sim.sh: pcg-sim as a user drives it: exit codes (0 ok, 1 failure,
# 2 usage), one-line errors, the output records in their order, counts that
# add up, reproducibility from the seed, and a few answers known in closed
# form (the statistical proofs are in tests/unit/test_policy.c).
. "${PCG_ROOT:-.}/tests/shlib"
# field NAME: the value of the record NAME in out.
field() { sed -n "s/^$1	//p" "$T/out"; }
# near X Y TOL: |X - Y| <= TOL
near() { awk -v x="$1" -v y="$2" -v t="$3" 'BEGIN { d = x - y; if (d < 0) d = -d; exit !(d <= t) }'; }
f32() { perl -e 'print pack "f<*", @ARGV' -- "$@"; }

cd "$T" || exit 1
f32 0.25 0.25 0.5 > p.f32
f32 0.5 0.25 0.25 > q.f32
f32 0.5 0.5 > two.f32
f32 0.25 0.25 0.25 > low.f32
f32 0.5 -0.25 0.75 > neg.f32
f32 0.2502 0.25 0.5 > near.f32
head -c 10 p.f32 > odd.f32

# --- usage
expect 2 "no --policy" pcg-sim --draft p.f32 --target q.f32
err_has "--policy is required"
expect 2 "unknown policy" pcg-sim --policy best --draft p.f32 --target q.f32
err_has "sd, ssd, pcg, greedy, typical, topk or lantern"
expect 2 "no --target" pcg-sim --policy sd --draft p.f32
expect 2 "--beta with sd" pcg-sim --policy sd --beta 0.2 --draft p.f32 --target q.f32
err_has "--beta: --policy sd takes no such parameter"
expect 2 "--k with typical" pcg-sim --policy typical --k 3 --draft p.f32 --target q.f32
err_has "--k: --policy typical takes no such parameter"
expect 2 "lantern without a neighbour file" pcg-sim --policy lantern --draft p.f32 --target q.f32
err_has "asg-build --knn"
expect 2 "--asg with sd" pcg-sim --policy sd --asg x.asg --draft p.f32 --target q.f32
expect 2 "negative beta" pcg-sim --policy ssd --beta -1 --draft p.f32 --target q.f32
expect 2 "zero trials" pcg-sim --policy sd --trials 0 --draft p.f32 --target q.f32

# --- bad files
expect 1 "lengths differ" pcg-sim --policy sd --draft p.f32 --target two.f32
err_has "want the same length"
expect 1 "sum not 1" pcg-sim --policy sd --draft low.f32 --target q.f32
err_has "not 1 within 1e-3"
expect 1 "negative entry" pcg-sim --policy sd --draft neg.f32 --target q.f32
err_has "entry 1"
expect 1 "size not a multiple of 4" pcg-sim --policy sd --draft odd.f32 --target q.f32
err_has "float32"
expect 1 "missing file" pcg-sim --policy sd --draft nope.f32 --target q.f32
err_has "nope.f32"
expect 1 "corrupt ASG" pcg-sim --policy pcg --asg q.f32 --draft p.f32 --target q.f32
err_has "too short"
expect 0 "sum within 1e-3 is normalised" pcg-sim --policy sd --draft near.f32 --target q.f32 --trials 100

# --- output
expect 0 "sd" pcg-sim --policy sd --draft p.f32 --target q.f32 --trials 100000 --seed 7
[ "$(head -n 1 out | cut -f 1)" = accept_rate ] && ok "accept_rate first" || bad "first line: $(head -n 1 out)"
[ "$(tail -n 1 out | cut -f 1)" = mean_trials ] && ok "mean_trials last" || bad "last line: $(tail -n 1 out)"
[ "$(awk -F '\t' '$1 == "token" { s += $3 } END { print s }' out)" = 100000 ] && ok "token counts add up" || bad "token counts"
awk -F '\t' 'NF < 2 || ($1 == "token" && NF != 3) { exit 1 }' out && ok "tab-separated records" || bad "record format"
grep -q '^group' out && bad "group records for sd" || ok "no group records for sd"
# sum min(p, q) = 0.75; its standard error at 1e5 trials is 0.0014
near "$(field accept_rate)" 0.75 0.01 && ok "sd accepts sum min(p, q)" || bad "sd accept_rate $(field accept_rate)"
near "$(awk -F '\t' '$1 == "token" && $2 == 0 { print $3 }' out)" 50000 1000 && ok "sd emits q(0) = 0.5" || bad "token 0 count"
[ "$(field mean_trials)" = 0.000000 ] && ok "no trials for sd" || bad "mean_trials $(field mean_trials)"
cp out sd7
expect 0 "same seed" pcg-sim --policy sd --draft p.f32 --target q.f32 --trials 100000 --seed 7
cmp -s out sd7 && ok "same seed, same output" || bad "same seed differs"
expect 0 "other seed" pcg-sim --policy sd --draft p.f32 --target q.f32 --trials 100000 --seed 8
cmp -s out sd7 && bad "another seed gave the same output" || ok "another seed, another output"
expect 0 "sd, p = q" pcg-sim --policy sd --draft p.f32 --target p.f32 --trials 10000
[ "$(field accept_rate)" = 1.000000 ] && ok "p = q: everything accepted" || bad "p = q: $(field accept_rate)"
expect 0 "ssd beta 0.4" pcg-sim --policy ssd --draft p.f32 --target q.f32 --trials 100000
# sum p min(1, min(1, q/p) + 0.4) = 0.25 + 0.25 + 0.5 * 0.9 = 0.95
near "$(field accept_rate)" 0.95 0.005 && ok "ssd accepts sum p min(1, r + beta)" || bad "ssd $(field accept_rate)"
expect 0 "ssd beta 0 is sd" pcg-sim --policy ssd --beta 0 --draft p.f32 --target q.f32 --trials 100000 --seed 7
cmp -s out sd7 && ok "ssd --beta 0 = sd, draw for draw" || bad "ssd beta 0 differs from sd"
expect 0 "greedy" pcg-sim --policy greedy --draft p.f32 --target q.f32 --trials 1000
[ "$(grep -c '^token' out)" = 1 ] && grep -q '^token	0	1000$' out && ok "greedy emits argmax q" || bad "greedy: $(cat out)"

# --- pcg
expect 0 "pcg without an ASG" pcg-sim --policy pcg --draft p.f32 --target q.f32 --trials 100000
near "$(field accept_rate)" 0.75 0.01 && ok "singletons: pcg accepts as sd" || bad "pcg $(field accept_rate)"
# TV(p, q) = 0.25: 4 trials a rejection
near "$(field mean_trials)" 4 0.15 && ok "mean trials 1 / TV" || bad "mean_trials $(field mean_trials)"
[ "$(awk -F '\t' '$1 == "group" { s += $3 } END { print s }' out)" = 100000 ] && ok "group counts add up" || bad "group counts"
pcg-mkmodel --out tiny >/dev/null
asg-build --embeddings tiny/model.safetensors --rows 0:3 --theta 0 -o one.asg --quiet
[ "$(asg-info --groups one.asg)" = "0: 0 1 2" ] || bad "one.asg is not one group of 3"
expect 0 "pcg, one group" pcg-sim --policy pcg --asg one.asg --draft p.f32 --target q.f32 --trials 1000
[ "$(field accept_rate)" = 1.000000 ] && grep -q '^group	0	1000$' out && ok "one group: all accepted" || bad "one group: $(cat out)"
asg-build --embeddings tiny/model.safetensors --rows 0:2 --theta 0 -o two.asg --quiet
expect 0 "pcg, tokens beyond n" pcg-sim --policy pcg --asg two.asg --draft p.f32 --target q.f32 --trials 1000
# token 2 is beyond the ASG's n = 2: the singleton group numbered M
M=$(asg-info two.asg | sed -n 's/^groups	//p')
t2=$(awk -F '\t' '$1 == "token" && $2 == 2 { print $3 }' out)
grep -q "^group	$M	$t2\$" out && ok "token 2 is the singleton group M = $M" || bad "groups (M = $M): $(cat out)"
expect 0 "pcg, ASG from stdin" sh -c 'pcg-sim --policy pcg --asg - --draft p.f32 --target q.f32 --trials 100 < one.asg'
asg-build --embeddings tiny/model.safetensors --rows 0:5 --theta 0 -o five.asg --quiet
expect 1 "ASG larger than V" pcg-sim --policy pcg --asg five.asg --draft p.f32 --target q.f32
err_has "covers 5 tokens"

# --- typical, topk, lantern: closed forms (tests/unit/test_policy_rules.c has the statistics)
# q = (0.5, 0.25, 0.25): H = 1.0397, alpha exp(-H) = 0.3 * 0.3536 = 0.106; epsilon 0.09
# rules: every token has q > 0.09, so all are accepted
expect 0 "typical, defaults" pcg-sim --policy typical --draft p.f32 --target q.f32 --trials 10000
[ "$(field accept_rate)" = 1.000000 ] && ok "typical: q(x) > min(eps, alpha e^-H) for all x" || bad "typical $(field accept_rate)"
# epsilon 0.3: threshold min(0.3, 0.106) = 0.106: still all; alpha 1: min(0.3, 0.354) = 0.3: only token 0 (p 0.25)
expect 0 "typical, eps 0.3 alpha 1" pcg-sim --policy typical --epsilon 0.3 --alpha 1 --draft p.f32 --target q.f32 --trials 100000
near "$(field accept_rate)" 0.25 0.006 && ok "typical accepts sum p [q > threshold] = 0.25" || bad "typical $(field accept_rate)"
# rejections draw from q: token 0 gets 0.25 + 0.75 * 0.5 = 0.625
near "$(awk -F '\t' '$1 == "token" && $2 == 0 { print $3 }' out)" 62500 1000 && ok "typical: output p a + (1 - A) q" || bad "typical tokens: $(cat out)"
# topk k 1: only token 0 (argmax q), p(0) = 0.25; k 2: tokens 1 and 2 tie at the 2nd value: all in
expect 0 "topk k 1" pcg-sim --policy topk --k 1 --draft p.f32 --target q.f32 --trials 100000
near "$(field accept_rate)" 0.25 0.006 && ok "topk 1 accepts p(argmax q)" || bad "topk $(field accept_rate)"
expect 0 "topk k 2" pcg-sim --policy topk --k 2 --draft p.f32 --target q.f32 --trials 10000
[ "$(field accept_rate)" = 1.000000 ] && ok "topk 2: ties at the k-th value count as in" || bad "topk 2 $(field accept_rate)"
expect 2 "topk k 0" pcg-sim --policy topk --k 0 --draft p.f32 --target q.f32
expect 1 "topk k 2.5" pcg-sim --policy topk --k 2.5 --draft p.f32 --target q.f32
err_has "whole number"
asg-build --embeddings tiny/model.safetensors --rows 0:3 --knn 2 -o nb.asg --quiet
[ "$(asg-info nb.asg | sed -n 's/^groups	//p')" = 3 ] && ok "asg-build --knn: one group per token" || bad "knn: $(asg-info nb.asg)"
expect 2 "--knn with --theta" asg-build --embeddings tiny/model.safetensors --rows 0:3 --knn 2 --theta 0.3 -o x.asg
# p = (0.25, 0.25, 0.5), q = (0.5, 0.25, 0.25): token 2 lacks 0.25, token 0 has 0.25 to spare;
# delta 0.1 moves 0.1: sum min(p, q') = 0.75 + 0.1
expect 0 "lantern delta 0.1" pcg-sim --policy lantern --delta 0.1 --asg nb.asg --draft p.f32 --target q.f32 --trials 100000
near "$(field accept_rate)" 0.85 0.006 && ok "lantern accepts sum min(p, q) + delta moved" || bad "lantern $(field accept_rate)"
# the output is q' = (0.4, 0.25, 0.35): TV 0.1 from q
near "$(awk -F '\t' '$1 == "token" && $2 == 0 { print $3 }' out)" 40000 1000 && ok "lantern: output q', TV delta" || bad "lantern tokens: $(cat out)"
expect 0 "lantern delta 0 is sd" pcg-sim --policy lantern --delta 0 --asg nb.asg --draft p.f32 --target q.f32 --trials 100000
near "$(field accept_rate)" 0.75 0.01 && ok "lantern delta 0 accepts as sd" || bad "lantern 0 $(field accept_rate)"
expect 1 "lantern on groups, not a neighbour file" pcg-sim --policy lantern --asg one.asg --draft p.f32 --target q.f32
err_has "--knn"

finish
