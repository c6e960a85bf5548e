#!/bin/sh
# tests/quantize.sh: pcg-quantize and GGUF models as a user drives them:
# usage errors, a missing model, all-or-nothing output; each file type of a
# LLaSA-layout model (speech tokens included) loads in pcg-run and gives the
# float model's first greedy token at Q8_0; the tokenizer from the file's
# metadata gives tokenizer.json's ids; llama.cpp's per-tensor mix of
# q4_k_m; the four-process pipeline with a GGUF target and a GGUF draft,
# the same tokens for the same seed. With gguf-py (make test makes
# build/pyenv with it), gguf-py reads every file back: its dequantised tensors
# are the model's within each type's error, the Q/K rows permuted as
# llama.cpp's converter permutes them.
. "${PCG_ROOT:-.}/tests/shlib"
export PCG_RUNTIME_DIR="$T/rt"
cd "$T" || exit 1

# --- usage and errors
expect 2 "no --type" pcg-quantize m
err_has "--type is required"
expect 2 "unknown type" pcg-quantize --type q3_k_xl m
err_has "'q3_k_xl' is not one of"
expect 2 "no model" pcg-quantize --type q8_0

# --- a LLaSA-layout model (K-quants need rows of 256)
pcg-mkmodel --out m --hidden 256 --heads 4 --kv-heads 2 --ffn 512 --layers 2 --std 0.05 \
	--dtype f32 >/dev/null || bad "pcg-mkmodel"
mkdir ro && chmod 555 ro
if [ "$(id -u)" != 0 ]; then
	expect 1 "unwritable output" pcg-quantize --type q8_0 m -o ro/m.gguf
	[ -z "$(ls ro)" ] && ok "nothing left in an unwritable directory" || bad "ro/ not empty"
fi
for t in f32 f16 bf16 q8_0 q4_0 q4_k_m q4_k_s q5_k_m q6_k; do
	expect 0 "quantise $t" pcg-quantize --quiet --type $t m -o m-$t.gguf
	[ ! -e m-$t.gguf.tmp ] || bad "$t: a temporary file was left"
	expect 0 "pcg-run on $t" pcg-run --model m-$t.gguf --tokens 1,2,3,4,5 --generate 4
done
expect 0 "default output name" pcg-quantize --quiet --type q8_0 m
[ -s m-q8_0.gguf ] && ok "m-q8_0.gguf by default" || bad "no m-q8_0.gguf"

# The float model and its F32 file: the same logits, bit for bit.
pcg-run --model m --tokens 1,200,300,1100 --dump-logits ref.f32 >/dev/null
pcg-run --model m-f32.gguf --tokens 1,200,300,1100 --dump-logits g32.f32 >/dev/null
same ref.f32 g32.f32 "F32 GGUF logits equal the safetensors model's"
# Q8_0: the same first greedy token as the float model.
a=$(pcg-run --model m --tokens 1,200,300,1100 --generate 1)
b=$(pcg-run --model m-q8_0.gguf --tokens 1,200,300,1100 --generate 1)
[ "$a" = "$b" ] && ok "Q8_0's first greedy token is the float model's ($a)" ||
	bad "Q8_0 greedy $b, float $a"

# The tokenizer from the file's metadata (no tokenizer.json beside it).
mkdir alone && cp m-q8_0.gguf alone/
for text in "Hello, world." "<|s_0|><|s_7|> and <|SPEECH_GENERATION_END|>" "caf\303\251 \346\227\245\346\234\254"; do
	pcg-tokenize --tokenizer m/tokenizer.json "$text" >want.txt 2>&1
	pcg-tokenize --tokenizer alone/m-q8_0.gguf "$text" >got.txt 2>&1
	same want.txt got.txt "tokenizer from GGUF metadata: $text"
done

# --- the pipeline: a Q8_0 target, a Q4_0 draft
asg-build --model m --theta 0.3 --quiet -o m.asg || bad "asg-build"
expect 0 "pcg-up with GGUF target and draft" pcg-up --target alone/m-q8_0.gguf --draft m-q4_0.gguf --asg m.asg
for pol in pcg sd; do
	pcg-synth --policy $pol --seed 5 --max-tokens 40 "Hello from a quantised pipeline." >s1.txt 2>&1 ||
		bad "pcg-synth $pol: $(cat s1.txt)"
	pcg-synth --policy $pol --seed 5 --max-tokens 40 "Hello from a quantised pipeline." >s2.txt 2>&1
	grep -q "tokens 40" s1.txt && ok "$pol: 40 tokens" || bad "$pol: $(cat s1.txt)"
	grep "^rounds" s1.txt >r1.txt; grep "^rounds" s2.txt >r2.txt
	same r1.txt r2.txt "$pol: the same rounds for the same seed"
done
pcg-down >/dev/null 2>&1

# --- gguf-py, the reference reader
if python3 -c "import gguf, numpy" 2>/dev/null; then
	expect 0 "gguf-py reads every file back" python3 - m <<'PYEOF'
import json, struct, sys
import numpy as np
import gguf
d = sys.argv[1]
with open(f"{d}/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n)); data = f.read()
W = {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype=np.float32).reshape(v["shape"])
     for k, v in head.items() if k != "__metadata__"}
cfg = json.load(open(f"{d}/config.json"))
def permute(w, nh):
    return w.reshape(nh, 2, w.shape[0] // nh // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
hf = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
for i in range(cfg["num_hidden_layers"]):
    for g, h in (("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"), ("attn_v", "self_attn.v_proj"),
                 ("attn_output", "self_attn.o_proj"), ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                 ("ffn_down", "mlp.down_proj"), ("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm")):
        hf[f"blk.{i}.{g}.weight"] = f"model.layers.{i}.{h}.weight"
# relative RMS error allowed per type (measured on normal data: test_quantize.c)
tol = {"F32": 0, "F16": 1e-3, "BF16": 5e-3, "Q8_0": 0.01, "Q6_K": 0.03, "Q5_K": 0.06,
       "Q4_K": 0.12, "Q4_0": 0.15}
for t in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q4_k_s", "q5_k_m", "q6_k"):
    r = gguf.GGUFReader(f"{d}-{t}.gguf")
    kv = {f.name: f for f in r.fields.values()}
    assert bytes(kv["general.architecture"].parts[-1]).decode() == "llama"
    toks = kv["tokenizer.ggml.tokens"]
    assert len(toks.data) == cfg["vocab_size"], (t, len(toks.data))
    seen = set()
    for tn in r.tensors:
        if tn.name == "rope_freqs.weight":
            continue
        w = W[hf[tn.name]]
        if "attn_q" in tn.name:
            w = permute(w, cfg["num_attention_heads"])
        elif "attn_k" in tn.name:
            w = permute(w, cfg["num_key_value_heads"])
        got = gguf.quants.dequantize(tn.data, tn.tensor_type).reshape(w.shape)
        err = np.sqrt(((got - w) ** 2).mean()) / max(np.sqrt((w ** 2).mean()), 1e-30)
        lim = tol[tn.tensor_type.name]
        assert err <= lim, (t, tn.name, tn.tensor_type.name, err)
        seen.add(tn.tensor_type.name)
    if t == "q4_k_m":
        assert seen >= {"Q4_K", "Q6_K"}, seen
        assert r.get_tensor(0).name == "token_embd.weight"
        types = {tn.name: tn.tensor_type.name for tn in r.tensors}
        # llama.cpp's q4_k_m (use_more_bits): the (tied) output matrix, and
        # attn_v / ffn_down of layer i >= 7 * n / 8 (here the last of 2) in
        # Q6_K; the rest Q4_K
        assert types["token_embd.weight"] == "Q6_K", types["token_embd.weight"]
        assert types["blk.1.attn_v.weight"] == "Q6_K", types["blk.1.attn_v.weight"]
        assert types["blk.0.attn_v.weight"] == "Q4_K", types["blk.0.attn_v.weight"]
        assert types["blk.1.ffn_down.weight"] == "Q6_K" and types["blk.0.attn_q.weight"] == "Q4_K"
print("ok")
PYEOF
else
	echo "SKIP: gguf-py not installed (make test-deps puts it in build/pyenv): the reference reader's checks"
fi
finish
