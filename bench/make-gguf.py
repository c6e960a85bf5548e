#!/usr/bin/env python3
"""Write a GGUF file with random weights in the exact shape of LLaSA-1B (bf16).

The file is meant for llama.cpp's llama-bench, as the other side of a
side-by-side speed comparison with pcg-tts on the same model shape:

  hidden 2048, 16 layers, 32 heads, 8 kv heads, head_dim 64, FFN 8192,
  vocab 193800, rope_theta 500000 with llama3 rope scaling (factor 32,
  low 1, high 4, original context 8192), tied embeddings, rms eps 1e-5.

Matrices are BF16, norms and rope factors F32 (about 2.74 GB in all).

It uses the gguf-py package from a llama.cpp source tree, found through the
LLAMA_CPP_DIR environment variable ($LLAMA_CPP_DIR/gguf-py), plus numpy.

Usage: LLAMA_CPP_DIR=... python3 make-gguf.py OUT.gguf [--seed N] [--std S]

Weights are normal(0, std) from a fixed seed, generated and written in
chunks so memory stays at a few hundred MB. The vocabulary is a minimal
byte-level BPE one ("gpt2" model): the 256 byte tokens, two control
tokens, and filler tokens t258..t193799, so llama.cpp's tools can load it
and tokenize any text.

Note: llama.cpp's HF converter permutes the rows of attn_q/attn_k (the
rotary pairing differs between HF and GGUF layouts). With random weights
that permutation does not change the cost of anything, so it is skipped.
"""

import argparse
import math
import os
import sys

import numpy as np

# LLaSA-1B shape (Llama 3.2 1B body with an extended vocabulary).
N_EMBD = 2048
N_LAYER = 16
N_HEAD = 32
N_HEAD_KV = 8
HEAD_DIM = 64
N_FF = 8192
N_VOCAB = 193800
CTX_LEN = 131072          # as Llama 3.2 1B, which LLaSA-1B builds on
ROPE_THETA = 500000.0
RMS_EPS = 1e-5
ROPE_SCALING = dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=8192)

CHUNK_ELEMS = 1 << 24     # random values generated per step (64 MB of f32)


def import_gguf():
    d = os.environ.get("LLAMA_CPP_DIR")
    if not d:
        sys.exit("make-gguf.py: set LLAMA_CPP_DIR to a llama.cpp source tree (it uses $LLAMA_CPP_DIR/gguf-py)")
    p = os.path.join(d, "gguf-py")
    if not os.path.isdir(p):
        sys.exit(f"make-gguf.py: {p} not found (LLAMA_CPP_DIR must be a llama.cpp source tree)")
    sys.path.insert(0, p)
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        # gguf-py imports sentencepiece at load time, only to read SPM
        # tokenizer files, which this script never does: a stub will do.
        import types
        stub = types.ModuleType("sentencepiece")
        stub.SentencePieceProcessor = None
        sys.modules["sentencepiece"] = stub
    import gguf  # noqa: E402
    return gguf


def llama3_rope_factors():
    """Per-frequency factors, computed as convert_hf_to_gguf.py does for llama3."""
    base, dim = ROPE_THETA, HEAD_DIM
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor = ROPE_SCALING["factor"]
    low = ROPE_SCALING["low_freq_factor"]
    high = ROPE_SCALING["high_freq_factor"]
    old_ctx = ROPE_SCALING["original_max_position_embeddings"]
    low_wavelen = old_ctx / low
    high_wavelen = old_ctx / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / float(f)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def f32_to_bf16_bits(x):
    """Round-to-nearest-even f32 -> bf16, returned as uint16 bit patterns."""
    u = x.view(np.uint32)
    u = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    return (u >> np.uint32(16)).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--std", type=float, default=0.02)
    args = ap.parse_args()

    gguf = import_gguf()
    T = gguf.GGMLQuantizationType

    # (name, numpy-order shape = (rows, cols), ggml type, kind)
    tensors = [("token_embd.weight", (N_VOCAB, N_EMBD), T.BF16, "rand")]
    for i in range(N_LAYER):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", (N_EMBD,), T.F32, "ones"),
            (p + "attn_q.weight", (N_HEAD * HEAD_DIM, N_EMBD), T.BF16, "rand"),
            (p + "attn_k.weight", (N_HEAD_KV * HEAD_DIM, N_EMBD), T.BF16, "rand"),
            (p + "attn_v.weight", (N_HEAD_KV * HEAD_DIM, N_EMBD), T.BF16, "rand"),
            (p + "attn_output.weight", (N_EMBD, N_HEAD * HEAD_DIM), T.BF16, "rand"),
            (p + "ffn_norm.weight", (N_EMBD,), T.F32, "ones"),
            (p + "ffn_gate.weight", (N_FF, N_EMBD), T.BF16, "rand"),
            (p + "ffn_up.weight", (N_FF, N_EMBD), T.BF16, "rand"),
            (p + "ffn_down.weight", (N_EMBD, N_FF), T.BF16, "rand"),
        ]
    tensors += [
        ("output_norm.weight", (N_EMBD,), T.F32, "ones"),
        ("rope_freqs.weight", (HEAD_DIM // 2,), T.F32, "rope"),
        # tied embeddings: no output.weight; llama.cpp then uses token_embd.
    ]

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("llasa-1b-shape-random")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_vocab_size(N_VOCAB)
    w.add_context_length(CTX_LEN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(RMS_EPS)

    # Minimal byte-level BPE vocabulary.
    b2u = bytes_to_unicode()
    toks = [b2u[b] for b in range(256)]
    types = [gguf.TokenType.NORMAL] * 256
    toks += ["<|begin_of_text|>", "<|end_of_text|>"]
    types += [gguf.TokenType.CONTROL] * 2
    toks += [f"t{i}" for i in range(len(toks), N_VOCAB)]
    types += [gguf.TokenType.NORMAL] * (N_VOCAB - len(types))
    assert len(toks) == N_VOCAB
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges([b2u[ord(" ")] + " " + b2u[ord(" ")]])  # gguf needs a non-empty list
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)
    w.add_add_bos_token(True)

    for name, shape, typ, _ in tensors:
        n = int(np.prod(shape))
        nbytes = n * (2 if typ == T.BF16 else 4)
        w.add_tensor_info(name, shape, np.float32, nbytes, raw_dtype=typ)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    align = w.data_alignment

    def pad():
        r = fout.tell() % align
        if r:
            fout.write(b"\0" * (align - r))

    total = 0
    for idx, (name, shape, typ, kind) in enumerate(tensors):
        pad()
        n = int(np.prod(shape))
        if kind == "ones":
            np.ones(n, dtype=np.float32).tofile(fout)
        elif kind == "rope":
            llama3_rope_factors().tofile(fout)
        else:
            # one generator per tensor: the data do not depend on the order
            # or chunking of the others
            rng = np.random.default_rng([args.seed, idx])
            left = n
            while left:
                k = min(left, CHUNK_ELEMS)
                x = rng.standard_normal(k, dtype=np.float32)
                x *= np.float32(args.std)
                f32_to_bf16_bits(x).tofile(fout)
                left -= k
        total += n * (2 if typ == T.BF16 else 4)
    pad()
    w.close()
    print(f"wrote {args.out}: {len(tensors)} tensors, {total / 1e9:.3f} GB of weights")


if __name__ == "__main__":
    main()
