#!/usr/bin/env python3
"""Builds the reference fixture tests/fixtures/llasa-plus/.

What it is for: lib/engine/model.c runs Llasa+ checkpoints (Tian et al., ASRU 2025;
github.com/ASLP-lab/LLaSA_Plus): a frozen Llama backbone under `llm.` and two
multi-token prediction heads, each

    features_k = mtp_k_proj(mtp_k_local_RMSNorm(input_k))
    output_k   = mtp_k_block(features_k)          (a whole Llama decoder layer)
    logits_k   = llm.lm_head(output_k)            (no final norm)

with input_1 the backbone's last hidden state after its final norm and
input_k the output of head k - 1. Head 1 predicts the token two ahead, head 2
three ahead. This script builds that module at a small size with seeded random
weights from Llasa+'s own module definitions (LlamaDecoderLayerLlasa and
LlamaRMSNorm of their llama_dir/modeling_llama.py, and their backbone class,
LlamaForCausalLM, from the same file), runs it over a sequence as their
inference code does (inference_llasa_open.py: the whole sequence each step, no
cache) and records the logits of the backbone and of both heads at every
position. tests/unit/test_llasa_plus.c compares the engine with them.

How to run it (from the repository root; no GPU, no network, seconds): their
modeling file needs transformers 4.46 (their requirement.txt pins 4.46.2),
torch 2.x, safetensors and numpy, and a checkout of their repository:

    git clone https://github.com/ASLP-lab/LLaSA_Plus /tmp/LLaSA_Plus
    python3 tests/ref/make_llasa_plus_fixtures.py --llasa-plus-repo /tmp/LLaSA_Plus

Nothing of their repository is copied here: it is imported from that path.

Files (raw little-endian float32, row-major, no header):
  config.json                  the backbone's config (Llasa-1B's layout)
  llasa_plus/model.safetensors the checkpoint as their CustomModel's state_dict
                               names it: llm.* (bf16, as Llasa-1B is stored)
                               and mtp_{1,2}_* (f32, as their heads are built)
  tokens.txt                   the sequence (T ids)
  target-logits.f32            [T, V]    the backbone's logits
  heads-logits.f32             [T, 2, V] head 1's and head 2's logits
  meta.json                    versions, seed, shapes, error measurements

Float32 error: the same module is run again in float64 (weights upcast
exactly). max_abs_diff_*_f32_vs_f64 in meta.json is the float32 noise of the
reference itself; the C test's tolerance is derived from it (see there).
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "llasa-plus")

SEED = 3101
T = 12          # positions of the sequence
W_STD = 0.2     # linear and embedding weights N(0, W_STD^2)
B_STD = 0.1     # the heads' proj biases
N_STD = 0.1     # norm weights 1 + N(0, N_STD^2)

CONFIG = dict(
    vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=500000.0,
    rope_scaling={"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 256, "rope_type": "llama3"},
    tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
    bos_token_id=1, eos_token_id=2, hidden_act="silu", torch_dtype="bfloat16",
)


def their_modules(repo):
    sys.path.insert(0, repo)
    from llama_dir.configuration_llama import LlamaConfig
    from llama_dir.modeling_llama import (LlamaDecoderLayerLlasa, LlamaForCausalLM,
                                          LlamaRMSNorm)
    return LlamaConfig, LlamaForCausalLM, LlamaDecoderLayerLlasa, LlamaRMSNorm


def build(repo):
    LlamaConfig, LlamaForCausalLM, Block, RMSNorm = their_modules(repo)
    config = LlamaConfig(**CONFIG)
    config._attn_implementation = "eager"
    H = config.hidden_size

    class LlasaPlus(nn.Module):
        """Their CustomModel's attributes (so its state_dict has their names)
        and the heads' forward of their inference loop."""

        def __init__(self):
            super().__init__()
            self.llm = LlamaForCausalLM(config)
            # their layer_idx values (17, 18): only a cache would use them
            self.mtp_1_block = Block(config=config, layer_idx=17)
            self.mtp_1_proj = nn.Linear(in_features=H, out_features=H)
            self.mtp_1_local_RMSNorm = RMSNorm(hidden_size=H)
            self.mtp_2_block = Block(config=config, layer_idx=18)
            self.mtp_2_proj = nn.Linear(in_features=H, out_features=H)
            self.mtp_2_local_RMSNorm = RMSNorm(hidden_size=H)

        def forward(self, ids):
            t = ids.shape[1]
            out = self.llm(input_ids=ids, output_hidden_states=True)
            hid = out.hidden_states[-1]
            mask = torch.ones_like(ids)
            cache_position = torch.arange(0, t)
            position_ids = cache_position.unsqueeze(0)
            f1 = self.mtp_1_proj(self.mtp_1_local_RMSNorm(hid))
            o1 = self.mtp_1_block(f1, attention_mask=mask, position_ids=position_ids,
                                  cache_position=cache_position)[0]
            f2 = self.mtp_2_proj(self.mtp_2_local_RMSNorm(o1))
            o2 = self.mtp_2_block(f2, attention_mask=mask, position_ids=position_ids,
                                  cache_position=cache_position)[0]
            return out.logits, self.llm.lm_head(o1), self.llm.lm_head(o2)

    return config, LlasaPlus()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llasa-plus-repo", required=True,
                    help="a checkout of github.com/ASLP-lab/LLaSA_Plus")
    args = ap.parse_args()

    torch.manual_seed(SEED)
    config, model = build(os.path.abspath(args.llasa_plus_repo))
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "RMSNorm" in name:
                p.copy_(1 + N_STD * torch.randn(p.shape, generator=g))
            elif name.endswith("proj.bias"):
                p.copy_(B_STD * torch.randn(p.shape, generator=g))
            else:
                p.copy_(W_STD * torch.randn(p.shape, generator=g))
        # the backbone is stored in bf16: the reference runs those values
        for p in model.llm.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    model.eval()
    ids = torch.randint(0, config.vocab_size, (1, T), generator=g)

    with torch.no_grad():
        tl, h1, h2 = model(ids)
        m64 = model.double()
        tl64, h164, h264 = m64(ids)
        model.float()
    target = tl[0].float().numpy()
    heads = torch.stack([h1[0], h2[0]], dim=1).float().numpy()   # [T, 2, V]
    heads64 = torch.stack([h164[0], h264[0]], dim=1).numpy()

    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(os.path.join(OUT, "llasa_plus"))
    sd = {}
    for k, v in model.state_dict().items():
        v = v.detach().clone().contiguous()   # the tied lm_head: its own copy
        sd[k] = v.to(torch.bfloat16) if k.startswith("llm.") else v.float()
    save_file(sd, os.path.join(OUT, "llasa_plus", "model.safetensors"),
              metadata={"format": "pt"})
    cfg = dict(CONFIG, architectures=["LlamaForCausalLM"], model_type="llama")
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write(" ".join(str(int(i)) for i in ids[0]) + "\n")
    target.astype("<f4").tofile(os.path.join(OUT, "target-logits.f32"))
    heads.astype("<f4").tofile(os.path.join(OUT, "heads-logits.f32"))
    meta = {
        "seed": SEED, "positions": T, "heads": 2, "hidden": config.hidden_size,
        "vocab": config.vocab_size, "tensors": sorted(sd),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "numpy": np.__version__,
        "max_abs_logit_target": float(np.abs(target).max()),
        "max_abs_logit_heads": float(np.abs(heads).max()),
        "max_abs_diff_target_f32_vs_f64": float(np.abs(target - tl64[0].numpy()).max()),
        "max_abs_diff_heads_f32_vs_f64": float(np.abs(heads - heads64).max()),
        "offsets": "at position t the backbone predicts t+1, head 1 t+2, head 2 t+3",
    }
    with open(os.path.join(OUT, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    print(json.dumps({k: v for k, v in meta.items() if k != "tensors"}, indent=1))


if __name__ == "__main__":
    main()
