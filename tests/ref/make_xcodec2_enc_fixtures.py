#!/usr/bin/env python3
"""make_xcodec2_enc_fixtures.py: reference outputs of the X-codec2 encoder for the C port.

Builds the encoder path of X-codec2 exactly as the original inference.py runs it, from
modules nobody here wrote: transformers' SeamlessM4TFeatureExtractor and
Wav2Vec2BertModel (facebook/w2v-bert-2.0's architecture), the X-Codec-2.0 training code's
SemanticEncoder and CodecEncoder (vq/module.py, vq/codec_encoder.py with its anti-aliased
SnakeBeta), and vector-quantize-pytorch 1.17.8's ResidualFSQ. Weights are seeded and
random, in a small configuration, and written in the key layout of HKUSTAudio/xcodec2's
model.safetensors. For a fixed waveform it writes every stage:

    wav.f32        the input, 16 kHz mono, float32
    features.f32   the feature extractor's input_features [T, 160] (80 log-mels, stacked by 2)
    hidden.f32     Wav2Vec2BertModel's hidden_states[16] [T, H]
    semantic.f32   SemanticEncoder's output [T, H]
    acoustic.f32   CodecEncoder's output [T, H]
    prior.f32      fc_prior's output [T, 2H]
    prequant.f32   the quantizer's project_in output [T, n_levels] (before the bounds)
    codes.i32      the codes [T]
    meta.json      shapes, versions, and each code digit's distance to a rounding boundary

Usage (set-up as tests/ref/README-xcodec2.md, plus transformers with Wav2Vec2Bert):
    python3 tests/ref/make_xcodec2_enc_fixtures.py --src X-CODEC-2.0-CHECKOUT --pkgs PKGS
"""
import argparse
import importlib.util
import json
import math
import os
import sys
import types

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "xcodec2-enc")

# hidden: the w2v-BERT width and the codec's (the original: 1024 both); layers: 17 so
# that hidden_states[16] is not the last; ngf: the acoustic encoder's first width (48).
MODELS = {
    "tiny": dict(hidden=32, layers=17, heads=4, ffn=64, ngf=4, seconds=1.3, seed=1),
}
# --full: the real sizes (w2v-bert-2.0's 24 layers, of which 16 are run), a 10 s
# prompt; written to the directory given, not committed (2.6 GB)
FULL = dict(hidden=1024, layers=24, heads=16, ffn=4096, ngf=48, seconds=10.0, seed=3)


def import_reference(src, pkgs):
    """The encoder modules of an X-Codec-2.0 checkout, without vq/__init__.py (which
    imports the decoder and torchtune)."""
    if pkgs:
        sys.path.insert(0, pkgs)
    vq = types.ModuleType("vq")
    vq.__path__ = [os.path.join(src, "vq")]
    sys.modules["vq"] = vq
    tt = types.ModuleType("torchtune")  # imported by codec_encoder.py, unused by CodecEncoder
    ttm = types.ModuleType("torchtune.modules")
    ttm.RotaryPositionalEmbeddings = object
    sys.modules["torchtune"] = tt
    sys.modules["torchtune.modules"] = ttm
    bs = types.ModuleType("vq.bs_roformer5")  # likewise (TransformerBlock)
    bs.TransformerBlock = object
    sys.modules["vq.bs_roformer5"] = bs
    from vq.codec_encoder import CodecEncoder
    from vq.module import SemanticEncoder
    from vector_quantize_pytorch import ResidualFSQ
    return CodecEncoder, SemanticEncoder, ResidualFSQ


def randomize(model, g):
    """Unit-gain weights so that every stage matters: matrices and kernels N(0, 1/fan_in),
    biases N(0, 0.1^2), norm weights 1 + N(0, 0.1^2); SnakeBeta's log-scale alpha and
    beta N(0, 0.3^2); the relative-position table N(0, 1)."""
    for module in model.modules():
        is_norm = isinstance(module, torch.nn.LayerNorm)
        for pname, p in module.named_parameters(recurse=False):
            if is_norm and pname == "weight":
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif pname == "bias":
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif pname in ("alpha", "beta"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif type(module).__name__ == "Embedding":
                p.copy_(torch.randn(p.shape, generator=g))
            elif pname == "weight_g":
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p[0].numel()))


def waveform(seconds, seed):
    """Speech-like test signal: a few harmonics with a moving pitch and noise bursts."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 16000)
    t = np.arange(n) / 16000.0
    f0 = 140 + 40 * np.sin(2 * np.pi * 1.5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / 16000.0
    x = sum(0.3 / k * np.sin(k * phase) for k in range(1, 8))
    x *= 0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2
    x += 0.05 * rng.standard_normal(n) * (np.sin(2 * np.pi * 0.7 * t) > 0.5)
    return (0.8 * x / np.abs(x).max()).astype(np.float32)


def build(name, c, CodecEncoder, SemanticEncoder, ResidualFSQ, out=None):
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig, Wav2Vec2BertModel
    from importlib.metadata import version

    torch.manual_seed(c["seed"])
    g = torch.Generator().manual_seed(c["seed"])
    H = c["hidden"]
    # facebook/w2v-bert-2.0's preprocessor_config.json: 80 mel bins, stride 2,
    # padding_value 1.0, 16 kHz
    fe = SeamlessM4TFeatureExtractor(feature_size=80, num_mel_bins=80, padding_value=1.0,
                                     stride=2, sampling_rate=16000)
    wcfg = Wav2Vec2BertConfig(hidden_size=H, num_hidden_layers=c["layers"],
                              num_attention_heads=c["heads"], intermediate_size=c["ffn"],
                              feature_projection_input_dim=160, hidden_act="swish",
                              position_embeddings_type="relative_key",
                              left_max_position_embeddings=64, right_max_position_embeddings=8,
                              conv_depthwise_kernel_size=31, layer_norm_eps=1e-5,
                              add_adapter=False, use_intermediate_ffn_before_adapter=False)
    w2v = Wav2Vec2BertModel(wcfg).eval()
    sem = SemanticEncoder(H, H, H).eval()
    enc = CodecEncoder(ngf=c["ngf"], hidden_dim=H).eval()
    fc_prior = torch.nn.Linear(2 * H, 2 * H).eval()
    quant = ResidualFSQ(dim=2 * H, levels=[4] * 8, num_quantizers=1).eval()
    with torch.no_grad():
        for m in (w2v, sem, enc, fc_prior, quant):
            randomize(m, g)
        # the acoustic branch's residual units grow the signal (to about 50 here):
        # project_in scaled so that the digits spread over the FSQ levels rather than
        # saturating its tanh bound
        quant.project_in.weight.mul_(0.05)

    wav = waveform(c["seconds"], c["seed"])
    with torch.no_grad():
        # inference.py, line for line
        w = torch.from_numpy(wav).unsqueeze(0)
        pad_for_wav = 320 - (w.shape[1] % 320)
        w = torch.nn.functional.pad(w, (0, pad_for_wav))
        feat = fe(torch.nn.functional.pad(w[0, :], (160, 160)), sampling_rate=16000,
                  return_tensors="pt").data["input_features"]
        vq_emb = enc(w.unsqueeze(1)).transpose(1, 2)
        hs = w2v(feat, output_hidden_states=True).hidden_states
        hidden = hs[16]
        semantic = sem(hidden.transpose(1, 2))
        cat = torch.cat([semantic, vq_emb], dim=1)
        prior = fc_prior(cat.transpose(1, 2)).transpose(1, 2)
        x = prior.permute(0, 2, 1)
        _, codes = quant(x)
        pre = quant.project_in(x)
    T = codes.shape[1]
    # distance of each digit to its rounding boundary: bound twice, as ResidualFSQ does
    shift = math.atanh(0.5 / 1.5015)
    z = pre.double()
    for _ in range(2):
        z = torch.tanh(z + shift) * 1.5015 - 0.5
    frac = (z - torch.floor(z)).numpy()
    dist = np.abs(frac - 0.5)

    d = out or os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    tensors = {}
    for k, v in w2v.state_dict().items():
        tensors["semantic_model." + k] = v.contiguous()
    for k, v in sem.state_dict().items():
        tensors["SemanticEncoder_module." + k] = v.contiguous()
    for k, v in enc.state_dict().items():
        tensors["CodecEnc." + k] = v.contiguous()
    for k, v in fc_prior.state_dict().items():
        tensors["fc_prior." + k] = v.contiguous()
    for k, v in quant.state_dict().items():
        tensors["generator.quantizer." + k] = v.contiguous()
    save_file(tensors, os.path.join(d, "model.safetensors"))

    def put(fname, a, dtype=np.float32):
        np.asarray(a, dtype).tofile(os.path.join(d, fname))
    put("wav.f32", wav)
    put("features.f32", feat[0].numpy())
    put("hidden.f32", hidden[0].numpy())
    put("semantic.f32", semantic[0].transpose(0, 1).numpy())
    put("acoustic.f32", vq_emb[0].transpose(0, 1).numpy())
    put("prior.f32", prior[0].transpose(0, 1).numpy())
    put("prequant.f32", pre[0].numpy())
    put("codes.i32", codes[0, :, 0].numpy(), np.int32)
    meta = {
        "T": int(T), "samples": int(wav.size), "hidden": H, "layers": c["layers"],
        "heads": c["heads"], "ffn": c["ffn"], "ngf": c["ngf"],
        "min_boundary_distance": float(dist.min()),
        "versions": {p: version(p) for p in ("torch", "transformers", "vector-quantize-pytorch")},
        "tensors": len(tensors),
    }
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    print(f"{name}: T {T}, {len(tensors)} tensors, closest digit to a boundary "
          f"{dist.min():.3g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=os.environ.get("XCODEC2_SRC"))
    ap.add_argument("--pkgs", default=os.environ.get("XCODEC2_PKGS"))
    ap.add_argument("--full", metavar="OUTDIR", help="write the full-size encoder there instead")
    args = ap.parse_args()
    if not args.src:
        sys.exit("--src X-CODEC-2.0-CHECKOUT (or XCODEC2_SRC) is required")
    torch.set_num_threads(1)
    ref = import_reference(args.src, args.pkgs)
    if args.full:
        torch.set_num_threads(os.cpu_count() or 1)
        build("full", FULL, *ref, out=args.full)
        return
    for name, c in MODELS.items():
        build(name, c, *ref)


if __name__ == "__main__":
    main()
