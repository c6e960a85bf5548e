#!/usr/bin/env bash
# Side-by-side reference: llama.cpp's llama-bench on any GGUF file, by default
# a random-weight model of LLaSA-1B's exact shape in bf16 (see make-gguf.py
# and README-llamacpp.md); its quantized versions (llama-quantize) and the
# llasa-3b / llasa-8b shapes are run the same way.
#
# Usage: LLAMA_CPP_BUILD=DIR bench/llamacpp.sh [MODEL.gguf]
#
# Environment:
#   LLAMA_CPP_BUILD   llama.cpp build dir holding bin/llama-bench (required;
#                     exit 77 = skipped when unset or missing)
#   LLAMA_CPP_DIR     llama.cpp source tree, for gguf-py when the model has to
#                     be generated and for the names of file types
#                     (default: parent of LLAMA_CPP_BUILD)
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
# Before the timings it prints (stderr) the CPU model name and the CPU
# features of llama.cpp's system info (the "system_info:" line of llama-cli,
# when built: these are the SIMD paths ggml was compiled with, -march=native).
#
# Last line of output, parseable (times in ms):
#   llamacpp threads=2 reps=5 tg_tok_s=.. tg_ms=.. pp1_ms=.. pp4_ms=..
#            block4_over_one=.. block4_over_pp1=.. type=.. cpu=.. simd=..
# where tg_ms is one generated token, block4_over_one = pp4_ms / tg_ms and
# block4_over_pp1 = pp4_ms / pp1_ms; type is the file's type (general.file_type,
# e.g. BF16, Q8_0, Q4_0, Q4_K_M), cpu the CPU model name and simd the widest
# SIMD features llama.cpp reports (e.g. AVX512+AVX512_VBMI+AVX512_VNNI+AVX512_BF16),
# both with spaces turned into '_'.

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

src=${LLAMA_CPP_DIR:-$(cd "$LLAMA_CPP_BUILD/.." && pwd)}

out=$(mktemp)
sysinfo=$(mktemp)
trap 'rm -f "$out" "$sysinfo"' EXIT

# llama.cpp's system info (CPU features ggml was built with). llama-bench
# does not print it; llama-cli does, after loading the model: one token.
cli_bin=$LLAMA_CPP_BUILD/bin/llama-cli
if [ -x "$cli_bin" ]; then
    "$cli_bin" -m "$model" -t "$threads" -c 64 -n 1 -p a -no-cnv --no-warmup \
        </dev/null 2>&1 | grep -m1 '^system_info:' > "$sysinfo" || true
fi

# JSONL on stdout (parsed below), a readable table on stderr.
"$bench_bin" -m "$model" -t "$threads" -r "$reps" -p 1,4,8,128 -n "$tg_n" \
    -o jsonl -oe md > "$out"

python3 - "$out" "$threads" "$reps" "$model" "$sysinfo" "$src" <<'EOF'
import json, os, re, statistics, struct, sys

path, threads, reps, model, sysinfo, src = sys.argv[1:7]


def gguf_file_type(fn):
    """general.file_type of a GGUF file (reads the key-value header only)."""
    with open(fn, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
        if f.read(4) != b"GGUF" or rd("I") < 2:
            return None
        rd("Q")
        n_kv = rd("Q")
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        ints = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 10: "Q", 11: "q"}

        def skip(t):
            if t == 8:
                f.seek(rd("Q"), 1)
            elif t == 9:
                et, n = rd("I"), rd("Q")
                if et in sizes:
                    f.seek(n * sizes[et], 1)
                else:
                    for _ in range(n):
                        skip(et)
            else:
                f.seek(sizes[t], 1)

        for _ in range(n_kv):
            key = f.read(rd("Q")).decode("utf-8", "replace")
            t = rd("I")
            if key == "general.file_type" and t in ints:
                return rd(ints[t])
            skip(t)
    return None


def type_name(fn):
    try:
        ft = gguf_file_type(fn)
    except (OSError, struct.error, KeyError):
        ft = None
    if ft is not None:
        try:  # the names of gguf-py's LlamaFileType (llama_ftype)
            sys.path.insert(0, os.path.join(src, "gguf-py"))
            try:
                import sentencepiece  # noqa: F401  (gguf-py imports it)
            except ImportError:
                import types
                sys.modules["sentencepiece"] = types.ModuleType("sentencepiece")
                sys.modules["sentencepiece"].SentencePieceProcessor = None
            from gguf.constants import LlamaFileType
            return LlamaFileType(ft).name.removeprefix("MOSTLY_")
        except Exception:
            pass
        known = {0: "F32", 1: "F16", 2: "Q4_0", 7: "Q8_0", 15: "Q4_K_M", 14: "Q4_K_S",
                 17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}
        if ft in known:
            return known[ft]
    m = re.search(r"(BF16|F16|F32|IQ\d_\w+?|Q\d_K(?:_[SML])?|Q\d_\d)(?=\.gguf$|[-_.])",
                  os.path.basename(fn), re.I)
    return m.group(1).upper() if m else f"ftype{ft}" if ft is not None else "unknown"


res = {}
cpu_info = ""
for line in open(path):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    cpu_info = r.get("cpu_info") or cpu_info
    npp, ntg = r["n_prompt"], r["n_gen"]
    key = f"pp{npp}" if ntg == 0 else f"tg{ntg}" if npp == 0 else f"pp{npp}+tg{ntg}"
    s = r.get("samples_ns") or [r["avg_ns"]]
    res[key] = (statistics.median(s) / 1e6, min(s) / 1e6, max(npp, ntg))

if not cpu_info:
    try:
        cpu_info = next(l.split(":", 1)[1] for l in open("/proc/cpuinfo")
                        if l.startswith("model name"))
    except (OSError, StopIteration):
        cpu_info = "unknown"
cpu_info = cpu_info.strip()

feats = []
line = open(sysinfo).read().strip()
if line:
    m = re.search(r"CPU : (.*)", line)
    if m:
        feats = [k.strip() for k, v in (kv.split("=", 1) for kv in m.group(1).split("|") if "=" in kv)
                 if v.strip() not in ("", "0")]
isa = [x for x in feats if x not in ("LLAMAFILE", "OPENMP", "AARCH64_REPACK", "KLEIDIAI",
                                     "ACCELERATE", "CPU_HBM")]
top = [x for x in isa if x.startswith("AVX512") or x.startswith("AMX")] \
    or [x for x in isa if x in ("AVX2", "AVX_VNNI", "FMA")] \
    or [x for x in isa if x.startswith(("SVE", "SME", "NEON", "DOTPROD", "MATMUL_INT8"))] or isa
simd = "+".join(top) if top else "unknown"
ftype = type_name(model)

print(f"# model {os.path.basename(model)} type {ftype}", file=sys.stderr)
print(f"# cpu: {cpu_info}", file=sys.stderr)
print(f"# llama.cpp CPU features: {' '.join(feats) if feats else 'unknown (llama-cli not built)'}",
      file=sys.stderr)

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
      f"block4_over_pp1={pp4 / pp1:.3f} "
      + (f"block8_over_one={res['pp8'][0] / tg_ms:.3f} " if "pp8" in res else "")
      + (f"pp128_tok_s={128000 / res['pp128'][0]:.2f} " if "pp128" in res else "")
      + f"type={ftype} cpu={cpu_info.replace(' ', '_')} "
      f"simd={simd}")
EOF
