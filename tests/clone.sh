#!/bin/sh
# tests/clone.sh: zero-shot cloning through the pipeline. A tiny LLaSA model
# with the real 65,536 speech tokens (pcg-mkmodel) and the tiny X-codec2
# encoder of tests/fixtures/xcodec2-enc; the verifier runs the models as
# threads (--local) and encodes prompts (--encoder). pcg-synth --prompt-wav
# sends a recording: the verifier encodes it once and keeps its codes by the
# file's hash (the second request says "cached"), the same seed gives the
# same tokens both times, and other tokens than without the prompt (the
# prompt is in the context). A file that is not audio, a transcript without
# audio, a verifier without an encoder: clear errors.
set -u
T=${TEST_TMP:-$(mktemp -d)}
ROOT=${PCG_ROOT:-$(pwd)}
cd "$T" || exit 1
. "$ROOT/tests/shlib"
ENC="$ROOT/tests/fixtures/xcodec2-enc/tiny"
cleanup() { [ -n "${pids:-}" ] && kill $pids 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

pcg-mkmodel --out m --speech 65536 --std 0.3 --seed 3 --quiet || exit 1
sox -t f32 -r 16000 -c 1 "$ENC/wav.f32" -b 16 voice.wav || exit 1
V="ipc://$T/v.sock"
verifier --local m --local-draft-layers 0 --encoder "$ENC" --listen "$V" 2>v.log &
pids=$!
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
finish
