#!/usr/bin/env python3
"""heads_topk.py: what pcg-mtp --tokens prints, computed with PyTorch and
transformers: the top-k tokens of the target's next-token distribution and
of each head of an mtp.safetensors (man/mtp.5), one line each, as
"label +offset id:prob ...". For cross-checking the C heads (smoke.sh).

Usage:
    python3 tools/mtp/heads_topk.py --model DIR --heads FILE --tokens 1,2,3 [--top-k 5]
"""
import argparse

import torch
import torch.nn.functional as F
from safetensors import safe_open
from transformers import LlamaForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--heads", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--top-k", type=int, default=5)
    a = p.parse_args()
    ids = torch.tensor([[int(x) for x in a.tokens.split(",")]])
    m = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()

    def show(label, z):
        pr = torch.softmax(z, -1)
        v, j = pr.topk(a.top_k)
        print(label, " ".join(f"{int(t)}:{float(q):.4f}" for t, q in zip(j, v)))

    with torch.no_grad():
        out = m(input_ids=ids, output_hidden_states=True)
        h = out.hidden_states[-1][0, -1]  # after the final norm
        show("target +1", out.logits[0, -1])
        with safe_open(a.heads, "pt") as f:
            for i in range(int(f.metadata()["mtp_heads"])):
                W = f.get_tensor(f"mtp.{i}.weight").float()
                b = f.get_tensor(f"mtp.{i}.bias").float()
                show(f"mtp.{i} +{i + 2}", m.lm_head(h + F.silu(W @ h + b)))


if __name__ == "__main__":
    main()
