#!/bin/sh
# tests/mcd.sh: pcg-mcd as a user drives it, on the committed espeak-ng
# fixtures (tests/fixtures/speech): one number in dB, the librosa reference
# of mcd.tsv to 5e-3 dB (tests/unit/test_mcd.c checks the library closer),
# 0 for a file against itself, the same both ways, --json, and bad input:
# usage errors exit 2, missing, non-audio and empty files and different
# rates exit 1 with the file named, never a crash.
. "${PCG_ROOT:-.}/tests/shlib"
FX="$ROOT/tests/fixtures/speech"
cd "$T" || exit 1

# --- usage
expect 2 "no files" pcg-mcd
err_has "two files are required"
expect 2 "one file" pcg-mcd "$FX/a.wav"
expect 2 "three files" pcg-mcd "$FX/a.wav" "$FX/b.wav" "$FX/a.wav"

# --- values: one number; librosa's; 0 on itself; symmetric
expect 0 "a b" pcg-mcd "$FX/a.wav" "$FX/b.wav"
ab=$(cat "$T/out")
echo "$ab" | grep -Eq '^[0-9]+\.[0-9]{4}$' && ok "one number: $ab" || bad "output '$ab'"
want=$(awk '$1 == "a.wav" && $2 == "b.wav" { print $3 }' "$FX/mcd.tsv")
awk -v a="$ab" -v b="$want" 'BEGIN { d = a - b; exit !(d < 5e-3 && d > -5e-3) }' &&
	ok "a b = librosa ($want)" || bad "a b: $ab, librosa $want"
expect 0 "b a" pcg-mcd "$FX/b.wav" "$FX/a.wav"
[ "$(cat "$T/out")" = "$ab" ] && ok "symmetric" || bad "b a: $(cat "$T/out"), a b: $ab"
expect 0 "a a" pcg-mcd "$FX/a.wav" "$FX/a.wav"
[ "$(cat "$T/out")" = "0.0000" ] && ok "MCD(a, a) = 0" || bad "MCD(a, a) = $(cat "$T/out")"
expect 0 "stereo against mono at 22,050 Hz" pcg-mcd "$FX/c.wav" "$FX/d.wav"

# --- --json: the counts of the reference
expect 0 "--json" pcg-mcd --json "$FX/a.wav" "$FX/b.wav"
fr=$(awk '$1 == "a.wav" && $2 == "b.wav" { print $4, $5, $6 }' "$FX/mcd.tsv")
set -- $fr
out_has "\"frames_a\": $1"
out_has "\"frames_b\": $2"
out_has "\"path_length\": $3"
out_has '"sample_rate": 16000'
out_has '"mcd_db": '
expect 0 "--json stereo" pcg-mcd --json "$FX/c.wav" "$FX/d.wav"
out_has '"channels_a": 2'

# --- bad input: exit 1, the file named
expect 1 "missing file" pcg-mcd "$FX/a.wav" nowhere.wav
err_has "nowhere.wav: No such file"
echo "not audio" >text.wav
expect 1 "not a WAV" pcg-mcd text.wav "$FX/a.wav"
err_has "text.wav: not an audio file"
# A WAV header (16 kHz mono 16-bit) with no samples.
printf 'RIFF\044\000\000\000WAVEfmt \020\000\000\000\001\000\001\000\200\076\000\000\000\175\000\000\002\000\020\000data\000\000\000\000' >empty.wav
expect 1 "no samples" pcg-mcd "$FX/a.wav" empty.wav
err_has "empty.wav: no samples"
: >zero.wav
expect 1 "empty file" pcg-mcd zero.wav "$FX/a.wav"
err_has "zero.wav"
expect 1 "different rates" pcg-mcd "$FX/a.wav" "$FX/d.wav"
err_has "a.wav is 16000 Hz"
err_has "d.wav is 22050 Hz"
expect 1 "a directory" pcg-mcd "$FX" "$FX/a.wav"
err_has "$FX"

finish
