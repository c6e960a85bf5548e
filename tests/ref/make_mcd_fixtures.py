#!/usr/bin/env python3
"""make_mcd_fixtures.py: the speech fixtures of pcg-mcd and pcg-eval, and the
MCD-DTW that librosa computes for them with the recipe of lib/codec/mcd.h.

Writes tests/fixtures/speech/:
  a.wav, b.wav   one sentence spoken by two espeak-ng voices (16 kHz mono
                 16-bit, silence trimmed to 20 ms at each end)
  c.wav, d.wav   0.06 s of seeded synthetic sound at 22,050 Hz, c stereo:
                 an odd window length (551 samples) and the mixdown
  texts.tsv      id, text (what a.wav and b.wav say)
  manifest.tsv   a pcg-eval manifest: each of a, b against the other
  mcd.tsv        a, b, mcd_db, frames_a, frames_b, path_length per pair
  cepstra.tsv    file, frame, c1 .. c24 for a few frames of each file

The reference is librosa (feature.melspectrogram with htk=True, norm=None;
sequence.dtw with its default steps) and scipy (fft.dct norm="ortho",
spatial.distance.cdist), all in float64. Needs espeak-ng, numpy, scipy,
soundfile and librosa (pip install librosa); none of them is needed by
make test. Rerun from the repository root:

    python3 tests/ref/make_mcd_fixtures.py

The WAVs depend on the espeak-ng version; the numbers are recomputed from
whatever WAVs are written.
"""
import math
import os
import subprocess

import librosa
import numpy as np
import scipy.fft
import scipy.signal
import scipy.spatial.distance
import soundfile

OUT = os.path.join("tests", "fixtures", "speech")
RATE = 16000
TEXT = "Bring me some water, please."
# id: espeak-ng voice, pitch, words per minute
VOICES = {"a": ("en-us+m3", 45, 225), "b": ("en-gb+f2", 65, 210)}

# The recipe of lib/codec/mcd.h.
FRAME_MS, HOP_MS, N_MELS, N_CEPS, FLOOR = 25, 5, 40, 24, 1e-10
K = 10 / math.log(10) * math.sqrt(2)


def speak(voice, pitch, wpm):
    raw = subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", str(wpm),
                          "--stdout", TEXT], capture_output=True, check=True).stdout
    rate_in = int.from_bytes(raw[24:28], "little")
    x = np.frombuffer(raw[44:], dtype="<i2").astype(np.float64) / 32768
    y = scipy.signal.resample_poly(x, RATE, rate_in)
    nz = np.nonzero(np.abs(y) > 1e-3)[0]
    margin = RATE // 50
    return y[max(0, nz[0] - margin):nz[-1] + margin]


def synthetic(seed, rate, n, channels):
    """A chirp and seeded noise: content with no silence to tie."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / rate
    chirp = 0.3 * np.sin(2 * np.pi * (200 + 3000 * t) * t)
    x = np.stack([chirp * (1 + 0.5 * c) + 0.05 * rng.standard_normal(n)
                  for c in range(channels)], axis=1)
    return x if channels > 1 else x[:, 0]


def cepstra(path):
    y, sr = soundfile.read(path, dtype="float64", always_2d=True)
    y = y.mean(axis=1)
    win = round(FRAME_MS * sr / 1000)
    hop = round(HOP_MS * sr / 1000)
    n_fft = 2
    while n_fft < win:
        n_fft *= 2
    S = librosa.feature.melspectrogram(y=y, sr=sr, n_fft=n_fft, hop_length=hop,
                                       win_length=win, window="hann", center=True,
                                       pad_mode="constant", power=2.0, n_mels=N_MELS,
                                       fmin=0.0, fmax=sr / 2, htk=True, norm=None,
                                       dtype=np.float64)
    L = np.log(np.maximum(S, FLOOR))
    return scipy.fft.dct(L, type=2, norm="ortho", axis=0)[1:N_CEPS + 1]  # (24, T)


def mcd(pa, pb):
    A, B = cepstra(pa), cepstra(pb)
    C = scipy.spatial.distance.cdist(A.T, B.T, metric="euclidean")
    _, wp = librosa.sequence.dtw(C=C)
    return K * C[wp[:, 0], wp[:, 1]].mean(), A.shape[1], B.shape[1], len(wp)


def main():
    os.makedirs(OUT, exist_ok=True)
    for uid, (voice, pitch, wpm) in VOICES.items():
        soundfile.write(os.path.join(OUT, uid + ".wav"), speak(voice, pitch, wpm), RATE,
                        subtype="PCM_16")
    n = int(0.06 * 22050)
    soundfile.write(os.path.join(OUT, "c.wav"), synthetic(1, 22050, n, 2), 22050,
                    subtype="PCM_16")
    soundfile.write(os.path.join(OUT, "d.wav"), synthetic(2, 22050, n + 200, 1), 22050,
                    subtype="PCM_16")
    with open(os.path.join(OUT, "texts.tsv"), "w") as f:
        f.write("id\ttext\n")
        for uid in VOICES:
            f.write("%s\t%s\n" % (uid, TEXT))
    with open(os.path.join(OUT, "manifest.tsv"), "w") as f:
        f.write("id\ttext\twav\tref\n")
        f.write("a\t%s\ta.wav\tb.wav\n" % TEXT)
        f.write("b\t%s\tb.wav\ta.wav\n" % TEXT)
    with open(os.path.join(OUT, "mcd.tsv"), "w") as f:
        f.write("a\tb\tmcd_db\tframes_a\tframes_b\tpath_length\n")
        for a, b in [("a", "b"), ("b", "a"), ("a", "a"), ("c", "d"), ("d", "c")]:
            m, na, nb, lp = mcd(os.path.join(OUT, a + ".wav"), os.path.join(OUT, b + ".wav"))
            f.write("%s.wav\t%s.wav\t%.9f\t%d\t%d\t%d\n" % (a, b, m, na, nb, lp))
            print("%s %s  MCD %.4f dB  frames %d %d  path %d" % (a, b, m, na, nb, lp))
    with open(os.path.join(OUT, "cepstra.tsv"), "w") as f:
        f.write("file\tframe\t" + "\t".join("c%d" % d for d in range(1, N_CEPS + 1)) + "\n")
        for uid in "abcd":
            C = cepstra(os.path.join(OUT, uid + ".wav"))
            T = C.shape[1]
            for t in sorted({0, 1, T // 4, T // 2, 3 * T // 4, T - 1}):
                f.write("%s.wav\t%d\t%s\n" % (uid, t, "\t".join("%.9g" % v for v in C[:, t])))
    print("librosa", librosa.__version__, "scipy", scipy.__version__)


if __name__ == "__main__":
    main()
