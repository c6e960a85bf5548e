#!/bin/sh
# tests/quant.sh: gguf-py (llama.cpp's gguf.quants) reads the bytes of our
# quantiser as pcg_dequantize does, for every block type: K-quant bytes that
# gguf-py cannot produce, dequantised by its independent code to the same
# f32 values, bit for bit. The bytes and values come from
# `test_quantize --dump` (normal data and the cases of tests/fixtures/quant).
# Skips when the Python package gguf is missing (make test-deps).
. "${PCG_ROOT:-.}/tests/shlib"
BIN="$ROOT/build/tests/test_quantize"

if ! python3 -c "import gguf" 2>/dev/null; then
	echo "SKIP: python3 cannot import gguf (make test-deps puts it in build/pyenv)"
	exit 77
fi
[ -x "$BIN" ] || { bad "$BIN is not built (make)"; finish; }
cd "$ROOT" || exit 1
mkdir -p "$T/dump"
expect 0 "test_quantize --dump" "$BIN" --dump "$T/dump"

for t in Q8_0 Q4_0 Q4_K Q5_K Q6_K; do
	if python3 - "$T/dump" "$t" >"$T/py" 2>&1 <<'EOF'
import sys
import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
d, t = sys.argv[1], sys.argv[2]
q = np.fromfile(f"{d}/{t}.bin", dtype=np.uint8)
ours = np.fromfile(f"{d}/{t}.f32", dtype="<f4")
theirs = dequantize(q, GGMLQuantizationType[t]).astype("<f4").reshape(-1)
if theirs.shape != ours.shape:
    sys.exit(f"{t}: {theirs.size} values from gguf-py, {ours.size} from pcg_dequantize")
diff = np.flatnonzero(theirs.view(np.uint32) != ours.view(np.uint32))
if diff.size:
    i = diff[0]
    sys.exit(f"{t}: {diff.size} values differ, first at {i}: gguf-py {theirs[i]!r}, ours {ours[i]!r}")
print(f"{t}: {ours.size} values equal")
EOF
	then ok "$(cat "$T/py")"
	else bad "$(cat "$T/py")"
	fi
done
finish
