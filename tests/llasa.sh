#!/bin/sh
# tests/llasa.sh: README's "LLaSA from Hugging Face" path, command by command,
# on a model of LLaSA's exact layout (the Llama 3 text vocabulary, the LLaSA
# tags, 65,536 speech tokens: 193,800 ids; its prompt) made small and random
# by pcg-mkmodel, with the X-codec2 fixture (FSQ [4]*8: 65,536 codes, 16 kHz)
# as the codec: asg-build of the speech embeddings, pcg-up with a layer draft
# and the codec, pcg-synth with pcg to a file and with the target alone
# streamed through sox, pcg-down.
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
own_pipeline
XC=$ROOT/tests/fixtures/xcodec2/tiny

expect 0 "a LLaSA-layout model" pcg-mkmodel --out Llasa-1B --preset llasa-1b --hidden 64 --layers 2 \
	--heads 4 --kv-heads 2 --ffn 128 --std 0.3
grep -q '"vocab_size": 193800' Llasa-1B/config.json && ok "LLaSA's vocabulary of 193,800" ||
	bad "vocab: $(grep vocab_size Llasa-1B/config.json)"
expect 0 "asg-build --model Llasa-1B -o Llasa-1B/asg" asg-build --model Llasa-1B -o Llasa-1B/asg
grep -q "groups" err && ok "asg-build reports its groups" || true
expect 0 "pcg-up --target Llasa-1B --draft-layers 0,1 --codec-weights xcodec2" \
	pcg-up --target Llasa-1B --draft-layers 0,1 --codec-weights "$XC" --threads 1
out_has "speech 65536 tokens, asg"
expect 0 "pcg-synth --policy pcg -o hello.wav" pcg-synth --policy pcg --max-tokens 60 -o hello.wav \
	"Hello from LLaSA."
n=$(sed -n 's/^tokens \([0-9]*\) .*/\1/p' err)
[ -n "$n" ] && [ "$(od -An -tu4 -j40 -N4 hello.wav | tr -d ' ')" = $((n * 320 * 2)) ] &&
	ok "hello.wav: $n codes x 320 samples" || bad "hello.wav for $n tokens"
pcg-synth --policy none --max-tokens 60 -o - "Hello from LLaSA." 2>plain.err | sox -t wav - plain.flac \
	2>sox.err
[ -s plain.flac ] && [ "$(soxi -r plain.flac)" = 16000 ] && ok "the target alone, streamed to sox" ||
	bad "plain.flac: $(cat plain.err sox.err)"
expect 0 "pcg-down" pcg-down
trap - EXIT INT TERM
finish
