#!/bin/sh
# tests/gpu-check.sh: scripts/gpu-check (make gpu-check) without a GPU. Its
# dry run lists steps, each with a limit, that fit in the budget; with no
# nvidia-smi it says so on one line, exits 77 (1 with GPU_CHECK_REQUIRE=1) and
# writes a report naming every step and every target "not measured"; with an
# nvidia-smi that lists a GPU and a budget of 20 s, a step that fails is
# recorded, the steps that need it are not started, and the exit is 1; a
# step whose limit exceeds what is left of the budget is not started.
. "${PCG_ROOT:-.}/tests/shlib"
export GPU_CHECK_CACHE="$T/cache"
unset GPU_CHECK_ONLY GPU_CHECK_BUDGET GPU_CHECK_REQUIRE GPU_CHECK_ENCODER

# The dry run: every step with a limit, their sum within the budget.
expect 0 "dry run" env GPU_CHECK_DRY=1 OUT="$T/dry" scripts/gpu-check
grep '^step ' "$T/out" >"$T/plan"
n=$(wc -l <"$T/plan")
[ "$n" -ge 10 ] && ok "dry run lists $n steps" || bad "dry run lists $n steps: $(cat "$T/out")"
nolimit=$(grep -cv '^step [a-z0-9_-]* limit=[1-9][0-9]*: ..*' "$T/plan")
[ "$nolimit" -eq 0 ] && ok "every step has a limit and a command" ||
	bad "$nolimit steps without a limit or a command: $(cat "$T/plan")"
sum=$(sed 's/^step [^ ]* limit=\([0-9]*\):.*/\1/' "$T/plan" | awk '{ s += $1 } END { print s }')
budget=$(sed -n 's/^budget \([0-9]*\) s; limits sum \([0-9]*\) s.*/\1 \2/p' "$T/out")
[ "$budget" = "360 $sum" ] && ok "limits sum to $sum s, within the 360 s budget" ||
	bad "budget line '$budget', limits sum $sum"
[ "$sum" -le 360 ] || bad "limits sum $sum s, over the budget"
for s in gpu fwd-256 fwd-1500 batch-16 codec pipeline test_forward asg-build encoder memcheck-test_forward; do
	grep -q "^step $s " "$T/plan" && ok "step $s" || bad "no step $s"
done
[ ! -e "$T/dry/gpu-check.md" ] && ok "the dry run writes no report" || bad "the dry run wrote a report"

# No GPU: one loud line, a report with nothing measured, exit 77 (or 1).
start=$(date +%s)
expect 77 "no GPU" env GPU_CHECK_SMI="$T/no-such-nvidia-smi" OUT="$T/nogpu" scripts/gpu-check
[ $(($(date +%s) - start)) -le 10 ] && ok "no GPU: done at once" || bad "no GPU took over 10 s"
[ "$(grep -c 'NO GPU' "$T/err")" -eq 1 ] && err_has "NO GPU: no nvidia-smi on this machine; nothing measured"
r=$T/nogpu/gpu-check.md
[ -s "$r" ] && ok "report written" || bad "no report in $r"
grep -q 'not measured: no GPU' "$r" && ok "report says not measured: no GPU" || bad "report: $(head -n 5 "$r")"
for s in $(sed 's/^step \([^ ]*\) .*/\1/' "$T/plan"); do
	grep -q "^| $s | not measured: no GPU | 0 | [0-9]* | \`" "$r" || bad "step $s not in the report as not measured"
done
ok "every step in the report as not measured, with its command"
targets=$(grep -c '^| .* | not measured |$' "$r")
[ "$targets" -ge 7 ] && ok "$targets targets, all not measured" || bad "targets: $(cat "$r")"
grep -q '| met |\|not met' "$r" && bad "a verdict without a GPU" || ok "no verdict without a GPU"
expect 1 "no GPU with GPU_CHECK_REQUIRE=1" env GPU_CHECK_REQUIRE=1 \
	GPU_CHECK_SMI="$T/no-such-nvidia-smi" OUT="$T/nogpu" scripts/gpu-check
expect 2 "a budget that is not a number" env GPU_CHECK_BUDGET=8m OUT="$T/x" scripts/gpu-check
err_has "GPU_CHECK_BUDGET: '8m' is not a number of seconds"

# An nvidia-smi that lists a GPU this machine may not have: the first step
# runs (and fails without a device), the rest wait on it or on the budget.
mkdir -p "$T/fake"
cat >"$T/fake/nvidia-smi" <<'SMI'
#!/bin/sh
case ${1:-} in
-L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)" ;;
--query-gpu=*) echo "NVIDIA H100 80GB HBM3, 999.99, 81559 MiB, 1980 MHz" ;;
*) echo "| NVIDIA-SMI 999.99   Driver Version: 999.99   CUDA Version: 99.9 |" ;;
esac
SMI
chmod +x "$T/fake/nvidia-smi"
if [ -x build/tests/cuda-cuda_probe ] && build/tests/cuda-cuda_probe >/dev/null 2>&1; then
	echo "a GPU is here: the fake nvidia-smi's run is left out (make gpu-check runs the real one)"
	finish
fi
r=$T/fake/gpu-check.md
if [ ! -x build/tests/cuda-cuda_probe ]; then
	expect 77 "fake GPU, no CUDA build" env GPU_CHECK_SMI="$T/fake/nvidia-smi" OUT="$T/fake" scripts/gpu-check
	err_has "no CUDA build"
	finish
fi
expect 1 "fake GPU, budget 20 s" env GPU_CHECK_BUDGET=20 GPU_CHECK_SMI="$T/fake/nvidia-smi" \
	OUT="$T/fake" scripts/gpu-check
grep -q '^| gpu | failed (exit [0-9]*) | [0-9]* | 10 | ' "$r" && ok "the failed step recorded" ||
	bad "gpu step: $(grep '^| gpu ' "$r")"
grep -q '^| model | not run: gpu did not pass | 0 | 40 | ' "$r" && ok "a step after a failed one not run" ||
	bad "model step: $(grep '^| model ' "$r")"
grep -q '^| codec | not run: gpu did not pass' "$r" && ok "codec waits on gpu" || bad "codec: $(grep '^| codec ' "$r")"
grep -q '^| encoder | not run: no full-size encoder' "$r" && ok "encoder not run without GPU_CHECK_ENCODER" ||
	bad "encoder: $(grep '^| encoder ' "$r")"
grep -q '^NVIDIA H100 80GB HBM3 (memory, max SM clock: 81559 MiB, 1980 MHz), driver 999.99, CUDA 99.9;' "$r" &&
	ok "the GPU, its driver and CUDA named" || bad "GPU line: $(sed -n 3p "$r")"
grep -q '^Bandwidth for the bound: 3350 GB/s' "$r" && ok "H100 SXM bandwidth from the name" ||
	bad "bandwidth: $(grep Bandwidth "$r")"
[ -s "$T/fake/gpu-check-logs/gpu.log" ] && ok "the step's log kept" || bad "no gpu.log"
expect 0 "fake GPU, a budget of 5 s: no step fits (not a failure)" env GPU_CHECK_BUDGET=5 \
	GPU_CHECK_SMI="$T/fake/nvidia-smi" OUT="$T/fake" scripts/gpu-check
grep -q '^| gpu | not run: budget (5 s left, limit 10 s)' "$r" && ok "a step over the budget not started" ||
	bad "gpu step: $(grep '^| gpu ' "$r")"
finish
