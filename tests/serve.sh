#!/bin/sh
# tests/serve.sh: many listeners at once on the demo voice, through the
# four-process pipeline: concurrent clients get the tokens and the audio
# they get alone (same seeds), to the byte; the first audio chunk reaches
# the client before the last token is made; audio streamed to standard
# output (WAV and raw) equals the file written here and the file
# codec-decode --chunk writes from the same tokens, with the default growing
# chunks (--chunk-first 5) and with fixed ones (--chunk-first 25), and a
# first chunk beyond --chunk is refused by name; whole-utterance decoding
# is still there; a request beyond the sessions waits and is told its
# place, one beyond the queue gets "busy"; a client killed mid-utterance is
# cancelled within a round and does not delay the next request; an
# interrupted client cancels its request; with two replicas of targetd and
# draftd, one targetd killed with SIGKILL in the middle of 8 sessions, all 8
# complete with the tokens they have alone; with one replica stopped
# (SIGSTOP), a ping names it within 3 s and a session on the other is
# relayed meanwhile.
# serial: time bounds (a request served within 2 s) and many clients at once
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
own_pipeline
M=$ROOT/models/demo
[ -f "$M/config.json" ] || { echo "no demo voice (make voice)"; exit 77; }
ms() { date +%s%3N; }
# data bytes of a 16-bit WAV file (after its 44-byte header)
data() { tail -c +45 "$1"; }

expect 0 "pcg-up the demo voice, 4 sessions" pcg-up --target "$M" --sessions 4
texts="The ox and the sheep.|And the goat, and the hart.|Ye shall eat of them.|These are the beasts."
# alone, one after another
i=0
echo "$texts" | tr '|' '\n' >texts
while read -r t; do
	i=$((i + 1))
	pcg-synth --seed $i --tokens -o alone$i.wav "$t" >alone$i.out 2>alone$i.err ||
		bad "alone $i: $(cat alone$i.err)"
done <texts
# the same four at once
i=0
pids=
while read -r t; do
	i=$((i + 1))
	pcg-synth --seed $i --tokens -o conc$i.wav "$t" >conc$i.out 2>conc$i.err & pids="$pids $!"
done <texts
for p in $pids; do wait $p || bad "a concurrent client failed"; done
for i in 1 2 3 4; do
	[ "$(tail -n 1 alone$i.out)" = "$(tail -n 1 conc$i.out)" ] && [ -s conc$i.wav ] &&
		ok "client $i: the same tokens alone and among 4" ||
		bad "client $i: tokens differ alone and among 4"
	same alone$i.wav conc$i.wav "client $i: the same audio alone and among 4"
done

# streamed: WAV to a pipe, raw to a pipe, WAV to a file: the same samples
t="These are the beasts which ye shall eat: the ox, the sheep, and the goat."
pcg-synth --seed 9 --tokens -o file.wav "$t" >file.out 2>file.err || bad "file: $(cat file.err)"
[ "$(wc -l <file.out)" -eq 1 ] && grep -q "^first audio after" file.err &&
	ok "stdout: the tokens alone; stderr: the statistics" ||
	bad "stdout $(head -c 300 file.out) / stderr $(head -c 300 file.err)"
pcg-synth --seed 9 -o - "$t" 2>pipe.err | cat >pipe.wav
pcg-synth --seed 9 --raw -o - "$t" 2>raw.err | cat >pipe.raw
pcg-synth --seed 9 -o - "$t" >tofile.wav 2>tofile.err
data file.wav >file.pcm
data pipe.wav >pipe.pcm
same file.pcm pipe.pcm "streamed WAV on a pipe = the file's samples"
same file.pcm pipe.raw "streamed raw PCM = the file's samples"
same file.wav tofile.wav "streamed WAV to a file = the file, header and all"
[ "$(od -An -tu4 -j40 -N4 pipe.wav | tr -d ' ')" = 4294967295 ] &&
	ok "a piped WAV says its length is unknown" || bad "piped WAV data size"
if command -v sox >/dev/null 2>&1; then
	sox -t wav - conv.flac <pipe.wav 2>sox.err && [ -s conv.flac ] &&
		ok "sox converts the stream as it comes" || bad "sox: $(cat sox.err)"
fi
# the same chunking offline: codec-decode --chunk on the tokens; the default
# chunks grow (5, 10, 20, then 25 codes), --chunk-first 25 gives the fixed
# chunks of before
tail -n 1 file.out | tr ' ' '\n' >ids
offline() { # offline OUT OPTIONS...: the tokens of file.out decoded as the daemon does
	o=$1
	shift
	expect 0 "codec-decode $*" codec-decode --codec kmeans-gl --weights "$M/codec" --llasa-ids \
		--speech-offset "$(pcg-tokenize --tokenizer "$M" '<|s_0|>')" --codes ids "$@" -o "$o"
	[ -s "$o" ] && data "$o" >"$o.pcm"
}
offline offline.wav --chunk 25 --chunk-first 5 --context 50 --lookahead 4
same file.pcm offline.wav.pcm \
	"streamed audio (chunks of 5, 10, 20, 25, ...) = codec-decode --chunk 25 --chunk-first 5"
pcg-synth --seed 9 --chunk-first 25 --tokens -o fixed.wav "$t" >fixed.out 2>fixed.err ||
	bad "--chunk-first 25: $(cat fixed.err)"
[ "$(tail -n 1 fixed.out)" = "$(tail -n 1 file.out)" ] && ok "--chunk-first 25: the same tokens" ||
	bad "--chunk-first 25: other tokens"
offline fixedoff.wav --chunk 25 --context 50 --lookahead 4
data fixed.wav >fixed.pcm
same fixed.pcm fixedoff.wav.pcm "--chunk-first 25 (fixed chunks) = codec-decode --chunk 25 of the same tokens"
! cmp -s fixed.pcm file.pcm && ok "fixed and growing chunks: other samples" ||
	bad "fixed and growing chunks give the same samples"
expect 2 "--chunk-first beyond --chunk" pcg-synth --chunk 10 --chunk-first 11 -o bad.wav "$t"
err_has "--chunk-first: 11: want 0 to 10"
[ ! -e bad.wav ] && ok "no file for a refused request" || bad "bad.wav written"
# whole-utterance decoding: --chunk 0
pcg-synth --seed 9 --chunk 0 -o whole.wav "$t" >whole.out 2>whole.err || bad "whole: $(cat whole.err)"
[ "$(stat -c %s whole.wav)" = "$(stat -c %s file.wav)" ] && ! cmp -s whole.wav file.wav &&
	ok "--chunk 0: the whole utterance at once (other samples, same length)" ||
	bad "--chunk 0: $(stat -c %s whole.wav) vs $(stat -c %s file.wav) bytes"
# batch mode: one utterance per line into numbered WAVs, each path printed;
# a line that fails is reported and the rest still spoken
printf '%s\n\n.\n%s\n' "$t" "$t" | pcg-synth --seed 9 --output-dir batch >batch.out 2>batch.err
rc=$?
[ $rc -eq 1 ] && [ "$(cat batch.out)" = "$(printf 'batch/0001.wav\nbatch/0004.wav')" ] &&
	[ ! -e batch/0002.wav ] && [ ! -e batch/0003.wav ] && grep -q "line 3 not spoken" batch.err &&
	ok "--output-dir: lines 1 and 4 written, the empty line skipped, line 3 reported" ||
	bad "--output-dir: rc $rc, stdout $(cat batch.out), stderr $(tail -n 3 batch.err)"
same file.wav batch/0001.wav "a batch line = the same utterance alone, to the byte"
same file.wav batch/0004.wav "every line gets the seed"
expect 2 "--output-dir with a TEXT" pcg-synth --output-dir batch "Hello."
err_has "standard input"
# the first audio before the last token
first=$(sed -n 's/^first audio after \([0-9.]*\) s.*/\1/p' file.err)
total=$(sed -n 's/.* in \([0-9.]*\) s:.*/\1/p' file.err)
[ -n "$first" ] && [ -n "$total" ] && awk -v f="$first" -v t="$total" 'BEGIN { exit !(f < t / 2) }' &&
	ok "first audio after $first s of $total s" || bad "first audio $first s, total $total s"
pcg-down >/dev/null 2>&1

# One session, a queue of one: the second waits and is told, the third is busy.
expect 0 "pcg-up with 1 session and a queue of 1" pcg-up --target "$M" --sessions 1 --queue 1
pcg-synth --max-tokens 1500 --seed 1 "$t $t $t" >q1.out 2>q1.err & c1=$!
sleep 0.3
pcg-synth --max-tokens 20 --seed 2 "The ox." >q2.out 2>q2.err & c2=$!
sleep 0.3
expect 1 "a third request: busy" pcg-synth --max-tokens 20 "The goat."
err_has "busy"
wait $c1 || bad "the first request failed: $(cat q1.err) $(grep -i cancel "$T/rt/verifier.log")"
wait $c2 && grep -q "queued, 1 requests ahead" q2.err && ok "the second waited, told its place" ||
	bad "the second: $(cat q2.err)"

# A client killed mid-utterance: its session goes within a round, and the
# next request (the only session is free again) starts at once.
pcg-synth --max-tokens 3000 --seed 3 "$t $t $t $t $t $t" >/dev/null 2>&1 & c=$!
sleep 0.4
kill -9 $c
wait $c 2>/dev/null
s=$(ms)
expect 0 "the next request after a killed client" pcg-synth --max-tokens 10 --seed 4 "The ox."
dt=$(( $(ms) - s ))
[ $dt -lt 2000 ] && ok "it ran at once (${dt} ms)" || bad "it waited ${dt} ms"
grep -q "cancelled" "$T/rt/verifier.log" 2>/dev/null || true
# SIGINT: pcg-synth cancels and says so
pcg-synth --max-tokens 3000 --seed 5 "$t $t $t $t $t $t" >int.out 2>int.err & c=$!
sleep 0.4
kill -INT $c
wait $c
rc=$?
[ $rc -eq 130 ] && grep -q "request cancelled" int.err && ok "SIGINT: the request is cancelled" ||
	bad "SIGINT: rc $rc: $(cat int.err)"
expect 0 "still up" pcg-synth --ping
out_has "0 queued"
pcg-down >/dev/null 2>&1

# Replicas: a targetd killed mid-utterance; its sessions move, same tokens.
expect 0 "pcg-up with 2 replicas" pcg-up --target "$M" --replicas 2 --sessions 8
out_has "targetd 2 of 2 replicas ok"
[ "$(pcg-runtime --running | grep -c '^targetd')" = 2 ] && ok "two targetd run" || bad "replicas"
t="These are the beasts which ye shall eat: the ox, the sheep, and the goat, and the hart."
for i in 1 2 3 4 5 6 7 8; do
	pcg-synth --seed $i --tokens "$t" >ra$i.out 2>ra$i.err || bad "alone $i: $(cat ra$i.err)"
done
pids=
for i in 1 2 3 4 5 6 7 8; do pcg-synth --seed $i --tokens "$t" >rc$i.out 2>rc$i.err & pids="$pids $!"; done
sleep 0.25
kill -9 "$(cat "$T/rt/targetd-2.pid")"
n=0
for p in $pids; do wait $p && n=$((n + 1)); done
[ $n = 8 ] && ok "all 8 sessions completed with a replica killed" || bad "$n of 8 completed"
same=0
for i in 1 2 3 4 5 6 7 8; do [ "$(tail -n 1 ra$i.out)" = "$(tail -n 1 rc$i.out)" ] && same=$((same + 1)); done
[ $same = 8 ] && ok "each with the tokens it has alone" || bad "$same of 8 with their alone tokens"
moved=$(grep -c "moves to another replica" "$T/rt/verifier.log")
[ "$moved" -ge 1 ] && ok "$moved sessions moved to the other replica" || bad "no session moved"
expect 0 "ping with a replica gone" pcg-synth --ping
out_has "targetd 1 of 2 replicas ok (down: "
expect 0 "pcg-down" pcg-down

# A stopped replica (SIGSTOP) and pings: the hub hands pings to its pinger,
# so a session on the healthy replica is relayed while a ping waits for the
# stopped one (the ping answers within its 2 s bound and names it).
expect 0 "pcg-up with 2 replicas again" pcg-up --target "$M" --replicas 2 --sessions 4
kill -STOP "$(cat "$T/rt/targetd-2.pid")"
t0=$(ms)
pcg-synth --ping >ping1.out 2>ping1.err &
p1=$!
sleep 0.2
t1=$(ms)
pcg-synth --seed 1 --max-tokens 20 --tokens "The ox." >during.out 2>during.err ||
	bad "a synth during the ping: $(cat during.err)"
t2=$(ms)
wait $p1 || bad "the ping with a stopped replica: $(cat ping1.err)"
t3=$(ms)
[ $((t2 - t1)) -lt 1500 ] && ok "a synth while a ping waits on a stopped replica: $((t2 - t1)) ms" ||
	bad "the synth took $((t2 - t1)) ms while a ping waited (the hub blocked)"
grep -q "targetd 1 of 2 replicas ok (down: " ping1.out && ok "the ping names the stopped replica" ||
	bad "ping: $(cat ping1.out ping1.err)"
[ $((t3 - t0)) -lt 3000 ] && ok "the ping answered in $((t3 - t0)) ms" || bad "the ping took $((t3 - t0)) ms"
kill -CONT "$(cat "$T/rt/targetd-2.pid")"
expect 0 "pcg-down" pcg-down
[ -z "$(pcg-runtime --running)" ] && ok "every daemon is gone" || bad "left: $(pcg-runtime --running)"
trap - EXIT INT TERM
finish
