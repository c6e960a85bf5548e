#!/bin/sh
# tests/faults.sh: the pipeline under faults, each bounded in time:
#  - kill -9 of targetd or draftd mid-utterance: the client gets a clear error
#    within 3 s (the verifier sees an ipc server gone within a second, or
#    gives up after 2 tries of 1 s);
#  - targetd killed and started again at once: the verifier's retry reaches
#    the new one, which has lost the session, and the verifier completes by
#    resending the context;
#  - SIGSTOP/SIGCONT of targetd for 1.5 s: the request times out, is resent,
#    the late replies are dropped by id, and the utterance completes;
#  - SIGTERM: every daemon exits 0 within 2 s;
#  - a prompt whose prefill outlasts the per-try timeout completes, because a
#    request's deadline grows with the positions it asks for.
# serial: time bounds (an error within 3 s, every daemon gone within 2 s of SIGTERM)
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
pids=
trap 'kill -9 $pids 2>/dev/null; wait 2>/dev/null' EXIT
now_ms() { date +%s%3N; }

# A model slow enough that an utterance lasts seconds on 2 cores.
pcg-mkmodel --out m --hidden 256 --heads 8 --kv-heads 4 --ffn 768 --layers 4 --std 0.3 >/dev/null || exit 1
V=ipc://$T/v.sock D=ipc://$T/d.sock TG=ipc://$T/t.sock
start_target() { targetd --model m --listen "$TG" 2>>t.log & tpid=$!; pids="$pids $tpid"; }
start_draft() { draftd --model m --layers 0 --listen "$D" 2>>d.log & dpid=$!; pids="$pids $dpid"; }
start_target
start_draft
verifier --tokenizer m/tokenizer.json --listen "$V" --draft "$D" --target "$TG" \
	--timeout-ms 1000 --tries 2 2>v.log & vpid=$!
pids="$pids $vpid"
# (lookahead 3 and a seed whose tokens run past the kills below)
say() { pcg-synth --verifier "$V" --timeout-ms 30000 --lookahead 3 "$@" "A longer sentence to speak."; }
synth() { say --seed "$seed" "$@"; }
i=0
until pcg-synth --verifier "$V" --ping >/dev/null 2>&1; do i=$((i + 1)); [ $i -lt 50 ] || { bad "not up"; exit 1; }; sleep 0.2; done
# a seed whose utterance runs to 600 tokens (1.2 s or more on 2 cores)
seed=$(long_seed 600 say --policy sd) || { bad "no seed of 20 runs to 600 tokens"; finish; }
ok "seed $seed runs to 600 tokens"

# 1. kill -9 targetd mid-utterance: error within 3 s.
synth --policy sd --max-tokens 4000 >out1 2>err1 & c=$!
sleep 0.5
t0=$(now_ms)
kill -9 $tpid
wait $c; rc=$?
dt=$(( $(now_ms) - t0 ))
[ $rc -eq 1 ] && grep -qE "no reply|server is gone" err1 && [ $dt -le 3000 ] && ok "targetd killed: error in ${dt} ms: $(cat err1)" ||
	bad "targetd killed: rc $rc after ${dt} ms: $(cat err1)"

# 2. killed and back at once: the verifier resends the context and completes.
start_target
sleep 0.5
synth --policy sd --max-tokens 600 >out2 2>err2 & c=$!
sleep 0.5
kill -9 $tpid
start_target
wait $c; rc=$?
resends=$(sed -n 's/.*resends \([0-9]*\).*/\1/p' err2)
[ $rc -eq 0 ] && [ "${resends:-0}" -ge 1 ] && ok "targetd restarted: completed with $resends resend(s)" ||
	bad "targetd restarted: rc $rc, $(cat err2) $(cat out2)"

# 3. SIGSTOP for 1.5 s: timeout, resend, late replies dropped, completes.
synth --policy sd --max-tokens 600 >out3 2>err3 & c=$!
sleep 0.5
kill -STOP $tpid
sleep 1.5
kill -CONT $tpid
wait $c; rc=$?
[ $rc -eq 0 ] && ok "targetd stopped 1.5 s: completed" || bad "SIGSTOP: rc $rc: $(cat err3)"

# 4. kill -9 draftd mid-utterance: error within 3 s too.
synth --policy sd --max-tokens 4000 >out4 2>err4 & c=$!
sleep 0.5
t0=$(now_ms)
kill -9 $dpid
wait $c; rc=$?
dt=$(( $(now_ms) - t0 ))
[ $rc -eq 1 ] && [ $dt -le 3000 ] && ok "draftd killed: error in ${dt} ms" || bad "draftd killed: rc $rc after $dt ms"

# 5. SIGTERM: clean exit within 2 s (once the new draftd is up: before its
# main() runs, SIGTERM's default action would end it with no clean-up).
rm -f "$T/d.sock"
start_draft
i=0
while [ ! -S "$T/d.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
for p in $vpid $tpid $dpid; do kill -TERM $p 2>/dev/null; done
t0=$(now_ms)
for p in $vpid $tpid $dpid; do
	while kill -0 $p 2>/dev/null && [ $(( $(now_ms) - t0 )) -lt 2000 ]; do sleep 0.05; done
	kill -0 $p 2>/dev/null && bad "pid $p alive 2 s after SIGTERM"
done
wait $vpid; rv=$?
[ $rv -eq 0 ] && ok "SIGTERM: all stopped in $(( $(now_ms) - t0 )) ms" || bad "verifier exit $rv"
left=$(ls "$T"/*.sock 2>/dev/null); [ -z "$left" ] && ok "no socket files left" || bad "socket files left: $left"

# 6. A prompt whose prefill outlasts the per-try timeout: the deadline of a
# request grows with the positions it asks for (--ms-per-position), so it
# completes; without that allowance the same prefill is taken for a dead
# server. A model of 134 M parameters and a prompt of about 600 positions:
# a prefill of well over 0.3 s on any machine, decode steps of a few ms.
pcg-mkmodel --out big --hidden 1024 --heads 8 --kv-heads 2 --ffn 4096 --layers 8 --std 0.1 \
	>/dev/null || exit 1
long=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' 1 2 3 4 5 6 7 8 9 10 11 12)
for allow in 100 0; do
	verifier --local big --local-draft-layers 0 --timeout-ms 300 --tries 1 \
		--ms-per-position "$allow" --listen "ipc://$T/l$allow.sock" 2>"l$allow.log" & lp=$!
	pids="$pids $lp"
	pcg-synth --verifier "ipc://$T/l$allow.sock" --timeout-ms 60000 --policy none \
		--max-tokens 3 "$long" >"o$allow" 2>"e$allow"
	echo $? >"rc$allow"
	kill -TERM $lp
	wait $lp
done
[ "$(cat rc100)" = 0 ] && ok "a long prefill with 100 ms a position: completed" ||
	bad "a long prefill with 100 ms a position: $(cat e100)"
[ "$(cat rc0)" = 1 ] && grep -q "no reply after 1 tries of 300 ms" e0 &&
	ok "the same without the allowance: $(cat e0)" || bad "without the allowance: rc $(cat rc0) $(cat e0)"
finish
