#!/usr/bin/env python3
"""Builds the reference fixtures under tests/fixtures/mtp/.

What it is for: lib/engine/mtp.c computes multi-token prediction heads on a target
Llama model (man/mtp.5):

    z_k = lm_head(h + SiLU(W_k h + b_k)),  k = 1..n, predicting x_{t+1+k}

where h is the final hidden state of the last position after the final
RMSNorm. This script writes seeded random heads (mtp.safetensors) for some
of the models of tests/fixtures/llama/ (made by make_llama_fixtures.py) and
records what PyTorch and transformers compute for them on the model's
tokens.txt: the normed final hidden states of every position and the heads'
logits at the last position. The C test tests/unit/test_mtp.c compares.

How to run it (from the repository root; needs torch 2.x, transformers 5.x,
safetensors and numpy; no GPU, no network; a few seconds):

    python3 tests/ref/make_mtp_fixtures.py

It rewrites tests/fixtures/mtp/<name>/ for every entry of HEADS. Output is
deterministic for a given torch/transformers version (in meta.json).

Files per model (raw little-endian float32, row-major, no header):
  mtp.safetensors   the heads: mtp.<i>.weight [H, H], mtp.<i>.bias [H]
  hidden.f32        [T, H]  transformers' hidden_states[-1] (after model.norm)
  heads-logits.f32  [n, V]  the n heads' logits at the last position
  meta.json         versions, seeds, shapes, the error measurements below

Float32 error: the heads' logits are computed here in float32 from the
float32 hidden state, and again in float64 from transformers run in float64
(weights upcast exactly). max_abs_diff_f32_vs_f64 in meta.json is that
difference; it is the float32 noise of the forward pass plus the head (one
more H-term dot product and one more lm_head product), about 1e-5 at
max|logit| about 5 to 10. test_mtp.c's tolerance is derived from it.
"""

import json
import os
import shutil

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMA = os.path.join(ROOT, "tests", "fixtures", "llama")
OUT = os.path.join(ROOT, "tests", "fixtures", "mtp")

W_STD = 0.2   # head weights N(0, W_STD^2): W h is then of order 1 (hidden 48..64)
B_STD = 0.1   # head biases N(0, B_STD^2)

# fixture name -> (llama fixture model, heads, heads' dtype, seed)
HEADS = {
    "gqa-f32": ("gqa-f32", 3, torch.float32, 2001),
    "bf16": ("bf16", 4, torch.bfloat16, 2002),
    "tied-f16": ("tied-f32", 2, torch.float16, 2003),
}


def heads_logits(model, h, W, b):
    """lm_head(h + silu(h W^T + b)) for each head: [n, V]."""
    z = []
    for i in range(W.shape[0]):
        u = h + torch.nn.functional.silu(h @ W[i].T + b[i])
        z.append(model.lm_head(u))
    return torch.stack(z)


@torch.no_grad()
def make(name, spec):
    src, n, dtype, seed = spec
    mdir = os.path.join(LLAMA, src)
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(mdir, "tokens.txt")) as f:
        ids = torch.tensor([[int(x) for x in f.read().split()]])

    # f32 compute from the checkpoint's weights (a bf16 checkpoint upcast
    # exactly), as the C engine computes.
    model = LlamaForCausalLM.from_pretrained(mdir, dtype=torch.float32,
                                             attn_implementation="eager").eval()
    H = model.config.hidden_size
    g = torch.Generator().manual_seed(seed)
    W = (W_STD * torch.randn(n, H, H, generator=g)).to(dtype)
    b = (B_STD * torch.randn(n, H, generator=g)).to(dtype)
    tensors = {}
    for i in range(n):
        tensors[f"mtp.{i}.weight"] = W[i].contiguous()
        tensors[f"mtp.{i}.bias"] = b[i].contiguous()
    path = os.path.join(d, "mtp.safetensors")
    save_file(tensors, path, metadata={"mtp_heads": str(n), "format": "pcg-mtp"})
    os.chmod(path, 0o644)

    # Read back what was written, as the C side will.
    with safe_open(path, "pt") as f:
        assert f.metadata() == {"mtp_heads": str(n), "format": "pcg-mtp"}
        Wr = torch.stack([f.get_tensor(f"mtp.{i}.weight") for i in range(n)]).float()
        br = torch.stack([f.get_tensor(f"mtp.{i}.bias") for i in range(n)]).float()

    out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
    hs = out.hidden_states[-1][0]                       # [T, H]
    # In HF Llama the last entry of hidden_states is after model.norm: it is
    # exactly what lm_head reads.
    assert torch.equal(model.lm_head(hs), out.logits[0]), "hidden_states[-1] is not normed"
    z = heads_logits(model, hs[-1], Wr, br)             # [n, V]

    m64 = LlamaForCausalLM.from_pretrained(mdir, dtype=torch.float64,
                                           attn_implementation="eager").eval()
    out64 = m64(input_ids=ids, use_cache=False, output_hidden_states=True)
    z64 = heads_logits(m64, out64.hidden_states[-1][0][-1], Wr.double(), br.double())
    # The heads' part alone: the same f32 hidden state, head in f64.
    zh64 = heads_logits(m64, hs[-1].double(), Wr.double(), br.double())

    hs.numpy().astype("<f4").tofile(os.path.join(d, "hidden.f32"))
    z.numpy().astype("<f4").tofile(os.path.join(d, "heads-logits.f32"))
    top1 = z.argmax(-1).tolist()
    meta = dict(
        name=name, model=src, heads=n, dtype=str(dtype).replace("torch.", ""),
        seed=seed, w_std=W_STD, b_std=B_STD, hidden=H, vocab=model.config.vocab_size,
        prompt=ids[0].tolist(), position=ids.shape[1] - 1,
        offset_note="head i (file index, from 0) predicts the token 2 + i after the last "
                    "prompt position; the target's own logits predict the next one",
        versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                      numpy=np.__version__),
        max_abs_logit=float(z.abs().max()),
        max_abs_hidden=float(hs.abs().max()),
        max_abs_diff_f32_vs_f64=float((z.double() - z64).abs().max()),
        max_abs_diff_head_only_f32_vs_f64=float((z.double() - zh64).abs().max()),
        max_abs_diff_hidden_f32_vs_f64=float(
            (hs.double() - out64.hidden_states[-1][0]).abs().max()),
        top1=top1,
        files=sorted(os.listdir(d)) + ["meta.json"],
    )
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"{name}: {n} heads {meta['dtype']}, max|logit| {meta['max_abs_logit']:.3g}, "
          f"f32 vs f64 {meta['max_abs_diff_f32_vs_f64']:.3g}, top1 {top1}")


def main():
    torch.manual_seed(0)
    for name, spec in HEADS.items():
        make(name, spec)
    total = sum(os.path.getsize(os.path.join(dp, f))
                for dp, _, fs in os.walk(OUT) for f in fs)
    assert total < 200 * 1024, total
    print(f"{OUT}: {total} bytes")


if __name__ == "__main__":
    main()
