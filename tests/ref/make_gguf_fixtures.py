#!/usr/bin/env python3
"""make_gguf_fixtures.py: GGUF files written by gguf-py (llama.cpp's own
Python package) for tests/unit/test_gguf.c and test_tokenizer_gguf.c.

Writes, under tests/fixtures/gguf/ (beside the files of make_gguf_models.py,
which it leaves alone):

  types.gguf       one tensor of each type the engine computes with (F32,
                   F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), tensors of
                   types it cannot use (Q3_K, IQ4_NL, MXFP4, I32, F64), a
                   3-d and a 4-d tensor, and a metadata value of every type
                   (each integer type, both floats, bool, string, arrays of
                   numbers, bools, strings, and an array of arrays);
                   general.alignment 64
  types.f32        gguf-py's dequantisation (gguf.quants.dequantize) of the
                   first eight tensors, concatenated in file order: what
                   pcg_to_f32 must give, bit for bit
  tiny-llama.gguf  a two-layer llama's metadata as llama.cpp's converter
                   writes it, small F16 tensors, no output.weight (tied),
                   whose size is a multiple of the alignment (so every
                   shorter prefix must be refused)
  mkmodel-tokenizer.gguf  the tokenizer of
                   tests/fixtures/tokenizer/mkmodel-tokenizer.json,
                   converted as convert_hf_to_gguf.py does for a byte-level
                   BPE (tokenizer.ggml.model "gpt2", pre "llama-bpe"): tokens
                   by id, token types NORMAL, CONTROL (special added tokens,
                   and added tokens that look like <|...|>) and USER_DEFINED
                   (other added tokens), merges as "a b" strings through
                   gguf.SpecialVocab, bos and eos ids
  tokenizers.json  the size and 64-bit FNV-1a of that file and of the same
                   conversion of the Llama 3 tokenizer (8 MB, not committed:
                   test_tokenizer_gguf.c converts tokenizer.json the same
                   way with gguf_writer and checks that it wrote these very
                   bytes before it compares ids)

Q8_0 and Q4_0 values are quantised by gguf.quants; gguf-py cannot quantise
Q4_K, Q5_K and Q6_K, so their blocks are random bytes with f16 scales set to
small finite values, and the expected values are gguf-py's dequantisation
of those bytes. Deterministic (numpy's seeded generator).

Usage: python3 tests/ref/make_gguf_fixtures.py   (from the repository root)
Needs gguf (tested with 0.19) and numpy.
"""
import gzip
import importlib.metadata
import json
import os
import tempfile

import gguf
import numpy as np

OUT = "tests/fixtures/gguf"
MINE = ["types.gguf", "types.f32", "tiny-llama.gguf", "mkmodel-tokenizer.gguf", "tokenizers.json"]
TOK = "tests/fixtures/tokenizer"
Q = gguf.GGMLQuantizationType


def f16_scale(rng, lo, hi):
    return np.frombuffer(np.float16(rng.uniform(lo, hi)).tobytes(), dtype=np.uint8)


def kquant_bytes(rng, qtype, rows, cols):
    """Random blocks of a K-quant with finite, small f16 scales."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    for b in range(nb):
        if qtype == Q.Q6_K:  # ql, qh, scales, then d
            raw[b, 208:210] = f16_scale(rng, 0.001, 0.01)
        else:  # d, dmin first
            raw[b, 0:2] = f16_scale(rng, 0.001, 0.01)
            raw[b, 2:4] = f16_scale(rng, 0.001, 0.01)
    return raw.reshape(rows, cols // block * size)


def make_types(rng):
    w = gguf.GGUFWriter(os.path.join(OUT, "types.gguf"), "test")
    w.add_custom_alignment(64)
    # One value of every type (the key names the type).
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.15625)
    w.add_bool("t.bool", True)
    w.add_bool("t.false", False)
    w.add_string("t.str", "h\u00e9llo, \u4e16\u754c")
    # add_string skips an empty value, add_key_value does not (gguf-py
    # refuses empty arrays: test_gguf.c builds one by hand).
    w.add_key_value("t.empty", "", gguf.GGUFValueType.STRING)
    w.add_uint64("t.u64", 18000000000000000000)
    w.add_int64("t.i64", -9000000000000000000)
    w.add_float64("t.f64", -2.5e-300)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_key_value("t.arr_u8", [7, 8, 9, 255], gguf.GGUFValueType.ARRAY,
                    sub_type=gguf.GGUFValueType.UINT8)
    w.add_array("t.arr_f32", [0.5, -1.25])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.arr_str", ["a", "", "\u00e9t\u00e9", "d e"])
    w.add_array("t.arr_arr", [[1, 2], [3]])

    rows, cols = 3, 512
    x = rng.normal(0, 1, size=(rows, cols)).astype(np.float32)
    expected = []

    def add(name, qtype, data):
        w.add_tensor(name, data, raw_dtype=qtype)
        deq = gguf.quants.dequantize(data, qtype).astype(np.float32)
        assert deq.shape == (rows, cols), (name, deq.shape)
        assert np.isfinite(deq).all(), name
        expected.append(deq)

    add("f32", Q.F32, x)
    add("f16", Q.F16, x.astype(np.float16))
    add("bf16", Q.BF16, gguf.quants.quantize(x, Q.BF16))
    add("q8_0", Q.Q8_0, gguf.quants.quantize(x, Q.Q8_0))
    add("q4_0", Q.Q4_0, gguf.quants.quantize(x, Q.Q4_0))
    for qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        add(qt.name.lower(), qt, kquant_bytes(rng, qt, rows, cols))
    # Types the engine cannot use: still sized and validated.
    for qt in (Q.Q3_K, Q.IQ4_NL, Q.MXFP4):
        block, size = gguf.GGML_QUANT_SIZES[qt]
        w.add_tensor(qt.name.lower(), rng.integers(0, 256, size=(2, 256 // block * size),
                                                    dtype=np.uint8), raw_dtype=qt)
    w.add_tensor("i32", np.arange(5, dtype=np.int32), raw_dtype=Q.I32)
    w.add_tensor("f64", np.array([1.5, -2.0], dtype=np.float64), raw_dtype=Q.F64)
    w.add_tensor("cube", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    w.add_tensor("hyper", np.arange(120, dtype=np.float32).reshape(5, 4, 3, 2))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    np.concatenate([e.ravel() for e in expected]).tofile(os.path.join(OUT, "types.f32"))


def make_tiny_llama(rng):
    w = gguf.GGUFWriter(os.path.join(OUT, "tiny-llama.gguf"), "llama")
    w.add_name("tiny")
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_block_count(2)
    w.add_feed_forward_length(160)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(16)
    w.add_vocab_size(32)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_file_type(1)
    # 32 x 64 f16 = 4096 bytes and 64 f32 = 256 bytes: multiples of 32,
    # so the file ends with the last tensor and has no trailing padding.
    w.add_tensor("token_embd.weight", rng.normal(0, 0.2, size=(32, 64)).astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def looks_special(s):
    """convert_hf_to_gguf.py's does_token_look_special, for the forms that
    occur in these tokenizers."""
    return (s.startswith("<|") and s.endswith("|>")) or s in ("<pad>", "<mask>")


def make_tokenizer(json_text, out_path, bos, eos):
    """The tokenizer metadata as convert_hf_to_gguf.py's _set_vocab_gpt2
    writes it, into a GGUF with no tensors. The vocabulary is read from the
    tokenizer.json (model.vocab and added_tokens), which is what HF's
    get_vocab gives the converter; the added tokens of these files need no
    normalisation."""
    tj = json.loads(json_text)
    reverse = {i: s for s, i in tj["model"]["vocab"].items()}
    added = {a["id"]: a for a in tj["added_tokens"]}
    for i, a in added.items():
        reverse[i] = a["content"]
    n = max(reverse) + 1
    tokens, types = [], []
    for i in range(n):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        s = reverse[i]
        if i in added:
            if added[i]["special"] or looks_special(s):
                types.append(gguf.TokenType.CONTROL)
            else:
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(s)
    w = gguf.GGUFWriter(out_path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(types)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(json_text)
        sv = gguf.SpecialVocab(d, load_merges=True, n_vocab=n)
        assert len(sv.merges) > 0
        sv.special_token_ids = {"bos": bos, "eos": eos}
        sv.add_to_gguf(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return len(tokens), len(sv.merges)


def file_sum(path):
    """Size and 64-bit FNV-1a of a file (the C test computes the same)."""
    with open(path, "rb") as f:
        data = f.read()
    h = 0xcbf29ce484222325
    for b in data:  # about 8 MB: a few seconds
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return {"bytes": len(data), "fnv1a64": "%016x" % h}


def main():
    # The directory is shared with make_gguf_models.py: only this script's
    # files are rewritten.
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20240607)
    make_types(rng)
    make_tiny_llama(rng)

    with open(os.path.join(TOK, "mkmodel-tokenizer.json"), encoding="utf-8") as f:
        print("mkmodel: %d tokens, %d merges" % make_tokenizer(
            f.read(), os.path.join(OUT, "mkmodel-tokenizer.gguf"), 496, 497))
    with gzip.open(os.path.join(TOK, "llama3-tokenizer.json.gz"), "rt", encoding="utf-8") as f:
        text = f.read()
    sums = {"gguf": importlib.metadata.version("gguf")}
    with tempfile.TemporaryDirectory() as d:
        tmp = os.path.join(d, "llama3-tokenizer.gguf")
        print("llama3: %d tokens, %d merges" % make_tokenizer(text, tmp, 128000, 128001))
        sums["llama3-tokenizer.gguf"] = file_sum(tmp)
    sums["mkmodel-tokenizer.gguf"] = file_sum(os.path.join(OUT, "mkmodel-tokenizer.gguf"))
    with open(os.path.join(OUT, "tokenizers.json"), "w") as f:
        json.dump(sums, f, indent=1)
        f.write("\n")
    for name in MINE:
        print("%-28s %8d bytes" % (name, os.path.getsize(os.path.join(OUT, name))))


if __name__ == "__main__":
    main()
