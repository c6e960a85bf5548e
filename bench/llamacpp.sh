#!/usr/bin/env bash
# Side-by-side reference: llama.cpp's llama-bench on a random-weight model of
# LLaSA-1B's exact shape in bf16 (see make-gguf.py and README-llamacpp.md).
#
# Usage: LLAMA_CPP_BUILD=DIR bench/llamacpp.sh [MODEL.gguf]
#
# Environment:
#   LLAMA_CPP_BUILD   llama.cpp build dir holding bin/llama-bench (required;
#                     exit 77 = skipped when unset or missing)
#   LLAMA_CPP_DIR     llama.cpp source tree, for gguf-py when the model has to
#                     be generated (default: parent of LLAMA_CPP_BUILD)
#   LLAMACPP_GGUF     model path, when no argument is given
#   LLAMACPP_CACHE    where a generated model is kept
#                     (default: ${TMPDIR:-/tmp}/pcg-tts-llamacpp)
#   THREADS           threads (default 2)
#   REPS              repetitions per test (default 5)
#   TG_N              tokens generated in the tg test (default 32)
#
# Tests: pp1 (1-token prompt), pp4 (4-token prompt, one batch), tgN
# (N single-token decodes). Every test is one llama_decode per batch with
# logits for the last token of the batch only. Times are the median over
# REPS repetitions (llama-bench also does one warm-up run first).
#
# Last line of output, parseable (times in ms):
#   llamacpp threads=2 reps=5 tg_tok_s=.. tg_ms=.. pp1_ms=.. pp4_ms=..
#            block4_over_one=.. block4_over_pp1=..
# where tg_ms is one generated token, block4_over_one = pp4_ms / tg_ms and
# block4_over_pp1 = pp4_ms / pp1_ms.

set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

skip() { echo "llamacpp.sh: SKIP: $*" >&2; exit 77; }

[ -n "${LLAMA_CPP_BUILD:-}" ] || skip "LLAMA_CPP_BUILD is not set (a llama.cpp build dir with bin/llama-bench; see bench/README-llamacpp.md)"
bench_bin=$LLAMA_CPP_BUILD/bin/llama-bench
[ -x "$bench_bin" ] || skip "$bench_bin not found or not executable (LLAMA_CPP_BUILD=$LLAMA_CPP_BUILD)"

threads=${THREADS:-2}
reps=${REPS:-5}
tg_n=${TG_N:-32}

model=${1:-${LLAMACPP_GGUF:-}}
if [ -z "$model" ]; then
    cache=${LLAMACPP_CACHE:-${TMPDIR:-/tmp}/pcg-tts-llamacpp}
    model=$cache/llasa-1b-shape-bf16.gguf
    if [ ! -s "$model" ]; then
        src=${LLAMA_CPP_DIR:-$(cd "$LLAMA_CPP_BUILD/.." && pwd)}
        [ -d "$src/gguf-py" ] || skip "no model given and no gguf-py under $src (set LLAMA_CPP_DIR to the llama.cpp source tree)"
        mkdir -p "$cache"
        echo "llamacpp.sh: generating $model (about 2.74 GB)" >&2
        LLAMA_CPP_DIR=$src python3 "$here/make-gguf.py" "$model.tmp" >&2
        mv "$model.tmp" "$model"
        sync "$model" 2>/dev/null || sync   # no writeback of the new file during the timings
    fi
fi
[ -s "$model" ] || { echo "llamacpp.sh: model $model not found" >&2; exit 1; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT

# JSONL on stdout (parsed below), a readable table on stderr.
"$bench_bin" -m "$model" -t "$threads" -r "$reps" -p 1,4 -n "$tg_n" \
    -o jsonl -oe md > "$out"

python3 - "$out" "$threads" "$reps" <<'EOF'
import json, statistics, sys

path, threads, reps = sys.argv[1], sys.argv[2], sys.argv[3]
res = {}
for line in open(path):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    npp, ntg = r["n_prompt"], r["n_gen"]
    key = f"pp{npp}" if ntg == 0 else f"tg{ntg}" if npp == 0 else f"pp{npp}+tg{ntg}"
    s = r.get("samples_ns") or [r["avg_ns"]]
    res[key] = (statistics.median(s) / 1e6, min(s) / 1e6, max(npp, ntg))

tg = [k for k in res if k.startswith("tg")]
if not tg or "pp4" not in res or "pp1" not in res:
    sys.exit(f"llamacpp.sh: missing results, got {sorted(res)}")
tg_ms = res[tg[0]][0] / res[tg[0]][2]
tg_best = res[tg[0]][1] / res[tg[0]][2]
pp1, pp4 = res["pp1"][0], res["pp4"][0]
print(f"# medians over {reps} reps; best: tg_ms={tg_best:.2f} pp1_ms={res['pp1'][1]:.2f} "
      f"pp4_ms={res['pp4'][1]:.2f} block4_over_one={res['pp4'][1] / tg_best:.3f}")
print(f"llamacpp threads={threads} reps={reps} tg_tok_s={1000 / tg_ms:.2f} tg_ms={tg_ms:.2f} "
      f"pp1_ms={pp1:.2f} pp4_ms={pp4:.2f} block4_over_one={pp4 / tg_ms:.3f} "
      f"block4_over_pp1={pp4 / pp1:.3f}")
EOF
