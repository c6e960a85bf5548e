#!/bin/sh
# tests/eval.sh: pcg-eval with Whisper base on the committed espeak-ng
# fixtures (tests/fixtures/speech): the right text gives a WER under 0.3,
# a wrong one over 0.7, the MCD column is pcg-mcd's, the summary adds up.
# Skips (77) when faster-whisper or the weights are not installed
# (make eval-deps); tests/eval-manifest.sh covers the rest without them.
. "${PCG_ROOT:-.}/tests/shlib"
FX="$ROOT/tests/fixtures/speech"
cd "$T" || exit 1
if ! command -v python3 >/dev/null 2>&1; then
	echo "python3 not installed"
	exit 77
fi
if ! pcg-eval --check >check.out 2>check.err; then
	echo "Whisper is not available to pcg-eval (make eval-deps installs it): $(tail -n 1 check.err)"
	exit 77
fi

text=$(awk -F '\t' '$1 == "a" { print $2 }' "$FX/texts.tsv")
{
	printf 'id\ttext\twav\tref\n'
	printf 'a\t%s\t%s\t%s\n' "$text" "$FX/a.wav" "$FX/b.wav"
	printf 'b\t%s\t%s\t\n' "$text" "$FX/b.wav"
	printf 'wrong\tThe lamb is on the mountain today.\t%s\t\n' "$FX/a.wav"
} >m.tsv
expect 0 "pcg-eval with Whisper" pcg-eval --threads 2 --json out.json m.tsv
cat out
want=$(pcg-mcd "$FX/a.wav" "$FX/b.wav")
python3 -c '
import json, sys
o = json.load(open("out.json"))
u = {r["id"]: r for r in o["utterances"]}
assert u["a"]["wer"] < 0.3 and u["b"]["wer"] < 0.3, (u["a"]["transcript"], u["b"]["transcript"])
assert u["wrong"]["wer"] > 0.7, u["wrong"]
assert abs(u["a"]["mcd_db"] - float(sys.argv[1])) < 1e-4 and u["b"]["mcd_db"] is None
s = o["summary"]
assert s["words"] == 5 + 5 + 7 and s["errors"] == sum(r["errors"] for r in u.values())
assert abs(s["corpus_wer"] - s["errors"] / s["words"]) < 1e-12
capped = sum(min(r["errors"], r["words"]) for r in u.values()) / s["words"]
assert abs(s["corpus_wer_capped"] - capped) < 1e-12 and s["corpus_wer_capped"] <= s["corpus_wer"]
assert o["settings"]["asr"]["beam_size"] == 5 and o["settings"]["asr"]["compute_type"] == "int8"
print("WER a %.3f b %.3f wrong %.3f" % (u["a"]["wer"], u["b"]["wer"], u["wrong"]["wer"]))
' "$want" && ok "WER low for the right text, high for a wrong one" || bad "WER: $(cat out)"
out_has "# corpus WER"

finish
