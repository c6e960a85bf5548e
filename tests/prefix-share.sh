#!/bin/sh
# tests/prefix-share.sh: sessions share the start of their prompts
# (lib/serve/modelserver.c, share_prefix). LLaSA's prompt begins with the
# same chat-template header for every request; a new session starts from
# the whole prefill pieces another session (or the last one a client
# dropped) computed with the same tokens, and gets the same bits it would
# compute: the same seed gives the same tokens whether its prompt was
# shared or not, with f32 weights (whose pieces go through OpenBLAS) and
# bf16, for the target alone and for sd with a draft of the target's first
# layer. The servers' last log line counts the prompts that began with
# another's.
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
own_pipeline
A="The river was wide and slow under the morning fog."
B="The river ran wide and cold beside the sleeping town."
for dt in f32 bf16; do
	expect 0 "a LLaSA-shaped model, $dt" pcg-mkmodel --out m-$dt --preset llasa-1b --hidden 64 \
		--layers 2 --heads 4 --kv-heads 2 --ffn 128 --std 0.3 --dtype $dt
	for pol in none sd; do
		# fresh: a pipeline whose servers never saw a prompt
		expect 0 "pcg-up ($dt)" pcg-up --target m-$dt --draft-layers 0 --threads 1 --no-warmup
		expect 0 "$dt $pol: A alone" pcg-synth --policy $pol --lookahead 2 --seed 5 --max-tokens 40 \
			--tokens "$A"
		cp "$T/out" fresh
		expect 0 "$dt $pol: B" pcg-synth --policy $pol --lookahead 2 --seed 6 --max-tokens 40 \
			--tokens "$B"
		expect 0 "$dt $pol: A again, its prompt's start B's" pcg-synth --policy $pol --lookahead 2 \
			--seed 5 --max-tokens 40 --tokens "$A"
		same fresh "$T/out" "$dt $pol: the same tokens, shared or not"
		pcg-down >/dev/null 2>&1
		n=$(sed -n 's/.*; \([0-9]*\) prompts began with another.s$/\1/p' "$PCG_RUNTIME_DIR/targetd.log")
		[ "${n:-0}" -ge 2 ] && ok "$dt $pol: targetd shared $n prompts" ||
			bad "$dt $pol: targetd shared '${n}' prompts: $(tail -n 1 "$PCG_RUNTIME_DIR/targetd.log")"
	done
done
finish
