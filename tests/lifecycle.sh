#!/bin/sh
# tests/lifecycle.sh: bringing a pipeline up and down as a new user does:
# pcg-down and pcg-runtime parse their arguments (--help stops nothing),
# pcg-up passes --device and each server's threads on and warms the models
# up before it says ok, a device the machine lacks fails cleanly, a
# second pcg-up refuses while one runs, pcg-down is quick when the daemons
# are idle and signals only processes of the names its PID files announce,
# pcg-synth with no pipeline up fails at once and names pcg-up, notices a
# verifier that dies within a second, and -o against a pipeline without a
# codec is an error that writes no file.
# serial: time bounds (pcg-down under 1.5 s, a dead verifier noticed within 3 s)
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
own_pipeline

expect 0 "pcg-runtime --help" pcg-runtime --help
out_has "Usage: pcg-runtime"
expect 2 "pcg-runtime with an argument" pcg-runtime stop
err_has "unknown argument stop"
expect 0 "pcg-runtime" pcg-runtime
out_has "$T/rt"

# No pipeline: pcg-synth fails at once (well under its 60 s timeout).
start=$(date +%s)
expect 1 "pcg-synth with no pipeline up" pcg-synth "Hello."
err_has "start one with pcg-up"
[ $(($(date +%s) - start)) -le 5 ] && ok "it failed at once" || bad "it took $(($(date +%s) - start)) s"

pcg-mkmodel --out tiny --std 0.3 >/dev/null 2>&1 || bad "pcg-mkmodel"
expect 1 "pcg-up on a device this build or machine lacks" pcg-up --target tiny --draft-layers 0 \
	--device cuda:7
err_has "targetd exited"
[ -z "$(ls "$T/rt"/*.pid 2>/dev/null)" ] && ok "nothing left running" || bad "PID files left"
expect 0 "pcg-up" pcg-up --target tiny --draft-layers 0 --device cpu --target-threads 1 \
	--draft-threads 2
grep -q "tokens 1 " "$T/rt/warmup" && ok "one warm-up request went through" ||
	bad "no warm-up: $(cat "$T/rt/warmup")"
tr '\0' ' ' <"/proc/$(cat "$T/rt/targetd.pid")/cmdline" | grep -q -- "--threads 1 --device cpu" &&
	ok "targetd got its threads and device" || bad "targetd's arguments"
tr '\0' ' ' <"/proc/$(cat "$T/rt/draftd.pid")/cmdline" | grep -q -- "--threads 2 --device cpu" &&
	ok "draftd got its threads and device" || bad "draftd's arguments"
expect 0 "pcg-runtime --running" pcg-runtime --running
[ "$(cut -d' ' -f1 "$T/out" | sort | tr '\n' ' ')" = "draftd targetd verifier " ] &&
	ok "the three daemons run" || bad "pcg-runtime --running: $(cat "$T/out")"
expect 1 "a second pcg-up while one runs, without a draft" pcg-up --target tiny
err_has "a pipeline is already up"
err_has "no draft given and none beside the target"
expect 0 "the first pipeline still answers" pcg-synth --ping
expect 0 "pcg-down --help" pcg-down --help
out_has "Usage: pcg-down"
expect 0 "--help stopped nothing" pcg-synth --ping
expect 2 "pcg-down with an argument" pcg-down now
err_has "unknown argument now"
expect 0 "still up" pcg-synth --ping

# No codec in this pipeline: -o is an error, and no file appears.
expect 1 "pcg-synth -o without a codec" pcg-synth --policy none --max-tokens 5 -o x.wav "Hi."
err_has "no codec"
[ ! -e x.wav ] && ok "no x.wav" || bad "x.wav was written"
expect 0 "tokens only" pcg-synth --policy none --max-tokens 5 "Hi."

pids=$(cat "$T/rt"/*.pid)
start=$(date +%s%N)
expect 0 "pcg-down" pcg-down
ms=$((($(date +%s%N) - start) / 1000000))
[ "$ms" -lt 1500 ] && ok "pcg-down took $ms ms" || bad "pcg-down took $ms ms"
for p in $pids; do
	st=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1)
	[ -z "$st" ] || [ "$st" = Z ] || bad "process $p still runs after pcg-down ($st)"
done
ok "every daemon is gone"
grep -q "ignored SIGTERM" err && bad "pcg-down had to kill: $(cat err)" || ok "no SIGKILL needed"

# pcg-synth's wait is by the work asked for: an utterance longer than the
# old 60 s total would complete; a local verifier that goes away is noticed
# within a second, not at the end of the timeout.
pcg-mkmodel --out slow --hidden 256 --heads 8 --kv-heads 4 --ffn 768 --layers 4 --std 0.3 \
	>/dev/null 2>&1 || bad "pcg-mkmodel slow"
expect 0 "pcg-up a slower model" pcg-up --target slow --draft-layers 0 --no-warmup
# A seed whose utterance runs to 600 tokens (1.2 s or more on 2 cores),
# killed at 0.5 s: a random model's end token comes where its seed and the
# kernels' roundings put it (seed 18 ran to 1,315 tokens once, 653 later).
say() { pcg-synth --policy sd --lookahead 3 "$@" "A longer sentence to speak."; }
seed=$(long_seed 600 say) || bad "no seed of 20 runs to 600 tokens"
say --max-tokens 4000 --seed "${seed:-1}" >long.out 2>long.err &
c=$!
sleep 0.5
kill -9 "$(cat "$T/rt/verifier.pid")"
start=$(date +%s%N)
wait $c
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
[ $rc -eq 1 ] && grep -q "the server is gone" long.err && [ "$ms" -lt 3000 ] &&
	ok "the verifier killed: pcg-synth noticed in $ms ms" ||
	bad "the verifier killed: rc $rc after $ms ms: $(cat long.err)"
expect 0 "pcg-down after the verifier died" pcg-down

# A PID file left behind that now names another program: pcg-down must not
# signal it, and pcg-up takes the lock as stale.
mkdir -p "$T/rt/lock"
sleep 30 &
other=$!
echo "$other" >"$T/rt/targetd.pid"
expect 0 "pcg-down with a stale PID file" pcg-down
kill -0 "$other" 2>/dev/null && ok "the other program was not signalled" || bad "pcg-down killed $other"
echo "$other" >"$T/rt/verifier.pid"
mkdir -p "$T/rt/lock"
expect 0 "pcg-up over a stale lock and PID file" pcg-up --target tiny --draft-layers 0
expect 0 "pcg-down" pcg-down
kill "$other" 2>/dev/null
wait "$other" 2>/dev/null
trap - EXIT INT TERM
finish
