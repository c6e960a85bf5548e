#!/bin/sh
# tests/clone.sh: zero-shot cloning through the pipeline. A tiny LLaSA model
# with the real 65,536 speech tokens (pcg-mkmodel) and the tiny X-codec2
# encoder of tests/fixtures/xcodec2-enc; the verifier runs the models as
# threads (--local) and encodes prompts (--encoder). pcg-synth --prompt-wav
# sends a recording: the verifier encodes it once and keeps its codes by the
# file's hash (the second request says "cached"), the same seed gives the
# same tokens both times, and other tokens than without the prompt (the
# prompt is in the context). A file that is not audio, a transcript without
# audio, a verifier without an encoder: clear errors. Through pcg-httpd: a
# voice registered by its recording (POST /v1/audio/voices) is listed and
# speaks (the same file: not encoded again); not audio, a name taken, no
# transcript: 400 / 409. Through pcg-up --http --encoder: a voice registered
# and spoken; on the demo voice's pipeline a registration is refused at
# once (400 cloning_unavailable).
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
ENC="$ROOT/tests/fixtures/xcodec2-enc/tiny"
cleanup() { [ -n "${pids:-}" ] && kill $pids 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

pcg-mkmodel --out m --speech 65536 --std 0.3 --seed 3 --quiet || exit 1
sox -t f32 -r 16000 -c 1 "$ENC/wav.f32" -b 16 -D voice.wav || exit 1
V="ipc://$T/v.sock"
C="ipc://$T/c.sock"
codec-decode --daemon --weights "$ROOT/tests/fixtures/xcodec2/tiny" --listen "$C" 2>c.log &
pids=$!
verifier --local m --local-draft-layers 0 --encoder "$ENC" --codec "$C" --listen "$V" 2>v.log &
pids="$pids $!"
S="pcg-synth --verifier $V --timeout-ms 60000 --policy sd --max-tokens 30 --seed 7 --tokens"

expect 0 "cloned" $S --prompt-wav voice.wav --prompt-text "This is my voice. " "Something new."
tail -n 1 out >clone1
grep -q "a cloning prompt of 66 codes (encoded" v.log && ok "the verifier encoded 66 codes" ||
	bad "no encoding in the log: $(cat v.log)"
expect 0 "cloned again" $S --prompt-wav voice.wav --prompt-text "This is my voice. " "Something new."
tail -n 1 out >clone2
grep -q "a cloning prompt of 66 codes (cached" v.log && ok "the second time: cached" ||
	bad "not cached: $(cat v.log)"
same clone1 clone2 "the same prompt and seed: the same tokens"
expect 0 "no prompt" $S "Something new."
tail -n 1 out >plain
if cmp -s plain clone1; then bad "the prompt changed nothing"; else ok "the prompt changes the tokens"; fi

# --- the HTTP front end: a voice registered by its recording
if command -v curl >/dev/null 2>&1; then
	pcg-httpd --port 0 --verifier "$V" --policy sd 2>h.log &
	pids="$pids $!"
	i=0
	until grep -q 'listening on' h.log || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
	API=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' h.log)
	code=$(curl -s -o reg.json -w '%{http_code}' --data-binary @voice.wav \
		"$API/audio/voices?name=me&transcript=This%20is%20my%20voice.%20")
	[ "$code" = 200 ] && grep -q '"id": *"voice_' reg.json && ok "registered: $(cat reg.json)" ||
		bad "register: $code $(cat reg.json)"
	curl -s "$API/audio/voices" >list.json
	grep -q '"name": *"me"' list.json && ok "GET /v1/audio/voices lists it" || bad "list: $(cat list.json)"
	before=$(grep -c 'a cloning prompt of 66 codes (cached' v.log)
	code=$(curl -s -o me.wav -w '%{http_code}' -H 'Content-Type: application/json' \
		-d '{"model": "tts-1", "input": "Something new.", "voice": "me", "response_format": "wav"}' \
		"$API/audio/speech")
	[ "$code" = 200 ] && [ "$(head -c 4 me.wav)" = RIFF ] && ok "speech in the registered voice: WAV" ||
		bad "speech: $code $(head -c 300 me.wav)"
	[ "$(grep -c 'a cloning prompt of 66 codes (cached' v.log)" -gt "$before" ] &&
		[ "$(grep -c 'a cloning prompt of 66 codes (encoded' v.log)" = 1 ] &&
		ok "the recording pcg-synth sent was not encoded again" || bad "$(grep prompt v.log)"
	printf 'not audio\n' >text.wav
	code=$(curl -s -o r2.json -w '%{http_code}' --data-binary @text.wav "$API/audio/voices?name=x&transcript=x")
	[ "$code" = 400 ] && ok "not audio: 400 $(cat r2.json)" || bad "not audio: $code $(cat r2.json)"
	sox voice.wav -r 8000 other.wav
	code=$(curl -s -o r3.json -w '%{http_code}' --data-binary @other.wav "$API/audio/voices?name=me&transcript=x")
	[ "$code" = 409 ] && ok "a name taken: 409" || bad "name taken: $code $(cat r3.json)"
	code=$(curl -s -o r4.json -w '%{http_code}' --data-binary @voice.wav "$API/audio/voices?name=y")
	[ "$code" = 400 ] && grep -q transcript r4.json && ok "no transcript: 400" || bad "$code $(cat r4.json)"
else
	echo "curl missing: the HTTP part is not run (scripts/install-deps installs it)"
fi

printf 'not audio\n' >text.wav
expect 1 "a prompt that is not audio" $S --prompt-wav text.wav --prompt-text "x" "Hi."
err_has "prompt_audio"
expect 2 "--prompt-wav without --prompt-text" $S --prompt-wav voice.wav "Hi."
err_has "go together"
expect 1 "a missing prompt file" $S --prompt-wav missing.wav --prompt-text "x" "Hi."
err_has "missing.wav"
kill $pids
wait $pids 2>/dev/null
pids=

verifier --local m --local-draft-layers 0 --listen "$V" 2>v2.log &
pids=$!
expect 1 "a verifier without --encoder" $S --prompt-wav voice.wav --prompt-text "x" "Hi."
err_has "--encoder"
kill $pids
wait $pids 2>/dev/null
pids=

# Through pcg-up --http, as a user would: the encoder given with --encoder,
# a voice registered by its recording, then spoken; on the demo voice's
# pipeline (a phoneme voice cannot clone) the registration is refused at
# once with what to start instead.
export PCG_RUNTIME_DIR="$T/rt"
trap 'pcg-down >/dev/null 2>&1; cleanup' EXIT
asg-build --model m --theta 0.3 --quiet -o m.asg || bad "asg-build"
expect 0 "pcg-up --encoder --http 0" pcg-up --target m --draft-layers 0 --asg m.asg \
	--codec-weights "$ROOT/tests/fixtures/xcodec2/tiny" --encoder "$ENC" --http 0 --no-warmup
URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/out" | head -n 1)
code=$(curl -s -o reg.json -w '%{http_code}' --data-binary @voice.wav \
	"$URL/v1/audio/voices?name=mine&transcript=This%20is%20my%20voice.")
vid=$(sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' reg.json)
[ "$code" = 200 ] && [ -n "$vid" ] && ok "a voice registered through pcg-up --http: $vid" || bad "register: $code $(cat reg.json)"
code=$(curl -s -o spoken.wav -w '%{http_code}' "$URL/v1/audio/speech" -H 'Content-Type: application/json' \
	-d '{"model": "tts-1", "input": "Something new.", "voice": "'"$vid"'", "response_format": "wav"}')
[ "$code" = 200 ] && [ "$(head -c 4 spoken.wav)" = RIFF ] && ok "the registered voice speaks (200, WAV)" ||
	bad "speak: $code $(head -c 300 spoken.wav)"
pcg-down >/dev/null 2>&1
expect 0 "pcg-up the demo voice, --http 0" pcg-up --http 0 --no-warmup
URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/out" | head -n 1)
code=$(curl -s -o refused.json -w '%{http_code}' --data-binary @voice.wav "$URL/v1/audio/voices?name=mine&transcript=hi")
[ "$code" = 400 ] && grep -q 'cloning_unavailable' refused.json && grep -q 'cannot clone' refused.json &&
	ok "a phoneme voice's pipeline refuses a registration at once: 400 cloning_unavailable" ||
	bad "demo pipeline registration: $code $(cat refused.json)"
pcg-down >/dev/null 2>&1
finish
