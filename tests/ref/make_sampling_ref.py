#!/usr/bin/env python3
"""make_sampling_ref.py: golden probabilities for tests/unit/test_sampling.c.

Runs Hugging Face transformers' TemperatureLogitsWarper, TopKLogitsWarper and
TopPLogitsWarper in the order generate() applies them, then softmax (f32,
torch on CPU), and writes under tests/fixtures/sampling/:
  index.txt                one case a line: name n temperature top_k top_p
                           logits-file probs-file
  <logits>.logits.f32      raw little-endian f32 inputs
  <case>.probs.f32         raw little-endian f32 expected probabilities
Temperature 0 (greedy, which HF refuses) is a one-hot at torch.argmax.

Ties at the top-p boundary are only reproducible for n <= 16, where
torch.sort is stable; for larger cases this script checks that no tie and no
near-tie of the cumulative mass sits at the boundary, so the kept set does
not depend on sort order or on f32 versus f64 sums.

Usage: python3 tests/ref/make_sampling_ref.py [OUTDIR]
Needs numpy, torch and transformers (tested with transformers 5.x).
"""
import os
import sys

import numpy as np
import torch
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

SPEECH_VOCAB = 65537
# Distance the cumulative mass must keep from top_p at the boundary of a
# large case: torch's f32 softmax is within ~1e-6 relative of the exact one,
# so its cumulative sums move by at most ~1e-6; twice that is safe.
BOUNDARY_MARGIN = 2e-6


def hf_probs(logits, temperature, top_k, top_p):
    """The distribution generate(do_sample=True) samples from."""
    scores = torch.from_numpy(logits.astype(np.float32)).reshape(1, -1)
    if temperature == 0:
        probs = torch.zeros_like(scores)
        probs[0, torch.argmax(scores, dim=-1)] = 1.0
        return probs[0].numpy()
    warpers = []
    # generate() skips the warpers that would do nothing (utils.py,
    # _get_logits_processor): temperature 1, top_k 0, top_p 1.
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(float(temperature)))
    if top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=float(top_p)))
    input_ids = torch.zeros((1, 1), dtype=torch.long)
    for w in warpers:
        scores = w(input_ids, scores)
    return torch.softmax(scores, dim=-1)[0].numpy()


def check_boundary(name, logits, temperature, top_k, top_p, probs):
    """For n > 16: no tie across the kept/removed line, no near-tie of mass."""
    if len(logits) <= 16 or temperature == 0:
        return
    x = (logits.astype(np.float32) / np.float32(temperature)).astype(np.float64)
    kept = probs > 0
    if kept.all():
        return
    lowest_kept = x[kept].min()
    if np.any(x[~kept] == lowest_kept):
        sys.exit(f"{name}: a tie straddles the kept/removed boundary")
    if top_p >= 1.0:
        return
    # The mass above each token after top-k, as the C code's cut sees it.
    finite = np.isfinite(x)
    if top_k > 0:
        kth = np.sort(x[finite])[::-1][min(top_k, finite.sum()) - 1]
        finite &= x >= kth
    xs = np.sort(x[finite])[::-1]
    p = np.exp(xs - xs[0])
    p /= p.sum()
    above = np.concatenate(([0.0], np.cumsum(p)[:-1]))
    nkept = int(kept.sum())
    gaps = [abs(above[nkept - 1] - top_p)]
    if nkept < len(above):
        gaps.append(abs(above[nkept] - top_p))
    if min(gaps) < BOUNDARY_MARGIN:
        sys.exit(f"{name}: cumulative mass within {min(gaps):.2e} of top_p")
    print(f"{name}: boundary margin {min(gaps):.2e}")


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "fixtures", "sampling")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240611)

    logits = {}
    # A broad distribution over the speech range.
    logits["speech_broad"] = (rng.standard_normal(SPEECH_VOCAB) * 2.0).astype(np.float32)
    # A peaked one like a trained model's: a few strong tokens over a long
    # tail, and masked (-inf) tokens as a model's unused ids would be.
    peaked = rng.standard_normal(SPEECH_VOCAB) * 1.5
    peaked[rng.choice(SPEECH_VOCAB, 20, replace=False)] += rng.uniform(8.0, 14.0, 20)
    peaked[rng.choice(SPEECH_VOCAB, 100, replace=False)] = -np.inf
    logits["speech_peaked"] = peaked.astype(np.float32)
    # Small: every parameter combination is cheap here.
    logits["grid"] = (rng.standard_normal(1000) * 2.5).astype(np.float32)
    # Ties (n <= 16, where torch.sort is stable, so HF's choice is defined).
    logits["ties4"] = np.array([1, 1, 1, 1], np.float32)
    logits["ties_k"] = np.array([3, 1, 2, 2, 0, -1, 2, -np.inf, 2.5, 2], np.float32)
    logits["ties_max"] = np.array([0.5, 2, -1, 2, 1, 2], np.float32)
    logits["masked"] = np.array([-np.inf, 0.3, -np.inf, 1.7, -0.4, -np.inf, 1.7, 0.0],
                                np.float32)
    logits["equal"] = np.full(7, -2.25, np.float32)
    logits["one"] = np.array([0.75], np.float32)

    cases = [
        # name, logits, temperature, top_k, top_p
        ("broad_plain", "speech_broad", 1.0, 0, 1.0),
        ("broad_k50_t08", "speech_broad", 0.8, 50, 1.0),
        ("broad_p09_t13", "speech_broad", 1.3, 0, 0.9),
        ("broad_k50_p095_t08", "speech_broad", 0.8, 50, 0.95),
        ("broad_p05", "speech_broad", 1.0, 0, 0.5),
        ("peaked_k50_p095", "speech_peaked", 1.0, 50, 0.95),
        ("peaked_p09_t13", "speech_peaked", 1.3, 0, 0.9),
    ]
    for t in (0.8, 1.0, 1.3):
        for k in (0, 1, 50):
            for p in (1.0, 0.95, 0.5):
                cases.append((f"grid_t{t:g}_k{k}_p{p:g}", "grid", t, k, p))
    cases += [
        ("grid_greedy", "grid", 0.0, 0, 1.0),
        ("ties4_p05", "ties4", 1.0, 0, 0.5),
        ("ties4_p075", "ties4", 1.0, 0, 0.75),
        ("ties_k2", "ties_k", 1.0, 2, 1.0),
        ("ties_k3_t08", "ties_k", 0.8, 3, 1.0),
        ("ties_k4_p05", "ties_k", 1.0, 4, 0.5),
        ("ties_k50_p095", "ties_k", 1.3, 50, 0.95),
        ("ties_max_k1", "ties_max", 1.0, 1, 1.0),
        ("ties_max_p001", "ties_max", 1.0, 0, 0.001),
        ("ties_max_p05_t08", "ties_max", 0.8, 0, 0.5),
        ("ties_max_greedy", "ties_max", 0.0, 0, 1.0),
        ("masked_plain", "masked", 1.0, 0, 1.0),
        ("masked_k2_t13", "masked", 1.3, 2, 1.0),
        ("masked_k50_p05", "masked", 0.8, 50, 0.5),
        ("equal_t13", "equal", 1.3, 0, 1.0),
        ("equal_k3", "equal", 1.0, 3, 1.0),
        ("equal_p05", "equal", 1.0, 0, 0.5),
        ("one_k1_p05", "one", 0.8, 1, 0.5),
    ]

    for name, x in logits.items():
        x.astype("<f4").tofile(os.path.join(out, f"{name}.logits.f32"))
    lines = ["# name n temperature top_k top_p logits-file probs-file",
             "# written by tests/ref/make_sampling_ref.py; f32 little-endian"]
    for name, lname, t, k, p in cases:
        x = logits[lname]
        probs = hf_probs(x, t, k, p)
        if not np.all(np.isfinite(probs)) or abs(probs.sum() - 1) > 1e-4:
            sys.exit(f"{name}: not a distribution")
        check_boundary(name, x, t, k, p, probs)
        probs.astype("<f4").tofile(os.path.join(out, f"{name}.probs.f32"))
        lines.append(f"{name} {len(x)} {t:g} {k} {p:g} {lname}.logits.f32 {name}.probs.f32")
    with open(os.path.join(out, "index.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(cases)} cases in {os.path.relpath(out)}")


if __name__ == "__main__":
    main()
