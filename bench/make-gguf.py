#!/usr/bin/env python3
"""Write a GGUF file with random weights in the exact shape of a LLaSA model (bf16).

The file is meant for llama.cpp's llama-bench (and llama-quantize), as the
other side of a side-by-side speed comparison with pcg-tts on the same
model shape. Presets (--preset, default llasa-1b), all with vocab 193800,
rope_theta 500000 with llama3 rope scaling (low 1, high 4, original context
8192), rms eps 1e-5, context 131072:

  llasa-1b  Llama-3.2-1B body: hidden 2048, 16 layers, 32 heads, 8 kv heads,
            head_dim 64, FFN 8192, tied embeddings, rope factor 32 (2.74 GB)
  llasa-3b  Llama-3.2-3B body: hidden 3072, 28 layers, 24 heads, 8 kv heads,
            head_dim 128, FFN 8192, tied embeddings, rope factor 32 (6.8 GB)
  llasa-8b  Llama-3.1-8B body: hidden 4096, 32 layers, 32 heads, 8 kv heads,
            head_dim 128, FFN 14336, untied output, rope factor 8 (17.1 GB)

Matrices are BF16, norms and rope factors F32.

It uses the gguf-py package from a llama.cpp source tree, found through the
LLAMA_CPP_DIR environment variable ($LLAMA_CPP_DIR/gguf-py), plus numpy.

Usage: LLAMA_CPP_DIR=... python3 make-gguf.py OUT.gguf [--preset NAME]
           [--seed N] [--std S] [--no-permute-qk]

Weights are normal(0, std) from a fixed seed (one generator per tensor),
drawn in the Hugging Face checkpoint's layout, generated and written in
chunks so memory stays at a few hundred MB. The vocabulary is a minimal
byte-level BPE one ("gpt2" model): the 256 byte tokens, two control
tokens, and filler tokens t258..t193799, so llama.cpp's tools can load it
and tokenize any text.

Q/K layout: llama.cpp's HF converter (convert_hf_to_gguf.py,
LlamaModel.permute) reorders the rows of q_proj and k_proj within each
head, from HF's rotate-half pairing (dimension i with i + head_dim/2) to
GGUF's interleaved pairing (2i with 2i+1):

  w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(w.shape)

with n_head = the number of kv heads for attn_k. By default (--permute-qk)
this script applies exactly that permutation to the random HF-layout
q/k rows, so the file is what the converter would write for an HF
checkpoint holding the same weights. --no-permute-qk writes the HF rows
unpermuted (the same bytes as earlier versions of this script; the cost of
every operation is the same either way).
"""

import argparse
import math
import os
import sys

import numpy as np

PRESETS = {
    # n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, tied, rope factor
    "llasa-1b": dict(n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, head_dim=64,
                     n_ff=8192, tied=True, rope_factor=32.0, body="Llama-3.2-1B"),
    "llasa-3b": dict(n_embd=3072, n_layer=28, n_head=24, n_head_kv=8, head_dim=128,
                     n_ff=8192, tied=True, rope_factor=32.0, body="Llama-3.2-3B"),
    "llasa-8b": dict(n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, head_dim=128,
                     n_ff=14336, tied=False, rope_factor=8.0, body="Llama-3.1-8B"),
}
N_VOCAB = 193800          # every LLaSA model: Llama 3 text vocab + speech tokens
CTX_LEN = 131072          # as the Llama 3.1 / 3.2 bodies
ROPE_THETA = 500000.0
RMS_EPS = 1e-5
ROPE_LOW, ROPE_HIGH, ROPE_OLD_CTX = 1.0, 4.0, 8192

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


def llama3_rope_factors(head_dim, factor):
    """Per-frequency factors, computed as convert_hf_to_gguf.py does for llama3."""
    base, dim = ROPE_THETA, head_dim
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    low, high, old_ctx = ROPE_LOW, ROPE_HIGH, ROPE_OLD_CTX
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


def permute_qk(w, n_head):
    """LlamaModel.permute of convert_hf_to_gguf.py on a block of whole heads.

    w holds rows of the HF q_proj/k_proj (numpy order: rows, cols) for
    n_head consecutive heads; within each head, row j of the first half and
    row j of the second half become rows 2j and 2j+1.
    """
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


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
    ap.add_argument("--preset", choices=sorted(PRESETS), default="llasa-1b",
                    help="model shape (default llasa-1b)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--permute-qk", dest="permute_qk", action="store_true", default=True,
                    help="permute attn_q/attn_k rows as convert_hf_to_gguf.py does (default)")
    ap.add_argument("--no-permute-qk", dest="permute_qk", action="store_false",
                    help="write the HF-layout q/k rows unpermuted")
    args = ap.parse_args()
    P = PRESETS[args.preset]
    n_embd, n_layer, n_ff = P["n_embd"], P["n_layer"], P["n_ff"]
    n_head, n_head_kv, head_dim = P["n_head"], P["n_head_kv"], P["head_dim"]

    gguf = import_gguf()
    T = gguf.GGMLQuantizationType

    # (name, numpy-order shape = (rows, cols), ggml type, kind, heads to
    # permute by); kind "rand" tensors are drawn in HF layout.
    tensors = [("token_embd.weight", (N_VOCAB, n_embd), T.BF16, "rand", 0)]
    for i in range(n_layer):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", (n_embd,), T.F32, "ones", 0),
            (p + "attn_q.weight", (n_head * head_dim, n_embd), T.BF16, "rand", n_head),
            (p + "attn_k.weight", (n_head_kv * head_dim, n_embd), T.BF16, "rand", n_head_kv),
            (p + "attn_v.weight", (n_head_kv * head_dim, n_embd), T.BF16, "rand", 0),
            (p + "attn_output.weight", (n_embd, n_head * head_dim), T.BF16, "rand", 0),
            (p + "ffn_norm.weight", (n_embd,), T.F32, "ones", 0),
            (p + "ffn_gate.weight", (n_ff, n_embd), T.BF16, "rand", 0),
            (p + "ffn_up.weight", (n_ff, n_embd), T.BF16, "rand", 0),
            (p + "ffn_down.weight", (n_embd, n_ff), T.BF16, "rand", 0),
        ]
    tensors += [
        ("output_norm.weight", (n_embd,), T.F32, "ones", 0),
        ("rope_freqs.weight", (head_dim // 2,), T.F32, "rope", 0),
    ]
    if not P["tied"]:
        tensors.append(("output.weight", (N_VOCAB, n_embd), T.BF16, "rand", 0))
    # (tied embeddings: no output.weight; llama.cpp then uses token_embd.)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name(f"{args.preset}-shape-random")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_vocab_size(N_VOCAB)
    w.add_context_length(CTX_LEN)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    if n_head * head_dim != n_embd:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
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

    for name, shape, typ, _, _ in tensors:
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
    for idx, (name, shape, typ, kind, perm_heads) in enumerate(tensors):
        pad()
        n = int(np.prod(shape))
        if kind == "ones":
            np.ones(n, dtype=np.float32).tofile(fout)
        elif kind == "rope":
            llama3_rope_factors(head_dim, P["rope_factor"]).tofile(fout)
        else:
            # One generator per tensor: the data do not depend on the order
            # or chunking of the others. Chunks are whole rows, and whole
            # heads where rows are permuted (the permutation stays within a
            # head); the values drawn do not depend on the chunk size.
            rng = np.random.default_rng([args.seed, idx])
            rows, cols = shape
            step = max(1, CHUNK_ELEMS // cols)
            if perm_heads and args.permute_qk:
                rows_per_head = rows // perm_heads
                assert rows_per_head * perm_heads == rows and rows_per_head % 2 == 0
                step = max(rows_per_head, step // rows_per_head * rows_per_head)
            r = 0
            while r < rows:
                k = min(step, rows - r)
                x = rng.standard_normal(k * cols, dtype=np.float32)
                x *= np.float32(args.std)
                if perm_heads and args.permute_qk:
                    x = permute_qk(x.reshape(k, cols), k // rows_per_head)
                f32_to_bf16_bits(np.ascontiguousarray(x).reshape(-1)).tofile(fout)
                r += k
        total += n * (2 if typ == T.BF16 else 4)
    pad()
    w.close()
    print(f"wrote {args.out}: {args.preset}, {len(tensors)} tensors, "
          f"{total / 1e9:.3f} GB of weights, q/k rows "
          f"{'permuted as convert_hf_to_gguf.py does' if args.permute_qk else 'in HF order'}")


if __name__ == "__main__":
    main()
