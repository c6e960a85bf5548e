#!/usr/bin/env python3
"""make_quant_fixtures.py: golden Q8_0 and Q4_0 bytes for lib/formats/quantize.c,
from gguf-py (llama.cpp's own Python package, gguf.quants.quantize, which
reproduces ggml's quantize_row_q8_0_ref and quantize_row_q4_0_ref).

Writes tests/fixtures/quant/:
  input.f32   768 raw little-endian f32 values: 24 blocks of 32 (3 K-quant
              super-blocks of 256), one case per block, listed in CASES
  q8_0.bin    gguf.quants.quantize(input, Q8_0): 24 blocks of 34 bytes
  q4_0.bin    gguf.quants.quantize(input, Q4_0): 24 blocks of 18 bytes
  cases.txt   block index and name, for the test's messages

Needs numpy and gguf (pip install gguf); make test needs neither. Rerun from
the repository root:

    python3 tests/ref/make_quant_fixtures.py

The block "f32_subnormal" has 1/d overflow to inf: gguf-py's bytes there are
its casts of inf and NaN to integers, which are 0 on x86 (the C quantiser
writes 0 on purpose; the f16 scale is 0, so every value decodes to 0).
"""
import os
import warnings

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

OUT = os.path.join("tests", "fixtures", "quant")
rng = np.random.default_rng(20250220)


def normal(scale=1.0):
    return rng.standard_normal(32) * scale


def block_one_huge():
    x = normal(0.02)
    x[7] = 1000.0
    return x


def block_negative_dominant():
    x = normal()
    x[19] = -50.0
    return x


def block_ties_q8():
    # amax 127 gives d = 1 exactly: k + 0.5 rounds away from zero (roundf)
    x = np.array([127.0] + [k + 0.5 for k in range(-16, 15)], dtype=np.float64)
    return x


def block_ties_q4():
    # max -8 gives d = 1, id = 1: q = trunc(x + 8.5), k + 0.5 rounds up
    x = np.array([-8.0] + [k * 0.5 for k in range(-15, 16)], dtype=np.float64)
    return x


def block_equal_magnitudes():
    # +5 first, then -5: Q4_0 takes the first of the largest magnitudes
    x = normal()
    x[3], x[4] = 5.0, -5.0
    return x


CASES = [
    ("zeros", lambda: np.zeros(32)),
    ("normal", normal),
    ("normal_1e-3", lambda: normal(1e-3)),
    ("one_huge", block_one_huge),
    ("negative_dominant", block_negative_dominant),
    ("all_negative", lambda: -np.abs(normal()) - 0.1),
    ("ties_q8_0", block_ties_q8),
    ("ties_q4_0", block_ties_q4),
    ("f16_subnormal_scale", lambda: normal(1e-5)),
    ("f16_zero_scale", lambda: normal(1e-9)),
    ("f32_subnormal", lambda: np.array([1e-39, -1e-39, 0, 5e-40] * 8)),
    ("constant", lambda: np.full(32, 3.0)),
    ("equal_magnitudes", block_equal_magnitudes),
    ("f16_overflow_scale", lambda: normal(1e6)),
    ("uniform", lambda: rng.uniform(-1, 1, 32)),
    ("student_t3", lambda: rng.standard_t(3, 32)),
    ("positive", lambda: np.abs(normal()) + 0.5),
    ("sparse", lambda: normal() * (rng.uniform(size=32) < 0.2)),
    ("normal_4", normal),
    ("normal_5", normal),
    ("normal_1e2", lambda: normal(1e2)),
    ("normal_6", normal),
    ("one_nonzero", lambda: np.eye(32)[11] * -0.3),
    ("normal_7", normal),
]


def main():
    assert len(CASES) * 32 == 768
    x = np.concatenate([np.asarray(f(), dtype=np.float32) for _, f in CASES])
    x = x.astype("<f4").reshape(1, -1)
    os.makedirs(OUT, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # f32_subnormal
        q8 = quantize(x, T.Q8_0)
        q4 = quantize(x, T.Q4_0)
    assert q8.size == 24 * 34 and q4.size == 24 * 18
    x.tofile(os.path.join(OUT, "input.f32"))
    q8.tofile(os.path.join(OUT, "q8_0.bin"))
    q4.tofile(os.path.join(OUT, "q4_0.bin"))
    with open(os.path.join(OUT, "cases.txt"), "w") as f:
        for i, (name, _) in enumerate(CASES):
            f.write(f"{i} {name}\n")


if __name__ == "__main__":
    main()
