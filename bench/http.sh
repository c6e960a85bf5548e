#!/bin/sh
# bench/http.sh: what the HTTP front end costs. The same sentences
# (bench/table1-sentences.tsv: id, speaker, text), seeds and speakers go
# through one pipeline on the demo voice twice: with pcg-synth (-o - into a
# file: the WAV streamed as it comes, as curl writes it; its default
# chunking) and with curl against pcg-httpd (POST
# /v1/audio/speech, FORMAT, default wav: the audio resampled to 24 kHz,
# the header, the chunked response), 1 and 8 clients at once, the two
# kinds taking turns ROUNDS times so that both see the same machine.
# Per request: the time to the first byte of audio and to the last, from
# the request's start (see one() below). One line per kind and count: the
# means, then the front end's overhead, the difference of the mean total
# times as a percentage of pcg-synth's (the utterance time). Last, the CPU
# time pcg-httpd took during its waves against the pipeline's daemons',
# and per second of audio: the part of the cost that timing noise hides.
#
# Usage: bench/http.sh   Environment: SENTENCES (default 16), ROUNDS (3),
#   CLIENTS ("1 8"), FORMAT (wav), RESAMPLER (pcg-httpd --resampler,
#   default medium), THREADS (per model server, default 0: all cores)
set -eu
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$root/bin:$root/scripts:$PATH"
work=$(mktemp -d "${TMPDIR:-/tmp}/pcg-http.XXXXXX")
export PCG_RUNTIME_DIR="$work/rt"
trap 'pcg-down >/dev/null 2>&1; rm -rf "$work"' EXIT INT TERM
nsent=${SENTENCES:-16}
rounds=${ROUNDS:-3}
clients=${CLIENTS:-1 8}
format=${FORMAT:-wav}
head -n "$nsent" bench/table1-sentences.tsv >"$work/sentences"

pcg-up --threads "${THREADS:-0}" --sessions 8 >/dev/null
pcg-httpd --port 0 --voice models/demo/voice.json --quiet ${RESAMPLER:+--resampler "$RESAMPLER"} \
	2>"$work/httpd.log" &
echo $! >"$PCG_RUNTIME_DIR/pcg-httpd.pid" # pcg-down stops it
i=0
until grep -q 'listening on' "$work/httpd.log" || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
api=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$work/httpd.log")
now() { date +%s.%N; }
# clock ticks (user + system) of pcg-httpd, then of the other daemons
ticks() {
	for f in "$PCG_RUNTIME_DIR"/*.pid; do
		awk -v h="$(basename "$f" .pid)" '{ print (h == "pcg-httpd" ? "h" : "p"), $14 + $15 }' \
			"/proc/$(cat "$f")/stat"
	done | awk '{ t[$1] += $2 } END { print t["h"] + 0, t["p"] + 0 }'
}

# one KIND request for sentence line I into directory D: "I ttfb total",
# both from the request's start: curl's time_starttransfer and time_total
# (from its connect); pcg-synth's own "first audio after" (from its send)
# and that plus the time from the first byte of its output to the last,
# so that neither counts the start of the client process
one() {
	kind=$1 i=$2 d=$3
	line=$(sed -n "${i}p" "$work/sentences")
	spk=$(echo "$line" | cut -f2)
	text=$(echo "$line" | cut -f3)
	if [ "$kind" = synth ]; then
		pcg-synth --seed "$i" --speaker "$spk" -o - "$text" 2>"$d/$i.out" |
			{ head -c 1 >/dev/null; now >"$d/$i.t1"; cat >/dev/null; now >"$d/$i.t2"; }
		f=$(sed -n 's/^first audio after \([0-9.]*\) s.*/\1/p' "$d/$i.out")
		echo "$i $f $(cat "$d/$i.t1" "$d/$i.t2" | tr '\n' ' ' | awk -v f="$f" '{ print f + $2 - $1 }')"
	else
		echo "$i $(curl -sf -o "$d/$i.$format" -w '%{time_starttransfer} %{time_total}' \
			"$api/audio/speech" -d "{\"model\": \"pcg\", \"input\": \"$text\", \"voice\": $spk, \"seed\": $i, \"response_format\": \"$format\"}")"
	fi
}

# a wave: every sentence once, N at a time
wave() {
	kind=$1 n=$2 d=$work/$1.$2.$3
	mkdir -p "$d"
	i=1
	while [ "$i" -le "$nsent" ]; do
		pids=
		k=0
		while [ $k -lt "$n" ] && [ "$i" -le "$nsent" ]; do
			one "$kind" "$i" "$d" >"$d/$i.t" & pids="$pids $!"
			i=$((i + 1)) k=$((k + 1))
		done
		for p in $pids; do wait "$p"; done
	done
	cat "$d"/*.t >>"$work/$kind.$n"
}

echo "== demo voice, pcg, $nsent sentences x $rounds rounds, $format, resampler ${RESAMPLER:-medium}; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores"
printf '%-8s %-10s %10s %10s %8s\n' clients kind "ttfb (s)" "total (s)" requests
: >"$work/ticks"
for n in $clients; do
	: >"$work/synth.$n"
	: >"$work/http.$n"
	r=1
	while [ $r -le "$rounds" ]; do
		wave synth "$n" "$r"
		t0=$(ticks)
		wave http "$n" "$r"
		echo "$t0 $(ticks)" >>"$work/ticks"
		r=$((r + 1))
	done
	for kind in synth http; do
		awk -v n="$n" -v k="$kind" '{ f += $2; w += $3 } END {
			printf "%-8s %-10s %10.4f %10.4f %8d\n", n, k == "http" ? "pcg-httpd" : "pcg-synth",
			f / NR, w / NR, NR }' "$work/$kind.$n"
	done
	paste "$work/synth.$n" "$work/http.$n" | awk -v n="$n" '{ fs += $2; ws += $3; fh += $5; wh += $6 }
		END { printf "%-8s overhead: first audio %+.1f ms, total %+.1f ms = %+.1f %% of the utterance time\n",
		      n, (fh - fs) / NR * 1000, (wh - ws) / NR * 1000, (wh - ws) / ws * 100 }'
done
# the audio: what pcg-synth made of the same sentences and seeds
audio=$(cat "$work"/synth.*/*.out | sed -n 's/^tokens [0-9]* (\([0-9.]*\) s of audio).*/\1/p' |
	awk '{ s += $1 } END { print s }')
awk -v a="$audio" -v hz="$(getconf CLK_TCK)" '{ h += $3 - $1; p += $4 - $2 } END {
	printf "pcg-httpd CPU: %.2f s against the pipeline'"'"'s %.2f s (%.1f %%), %.1f ms per second of audio\n",
	h / hz, p / hz, 100 * h / p, 1000 * h / hz / a }' "$work/ticks"
