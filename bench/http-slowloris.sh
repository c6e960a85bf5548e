#!/bin/sh
# bench/http-slowloris.sh: what slow clients take from pcg-httpd's
# legitimate ones (issue 29). wrk (Debian package wrk: apt-get install wrk)
# runs GET PATH (default /v1/models: the front end alone, no pipeline
# needed) for SECONDS with CONNS connections from 127.0.0.1, first alone,
# then while ATTACKERS slow clients (default 200) hold connections: each
# sends an unfinished request head and one more header byte every
# TRICKLE_S seconds, and opens a new connection at its next tick whenever
# the server closes one. ADDRS (default 200) is how many loopback source addresses
# they spread over (127.0.0.2 upwards; 200: one each, so --max-per-client
# does not help and only the head deadline and the loop's cheap waiting
# do; 1: all from 127.0.0.2, the per-client cap refuses all but 64). The
# server runs with its defaults (--head-timeout-ms 10000, --max-connections
# 1024, --max-per-client 64). Prints wrk's rate and latency percentiles
# for both runs, the ratio of the rates and of the p99s, and the
# attackers' tally (connections opened, 408s, 429s). Bounded: two wrk
# runs of SECONDS each, the attackers stopped after the second.
#
# Usage: bench/http-slowloris.sh   Environment: SECONDS_RUN (default 10),
#   CONNS (16), THREADS (wrk threads, 2), ATTACKERS (200), ADDRS (200),
#   TRICKLE_S (1), PATH_GET (/v1/models)
set -eu
cd "$(dirname "$0")/.."
root=$PWD
command -v wrk >/dev/null 2>&1 || { echo "http-slowloris: wrk not installed (apt-get install wrk)" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "http-slowloris: python3 not installed" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/pcg-slowloris.XXXXXX")
h= a=
trap '[ -n "$a" ] && kill $a 2>/dev/null; [ -n "$h" ] && kill $h 2>/dev/null; rm -rf "$work"' EXIT INT TERM
secs=${SECONDS_RUN:-10}
conns=${CONNS:-16}
threads=${THREADS:-2}
attackers=${ATTACKERS:-200}
addrs=${ADDRS:-200}
trickle=${TRICKLE_S:-1}
path=${PATH_GET:-/v1/models}

"$root/bin/pcg-httpd" --port 0 --verifier "ipc://$work/nobody.sock" --quiet 2>"$work/httpd.log" &
h=$!
i=0
until grep -q 'listening on' "$work/httpd.log" || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
url=$(sed -n 's/.*listening on \(http:[^ ]*\)\/v1 .*/\1/p' "$work/httpd.log")
port=${url##*:}

cat >"$work/slow.py" <<'EOF'
# slow.py PORT N ADDRS TRICKLE_S: N slow clients until SIGTERM; then prints the tally
import select, signal, socket, sys, time
port, n, addrs, trickle = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
tally = {"opened": 0, "408": 0, "429": 0, "503": 0, "other": 0}
def open_one(i):
    s = socket.socket()
    s.bind(("127.0.0.%d" % (2 + i % addrs), 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    tally["opened"] += 1
    return [s, 0, b""]   # socket, head bytes sent, answer
conns = [open_one(i) for i in range(n)]
next_t = time.monotonic()
while not stop:
    now = time.monotonic()
    if now >= next_t:
        for i, c in enumerate(conns):
            if c is None:   # closed by the server: a new one at the next tick, as a slow client would
                conns[i] = c = open_one(i)
            try:
                c[0].send(b"GET / HTTP/1.1\r\nHost: a\r\nX-Slow: " if c[1] == 0 else b"x")
                c[1] += 1
            except OSError:
                pass
        next_t = now + trickle
    try:
        r, _, _ = select.select([c[0] for c in conns if c], [], [], 0.2)
    except InterruptedError:
        continue
    for i, c in enumerate(conns):
        if c is None or c[0] not in r:
            continue
        try:
            b = c[0].recv(4096)
        except OSError:
            b = b""
        c[2] += b
        if not b:
            st = c[2].split(b" ", 2)[1].decode() if c[2].startswith(b"HTTP/") else "other"
            tally[st if st in tally else "other"] += 1
            c[0].close()
            conns[i] = None
print("attackers: %d slow clients from %d addresses: %d connections opened, %d cut off with 408, "
      "%d refused with 429, %d with 503, %d closed otherwise" % (n, addrs, tally["opened"],
      tally["408"], tally["429"], tally["503"], tally["other"]))
EOF

run() { wrk -t"$threads" -c"$conns" -d"${secs}s" --latency "$url$path"; }
echo "pcg-httpd at $url; wrk -t$threads -c$conns -d${secs}s --latency $url$path"
echo "--- no attackers"
run | tee "$work/base"
python3 "$work/slow.py" "$port" "$attackers" "$addrs" "$trickle" >"$work/slow.out" 2>&1 &
a=$!
sleep 2 # every attacker connected and trickling
echo "--- $attackers slow clients"
run | tee "$work/attack"
kill -TERM "$a"
wait "$a" || true
a=
cat "$work/slow.out"
rate() { sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$1"; }
# p99 in ms whatever unit wrk chose (us, ms, s)
p99() {
	sed -n 's/^ *99% *\([0-9.]*\)\([a-z]*\).*/\1 \2/p' "$1" |
		awk '{ v = $1; if ($2 == "us") v /= 1000; else if ($2 == "s") v *= 1000; printf "%.3f", v }'
}
awk -v r0="$(rate "$work/base")" -v r1="$(rate "$work/attack")" -v p0="$(p99 "$work/base")" \
	-v p1="$(p99 "$work/attack")" 'BEGIN {
	printf "rate: %.0f req/s alone, %.0f under attack: %.1f%%\n", r0, r1, 100 * r1 / r0
	printf "p99: %.3f ms alone, %.3f ms under attack: %.2fx\n", p0, p1, p1 / p0 }'
kill "$h"
wait "$h" || true
h=
