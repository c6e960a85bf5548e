#!/bin/sh
# tests/kernels-shown.sh: a user sees which kernels run. targetd and draftd
# log the float and quantised families they chose (the words of
# bench-forward, PCG_MATMUL_ISA and PCG_QPATH), and pcg-up prints that line
# for each model server; a family forced through the environment is the one
# shown, on any CPU (the portable one exists everywhere).
. "${PCG_ROOT:-.}/tests/shlib"
cd "$T" || exit 1
own_pipeline
expect 0 "pcg-up" pcg-up --no-warmup
for d in targetd draftd; do
	out_has "pcg-up: $d kernels: float "
	grep -q "^$d: kernels: float [a-z0-9-]*, quantised [a-z0-9-]*$" "$PCG_RUNTIME_DIR/$d.log" &&
		ok "$d's log names its kernels" || bad "$d.log: $(grep kernels "$PCG_RUNTIME_DIR/$d.log")"
done
native=$(sed -n 's/^pcg-up: targetd kernels: float \([^,]*\),.*/\1/p' "$T/out")
pcg-down >/dev/null 2>&1
expect 0 "pcg-up, the portable families forced" env PCG_MATMUL_ISA=generic PCG_QPATH=generic \
	pcg-up --no-warmup
out_has "pcg-up: targetd kernels: float generic, quantised generic"
out_has "pcg-up: draftd kernels: float generic, quantised generic"
expect 0 "the pipeline serves on them" pcg-synth --policy sd --lookahead 2 --max-tokens 8 --tokens "Hello."
pcg-down >/dev/null 2>&1
[ -n "$native" ] && ok "the CPU's own family: $native" || bad "no family shown without forcing"
finish
