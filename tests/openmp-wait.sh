#!/bin/sh
# tests/openmp-wait.sh: the servers' OpenMP threads spin a bounded time
# between parallel regions (lib/serve/service.h): targetd, draftd and the
# verifier run with GOMP_SPINCOUNT set to a count (the spins of 0.5 ms on
# this CPU, so between 100 and 10^8); a user's own OMP_WAIT_POLICY or
# GOMP_SPINCOUNT is kept as given.
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
own_pipeline
envof() { tr '\0' '\n' <"/proc/$(cat "$PCG_RUNTIME_DIR/$1.pid")/environ" | sed -n "s/^$2=//p"; }
expect 0 "pcg-up" pcg-up --no-warmup
for d in targetd draftd verifier; do
	n=$(envof $d GOMP_SPINCOUNT)
	case $n in
	''|*[!0-9]*) bad "$d: GOMP_SPINCOUNT '$n'" ;;
	*) [ "$n" -ge 100 ] && [ "$n" -le 100000000 ] && ok "$d: GOMP_SPINCOUNT $n" ||
		bad "$d: GOMP_SPINCOUNT $n out of [100, 1e8]" ;;
	esac
done
expect 0 "the pipeline serves" pcg-synth --policy none --max-tokens 8 --tokens "Hello."
pcg-down >/dev/null 2>&1
expect 0 "pcg-up, OMP_WAIT_POLICY=PASSIVE" env OMP_WAIT_POLICY=PASSIVE pcg-up --no-warmup
[ "$(envof targetd OMP_WAIT_POLICY)" = PASSIVE ] && [ -z "$(envof targetd GOMP_SPINCOUNT)" ] &&
	ok "the user's OMP_WAIT_POLICY kept, no spin count added" ||
	bad "targetd: OMP_WAIT_POLICY '$(envof targetd OMP_WAIT_POLICY)', GOMP_SPINCOUNT '$(envof targetd GOMP_SPINCOUNT)'"
pcg-down >/dev/null 2>&1
expect 0 "pcg-up, GOMP_SPINCOUNT=77" env GOMP_SPINCOUNT=77 pcg-up --no-warmup
[ "$(envof targetd GOMP_SPINCOUNT)" = 77 ] && ok "the user's GOMP_SPINCOUNT kept" ||
	bad "targetd: GOMP_SPINCOUNT '$(envof targetd GOMP_SPINCOUNT)'"
pcg-down >/dev/null 2>&1
finish
