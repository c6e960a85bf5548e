#!/bin/sh
# tests/tm.sh: tm-build and tm-info as a user drives them: exit codes (0 ok,
# 1 failure, 2 usage), errors naming the file, line and position, a known
# answer counted by hand, standard input and output, the same file from the
# same corpus however it is fed, and corrupt files rejected with a message.
. "${PCG_ROOT:-.}/tests/shlib"

cd "$T" || exit 1

# --- usage
expect 2 "no arguments" tm-build
err_has "-n N is required"
expect 2 "no output" tm-build -n 4
err_has "-o FILE is required"
expect 2 "n 0" tm-build -n 0 -o x.tm
err_has "-n"
expect 2 "alpha 0" tm-build -n 4 --alpha 0 -o x.tm
err_has "--alpha"
expect 2 "tm-info without a file" tm-info
expect 2 "tm-info with two files" tm-info a b

# --- bad input names the file, line and position; nothing is written
printf '0 1 2\n\n3 1 7 2\n' > bad.txt
expect 1 "id out of range" tm-build -n 4 -o bad.tm bad.txt
err_has "bad.txt: line 3, token 3: '7' is not an id in [0, 4)"
[ ! -e bad.tm ] && [ ! -e bad.tm.tmp ] && ok "no file left" || bad "a file was left"
printf '0 1 -2\n' > neg.txt
expect 1 "negative id" tm-build -n 4 -o x.tm neg.txt
err_has "neg.txt: line 1, token 3: '-2'"
printf '0 1x 2\n' > junk.txt
expect 1 "junk" tm-build -n 4 -o x.tm junk.txt
err_has "line 1, token 2: '1x'"
printf '1 99999999999999999999\n' | tm-build -n 4 -o x.tm - >out 2>err
[ $? -eq 1 ] && ok "huge id on stdin" || bad "huge id on stdin"
err_has "stdin: line 1, token 2"
expect 1 "missing input" tm-build -n 4 -o x.tm nosuch.txt
err_has "nosuch.txt: No such file"
expect 1 "unwritable output" tm-build -n 4 -o nodir/x.tm bad.txt
expect 1 "unwritable output, good input" tm-build -n 4 -o nodir/x.tm neg.txt

# --- a known answer: 0 1 2 1 2 3 / 3 3 3 0 / 1 2 gives the rows below
printf '0 1 2 1 2 3\n3 3 3 0\n\n1 2\n' > c.txt
expect 0 "build" tm-build -n 6 --alpha 0.5 -o c.tm c.txt
err_has "tm-build: sequences	3"
err_has "tm-build: bigrams	9"
err_has "tm-build: nnz	6"
err_has "tm-build: bytes	240"
printf '0 1: 1:1\n1 3: 2:3\n2 2: 1:1 3:1\n3 3: 0:1 3:2\n' > want
expect 0 "its rows" tm-info --rows c.tm
same out want "rows counted by hand"
expect 0 "its header" tm-info c.tm
out_has "alpha	0.5"
out_has "empty_rows	2"
out_has "checksum_ok	yes"

# --- pruning: row 2 has a tie 1:1 3:1, kept to the lower id
expect 0 "prune 1" tm-build -n 6 --prune 1 --quiet -o p.tm c.txt
expect 0 "pruned rows" tm-info --rows p.tm
out_has "2 1: 1:1"
out_has "3 2: 3:2"

# --- the same corpus gives the same bytes: again, split over files, through
# stdin and stdout
expect 0 "again" tm-build -n 6 --alpha 0.5 --quiet -o c2.tm c.txt
same c.tm c2.tm "deterministic"
head -n 2 c.txt > c.a; tail -n 2 c.txt > c.b
expect 0 "split in two files" tm-build -n 6 --alpha 0.5 --quiet -o c3.tm c.a c.b
same c.tm c3.tm "two files give the same file"
tm-build -n 6 --alpha 0.5 --quiet -o - < c.txt > c4.tm 2>err
same c.tm c4.tm "stdin to stdout gives the same file"
expect 0 "tm-info from stdin" sh -c 'tm-info - < c.tm'
out_has "nnz	6"

# --- damaged files
head -c 200 c.tm > short.tm
expect 1 "truncated" tm-info short.tm
err_has "truncated or extended"
cp c.tm flip.tm
printf 'X' | dd of=flip.tm bs=1 seek=230 conv=notrunc 2>/dev/null
expect 1 "corrupt" tm-info flip.tm
err_has "checksum mismatch"
printf 'not a tm file at all, but long enough to have a header of 64 bytes.\n' > foreign.tm
expect 1 "foreign" tm-info foreign.tm
err_has "bad magic"
expect 1 "missing" tm-info nosuch.tm
err_has "nosuch.tm"

finish
