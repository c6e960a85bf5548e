#!/bin/sh
# tests/misuse.sh: small misuses answered at once and in words.
# pcg-keygen refuses an empty name and one ending in '/' (they would write
# the hidden files .key and .pub); pcg-synth, run by a user who may not
# enter the runtime directory of the pipeline it looks for, says so at once
# instead of waiting out its timeout (as root: run as nobody); pcg-up
# names a missing path first; a misspelt --policy gets the nearest name;
# -o out.mp3 points to sox; pcg-httpd names a --chunk-first beyond --chunk;
# a voice sent with curl -d gets the --data-binary hint; pcg-synth says when
# the audio is not kept; /health reports the programs' version.
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
expect 2 "pcg-keygen ''" pcg-keygen ""
err_has "NAME is empty"
expect 2 "pcg-keygen dir/" pcg-keygen "dir/"
err_has "NAME ends in '/'"
[ ! -e .key ] && [ ! -e .pub ] && [ ! -e dir/.key ] && ok "no .key or .pub written" || bad "a hidden key file was written"
as_nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
	as_nobody "$(command -v pcg-synth)" --version >/dev/null 2>&1; then
	mkdir -p rt && : >rt/verifier.sock && chmod 700 rt && chmod 755 "$T"
	t0=$(date +%s)
	expect 1 "pcg-synth as another user than the pipeline's" as_nobody \
		env PCG_RUNTIME_DIR="$T/rt" "$(command -v pcg-synth)" --timeout-ms 20000 "Hello."
	err_has "Permission denied (it belongs to another user"
	[ $(($(date +%s) - t0)) -le 3 ] && ok "said at once" || bad "took $(($(date +%s) - t0)) s"
else
	echo "not root, no setpriv, or pcg-synth not runnable as nobody: the runtime directory check needs another user; not run"
fi
# messages that name the flag typed and the way out
expect 1 "pcg-up --target /nonexistent/model" pcg-up --target /nonexistent/model
[ "$(head -n 1 "$T/err")" = "pcg-up: --target /nonexistent/model: no such file or directory" ] &&
	ok "pcg-up names the missing path first" || bad "pcg-up: $(head -n 3 "$T/err")"
expect 1 "pcg-synth --policy pgc" pcg-synth --policy pgc "Hello."
err_has "--policy 'pgc': no such policy; did you mean 'pcg'?"
expect 2 "pcg-synth -o out.mp3" pcg-synth -o out.mp3 "Hello."
err_has "pcg-synth -o - TEXT | sox -t wav - out.mp3"
[ ! -e out.mp3 ] && ok "no out.mp3 written" || bad "out.mp3 written"
# a first chunk beyond the chunk, named by its flag before anything starts
expect 2 "pcg-httpd --chunk 10 --chunk-first 11" timeout 10 pcg-httpd --port 0 --chunk 10 \
	--chunk-first 11
err_has "--chunk-first: 11: want 0 to 10"

# a voice sent with curl -d (a form: its newlines stripped): the hint
mkdir -p voices
pcg-httpd --port 0 --verifier "ipc://$T/nobody.sock" --voices "$T/voices" 2>httpd.log &
h=$!
i=0
until grep -q 'listening on' httpd.log || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
URL=$(sed -n 's/.*listening on \(http:[^ ]*\)\/v1 .*/\1/p' httpd.log)
printf 'RIFF\n\n\nnot really a recording\n' >bad.wav
code=$(curl -s -o form.json -w '%{http_code}' -d @bad.wav "$URL/v1/audio/voices?name=me&transcript=hi")
[ "$code" = 400 ] && grep -q 'curl --data-binary @voice.wav' form.json && ok "curl -d: 400 with the --data-binary hint" ||
	bad "curl -d: $code $(cat form.json)"
kill "$h"; wait "$h" 2>/dev/null

# the demo pipeline: pcg-synth says where the audio went, or that it was not
# kept; /health's version is the programs'
export PCG_RUNTIME_DIR="$T/rt"
trap 'pcg-down >/dev/null 2>&1' EXIT INT TERM
expect 0 "pcg-up --http 0" pcg-up --no-warmup --http 0
URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/out" | head -n 1)
expect 0 "pcg-synth without -o" pcg-synth "Hello."
err_has "audio: none kept (no -o: give -o FILE.wav"
expect 0 "pcg-synth -o a.wav" pcg-synth -o a.wav "Hello."
err_has "audio: a.wav"
rel=$(sed -n 's/^#define PCG_VERSION "\(.*\)"$/\1/p' "$ROOT/lib/core/opts.h")
curl -s "$URL/health" >health.json
grep -q "\"version\": *\"$rel\"" health.json && ok "/health's version is $rel" || bad "/health: $(cat health.json)"
pcg-down >/dev/null 2>&1
finish
