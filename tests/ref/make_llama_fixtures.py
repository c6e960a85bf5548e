#!/usr/bin/env python3
"""Builds the reference fixtures under tests/fixtures/llama/.

What it is for: the C engine reimplements the Hugging Face LlamaForCausalLM
forward pass. This script makes a few tiny random Llama checkpoints with
transformers (on CPU, seeded) and records what transformers computes for
them: the logits of a prompt, a 20-token greedy continuation, and the logits
of a 4-token block decoded on top of a KV cache. The C tests load the same
checkpoints and compare against these numbers.

How to run it (from the repository root; needs torch 2.x, transformers 5.x,
safetensors and numpy in python3; no GPU, no network):

    python3 tests/ref/make_llama_fixtures.py

It deletes and rewrites tests/fixtures/llama/<name>/ for every model below.
Results are deterministic for a given torch/transformers version (recorded in
each meta.json). See tests/ref/README.md for the file formats and for the
tolerance to use when comparing a float32 C implementation with them.
"""

import copy
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "llama")

PROMPT_LEN = 11
BLOCK = 4           # block-logits.f32: the last BLOCK prompt positions on top of a cache
NEW_TOKENS = 20     # greedy.txt length
WEIGHT_STD = 0.2    # std of every linear / embedding weight
NORM_STD = 0.1      # norm weights are 1 + NORM_STD * randn
MAX_BYTES = 5 * 1024 * 1024

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # Small on purpose: with theta 500000 and head_dim 16 (or 8) this puts
    # some frequencies in each of the three llama3 bands (kept, interpolated,
    # divided by factor). The script asserts that.
    "original_max_position_embeddings": 256,
}

# name -> (LlamaConfig arguments, extra settings)
MODELS = {
    "gqa-f32": dict(
        cfg=dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, intermediate_size=160,
                 vocab_size=384, rms_norm_eps=1e-5, rope_theta=500000.0,
                 rope_scaling=dict(LLAMA3), tie_word_embeddings=False),
        dtype=torch.float32, seed=1001, shard=None),
    "tied-f32": dict(
        cfg=dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
                 num_key_value_heads=6, head_dim=8, intermediate_size=96,
                 vocab_size=300, rms_norm_eps=1e-6, rope_theta=10000.0,
                 rope_scaling=None, tie_word_embeddings=True),
        dtype=torch.float32, seed=1002, shard="100KB"),
    "bf16": dict(
        cfg=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                 num_key_value_heads=2, head_dim=8, intermediate_size=128,
                 vocab_size=320, rms_norm_eps=1e-5, rope_theta=500000.0,
                 rope_scaling=dict(LLAMA3), tie_word_embeddings=False),
        dtype=torch.bfloat16, seed=1004, shard=None),
    "explicit-headdim": dict(
        # head_dim 16 != hidden_size / num_attention_heads = 12
        cfg=dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, intermediate_size=112,
                 vocab_size=352, rms_norm_eps=1e-5, rope_theta=50000.0,
                 rope_scaling=None, tie_word_embeddings=False),
        dtype=torch.float32, seed=1006, shard=None),
}


def build_config(cfg):
    cfg = copy.deepcopy(cfg)  # LlamaConfig adds rope_theta into rope_scaling in place
    c = LlamaConfig(max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
                    hidden_act="silu", attention_bias=False, mlp_bias=False,
                    **cfg)
    c.architectures = ["LlamaForCausalLM"]
    return c


def init_weights(model, seed):
    """Large random weights so that logits are spread and greedy decoding moves."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        # named_parameters() lists a tied lm_head/embedding once
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + NORM_STD * torch.randn(p.shape, generator=g))
            else:
                p.copy_(WEIGHT_STD * torch.randn(p.shape, generator=g))


def write_classic_config(path, cfg):
    """transformers 5 writes rope_theta/rope_scaling folded into a
    "rope_parameters" object. Checkpoints on the Hub (and the C config parser)
    use the classic top-level "rope_theta" and "rope_scaling" keys, so rewrite
    config.json that way. Everything below is computed from the model
    reloaded from this rewritten file, so transformers itself confirms that it
    means the same model."""
    with open(path) as f:
        j = json.load(f)
    rp = j.pop("rope_parameters", None)
    j["rope_theta"] = cfg["rope_theta"]
    j["rope_scaling"] = cfg["rope_scaling"]
    with open(path, "w") as f:
        json.dump(j, f, indent=2, sort_keys=True)
        f.write("\n")
    return rp


def load(path, dtype, attn="eager"):
    m = LlamaForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn)
    m.eval()
    return m


@torch.no_grad()
def full_logits(model, ids):
    return model(input_ids=ids, use_cache=False).logits[0]


@torch.no_grad()
def block_logits(model, ids):
    """Prefix forward with a cache, then the last BLOCK tokens in one forward."""
    p = ids.shape[1] - BLOCK
    out = model(input_ids=ids[:, :p], use_cache=True)
    out2 = model(input_ids=ids[:, p:], past_key_values=out.past_key_values, use_cache=True)
    return out2.logits[0]


@torch.no_grad()
def greedy(model, ids):
    # No eos stopping. generate() fills unset fields from model.generation_config
    # (eos 2), and min_new_tokens would then mask eos out of the argmax, so
    # clear eos there too and use max_new_tokens only.
    model.generation_config.eos_token_id = None
    gc = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS,
                          eos_token_id=None, pad_token_id=0, num_beams=1)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                         generation_config=gc)
    gen = out[0, ids.shape[1]:].tolist()
    # Cross-check with a plain argmax loop over full forwards (no cache, no
    # logits processors): generate must not have masked or reordered anything.
    seq = ids
    margins = []
    for _ in range(NEW_TOKENS):
        last = full_logits(model, seq)[-1].double()
        top2 = torch.topk(last, 2).values
        margins.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
    manual = seq[0, ids.shape[1]:].tolist()
    assert gen == manual, (gen, manual)
    assert len(gen) == NEW_TOKENS
    return gen, min(margins)


def llama3_inv_freq(cfg):
    """The three llama3 bands, computed here independently of transformers."""
    hd, theta, s = cfg["head_dim"], cfg["rope_theta"], cfg["rope_scaling"]
    base = [1.0 / theta ** (2 * i / hd) for i in range(hd // 2)]
    if s is None:
        return base, None
    lo_wl = s["original_max_position_embeddings"] / s["low_freq_factor"]
    hi_wl = s["original_max_position_embeddings"] / s["high_freq_factor"]
    kept, divided, interp = [], [], []
    scaled = []
    for i, f in enumerate(base):
        wl = 2 * math.pi / f
        if wl < hi_wl:
            kept.append(i)
            scaled.append(f)
        elif wl > lo_wl:
            divided.append(i)
            scaled.append(f / s["factor"])
        else:
            interp.append(i)
            sm = (s["original_max_position_embeddings"] / wl - s["low_freq_factor"]) / (
                s["high_freq_factor"] - s["low_freq_factor"])
            scaled.append((1 - sm) * f / s["factor"] + sm * f)
    info = dict(n_inv_freq=len(base), kept=kept, interpolated=interp, divided=divided,
                n_kept=len(kept), n_interpolated=len(interp), n_divided=len(divided),
                n_changed=len(interp) + len(divided),
                wavelengths=[2 * math.pi / f for f in base],
                high_freq_wavelen=hi_wl, low_freq_wavelen=lo_wl,
                inv_freq_unscaled=base, inv_freq_scaled=scaled)
    return scaled, info


def read_weights(d):
    """All tensors of the checkpoint in d, as float64, read straight from the
    safetensors file(s) the way the C loader does (index.json if present)."""
    from safetensors import safe_open
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    w = {}
    for s in shards:
        with safe_open(os.path.join(d, s), "pt") as sf:
            for k in sf.keys():
                w[k] = sf.get_tensor(k).to(torch.float64)
    return w


def dot_rows(a, b, naive):
    """a [n, k] @ b[m, k].T. naive: every dot product summed left to right in
    the tensors' dtype, like a plain C loop (numpy's cumsum is sequential)."""
    if not naive:
        return a @ b.T
    prod = a.numpy()[:, None, :] * b.numpy()[None, :, :]
    return torch.from_numpy(np.cumsum(prod, axis=-1, dtype=prod.dtype)[..., -1].copy())


def reference_logits(d, cfg, ids, dtype=torch.float64, naive=False):
    """An independent Llama forward over the prompt, written out step by step.

    In float64 it is the "exact" reference: HF loaded in float64 is not
    entirely float64 (its RMSNorm, softmax and RoPE angles run in float32),
    this is float64 throughout, including the llama3 inverse frequencies. So
    |HF float32 - this| is the honest size of float32 rounding, and it
    double-checks HF's conventions (rotate_half RoPE, GQA head grouping, tied
    lm_head = embed_tokens).

    With dtype=float32, naive=True it imitates a plain C engine: float32
    everywhere, every dot product and sum accumulated sequentially."""
    w = {k: v.to(dtype) for k, v in read_weights(d).items()}
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    T = ids.shape[1]

    def lin(x, name):
        return dot_rows(x, w[name], naive)

    def rms(x, g):
        ms = dot_rows(x * x, torch.ones(1, x.shape[-1], dtype=dtype), naive) / x.shape[-1]
        return g * (x / torch.sqrt(ms + eps))

    def rope(x):  # x: [T, heads, hd]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos[:, None, :] + torch.cat([-x2, x1], -1) * sin[:, None, :]

    def softmax(sc):
        e = torch.exp(sc - sc.max(-1, keepdim=True).values)
        return e / dot_rows(e, torch.ones(1, e.shape[-1], dtype=dtype), naive)

    inv, _ = llama3_inv_freq(cfg)
    ang = torch.arange(T, dtype=dtype)[:, None] * torch.tensor(inv, dtype=dtype)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    mask = torch.full((T, T), float("-inf"), dtype=dtype).triu(1)

    x = w["model.embed_tokens.weight"][ids[0]]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rope(lin(h, p + "self_attn.q_proj.weight").view(T, H, hd))
        k = rope(lin(h, p + "self_attn.k_proj.weight").view(T, KV, hd))
        v = lin(h, p + "self_attn.v_proj.weight").view(T, KV, hd)
        out = []
        for j in range(H):
            kv = j // (H // KV)  # query head j reads kv head j // group
            sc = dot_rows(q[:, j].contiguous(), k[:, kv].contiguous(), naive) / math.sqrt(hd) + mask
            pr = softmax(sc)
            out.append(dot_rows(pr, v[:, kv].T.contiguous(), naive))
        x = x + lin(torch.cat(out, -1), p + "self_attn.o_proj.weight")
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = lin(h, p + "mlp.gate_proj.weight")
        x = x + lin(g * torch.sigmoid(g) * lin(h, p + "mlp.up_proj.weight"), p + "mlp.down_proj.weight")
    x = rms(x, w["model.norm.weight"])
    head = "model.embed_tokens.weight" if cfg["tie_word_embeddings"] else "lm_head.weight"
    return lin(x, head)


def sensitivity(d, cfg, ids, logits):
    """How far the logits move under plausible engine bugs (config misread,
    wrong default), to show that the tolerance in README.md catches them."""
    def moved(**change):
        c = copy.deepcopy(cfg)
        for k, v in change.items():
            if k.startswith("llama3_"):
                c["rope_scaling"][k[len("llama3_"):]] = v
            else:
                c[k] = v
        return maxabs(reference_logits(d, c, ids), logits)

    other_eps = 1e-5 if cfg["rms_norm_eps"] == 1e-6 else 1e-6
    r = {f"rms_norm_eps={other_eps:g}": moved(rms_norm_eps=other_eps),
         "rope_theta=" + ("500000" if cfg["rope_theta"] == 10000 else "10000"):
             moved(rope_theta=500000.0 if cfg["rope_theta"] == 10000 else 10000.0)}
    if cfg["rope_scaling"]:
        r["no rope_scaling"] = moved(rope_scaling=None)
        r["llama3 original_max_position_embeddings=8192"] = moved(
            llama3_original_max_position_embeddings=8192)
    return r


def save_f32(path, t):
    a = t.detach().to(torch.float32).contiguous().numpy().astype("<f4")
    a.tofile(path)
    return list(a.shape)


def maxabs(a, b):
    return float((a.double() - b.double()).abs().max())


def make(name, spec):
    d = os.path.join(OUT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    cfg = spec["cfg"]
    torch.manual_seed(spec["seed"])

    # 1. build, initialise, save (in the model's storage dtype)
    model = LlamaForCausalLM(build_config(cfg)).float()
    init_weights(model, spec["seed"])
    model = model.to(spec["dtype"])
    kw = {"max_shard_size": spec["shard"]} if spec["shard"] else {}
    try:
        model.save_pretrained(d, safe_serialization=True, **kw)
    except TypeError:  # a transformers that no longer takes the flag: always safetensors
        model.save_pretrained(d, **kw)
    del model
    rope_parameters = write_classic_config(os.path.join(d, "config.json"), cfg)

    files = sorted(os.listdir(d))
    shards = [f for f in files if f.endswith(".safetensors")]
    stored = set()
    from safetensors import safe_open
    for f in shards:
        with safe_open(os.path.join(d, f), "pt") as sf:
            stored |= set(sf.keys())
    if spec["shard"]:
        assert "model.safetensors.index.json" in files, files
        assert 2 <= len(shards) <= 4, shards
    else:
        assert shards == ["model.safetensors"], shards

    # 2. the prompt
    g = torch.Generator().manual_seed(spec["seed"] + 7)
    ids = torch.randint(3, cfg["vocab_size"], (1, PROMPT_LEN), generator=g)
    with open(os.path.join(d, "tokens.txt"), "w") as f:
        f.write(" ".join(str(int(x)) for x in ids[0]) + "\n")

    # 3. reference outputs, float32 compute (bf16 weights are upcast exactly)
    m32 = load(d, torch.float32)
    assert m32.config.rope_parameters["rope_theta"] == cfg["rope_theta"]
    if cfg["rope_scaling"]:
        assert m32.config.rope_parameters["rope_type"] == "llama3"
    logits = full_logits(m32, ids)
    blk = block_logits(m32, ids)
    block_diff = maxabs(blk, logits[-BLOCK:])
    max_logit = float(logits.abs().max())
    assert block_diff <= 1e-5 * max(1.0, max_logit), block_diff
    gen, margin = greedy(m32, ids)
    save_f32(os.path.join(d, "logits.f32"), logits)
    save_f32(os.path.join(d, "block-logits.f32"), blk)
    with open(os.path.join(d, "greedy.txt"), "w") as f:
        f.write(" ".join(map(str, gen)) + "\n")
    n_distinct = len(set(gen))
    # Keep the greedy test robust: several distinct tokens, no eos (so it does
    # not matter whether a harness stops at eos), and a clear argmax at every
    # step (a C engine within tolerance must pick the same tokens). If one of
    # these fails after a version change, change that model's seed.
    assert n_distinct >= 4, gen
    assert 2 not in gen, ("greedy contains eos 2; change the seed", gen)
    assert margin >= 5e-3, ("greedy top1-top2 margin too small; change the seed", margin)

    # rope: transformers' inv_freq against the independent computation
    hf_inv = m32.model.rotary_emb.inv_freq.double()
    my_inv, llama3 = llama3_inv_freq(cfg)
    inv_rel = float(((hf_inv - torch.tensor(my_inv, dtype=torch.float64)).abs()
                     / torch.tensor(my_inv, dtype=torch.float64)).max())
    assert inv_rel < 1e-6, inv_rel
    if llama3:
        assert llama3["n_kept"] and llama3["n_interpolated"] and llama3["n_divided"], llama3

    # 4. how large is float32 noise? same model in float64, in 1 thread,
    #    and with the sdpa attention kernel instead of eager
    exact = reference_logits(d, cfg, ids)
    naive = reference_logits(d, cfg, ids, dtype=torch.float32, naive=True)
    f32_vs_f64 = maxabs(logits, exact)
    block_f32_vs_f64 = maxabs(blk, exact[-BLOCK:])
    assert f32_vs_f64 < 1e-4 * max(1.0, max_logit), f32_vs_f64
    m64 = load(d, torch.float64)
    l64 = full_logits(m64, ids)
    nt = torch.get_num_threads()
    torch.set_num_threads(1)
    l1 = full_logits(m32, ids)
    torch.set_num_threads(nt)
    msdpa = load(d, torch.float32, attn="sdpa")
    lsdpa = full_logits(msdpa, ids)
    del m64, msdpa

    meta = {
        "name": name,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "python": sys.version.split()[0]},
        "config": dict(cfg, storage_dtype=str(spec["dtype"]).replace("torch.", ""),
                       max_position_embeddings=2048, bos_token_id=1, eos_token_id=2),
        "config_json_note": "config.json rewritten with top-level rope_theta/rope_scaling; "
                            "transformers 5 had written them as rope_parameters=" +
                            json.dumps(rope_parameters, sort_keys=True),
        "seeds": {"torch.manual_seed": spec["seed"], "weights_generator": spec["seed"],
                  "prompt_generator": spec["seed"] + 7},
        "init": {"linear_and_embedding_std": WEIGHT_STD, "norm_weight": f"1 + {NORM_STD}*randn"},
        "attn_implementation": "eager",
        "files": {f: os.path.getsize(os.path.join(d, f)) for f in files},
        "safetensors_files": shards,
        "stored_tensor_count": len(stored),
        "stores_lm_head_weight": "lm_head.weight" in stored,
        "prompt_len": PROMPT_LEN,
        "logits_shape": [PROMPT_LEN, cfg["vocab_size"]],
        "block": {"prefix_len": PROMPT_LEN - BLOCK, "block_len": BLOCK,
                  "shape": [BLOCK, cfg["vocab_size"]],
                  "max_abs_diff_vs_full_forward": block_diff,
                  "max_abs_diff_vs_float64": block_f32_vs_f64},
        "max_abs_logit": max_logit,
        "logit_std": float(logits.std()),
        "max_abs_diff_f32_vs_f64": f32_vs_f64,
        "f64_reference": "independent float64 forward (reference_logits in the script)",
        "max_abs_diff_f32_vs_hf_f64": maxabs(logits, l64),
        "naive_f32": "independent float32 forward, every sum sequential (a plain-C proxy)",
        "max_abs_diff_f32_vs_naive_f32": maxabs(logits, naive),
        "max_abs_diff_naive_f32_vs_f64": maxabs(naive, exact),
        "max_abs_diff_hf_f64_vs_f64": maxabs(l64, exact),
        "hf_f64_note": "HF in float64 still runs RMSNorm, softmax and RoPE angles in float32",
        "max_abs_diff_f32_1thread_vs_default": maxabs(l1, logits),
        "default_threads": nt,
        "max_abs_diff_f32_sdpa_vs_eager": maxabs(lsdpa, logits),
        "greedy": {"tokens": gen, "n_distinct": n_distinct,
                   "contains_eos_id_2": 2 in gen,
                   "min_top1_top2_margin": margin,
                   "settings": "do_sample=False, max_new_tokens=20, eos_token_id=None; "
                               "equals an argmax loop over full forwards"},
        "rope_inv_freq_max_rel_diff_hf_vs_formula": inv_rel,
        "sensitivity_max_abs_logit_change": sensitivity(d, cfg, ids, logits),
        "llama3_inv_freq": llama3,
    }

    # 5. bf16: the native bf16 forward, for information only
    if spec["dtype"] == torch.bfloat16:
        mbf = load(d, torch.bfloat16)
        assert all(p.dtype == torch.bfloat16 for p in mbf.parameters())
        # the f32 model's weights are the bf16 weights exactly
        for (n1, p1), (n2, p2) in zip(mbf.named_parameters(), m32.named_parameters()):
            assert n1 == n2 and torch.equal(p1.float(), p2), n1
        lbf = full_logits(mbf, ids)
        gbf, mbf_margin = greedy(mbf, ids)
        save_f32(os.path.join(d, "logits-bf16.f32"), lbf)
        with open(os.path.join(d, "greedy-bf16.txt"), "w") as f:
            f.write(" ".join(map(str, gbf)) + "\n")
        meta["bf16"] = {
            "logits.f32 and greedy.txt": "bf16 weights upcast to float32, float32 compute",
            "logits-bf16.f32 and greedy-bf16.txt": "native bf16 compute (information only)",
            "max_abs_diff_f32_compute_vs_bf16_compute": maxabs(lbf, logits),
            "greedy_bf16_compute": gbf,
            "greedy_same_as_f32_compute": gbf == gen,
            "greedy_bf16_min_top1_top2_margin": mbf_margin,
        }
        meta["files"] = {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d))}

    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    return meta


def main():
    torch.set_grad_enabled(False)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.makedirs(OUT, exist_ok=True)
    for name, spec in MODELS.items():
        m = make(name, spec)
        l3 = m["llama3_inv_freq"]
        print(f"{name}: max|logit| {m['max_abs_logit']:.3f}  f32-vs-f64 "
              f"{m['max_abs_diff_f32_vs_f64']:.3g}  block {m['block']['max_abs_diff_vs_full_forward']:.3g}  "
              f"greedy distinct {m['greedy']['n_distinct']}/{NEW_TOKENS}"
              + (f"  llama3 kept/interp/div {l3['n_kept']}/{l3['n_interpolated']}/{l3['n_divided']}"
                 if l3 else ""))
    total = sum(os.path.getsize(os.path.join(r, f))
                for r, _, fs in os.walk(OUT) for f in fs)
    print(f"total {total} bytes")
    assert total < MAX_BYTES, total


if __name__ == "__main__":
    main()
