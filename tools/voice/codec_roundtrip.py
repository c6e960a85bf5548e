#!/usr/bin/env python3
"""codec_roundtrip.py: the round trip of the 100 held-out verses of
bench/table1-sentences.tsv through kmeans-gl codecs, for Whisper to score:
each codec's codes (nearest centroid of the log-magnitude frames, as
train_codec.py encodes) decoded by codec-decode.

Usage:
    python3 tools/voice/codec_roundtrip.py CORPUS OUT NAME=CODEC_DIR [NAME=CODEC_DIR ...]
    scripts/pcg-eval --no-mcd OUT/NAME/manifest.tsv

CORPUS is make_corpus.py's output with the voice's full corpus (its held-out
ids are the sentences' ids); OUT/orig.tsv lists the original audio.
"""
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors.numpy import load_file

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from train_codec import EPS, assign, read_wav, stft_mag  # noqa: E402

root = os.path.join(here, "..", "..")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    corpus, out = sys.argv[1], sys.argv[2]
    rows = [ln.rstrip("\n").split("\t")
            for ln in open(os.path.join(root, "bench", "table1-sentences.tsv"))][:100]
    os.makedirs(out, exist_ok=True)
    for spec in sys.argv[3:]:
        name, wdir = spec.split("=", 1)
        od = os.path.join(out, name)
        os.makedirs(od, exist_ok=True)
        cents = torch.from_numpy(load_file(os.path.join(wdir, "model.safetensors"))["centroids"]
                                 .astype(np.float32))
        with open(os.path.join(od, "manifest.tsv"), "w") as fh:
            fh.write("id\ttext\twav\n")
            for uid, _spk, text in rows:
                x = read_wav(os.path.join(corpus, "wav", uid + ".wav"))
                codes = assign(torch.from_numpy(np.log(stft_mag(x, 1024) + EPS)), cents).numpy()
                with open(os.path.join(od, uid + ".txt"), "w") as f:
                    f.write(" ".join(map(str, codes)) + "\n")
                wav = os.path.join(os.path.abspath(od), uid + ".wav")
                subprocess.run([os.path.join(root, "bin", "codec-decode"), "--codec", "kmeans-gl",
                                "--weights", wdir, "--codes", os.path.join(od, uid + ".txt"),
                                "-o", wav], check=True)
                fh.write("%s\t%s\t%s\n" % (uid, text, wav))
    with open(os.path.join(out, "orig.tsv"), "w") as fh:
        fh.write("id\ttext\twav\n")
        for uid, _spk, text in rows:
            fh.write("%s\t%s\t%s\n" % (uid, text,
                                        os.path.abspath(os.path.join(corpus, "wav", uid + ".wav"))))


if __name__ == "__main__":
    main()
