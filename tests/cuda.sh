#!/bin/sh
# tests/cuda.sh: says loudly when the CUDA build is off (no nvcc, or CUDA=0);
# checks --device on every program that takes it: a bad name is a usage
# error (2), and on a machine without a GPU (or a build without CUDA) cuda
# is a failure (1) whose message says which. The CUDA tests themselves are
# binaries in build/tests/cuda-* that skip when there is no device.
. "${PCG_ROOT:-.}/tests/shlib"
m=models/demo
for prog in targetd draftd; do
	expect 2 "$prog --device bogus" $prog --model $m --device bogus --listen "ipc://$T/x.sock"
	err_has "device 'bogus': want cpu, cuda or cuda:N"
done
expect 2 "verifier --device bogus" verifier --local $m --device cuda:x --listen "ipc://$T/v.sock"
err_has "device 'cuda:x'"
if ls build/tests/cuda-* >/dev/null 2>&1; then
	echo "CUDA tests built: $(ls build/tests/cuda-* | tr '\n' ' ')"
	build/tests/cuda-cuda_probe >/dev/null 2>&1
	if [ $? -eq 77 ]; then
		for prog in targetd draftd; do
			expect 1 "$prog --device cuda without a GPU" $prog --model $m --device cuda \
				--listen "ipc://$T/x.sock"
			err_has "device cuda:0: no CUDA device on this machine"
		done
		expect 1 "verifier --local --device cuda:1 without a GPU" verifier --local $m \
			--device cuda:1 --listen "ipc://$T/v.sock"
		err_has "no CUDA device"
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
