#!/bin/sh
# bench/eval.sh: the numbers of docs/BENCHMARKS.md "Evaluation tools":
# Whisper base's WER and time per utterance on plain espeak-ng speech (a
# corpus of tools/voice/make_corpus.py), the MCD-DTW of pcg-mcd between the
# same sentences spoken by one voice and by others, and pcg-mcd's time on
# two recordings of about 20 s and of 10 s.
# Usage: bench/eval.sh [SENTENCES [PAIRS]]   (default 20 and 10)
# Needs make, espeak-ng, bible-kjv, python3 with numpy, and make eval-deps.
# BENCH_DIR=DIR keeps the files there (default: a temporary directory).
set -eu
N=${1:-20}
P=${2:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATH="$ROOT/bin:$ROOT/scripts:$PATH"
W=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$W"

echo "== Whisper base WER on $N espeak-ng sentences (4 speakers)"
python3 "$ROOT/tools/voice/make_corpus.py" --out "$W/corpus" --sentences "$N" --jobs 2
awk -F '\t' 'NR == 1 { print "id\ttext\twav"; next } { print $1 "\t" $4 "\twav/" $1 ".wav" }' \
	"$W/corpus/metadata.tsv" >"$W/corpus/manifest.tsv"
pcg-eval --threads 2 --json "$W/wer.json" "$W/corpus/manifest.tsv"

echo "== MCD-DTW against en-us+m3 (pitch 45, 160 wpm) on $P sentences"
python3 - "$W" "$P" <<'PY'
import os, subprocess, sys, time, wave
import numpy as np
w, p = sys.argv[1], int(sys.argv[2])
RATE = 16000


def speak(voice, pitch, wpm, text, path):
    """espeak-ng at 22,050 Hz, FFT-resampled to 16 kHz 16-bit mono."""
    raw = path + ".22k.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-p", str(pitch), "-s", str(wpm), "-w", raw,
                    text], check=True)
    with wave.open(raw) as f:
        rate_in = f.getframerate()
        x = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2") / 32768.0
    os.unlink(raw)
    n = int(round(len(x) * RATE / rate_in))
    X = np.fft.rfft(x)
    Y = np.zeros(n // 2 + 1, dtype=complex)
    m = min(len(Y), len(X))
    Y[:m] = X[:m]
    y = np.fft.irfft(Y, n) * (n / len(x))
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(RATE)
        f.writeframes(np.clip(np.round(y * 32767), -32768, 32767).astype("<i2").tobytes())


texts = [l.split("\t")[3].rstrip("\n") for l in open(os.path.join(w, "corpus", "metadata.tsv"))]
texts = texts[1:p + 1]
# The reference is speaker 0 of make_corpus.py; f2, gb-m1, f4 are its speakers 1-3.
variants = {"m3": ("en-us+m3", 45, 160), "m3-again": ("en-us+m3", 45, 160),
            "m3-190wpm": ("en-us+m3", 45, 190), "m3-pitch65": ("en-us+m3", 65, 160),
            "f2": ("en-us+f2", 65, 150), "gb-m1": ("en-gb+m1", 35, 175),
            "f4": ("en-us+f4", 75, 140)}
for name, spk in variants.items():
    d = os.path.join(w, "mcd", name)
    os.makedirs(d, exist_ok=True)
    for i, t in enumerate(texts):
        speak(*spk, t, os.path.join(d, "p%02d.wav" % i))
    if name == "m3":
        continue
    with open(os.path.join(d, "manifest.tsv"), "w") as f:
        f.write("id\ttext\twav\tref\n")
        for i, t in enumerate(texts):
            f.write("p%02d\t%s\tp%02d.wav\t../m3/p%02d.wav\n" % (i, t, i, i))
    out = subprocess.run(["pcg-eval", "--no-wer", os.path.join(d, "manifest.tsv")],
                         capture_output=True, text=True, check=True).stdout
    print("%-11s %s" % (name, [l for l in out.splitlines() if l.startswith("# MCD")][0]))

# Two long recordings: three sentences in a row (about 20 s), two voices,
# and their first 10 s.
long = " ".join(texts[:3])
for name, spk in (("long-a", variants["m3"]), ("long-b", variants["f2"])):
    path = os.path.join(w, name + ".wav")
    speak(*spk, long, path)
    with wave.open(path) as f:
        head = f.readframes(10 * f.getframerate())
        params = f.getparams()
    with wave.open(os.path.join(w, name + "-10s.wav"), "wb") as f:
        f.setparams(params)
        f.writeframes(head)
for suffix in ("", "-10s"):
    best = 1e9
    for _ in range(5):
        t = time.monotonic()
        r = subprocess.run(["pcg-mcd", "--json", os.path.join(w, "long-a%s.wav" % suffix),
                            os.path.join(w, "long-b%s.wav" % suffix)],
                           capture_output=True, text=True, check=True)
        best = min(best, time.monotonic() - t)
    print("pcg-mcd: %s, best of 5: %.3f s" % (r.stdout.strip(), best))
PY
