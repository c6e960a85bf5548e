#!/bin/sh
# tests/fuzz.sh: runs the committed corpus of each libFuzzer target once
# (every input, under ASan and UBSan). Longer fuzzing: tests/fuzz/README.md.
set -u
ls build/fuzz/* >/dev/null 2>&1 || { echo "fuzz targets not built (clang with libFuzzer missing)"; exit 77; }
fails=0
for f in build/fuzz/*; do
	name=$(basename "$f")
	corpus=tests/fuzz/corpus/${name#fuzz_}
	n=$(ls "$corpus" | wc -l)
	if "$f" -runs=0 -malloc_limit_mb=64 "$corpus" >"${TEST_TMP:-/tmp}/$name.log" 2>&1; then
		echo "ok: $name ran $n inputs"
	else
		echo "FAIL: $name"; tail -n 30 "${TEST_TMP:-/tmp}/$name.log"; fails=$((fails + 1))
	fi
done
[ $fails -eq 0 ]
