#!/bin/sh
# tests/mtp.sh: pcg-mtp as a user drives it: exit codes (0 ok, 1 failure,
# 2 usage), the output format (the target, then one line per head, with the
# offset each predicts), zero heads repeating the target exactly, the same
# file from the same seed, and bad heads files named in the error.
. "${PCG_ROOT:-.}/tests/shlib"

cd "$T" || exit 1

# --- usage
expect 2 "no arguments" pcg-mtp
err_has "--model is required"
expect 2 "neither --tokens nor --init" pcg-mtp --model m
err_has "one of --tokens and --init"
expect 2 "both --tokens and --init" pcg-mtp --model m --tokens 1 --init 2
expect 2 "bad tokens" pcg-mtp --model m --tokens 1,x
err_has "--tokens"
expect 2 "bad rows" pcg-mtp --model m --tokens 1 --rows 5:3
err_has "--rows"
expect 2 "bad dtype" pcg-mtp --model m --init 2 --dtype f64
err_has "--dtype"
expect 2 "too many heads" pcg-mtp --model m --init 17

# --- a model with zero heads: every head repeats the target (h + SiLU(0) = h)
expect 0 "make a model" pcg-mkmodel --out m --seed 3 --std 0.3
expect 0 "zero heads" pcg-mtp --model m --init 3
[ -f m/mtp.safetensors ] && ok "written into the model directory" || bad "no m/mtp.safetensors"
expect 0 "top-k of zero heads" pcg-mtp --model m --tokens 1,2,3 --top-k 4
[ "$(wc -l <out)" -eq 4 ] && ok "4 lines" || bad "$(wc -l <out) lines, want 4"
awk 'NR == 1 && $1 == "target" && $2 == "+1" && NF == 6 {n++}
     NR > 1 && $1 == "mtp." NR - 2 && $2 == "+" NR {n++} END {exit n != 4}' out &&
	ok "labels and offsets" || bad "labels and offsets: $(cat out)"
cut -d' ' -f3- out | uniq | wc -l | grep -qx 1 && ok "zero heads equal the target" ||
	bad "zero heads differ from the target: $(cat out)"

# --- random heads: the same seed gives the same file, another seed another
expect 0 "seeded heads" pcg-mtp --model m --init 2 --std 0.2 --seed 7 -o a.safetensors
expect 0 "same seed" pcg-mtp --model m --init 2 --std 0.2 --seed 7 -o b.safetensors
same a.safetensors b.safetensors "same seed, same file"
expect 0 "other seed" pcg-mtp --model m --init 2 --std 0.2 --seed 8 -o c.safetensors
cmp -s a.safetensors c.safetensors && bad "other seed, same file" || ok "other seed, other file"
expect 0 "bf16 heads" pcg-mtp --model m --init 2 --std 0.2 --dtype bf16 -o h16.safetensors
expect 0 "rows" pcg-mtp --model m --heads h16.safetensors --tokens 1,2,3 --top-k 2 --rows 10:20,3:4
awk '{for (i = 3; i <= NF; i++) {split($i, a, ":"); if (!(a[1] == 3 || (a[1] >= 10 && a[1] < 20))) exit 1}}' out &&
	ok "ids within the rows" || bad "ids outside the rows: $(cat out)"

# --- failures name the file and the problem
expect 1 "rows beyond the vocabulary" pcg-mtp --model m --tokens 1 --rows 5:99999999
err_has "vocabulary"
expect 1 "no heads file" pcg-mtp --model m --heads nothere.safetensors --tokens 1
err_has "nothere.safetensors"
mkdir -p other
expect 0 "model of another width" pcg-mkmodel --out other --hidden 32 --heads 4 --kv-heads 2
expect 0 "heads for it" pcg-mtp --model other --init 1
expect 1 "heads of another width" pcg-mtp --model m --heads other --tokens 1
err_has "tensor 'mtp.0.weight': shape [32, 32], the config wants"
printf 'not a safetensors file' >junk.safetensors
expect 1 "junk file" pcg-mtp --model m --heads junk.safetensors --tokens 1
err_has "junk.safetensors"
expect 1 "fixture heads on the wrong model" pcg-mtp --model m --heads "$ROOT/tests/fixtures/mtp/tied-f16" --tokens 1
err_has "shape [48, 48]"

finish
