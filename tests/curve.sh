#!/bin/sh
# tests/curve.sh: tcp beyond loopback needs CURVE. In a network namespace
# this test makes (a veth address, no route out), a server on that address
# refuses to start without keys; with its keypair and an allow-list it
# serves a client holding an allowed key, through the verifier. A handshake
# that cannot succeed is said at once (well within the client's timeout), in
# words: a client key not on the allow list, a server key that does not
# match, a CURVE client and a plain server or the other way round, for
# pcg-synth and for the verifier's calls to targetd. Key and allow-list files
# that are devices or FIFOs are refused at once, naming the file; an empty
# allow list and a key file whose halves come from two keypairs refuse to
# start, on loopback too. Needs root and iproute2; skips otherwise.
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
ns=pcgtest$$
ip netns add "$ns" 2>/dev/null || { echo "cannot create a network namespace (needs root and iproute2): skipped"; exit 77; }
pids=
cleanup() {
	[ -n "$pids" ] && kill $pids 2>/dev/null
	wait 2>/dev/null
	ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null # anything this test started there
	ip link del "va$$" 2>/dev/null
	ip netns del "$ns" 2>/dev/null
}
trap cleanup EXIT
ip link add "va$$" type veth peer name "vb$$" || exit 1
ip link set "vb$$" netns "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" addr add 10.77.0.2/24 dev "vb$$"
ip -n "$ns" link set "vb$$" up
IP=10.77.0.2
in_ns() { ip netns exec "$ns" "$@"; }

pcg-mkmodel --out m --std 0.3 >/dev/null
pcg-keygen server >/dev/null && pcg-keygen client >/dev/null && pcg-keygen stranger >/dev/null
[ "$(stat -c %a server.key)" = 600 ] && ok "secret key file mode 0600" || bad "key mode"
expect 1 "keygen never overwrites a secret key" pcg-keygen server
cp client.pub allow
echo "tcp://$IP:7702 $(cat server.pub)" >peers

expect 2 "targetd on $IP without keys: refused" in_ns targetd --model m --listen "tcp://$IP:7702"
err_has "CURVE"
expect 2 "targetd with a key but no allow-list: refused" in_ns targetd --model m --listen "tcp://$IP:7702" --curve-key server.key
# Started with ip netns exec directly (not through a function, which would
# put a subshell between $! and the daemon).
ip netns exec "$ns" targetd --model m --listen "tcp://$IP:7702" --curve-key server.key --curve-allow allow 2>t.log &
pids="$!"
ip netns exec "$ns" draftd --model m --layers 0 --listen tcp://127.0.0.1:7701 2>d.log &
pids="$pids $!"
ip netns exec "$ns" verifier --tokenizer m/tokenizer.json --listen tcp://127.0.0.1:7700 --draft tcp://127.0.0.1:7701 \
	--target "tcp://$IP:7702" --curve-key client.key --curve-peers peers --timeout-ms 1000 2>v.log &
pids="$pids $!"
expect 2 "a client without the server's key: refused" in_ns verifier --tokenizer m/tokenizer.json \
	--listen tcp://127.0.0.1:7709 --target "tcp://$IP:7702"
i=0
until in_ns pcg-synth --verifier tcp://127.0.0.1:7700 --ping >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -lt 50 ] || break; sleep 0.2
done
expect 0 "allowed key: synthesis over CURVE" in_ns pcg-synth --verifier tcp://127.0.0.1:7700 \
	--policy none --max-tokens 10 "Over the wire."
err_has "tokens"

# at_once WHAT: the last command took less than 5 s (its timeout is 30 s)
at_once() {
	s=$(( $(date +%s) - t0 ))
	[ $s -lt 5 ] && ok "$1: said at once" || bad "$1: took $s s"
}

# Another key: the ZAP handler refuses the handshake, and the verifier's call
# to targetd says so at once, to pcg-synth too.
ip netns exec "$ns" verifier --tokenizer m/tokenizer.json --listen tcp://127.0.0.1:7710 --draft tcp://127.0.0.1:7701 \
	--target "tcp://$IP:7702" --curve-key stranger.key --curve-peers peers --timeout-ms 30000 --tries 1 2>s.log &
pids="$pids $!"
sleep 0.5
t0=$(date +%s)
expect 1 "a key not on the list: refused" in_ns pcg-synth --verifier tcp://127.0.0.1:7710 \
	--timeout-ms 30000 --policy none --max-tokens 5 "Let me in."
err_has "this client's key is not allowed"
err_has "$(cat stranger.pub)"
at_once "the verifier's key not on targetd's list"

# pcg-synth to a verifier that listens with CURVE, on $IP and on loopback
ip netns exec "$ns" verifier --tokenizer m/tokenizer.json --listen "tcp://$IP:7720" --draft tcp://127.0.0.1:7701 \
	--target tcp://127.0.0.1:7729 --curve-key server.key --curve-allow allow 2>c1.log &
pids="$pids $!"
ip netns exec "$ns" verifier --tokenizer m/tokenizer.json --listen tcp://127.0.0.1:7721 --draft tcp://127.0.0.1:7701 \
	--target tcp://127.0.0.1:7729 --curve-key server.key --curve-allow allow 2>c2.log &
pids="$pids $!"
sleep 0.5
t0=$(date +%s)
expect 1 "pcg-synth with a key not on the list" in_ns pcg-synth --verifier "tcp://$IP:7720" \
	--curve-key stranger.key --curve-server server.pub --timeout-ms 30000 "Let me in."
err_has "tcp://$IP:7720: this client's key is not allowed"
at_once "a key not on the list"
t0=$(date +%s)
expect 1 "pcg-synth with the wrong server key" in_ns pcg-synth --verifier "tcp://$IP:7720" \
	--curve-key client.key --curve-server stranger.pub --timeout-ms 30000 "Let me in."
err_has "tcp://$IP:7720: the server's key does not match"
at_once "the wrong server key"
t0=$(date +%s)
expect 1 "pcg-synth --ping with the wrong server key" in_ns pcg-synth --verifier "tcp://$IP:7720" \
	--curve-key client.key --curve-server stranger.pub --timeout-ms 30000 --ping
err_has "the server's key does not match"
at_once "--ping, the wrong server key"
# A mechanism mismatch: which end of libzmq's handshake learns of it is a
# race that the client mostly loses (it sees the connection dropped), so
# each is tried a few times.
for try in 1 2 3; do
	t0=$(date +%s)
	expect 1 "pcg-synth without a key, to a CURVE server on loopback ($try)" in_ns pcg-synth \
		--verifier tcp://127.0.0.1:7721 --timeout-ms 30000 "Let me in."
	err_has "tcp://127.0.0.1:7721: the server uses CURVE"
	at_once "no key for a CURVE server ($try)"
	t0=$(date +%s)
	expect 1 "pcg-synth with keys, to a plain server on loopback ($try)" in_ns pcg-synth \
		--verifier tcp://127.0.0.1:7700 --curve-key client.key --curve-server server.pub \
		--timeout-ms 30000 --policy none --max-tokens 5 "Let me in."
	err_has "tcp://127.0.0.1:7700: the server does not use CURVE; give it a key"
	at_once "keys for a plain server ($try)"
done

# Key files that are not regular files: refused at once, naming the file
mkfifo fifo
for f in /dev/zero fifo; do
	t0=$(date +%s)
	expect 1 "pcg-synth --curve-key $f: refused" timeout 10 pcg-synth --curve-key $f --ping
	err_has "$f: not a regular file"
	at_once "pcg-synth --curve-key $f"
	t0=$(date +%s)
	expect 1 "verifier --curve-allow $f: refused" timeout 10 verifier --tokenizer m/tokenizer.json \
		--listen tcp://127.0.0.1:7730 --curve-key server.key --curve-allow $f
	err_has "$f: not a regular file"
	at_once "verifier --curve-allow $f"
done
# CURVE fails closed: an allow list with no key, or a key file whose
# halves come from two keypairs, refuses to start, on loopback too
: >empty.allow
echo "# only a comment" >comment.allow
for f in empty.allow comment.allow; do
	expect 1 "targetd on loopback with $f: refused" timeout 10 targetd --model m \
		--listen tcp://127.0.0.1:7731 --curve-key server.key --curve-allow $f
	err_has "$f: no client key in the allow list"
done
expect 1 "targetd with --curve-allow and no key: refused" timeout 10 targetd --model m \
	--listen tcp://127.0.0.1:7731 --curve-allow allow
err_has "--curve-allow allow without --curve-key"
expect 1 "pcg-synth with --curve-server and no key: refused" timeout 10 pcg-synth \
	--curve-server server.pub --ping
err_has "without --curve-key"
{ grep '^public' server.key; grep '^secret' client.key; } >mixed.key
expect 1 "targetd with a key file of two keypairs: refused" timeout 10 targetd --model m \
	--listen tcp://127.0.0.1:7731 --curve-key mixed.key --curve-allow allow
err_has "mixed.key: the 'public' key is not the 'secret' key's"
expect 1 "pcg-synth with a key file of two keypairs: refused" timeout 10 pcg-synth \
	--curve-key mixed.key --ping
err_has "mixed.key: the 'public' key is not the 'secret' key's"
printf 'public \0\0\0\n' >nul.key
expect 1 "a key file with NUL bytes: refused" timeout 10 pcg-synth --curve-key nul.key --ping
err_has "nul.key:1: a NUL byte"
finish
