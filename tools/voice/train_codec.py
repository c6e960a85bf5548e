#!/usr/bin/env python3
"""train_codec.py: trains the demo voice's speech codec ("kmeans-gl") on a
corpus of tools/voice/make_corpus.py, encodes the corpus, and measures the
codec's round trip through the C decoder.

A code is the index of the nearest of K centroids (k-means, fixed seed) of
log-magnitude STFT frames: periodic Hann window of n_fft, hop 320 at 16 kHz
(50 frames a second), torch.stft's centering with zero padding, and
log(|X| + 1e-5). codec-decode --codec kmeans-gl decodes codes by taking
exp(centroid) as the magnitude and running Griffin-Lim (lib/codec/kmeans_codec.h).

Usage:
    python3 tools/voice/train_codec.py --corpus DIR --out MODEL_DIR
        [--k 1024] [--n-fft 1024] [--iters 25] [--max-frames 200000]
        [--n-iter-gl 32] [--seed 0] [--eval N] [--codec-decode bin/codec-decode]

Writes MODEL_DIR/model.safetensors (tensor "centroids" [K, n_fft/2+1], f32),
MODEL_DIR/config.json, MODEL_DIR/codes/<id>.txt for every utterance of the
corpus, and with --eval N, decodes N held-out utterances with codec-decode and
prints the round trip's log-spectral distance and spectral convergence
(against the original's STFT), next to the k-means quantisation alone and to
Griffin-Lim alone (the utterance's own frames as the codebook).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import wave

import numpy as np
import torch
from safetensors.numpy import save_file

RATE, HOP, EPS = 16000, 320, 1e-5


def read_wav(path):
    with wave.open(path, "rb") as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768


def stft_mag(x, n_fft):
    """|torch.stft(center=True, pad_mode='constant')|, the first len(x) // HOP frames, as rows."""
    T = len(x) // HOP
    X = torch.stft(torch.from_numpy(x[:T * HOP].astype(np.float32)), n_fft, HOP,
                   window=torch.hann_window(n_fft), center=True, pad_mode="constant",
                   return_complex=True)
    return X.abs().T[:T].numpy()


def kmeans(data, k, iters, seed):
    """Lloyd's k-means on rows of data (torch, fixed seed, init from k distinct rows)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.from_numpy(data)
    c = x[torch.randperm(len(x), generator=g)[:k]].clone()
    x2 = (x * x).sum(1, keepdim=True)
    for it in range(iters):
        idx = assign(x, c, x2)
        counts = torch.bincount(idx, minlength=k).float()
        sums = torch.zeros_like(c).index_add_(0, idx, x)
        empty = counts == 0
        c = torch.where(empty[:, None], c, sums / counts.clamp(min=1)[:, None])
        if empty.any():  # re-seed an empty cluster with a random frame
            c[empty] = x[torch.randint(len(x), (int(empty.sum()),), generator=g)]
    return c.numpy()


def assign(x, c, x2=None):
    if x2 is None:
        x2 = (x * x).sum(1, keepdim=True)
    out = []
    for i in range(0, len(x), 16384):
        xb = x[i:i + 16384]
        d = x2[i:i + 16384] - 2 * xb @ c.T + (c * c).sum(1)[None, :]
        out.append(d.argmin(1))
    return torch.cat(out)


def lsd(ref_mag, mag):
    """Log-spectral distance in dB: RMS over bins of 20 log10 ratio, mean over frames."""
    d = 20 * np.log10((ref_mag + EPS) / (mag + EPS))
    return float(np.mean(np.sqrt(np.mean(d * d, axis=1))))


def spectral_convergence(ref_mag, mag):
    return float(np.linalg.norm(ref_mag - mag) / np.linalg.norm(ref_mag))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n-fft", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("--max-frames", type=int, default=200000)
    ap.add_argument("--n-iter-gl", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval", type=int, default=0)
    ap.add_argument("--codec-decode", default="bin/codec-decode")
    a = ap.parse_args()
    torch.manual_seed(a.seed)

    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(a.corpus, "metadata.tsv"))][1:]
    feats = {}
    t0 = time.time()
    for uid, _, _, _ in rows:
        x = read_wav(os.path.join(a.corpus, "wav", uid + ".wav"))
        feats[uid] = np.log(stft_mag(x, a.n_fft) + EPS).astype(np.float32)
    train = np.concatenate([feats[r[0]] for r in rows if r[2] == "train"])
    rng = np.random.default_rng(a.seed)
    if len(train) > a.max_frames:
        train = train[rng.choice(len(train), a.max_frames, replace=False)]
    print("%d utterances, %d training frames (%.1f s of features)"
          % (len(rows), len(train), time.time() - t0))
    t0 = time.time()
    cents = kmeans(train, a.k, a.iters, a.seed).astype(np.float32)
    print("k-means: K = %d, %d iterations, %.1f s" % (a.k, a.iters, time.time() - t0))

    os.makedirs(os.path.join(a.out, "codes"), exist_ok=True)
    save_file({"centroids": cents}, os.path.join(a.out, "model.safetensors"))
    cfg = {"codec": "kmeans-gl", "sample_rate": RATE, "n_fft": a.n_fft, "hop": HOP,
           "n_iter": a.n_iter_gl, "seed": a.seed, "codebook_size": a.k}
    with open(os.path.join(a.out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
        fh.write("\n")
    codes = {}
    ct = torch.from_numpy(cents)
    used = np.zeros(a.k, dtype=bool)
    for uid, _, _, _ in rows:
        codes[uid] = assign(torch.from_numpy(feats[uid]), ct).numpy()
        used[codes[uid]] = True
        with open(os.path.join(a.out, "codes", uid + ".txt"), "w") as fh:
            fh.write(" ".join(map(str, codes[uid])) + "\n")
    print("codes written for %d utterances; %d of %d centroids used"
          % (len(rows), used.sum(), a.k))

    if a.eval:
        held = [r[0] for r in rows if r[2] == "heldout"][:a.eval]
        q_lsd, q_sc, r_lsd, r_sc, o_lsd, o_sc, secs, dec = [], [], [], [], [], [], 0.0, 0.0
        with tempfile.TemporaryDirectory() as tmp:
            for uid in held:
                x = read_wav(os.path.join(a.corpus, "wav", uid + ".wav"))
                ref = stft_mag(x, a.n_fft)
                q = np.exp(cents[codes[uid]])  # what the codes carry
                q_lsd.append(lsd(ref, q))
                q_sc.append(spectral_convergence(ref, q))
                out = os.path.join(tmp, uid + ".wav")
                t0 = time.time()
                subprocess.run([a.codec_decode, "--codec", "kmeans-gl", "--weights", a.out,
                                "--codes", os.path.join(a.out, "codes", uid + ".txt"),
                                "-o", out], check=True)
                dec += time.time() - t0
                y = read_wav(out)
                secs += len(y) / RATE
                got = stft_mag(y, a.n_fft)
                r_lsd.append(lsd(ref, got))
                r_sc.append(spectral_convergence(ref, got))
                # Griffin-Lim alone: a codebook of this utterance's own frames.
                od = os.path.join(tmp, "oracle")
                os.makedirs(od, exist_ok=True)
                save_file({"centroids": feats[uid]}, os.path.join(od, "model.safetensors"))
                with open(os.path.join(od, "config.json"), "w") as fh:
                    json.dump(dict(cfg, codebook_size=len(feats[uid])), fh)
                with open(os.path.join(od, "codes.txt"), "w") as fh:
                    fh.write(" ".join(map(str, range(len(feats[uid])))) + "\n")
                subprocess.run([a.codec_decode, "--codec", "kmeans-gl", "--weights", od,
                                "--codes", os.path.join(od, "codes.txt"), "-o", out], check=True)
                got = stft_mag(read_wav(out), a.n_fft)
                o_lsd.append(lsd(ref, got))
                o_sc.append(spectral_convergence(ref, got))
        print("held-out round trip, %d utterances (%.1f s of audio, decoded in %.1f s):"
              % (len(held), secs, dec))
        print("  k-means only (centroid magnitudes): LSD %.2f +- %.2f dB, SC %.3f +- %.3f"
              % (np.mean(q_lsd), np.std(q_lsd), np.mean(q_sc), np.std(q_sc)))
        print("  codec-decode (Griffin-Lim %d it.):  LSD %.2f +- %.2f dB, SC %.3f +- %.3f"
              % (a.n_iter_gl, np.mean(r_lsd), np.std(r_lsd), np.mean(r_sc), np.std(r_sc)))
        print("  Griffin-Lim of the true magnitudes:  LSD %.2f +- %.2f dB, SC %.3f +- %.3f"
              % (np.mean(o_lsd), np.std(o_lsd), np.mean(o_sc), np.std(o_sc)))


if __name__ == "__main__":
    sys.exit(main())
