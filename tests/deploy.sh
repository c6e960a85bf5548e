#!/bin/sh
# tests/deploy.sh: the pipeline as it is deployed across machines. First the
# systemd units of deploy/systemd: systemd-analyze verify passes them (when
# installed), their Documentation pages ship, and each example settings file
# defines what its unit's ExecStart uses and names files that exist. Then
# four hosts, each a network namespace: draftd, targetd, the verifier (with
# codec-decode on its loopback) and pcg-synth, joined to the verifier's by
# veth pairs, over tcp with CURVE keys from pcg-keygen (server keypairs, allow
# lists, the verifier's peers file); on the demo voice, the tokens of a few
# policies (same seed, lookahead 3) and the audio of one are those of the
# single-host pipeline of pcg-up. Needs root and iproute2
# for the hosts; skips otherwise.
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
PATH=$ROOT/bin:$ROOT/scripts:$PATH
demo=$ROOT/models/demo

# The units, with the source tree standing for the installed one.
mkdir units
for f in "$ROOT"/deploy/systemd/*.service.in; do
	u=units/$(basename "$f" .in)
	sed -e "s|@BINDIR@|$ROOT/bin|g" -e "s|@DATADIR@|$ROOT|g" "$f" >"$u"
	page=$(sed -n 's/^Documentation=man:\([a-z-]*\)(\([1-8]\))$/\1.\2/p' "$u")
	[ -n "$page" ] && [ -f "$ROOT/man/$page" ] && ok "$u: its page $page ships" ||
		bad "$u: Documentation names no page of man/"
	# Each variable of ExecStart is set by the example settings file.
	prog=$(sed -n 's|^EnvironmentFile=/etc/pcg-tts/\(.*\)-%i\.conf$|\1|p' "$u")
	conf=units/$prog.conf
	sed -e "s|@DATADIR@|$ROOT|g" "$ROOT/deploy/systemd/$prog.conf.in" >"$conf" 2>/dev/null ||
		bad "$u: no example $prog.conf.in"
	for v in $(sed -n 's/^ExecStart=//p' "$u" | grep -o '\$[{]*[A-Z_]*' | tr -d '${'); do
		grep -q "^$v=" "$conf" && ok "$prog.conf sets $v" || bad "$prog.conf lacks $v"
	done
	# The files the example names (the demo voice, as make install puts it).
	for p in $(sed -n 's/^[A-Z_]*=//p' "$conf" | tr ' ' '\n' | grep "^$ROOT"); do
		[ -e "$p" ] && ok "$prog.conf: $p exists" || bad "$prog.conf names $p, which does not exist"
	done
done
if command -v systemd-analyze >/dev/null 2>&1; then
	for u in units/*.service; do
		# --man=no: the pages are in man/, not where man(1) looks; checked above.
		expect 0 "systemd-analyze verify $u" systemd-analyze verify --man=no "$PWD/$u"
		[ -s err ] && bad "systemd-analyze warns: $(cat err)"
	done
else
	echo "systemd-analyze not installed: the units' syntax is not checked"
fi

[ "$(id -u)" = 0 ] ||
	{ echo "not root: the hosts (network namespaces) need root: skipped"; exit 77; }
command -v ip >/dev/null 2>&1 || { echo "no ip (iproute2): skipped"; exit 77; }

# The hosts: c (pcg-synth), v (the verifier), d (draftd), t (targetd), a
# veth pair from v to each of the others, one /24 each.
n=pcgdep$$
pids= made= rt_up=
alive() { for p in $pids; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
cleanup() {
	# The daemons stop after the request in progress: 2 s, then SIGKILL.
	[ -z "$pids" ] || kill $pids 2>/dev/null
	i=0
	while [ $i -lt 20 ] && alive; do sleep 0.1; i=$((i + 1)); done
	[ -z "$pids" ] || kill -9 $pids 2>/dev/null
	wait 2>/dev/null
	[ -z "$rt_up" ] || PCG_RUNTIME_DIR=$T/rt pcg-down >/dev/null 2>&1
	for h in $made; do
		ip netns pids "$n$h" 2>/dev/null | xargs -r kill -9 2>/dev/null # anything this test started there
		[ "$h" = v ] || ip -n "${n}v" link del "v$h$$" 2>/dev/null
	done
	for h in $made; do ip netns del "$n$h" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
for h in v c d t; do
	ip netns add "$n$h" 2>/dev/null || {
		echo "cannot create a network namespace (needs iproute2 and CAP_SYS_ADMIN): skipped"; exit 77; }
	made="$made $h"
	ip -n "$n$h" link set lo up || exit 1
done
net=1
for h in c d t; do
	ip link add "v$h$$" netns "${n}v" type veth peer name "$h$$" netns "$n$h" || exit 1
	ip -n "${n}v" addr add "10.78.$net.1/24" dev "v$h$$" && ip -n "${n}v" link set "v$h$$" up &&
		ip -n "$n$h" addr add "10.78.$net.2/24" dev "$h$$" && ip -n "$n$h" link set "$h$$" up || exit 1
	net=$((net + 1))
done
V=10.78.1.1 D=10.78.2.2 TG=10.78.3.2 # the verifier's address to c; draftd's; targetd's

# The keys, as an operator makes them (README, "Deploying across machines").
mkdir keys && cd keys || exit 1
for k in draftd targetd verifier synth; do pcg-keygen $k >/dev/null || bad "pcg-keygen $k"; done
cp verifier.pub draftd.allow
cp verifier.pub targetd.allow
cp synth.pub verifier.allow
echo "tcp://$D:7601 $(cat draftd.pub)" >verifier.peers
echo "tcp://$TG:7602 $(cat targetd.pub)" >>verifier.peers
cd .. || exit 1

# Started with ip netns exec directly: $! is then the daemon.
ip netns exec "${n}t" targetd --model "$demo" --listen "tcp://$TG:7602" --threads 1 \
	--curve-key keys/targetd.key --curve-allow keys/targetd.allow 2>t.log &
pids="$pids $!"
ip netns exec "${n}d" draftd --model "$demo/draft" --listen "tcp://$D:7601" --threads 1 \
	--curve-key keys/draftd.key --curve-allow keys/draftd.allow 2>d.log &
pids="$pids $!"
# The codec on the verifier's loopback needs no keys.
ip netns exec "${n}v" codec-decode --daemon --codec auto --weights "$demo/codec" \
	--listen tcp://127.0.0.1:7603 --threads 1 2>c.log &
pids="$pids $!"
ip netns exec "${n}v" verifier --tokenizer "$demo/tokenizer.json" --voice "$demo/voice.json" \
	--asg "$demo/asg" --tm "$demo/tm" --knn "$demo/knn" --listen "tcp://$V:7600" \
	--draft "tcp://$D:7601" --target "tcp://$TG:7602" --codec tcp://127.0.0.1:7603 \
	--curve-key keys/verifier.key --curve-allow keys/verifier.allow \
	--curve-peers keys/verifier.peers 2>v.log &
pids="$pids $!"
synth() {
	timeout 20 ip netns exec "${n}c" pcg-synth --verifier "tcp://$V:7600" \
		--curve-key keys/synth.key --curve-server keys/verifier.pub "$@"
}
i=0
until synth --ping --timeout-ms 1000 >ping 2>&1; do
	i=$((i + 1))
	[ $i -lt 30 ] || { bad "not ready after 30 tries: $(cat ping); $(tail -n 3 v.log)"; finish; }
	for p in $pids; do kill -0 "$p" 2>/dev/null ||
		{ bad "a daemon exited: $(tail -n 2 t.log d.log c.log v.log)"; finish; }; done
	sleep 0.2
done
ok "four hosts: $(cat ping)"
# The client host reaches the verifier only: no route to the model servers.
expect 1 "no route from the client's host to targetd" timeout 20 ip netns exec "${n}c" \
	pcg-synth --verifier "tcp://$TG:7602" --timeout-ms 1000 --curve-key keys/synth.key \
	--curve-server keys/targetd.pub --ping

policies="pcg sd none mtp-viterbi lantern"
text="Tokens across the hosts."
for p in $policies; do
	expect 0 "across hosts: --policy $p" synth --policy "$p" --lookahead 3 --seed 7 --tokens "$text"
	cp out "net-$p.tok"
done
expect 0 "across hosts: audio" synth --policy pcg --lookahead 3 --seed 7 -o net.wav "$text"
kill $pids 2>/dev/null
wait 2>/dev/null
pids=

# The same on one host, by pcg-up in a runtime directory of this test's.
export PCG_RUNTIME_DIR="$T/rt"
rt_up=1
expect 0 "pcg-up on one host" timeout 60 pcg-up --target "$demo"
for p in $policies; do
	expect 0 "one host: --policy $p" timeout 20 pcg-synth --policy "$p" --lookahead 3 --seed 7 \
		--tokens "$text"
	[ "$(wc -w <out)" -gt 10 ] && ok "$p: $(wc -w <out) tokens" || bad "$p: $(wc -w <out) tokens"
	same "net-$p.tok" out "$p: the tokens across hosts are those of one host"
done
expect 0 "one host: audio" timeout 20 pcg-synth --policy pcg --lookahead 3 --seed 7 \
	-o one.wav "$text"
[ -s one.wav ] && same net.wav one.wav "the audio across hosts is that of one host" ||
	bad "no audio"
expect 0 "pcg-down" pcg-down
rt_up=
finish
