#!/bin/sh
# tests/pipeline.sh: the whole pipeline as separate processes on a tiny
# model: every policy synthesises through pcg-up's ipc sockets; the same
# seed gives the same tokens over ipc, over tcp and inproc (one process), and
# again on a rerun (lookahead auto, its verifiers given the same cost terms);
# another seed gives other tokens; pcg-down leaves no process or socket.
# ports: fixed tcp ports (7650-7652), which no other test uses
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
export PCG_RUNTIME_DIR="$T/rt"
cleanup() { pcg-down >/dev/null 2>&1; [ -n "${pids:-}" ] && kill $pids 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

pcg-mkmodel --out tiny --std 0.3 --seed 2 >/dev/null || exit 1
asg-build --model tiny --theta 0.3 --quiet -o tiny.asg || exit 1
asg-build --model tiny --knn 4 --quiet -o tiny.knn || exit 1
# The cost model's terms given, the same to every verifier below: lookahead
# auto then chooses alike in each, so their tokens can be compared.
costs=0.5,0.1,0.3,0.1
pcg-up --target tiny --draft-layers 0 --asg tiny.asg --knn tiny.knn --costs $costs >up.log 2>&1 ||
	{ cat up.log; exit 1; }
ok "pcg-up: $(tail -n 2 up.log | head -n 1)"
for pol in none sd ssd pcg greedy typical topk lantern; do
	if pcg-synth --policy $pol --max-tokens 40 --tokens "A short test." >"ipc.$pol" 2>"err.$pol"; then
		n=$(tail -n 1 "ipc.$pol" | wc -w)
		[ "$n" -ge 1 ] && [ "$n" -le 40 ] && ok "$pol: $n tokens" || bad "$pol: $n tokens"
	else
		bad "$pol: $(cat "err.$pol")"
	fi
done
grep -q "acceptance per position" err.pcg && ok "pcg reports acceptance per position" || bad "pcg stats"
pcg-synth --policy pcg --max-tokens 40 --tokens "A short test." >again.pcg
cmp -s ipc.pcg again.pcg 2>/dev/null || [ "$(tail -n 1 ipc.pcg)" = "$(tail -n 1 again.pcg)" ] &&
	ok "same seed, same tokens" || bad "rerun with the same seed differs"
pcg-synth --policy pcg --max-tokens 40 --seed 99 --tokens "A short test." >seed99.pcg
[ "$(tail -n 1 ipc.pcg)" != "$(tail -n 1 seed99.pcg)" ] && ok "another seed, other tokens" || bad "seed ignored"
pcg-synth --policy pcg --f16 --max-tokens 40 --tokens "A short test." >f16.pcg && ok "f16 distributions" || bad "f16"
pcg-synth --policy bogus "x" 2>err; [ $? -eq 1 ] && grep -q "policy" err && ok "unknown policy: error" || bad "unknown policy"
# A policy's parameters travel by name: another setting, other acceptance; the
# verifier refuses what the rule does not take.
pcg-synth --policy lantern --policy-args delta=0 --lookahead 3 --max-tokens 40 --tokens "A short test." \
	>l0 2>el0 &&
pcg-synth --policy lantern --policy-args delta=0.5,k=4 --lookahead 3 --max-tokens 40 --tokens \
	"A short test." >l5 2>el5 &&
	[ "$(sed -n 's/.*acceptance rate \([0-9.]*\).*/\1/p' el0)" != "$(sed -n 's/.*acceptance rate \([0-9.]*\).*/\1/p' el5)" ] &&
	ok "lantern --policy-args delta: another acceptance" || bad "lantern args: $(cat el0 el5)"
pcg-synth --policy topk --policy-args delta=0.5 "x" 2>err; [ $? -eq 2 ] && grep -q "takes no parameter 'delta'" err &&
	ok "a parameter the policy does not take: usage error" || bad "topk delta: $(cat err)"
pcg-down >down.log 2>&1
ls rt/*.sock rt/*.pid >/dev/null 2>&1 && bad "sockets or PID files left" || ok "pcg-down cleaned up"

# With codec-decode: four processes, a 16 kHz mono file of 320 samples per code.
# No --asg this time: pcg needs the client to send one.
pcg-up --target tiny --draft-layers 0 --costs $costs \
	--codec-weights "$PCG_ROOT/tests/fixtures/xcodec2/tiny" >up2.log 2>&1 || { cat up2.log; exit 1; }
pcg-synth --policy pcg --max-tokens 40 "A short test." >/dev/null 2>err
[ $? -eq 1 ] && grep -q "needs an ASG" err && ok "pcg without an ASG: error" || bad "pcg without ASG: $(cat err)"
asg-build --model tiny --theta 0.3 --quiet -o - | pcg-synth --asg - --policy pcg --max-tokens 40 \
	--tokens "A short test." >piped.pcg 2>err || bad "asg-build | pcg-synth --asg -: $(cat err)"
[ "$(tail -n 1 ipc.pcg)" = "$(tail -n 1 piped.pcg)" ] && ok "asg-build | pcg-synth --asg -: same tokens" ||
	bad "ASG sent with the request gives other tokens"
printf 'garbage' >bad.asg
pcg-synth --asg bad.asg --policy pcg --max-tokens 5 "x" 2>err
[ $? -eq 1 ] && grep -q "field 'asg'" err && ok "a corrupt ASG in the request: error" || bad "bad asg: $(cat err)"
if pcg-synth --asg tiny.asg --policy pcg --max-tokens 60 --tokens -o out.wav "A short test." >codec.out 2>err; then
	n=$(tail -n 1 codec.out | wc -w)
	hdr=$(od -An -tu4 -j24 -N4 out.wav | tr -d ' ')         # sample rate
	ch=$(od -An -tu2 -j22 -N2 out.wav | tr -d ' ')          # channels
	bytes=$(od -An -tu4 -j40 -N4 out.wav | tr -d ' ')       # data chunk size (PCM16)
	[ "$hdr" = 16000 ] && [ "$ch" = 1 ] && [ "$bytes" -eq $((n * 320 * 2)) ] &&
		ok "out.wav: 16 kHz mono, $n codes x 320 samples" ||
		bad "out.wav: rate $hdr, channels $ch, $bytes bytes for $n codes"
	ls out.wav.* >/dev/null 2>&1 && bad "temporary audio file left" || ok "no temporary audio file"
else
	bad "with codec: $(cat err)"
fi
pcg-synth --policy sd --max-tokens 10 -o /proc/no/such.wav "A short test." 2>err
[ $? -eq 1 ] && grep -q "codec-decode\|such" err && ok "unwritable audio path: error" || bad "unwritable path: $(cat err)"
pcg-down >/dev/null 2>&1

# The same stages over tcp on loopback, started by hand: same tokens.
targetd --model tiny --listen tcp://127.0.0.1:7652 2>t.log & pids="$!"
draftd --model tiny --layers 0 --listen tcp://127.0.0.1:7651 2>d.log & pids="$pids $!"
verifier --tokenizer tiny/tokenizer.json --asg tiny.asg --listen tcp://127.0.0.1:7650 \
	--draft tcp://127.0.0.1:7651 --target tcp://127.0.0.1:7652 --costs $costs 2>v.log &
pids="$pids $!"
for pol in sd pcg none; do
	pcg-synth --verifier tcp://127.0.0.1:7650 --timeout-ms 20000 --policy $pol --max-tokens 40 \
		--tokens "A short test." >"tcp.$pol" 2>err || bad "tcp $pol: $(cat err)"
	[ "$(tail -n 1 "ipc.$pol")" = "$(tail -n 1 "tcp.$pol")" ] && ok "$pol: tcp tokens = ipc tokens" ||
		bad "$pol: tcp and ipc tokens differ"
done
kill $pids
wait
pids=

# One process: the verifier runs the model servers as threads on inproc://.
verifier --local tiny --local-draft-layers 0 --asg tiny.asg --listen "ipc://$T/local.sock" \
	--costs $costs 2>l.log &
pids=$!
for pol in sd pcg none; do
	pcg-synth --verifier "ipc://$T/local.sock" --timeout-ms 20000 --policy $pol --max-tokens 40 \
		--tokens "A short test." >"inproc.$pol" 2>err || bad "inproc $pol: $(cat err)"
	[ "$(tail -n 1 "ipc.$pol")" = "$(tail -n 1 "inproc.$pol")" ] && ok "$pol: inproc tokens = ipc tokens" ||
		bad "$pol: inproc and ipc tokens differ"
done
kill $pids
wait $pids && ok "local verifier: clean exit" || bad "local verifier: exit $?"
pids=
finish
