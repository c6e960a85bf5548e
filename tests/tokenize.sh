#!/bin/sh
# tests/tokenize.sh: pcg-tokenize as a user drives it: exit codes (0 ok,
# 1 failure, 2 usage), encoding from an argument and from stdin, --bos,
# --decode round trips, the LLaSA prompt (checked against the ids
# transformers gave, tests/fixtures/tokenizer/mkmodel-prompt.txt) and
# one-line errors that name the problem.
. "${PCG_ROOT:-.}/tests/shlib"
FIX="$ROOT/tests/fixtures/tokenizer"
TOK="$FIX/mkmodel-tokenizer.json"
# out_is "text": the last command's stdout is exactly text (and a newline).
out_is() { if [ "$(cat "$T/out")" = "$1" ]; then ok "output '$1'"; else bad "output '$(cat "$T/out")', want '$1'"; fi; }

cd "$T" || exit 1

# --- usage
expect 2 "no --tokenizer" pcg-tokenize hello
err_has "--tokenizer FILE is required"
expect 2 "two texts" pcg-tokenize --tokenizer "$TOK" a b
err_has "one TEXT at most"
expect 2 "--decode with a word" pcg-tokenize --tokenizer "$TOK" --decode 1 two
err_has "--decode: the arguments must be ids"
expect 2 "--decode with a negative id" pcg-tokenize --tokenizer "$TOK" --decode -- -1
expect 2 "--decode and --llasa-prompt" pcg-tokenize --tokenizer "$TOK" --decode --llasa-prompt --text x
expect 2 "--llasa-prompt without --text" pcg-tokenize --tokenizer "$TOK" --llasa-prompt
err_has "--llasa-prompt needs --text"
expect 2 "--prompt-text without codes" pcg-tokenize --tokenizer "$TOK" --llasa-prompt --text x --prompt-text y
err_has "go together"
expect 2 "--text without --llasa-prompt" pcg-tokenize --tokenizer "$TOK" --text x
expect 2 "--date without --llasa-prompt" pcg-tokenize --tokenizer "$TOK" --date "1 Jan 2025" x
expect 2 "--bos with --decode" pcg-tokenize --tokenizer "$TOK" --bos --decode 1
expect 2 "--skip-special without --decode" pcg-tokenize --tokenizer "$TOK" --skip-special x

# --- encoding
expect 0 "encode" pcg-tokenize --tokenizer "$TOK" "Hello world"
out_is "39 68 75 75 78 220 86 78 81 75 67"
ids=$(cat out)
expect 0 "encode with --bos" pcg-tokenize --tokenizer "$TOK" --bos "Hello world"
out_is "496 $ids"
printf 'Hello world' | pcg-tokenize --tokenizer "$TOK" - >out 2>err
[ "$(cat out)" = "$ids" ] && ok "stdin with -" || bad "stdin with - gave '$(cat out)'"
printf 'Hello world' | pcg-tokenize --tokenizer "$TOK" >out 2>err
[ "$(cat out)" = "$ids" ] && ok "stdin without an argument" || bad "stdin gave '$(cat out)'"
printf 'a\n' | pcg-tokenize --tokenizer "$TOK" >out 2>err
[ "$(cat out)" = "64 198" ] && ok "stdin keeps the final newline" || bad "stdin 'a\\n' gave '$(cat out)'"
expect 0 "empty text" pcg-tokenize --tokenizer "$TOK" ""
out_is ""
expect 0 "added tokens inside text" pcg-tokenize --tokenizer "$TOK" "<|s_1|><|s_2|><|eot_id|>"
out_is "521 522 505"
expect 1 "invalid UTF-8" pcg-tokenize --tokenizer "$TOK" "$(printf 'ab\355\240\200')"
err_has "invalid UTF-8 at byte 2: surrogate"
printf 'xyz\300\257' | pcg-tokenize --tokenizer "$TOK" - >out 2>err
[ $? -eq 1 ] && grep -q "at byte 3: overlong" err && ok "invalid UTF-8 on stdin" || bad "stdin overlong: $(cat err)"

# --- decoding
expect 0 "decode" pcg-tokenize --tokenizer "$TOK" --decode $ids
out_is "Hello world"
expect 0 "decode specials" pcg-tokenize --tokenizer "$TOK" --decode 496 39 521
out_is "<|begin_of_text|>H<|s_1|>"
expect 0 "decode skipping specials" pcg-tokenize --tokenizer "$TOK" --decode --skip-special 496 39 521
out_is "H<|s_1|>"
expect 1 "decode an id beyond the vocabulary" pcg-tokenize --tokenizer "$TOK" --decode 1 99999
err_has "id 99999 is not in the vocabulary"
text='Ünïcödé, 日本語 and emoji 😀 — "quoted"	tab'
pcg-tokenize --tokenizer "$TOK" "$text" >ids 2>err && pcg-tokenize --tokenizer "$TOK" --decode $(cat ids) >out 2>err
[ "$(cat out)" = "$text" ] && ok "round trip" || bad "round trip gave '$(cat out)'"

# --- the LLaSA prompt, against transformers' apply_chat_template
{ read -r _; IFS= read -r ptext_want; IFS= read -r pprompt; read -r pcodes; read -r pids; } <"$FIX/mkmodel-prompt.txt"
echo "$pcodes" >codes.txt
expect 0 "llasa cloning prompt" pcg-tokenize --tokenizer "$TOK" --llasa-prompt --text "$ptext_want" --prompt-text "$pprompt" --prompt-codes codes.txt
out_is "$pids"
echo "$pcodes" | pcg-tokenize --tokenizer "$TOK" --llasa-prompt --text "$ptext_want" --prompt-text "$pprompt" --prompt-codes - >out 2>err
[ "$(cat out)" = "$pids" ] && ok "prompt codes from stdin" || bad "prompt codes from stdin: $(cat err)"
expect 0 "llasa plain prompt" pcg-tokenize --tokenizer "$TOK" --llasa-prompt --text "Hi"
plain=$(cat out)
case "$plain" in 496\ *\ 516) ok "plain prompt: bos first, <|SPEECH_GENERATION_START|> last" ;;
*) bad "plain prompt: $plain" ;; esac
expect 0 "llasa prompt, other date" pcg-tokenize --tokenizer "$TOK" --llasa-prompt --text "Hi" --date "01 Jan 2025"
[ "$(cat out)" != "$plain" ] && ok "the date changes the prompt" || bad "--date ignored"
pcg-tokenize --tokenizer "$TOK" --decode $(cat out) >dec 2>err
grep -q "Today Date: 01 Jan 2025" dec && ok "date in the decoded prompt" || bad "decoded: $(cat dec)"
echo "5 1024" >codes.txt
expect 1 "prompt code out of range" pcg-tokenize --tokenizer "$TOK" --llasa-prompt --text x --prompt-text y --prompt-codes codes.txt
err_has "prompt code 1024 (at 1) is not in [0, 1024)"
echo "5 x7" >codes.txt
expect 1 "prompt code not a number" pcg-tokenize --tokenizer "$TOK" --llasa-prompt --text x --prompt-text y --prompt-codes codes.txt
err_has "codes.txt: code 2: 'x7' is not an integer"
expect 1 "missing codes file" pcg-tokenize --tokenizer "$TOK" --llasa-prompt --text x --prompt-text y --prompt-codes nowhere.txt
err_has "nowhere.txt: No such file"
echo "5 6" >codes.txt
expect 1 "prompt text not UTF-8" pcg-tokenize --tokenizer "$TOK" --llasa-prompt --text x --prompt-text "$(printf '\377')" --prompt-codes codes.txt
err_has "prompt text: invalid UTF-8 at byte 0"

# --- bad tokenizer files
expect 1 "missing tokenizer" pcg-tokenize --tokenizer nowhere.json x
err_has "nowhere.json: No such file"
printf '{"model": {"type": "WordPiece"}, "decoder": {"type": "ByteLevel"}}' >wp.json
expect 1 "WordPiece" pcg-tokenize --tokenizer wp.json x
err_has "wp.json: model: type WordPiece is not supported"
head -c 1000 "$TOK" >cut.json
expect 1 "truncated tokenizer.json" pcg-tokenize --tokenizer cut.json x
err_has "cut.json: not valid JSON"
sed 's/"normalizer": null/"normalizer": {"type": "NFKC"}/' "$TOK" >nfkc.json
expect 1 "a normalizer" pcg-tokenize --tokenizer nfkc.json x
err_has "normalizer: type NFKC is not supported"
sed 's/<|s_0|>/<|s_zero|>/' "$TOK" >nos.json
expect 1 "no <|s_0|>" pcg-tokenize --tokenizer nos.json --llasa-prompt --text x
err_has "no <|s_0|> token"

finish
