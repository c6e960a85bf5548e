#!/bin/sh
# tests/cli.sh: pcg-run and pcg-mkmodel as a user drives them: exit codes
# (0 ok, 1 failure, 2 usage), one-line errors that name the problem, no
# partial output files, deterministic models, and the dumped logits' layout.
. "${PCG_ROOT:-.}/tests/shlib"

cd "$T" || exit 1

# --- pcg-mkmodel
expect 2 "mkmodel without --out" pcg-mkmodel
err_has "--out DIR is required"
expect 2 "mkmodel bad dtype" pcg-mkmodel --out m --dtype f8
err_has "--dtype"
expect 2 "mkmodel out-of-range size" pcg-mkmodel --out m --layers 0
err_has "--layers"
expect 1 "mkmodel into an unwritable place" pcg-mkmodel --out /proc/pcg-no-such-dir
expect 0 "mkmodel tiny" pcg-mkmodel --out m1 --seed 3
expect 0 "mkmodel tiny again" pcg-mkmodel --out m2 --seed 3
expect 0 "mkmodel other seed" pcg-mkmodel --out m3 --seed 4
for f in config.json model.safetensors tokenizer.json; do
	cmp -s m1/$f m2/$f && ok "same seed, same $f" || bad "same seed gave a different $f"
done
cmp -s m1/model.safetensors m3/model.safetensors && bad "another seed gave the same weights" || ok "another seed, other weights"
ls m1 | grep -q tmp && bad "temporary file left in the model dir" || ok "no temporary files left"
expect 0 "mkmodel f16 untied" pcg-mkmodel --out m16 --dtype f16 --untied --hidden 48 --heads 6 --kv-heads 3
grep -q '"tie_word_embeddings": false' m16/config.json && ok "untied in config" || bad "untied not in config"

# --- pcg-run
expect 2 "run without --tokens" pcg-run --model m1
expect 2 "run bad token list" pcg-run --model m1 --tokens 1,x,3
err_has "--tokens"
expect 2 "run negative token" pcg-run --model m1 --tokens -1
expect 1 "run token beyond the vocabulary" pcg-run --model m1 --tokens 1,99999
err_has "out of range"
expect 1 "run missing model dir" pcg-run --model nowhere --tokens 1
err_has "nowhere/config.json"
expect 0 "run greedy" pcg-run --model m1 --tokens 1,2,3 --generate 6
[ "$(wc -w <out)" -eq 6 ] && ok "6 ids printed" || bad "want 6 ids: $(cat out)"
cp out gen1
expect 0 "run greedy, one thread" pcg-run --model m1 --tokens 1,2,3 --generate 6 --threads 1
cmp -s out gen1 && ok "thread count does not change the tokens" || bad "1 vs all threads differ"
expect 0 "run next token" pcg-run --model m1 --tokens 1,2,3
[ "$(cat out)" = "$(cut -d' ' -f1 gen1)" ] && ok "next token = first greedy token" || bad "next token"
expect 0 "run f16 untied" pcg-run --model m16 --tokens 4,5 --generate 3
vocab=$(sed -n 's/.*"vocab_size": \([0-9]*\).*/\1/p' m1/config.json)
expect 0 "dump logits" pcg-run --model m1 --tokens 1,2,3,4,5 --dump-logits l.f32
size=$(wc -c <l.f32)
[ "$size" -eq $((5 * vocab * 4)) ] && ok "dump is 5 x $vocab f32" || bad "dump has $size bytes"
expect 0 "dump to stdout" pcg-run --model m1 --tokens 1,2,3,4,5 --dump-logits -
cmp -s out l.f32 && ok "stdout dump equals file dump" || bad "stdout dump differs"
expect 1 "dump into a missing directory" pcg-run --model m1 --tokens 1 --dump-logits no/such/l.f32
[ ! -e no/such/l.f32 ] && ok "no partial file" || bad "partial file left"

# --- bad checkpoints: each gives exit 1 and a message naming the problem
mkdir -p broken
cp m1/config.json m1/tokenizer.json broken/
head -c 100 m1/model.safetensors > broken/model.safetensors
expect 1 "truncated safetensors" pcg-run --model broken --tokens 1
err_has "model.safetensors"
printf 'not json' > broken/config.json
expect 1 "config.json not JSON" pcg-run --model broken --tokens 1
err_has "config.json"
sed 's/"hidden_size": [0-9]*,//' m1/config.json > broken/config.json
cp m1/model.safetensors broken/
expect 1 "config.json without hidden_size" pcg-run --model broken --tokens 1
err_has "hidden_size"
sed 's/"hidden_size": 64/"hidden_size": 96/' m1/config.json > broken/config.json
expect 1 "config.json disagrees with the tensors" pcg-run --model broken --tokens 1
err_has "model.embed_tokens.weight"
sed 's/LlamaForCausalLM/GPT2LMHeadModel/' m1/config.json > broken/config.json
expect 1 "unknown architecture" pcg-run --model broken --tokens 1
err_has "architectures"

# Progress on long steps: a line on a terminal (script(1) gives one), nothing
# when standard error is a file or a pipe, and nothing with --quiet.
expect 0 "mkmodel, not a terminal" pcg-mkmodel --out prog1
[ -s err ] && bad "pcg-mkmodel wrote to a non-terminal: $(cat err)" || ok "no progress off a terminal"
if command -v script >/dev/null 2>&1; then
	script -qec "pcg-mkmodel --out prog2" /dev/null >prog.tty 2>&1
	grep -q "weights 100%" prog.tty && grep -q "of weights in" prog.tty &&
		ok "progress on a terminal" || bad "no progress on a terminal: $(cat -v prog.tty)"
	script -qec "pcg-mkmodel --quiet --out prog3" /dev/null >prog.q 2>&1
	[ -s prog.q ] && bad "--quiet: $(cat -v prog.q)" || ok "--quiet on a terminal: nothing"
	same prog1/model.safetensors prog2/model.safetensors "the same model with a progress line"
else
	echo "SKIP: script(1) missing: progress on a terminal not tested" >&2
fi

# The policies describe themselves (lib/speculate/policy.c's table): pcg-synth --policy
# help lists them without a pipeline, and each is in the man pages that list
# policies.
expect 0 "pcg-synth --policy help" pcg-synth --policy help
n=0
for p in $(awk 'NR > 1 && /^  [^ ]/ && $1 !~ /^(none|mtp-)/ { print $1 }' out); do
	n=$((n + 1))
	for page in pcg-synth.1 pcg-sim.1 verifier.8; do
		grep -q -- "$p" "$PCG_ROOT/man/$page" || bad "man/$page does not list the policy $p"
	done
done
[ "$n" -ge 4 ] && ok "--policy help: $n policies, each in the man pages" || bad "--policy help: $(cat out)"

# the scripts and the daemons say the same release as the programs
rel=$(verifier --version | sed 's/.* //')
for p in pcg-up pcg-down pcg-runtime pcg-eval pcg-httpd; do
	v=$("$p" --version 2>&1)
	[ "$v" = "$p (pcg-tts) $rel" ] || bad "$p --version: $v, want $p (pcg-tts) $rel"
done
v=$("$PCG_ROOT/scripts/demo" --version 2>&1)
[ "$v" = "demo (pcg-tts) $rel" ] && ok "--version on the scripts: $rel" || bad "scripts/demo --version: $v"

finish
