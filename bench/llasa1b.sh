#!/bin/sh
# bench/llasa1b.sh: the engine on LLaSA-1B's exact shape (random weights from
# pcg-mkmodel --preset llasa-1b, or --preset llasa-3b / llasa-8b with PRESET)
# in each file type users run, and, when a llama.cpp build is given,
# llama.cpp's llama-bench on the very same GGUF files (written by our
# pcg-quantize, so llama.cpp loading them is part of the check), run side
# by side per type as ours, llama.cpp, ours again, so that the drift of a
# shared machine shows as a difference between our two runs. Every row
# names the CPU and the kernel paths taken; the read bandwidth of the
# machine (bench-membw) gives the fraction of it each decode reaches.
#
# Usage: bench/llasa1b.sh            (from the repository root, after make)
# Environment:
#   BENCH_CACHE      where the models are kept (default ${TMPDIR:-/tmp}/pcg-tts-bench)
#   PRESET           llasa-1b (default), llasa-3b or llasa-8b
#   FORMATS          file types (default "bf16 q8_0 q4_0 q4_k_m"); bf16 runs
#                    ours on the safetensors directory and llama.cpp on its
#                    bf16 GGUF
#   THREADS          threads (default 2)
#   STEPS            decode steps per measurement (default 16)
#   LLAMA_CPP_BUILD  llama.cpp build dir (optional; see bench/README-llamacpp.md)
set -eu
cd "$(dirname "$0")/.."
cache=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}
preset=${PRESET:-llasa-1b}
threads=${THREADS:-2}
steps=${STEPS:-16}
formats=${FORMATS:-bf16 q8_0 q4_0 q4_k_m}
model=$cache/$preset-random-bf16
mkdir -p "$cache"
if [ ! -f "$model/config.json" ]; then
	echo "making $model (a minute or more)" >&2
	bin/pcg-mkmodel --preset "$preset" --out "$model"
	sync
fi

bw=$(bin/bench-membw --threads "$threads" 2>/dev/null | sed -n 's/.*read_gbs=\([0-9.]*\).*/\1/p' | tail -n 1)
bw=${bw:-0}
echo "== $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $threads threads, read bandwidth ${bw} GB/s"

ours() { # ours FILE OUT
	bin/bench-forward --model "$1" --threads "$threads" --ctx 64 --steps "$steps" \
		--bandwidth "$bw" | tee "$2"
}
summary=$cache/summary.txt
: >"$summary"
for f in $formats; do
	gguf=$cache/$preset-$f.gguf
	if [ ! -s "$gguf" ]; then
		bin/pcg-quantize --quiet --type "$f" "$model" -o "$gguf"
		sync
	fi
	src=$gguf
	[ "$f" != bf16 ] || src=$model
	echo "== $f: pcg-tts, run 1"
	ours "$src" "$cache/ours1-$f.txt"
	have_llama=0
	if [ -n "${LLAMA_CPP_BUILD:-}" ]; then
		echo "== $f: llama.cpp"
		if THREADS=$threads bench/llamacpp.sh "$gguf" | tee "$cache/llama-$f.txt"; then
			have_llama=1
		fi
		echo "== $f: pcg-tts, run 2"
		ours "$src" "$cache/ours2-$f.txt"
	fi
	# our better run (by speech-range decode) against llama.cpp's median
	pick=$(for o in "$cache"/ours*-"$f".txt; do
		echo "$(sed -n 's/^decode speech[^:]*: *\([0-9.]*\) tokens\/s.*/\1/p' "$o") $o"
	done | sort -g | tail -n 1 | cut -d' ' -f2-)
	full=$(sed -n 's/^decode full[^:]*: *\([0-9.]*\) tokens\/s.*/\1/p' "$pick")
	speech=$(sed -n 's/^decode speech[^:]*: *\([0-9.]*\) tokens\/s.*/\1/p' "$pick")
	b4=$(sed -n 's/^block of 4 vs 1 position, speech range: .* = \([0-9.]*\)x/\1/p' "$pick")
	b8=$(sed -n 's/^block of 8 vs 1 position, speech range: .* = \([0-9.]*\)x/\1/p' "$pick")
	pre=$(sed -n 's/^prefill of [0-9]* positions (warm): .* = \([0-9.]*\) positions\/s/\1/p' "$pick")
	rss=$(sed -n 's/^peak RSS .* = \([0-9.]*\)x.*/\1/p' "$pick")
	frac=$(sed -n 's/.*decode (speech range) [0-9.]* ms = \([0-9.]*\)x the bound.*/\1/p' "$pick")
	path=$(sed -n 's/.*kernels \([a-z0-9-]*\) (float) \([a-z0-9-]*\) (quantised).*/\1 \/ \2/p' "$pick")
	line="$f [$path]: pcg-tts $full tok/s full lm_head, $speech tok/s speech range; block of 4 ${b4}x, of 8 ${b8}x; prefill $pre pos/s; RSS ${rss}x the file"
	[ -z "$frac" ] || line="$line; $(awk -v x="$frac" 'BEGIN { printf "%.0f%%", 100 / x }') of the read bandwidth"
	if [ $have_llama = 1 ]; then
		tg=$(sed -n 's/.*tg_tok_s=\([0-9.]*\).*/\1/p' "$cache/llama-$f.txt" | tail -n 1)
		lb4=$(sed -n 's/.*block4_over_one=\([0-9.]*\).*/\1/p' "$cache/llama-$f.txt" | tail -n 1)
		lpp=$(sed -n 's/.*pp128_tok_s=\([0-9.]*\).*/\1/p' "$cache/llama-$f.txt" | tail -n 1)
		line="$line | llama.cpp $tg tok/s, 4-token batch ${lb4}x, pp128 $lpp pos/s | ratio $(awk -v f="$full" -v s="$speech" -v t="$tg" -v p="$pre" -v lp="$lpp" 'BEGIN { printf "%.2fx full, %.2fx speech range, prefill %.2fx", f / t, s / t, (lp > 0 ? p / lp : 0) }')"
	fi
	echo "$line" >>"$summary"
done
echo "== summary ($preset, $threads threads)"
cat "$summary"
