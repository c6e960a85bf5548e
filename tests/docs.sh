#!/bin/sh
# tests/docs.sh: the documentation stays true. Man pages lint clean (mandoc
# -Tlint at warning level, every .Xr names a page we ship, every program has
# a page), and the examples of the README (```sh blocks) and of the man
# pages (EXAMPLES, .Bd -literal blocks) run and succeed.
# ports: the README and man page examples listen on fixed ports (8123, 8124, 8125, 7610-7612, 7699), which no other test uses
. "${PCG_ROOT:-.}/tests/shlib"

if ! command -v mandoc >/dev/null 2>&1; then
	echo "mandoc not installed (scripts/install-deps installs it)"
	exit 77
fi
for page in "$ROOT"/man/*.[1-8]; do
	out=$(mandoc -Tlint -W warning "$page" 2>&1) || bad "$page: $out"
	[ -z "$out" ] || bad "lint: $out"
	for x in $(sed -n 's/^\.Xr \([a-z0-9_.-]*\) \([1-8]\).*/\1.\2/p' "$page"); do
		[ -f "$ROOT/man/$x" ] || bad "$page refers to $x, which is not in man/"
	done
done
for prog in "$ROOT"/*/main.c; do
	p=$(basename "$(dirname "$prog")")
	ls "$ROOT"/man/"$p".[18] >/dev/null 2>&1 || bad "no man page for $p"
done

# Pipelines that examples bring up live in the test's directory, not the user's.
export PCG_RUNTIME_DIR="$T/runtime"

# run_block NAME: runs the commands of a block (one per line) in a fresh dir.
n=0
run_block() {
	n=$((n + 1))
	d="$T/example$n"
	mkdir -p "$d"
	# Examples run from any directory: they name the source tree $PCG_ROOT.
	# Its own process group, killed afterwards: a failing example must not
	# leave the daemons it started running.
	(cd "$d" && PCG_ROOT=$ROOT exec setsid sh -e "$T/block") >"$d.log" 2>&1 &
	pid=$!
	wait $pid
	rc=$?
	kill -TERM -"$pid" 2>/dev/null # dash's kill takes no "--"
	# and a pipeline it left up goes down, so the next examples start clean
	[ $rc -eq 0 ] || pcg-down >/dev/null 2>&1
	if [ $rc -eq 0 ]; then
		echo "ok: $1 example $n"
	else
		bad "$1 example $n failed:"; sed 's/^/    /' "$d.log"; sed 's/^/    $ /' "$T/block"
	fi
}

# README: every ```sh block. A later block may use what an earlier made,
# as a reader would run them in order, so all run in one directory.
awk '/^```sh$/ {on=1; next} /^```$/ {on=0} on' "$ROOT/README.md" >"$T/block"
[ -s "$T/block" ] && run_block README || bad "README has no sh examples"

# Man pages: the .Bd -literal blocks of EXAMPLES, in order, in one directory.
# Commands that make a LLaSA-sized model are skipped (too big for a test);
# a small stand-in of its layout (--preset llasa-1b --hidden N) runs.
# What runs is what a reader sees: the source's escapes undone as mandoc
# renders them (\e a backslash, \(dq a quote, \- a minus, \& nothing), and
# each line must be found as such in the rendered page, so an escape that
# renders otherwise than meant (a bare \n in the source eats what follows)
# fails here.
unesc() { sed -e 's/\\&//g' -e 's/\\(dq/"/g' -e "s/\\\\(aq/'/g" -e 's/\\-/-/g' -e 's/\\e/\\/g'; }
for page in "$ROOT"/man/*.[1-8]; do
	awk '/^\.Sh EXAMPLES/ {ex=1; next} /^\.Sh / {ex=0}
	     ex && /^\.Bd -literal/ {on=1; next} /^\.Ed/ {on=0} ex && on' "$page" | unesc >"$T/src"
	[ -s "$T/src" ] || continue
	mandoc -Tascii "$page" 2>/dev/null | col -bx 2>/dev/null | sed 's/^[[:space:]]*//' >"$T/rendered"
	odd=0
	while IFS= read -r line; do
		l=$(printf '%s\n' "$line" | sed 's/^[[:space:]]*//')
		[ -z "$l" ] && continue
		grep -qxF -- "$l" "$T/rendered" || { odd=1; bad "$(basename "$page"): the example line '$l' renders otherwise"; }
	done <"$T/src"
	[ $odd = 0 ] && ok "$(basename "$page"): its examples render as written"
	awk '!/--preset llasa/ || /--hidden/' "$T/src" >"$T/block"
	[ -s "$T/block" ] && run_block "$(basename "$page")"
done

finish
