#!/bin/sh
# bench/stream-quality.sh: the quality cost of streaming on the demo voice's
# codec (kmeans-gl: Griffin-Lim over each chunk with its context). Speaks
# held-out sentences through the pipeline (pcg, seeds 1..N), decodes each
# utterance's tokens whole and in chunks with codec-decode --chunk (the
# audio pcg-synth streams is the same to the byte: tests/serve.sh), and
# prints the SNR of the chunked audio against the whole-utterance audio over
# all of them, of the waveforms and of their STFT magnitudes (Griffin-Lim
# recovers a phase, and a chunk with other context converges to another
# equally valid one: the waveform SNR counts that as error, the magnitude
# SNR does not), and the decode time per chunk. (X-codec2's table is
# bench-codec --snr, docs/BENCHMARKS.md "Chunked (streaming) decoding".)
# Usage: bench/stream-quality.sh [N]   (N sentences, default 8; needs numpy)
set -eu
cd "$(dirname "$0")/.."
export PATH="$PWD/bin:$PWD/scripts:$PATH"
n=${1:-8}
M=models/demo
work=$(mktemp -d "${TMPDIR:-/tmp}/pcg-sq.XXXXXX")
export PCG_RUNTIME_DIR="$work/rt"
trap 'pcg-down >/dev/null 2>&1; rm -rf "$work"' EXIT INT TERM
off=$(pcg-tokenize --tokenizer "$M" '<|s_0|>')
pcg-up --target "$M" >/dev/null
i=0
sed -n '1,32p' bench/table1-sentences.tsv | cut -f3 | head -n "$n" | while read -r text; do
	i=$((i + 1))
	pcg-synth --seed "$i" --tokens "$text" | tail -n 1 | tr ' ' '\n' >"$work/$i.ids"
done
pcg-down >/dev/null
decode() { # IDS OUT [--chunk ...]
	ids=$1 out=$2
	shift 2
	codec-decode --codec kmeans-gl --weights "$M/codec" --llasa-ids --speech-offset "$off" \
		--codes "$ids" --format raw-f32 -o "$out" "$@"
}
printf '%-6s %-8s %-10s %9s %9s %12s\n' chunk context lookahead "wave dB" "|STFT| dB" "ms / chunk"
for ids in "$work"/*.ids; do decode "$ids" "${ids%.ids}.whole"; done
for cfg in "10 20 2" "25 0 0" "25 50 0" "25 50 4" "25 150 4" "50 50 4" "50 150 8" "100 150 8"; do
	set -- $cfg
	t0=$(date +%s%N)
	chunks=0
	for ids in "$work"/*.ids; do
		decode "$ids" "${ids%.ids}.c" --chunk "$1" --context "$2" --lookahead "$3"
		k=$(wc -l <"$ids")
		chunks=$((chunks + (k + $1 - 1) / $1))
	done
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	python3 - "$work" "$1" "$2" "$3" "$ms" "$chunks" <<'EOF'
import glob, sys
import numpy as np
w, c, l, r, ms, chunks = sys.argv[1:]
def mag(x, n=1024, hop=320):
    win = np.hanning(n + 1)[:-1]
    x = np.pad(x, n // 2)
    frames = [x[i:i + n] * win for i in range(0, len(x) - n + 1, hop)]
    return np.abs(np.fft.rfft(np.array(frames), axis=1))
def snr(a, b):
    d = ((a - b) ** 2).sum()
    return 10 * np.log10((a * a).sum() / d) if d > 0 else float("inf")
wa = wb = ma = mb = None
num = [0.0, 0.0]
den = [0.0, 0.0]
for f in sorted(glob.glob(w + "/*.whole")):
    a = np.fromfile(f, dtype="<f4").astype(np.float64)
    b = np.fromfile(f[:-6] + ".c", dtype="<f4").astype(np.float64)
    for k, (x, y) in enumerate(((a, b), (mag(a), mag(b)))):
        num[k] += (x * x).sum()
        den[k] += ((x - y) ** 2).sum()
s = [10 * np.log10(num[k] / den[k]) if den[k] > 0 else float("inf") for k in range(2)]
print(f"{c:<6} {l:<8} {r:<10} {s[0]:9.2f} {s[1]:9.2f} {int(ms) / int(chunks):12.1f}")
EOF
done
