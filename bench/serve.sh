#!/bin/sh
# bench/serve.sh: many listeners at once through the four-process pipeline.
# For each count of clients, that many pcg-synth processes start together,
# each with its own held-out sentence and seed, streaming the audio back
# (-o FILE, the default chunking); one line per count:
#   aggregate speech tokens/s (all tokens / the wall time of the whole wave),
#   request latency p50 / p99, time to first audio p50 / p99, the worst lag
#   of a chunk behind playback (a player that starts at the first chunk;
#   > 0 is an underrun), requests that failed, and the peak RSS of each
#   daemon (VmHWM) after the wave.
# Every wave runs on the same pipeline, one after another, so the ratios
# between counts are measured side by side.
#
# Usage: bench/serve.sh [demo|llasa]
#   demo:  the demo voice, pcg (CLIENTS default "1 2 4 8 32", TOKENS 200)
#   llasa: LLaSA-1B's shape, random weights (MODEL, a directory or GGUF made
#          by pcg-mkmodel --preset llasa-1b), POLICY none, or pcg with a
#          2-layer subset draft and the ASG in ASG (CLIENTS "1 2 4 8",
#          TOKENS 24)
# Environment: THREADS (per model server, default 2), SESSIONS (verifier
#   --sessions, default 32), CLIENTS, TOKENS, POLICY, MODEL, ASG
set -eu
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$root/bin:$root/scripts:$PATH"
what=${1:-demo}
work=$(mktemp -d "${TMPDIR:-/tmp}/pcg-serve.XXXXXX")
export PCG_RUNTIME_DIR="$work/rt"
trap 'pcg-down >/dev/null 2>&1; rm -rf "$work"' EXIT INT TERM
threads=${THREADS:-2}
sessions=${SESSIONS:-32}

# 32 held-out sentences (none is in the demo voice's corpus)
cat >"$work/texts" <<'EOF'
The river was wide and slow under the morning fog.
She counted the boats that came home before dark.
A small bird sang on the fence by the road.
He carried the lamp up the stairs without a sound.
The market opens early on the first day of the week.
Rain fell on the roof all night and into the day.
They planted seven rows of beans behind the house.
The old bridge creaks when the wind comes from the north.
Bring the bread and the cheese to the table, please.
The children ran across the field toward the barn.
A letter arrived with a red seal and no name.
The clock in the hall struck twelve as we sat down.
Her garden was full of roses, mint and thyme.
The ship left the harbour with its sails all set.
We walked along the shore until the tide came in.
The teacher wrote the answer slowly on the board.
A cold wind blew down from the hills in the evening.
The baker sold every loaf before noon.
He mended the net while the others slept.
The mountain road was closed after the storm.
Light the fire and put the kettle on the stove.
Three horses stood quietly in the shade of the oak.
The library keeps its oldest books in the cellar.
She found a silver coin under the stone step.
The soldiers marched past the gate at dawn.
Snow covered the valley for most of the winter.
The doctor came at once when the bell rang.
We heard the train long before we saw it.
The farmer sold his sheep at the autumn fair.
A candle burned in the window of the cottage.
The fishermen sang as they pulled in the nets.
Close the door softly, the baby is asleep.
EOF

case $what in
demo)
	clients=${CLIENTS:-1 2 4 8 32}
	tokens=${TOKENS:-200}
	policy=${POLICY:-pcg}
	pcg-up --threads "$threads" --sessions "$sessions" >/dev/null
	label="demo voice, $policy"
	;;
llasa)
	clients=${CLIENTS:-1 2 4 8}
	tokens=${TOKENS:-24}
	policy=${POLICY:-none}
	model=${MODEL:?MODEL=a LLaSA-1B-shaped model (pcg-mkmodel --preset llasa-1b)}
	if [ "$policy" = none ]; then
		pcg-up --target "$model" --draft-layers 0 --threads "$threads" \
			--sessions "$sessions" >/dev/null
	else
		pcg-up --target "$model" --draft-layers 0,1 ${ASG:+--asg "$ASG"} \
			--threads "$threads" --sessions "$sessions" >/dev/null
	fi
	label="LLaSA-1B shape ($(basename "$model")), $policy"
	;;
*) echo "usage: bench/serve.sh [demo|llasa]" >&2; exit 2 ;;
esac
audio=-o
[ "$what" = llasa ] && audio= # no codec: tokens only, no audio figures

echo "== $label; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $threads threads per server, $tokens tokens per request"
printf '%-7s %10s %8s %8s %8s %8s %8s %6s  %s\n' clients "tokens/s" "lat p50" "lat p99" \
	"ttfa p50" "ttfa p99" "max lag" failed "peak RSS MB (targetd draftd verifier codec-decode)"
# pct FILE P: the P-th percentile (nearest rank) of the numbers in FILE
pct() { sort -g "$1" | awk -v p="$2" '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit }
	i = int(p / 100 * NR + 0.999999); if (i < 1) i = 1; printf "%.3f", v[i] }'; }
for n in $clients; do
	d=$work/c$n
	mkdir -p "$d"
	start=$(date +%s.%N)
	i=0
	pids=
	while [ $i -lt "$n" ]; do
		i=$((i + 1))
		text=$(sed -n "$(( (i - 1) % 32 + 1 ))p" "$work/texts")
		( s=$(date +%s.%N)
		  if pcg-synth --policy "$policy" --seed "$i" --max-tokens "$tokens" \
			${audio:+-o "$d/$i.wav"} "$text" >"$d/$i.out" 2>&1; then
			echo "$(date +%s.%N) $s" >"$d/$i.t"
		  fi ) &
		pids="$pids $!"
	done
	for p in $pids; do wait "$p" || true; done
	end=$(date +%s.%N)
	failed=0
	: >"$d/lat"; : >"$d/ttfa"; : >"$d/lag"; : >"$d/tok"
	i=0
	while [ $i -lt "$n" ]; do
		i=$((i + 1))
		if [ ! -s "$d/$i.t" ] || { [ -n "$audio" ] && [ ! -s "$d/$i.wav" ]; }; then
			failed=$((failed + 1))
			continue
		fi
		awk '{ printf "%.4f\n", $1 - $2 }' "$d/$i.t" >>"$d/lat"
		sed -n 's/^tokens \([0-9]*\) .*/\1/p' "$d/$i.out" >>"$d/tok"
		sed -n 's/^first audio after \([0-9.]*\) s; worst lag behind playback \([-0-9.]*\) s.*/\1 \2/p' \
			"$d/$i.out" | while read -r f l; do echo "$f" >>"$d/ttfa"; echo "$l" >>"$d/lag"; done
	done
	rss=
	for name in targetd draftd verifier codec-decode; do
		pid=$(cat "$PCG_RUNTIME_DIR/$name.pid" 2>/dev/null) || { rss="$rss -"; continue; }
		rss="$rss $(awk '/VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status" 2>/dev/null || echo -)"
	done
	total=$(awk '{ s += $1 } END { print s + 0 }' "$d/tok")
	printf '%-7s %10.1f %8s %8s %8s %8s %8s %6s %s\n' "$n" \
		"$(echo "$total $start $end" | awk '{ print $1 / ($3 - $2) }')" \
		"$(pct "$d/lat" 50)" "$(pct "$d/lat" 99)" "$(pct "$d/ttfa" 50)" "$(pct "$d/ttfa" 99)" \
		"$(sort -g "$d/lag" | tail -n 1)" "$failed" "$rss"
done
