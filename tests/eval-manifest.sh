#!/bin/sh
# tests/eval-manifest.sh: pcg-eval without Whisper: the manifest's errors
# (named by line), missing files, usage errors, the MCD column (--no-wer)
# equal to pcg-mcd's, --json, the word alignment behind the WER, and the
# message that tells how to install faster-whisper when it is missing.
# tests/eval.sh runs Whisper itself when it is installed.
. "${PCG_ROOT:-.}/tests/shlib"
FX="$ROOT/tests/fixtures/speech"
cd "$T" || exit 1
if ! command -v python3 >/dev/null 2>&1; then
	echo "python3 not installed"
	exit 77
fi
cp "$FX/a.wav" "$FX/b.wav" .
tab=$(printf '\t')
text="Bring me some water, please."

# --- usage
expect 0 "--help" pcg-eval --help
out_has "--no-wer"
expect 2 "no manifest" pcg-eval
expect 2 "--beam 0" pcg-eval --beam 0 m.tsv
expect 2 "unknown flag" pcg-eval --frobnicate m.tsv

# --- the manifest: errors name the file and the line
expect 1 "missing manifest" pcg-eval --no-wer nowhere.tsv
err_has "nowhere.tsv"
printf 'id\ttext\n' >m.tsv
expect 1 "no wav column" pcg-eval --no-wer m.tsv
err_has "m.tsv:1: the header names no 'wav' column"
printf 'id\ttext\twav\tref\na\t%s\ta.wav\tb.wav\nb\t%s\tb.wav\n' "$text" "$text" >m.tsv
expect 1 "a short line" pcg-eval --no-wer m.tsv
err_has "m.tsv:3: 3 tab-separated fields, want 4"
printf 'id\ttext\twav\na\t%s\ta.wav\nb\t%s\tgone.wav\n' "$text" "$text" >m.tsv
expect 1 "missing wav" pcg-eval --no-wer m.tsv
err_has "m.tsv:3:"
err_has "gone.wav: no such file"
printf 'id\ttext\twav\na\t\ta.wav\n' >m.tsv
expect 1 "empty text" pcg-eval --no-wer m.tsv
err_has "m.tsv:2: empty text"
printf 'id\ttext\twav\na\t%s\ta.wav\na\t%s\tb.wav\n' "$text" "$text" >m.tsv
expect 1 "duplicate id" pcg-eval --no-wer m.tsv
err_has "m.tsv:3: id 'a' already on line 2"
printf 'id\ttext\twav\tref\na\t%s\ta.wav\td.wav\n' "$text" >m.tsv
cp "$FX/d.wav" .
expect 1 "pcg-mcd fails: rates differ" pcg-eval --no-wer m.tsv
err_has "16000 Hz"

# --- --no-wer: the MCD of pcg-mcd, paths relative to the manifest
mkdir -p sub
printf 'id\ttext\twav\tref\na\t%s\t../a.wav\t../b.wav\nb\t%s\t../b.wav\t\n' "$text" "$text" >sub/m.tsv
expect 0 "--no-wer" pcg-eval --no-wer --json out.json sub/m.tsv
want=$(pcg-mcd a.wav b.wav)
out_has "a${tab}-${tab}-${tab}-${tab}${want}"
out_has "b${tab}-${tab}-${tab}-${tab}-"
out_has "# MCD ${want} +- 0.0000 dB (mean +- std over 1 utterances)"
python3 -c '
import json, sys
o = json.load(open("out.json"))
u = o["utterances"]
assert len(u) == 2 and abs(u[0]["mcd_db"] - float(sys.argv[1])) < 1e-4, u
assert u[1]["mcd_db"] is None and o["summary"]["mcd_utterances"] == 1
assert o["settings"]["asr"] is None
' "$want" && ok "--json" || bad "--json: $(head -c 400 out.json)"

# --- the word alignment behind the WER (pcg-eval loaded as a module)
python3 - "$ROOT/scripts/pcg-eval" <<'PY' && ok "normalisation and word errors" || bad "word errors"
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("pcg_eval", sys.argv[1])
spec = importlib.util.spec_from_loader("pcg_eval", loader)
pe = importlib.util.module_from_spec(spec)
loader.exec_module(pe)
n = pe.normalise
assert n("Bring me some water, please.") == ["bring", "me", "some", "water", "please"]
assert n("Don't  STOP\u2014the \u201cLamb\u2019s\u201d well-known!") == \
    ["dont", "stop", "the", "lambs", "well", "known"]
w = pe.word_errors
assert w("a b c".split(), "a b c".split()) == (0, 0, 0)
assert w("a b c".split(), "a x c".split()) == (1, 0, 0)
assert w("a b c".split(), "a c".split()) == (0, 1, 0)
assert w("a b c".split(), "a b b c".split()) == (0, 0, 1)
assert w("a b c".split(), []) == (0, 3, 0)
assert sum(w("the cat sat".split(), "a cat sat on it".split())) == 3
PY

# --- no faster-whisper: a message that says how to install it
mkdir -p fake/faster_whisper
echo 'raise ImportError("not here")' >fake/faster_whisper/__init__.py
printf 'id\ttext\twav\na\t%s\ta.wav\n' "$text" >m.tsv
expect 1 "no faster-whisper" env PYTHONPATH="$T/fake" pcg-eval m.tsv
err_has "faster-whisper is not installed: make eval-deps"
expect 1 "--check without faster-whisper" env PYTHONPATH="$T/fake" pcg-eval --check
err_has "faster-whisper is not installed"

finish
