#!/bin/sh
# bench/replica-pings.sh: a replica that hangs must not freeze the others'
# listeners. The demo voice with two replicas of targetd and draftd, the
# second targetd stopped (SIGSTOP); 4 streams at once (each an utterance
# of about 50 s of audio written as it comes), first without pings, then
# with a `pcg-synth --ping` every second, then with GET /health every second
# through pcg-httpd. For each: the worst time to first audio and the longest
# wait between two audio chunks of any healthy stream (pcg-synth's "first
# audio after" and "longest wait between chunks"), and how long each ping
# or health check took. A stream that lands on the stopped replica
# waits for the verifier's timeout (its prefill's grace: --ms-per-position)
# and is cut at 20 s; the healthy streams are the others. Bounded: 3 rounds
# of 4 streams, 20 s each at most.
#
# Usage: bench/replica-pings.sh   (from the repository root, after make)
set -eu
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PWD/scripts:$PATH"
rt=$(mktemp -d "${TMPDIR:-/tmp}/pcg-bench-rp.XXXXXX")
export PCG_RUNTIME_DIR="$rt/rt"
cleanup() {
	[ -f "$rt/stopped" ] && kill -CONT "$(cat "$rt/stopped")" 2>/dev/null
	pcg-down >/dev/null 2>&1
	rm -rf "$rt"
}
trap cleanup EXIT INT TERM
t1="These are the beasts which ye shall eat: the ox, the sheep, and the goat, the hart, and the roebuck, and the fallow deer, and the wild goat, and the pygarg, and the wild ox, and the chamois."
text="$t1 $t1 $t1 $t1"
echo "== $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs, load $(cut -d ' ' -f 1 /proc/loadavg)"
pcg-up --replicas 2 --sessions 8 --http 0 >"$rt/up.log"
port=$(sed -n 's/.*http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$rt/up.log" | head -n 1)
cat "$PCG_RUNTIME_DIR/targetd-2.pid" >"$rt/stopped"
kill -STOP "$(cat "$rt/stopped")"

# round NAME PROBE: 4 streams, PROBE (a command, or :) every second meanwhile
round() {
	name=$1 probe=$2
	rm -f "$rt"/s*.err "$rt"/s*.rc
	for i in 1 2 3 4; do
		(rc=0; timeout 20 pcg-synth --seed "$i" -o "$rt/s$i.wav" "$text" 2>"$rt/s$i.err" || rc=$?
		 echo $rc >"$rt/s$i.rc") &
	done
	: >"$rt/probe.ms"
	(
		while :; do
			s=$(date +%s%3N)
			$probe >/dev/null 2>&1 || true
			echo $(($(date +%s%3N) - s)) >>"$rt/probe.ms"
			sleep 1
		done
	) &
	prober=$!
	until [ "$(ls "$rt"/s*.rc 2>/dev/null | wc -l)" -eq 4 ]; do sleep 0.2; done
	kill "$prober" 2>/dev/null
	wait "$prober" 2>/dev/null || true
	# the healthy streams: those served by the replica that runs
	ok=0 stuck=0 gap= first=
	for i in 1 2 3 4; do
		if [ "$(cat "$rt/s$i.rc")" = 0 ]; then
			ok=$((ok + 1))
			g=$(sed -n 's/.*longest wait between chunks \([0-9.]*\) s/\1/p' "$rt/s$i.err")
			gap=$(printf '%s\n%s\n' "$gap" "$g" | sed '/^$/d' | sort -g | tail -n 1)
			f=$(sed -n 's/^first audio after \([0-9.]*\) s.*/\1/p' "$rt/s$i.err")
			first=$(printf '%s\n%s\n' "$first" "$f" | sed '/^$/d' | sort -g | tail -n 1)
		else
			stuck=$((stuck + 1))
		fi
	done
	probes=$(sort -n "$rt/probe.ms" | awk '{ a[NR] = $1 } END { if (NR) printf "%d, median %d ms, worst %d ms", NR, a[int((NR + 1) / 2)], a[NR] }')
	printf '%-26s %d healthy streams: first audio after %6s s at worst, longest wait between chunks %6s s (%d on the stopped replica, cut at 20 s); probes: %s\n' \
		"$name" "$ok" "${first:-?}" "${gap:-?}" "$stuck" "${probes:-none}"
}
round "no pings" :
round "pcg-synth --ping every 1 s" "pcg-synth --ping"
if [ -n "$port" ]; then
	round "GET /health every 1 s" "curl -s -o /dev/null --max-time 10 http://127.0.0.1:$port/health"
	echo "/health with the replica stopped: $(curl -s -w ' (%{http_code})' http://127.0.0.1:$port/health)"
fi
