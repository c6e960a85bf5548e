#!/bin/sh
# tests/llasa-plus.sh: a Llasa+ checkpoint in its released layout (the
# llasa_plus folder beside Llasa-1B's config.json and tokenizer.json;
# pcg-mkmodel --llasa-plus makes one at a small size) through the pipeline:
# pcg-up finds the heads by itself, targetd serves 2 heads, and the heads
# draft under every verification rule (mtp-sd, mtp-pcg exact, mtp-topk
# Llasa+'s own lossy rule, mtp-viterbi); the same seed gives the same tokens.
# pcg-quantize writes the heads into a GGUF file (man 5 pcg-gguf): pcg-mtp
# and targetd find them there, and mtp-pcg runs on the quantised target.
set -u
T=${TEST_TMP:-$(mktemp -d)}
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
export PCG_RUNTIME_DIR="$T/rt"
trap 'pcg-down >/dev/null 2>&1' EXIT INT TERM

expect 0 "a Llasa+ checkpoint" pcg-mkmodel --out Llasa-1B --preset llasa-1b --hidden 64 \
	--layers 2 --heads 4 --kv-heads 2 --ffn 128 --std 0.3 --llasa-plus
[ -f Llasa-1B/llasa_plus/model.safetensors ] && [ ! -f Llasa-1B/model.safetensors ] &&
	ok "llasa_plus/model.safetensors beside config.json" || bad "layout: $(ls -R Llasa-1B)"
expect 0 "pcg-mtp prints both heads" pcg-mtp --model Llasa-1B --tokens 1,2,3 --top-k 2
awk 'NR == 2 && $1 == "mtp_1" && $2 == "+2" {n++} NR == 3 && $1 == "mtp_2" && $2 == "+3" {n++}
     END {exit n != 2}' out && ok "mtp_1 +2, mtp_2 +3" || bad "pcg-mtp: $(cat out)"
expect 0 "asg-build reads the backbone under llm." asg-build --model Llasa-1B -o Llasa-1B/asg
awk 'BEGIN {srand(5); for (i = 0; i < 4000; i++) print int(rand() * 64) * 1024 + int(rand() * 4)}' \
	>codes.txt
expect 0 "a transition matrix" tm-build -n 65536 --quiet -o Llasa-1B/tm codes.txt
expect 0 "pcg-up --target Llasa-1B" pcg-up --target Llasa-1B --draft-layers 0 --threads 1
grep -q "2 MTP heads" "$PCG_RUNTIME_DIR/targetd.log" && ok "targetd serves 2 MTP heads" ||
	bad "targetd: $(cat "$PCG_RUNTIME_DIR/targetd.log")"
for pol in mtp-sd mtp-pcg mtp-topk mtp-viterbi; do
	expect 0 "$pol" pcg-synth --policy "$pol" --lookahead 2 --seed 3 --max-tokens 40 --tokens \
		"Hello from Llasa plus."
	n=$(tail -n 1 out | wc -w | tr -d ' ')
	[ "$n" -ge 1 ] && ok "$pol: $n tokens" || bad "$pol: no tokens"
	tail -n 1 out >"$pol.tok"
done
expect 0 "mtp-sd again" pcg-synth --policy mtp-sd --lookahead 2 --seed 3 --max-tokens 40 --tokens \
	"Hello from Llasa plus."
tail -n 1 out >again.tok
same mtp-sd.tok again.tok "same seed, same tokens"
expect 1 "a third head" pcg-synth --policy mtp-sd --lookahead 3 --max-tokens 8 "Hello."
err_has "the model has 2 (Llasa+)"
expect 0 "pcg-down" pcg-down

expect 0 "pcg-quantize a Llasa+ checkpoint" pcg-quantize --type q8_0 Llasa-1B -o lp-q8_0.gguf
err_has "2 MTP heads"
expect 0 "pcg-mtp prints both heads of the GGUF file" pcg-mtp --model lp-q8_0.gguf --tokens 1,2,3 \
	--top-k 2
awk 'NR == 2 && $1 == "mtp_1" {n++} NR == 3 && $1 == "mtp_2" {n++} END {exit n != 2}' out &&
	ok "mtp_1, mtp_2 from the GGUF file" || bad "pcg-mtp: $(cat out)"
export PCG_RUNTIME_DIR="$T/rt-gguf"
expect 0 "pcg-up --target lp-q8_0.gguf" pcg-up --target lp-q8_0.gguf --draft-layers 0 \
	--asg Llasa-1B/asg --threads 1
grep -q "2 MTP heads" "$PCG_RUNTIME_DIR/targetd.log" && ok "targetd serves the GGUF file's 2 heads" ||
	bad "targetd: $(cat "$PCG_RUNTIME_DIR/targetd.log")"
expect 0 "mtp-pcg on the quantised target" pcg-synth --policy mtp-pcg --lookahead 2 --seed 3 \
	--max-tokens 40 --tokens "Hello from Llasa plus."
n=$(tail -n 1 out | wc -w | tr -d ' ')
[ "$n" -ge 1 ] && ok "mtp-pcg on lp-q8_0.gguf: $n tokens" || bad "mtp-pcg on the GGUF file: no tokens"
expect 0 "pcg-down" pcg-down
trap - EXIT INT TERM
finish
