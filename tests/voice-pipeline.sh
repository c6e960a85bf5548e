#!/bin/sh
# tests/voice-pipeline.sh: the demo voice (models/demo) through the whole
# four-process pipeline as pcg-up brings it up with no flags: the verifier
# takes espeak-ng's phonemes and forces the phoneme tokens, so every policy
# writes exactly espeak-ng's number of frames (pcg-phonemize says how many),
# codec-decode picks the k-means codec from the model directory, the same
# seed gives the same tokens, speakers are checked; the MTP modes (the
# target's heads draft, or their Viterbi path is emitted) run too.
. "${PCG_ROOT:-.}/tests/shlib"
M="$ROOT/models/demo"
if [ ! -f "$M/config.json" ]; then
	echo "skip: models/demo is missing (make voice)"
	exit 77
fi
cd "$T" || exit 1
own_pipeline

text="Blessed are the meek, for they shall inherit the earth."
frames=$(pcg-phonemize --voice-file "$M/voice.json" --speaker 2 "$text" | head -n 1 | awk '{print $3}')
[ "$frames" -gt 100 ] && ok "espeak-ng: $frames frames" || bad "frames: $frames"

expect 0 "pcg-up with no flags takes models/demo" pcg-up
out_has "codec-decode ok"
grep -q "serving kmeans-gl" "$PCG_RUNTIME_DIR/codec-decode.log" &&
	ok "codec-decode took kmeans-gl from models/demo/codec" ||
	bad "codec-decode: $(cat "$PCG_RUNTIME_DIR/codec-decode.log")"

for pol in none sd ssd pcg mtp-sd mtp-pcg mtp-viterbi; do
	expect 0 "$pol" pcg-synth --policy "$pol" --speaker 2 --seed 7 --tokens -o "$pol.wav" "$text"
	n=$(tail -n 1 out | wc -w | tr -d ' ')
	[ "$n" = "$frames" ] && ok "$pol: $n speech tokens = espeak-ng's frames" ||
		bad "$pol: $n tokens, want $frames"
	bytes=$(od -A n -t u4 -j 40 -N 4 "$pol.wav" | tr -d ' ')
	[ "$bytes" = $((frames * 320 * 2)) ] && ok "$pol.wav: $frames x 320 samples" ||
		bad "$pol.wav: data $bytes bytes, want $((frames * 640))"
	tail -n 1 out >"$pol.tok"
done
grep -q "acceptance rate" err && ok "stats printed" || bad "no stats"
expect 0 "sd again, same seed" pcg-synth --policy sd --speaker 2 --seed 7 --tokens "$text"
tail -n 1 out >again.tok
same sd.tok again.tok "same seed, same tokens"
expect 0 "another speaker" pcg-synth --policy sd --speaker 5 --seed 7 --tokens "$text"
tail -n 1 out >spk5.tok
cmp -s sd.tok spk5.tok && bad "speaker 5 gave speaker 2's tokens" || ok "speaker 5 differs"
expect 1 "speaker out of range" pcg-synth --speaker 8 "$text"
err_has "the voice has 8 speakers"
# Foreign words give phonemes the corpus never had (espeak-ng's u and *):
# the pause token stands in, the length is still espeak-ng's.
foreign="Bonjour, ça va? Ĉu vi parolas Esperanton? русский"
ff=$(pcg-phonemize --voice-file "$M/voice.json" "$foreign" | head -n 1 | awk '{print $3}')
expect 0 "phonemes the voice never saw" pcg-synth --policy pcg --tokens "$foreign"
n=$(tail -n 1 out | wc -w | tr -d ' ')
[ "$n" = "$ff" ] && ok "unknown phonemes: $n tokens = espeak-ng's frames" || bad "$n tokens, want $ff"
expect 1 "a text that is only punctuation" pcg-synth --policy sd "."
err_has "espeak-ng speaks it as silence"
expect 0 "mtp-viterbi, 2 heads, top-3" pcg-synth --policy mtp-viterbi --lookahead 2 --viterbi-k 3 \
	--tokens "$text"
err_has "mean acceptance length"
expect 1 "more heads than the model has" pcg-synth --policy mtp-sd --lookahead 9 "$text"
err_has "MTP heads asked"
expect 1 "an unknown mtp mode" pcg-synth --policy mtp-beam "$text"
err_has "mtp-viterbi"
expect 0 "still up" pcg-synth --ping
pcg-down >/dev/null 2>&1

# The voice's target from a Q8_0 GGUF of itself: a GGUF has no companions,
# so pcg-up takes the voice, the matrix, the draft and the codec by flags;
# the phonemes are forced the same way, so the length is espeak-ng's again.
expect 0 "pcg-quantize the demo target" pcg-quantize --quiet --type q8_0 "$M" -o demo-q8_0.gguf
expect 1 "pcg-up --voice of a missing file" pcg-up --target demo-q8_0.gguf --voice no-such.json
err_has "no-such.json: no such file"
expect 0 "pcg-up a GGUF target with --voice and --tm" pcg-up --target demo-q8_0.gguf \
	--draft "$M/draft" --codec-weights "$M/codec" --voice "$M/voice.json" --tm "$M/tm"
expect 0 "pcg on the Q8_0 target" pcg-synth --policy pcg --asg "$M/asg" --speaker 2 --seed 7 \
	--tokens -o q8.wav "$text"
n=$(tail -n 1 out | wc -w | tr -d ' ')
[ "$n" = "$frames" ] && ok "Q8_0 target: $n speech tokens = espeak-ng's frames" ||
	bad "Q8_0 target: $n tokens, want $frames"
pcg-down >/dev/null 2>&1
trap - EXIT INT TERM
finish
