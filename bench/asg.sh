#!/bin/sh
# bench/asg.sh: asg-build on LLaSA-1B's shape (n = 65,536 rows, d = 2048,
# bf16; --d 4096 for LLaSA-8B's) for random and clustered rows (made by
# bench-asg, cached), timed with its wall time and peak RSS, on the CPU or a
# GPU (--device), then bench-policy (sd and pcg per round at V = 65,537,
# L = 3) on the clustered ASG and on a synthetic one.
#
# Usage: bench/asg.sh [--device cpu|cuda|cuda:N] [--d D] [--asg-only]
#        (from the repository root, after make)
#   --device    where asg-build's products run (default cpu)
#   --d         columns of the rows (default 2048)
#   --asg-only  leave out the policy benches
# Environment:
#   BENCH_CACHE  where the matrices (256 MB at d = 2048) and the ASGs are
#                kept (default ${TMPDIR:-/tmp}/pcg-tts-bench)
#   THREADS      threads for asg-build (default 2)
set -eu
cd "$(dirname "$0")/.."
device=cpu d=2048 asg_only=0
while [ $# -gt 0 ]; do
	case $1 in
	--device) device=$2; shift 2 ;;
	--d) d=$2; shift 2 ;;
	--asg-only) asg_only=1; shift ;;
	*) echo "usage: bench/asg.sh [--device DEV] [--d D] [--asg-only]" >&2; exit 2 ;;
	esac
done
cache=${BENCH_CACHE:-${TMPDIR:-/tmp}/pcg-tts-bench}
threads=${THREADS:-2}
mkdir -p "$cache"
for kind in random clustered; do
	m=$cache/emb-$kind-$d.safetensors
	if [ ! -f "$m" ]; then
		echo "making $m ($((65536 * d * 2 / 1048576)) MB)" >&2
		bin/bench-asg --kind "$kind" --d "$d" --out "$m"
	fi
	out=$cache/$kind-$d-$device.asg
	rm -f "$out"
	echo "== asg-build, $kind rows, d $d, theta 0.4, $threads threads, device $device"
	/usr/bin/time -f "wall %e s, cpu %U s user, peak RSS %M KB" \
		bin/asg-build --embeddings "$m" --tensor embeddings --theta 0.4 \
		--threads "$threads" --device "$device" -o "$out" 2>&1 |
		grep -v '%\|asg-build: \(version\|token_offset\|topk\|weights\|checksum\|rows\)'
	[ -f "$out" ] || { echo "bench/asg.sh: asg-build failed" >&2; exit 1; }
done
if [ "$device" != cpu ] && [ -f "$cache/clustered-$d-cpu.asg" ]; then
	# The CPU's file of the same rows, from an earlier run: equal weights
	# depend on the groups alone, so equal files mean equal groups.
	if cmp -s "$cache/clustered-$d-cpu.asg" "$cache/clustered-$d-$device.asg"; then
		echo "== clustered: the $device file equals the CPU's"
	else
		echo "== clustered: the $device file differs from the CPU's (see asg-info --groups)"
	fi
fi
[ "$asg_only" = 1 ] && exit 0
echo "== policies on the clustered ASG"
bin/bench-policy --asg "$cache/clustered-$d-$device.asg"
echo "== policies on a synthetic ASG (windows of 24 overlapping by 12)"
bin/bench-policy
echo "== pcg with a thinning cap of 1 (the exact residual on almost every rejection)"
bin/bench-policy --asg "$cache/clustered-$d-$device.asg" --max-trials 1 | grep pcg
