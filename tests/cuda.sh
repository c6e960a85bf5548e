#!/bin/sh
# tests/cuda.sh: says loudly when the CUDA build is off (no nvcc, or CUDA=0);
# the CUDA tests themselves are binaries in build/tests/cuda-* that skip
# when there is no device.
if ! ls build/tests/cuda-* >/dev/null 2>&1; then
	echo "CUDA tests not built (nvcc not found, or CUDA=0): GPU code untested"
	exit 77
fi
echo "CUDA tests built: $(ls build/tests/cuda-* | tr '\n' ' ')"
