#!/bin/sh
# tests/asg.sh: asg-build and asg-info as a user drives them: exit codes
# (0 ok, 1 failure, 2 usage), one-line errors, a known answer on a crafted
# matrix, the same file whichever way the rows are named (model directory,
# --rows, --embeddings, stdout) and whatever the thread count, --device
# (a bad name is a usage error, a GPU that is not there a one-line error),
# and corrupt, truncated and foreign files rejected with a clear message.
. "${PCG_ROOT:-.}/tests/shlib"

cd "$T" || exit 1
pcg-mkmodel --out m --seed 3 >/dev/null || { echo "pcg-mkmodel failed"; exit 1; }

# --- usage
expect 2 "no arguments" asg-build
err_has "-o FILE is required"
expect 2 "no input" asg-build -o x.asg
err_has "one of --model DIR and --embeddings FILE"
expect 2 "both inputs" asg-build --model m --embeddings m/model.safetensors -o x.asg
expect 2 "bad --rows" asg-build --model m --rows 5:3 -o x.asg
err_has "--rows"
expect 2 "bad --weights" asg-build --model m --weights cosine -o x.asg
err_has "--weights"
expect 2 "theta 1" asg-build --model m --theta 1 -o x.asg
err_has "--theta"
expect 2 "bad --device" asg-build --model m --device bogus -o x.asg
err_has "device 'bogus': want cpu, cuda or cuda:N"
expect 2 "--device cuda:" asg-build --model m --device cuda: -o x.asg
expect 2 "asg-info without a file" asg-info
expect 2 "asg-info with two files" asg-info a b

# --- a known answer: rows (1,0), (1,0.1), (0,1), (-1,0) at theta 0.4 give
# G(0) = G(1) = {0,1}, G(2) = {2}, G(3) = {3}: three groups.
perl -e '$h = q({"e":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]}});
	$h .= " " x ((8 - length($h) % 8) % 8);
	print pack("Q<", length $h), $h, pack("f<*", 1, 0, 1, 0.1, 0, 1, -1, 0)' > four.safetensors
expect 0 "build the crafted matrix" asg-build --embeddings four.safetensors --tensor e -o four.asg
err_has "asg-build: group_size_max	2"
printf '0: 0 1\n1: 2\n2: 3\n' > want
expect 0 "its groups" asg-info --groups four.asg
same out want "groups of the crafted matrix are as computed by hand"
expect 0 "its header" asg-info four.asg
out_has "groups	3"
out_has "groups_per_token_mean	1"
out_has "checksum_ok	yes"

# --- the tiny model: speech rows found through the tokenizer
expect 0 "build from the model dir" asg-build --model m --theta 0.3 -o a.asg
err_has "asg-build: n	1024"
err_has "peak_rss_mb"
expect 0 "asg-info" asg-info a.asg
out_has "n	1024"
off=$(sed -n 's/^token_offset	//p' out)
[ -n "$off" ] && [ "$off" -gt 0 ] && ok "token offset $off" || bad "token offset '$off'"
expect 0 "same rows by --rows" asg-build --model m --theta 0.3 --rows "$off:$((off + 1024))" -o b.asg
same a.asg b.asg "--rows gives the same file"
expect 0 "same rows by --embeddings" asg-build --embeddings m/model.safetensors --theta 0.3 --rows "$off:$((off + 1024))" -o c.asg
same a.asg c.asg "--embeddings gives the same file"
expect 0 "one thread" asg-build --model m --theta 0.3 --threads 1 -o d.asg
same a.asg d.asg "thread count does not change the file"
expect 0 "to stdout" asg-build --model m --theta 0.3 -o -
same a.asg out "stdout gets the same bytes"
asg-build --model m --theta 0.3 --quiet -o - 2>"$T/err" | asg-info - >"$T/out"
[ $? -eq 0 ] && out_has "n	1024" || bad "asg-build -o - | asg-info -"
[ -s "$T/err" ] && bad "--quiet printed: $(cat "$T/err")" || ok "--quiet is quiet"
expect 0 "groups listing" asg-info --groups a.asg
[ "$(wc -l < out)" -eq "$(asg-info a.asg | sed -n 's/^groups	//p')" ] && ok "one line per group" || bad "line count"
head -n 1 out | grep -q '^0: 0\( [0-9]*\)*$' && ok "group 0 starts with token 0" || bad "group 0: $(head -n 1 out)"
expect 0 "similarity weights, top-k" asg-build --model m --theta 0.3 --weights similarity --topk 4 -o e.asg
expect 0 "asg-info on it" asg-info e.asg
out_has "weights	similarity"
out_has "group_size_max	4"
expect 0 "--device cpu" asg-build --model m --theta 0.3 --device cpu -o h.asg
same a.asg h.asg "--device cpu is the default"
err_has "asg-build: device	cpu"

# --device cuda: where no GPU can be used (none here, or a build without the
# CUDA backend) one line says which, exit 1, nothing written; with a GPU the
# build runs (tests/cuda/test_asg.c compares its groups with the CPU's).
asg-build --model m --theta 0.3 --device cuda -o cuda.asg >"$T/out" 2>"$T/err"
rc=$?
if [ $rc -eq 0 ]; then
	echo "a CUDA device is here: the no-GPU error is not tested"
	err_has "asg-build: device	cuda:0"
	expect 0 "asg-info on the GPU's file" asg-info cuda.asg
	out_has "n	1024"
elif [ $rc -eq 1 ] && grep -q "no CUDA device on this machine\|this build has no CUDA backend" "$T/err"; then
	ok "--device cuda without a GPU: exit 1, $(cat "$T/err")"
	[ "$(wc -l < "$T/err")" -eq 1 ] && ok "one line" || bad "more than one line: $(cat "$T/err")"
	err_has "asg-build: device cuda:0: "
	[ ! -e cuda.asg ] && [ ! -e cuda.asg.tmp ] && ok "nothing written" || bad "cuda.asg written"
else
	bad "--device cuda: exit $rc: $(cat "$T/err")"
fi
expect 1 "a GPU number beyond the machine's" asg-build --model m --device cuda:4096 -o x.asg
err_has "asg-build: device cuda:4096: "
[ "$(wc -l < "$T/err")" -eq 1 ] && ok "one line" || bad "more than one line: $(cat "$T/err")"
pcg-mkmodel --out m16 --dtype f16 --seed 3 >/dev/null
expect 0 "f16 embeddings" asg-build --model m16 --theta 0.3 -o f.asg
pcg-mkmodel --out m32 --dtype f32 --seed 3 >/dev/null
expect 0 "f32 embeddings" asg-build --model m32 --theta 0.3 -o g.asg

# --- failures: clear messages, nothing left behind
expect 1 "missing model" asg-build --model nowhere -o x.asg
err_has "nowhere/tokenizer.json"
err_has "--rows"
expect 1 "missing tensor" asg-build --embeddings m/model.safetensors --tensor nope -o x.asg
err_has "no tensor 'nope'"
expect 1 "rows beyond the matrix" asg-build --model m --rows 0:999999 -o x.asg
err_has "out of range"
expect 1 "unwritable output" asg-build --model m -o no/such/dir/x.asg
[ ! -e x.asg ] && [ ! -e no/such/dir/x.asg.tmp ] && ok "no partial file" || bad "partial file left"
cp a.asg keep.asg
expect 1 "failed build keeps the old file" asg-build --model m --tensor nope -o a.asg
same a.asg keep.asg "old file untouched"

# --- corrupt files
size=$(wc -c < a.asg)
cp a.asg flip.asg
printf 'Z' | dd of=flip.asg bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
cmp -s a.asg flip.asg && bad "the flip did not change the file"
expect 1 "one byte changed" asg-info flip.asg
err_has "checksum mismatch"
err_has "corrupt"
head -c $((size - 8)) a.asg > short.asg
expect 1 "truncated" asg-info short.asg
err_has "truncated"
expect 1 "not an ASG file" asg-info m/config.json
err_has "not an ASG file"
expect 1 "empty" asg-info /dev/null
err_has "too short"

finish
