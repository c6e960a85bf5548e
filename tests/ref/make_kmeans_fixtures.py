#!/usr/bin/env python3
"""make_kmeans_fixtures.py: reference output of the kmeans-gl codec's decoder
(lib/codec/kmeans_codec.h) for the C test tests/unit/test_kmeans_codec.c.

A tiny random codebook (K = 16 log-magnitude centroids of a 1024-point STFT),
fixed codes, and the waveform that Griffin-Lim gives for them, computed here
in float64 with numpy by the same steps as the C decoder: the same seeded
initial phase (splitmix64), the same iteration count, torch.istft's window
normalisation (checked against torch.istft itself when torch is installed).

Usage, from the repository root (numpy and safetensors; torch optional):
    python3 tests/ref/make_kmeans_fixtures.py

Writes tests/fixtures/kmeans/tiny/: model.safetensors, config.json,
codes.txt and ref.f32 (the waveform, raw little-endian float32). The output is
deterministic.
"""
import json
import os

import numpy as np
from safetensors.numpy import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "kmeans", "tiny")
CFG = {"codec": "kmeans-gl", "sample_rate": 16000, "n_fft": 1024, "hop": 320,
       "n_iter": 32, "seed": 7, "codebook_size": 16}
N_CODES = 40

M64 = (1 << 64) - 1


def uniform(seed, idx):
    """u(seed, i) of kmeans_codec.h: splitmix64, top 24 bits / 2^24."""
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) + (idx.astype(np.uint64) + np.uint64(1)) *
             np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float64) / 16777216.0


def window(n):
    """torch.hann_window(n), periodic."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def istft(X, n_fft, hop):
    """torch.istft(X.T, n_fft, hop, window=hann, center=True, length=hop*T)."""
    T = X.shape[0]
    w = window(n_fft)
    frames = np.fft.irfft(X, n=n_fft, axis=1) * w
    nbuf = n_fft + hop * (T - 1)
    buf = np.zeros(nbuf)
    wsum = np.zeros(nbuf)
    for t in range(T):
        buf[t * hop:t * hop + n_fft] += frames[t]
        wsum[t * hop:t * hop + n_fft] += w * w
    half = n_fft // 2
    L = hop * T
    return buf[half:half + L] / wsum[half:half + L]


def stft(x, n_fft, hop, T):
    """torch.stft(x, n_fft, hop, window=hann, center=True, pad_mode='constant'),
    the first T frames, as rows."""
    half = n_fft // 2
    xp = np.concatenate([np.zeros(half), x, np.zeros(half)])
    w = window(n_fft)
    frames = np.stack([xp[t * hop:t * hop + n_fft] * w for t in range(T)])
    return np.fft.rfft(frames, axis=1)


def decode(logmag, codes, cfg):
    """The kmeans-gl decoder in float64."""
    n_fft, hop = cfg["n_fft"], cfg["hop"]
    F = n_fft // 2 + 1
    T = len(codes)
    M = np.exp(logmag[codes].astype(np.float64))
    ph = 2 * np.pi * uniform(cfg["seed"], np.arange(T * F)).reshape(T, F)
    X = M * np.exp(1j * ph)
    for _ in range(cfg["n_iter"]):
        Y = stft(istft(X, n_fft, hop), n_fft, hop, T)
        a = np.abs(Y)
        X = np.where(a < 1e-12, M + 0j, M * Y / np.maximum(a, 1e-300))
    return istft(X, n_fft, hop)


def check_against_torch(X, cfg):
    try:
        import torch
    except ImportError:
        print("torch not installed: istft not cross-checked")
        return
    n_fft, hop = cfg["n_fft"], cfg["hop"]
    T = X.shape[0]
    ref = torch.istft(torch.from_numpy(X.T.copy()), n_fft, hop,
                      window=torch.hann_window(n_fft, dtype=torch.float64),
                      center=True, length=hop * T).numpy()
    err = np.max(np.abs(ref - istft(X, n_fft, hop)))
    assert err < 1e-10, err
    x = np.random.default_rng(1).standard_normal(hop * T)
    S = torch.stft(torch.from_numpy(x), n_fft, hop,
                   window=torch.hann_window(n_fft, dtype=torch.float64),
                   center=True, pad_mode="constant", return_complex=True).numpy().T[:T]
    err = np.max(np.abs(S - stft(x, n_fft, hop, T)))
    assert err < 1e-9, err
    print("istft and stft agree with torch (max abs error %.1e)" % err)


def main():
    rng = np.random.default_rng(20261122)
    K, F = CFG["codebook_size"], CFG["n_fft"] // 2 + 1
    # Log-magnitudes shaped like speech frames: a falling spectral envelope, a
    # few harmonic peaks, noise; magnitudes of order 1 to 1e-3.
    f = np.arange(F) / F
    cents = np.empty((K, F), dtype=np.float32)
    for k in range(K):
        f0 = rng.uniform(0.01, 0.04)
        harm = np.exp(-((f / f0) % 1.0 - 0.5) ** 2 / 0.02) if k % 4 else 0 * f
        cents[k] = (-6 * f + 2.0 * harm + 0.3 * rng.standard_normal(F) - 1.0)
    codes = rng.integers(0, K, N_CODES)
    codes[:8] = np.arange(8)  # every run of the test sees consecutive distinct codes

    T = len(codes)
    X0 = np.exp(cents[codes].astype(np.float64)) * np.exp(1j * rng.uniform(0, 6.3, (T, F)))
    check_against_torch(X0, CFG)
    y = decode(cents, codes, CFG)

    os.makedirs(OUT, exist_ok=True)
    save_file({"centroids": cents}, os.path.join(OUT, "model.safetensors"))
    with open(os.path.join(OUT, "config.json"), "w") as fh:
        json.dump(CFG, fh, indent=1)
        fh.write("\n")
    with open(os.path.join(OUT, "codes.txt"), "w") as fh:
        fh.write(" ".join(str(int(c)) for c in codes) + "\n")
    y.astype("<f4").tofile(os.path.join(OUT, "ref.f32"))
    print("wrote %s: %d codes, %d samples, rms %.4f" % (OUT, T, len(y), np.sqrt(np.mean(y * y))))


if __name__ == "__main__":
    main()
