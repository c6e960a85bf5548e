#!/usr/bin/env python3
"""codec_study.py: what a speech code of the demo voice must keep to stay
intelligible. Each design turns the held-out utterances of a corpus
(make_corpus.py) into codes, or into the analysis they would be made from,
and back into audio; scripts/pcg-eval then gives Whisper base's WER of the
result (docs/BENCHMARKS.md, "Demo voice 2: the codec").

Designs (the first argument):
    orig             the corpus's own audio (the ceiling)
    gl-true          Griffin-Lim (32 iterations) of the true STFT magnitudes:
                     the kmeans-gl decoder with no quantisation
    vq-K             k-means of log-magnitude frames, K centroids (kmeans-gl)
    rvq-K1-K2        two-stage residual k-means in the log domain (K1 x K2 codes)
    sf-true          source-filter magnitudes, unquantised: WORLD's f0 (Harvest)
                     and spectral envelope (CheapTrick) at 50 frames a second,
                     |X| = envelope x the harmonic comb of f0 (voiced) or the
                     envelope (unvoiced), gains fitted on training frames, then
                     Griffin-Lim
    world            WORLD's own vocoder on its unquantised analysis at 20 ms

Usage:
    python3 tools/voice/codec_study.py DESIGN --corpus DIR --out DIR [--heldout 40]
        [--train-utts 540]
    scripts/pcg-eval --no-mcd OUT/manifest.tsv

Needs numpy and torch; sf-true and world need pyworld (PyPI: pip install
pyworld), which is for this study only.
"""
import argparse
import os
import sys
import time
import wave

import numpy as np
import torch

RATE, HOP, NFFT = 16000, 320, 1024
FB = NFFT // 2 + 1


def read(path):
    with wave.open(path) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64) / 32768


def write(path, x):
    y = np.clip(np.round(x * 32767), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(y.tobytes())


def mag(x):
    """|STFT| as the kmeans-gl codec frames it: [T, FB]."""
    T = len(x) // HOP
    X = torch.stft(torch.from_numpy(x[:T * HOP].astype(np.float32)), NFFT, HOP,
                   window=torch.hann_window(NFFT), center=True, pad_mode="constant",
                   return_complex=True)
    return X.abs().T[:T].numpy()


def griffin_lim(m, n_iter=32, seed=0):
    T = m.shape[0]
    M = torch.from_numpy(m.T.astype(np.float32))
    w = torch.hann_window(NFFT)
    g = torch.Generator().manual_seed(seed)
    X = M * torch.exp(2j * np.pi * torch.rand(M.shape, generator=g))
    for _ in range(n_iter):
        x = torch.istft(X, NFFT, HOP, window=w, center=True, length=T * HOP)
        Y = torch.stft(x, NFFT, HOP, window=w, center=True, pad_mode="constant",
                       return_complex=True)[:, :T]
        X = M * Y / Y.abs().clamp(min=1e-12)
    return torch.istft(X, NFFT, HOP, window=w, center=True, length=T * HOP).numpy()


def nearest(X, c):
    return torch.cat([((X[i:i + 20000] ** 2).sum(1, keepdim=True) - 2 * X[i:i + 20000] @ c.T +
                       (c * c).sum(1)).argmin(1) for i in range(0, len(X), 20000)])


def kmeans(X, k, iters=25, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = X[torch.randperm(len(X), generator=g)[:k]].clone()
    for _ in range(iters):
        lab = nearest(X, c)
        s = torch.zeros_like(c).index_add_(0, lab, X)
        n = torch.bincount(lab, minlength=k).float()
        c = torch.where(n[:, None] > 0, s / n.clamp(min=1)[:, None], c)
    return c


def mel_bands(nb=64):
    """Triangular bands on the mel scale, rows summing to 1: [nb, FB]."""
    f = np.linspace(0, RATE / 2, FB)
    mel = lambda h: 2595 * np.log10(1 + h / 700)  # noqa: E731
    pts = 700 * (10 ** (np.linspace(mel(0), mel(RATE / 2), nb + 2) / 2595) - 1)
    M = np.zeros((nb, FB))
    for i in range(nb):
        lo, c, hi = pts[i:i + 3]
        M[i] = np.clip(np.minimum((f - lo) / (c - lo + 1e-9), (hi - f) / (hi - c + 1e-9)), 0,
                       None)
    return M / M.sum(1, keepdims=True)


def world_analysis(x):
    import pyworld as pw
    T = len(x) // HOP
    f0, t = pw.harvest(x, RATE, f0_floor=50, f0_ceil=500, frame_period=1000 * HOP / RATE)
    sp = pw.cheaptrick(x, f0, t, RATE, fft_size=NFFT)
    f0, sp = f0[:T], sp[:T]
    if len(f0) < T:
        f0 = np.pad(f0, (0, T - len(f0)))
        sp = np.pad(sp, ((0, T - len(sp)), (0, 0)), mode="edge")
    return f0, 0.5 * np.log(sp + 1e-16)


def comb(f0):
    """|rfft(hann * sum_k cos(2 pi k f0 n / RATE))|, the harmonics below 7.9 kHz."""
    n = np.arange(NFFT) - NFFT / 2
    s = np.cos(2 * np.pi * np.outer(np.arange(1, int(7900 // f0) + 1), n) * f0 / RATE).sum(0)
    return np.abs(np.fft.rfft(np.hanning(NFFT + 1)[:NFFT] * s))


def source_filter(f0, lenv, gv, gu):
    out = np.empty((len(f0), FB))
    for t in range(len(f0)):
        e = np.exp(lenv[t])
        out[t] = gv * e * np.sqrt(f0[t]) * comb(f0[t]) if f0[t] > 0 else gu * e
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("design")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--heldout", type=int, default=40)
    ap.add_argument("--train-utts", type=int, default=540)
    a = ap.parse_args()
    torch.set_num_threads(2)
    meta = [ln.rstrip("\n").split("\t") for ln in open(os.path.join(a.corpus, "metadata.tsv"))][1:]
    held = [m for m in meta if m[2] == "heldout"][:a.heldout]
    train = [m for m in meta if m[2] == "train"][:a.train_utts]
    wav = lambda uid: os.path.join(a.corpus, "wav", uid + ".wav")  # noqa: E731
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    d = a.design
    decode = None  # x -> audio
    if d == "orig":
        decode = lambda x: x  # noqa: E731
    elif d == "gl-true":
        decode = lambda x: griffin_lim(mag(x))  # noqa: E731
    elif d.startswith("vq-") or d.startswith("rvq-"):
        ks = [int(k) for k in d.split("-")[1:]]
        F = torch.from_numpy(np.concatenate([np.log(mag(read(wav(m[0]))) + 1e-5)
                                             for m in train])).float()
        books, R = [], F.clone()
        for k in ks:
            c = kmeans(R, k)
            books.append(c)
            R = R - c[nearest(R, c)]
        print("%s: %d training frames, codebooks in %.0f s" % (d, len(F), time.time() - t0),
              flush=True)

        def decode(x):
            R = torch.from_numpy(np.log(mag(x) + 1e-5)).float()
            Y = torch.zeros_like(R)
            for c in books:
                q = c[nearest(R, c)]
                Y += q
                R -= q
            return griffin_lim(np.exp(Y.numpy()))
    elif d == "sf-true":
        r_v, r_u = [], []
        for m in train[:30]:  # the gains: median log ratio of |X| to the unit-gain render
            x = read(wav(m[0]))
            f0, le = world_analysis(x)
            X, S = mag(x), source_filter(f0, le, 1.0, 1.0)
            for t in range(len(f0)):
                (r_v if f0[t] > 0 else r_u).append(np.log(X[t].sum() + 1e-9) -
                                                   np.log(S[t].sum() + 1e-9))
        gv, gu = np.exp(np.median(r_v)), np.exp(np.median(r_u))
        print("sf-true: gains %.4g (voiced) %.4g (unvoiced)" % (gv, gu), flush=True)
        decode = lambda x: griffin_lim(source_filter(*world_analysis(x), gv, gu))  # noqa: E731
    elif d == "world":
        import pyworld as pw

        def decode(x):
            f0, t = pw.harvest(x, RATE, f0_floor=50, f0_ceil=500, frame_period=20)
            sp = pw.cheaptrick(x, f0, t, RATE, fft_size=NFFT)
            ap_ = pw.d4c(x, f0, t, RATE, fft_size=NFFT)
            return pw.synthesize(f0, sp, ap_, RATE, frame_period=20)
    else:
        sys.exit("codec_study.py: unknown design " + d)
    sc = []
    with open(os.path.join(a.out, "manifest.tsv"), "w") as fh:
        fh.write("id\ttext\twav\n")
        for uid, _, _, text in held:
            x = read(wav(uid))
            y = decode(x)
            m, my = mag(x), mag(y[:len(x)] if len(y) >= len(x) else np.pad(y, (0, len(x) - len(y))))
            sc.append(np.linalg.norm(m - my) / np.linalg.norm(m))
            p = os.path.join(os.path.abspath(a.out), uid + ".wav")
            write(p, y)
            fh.write("%s\t%s\t%s\n" % (uid, text, p))
    print("%s: %d utterances, spectral convergence %.3f, %.0f s" % (d, len(held), np.mean(sc),
                                                                   time.time() - t0))


if __name__ == "__main__":
    main()
