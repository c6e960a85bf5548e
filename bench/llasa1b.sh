#!/bin/sh
# bench/llasa1b.sh: the engine on LLaSA-1B's exact shape (random bf16 weights
# from pcg-mkmodel --preset llasa-1b, 2.74 GB), and, when a llama.cpp build is
# given, llama.cpp's llama-bench on a GGUF of the same shape and dtype, run
# side by side as ours, llama.cpp, ours again, so that drift of a shared
# machine shows up as a difference between our two runs.
#
# Usage: bench/llasa1b.sh            (from the repository root, after make)
# Environment:
#   BENCH_CACHE      where the 2.74 GB model is kept (default ${TMPDIR:-/tmp}/pcg-tts-bench)
#   THREADS          threads (default 2)
#   LLAMA_CPP_BUILD  llama.cpp build dir (optional; see bench/README-llamacpp.md)
#   LLAMACPP_GGUF    its model (optional; made by bench/make-gguf.py otherwise)
set -eu
cd "$(dirname "$0")/.."
cache=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}
threads=${THREADS:-2}
model=$cache/llasa-1b-random-bf16
if [ ! -f "$model/config.json" ]; then
	mkdir -p "$cache"
	echo "making $model (about 2.74 GB, a minute or two)" >&2
	bin/pcg-mkmodel --preset llasa-1b --out "$model"
	sync
fi

ours() {
	bin/bench-forward --model "$model" --threads "$threads" --ctx 64 --steps 16 | tee "$1"
}
echo "== pcg-tts, run 1"
ours "$cache/ours1.txt"
have_llama=0
if [ -n "${LLAMA_CPP_BUILD:-}" ]; then
	echo "== llama.cpp"
	if THREADS=$threads bench/llamacpp.sh ${LLAMACPP_GGUF:+"$LLAMACPP_GGUF"} | tee "$cache/llama.txt"; then
		have_llama=1
	fi
	echo "== pcg-tts, run 2"
	ours "$cache/ours2.txt"
fi

# Summary: our best of the runs against llama.cpp's median.
best() { sed -n "s/^$1[^:]*: *\([0-9.]*\) tokens\/s.*/\1/p" "$cache"/ours*.txt | sort -g | tail -n 1; }
full=$(best "decode full")
speech=$(best "decode speech")
echo "== summary ($threads threads)"
echo "pcg-tts decode: $full tokens/s full lm_head, $speech tokens/s speech range only"
grep -h "^block of" "$cache"/ours*.txt | sed 's/^/pcg-tts /'
if [ $have_llama = 1 ]; then
	tg=$(sed -n 's/.*tg_tok_s=\([0-9.]*\).*/\1/p' "$cache/llama.txt" | tail -n 1)
	b4=$(sed -n 's/.*block4_over_one=\([0-9.]*\).*/\1/p' "$cache/llama.txt" | tail -n 1)
	echo "llama.cpp decode: $tg tokens/s; its 4-token block (logits of the last position only) = ${b4}x one token"
	awk -v f="$full" -v s="$speech" -v t="$tg" 'BEGIN {
		printf "ratio pcg-tts / llama.cpp: %.2fx with the full lm_head, %.2fx with the speech range\n", f / t, s / t }'
fi
