#!/bin/sh
# bench/pipeline-vs-forward.sh: what a user gets through the four processes
# against what the engine measures, side by side in one run: the target
# alone (policy none) through pcg-up and pcg-synth, its steady rate after
# the first token ((tokens - 1) / (whole - first), the prompt's prefill
# apart), against bench-forward's speech-range decode at the same threads
# and about the mean context of the utterance (the median of three
# utterances); then the same pipeline with
# the servers' OpenMP threads sleeping at once (OMP_WAIT_POLICY=PASSIVE, the
# old default) for comparison.
#
# Usage: bench/pipeline-vs-forward.sh MODEL [MODEL...]   (a directory or a GGUF file)
# Environment: THREADS (per server; default: pcg-up's choice for the
#   model; bench-forward runs with targetd's), TOKENS (default 200), CTX
#   (bench-forward's context; default the prompt's length as the model's
#   tokenizer makes it, pcg-tokenize --llasa-prompt, or a phoneme voice's,
#   pcg-phonemize --tokens, and half the utterance)
set -eu
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PWD/scripts:$PATH"
tokens=${TOKENS:-200}
ctx=${CTX:-$((60 + tokens / 2))}
rt=$(mktemp -d "${TMPDIR:-/tmp}/pcg-bench-pvf.XXXXXX")
export PCG_RUNTIME_DIR="$rt"
trap 'pcg-down >/dev/null 2>&1; rm -rf "$rt"' EXIT INT TERM
# long enough for a phoneme voice, whose length is espeak-ng's, to reach TOKENS
text="The quick brown fox jumps over the lazy dog, twice. Then the king spoke to the people, and the people listened until the evening came."
echo "== $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs, load $(cut -d ' ' -f 1 /proc/loadavg); $tokens tokens"

# pcg-synth's statistics as "TOKENS SECONDS TARGETD_COMPUTE_S REST_S"
split='/^tokens / { tok = $2; for (i = 1; i <= NF; i++) if ($i == "in") sec = $(i + 1) }
	/^time: / { for (i = 1; i <= NF; i++) { if ($i == "computing") c = $(i + 1); if ($i == "queue") q = $(i + 3) } }
	END { print tok, sec, c, q }'
# pipe MODEL: one line, the steady rate through the pipeline after the
# first token, and a token's time in targetd and in the rest of the round
# after it, the median of three utterances.
pipe() {
	pcg-up --target "$1" ${THREADS:+--threads "$THREADS"} --draft-layers 0 --no-warmup >/dev/null
	# the threads targetd runs with (pcg-up's choice), for bench-forward
	tr '\0' ' ' <"/proc/$(cat "$rt/targetd.pid")/cmdline" |
		sed -n 's/.*--threads \([0-9]*\).*/\1/p' >"$rt/threads"
	pcg-synth --policy none --seed 9 --max-tokens 8 "Warm up." >/dev/null 2>&1
	for i in 1 2 3; do
		# the first token alone (the prompt's prefill): its seconds, the
		# target server's compute and the rest, taken from the whole's
		first=$(pcg-synth --policy none --seed 1 --max-tokens 1 "$text" 2>&1 >/dev/null | awk "$split")
		pcg-synth --policy none --seed 1 --max-tokens "$tokens" "$text" 2>&1 >/dev/null |
			awk "$split" | awk -v f="$first" '{ split(f, a, " ")
				printf "%.2f %.2f %.2f\n", ($1 - 1) / ($2 - a[2]), 1000 * ($3 - a[3]) / ($1 - 1),
					1000 * ($4 - a[4]) / ($1 - 1) }'
	done | sort -g | sed -n 2p
	pcg-down >/dev/null
}
for m in "$@"; do
	new=$(pipe "$m")
	old=$(OMP_WAIT_POLICY=PASSIVE pipe "$m" | cut -d' ' -f1)
	t=$(cat "$rt/threads")
	# bench-forward at the utterance's mean context: its prompt as the
	# tokenizer makes it (a LLaSA checkpoint; a phoneme voice's is espeak-ng's)
	mctx=$ctx
	if [ -z "${CTX:-}" ]; then
		tk=$m
		[ -d "$m" ] && tk=$m/tokenizer.json
		np=0
		if [ -d "$m" ] && [ -f "$m/voice.json" ]; then # the speaker and phonemes
			np=$(pcg-tokenize --tokenizer "$tk" "$(pcg-phonemize --voice-file \
				"$m/voice.json" --tokens "$text")" 2>/dev/null | wc -w)
		else
			np=$(pcg-tokenize --tokenizer "$tk" --llasa-prompt --text "$text" 2>/dev/null | wc -w)
		fi
		[ "$np" -gt 0 ] && mctx=$((np + tokens / 2))
	fi
	fwd=$(bench-forward --model "$m" --threads "${t:-2}" --ctx "$mctx" --steps 32 2>&1 |
		sed -n 's/^decode speech range[^:]*: *\([0-9.]*\) tokens\/s.*/\1/p')
	# the pipeline's round split: the target server's compute a token (its
	# receive to its reply: the forward pass, the distribution, packing) and
	# the rest of the round (the verifier's queue and the messaging)
	set -- $new
	awk -v m="${m##*/}" -v t="$( [ "${t:-0}" = 0 ] && echo "$(nproc) (all)" || echo "$t")" -v f="$fwd" -v n="$1" -v c="$2" -v q="$3" -v o="$old" -v x="$mctx" 'BEGIN {
		printf "%-28s %s threads, ctx %s: bench-forward %7.2f tokens/s (%.1f ms); pipeline %7.2f = %.2fx: a token %.1f ms in targetd + %.1f ms queue and messaging (servers sleeping at once: %7.2f = %.2fx)\n",
			m, t, x, f, 1000 / f, n, n / f, c, q, o, o / f }'
done
