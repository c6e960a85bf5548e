#!/bin/sh
# tests/layers.sh: lib/'s folders are layers, each on those before it:
#   core formats engine wire text speculate codec serve
# (and lib/cuda, the CUDA backend, on any of them but serve). A file may
# include a header of its own folder or of a folder before it, never one of a
# folder after it: this fails naming the file, the header and both folders.
# One exception, by name: lib/engine/cudaload.c, the device table's loader of
# lib/cuda, includes the library's interface (cuda/library.h), whose table
# holds codec functions; it is the one file that opens the library. And no
# two headers of lib/ share a name.
allowed="lib/engine/cudaload.c:cuda/library.h"
cd "$(dirname "$0")/.." || exit 2
order="core formats engine wire text speculate codec serve"
rank() { # rank FOLDER: its place in order (cuda: just below serve)
	i=0
	for d in $order; do
		[ "$d" = "$1" ] && { echo $i; return; }
		i=$((i + 1))
	done
	[ "$1" = cuda ] && { echo 6; return; }
	echo 99
}
home() { # home FILE-FOLDER HEADER: the folder of lib/ the include finds
	case "$2" in
	../*/*) h=${2#../}; echo "${h%%/*}"; return ;;
	cuda/*) echo cuda; return ;;
	esac
	[ -f "lib/$1/$2" ] && { echo "$1"; return; } # its own folder first
	for d in $order; do
		[ -f "lib/$d/$2" ] && { echo "$d"; return; }
	done
}
bad=0 n=0
for f in lib/*/*.c lib/*/*.h lib/cuda/*.cu lib/cuda/*.cuh; do
	[ -f "$f" ] || continue
	d=$(basename "$(dirname "$f")")
	r=$(rank "$d")
	for h in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
		n=$((n + 1))
		hd=$(home "$d" "$h")
		if [ -z "$hd" ]; then
			echo "FAIL: $f includes \"$h\", which no folder of lib/ holds"
			bad=$((bad + 1))
		elif [ "$(rank "$hd")" -gt "$r" ] && [ "$f:$h" != "$allowed" ]; then
			echo "FAIL: $f ($d) includes $h of $hd, a folder that comes after it ($order)"
			bad=$((bad + 1))
		fi
	done
done
[ -d lib/core ] || { echo "FAIL: lib/ has no folders"; exit 1; }
# A header's name is unique in lib/: every folder is on the include path and
# includes use bare names, so a second asg.h would be picked by search order.
dups=$(find lib -name '*.h' -o -name '*.cuh' | sed 's|.*/||' | sort | uniq -d)
if [ -n "$dups" ]; then
	for h in $dups; do echo "FAIL: two headers named $h: $(find lib -name "$h" | tr '\n' ' ')"; done
	bad=$((bad + 1))
else
	echo "ok: every header name in lib/ is unique"
fi
if [ $bad -eq 0 ]; then
	echo "ok: $n includes in lib/, each of its own folder or one before it"
	exit 0
fi
exit 1
