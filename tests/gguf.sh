#!/bin/sh
# tests/gguf.sh: a file written by gguf_writer (test_gguf --write) read by
# gguf-py's GGUFReader, the reference reader: every key with its type and
# value, every tensor with its type, shape and bytes (the patterns of
# tests/unit/test_gguf.c: write_roundtrip). Skips (77) without gguf-py,
# which make test installs into build/pyenv when it can.
. "${PCG_ROOT:-.}/tests/shlib"
PY=${PYTHON:-python3}

"$PY" -c "import gguf, numpy" 2>/dev/null || { echo "gguf-py not installed (make test-deps puts it in build/pyenv): skipped"; exit 77; }
[ -x "$ROOT/build/tests/test_gguf" ] || { echo "build/tests/test_gguf not built"; exit 1; }

expect 0 "test_gguf --write" "$ROOT/build/tests/test_gguf" --write "$T/rt.gguf"
expect 0 "gguf-py reads it as written" "$PY" - "$T/rt.gguf" <<'PYEOF'
import sys
import numpy as np
import gguf

V = gguf.GGUFValueType
r = gguf.GGUFReader(sys.argv[1])
want = {
    "general.architecture": ([V.STRING], "test"),
    "w.u32": ([V.UINT32], 4000000000),
    "w.i32": ([V.INT32], -7),
    "w.f32": ([V.FLOAT32], 0.25),
    "w.bool": ([V.BOOL], True),
    "w.str": ([V.STRING], "\u00fcn\u00ef"),
    "w.arr_str": ([V.ARRAY, V.STRING], ["x", "", "yz"]),
    "w.arr_i32": ([V.ARRAY, V.INT32], [1, -2, 3]),
    "w.arr_f32": ([V.ARRAY, V.FLOAT32], [0.5, -1.5]),
    "w.arr_empty": ([V.ARRAY], []),  # gguf-py shows no element type for an empty array
}
keys = [k for k in r.fields if not k.startswith("GGUF.")]
assert keys == list(want), keys
for k, (types, value) in want.items():
    f = r.fields[k]
    assert [V(t) for t in f.types] == types, (k, f.types)
    got = f.contents()
    assert got == value, (k, got, value)
assert r.fields["GGUF.version"].contents() == 3

Q = gguf.GGMLQuantizationType
tensors = [("t.f32", Q.F32, [8, 3]), ("t.f16", Q.F16, [6]), ("t.bf16", Q.BF16, [4, 2]),
           ("t.q8_0", Q.Q8_0, [64, 2]), ("t.q4_0", Q.Q4_0, [32]), ("t.q4_k", Q.Q4_K, [256]),
           ("t.q5_k", Q.Q5_K, [256, 2]), ("t.q6_k", Q.Q6_K, [512]), ("t.4d", Q.F32, [2, 3, 2, 2])]
assert len(r.tensors) == len(tensors)
for i, (t, (name, qt, ne)) in enumerate(zip(r.tensors, tensors)):
    assert t.name == name and t.tensor_type == qt, (t.name, t.tensor_type)
    assert list(t.shape) == ne, (name, t.shape)
    assert t.data_offset % 32 == 0, name
    raw = np.asarray(t.data).tobytes()
    block, size = gguf.GGML_QUANT_SIZES[qt]
    assert len(raw) == int(np.prod(ne)) // block * size == t.n_bytes, name
    if qt == Q.F32:
        want_v = np.arange(int(np.prod(ne)), dtype=np.float32) * 0.5 - i
        assert np.array_equal(np.frombuffer(raw, dtype=np.float32), want_v), name
    else:
        k = np.arange(len(raw), dtype=np.uint64)
        want_b = ((k * 31 + i * 7 + (k >> 8)) & 255).astype(np.uint8)
        assert raw == want_b.tobytes(), name
    # gguf-py can dequantise every type it was given
    assert gguf.quants.dequantize(np.asarray(t.data), qt).size == int(np.prod(ne)), name
print("gguf-py read %d keys and %d tensors as written" % (len(keys), len(r.tensors)))
PYEOF
cat "$T/out"
finish
