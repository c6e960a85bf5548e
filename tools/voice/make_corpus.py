#!/usr/bin/env python3
"""make_corpus.py: the demo voice's speech corpus, synthesised with espeak-ng.

Sentences are King James Bible verses (public domain) printed by the Debian
package bible-kjv; each is spoken by one of several speakers (an espeak-ng
voice variant with its own pitch and rate), resampled to 16 kHz mono 16-bit
WAV. A fixed-seed tenth of the sentences is held out for evaluation and
listed separately.

Usage:
    python3 tools/voice/make_corpus.py --out DIR [--sentences N] [--speakers N]
                                       [--books Pr,Ec,...] [--jobs N]

Writes DIR/wav/<id>.wav, DIR/phones/<id>.txt (pcg-phonemize's phonemes and
start frames), DIR/metadata.tsv (id, speaker, split, text), DIR/heldout.txt
(the held-out ids and texts) and DIR/speakers.json. The default (400 sentences,
4 speakers) takes about a minute on 2 cores; --sentences 30000 takes the
whole of the books given. Deterministic for a given espeak-ng version.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import subprocess
import sys
import wave

import numpy as np

RATE = 16000
# Speakers: espeak-ng voice+variant, pitch (0-99), rate (words per minute).
SPEAKERS = [
    ("en-us+m3", 45, 160),
    ("en-us+f2", 65, 150),
    ("en-gb+m1", 35, 175),
    ("en-us+f4", 75, 140),
    ("en-gb-x-rp+m7", 50, 165),
    ("en-us+f1", 60, 185),
    ("en-gb-scotland+m2", 40, 150),
    ("en-029+f3", 70, 170),
]
# Last chapter of each book we read (bible accepts Book1:1-N:M ranges).
LAST = {"Ge": 50, "Ex": 40, "Le": 27, "Nu": 36, "De": 34, "Jos": 24, "Jg": 21, "1Sa": 31,
        "2Sa": 24, "1Ki": 22, "2Ki": 25, "Job": 42, "Ps": 150, "Pr": 31, "Ec": 12, "Is": 66,
        "Jer": 52, "Eze": 48, "Da": 12, "Mt": 28, "Mr": 16, "Lu": 24, "Jn": 21, "Ac": 28,
        "Ro": 16}
BOOKS = ",".join(LAST)


def verses(book):
    out = subprocess.run(["bible", "-l", "100000", "%s1:1-%d:200" % (book, LAST[book])],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = re.match(r"^\s*\d+ (.+)$", line)
        if m:
            yield m.group(1).strip()


def clean(text):
    """Plain words and punctuation espeak-ng reads aloud well."""
    text = re.sub(r"[\[\]{}<>#*_|]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def resample(x, rate_in, rate_out):
    """Band-limited resampling of a whole utterance by FFT (no SciPy needed)."""
    n_out = int(round(len(x) * rate_out / rate_in))
    X = np.fft.rfft(x)
    keep = n_out // 2 + 1
    Y = np.zeros(keep, dtype=complex)
    m = min(keep, len(X))
    Y[:m] = X[:m]
    return np.fft.irfft(Y, n_out) * (n_out / len(x))


def speak(job):
    uid, text, spk, path, phonemize = job
    voice, pitch, wpm = SPEAKERS[spk]
    # pcg-phonemize speaks with libespeak-ng, as the verifier does at run
    # time, and prints each phoneme's start frame: training sees exactly the
    # timings the pipeline will force.
    raw = path + ".22k.wav"
    ph = subprocess.run([phonemize, "--voice", voice, "--pitch", str(pitch), "--rate", str(wpm),
                         "--sample-rate", str(RATE), "--hop", "320", "--wav", raw, text],
                        capture_output=True, text=True, check=True).stdout
    with wave.open(raw, "rb") as w:
        rate_in = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64)
    os.unlink(raw)
    y = resample(x / 32768.0, rate_in, RATE)
    y = np.clip(np.round(y * 32767), -32768, 32767).astype("<i2")
    tmp = path + ".tmp"
    with wave.open(tmp, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(y.tobytes())
    os.replace(tmp, path)
    frames = int(ph.split()[2])
    assert frames == len(y) // 320, (uid, frames, len(y))
    phones = path.replace("/wav/", "/phones/")[:-4] + ".txt"
    with open(phones + ".tmp", "w") as f:
        f.write(ph)
    os.replace(phones + ".tmp", phones)
    return uid, len(y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sentences", type=int, default=400)
    ap.add_argument("--speakers", type=int, default=4, choices=range(1, len(SPEAKERS) + 1))
    ap.add_argument("--books", default=BOOKS)
    ap.add_argument("--max-words", type=int, default=30)
    ap.add_argument("--heldout", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--phonemize", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                        "bin", "pcg-phonemize"))
    a = ap.parse_args()

    texts, seen = [], set()
    for book in a.books.split(","):
        if book not in LAST:
            sys.exit("make_corpus.py: --books: unknown book %s (know %s)" % (book, ",".join(LAST)))
        for v in verses(book):
            v = clean(v)
            if 3 <= len(v.split()) <= a.max_words and v not in seen:
                seen.add(v)
                texts.append(v)
    rng = random.Random(a.seed)
    rng.shuffle(texts)
    texts = texts[:a.sentences]
    n_held = max(1, int(round(len(texts) * a.heldout)))

    os.makedirs(os.path.join(a.out, "wav"), exist_ok=True)
    os.makedirs(os.path.join(a.out, "phones"), exist_ok=True)
    jobs = []
    for i, t in enumerate(texts):
        uid = "s%05d" % i
        jobs.append((uid, t, i % a.speakers, os.path.join(a.out, "wav", uid + ".wav"),
                     a.phonemize))
    # a progress line on a terminal only (make voice's log stays clean)
    tty = sys.stderr.isatty()
    lengths = {}
    with concurrent.futures.ProcessPoolExecutor(a.jobs) as ex:
        for k, (uid, n) in enumerate(ex.map(speak, jobs, chunksize=8), 1):
            lengths[uid] = n
            if tty and (k % 200 == 0 or k == len(jobs)):
                print("\rmake_corpus: %d of %d utterances spoken" % (k, len(jobs)), end="",
                      file=sys.stderr, flush=True)
    if tty:
        print(file=sys.stderr)

    with open(os.path.join(a.out, "metadata.tsv"), "w") as meta, \
         open(os.path.join(a.out, "heldout.txt"), "w") as held:
        meta.write("id\tspeaker\tsplit\ttext\n")
        for i, (uid, t, spk, _, _) in enumerate(jobs):
            split = "heldout" if i < n_held else "train"
            meta.write("%s\t%d\t%s\t%s\n" % (uid, spk, split, t))
            if split == "heldout":
                held.write("%s\t%s\n" % (uid, t))
    # The speakers, as a phoneme voice's voice.json lists them (lib/text/voice.h).
    with open(os.path.join(a.out, "speakers.json"), "w") as f:
        json.dump([{"voice": v, "pitch": p, "rate": r} for v, p, r in SPEAKERS[:a.speakers]], f,
                  indent=1)
    secs = sum(lengths.values()) / RATE
    print("%d sentences (%d held out), %d speakers, %.1f minutes of speech in %s"
          % (len(jobs), n_held, a.speakers, secs / 60, a.out))


if __name__ == "__main__":
    main()
