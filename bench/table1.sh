#!/bin/sh
# bench/table1.sh: the PCG paper's Table 1 in miniature on the demo voice
# (models/demo), through the four-process pipeline, in one run: the draft
# alone, the target alone (autoregressive), sd, ssd (beta 0.2, 0.4), pcg
# (three theta values, and one with a top-k cut of the groups), typical
# (Medusa's defaults and epsilon 0.3 alpha 0.5), topk (k 50, Llasa+'s, and
# 10) and lantern (delta 0.1 and 0.3, k 1000 capped by the file's 8), on held-out
# sentences (bench/table1-sentences.tsv: id, speaker, text; none of them was
# trained on) x seeds, temperature 0.8, top-k 50, lookahead 3. Speed is
# wall-clock speech tokens/s against the target alone in the same run;
# quality is pcg-eval's Whisper WER and MCD-DTW against the espeak-ng
# rendering of the same sentence by the same speaker. Also the paper's
# Table 2 stress test (every token of the target's output that is in a
# group of several replaced by a random member of its group: delta WER)
# and the speed-quality curve (bench/table1.png, gnuplot).
#
# Usage: bench/table1.sh [SENTENCES] [SEEDS] [EVAL_SEEDS]   (default 100, 3, 3)
# Speed counts every run; WER and MCD-DTW (Whisper is the slow part, about
# a second per utterance here) the runs of the first EVAL_SEEDS seeds.
# mtp-viterbi has no random draw: it runs one seed. MTP=0 leaves out the
# Table II rows (the MTP heads), which roughly halves the run.
# QUANT="q8_0 q4_k_m" adds the target quantised to those GGUF types
# (pcg-quantize), alone, as rows target-q8_0 ...: what a quantised file
# costs in quality. METHODS=0 leaves out the draft and every speculative
# row (with MTP=0 and QUANT, a run of the target in each format only).
# Needs: make, pcg-eval's Python packages (make eval-deps), gnuplot for the
# plot. Results: $BENCH_CACHE/table1/ (default /tmp/pcg-tts-bench).
# MODEL=DIR takes another voice's directory (default models/demo).
# SET=everyday takes bench/everyday-sentences.tsv instead (30 sentences of
# everyday modern English, no Bible text: what the voice never saw), results
# in $BENCH_CACHE/table1-everyday/.
set -eu
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$root/bin:$root/scripts:$PATH"
m=${MODEL:-models/demo}
nsent=${1:-100}
seeds=${2:-3}
eval_seeds=${3:-$seeds}
sfile=bench/table1-sentences.tsv
png=bench/table1.png
work=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}/table1
case ${SET:-kjv} in
kjv) ;;
everyday) sfile=bench/everyday-sentences.tsv; work=$work-everyday png=bench/table1-everyday.png ;;
*) echo "table1.sh: SET=$SET: kjv or everyday" >&2; exit 2 ;;
esac
export PCG_RUNTIME_DIR="$work/rt"
mkdir -p "$work/wav" "$work/ref" "$work/asg"
head -n "$nsent" "$sfile" >"$work/sentences"

# The ASGs: three theta values, and the middle one with a top-k cut.
for th in 0.3 0.4 0.5; do
	[ -f "$work/asg/$th" ] || asg-build --model "$m" --theta "$th" --quiet -o "$work/asg/$th"
done
[ -f "$work/asg/0.4-k4" ] || asg-build --model "$m" --theta 0.4 --topk 4 --quiet -o "$work/asg/0.4-k4"

# The references: espeak-ng's rendering at the codec's rate (16 kHz).
while IFS='	' read -r id spk text; do
	[ -f "$work/ref/$id.wav" ] && continue
	pcg-phonemize --voice-file "$m/voice.json" --speaker "$spk" --wav "$work/ref/$id.22k.wav" \
		"$text" >/dev/null
done <"$work/sentences"
python3 - "$work/ref" <<'EOF'
import glob, os, sys, wave
import numpy as np
for p in glob.glob(os.path.join(sys.argv[1], "*.22k.wav")):
    with wave.open(p) as w:
        x = np.frombuffer(w.readframes(w.getnframes()), "<i2") / 32768.0
        r = w.getframerate()
    n = int(round(len(x) * 16000 / r))  # FFT resampling, as the corpus does
    X = np.fft.rfft(x)
    Y = np.zeros(n // 2 + 1, complex)
    k = min(len(Y), len(X))
    Y[:k] = X[:k]
    y = np.clip(np.round(np.fft.irfft(Y, n) * (n / len(x)) * 32767), -32768, 32767)
    with wave.open(p.replace(".22k.wav", ".wav"), "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
        w.writeframes(y.astype("<i2").tobytes())
    os.unlink(p)
EOF

# run NAME POLICY [pcg-synth options]: every sentence x seed; one line per run
# in $work/runs: name seed id tokens seconds rounds drafted accepted; the
# speech ids in $work/codes/NAME-SEED-ID.txt.
run() {
	name=$1; pol=$2; shift 2
	ns=$seeds
	case $pol in mtp-viterbi) ns=1 ;; esac
	for s in $(seq 1 "$ns"); do
		while IFS='	' read -r id spk text; do
			pcg-synth --policy "$pol" --seed "$s" --speaker "$spk" --temp 0.8 --top-k 50 \
				--lookahead 3 --tokens "$@" -o "$work/wav/$name-$s-$id.wav" "$text" \
				</dev/null >"$work/out" 2>&1
			grep -E '^[0-9 ]+$' "$work/out" >"$work/codes/$name-$s-$id.txt"
			awk -v n="$name" -v s="$s" -v id="$id" '
				/^tokens / { tok = $2; for (i = 1; i <= NF; i++) if ($i == "in") sec = $(i + 1) }
				/^rounds / { gsub(",", ""); r = $2; d = $4; a = $6 }
				END { print n, s, id, tok, sec, r, d, a }' "$work/out" >>"$work/runs"
		done <"$work/sentences"
	done
}
mkdir -p "$work/codes"
: >"$work/runs"
trap 'pcg-down >/dev/null 2>&1' EXIT
# The draft alone: the draft model as the target of its own pipeline, with
# the voice's tokenizer and voice.json beside it.
mkdir -p "$work/draftvoice"
for f in config.json model.safetensors; do
	ln -sf "$root/$m/draft/$f" "$work/draftvoice/$f"
done
ln -sf "$root/$m/tokenizer.json" "$work/draftvoice/tokenizer.json"
ln -sf "$root/$m/voice.json" "$work/draftvoice/voice.json"
methods=${METHODS:-1}
if [ "$methods" != 0 ]; then
	pcg-up --target "$work/draftvoice" --codec-weights "$m/codec" >/dev/null
	run draft none
	pcg-down >/dev/null
fi
pcg-up --target "$m" >/dev/null
run target none
if [ "$methods" != 0 ]; then
	run sd sd
	run ssd-0.2 ssd --beta 0.2
	run ssd-0.4 ssd --beta 0.4
	for th in 0.3 0.4 0.5; do
		run "pcg-$th" pcg --asg "$work/asg/$th"
	done
	run pcg-0.4-k4 pcg --asg "$work/asg/0.4-k4"
	# The other published rules, at their papers' defaults and one more
	# setting each (lantern's neighbours: the voice's knn, asg-build --knn).
	run typical typical
	run typical-0.3-0.5 typical --policy-args epsilon=0.3,alpha=0.5
	run topk-50 topk
	run topk-10 topk --policy-args k=10
	if [ -f "$m/knn" ]; then
		run lantern-0.1 lantern
		run lantern-0.3 lantern --policy-args delta=0.3
	fi
fi
# The MTP paper's Table II: n heads, top-k, Viterbi; and the heads
# verified by sd and pcg (exact).
if [ "${MTP:-1}" != 0 ]; then
	for nh in 2 4 8; do
		for k in 3 10 25; do
			run "mtp-viterbi-n$nh-k$k" mtp-viterbi --lookahead "$nh" --viterbi-k "$k"
		done
	done
	run mtp-sd-n3 mtp-sd
	run mtp-pcg-n3 mtp-pcg --asg "$work/asg/0.4"
fi
pcg-down >/dev/null
# The target from a quantised GGUF file of itself, with the voice's own
# draft, codec and voice.json beside it.
for qt in ${QUANT:-}; do
	q=$work/target-$qt.gguf
	[ -s "$q" ] || pcg-quantize --quiet --type "$qt" "$m" -o "$q"
	pcg-up --target "$q" --draft "$m/draft" --codec-weights "$m/codec" \
		--voice "$m/voice.json" --tm "$m/tm" >/dev/null
	run "target-$qt" none
	pcg-down >/dev/null
done
trap - EXIT

# Table 2: the target's tokens with every token of a multi-member group
# replaced by a random member (seeded), decoded by the same codec.
python3 - "$work" "$m" "$seeds" <<'EOF'
import os, random, subprocess, sys
work, m, seeds = sys.argv[1], sys.argv[2], int(sys.argv[3])
ids = [l.split("\t")[0] for l in open(os.path.join(work, "sentences"))]
import json
first = json.load(open(os.path.join(m, "tokenizer.json")))
first = next(a["id"] for a in first["added_tokens"] if a["content"] == "<|s_0|>")
for th in ["0.3", "0.4", "0.5"]:
    groups = {}
    out = subprocess.run(["asg-info", "--groups", os.path.join(work, "asg", th)],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        members = [int(t) for t in line.split(":", 1)[1].split()]
        for t in members:
            groups[t] = members
    rng = random.Random(1)
    for uid in ids:
        # the target's own codes, read back from its seed-1 run by codec-decode's input
        ids_ = open(os.path.join(work, "codes", "target-1-%s.txt" % uid)).read().split()
        toks = [int(t) - first for t in ids_]
        new = [str(rng.choice(groups.get(t, [t]))) for t in toks]
        path = os.path.join(work, "codes", "stress-%s-%s.txt" % (th, uid))
        with open(path, "w") as f:
            f.write(" ".join(new) + "\n")
        subprocess.run(["codec-decode", "--weights", os.path.join(m, "codec"), "--codes", path,
                        "-o", os.path.join(work, "wav", "stress-%s-1-%s.wav" % (th, uid))],
                       check=True)
EOF
# Quality: one manifest for pcg-eval (Whisper WER, MCD-DTW against the
# espeak-ng reference), with the reference rows: espeak-ng itself and, when
# make voice's codes are there, the codec's round trip of it.
codes=${VOICE_WORK:-build/voice}/codec/codes
{
	printf 'id\ttext\twav\tref\n'
	while IFS='	' read -r id spk text; do
		printf 'espeak-1-%s\t%s\t%s\t%s\n' "$id" "$text" "$work/ref/$id.wav" "$work/ref/$id.wav"
		if [ -f "$codes/$id.txt" ]; then
			[ -f "$work/wav/codec-1-$id.wav" ] ||
				codec-decode --weights "$m/codec" --codes "$codes/$id.txt" \
					-o "$work/wav/codec-1-$id.wav"
			printf 'codec-1-%s\t%s\t%s\t%s\n' "$id" "$text" "$work/wav/codec-1-$id.wav" \
				"$work/ref/$id.wav"
		fi
	done <"$work/sentences"
	for wav in "$work"/wav/*.wav; do
		b=$(basename "$wav" .wav)
		case $b in espeak-* | codec-*) continue ;; esac
		id=${b##*-}
		s=${b%-*}
		[ "${s##*-}" -le "$eval_seeds" ] || continue
		text=$(awk -F'\t' -v id="$id" '$1 == id { print $3 }' "$work/sentences")
		printf '%s\t%s\t%s\t%s\n' "$b" "$text" "$wav" "$work/ref/$id.wav"
	done
} >"$work/manifest.tsv"
pcg-eval --json "$work/eval.json" "$work/manifest.tsv" >"$work/eval.txt"
# The baseline of MCD-DTW: the target's output against the reference of
# another sentence (the next one in the list), same speaker where it is.
{
	printf 'id\ttext\twav\tref\n'
	prev= prevtext=
	while IFS='	' read -r id spk text; do
		[ -z "$prev" ] || printf 'unrelated-1-%s\t%s\t%s\t%s\n' "$prev" "$prevtext" \
			"$work/wav/target-1-$prev.wav" "$work/ref/$id.wav"
		prev=$id prevtext=$text
	done <"$work/sentences"
} >"$work/unrelated.tsv"
pcg-eval --no-wer --json "$work/unrelated.json" "$work/unrelated.tsv" >"$work/unrelated.txt"

# The table, the curve and its plot.
python3 - "$work" <<'EOF'
import json, math, os, sys
work = sys.argv[1]
speed = {}
for line in open(os.path.join(work, "runs")):
    name, seed, uid, tok, sec, rounds, drafted, acc = line.split()
    s = speed.setdefault(name, [0, 0.0, 0, 0, 0])
    s[0] += int(tok); s[1] += float(sec); s[2] += int(rounds); s[3] += int(drafted)
    s[4] += int(acc)
qual, corpus = {}, {}
for u in (json.load(open(os.path.join(work, "eval.json")))["utterances"] +
          json.load(open(os.path.join(work, "unrelated.json")))["utterances"]):
    name = u["id"].rsplit("-", 2)[0]
    q = qual.setdefault(name, ([], []))
    if u["wer"] is not None:
        q[0].append(u["wer"])
        c = corpus.setdefault(name, [0, 0, 0])
        c[0] += u["errors"]
        c[1] += u["words"]
        c[2] += min(u["errors"], u["words"])  # a hallucination counts at most its words
    if u["mcd_db"] is not None:
        q[1].append(u["mcd_db"])
def ms(v):
    if not v:
        return "-"
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / max(1, len(v) - 1))
    return "%.3f +- %.3f" % (m, sd)
base = speed["target"][0] / speed["target"][1]
rows = ["| method | tokens/s | speedup | mean acc. length | acc. rate | corpus WER | capped | "
        "WER | MCD-DTW dB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
curve = []
names = (["espeak", "codec"] + list(speed) + [n for n in qual if n.startswith("stress")] +
         ["unrelated"])
for name in names:
    if name in speed:
        tok, sec, rounds, drafted, acc = speed[name]
        tps = tok / sec
        mal = tok / rounds
        rate = "%.3f" % (acc / drafted) if drafted else "-"
        cells = ["%.1f" % tps, "%.2fx" % (tps / base), "%.2f" % mal, rate]
    elif name in qual:
        cells = ["-", "-", "-", "-"]
    else:
        continue
    w, m = qual.get(name, ([], []))
    cw = "%.3f" % (corpus[name][0] / corpus[name][1]) if name in corpus else "-"
    cc = "%.3f" % (corpus[name][2] / corpus[name][1]) if name in corpus else "-"
    rows.append("| %s | %s | %s | %s | %s | %s |" % (name, " | ".join(cells), cw, cc, ms(w),
                                                      ms(m)))
    if name in speed and w and not name.startswith("mtp-viterbi"):
        curve.append((name, tps / base, corpus[name][0] / corpus[name][1],
                      sum(m) / len(m) if m else 0))
with open(os.path.join(work, "table1.md"), "w") as f:
    f.write("\n".join(rows) + "\n")
with open(os.path.join(work, "curve.dat"), "w") as f:
    for c in curve:
        f.write("%s %.4f %.4f %.4f\n" % c)
print("\n".join(rows))
EOF
if command -v gnuplot >/dev/null 2>&1; then
	gnuplot <<EOF
set terminal pngcairo size 900,600
set output "$work/table1.png"
set xlabel "speedup over the target alone (wall clock)"
set ylabel "corpus WER (Whisper base)"
set title "Demo voice: speed against intelligibility, every acceptance rule"
set key off
set grid
plot "$work/curve.dat" using 2:3 with points pt 7 ps 1.5, \
     "$work/curve.dat" using 2:3:1 with labels offset 0,1 font ",9"
EOF
	cp "$work/table1.png" "$png"
fi
echo "bench/table1.sh: $work/table1.md, $png"
