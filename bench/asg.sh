#!/bin/sh
# bench/asg.sh: asg-build on LLaSA-1B's shape (n = 65,536 rows, d = 2048,
# bf16) for random and clustered rows (made by bench-asg, cached), timed
# with its wall time and peak RSS, then bench-policy (sd and pcg per round
# at V = 65,537, L = 3) on the clustered ASG and on a synthetic one.
#
# Usage: bench/asg.sh            (from the repository root, after make)
# Environment:
#   BENCH_CACHE  where the 256 MB matrices and the ASGs are kept
#                (default ${TMPDIR:-/tmp}/pcg-tts-bench)
#   THREADS      threads for asg-build (default 2)
set -eu
cd "$(dirname "$0")/.."
cache=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}
threads=${THREADS:-2}
mkdir -p "$cache"
for kind in random clustered; do
	m=$cache/emb-$kind.safetensors
	if [ ! -f "$m" ]; then
		echo "making $m (256 MB)" >&2
		bin/bench-asg --kind "$kind" --out "$m"
	fi
	echo "== asg-build, $kind rows, theta 0.4, $threads threads"
	/usr/bin/time -f "wall %e s, cpu %U s user, peak RSS %M KB" \
		bin/asg-build --embeddings "$m" --tensor embeddings --theta 0.4 \
		--threads "$threads" -o "$cache/$kind.asg" 2>&1 |
		grep -v '%\|asg-build: \(version\|token_offset\|topk\|weights\|checksum\|rows\)'
done
echo "== policies on the clustered ASG"
bin/bench-policy --asg "$cache/clustered.asg"
echo "== policies on a synthetic ASG (windows of 24 overlapping by 12)"
bin/bench-policy
echo "== pcg with a thinning cap of 1 (the exact residual on almost every rejection)"
bin/bench-policy --asg "$cache/clustered.asg" --max-trials 1 | grep pcg
