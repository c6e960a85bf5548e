#!/bin/sh
# tests/outputs.sh: -o as lib/core/fileio.h promises, for asg-build, tm-build,
# codec-encode, codec-decode and pcg-synth (through a pipeline of its own):
# a missing file is created and a regular one replaced (the bytes of a
# reference run); a symbolic link is written through to its target (also
# a dangling one) and stays a link; /dev/null takes the output and stays a
# device; /dev/full fails with exit 1 and "No space left on device" and
# stays a device; a FIFO read by cat and /dev/stdout into a pipe get the
# bytes and stay what they are; a link planted at the old temporary name
# NAME.tmp is not followed (its victim stays as it was); a run killed by a
# file-size limit leaves the old file as it was; a replaced private file
# keeps its mode and owner; a temporary file of a run killed two days ago
# is removed; and no temporary file is ever left behind.
# timeout: 120
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
export PCG_RUNTIME_DIR="$T/rt"
cleanup() { pcg-down >/dev/null 2>&1; wait 2>/dev/null; }
trap cleanup EXIT

is_dev() { [ -c "$1" ] && [ ! -L "$1" ]; }
# data FILE: with x=wav the samples (after the 44-byte header, whose sizes
# a pipe cannot have), else the whole file
data() { if [ "$x" = wav ]; then tail -c +45 "$1"; else cat "$1"; fi; }
# no_partials WHAT: no temporary file in . or sub
no_partials() {
	if ls -A . sub | grep -q '\.partial$'; then bad "$1: a temporary file is left: $(ls -A . sub | grep partial)"
	else ok "$1: no temporary file left"; fi
}

# check NAME EXT [ulimit]: runs write_to (a function each program defines:
# write_to PATH) on every kind of path; ulimit: also under a file-size limit
check() {
	p=$1 x=$2
	rm -rf sub && mkdir sub
	expect 0 "$p: a new file" write_to "new.$x"
	[ -f "new.$x" ] && [ -s "new.$x" ] && cp "new.$x" "ref.$x" || bad "$p: new.$x not written"
	echo old >"old.$x"
	expect 0 "$p: a regular file replaced" write_to "old.$x"
	same "old.$x" "ref.$x" "$p: the replaced file has the new bytes"
	# a private file stays private, and its owner's (as root: another user's)
	echo old >"priv.$x"
	chmod 600 "priv.$x"
	owner=$(id -u)
	[ "$owner" != 0 ] || { chown 65534:65534 "priv.$x"; owner=65534; }
	expect 0 "$p: a private file replaced" write_to "priv.$x"
	[ "$(stat -c '%a %u' "priv.$x")" = "600 $owner" ] && ok "$p: its mode 600 and owner $owner kept" ||
		bad "$p: the replaced private file is $(stat -c '%a %U' "priv.$x")"
	# a temporary file of a run killed outright, two days ago: removed
	: >".stale.$x.abcdef.partial"
	touch -d '2 days ago' ".stale.$x.abcdef.partial"
	expect 0 "$p: beside an old temporary file" write_to "stale.$x"
	[ ! -e ".stale.$x.abcdef.partial" ] && ok "$p: the stale temporary file removed" ||
		bad "$p: .stale.$x.abcdef.partial is still there"
	echo old >"sub/target.$x"
	ln -s "sub/target.$x" "link.$x"
	expect 0 "$p: a symbolic link" write_to "link.$x"
	[ -L "link.$x" ] && ok "$p: the link stays a link" || bad "$p: the link was replaced"
	same "sub/target.$x" "ref.$x" "$p: the link's target has the bytes"
	ln -s "sub/later.$x" "dangling.$x"
	expect 0 "$p: a dangling link" write_to "dangling.$x"
	[ -L "dangling.$x" ] && same "sub/later.$x" "ref.$x" "$p: a dangling link's target is created" ||
		bad "$p: the dangling link was replaced"
	echo V >victim
	ln -s victim "y.$x.tmp"
	expect 0 "$p: a link planted at y.$x.tmp" write_to "y.$x"
	[ "$(cat victim)" = V ] && [ -f "y.$x" ] && [ ! -L "y.$x" ] &&
		ok "$p: the planted link is not followed" || bad "$p: victim: $(head -c 40 victim)"
	rm -f "y.$x.tmp" victim
	expect 0 "$p: /dev/null" write_to /dev/null
	is_dev /dev/null && ok "$p: /dev/null is still a device" || bad "$p: /dev/null replaced"
	expect 1 "$p: /dev/full fails" write_to /dev/full
	err_has "/dev/full"
	err_has "No space left on device"
	is_dev /dev/full && ok "$p: /dev/full is still a device" || bad "$p: /dev/full replaced"
	mkfifo fifo
	timeout 20 cat fifo >from-fifo & # bounded: a writer that never opens it
	expect 0 "$p: a FIFO" write_to fifo
	wait
	[ -p fifo ] && ok "$p: the FIFO is still a FIFO" || bad "$p: the FIFO was replaced"
	data from-fifo >a && data "ref.$x" >b && same a b "$p: cat read the bytes from the FIFO"
	rm -f fifo
	(write_to /dev/stdout 2>err.stdout; echo $? >rc.stdout) | cat >piped
	[ "$(cat rc.stdout)" = 0 ] && data piped >a && data "ref.$x" >b &&
		same a b "$p: /dev/stdout into a pipe" || bad "$p: /dev/stdout: $(cat err.stdout)"
	if [ $# -gt 2 ]; then
		echo old >"keep.$x"
		(ulimit -f 4; write_to "keep.$x") >/dev/null 2>&1
		[ $? -ne 0 ] && [ "$(cat "keep.$x")" = old ] && ok "$p: a file-size limit: old file kept" ||
			bad "$p: under a file-size limit: keep.$x is $(head -c 40 "keep.$x")"
	fi
	no_partials "$p"
	rm -f ./*."$x" sub/* a b piped from-fifo
}

pcg-mkmodel --out tiny --std 0.3 --seed 2 >/dev/null || exit 1

write_to() { asg-build --model tiny --theta 0.3 --quiet -o "$1"; }
check asg-build asg ulimit
expect 0 "asg-build -o -" sh -c 'asg-build --model tiny --theta 0.3 --quiet -o - | cat >dash.asg'
asg-build --model tiny --theta 0.3 --quiet -o ref.asg && same dash.asg ref.asg "asg-build: '-' is standard output"
rm -f dash.asg ref.asg

awk 'BEGIN { for (i = 0; i < 20000; i++) printf "%d ", (i * i + 7 * i) % 500; print "" }' >ids.txt
write_to() { tm-build -n 500 --quiet -o "$1" ids.txt; }
check tm-build tm ulimit

command -v sox >/dev/null || { echo "sox missing (scripts/install-deps installs it)"; exit 1; }
sox -n -r 16000 -c 1 -b 16 in.wav synth 1 sine 300 2>/dev/null || exit 1
write_to() { codec-encode --weights "$PCG_ROOT/tests/fixtures/xcodec2-enc/tiny" --threads 2 --dtype f32 in.wav -o "$1"; }
check codec-encode codes
# its messages: what it says on /dev/full
codec-encode --weights "$PCG_ROOT/tests/fixtures/xcodec2-enc/tiny" --threads 2 --dtype f32 in.wav -o /dev/full 2>err
grep -q "^codec-encode: /dev/full: write: No space left on device" err && ok "codec-encode: /dev/full named" ||
	bad "codec-encode on /dev/full: $(cat err)"

codec-encode --weights "$PCG_ROOT/tests/fixtures/xcodec2-enc/tiny" --threads 2 --dtype f32 in.wav -o codes.txt 2>/dev/null
write_to() { codec-decode --weights "$PCG_ROOT/tests/fixtures/xcodec2/tiny" --threads 2 --codes codes.txt --format wav -o "$1"; }
check codec-decode wav ulimit

# pcg-synth: audio through a pipeline with the codec
pcg-up --target tiny --draft-layers 0 --codec-weights "$PCG_ROOT/tests/fixtures/xcodec2/tiny" >up.log 2>&1 ||
	{ cat up.log; exit 1; }
write_to() { pcg-synth --quiet --policy sd --max-tokens 30 -o "$1" "A short test."; }
check pcg-synth wav ulimit
pcg-down >/dev/null 2>&1
finish
