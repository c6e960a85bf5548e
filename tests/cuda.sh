#!/bin/sh
# tests/cuda.sh: says loudly when the CUDA build is off (no nvcc, or CUDA=0);
# checks --device on every program that takes it: a bad name is a usage
# error (2), and on a machine without a GPU (or a build without CUDA) cuda
# is a failure (1) whose message says which. A run on the CPU maps no CUDA
# library: the programs do not link them, and open libpcg-cuda.so (which
# does) on the first --device cuda; where it cannot be opened that is one
# line naming the file, exit 1. The CUDA tests themselves are binaries in
# build/tests/cuda-* that skip when there is no device.
. "${PCG_ROOT:-.}/tests/shlib"
m=models/demo
cudalibs='libcudart|libcublas|libcufft'

# Not linked: in any build, no program names a CUDA library.
for prog in bin/*; do
	ldd "$prog" 2>/dev/null | grep -qE "$cudalibs" && bad "$prog links $(ldd "$prog" | grep -oE "($cudalibs)[^ ]*" | tr '\n' ' ')"
done
[ "$fails" -eq 0 ] && ok "no program links cudart, cuBLAS or cuFFT"
# Not mapped: an idle targetd on the CPU, once it serves.
targetd --model $m --threads 1 --listen "ipc://$T/idle.sock" 2>"$T/idle.err" & pid=$!
i=0
while [ $i -lt 100 ] && ! grep -q "serving" "$T/idle.err"; do sleep 0.1; i=$((i + 1)); done
if grep -q "serving" "$T/idle.err"; then
	grep -qE "$cudalibs" "/proc/$pid/maps" &&
		bad "targetd on the CPU maps $(grep -oE "($cudalibs)[^ ]*" "/proc/$pid/maps" | sort -u | tr '\n' ' ')" ||
		ok "targetd on the CPU maps no CUDA library ($(awk '/^VmRSS/ { print $2, $3 }' "/proc/$pid/status") resident)"
else
	bad "targetd did not serve within 10 s: $(cat "$T/idle.err")"
fi
kill $pid 2>/dev/null; wait $pid 2>/dev/null
for prog in targetd draftd; do
	expect 2 "$prog --device bogus" $prog --model $m --device bogus --listen "ipc://$T/x.sock"
	err_has "device 'bogus': want cpu, cuda or cuda:N"
done
expect 2 "verifier --device bogus" verifier --local $m --device cuda:x --listen "ipc://$T/v.sock"
err_has "device 'cuda:x'"
if ls build/tests/cuda-* >/dev/null 2>&1; then
	echo "CUDA tests built: $(ls build/tests/cuda-* | tr '\n' ' ')"
	build/tests/cuda-cuda_probe >/dev/null 2>&1
	probe=$?
	# With a GPU, a program opens the library and runs there (the CUDA
	# tests link the CUDA code themselves and do not open it).
	[ $probe -eq 0 ] && expect 0 "bench-forward --device cuda, through libpcg-cuda.so" \
		bench-forward --model $m --device cuda --ctx 8 --steps 2
	if [ $probe -eq 77 ]; then
		for prog in targetd draftd; do
			expect 1 "$prog --device cuda without a GPU" $prog --model $m --device cuda \
				--listen "ipc://$T/x.sock"
			err_has "device cuda:0: no CUDA device on this machine"
		done
		expect 1 "verifier --local --device cuda:1 without a GPU" verifier --local $m \
			--device cuda:1 --listen "ipc://$T/v.sock"
		err_has "no CUDA device"
	fi
	# A copy of targetd away from the tree finds no libpcg-cuda.so
	# (its RUNPATH is relative to the program).
	if [ -e build/libpcg-cuda.so ]; then
		mkdir -p "$T/away/bin" && cp bin/targetd "$T/away/bin/"
		expect 1 "--device cuda where libpcg-cuda.so is not" "$T/away/bin/targetd" --model $m \
			--device cuda --listen "ipc://$T/x.sock"
		err_has "targetd: device cuda:0: cannot open the CUDA backend: libpcg-cuda.so: "
		[ "$(wc -l <"$T/err")" -eq 1 ] && ok "in one line" || bad "more than one line: $(cat "$T/err")"
	else
		bad "CUDA tests built but not build/libpcg-cuda.so"
	fi
	finish
fi
for prog in targetd draftd; do
	expect 1 "$prog --device cuda in a build without CUDA" $prog --model $m --device cuda \
		--listen "ipc://$T/x.sock"
	err_has "this build has no CUDA backend"
done
[ "$fails" -eq 0 ] || finish
echo "CUDA tests not built (nvcc not found, or CUDA=0): GPU code untested"
exit 77
