#!/usr/bin/env python3
"""make_gguf_models.py: the fixture model tests/fixtures/llama/gqa-f32 (made
by HF transformers, with its logits) written as GGUF files by gguf-py,
llama.cpp's own Python package, the way llama.cpp's convert_hf_to_gguf.py
writes a Llama: llama.* metadata, llama.cpp's tensor names, the rows of
attn_q and attn_k permuted for llama.cpp's RoPE (LlamaModel.permute), the
llama3 rope scaling as a rope_freqs tensor of per-frequency factors, norms
in F32. test_gguf_model.c reads them.

Writes, under tests/fixtures/gguf/:
  gqa-f32.gguf   every matrix F32 (logits must match the safetensors model)
  gqa-f16.gguf   matrices F16
  gqa-q8_0.gguf  matrices Q8_0, quantised by gguf.quants
  gqa-q4_0.gguf  matrices Q4_0, quantised by gguf.quants
and three files the engine must refuse with a clear error (Q4_0 otherwise):
  bad-type.gguf  blk.1.ffn_up.weight of type IQ4_NL (random blocks)
  bad-shape.gguf blk.0.attn_k.weight with 48 rows instead of 32
  bad-arch.gguf  general.architecture "qwen2" (the keys renamed with it)

Usage: python3 tests/ref/make_gguf_models.py   (from the repository root)
Needs gguf (tested with 0.19) and numpy; no torch.
"""
import json
import math
import struct

import gguf
import numpy as np

SRC = "tests/fixtures/llama/gqa-f32"
OUT = "tests/fixtures/gguf"
Q = gguf.GGMLQuantizationType


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", name
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(t["shape"])
    return out


def permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute: within each head, the
    rotate-half pairs (j, j + hd/2) become adjacent rows (2j, 2j + 1)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def rope_factors(cfg):
    """The llama3 rope factors as convert_hf_to_gguf.py computes them."""
    rs = cfg["rope_scaling"]
    base = cfg["rope_theta"]
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor = rs["factor"]
    lo, hi = rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    lo_wl, hi_wl = old / lo, old / hi
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < hi_wl:
            out.append(1)
        elif wl > lo_wl:
            out.append(factor)
        else:
            s = (old / wl - lo) / (hi - lo)
            out.append(1 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def write(path, cfg, w, qtype, bad=None):
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
    g = gguf.GGUFWriter(path, "qwen2" if bad == "arch" else "llama")
    g.add_name("gqa-f32")
    g.add_context_length(cfg["max_position_embeddings"])
    g.add_embedding_length(cfg["hidden_size"])
    g.add_block_count(cfg["num_hidden_layers"])
    g.add_feed_forward_length(cfg["intermediate_size"])
    g.add_rope_dimension_count(hd)
    g.add_head_count(nh)
    g.add_head_count_kv(nkv)
    g.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    g.add_rope_freq_base(cfg["rope_theta"])
    g.add_vocab_size(cfg["vocab_size"])
    if hd != cfg["hidden_size"] // nh:
        g.add_key_length(hd)
        g.add_value_length(hd)
    g.add_bos_token_id(cfg["bos_token_id"])
    g.add_eos_token_id(cfg["eos_token_id"])
    g.add_file_type({Q.F32: 0, Q.F16: 1, Q.Q8_0: 7, Q.Q4_0: 2}[qtype])

    def mat(name, a):
        if bad == "type" and name == "blk.1.ffn_up.weight":
            rng = np.random.default_rng(7)
            blocks = rng.integers(0, 256, size=(a.shape[0], a.shape[1] // 32, 18), dtype=np.uint8)
            blocks[:, :, 0:2] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
            g.add_tensor(name, blocks.reshape(a.shape[0], -1), raw_dtype=Q.IQ4_NL)
            return
        if bad == "shape" and name == "blk.0.attn_k.weight":
            a = np.concatenate([a, a[:16]])
        if qtype == Q.F32:
            g.add_tensor(name, a.astype(np.float32))
        elif qtype == Q.F16:
            g.add_tensor(name, a.astype(np.float16))
        else:
            g.add_tensor(name, gguf.quants.quantize(a.astype(np.float32), qtype),
                         raw_dtype=qtype)

    mat("token_embd.weight", w["model.embed_tokens.weight"])
    if cfg.get("rope_scaling"):
        g.add_tensor("rope_freqs.weight", rope_factors(cfg))
    g.add_tensor("output_norm.weight", w["model.norm.weight"])
    if not cfg.get("tie_word_embeddings"):
        mat("output.weight", w["lm_head.weight"])
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        g.add_tensor(f"blk.{i}.attn_norm.weight", w[p + "input_layernorm.weight"])
        mat(f"blk.{i}.attn_q.weight", permute(w[p + "self_attn.q_proj.weight"], nh))
        mat(f"blk.{i}.attn_k.weight", permute(w[p + "self_attn.k_proj.weight"], nkv))
        mat(f"blk.{i}.attn_v.weight", w[p + "self_attn.v_proj.weight"])
        mat(f"blk.{i}.attn_output.weight", w[p + "self_attn.o_proj.weight"])
        g.add_tensor(f"blk.{i}.ffn_norm.weight", w[p + "post_attention_layernorm.weight"])
        mat(f"blk.{i}.ffn_gate.weight", w[p + "mlp.gate_proj.weight"])
        mat(f"blk.{i}.ffn_up.weight", w[p + "mlp.up_proj.weight"])
        mat(f"blk.{i}.ffn_down.weight", w[p + "mlp.down_proj.weight"])
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def main():
    with open(f"{SRC}/config.json") as f:
        cfg = json.load(f)
    w = read_safetensors(f"{SRC}/model.safetensors")
    for name, qt in (("f32", Q.F32), ("f16", Q.F16), ("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0)):
        write(f"{OUT}/gqa-{name}.gguf", cfg, w, qt)
    for bad in ("type", "shape", "arch"):
        write(f"{OUT}/bad-{bad}.gguf", cfg, w, Q.Q4_0, bad)


if __name__ == "__main__":
    main()
