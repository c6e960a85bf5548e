#!/bin/sh
# bench/pipeline-vs-forward.sh: what a user gets through the four processes
# against what the engine measures, side by side in one run: the target
# alone (policy none) through pcg-up and pcg-synth, its steady rate after
# the first token ((tokens - 1) / (whole - first), the prompt's prefill
# apart), against bench-forward's speech-range decode at the same threads
# over the same positions (from the prompt's length, TOKENS steps), run
# right after each utterance, so that each pair sees the same minute of a
# machine that drifts: the median of the pairs' ratios (and their range),
# the medians and the best of each side.
#
# Usage: bench/pipeline-vs-forward.sh MODEL [MODEL...]   (a directory or a GGUF file)
# Environment: THREADS (per server; default: pcg-up's choice for the
#   model; bench-forward runs with targetd's), TOKENS (default 200), REPS
#   (utterances, default 5), CTX (bench-forward's first position; default
#   the prompt's length as the model's tokenizer makes it, pcg-tokenize
#   --llasa-prompt, or a phoneme voice's, pcg-phonemize --tokens),
#   PASSIVE=1 (also the pipeline with the servers' OpenMP threads sleeping
#   at once, OMP_WAIT_POLICY=PASSIVE, the old default), RUN_TOKENS (the
#   verifier's PCG_RUN_TOKENS: 1 for one token a request), VERBOSE=1 (each
#   pair on standard error). A phoneme voice feeds its phoneme tokens into
#   the context at their frames, work bench-forward's plain decode does not
#   do: it is also compared with bench-forward --phonemes (the voice's share
#   of phoneme tokens a frame over the first TOKENS, pcg-phonemize).
set -eu
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PWD/scripts:$PATH"
tokens=${TOKENS:-200}
reps=${REPS:-5}
[ -n "${RUN_TOKENS:-}" ] && export PCG_RUN_TOKENS="$RUN_TOKENS"
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
# bench-forward's speech-range decode at the pipeline's positions, tokens/s
# (a phoneme voice: with its phoneme tokens, PH a frame, as a second figure)
fwd() {
	bench-forward --model "$1" --threads "${2:-2}" --ctx "$3" --steps "$tokens" --prefill 0 \
		--block 2 ${4:+--phonemes "$4"} 2>&1 | awk '
		/^decode speech range \(/ { for (i = 1; i <= NF; i++) if ($i == "tokens/s") a = $(i - 1) }
		/^decode speech range, / { for (i = 1; i <= NF; i++) if ($i == "tokens/s") b = $(i - 1) }
		END { print a, b }'
}
# pipe MODEL CTX [PH]: REPS lines, one an utterance, each paired with a run of
# bench-forward right after it (the machine drifts between minutes: a pair
# sees the same minute): "RATE COMPUTE_MS REST_MS FORWARD_RATE [VOICE_RATE]", the
# steady rate through the pipeline after the first token, a token's time in
# targetd and in the rest of the round after it.
pipe() {
	pcg-up --target "$1" ${THREADS:+--threads "$THREADS"} --draft-layers 0 --no-warmup >/dev/null
	# the threads targetd runs with (pcg-up's choice), for bench-forward
	tr '\0' ' ' <"/proc/$(cat "$rt/targetd.pid")/cmdline" |
		sed -n 's/.*--threads \([0-9]*\).*/\1/p' >"$rt/threads"
	t=$(cat "$rt/threads")
	pcg-synth --policy none --seed 9 --max-tokens 8 "Warm up." >/dev/null 2>&1
	# the first token alone (the prompt's prefill): its seconds, the
	# target server's compute and the rest, the median of REPS, taken
	# from each whole's
	i=0
	while [ $i -lt "$reps" ]; do
		i=$((i + 1))
		pcg-synth --policy none --seed "$i" --max-tokens 1 "$text" 2>&1 >/dev/null | awk "$split"
	done | sort -g -k2 | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)] }' >"$rt/first"
	first=$(cat "$rt/first")
	i=0
	while [ $i -lt "$reps" ]; do
		i=$((i + 1))
		p=$(pcg-synth --policy none --seed "$i" --max-tokens "$tokens" "$text" 2>&1 >/dev/null |
			awk "$split" | awk -v f="$first" '{ split(f, a, " ")
				printf "%.2f %.3f %.3f\n", ($1 - 1) / ($2 - a[2]), 1000 * ($3 - a[3]) / ($1 - 1),
					1000 * ($4 - a[4]) / ($1 - 1) }')
		echo "$p $(fwd "$1" "$t" "$2" "${3:-}")"
	done
	pcg-down >/dev/null
}
for m in "$@"; do
	# bench-forward from the prompt's length, as the tokenizer makes it
	# (a LLaSA checkpoint; a phoneme voice's is espeak-ng's)
	mctx=${CTX:-}
	if [ -z "$mctx" ]; then
		tk=$m
		[ -d "$m" ] && tk=$m/tokenizer.json
		if [ -d "$m" ] && [ -f "$m/voice.json" ]; then # the speaker and phonemes
			mctx=$(pcg-tokenize --tokenizer "$tk" "$(pcg-phonemize --voice-file \
				"$m/voice.json" --tokens "$text")" 2>/dev/null | wc -w)
		else
			mctx=$(pcg-tokenize --tokenizer "$tk" --llasa-prompt --text "$text" 2>/dev/null | wc -w)
		fi
		[ "$mctx" -gt 0 ] || mctx=60
	fi
	# a phoneme voice feeds its phoneme tokens (2 a phoneme with next-
	# phoneme tokens) at their frames: per frame, over the first TOKENS
	ph=
	if [ -d "$m" ] && [ -f "$m/voice.json" ]; then
		per=1
		grep -q '"next_phoneme": *true' "$m/voice.json" && per=2
		ph=$(pcg-phonemize --voice-file "$m/voice.json" "$text" 2>/dev/null |
			awk -v k="$tokens" -v per="$per" '!/^#/ && $1 < k { n++ } END { printf "%.3f", n * per / k }')
	fi
	pipe "$m" "$mctx" "$ph" >"$rt/pairs"
	[ "${VERBOSE:-0}" = 1 ] && sed 's/^/pair (tokens\/s, targetd ms, rest ms, bench-forward tokens\/s[, with phoneme tokens]): /' "$rt/pairs" >&2
	t=$(cat "$rt/threads")
	old=-
	[ "${PASSIVE:-0}" = 1 ] && old=$(OMP_WAIT_POLICY=PASSIVE pipe "$m" "$mctx" "" |
		awk '{ print $1 / $4 }' | sort -g | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)] }')
	# per pair the pipeline's rate over bench-forward's; the median pair,
	# the best of each side, and the fastest utterance's round split: the
	# target server's compute a token (its receive to its reply: the
	# forward pass, the distribution, packing) and the rest of the round
	# (the verifier's queue and the messaging)
	med() { sort -g | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)], l[1], l[NR] }'; }
	rm=$(awk '{ print $1 / $4 }' "$rt/pairs" | med)
	pm=$(awk '{ print $1 }' "$rt/pairs" | med)
	fm=$(awk '{ print $4 }' "$rt/pairs" | med)
	vm=
	[ -n "$ph" ] && vm=$(awk '{ print $1 / $5 }' "$rt/pairs" | med)
	awk -v m="${m##*/}" -v t="$( [ "${t:-0}" = 0 ] && echo "$(nproc) (all)" || echo "$t")" \
		-v o="$old" -v x="$mctx" -v k="$tokens" -v rm="$rm" -v pm="$pm" -v fm="$fm" \
		-v vm="$vm" -v ph="$ph" '{
		if ($1 > bp) { bp = $1; c = $2; q = $3 }
		if ($4 > bf) bf = $4
	} END {
		split(rm, r, " "); split(pm, p, " "); split(fm, f, " ")
		printf "%-16s %s threads, positions %d-%d, %d pairs: pipeline / bench-forward, median pair %.2fx (%.2fx-%.2fx); medians %.2f / %.2f tokens/s; best %.2f / %.2f = %.2fx; fastest utterance: a token %.3f ms in targetd + %.3f ms queue and messaging%s\n",
			m, t, x, x + k, NR, r[1], r[2], r[3], p[1], f[1], bp, bf, bp / bf, c, q,
			o == "-" ? "" : sprintf(" (servers sleeping at once: median pair %.2fx)", o)
		if (vm != "") {
			split(vm, v, " ")
			printf "%-16s against bench-forward with the voice'"'"'s phoneme tokens (%s a frame): median pair %.2fx (%.2fx-%.2fx)\n",
				m, ph, v[1], v[2], v[3]
		} }' "$rt/pairs"
done
