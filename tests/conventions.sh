#!/bin/sh
# tests/conventions.sh: what every program of bin/ does alike, one row of
# the table below each (a program without a row fails): -h and --help print
# "usage: PROG" to standard output (listing the options the row names) and
# exit 0; --version prints "PROG (pcg-tts) VERSION", VERSION that of
# lib/core/opts.h, and exits 0; an unknown option exits 2 with nothing on
# standard output and a "usage: PROG" line on standard error, naming the
# option first; a file that is
# not there (for programs that read one) exits 1 with one line on standard
# error, "PROG: ..." naming the file, and writes no output file. --help
# lists every option the program's man page lists, and a script's --help
# (pcg-up, pcg-down, pcg-runtime) prints its whole header comment.
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
rel=$(sed -n 's/^#define PCG_VERSION "\(.*\)"$/\1/p' "$ROOT/lib/core/opts.h")
XC=$ROOT/tests/fixtures/xcodec2/tiny
XE=$ROOT/tests/fixtures/xcodec2-enc/tiny

# PROG | what -h lists (;-separated) | arguments that name the missing file
# "nowhere..." (-: the program reads no file) | whether a bad option is named
cat >table <<ROWS
asg-build|--theta|--model nowhere -o x.asg|y
asg-info|--groups|nowhere.asg|y
codec-decode|--llasa-ids;kmeans-gl|--weights $XC --codes nowhere.txt -o x.wav|y
codec-encode|--llasa-ids|--weights $XE nowhere.wav -o x.codes|y
draftd|--layers|--model nowhere --listen ipc://$T/d.sock|y
pcg-httpd|--port|--voice nowhere.json --port 0|y
pcg-keygen|NAME|-|y
pcg-mcd|A.wav B.wav|nowhere.wav $ROOT/tests/fixtures/speech/a.wav|y
pcg-mkmodel|--preset|-|y
pcg-mtp|--top-k|--model nowhere --tokens 1|y
pcg-phonemize|--voice-file|--voice-file nowhere.json --speaker 0 hello|y
pcg-quantize|q4_k_m|--type q8_0 nowhere -o x.gguf|y
pcg-run|--dump-logits|--model nowhere --tokens 1|y
pcg-sim|--trials|--policy sd --draft nowhere.f32 --target nowhere.f32|y
pcg-synth|--prompt-wav|--asg nowhere.asg -o x.wav Hello.|y
pcg-tokenize|--llasa-prompt|--tokenizer nowhere.json hello|y
targetd|--layers|--model nowhere --listen ipc://$T/t.sock|y
tm-build|--alpha|-n 4 -o x.tm nowhere.txt|y
tm-info|--rows|nowhere.tm|y
verifier|--tokenizer|--tokenizer nowhere.json --listen ipc://$T/v.sock|y
ROWS
export PCG_RUNTIME_DIR="$T/rt"

for main in "$ROOT"/*/main.c; do
	p=$(basename "$(dirname "$main")")
	grep -q "^$p|" table || bad "$p has no row in the table of tests/conventions.sh"
done
while IFS='|' read -r p lists args names; do
	for h in -h --help; do
		"$p" $h >out 2>err; rc=$?
		[ $rc -eq 0 ] && [ "$(head -n 1 out | cut -d' ' -f1-2)" = "usage: $p" ] && [ ! -s err ] &&
			ok "$p $h: usage on standard output, exit 0" ||
			bad "$p $h: exit $rc, stdout '$(head -n 1 out)', stderr '$(head -n 1 err)'"
	done
	old_ifs=$IFS; IFS=';'
	for w in $lists; do
		grep -qF -- "$w" out && ok "$p --help lists $w" || bad "$p --help lacks $w"
	done
	IFS=$old_ifs
	v=$("$p" --version 2>&1); rc=$?
	[ $rc -eq 0 ] && [ "$v" = "$p (pcg-tts) $rel" ] && ok "$p --version: $v" ||
		bad "$p --version: exit $rc, '$v', want '$p (pcg-tts) $rel'"
	"$p" --bogus >out 2>err; rc=$?
	[ $rc -eq 2 ] && [ ! -s out ] && grep -q "^usage: $p " err &&
		ok "$p --bogus: exit 2, usage on standard error" ||
		bad "$p --bogus: exit $rc, stdout '$(head -n 1 out)', stderr '$(head -n 1 err)'"
	if [ "$names" = y ]; then
		[ "$(head -n 1 err)" = "$p: unknown option --bogus" ] && ok "$p --bogus: named" ||
			bad "$p --bogus: first line '$(head -n 1 err)'"
	fi
	[ "$args" = - ] && continue
	# shellcheck disable=SC2086 # the row's arguments, split at spaces
	"$p" $args >out 2>err </dev/null; rc=$?
	[ $rc -eq 1 ] && [ "$(wc -l <err)" -eq 1 ] && grep -q "^$p: .*nowhere" err && [ ! -s out ] &&
		ok "$p, a missing file: $(cat err)" ||
		bad "$p $args: exit $rc, want 1 and one line naming nowhere...: $(head -n 3 err)"
	ls x.* >/dev/null 2>&1 && bad "$p, a missing file: left $(ls x.*)" && rm -f x.*
done <table

# --help is whole: every option a program's man page lists (.It Fl --NAME)
# is in its usage; a script's --help is its whole header comment, not a
# fixed range of lines that a longer header cuts mid-sentence.
for m in "$ROOT"/man/*.1 "$ROOT"/man/*.8; do
	p=$(basename "$m" | sed 's/\.[0-9]$//')
	command -v "$p" >/dev/null 2>&1 || continue
	"$p" --help >out 2>&1
	missing=
	for o in $(grep '^\.It Fl' "$m" | grep -o 'Fl -[a-z0-9-]*' | sed 's/^Fl //' | sort -u); do
		grep -qF -- "-$o" out || missing="$missing -$o"
	done
	[ -z "$missing" ] && ok "$p --help lists every option of its man page" ||
		bad "$p --help lacks what man $p names:$missing"
done
for p in pcg-up pcg-down pcg-runtime; do
	f=$ROOT/scripts/$p
	awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$f" >header
	"$f" --help >out 2>err
	if cmp -s out header && [ "$(wc -l <out)" -ge 2 ] && tail -n 1 out | grep -q '\.$'; then
		ok "$p --help: its whole header ($(wc -l <out) lines, ending '$(tail -n 1 out | cut -c 1-40)')"
	else
		bad "$p --help is not its whole header: $(diff out header | head -n 5)"
	fi
done

finish
