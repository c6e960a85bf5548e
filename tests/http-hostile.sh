#!/bin/sh
# tests/http-hostile.sh: pcg-httpd under hostile clients, without a
# pipeline (it answers 503 for speech and /health, which is an answer).
# With --head-timeout-ms 800 and --max-per-client 6: six clients from
# 127.0.0.2 that send a header byte every 0.1 s are cut off with 408 at the
# head deadline, four more get 429 at once, and /health from 127.0.0.1
# answers while they hold on; a body that trickles gets 408. Framing:
# two Content-Lengths, Content-Length with chunked, Transfer-Encoding gzip,
# a chunk size of 2^64-1, chunk-size lines "49 junk" and "0 junk", chunk lines
# and trailers ending in a bare LF, a garbage request line, a TLS hello, HTTP/2.0, a
# NUL in a header, a folded header, no Host: each answered 400/413/501/505
# in well under the deadline; a chunked body is read. Half-close: a client
# that shuts down its sending side after its request gets the response.
# Voices: alloy, ALLOY, "3", an id's form and a%00b are refused, a voice
# registers, is deleted (DELETE /v1/audio/voices/ID) and is 404 after; a
# store entry that is a FIFO or a link to /dev/zero is skipped at start; the
# store is bounded (409 voice_limit_reached, or the oldest evicted with
# --voices-evict oldest); voices survive a restart; a stray temporary file
# and a corrupt voice file are skipped with a log line; a kill -9 during a
# registration leaves the store readable. About 8 s.
# serial: time bounds (the 0.8 s head deadline, answers well under it)
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
[ -x "$ROOT/bin/pcg-httpd" ] || { echo "bin/pcg-httpd not built (make)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not installed"; exit 77; }
h=
trap '[ -n "$h" ] && kill $h 2>/dev/null' EXIT INT TERM

# start_httpd LOG [flags]: a server on a free port, its URL in $URL
start_httpd() {
	log=$1
	shift
	pcg-httpd --port 0 --verifier "ipc://$T/nobody.sock" --head-timeout-ms 800 \
		--body-timeout-ms 800 --max-per-client 6 --max-connections 40 --voices "$T/voices" \
		--voices-max 3 "$@" 2>"$log" &
	h=$!
	i=0
	until grep -q 'listening on' "$log" || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
	URL=$(sed -n 's/.*listening on \(http:[^ ]*\)\/v1 .*/\1/p' "$log")
	PORT=${URL##*:}
}
stop_httpd() { kill "$h"; wait "$h"; h=; }

# a second of a 220 Hz tone at 16 kHz, as a recording
python3 - <<'EOF'
import math, struct, wave
with wave.open("tone.wav", "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
    w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 220 * i / 16000)))
                           for i in range(16000)))
EOF

cat >hostile.py <<'EOF'
# hostile.py PORT: the raw-socket checks; prints ok:/FAIL: lines
import http.client, json, select, socket, sys, time
port = int(sys.argv[1])
fails = 0
def ok(m): print("ok: " + m)
def bad(m):
    global fails
    fails += 1
    print("FAIL: " + m)

def conn(src="127.0.0.1"):
    s = socket.socket()
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s

def status_of(data):
    line = data.split(b"\r\n", 1)[0].split(b" ")
    return int(line[1]) if len(line) > 1 and line[1].isdigit() else None

def read_all(s, limit):
    s.settimeout(limit)
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except (socket.timeout, ConnectionResetError):
        pass
    return data

def raw(req, limit=2.0, half_close=False):
    s = conn()
    t = time.monotonic()
    s.sendall(req)
    if half_close:
        s.shutdown(socket.SHUT_WR)
    data = read_all(s, limit)
    s.close()
    return status_of(data), time.monotonic() - t, data

# --- slow clients: 6 held from 127.0.0.2 (the cap), 4 more refused
slow = []
for i in range(10):
    s = conn("127.0.0.2")
    s.sendall(b"GET /health HTTP/1.1\r\nHost: a\r\nX-Slow: ")
    s.setblocking(False)
    slow.append([s, b"", None])
t0 = time.monotonic()
t_health = None
while time.monotonic() - t0 < 2.0:
    for e in slow:
        if e[2] is None:
            try:
                e[0].send(b"x")
            except OSError:
                pass
    if t_health is None and time.monotonic() - t0 > 0.3:
        st, dt, _ = raw(b"GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        t_health = (st, dt)
    r, _, _ = select.select([e[0] for e in slow if e[2] is None], [], [], 0.1)
    for e in slow:
        if e[0] in r:
            try:
                b = e[0].recv(4096)
            except OSError:
                b = b""
            e[1] += b
            if b"\r\n\r\n" in e[1] or not b:
                e[2] = time.monotonic() - t0
sts = [status_of(e[1]) for e in slow]
n408 = sum(1 for x in sts if x == 408)
n429 = sum(1 for x in sts if x == 429)
late = max((e[2] for e in slow if status_of(e[1]) == 408), default=99)
if n408 == 6 and n429 == 4:
    ok("10 slow clients from one address: 4 refused with 429 (--max-per-client 6), 6 cut off with 408")
else:
    bad("slow clients: statuses %s" % sts)
if late < 1.5:
    ok("a head trickling a byte every 0.1 s ends at the 0.8 s deadline (the last at %.2f s)" % late)
else:
    bad("slow clients held until %.2f s" % late)
if t_health and t_health[0] in (200, 503) and t_health[1] < 0.5:
    ok("/health answers %d in %.3f s while they hold on" % t_health)
else:
    bad("/health while slow clients hold on: %s" % (t_health,))
for e in slow:
    e[0].close()

# a body that trickles: 408 at its deadline
s = conn()
s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{")
t = time.monotonic()
s.setblocking(False)
data = b""
while time.monotonic() - t < 2.0 and b"\r\n\r\n" not in data:
    try:
        s.send(b" ")
    except OSError:
        pass
    if select.select([s], [], [], 0.1)[0]:
        try:
            b = s.recv(4096)
        except OSError:
            b = b""
        if not b:
            break
        data += b
s.close()
dt = time.monotonic() - t
if status_of(data) == 408 and dt < 1.5:
    ok("a body that trickles: 408 after %.2f s" % dt)
else:
    bad("trickling body: %s after %.2f s" % (data[:80], dt))

# --- framing: each answered at once
cases = [
    ("two Content-Lengths", 400,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
    ("Content-Length and chunked", 400,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("Transfer-Encoding: gzip", 501,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"),
    ("Transfer-Encoding: gzip, chunked", 501,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
    ("a chunk size of 2^64-1", 413,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"ffffffffffffffff\r\nabc"),
    ("a chunk size that is not hexadecimal", 400,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
    ("a chunk-size line '49 junk'", 400,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"49 junk\r\n"),
    ("a last chunk '0 junk'", 400,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0 junk\r\n\r\n"),
    ("a chunk-size line ending in a bare LF", 400,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"2\n{}\r\n0\r\n\r\n"),
    ("a chunk's data followed by a bare LF", 400,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"2\r\n{}\n0\r\n\r\n"),
    ("a trailer ending in a bare LF", 400,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"2\r\n{}\r\n0\r\nX-T: t\n\r\n"),
    ("a garbage request line", 400, b"HELLO\r\n\r\n"),
    ("a request line of four words", 400, b"GET / x HTTP/1.1\r\nHost: a\r\n\r\n"),
    ("a method of 20 letters", 501, b"ABCDEFGHIJKLMNOPQRST / HTTP/1.1\r\nHost: a\r\n\r\n"),
    ("a TLS hello", 400, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"),
    ("HTTP/2.0", 505, b"GET /health HTTP/2.0\r\nHost: a\r\n\r\n"),
    ("a NUL in a header", 400, b"GET /health HTTP/1.1\r\nHost: a\r\nX-A: a\x00b\r\n\r\n"),
    ("a folded header", 400, b"GET /health HTTP/1.1\r\nHost: a\r\nX-A: a\r\n b\r\n\r\n"),
    ("a space before the colon", 400, b"GET /health HTTP/1.1\r\nHost : a\r\n\r\n"),
    ("no Host", 400, b"GET /health HTTP/1.1\r\n\r\n"),
    ("two Hosts", 400, b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
    ("a Content-Length that is not a number", 400,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nContent-Length: 5x\r\n\r\nhello"),
    ("an Expect other than 100-continue", 417,
     b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nExpect: magic\r\nContent-Length: 2\r\n\r\n{}"),
    ("a head over 8 KB", 431, b"GET /health HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"),
]
for what, want, req in cases:
    st, dt, data = raw(req)
    if st == want and dt < 0.5 and b'"error"' in data:
        ok("%s: %d in %.3f s" % (what, st, dt))
    else:
        bad("%s: %s in %.3f s, want %d: %r" % (what, st, dt, want, data[:200]))

# "Connection: close" in a second Connection header is obeyed: the
# response ends the connection (read_all sees the close well before 2 s)
st, dt, data = raw(b"GET /health HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n"
                   b"Connection: close\r\n\r\n")
if st is not None and dt < 1.0 and b"connection: close" in data.lower():
    ok("a second Connection header's close obeyed (%d, closed after %.3f s)" % (st, dt))
else:
    bad("two Connection headers: %s after %.3f s: %r" % (st, dt, data[:200]))
# an empty body with Content-Length: 0 (no buffer to copy into)
st, dt, data = raw(b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n"
                   b"Connection: close\r\n\r\n")
ok("an empty body: %d" % st) if st == 400 else bad("empty body: %s %r" % (st, data[:200]))

# a chunked body is read: the JSON in two chunks, missing its voice
body = b'{"model": "tts-1", "input": "Hi."}'
req = (b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" +
       b"%x\r\n%s\r\n%x ;ext=1\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n" % (10, body[:10], len(body) - 10, body[10:]))
st, dt, data = raw(req)
if st == 400 and b"voice" in data:
    ok("a chunked body in two chunks with a trailer is read (400 names the missing voice)")
else:
    bad("chunked body: %s %r" % (st, data[:300]))

# keep-alive: two requests on one connection, the second sent after the first answer
s = conn()
s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n")
s.settimeout(2)
first = b""
while b"\r\n\r\n" not in first or len(first.split(b"\r\n\r\n", 1)[1]) < int(
        first.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0]):
    b = s.recv(65536)
    if not b:
        break
    first += b
s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
second = read_all(s, 2)
s.close()
if status_of(first) == 200 and status_of(second) == 200:
    ok("two requests on one kept-alive connection")
else:
    bad("keep-alive: %r / %r" % (first[:60], second[:60]))

# --- half-close: the request, then shutdown(SHUT_WR): the response still comes
st, dt, data = raw(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n", half_close=True)
# (kept alive: the server closes once it reads the end of the client's side)
if st == 200 and b'"tts-1"' in data:
    ok("half-close after GET /v1/models: 200 and the body")
else:
    bad("half-close GET: %s %r" % (st, data[:200]))
body = b'{"model": "tts-1", "input": "Hi.", "voice": "alloy"}'
st, dt, data = raw(b"POST /v1/audio/speech HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s" %
                   (len(body), body), half_close=True)
if st == 503 and b"pcg-up" in data:
    ok("half-close after a speech request: its answer (503, no pipeline), not a silent close")
else:
    bad("half-close POST: %s %r" % (st, data[:200]))

# --- voices
wav = open("tone.wav", "rb").read()
def call(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request(method, path, body=body)
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data
for name in ["alloy", "ALLOY", "3", "voice_0123456789abcdef", "a%00b", "a%01b", "a%20b", "x" * 64, "-a"]:
    st, j = call("POST", "/v1/audio/voices?name=%s&transcript=hello" % name, wav)
    if st == 400 and isinstance(j, dict) and j["error"]["param"] == "name":
        ok("name %r refused: 400 %s" % (name[:20], j["error"]["message"][:70]))
    else:
        bad("name %r: %s %s" % (name, st, j))
st, j = call("POST", "/v1/audio/voices?name=me&transcript=hello", wav)
vid = j.get("id") if st == 200 else None
if vid and vid.startswith("voice_"):
    ok("registered 'me': %s" % vid)
else:
    bad("register: %s %s" % (st, j))
st, j2 = call("POST", "/v1/audio/voices?name=me&transcript=hello", wav)
ok("the same again: the same voice") if st == 200 and j2.get("id") == vid else bad("again: %s %s" % (st, j2))
st, j2 = call("POST", "/v1/audio/voices?name=me&transcript=other", wav)
ok("'me' with another transcript: 409") if st == 409 else bad("taken: %s %s" % (st, j2))
st, j2 = call("GET", "/v1/audio/voices/%s" % vid)
ok("GET /v1/audio/voices/ID") if st == 200 and j2.get("name") == "me" else bad("get: %s %s" % (st, j2))
st, j2 = call("DELETE", "/v1/audio/voices/%s" % vid)
ok("DELETE /v1/audio/voices/ID: 200 deleted") if st == 200 and j2.get("deleted") is True else \
    bad("delete: %s %s" % (st, j2))
st, j2 = call("GET", "/v1/audio/voices/%s" % vid)
st2, _ = call("DELETE", "/v1/audio/voices/%s" % vid)
ok("deleted: GET and DELETE again are 404") if st == 404 and st2 == 404 else bad("after delete: %s %s" % (st, st2))
st, _ = call("DELETE", "/v1/audio/voices/alloy")
ok("DELETE of a built-in voice: 404") if st == 404 else bad("delete alloy: %s" % st)
for n in ["one", "two", "three"]:
    st, j2 = call("POST", "/v1/audio/voices?name=%s&transcript=hello" % n, wav)
    if st != 200:
        bad("register %s: %s %s" % (n, st, j2))
st, j2 = call("POST", "/v1/audio/voices?name=four&transcript=hello", wav)
if st == 409 and j2["error"]["code"] == "voice_limit_reached":
    ok("a fourth voice over --voices-max 3: 409 voice_limit_reached")
else:
    bad("full store: %s %s" % (st, j2))
sys.exit(1 if fails else 0)
EOF

start_httpd h1.log
[ -n "$URL" ] && ok "pcg-httpd listens at $URL" || { bad "no server: $(cat h1.log)"; finish; }
python3 hostile.py "$PORT" >py.out 2>&1 || bad "hostile.py: exit $?"
cat py.out
grep -q 'Traceback' py.out && bad "hostile.py crashed"
kill -0 "$h" 2>/dev/null && ok "pcg-httpd still runs" || bad "pcg-httpd died: $(tail -n 3 h1.log)"
grep -q ' 408 .*head did not arrive' h1.log && grep -q ' 429 .*Too many connections from 127.0.0.2' h1.log &&
	ok "the log names the 408s and 429s" || bad "log: $(tail -n 5 h1.log)"

# --- persistence: a restart reads the voices back
stop_httpd
ls voices/*.voice >/dev/null 2>&1 && [ "$(ls voices/*.voice | wc -l)" = 3 ] &&
	ok "three voice files in --voices" || bad "store: $(ls voices)"
first=$(ls voices/*.voice | head -n 1)
printf 'half a voice' >"voices/voice_0000000000000000.voice.tmp"
head -c 2000 "$first" >"voices/voice_1111111111111111.voice"
# entries that are not regular files: refused before they are read (a link
# to /dev/zero would be read without end, a FIFO would block the start)
ln -s /dev/zero "voices/voice_2222222222222222.voice"
mkfifo "voices/voice_3333333333333333.voice"
t0=$(date +%s)
start_httpd h2.log --voices-evict oldest
[ $(($(date +%s) - t0)) -le 5 ] && [ -n "$URL" ] && ok "a store holding a FIFO and a link to /dev/zero: started at once" ||
	bad "start with hostile entries: $(cat h2.log)"
for k in 2222222222222222 3333333333333333; do
	grep -q "skipped voice_$k.voice: .*not a regular file" h2.log && ok "voice_$k.voice (not a regular file): skipped, logged" ||
		bad "voice_$k.voice: $(cat h2.log)"
done
rm -f voices/voice_2222222222222222.voice voices/voice_3333333333333333.voice
curl -s "$URL/v1/audio/voices" >list.json
for n in one two three; do
	grep -q "\"name\": \"$n\"" list.json || bad "after a restart '$n' is missing: $(cat list.json)"
done
grep -q '"name": "three"' list.json && ok "after a restart the three voices are listed"
grep -q 'removed voice_0000000000000000.voice.tmp' h2.log && ok "a temporary file left by a cut write: removed, logged" ||
	bad "tmp: $(cat h2.log)"
grep -q 'skipped voice_1111111111111111.voice: ' h2.log && ok "a corrupt voice file: skipped, logged" ||
	bad "corrupt: $(cat h2.log)"
rm -f voices/voice_1111111111111111.voice
code=$(curl -s -o four.json -w '%{http_code}' --data-binary @tone.wav "$URL/v1/audio/voices?name=four&transcript=hi")
curl -s "$URL/v1/audio/voices" >list2.json
[ "$code" = 200 ] && ! grep -q '"name": "one"' list2.json && grep -q '"name": "four"' list2.json &&
	ok "--voices-evict oldest: 'four' in, 'one' (the oldest) out" || bad "evict: $code $(cat four.json)"
# kill -9 during a registration: the store stays readable
curl -s -o /dev/null --data-binary @tone.wav "$URL/v1/audio/voices?name=five&transcript=hi" &
c=$!
kill -9 "$h"
wait "$h" 2>/dev/null
wait "$c" 2>/dev/null
h=
start_httpd h3.log
curl -s "$URL/v1/audio/voices" >list3.json
grep -q '"name": "four"' list3.json && ! grep -q skipped h3.log &&
	ok "after a kill -9 mid-registration: the store reads back whole" || bad "after kill -9: $(cat h3.log)"
stop_httpd
trap - EXIT INT TERM
finish
