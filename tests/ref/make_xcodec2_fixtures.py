#!/usr/bin/env python3
"""make_xcodec2_fixtures.py: reference outputs of the X-codec2 decoder for the C port.

Builds the decoder path of X-codec2 from the original training code
(zhenye234/X-Codec-2.0, vq/codec_decoder_vocos.py: ResidualFSQ, VocosBackbone,
ISTFTHead) with seeded random weights, runs it on fixed codes exactly as
inference.py does (get_output_from_indices -> fc_post_a -> generator(vq=False)),
and writes, per model, the checkpoint in the key layout of HKUSTAudio/xcodec2's
model.safetensors (generator.*, fc_post_a.*, plus a few encoder keys that a
decoder must ignore), a config.json, the codes and the waveform.

Usage (see tests/ref/README-xcodec2.md for the set-up):
    python3 tests/ref/make_xcodec2_fixtures.py --src X-CODEC-2.0-CHECKOUT
    python3 tests/ref/make_xcodec2_fixtures.py --src ... --full OUTDIR   # full size, once

The fixtures go to tests/fixtures/xcodec2/<name>/. --full writes a full-size
random decoder (about 750 MB) and its reference output to OUTDIR instead; that
one is not committed.
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
OUT = os.path.join(ROOT, "tests", "fixtures", "xcodec2")

# name: dims, depth, heads, FSQ levels, hop, the number of codes, seed.
# "tiny" keeps the real FSQ (8 digits of base 4: 65,536 codes) and the real
# hop/n_fft (320/1280) so the ISTFT is the full-size one; GroupNorm has 32
# groups in the original (hard-coded), so the width is a multiple of 32.
# "tiny-levels" varies what the config can vary: mixed odd/even levels,
# another hop, one channel per group.
MODELS = {
    "tiny": dict(hidden=64, depth=2, heads=4, vq_dim=128, levels=[4] * 8, hop=320,
                 ratios=[2, 2, 4, 4, 5], T=100,
                 seed=1),
    "tiny-levels": dict(hidden=32, depth=1, heads=2, vq_dim=48, levels=[8, 5, 5, 5], hop=160,
                        ratios=[2, 2, 4, 2, 5],
                        T=60, seed=2),
}
FULL = dict(hidden=1024, depth=12, heads=16, vq_dim=2048, levels=[4] * 8, hop=320,
            ratios=[2, 2, 4, 4, 5], T=250,
            seed=3)


def import_reference(src, pkgs):
    """Imports vq.codec_decoder_vocos from a checkout of X-Codec-2.0 without running
    vq/__init__.py (it imports the encoder and its many dependencies). Two modules that
    the decoder path imports but does not use are stubbed: torchaudio (imported by
    bs_roformer5.py, unused there) and torchtune's package __init__ (it refuses to load
    without torchao); torchtune's RotaryPositionalEmbeddings itself is the real one."""
    if pkgs:
        sys.path.insert(0, pkgs)
    try:
        import torchaudio  # noqa: F401
    except Exception:
        sys.modules["torchaudio"] = types.ModuleType("torchaudio")
    spec = importlib.util.find_spec("torchtune")
    if spec is None:
        sys.exit("torchtune==0.3.1 not found (see tests/ref/README-xcodec2.md)")
    ttdir = list(spec.submodule_search_locations)[0]
    tt = types.ModuleType("torchtune")
    tt.__path__ = [ttdir]
    sys.modules["torchtune"] = tt
    ttm = types.ModuleType("torchtune.modules")
    ttm.__path__ = [os.path.join(ttdir, "modules")]
    sys.modules["torchtune.modules"] = ttm
    pspec = importlib.util.spec_from_file_location(
        "torchtune.modules.position_embeddings",
        os.path.join(ttdir, "modules", "position_embeddings.py"))
    pe = importlib.util.module_from_spec(pspec)
    pspec.loader.exec_module(pe)
    ttm.RotaryPositionalEmbeddings = pe.RotaryPositionalEmbeddings
    vq = types.ModuleType("vq")
    vq.__path__ = [os.path.join(src, "vq")]
    sys.modules["vq"] = vq
    from vq.codec_decoder_vocos import CodecDecoderVocos
    from vector_quantize_pytorch import ResidualFSQ
    from importlib.metadata import version
    return CodecDecoderVocos, ResidualFSQ, {
        p: version(p) for p in ("vector-quantize-pytorch", "torchtune", "einops", "einx")}


class Reference(torch.nn.Module):
    """The decode path of inference.py: decoder plus fc_post_a."""

    def __init__(self, CodecDecoderVocos, ResidualFSQ, c):
        super().__init__()
        H = c["hidden"]
        self.generator = CodecDecoderVocos(hidden_dim=H, depth=c["depth"], heads=c["heads"],
                                           pos_meb_dim=H // c["heads"], hop_length=c["hop"],
                                           vq_dim=c["vq_dim"])
        if c["levels"] != [4] * 8:
            # The original hard-codes levels [4]*8; a tiny config swaps in the same
            # library's ResidualFSQ with other levels.
            self.generator.quantizer = ResidualFSQ(dim=c["vq_dim"], levels=c["levels"],
                                                   num_quantizers=1)
        self.fc_post_a = torch.nn.Linear(c["vq_dim"], H)

    @torch.no_grad()
    def forward(self, codes):
        # codes: [1, 1, T] as in the model card; inference.py's lines follow.
        vq_post_emb = self.generator.quantizer.get_output_from_indices(codes.transpose(1, 2))
        vq_post_emb = vq_post_emb.transpose(1, 2)
        vq_post_emb = self.fc_post_a(vq_post_emb.transpose(1, 2)).transpose(1, 2)
        return self.generator(vq_post_emb.transpose(1, 2), vq=False)[0]

    @torch.no_grad()
    def backbone_out(self, codes):
        e = self.generator.quantizer.get_output_from_indices(codes.transpose(1, 2))
        return self.generator.backbone(self.fc_post_a(e))


def randomize(model, c, g):
    """Weights that make every stage matter: matrices N(0, 1/fan_in) (unit gain, so the
    residual stream and the log-magnitudes stay O(1)), biases N(0, 0.1^2), norm weights
    1 + N(0, 0.1^2), norm biases N(0, 0.1^2). The log-magnitude rows of the head get
    1.5x that gain so that a few bins per thousand pass log(100) and the clip at 100 is
    exercised (tiny) without the full-size output exploding."""
    for module in model.modules():
        is_norm = isinstance(module, (torch.nn.GroupNorm, torch.nn.LayerNorm)) or \
            type(module).__name__ == "RMSNorm"
        for pname, p in module.named_parameters(recurse=False):
            if is_norm and pname == "weight":
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif pname == "bias":
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p[0].numel()))
    n_bins = c["hop"] * 4 // 2 + 1
    model.generator.head.out.weight[:n_bins] *= 1.5


def sensitivity(model, codes3, wav):
    """How far the waveform moves under plausible porting mistakes: the max abs
    change and the SNR against the correct output for each, so the test's tolerance can be placed between the float32
    noise and the smallest of these."""
    import copy
    import torch.nn.functional as F
    out = {}

    def probe(name, change, restore=None):
        m = copy.deepcopy(model)
        change(m)
        try:
            w = m(codes3)[0, 0].numpy()
            out[name] = {"max_abs": float(np.abs(w - wav).max()), "snr_db": snr_db(wav, w)}
        finally:
            if restore:
                restore()

    def eps(cls, value):
        def change(m):
            for mod in m.modules():
                if type(mod).__name__ == cls:
                    mod.eps = value
        return change
    probe("groupnorm_eps_1e-5", eps("GroupNorm", 1e-5))
    probe("layernorm_eps_1e-5", eps("LayerNorm", 1e-5))
    probe("rmsnorm_eps_1e-5", eps("RMSNorm", 1e-5))

    def symmetric_window(m):
        w = m.generator.head.istft.window
        w.copy_(torch.hann_window(w.numel(), periodic=False))
    probe("symmetric_hann_window", symmetric_window)

    real_clip = torch.clip

    def no_clip(m):
        def clip(x, min=None, max=None):
            return x if max == 1e2 else real_clip(x, min=min, max=max)
        torch.clip = clip
    probe("no_exp_clip", no_clip, lambda: setattr(torch, "clip", real_clip))

    real_sdpa = F.scaled_dot_product_attention

    def causal(m):
        def sdpa(q, k, v, attn_mask=None, dropout_p=0, is_causal=False):
            return real_sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=True)
        F.scaled_dot_product_attention = sdpa
    probe("causal_attention", causal,
          lambda: setattr(F, "scaled_dot_product_attention", real_sdpa))
    return out


def snr_db(ref, x):
    ref = np.asarray(ref, np.float64)
    err = np.asarray(x, np.float64) - ref
    return float(10 * math.log10(np.sum(ref ** 2) / max(np.sum(err ** 2), 1e-300)))


def build(name, c, out_dir, CodecDecoderVocos, ResidualFSQ, versions, write_encoder_keys=True):
    torch.manual_seed(c["seed"])
    g = torch.Generator().manual_seed(c["seed"])
    model = Reference(CodecDecoderVocos, ResidualFSQ, c).eval()
    with torch.no_grad():
        randomize(model, c, g)
    n_codes = int(np.prod(c["levels"]))
    T = c["T"]
    codes = torch.randint(0, n_codes, (T,), generator=g, dtype=torch.int64)
    # The extremes of the codebook are always in: all digits 0 and all digits max.
    codes[0], codes[T - 1] = 0, n_codes - 1
    codes3 = codes.view(1, 1, T)

    wav = model(codes3)[0, 0].numpy().astype(np.float32)
    assert wav.shape == (c["hop"] * T,), wav.shape
    bb = model.backbone_out(codes3)[0].numpy().astype(np.float32)

    # float32 noise: the same model in float64.
    m64 = Reference(CodecDecoderVocos, ResidualFSQ, c).eval()
    m64.load_state_dict(model.state_dict())
    m64 = m64.double()
    wav64 = m64(codes3)[0, 0].numpy()
    # And the reference at another thread count, another summation order.
    nt = torch.get_num_threads()
    torch.set_num_threads(1)
    wav1 = model(codes3)[0, 0].numpy()
    torch.set_num_threads(nt)

    sens = sensitivity(model, codes3, wav)

    # Logmag statistics: how often the clip at 100 fires.
    with torch.no_grad():
        e = model.generator.quantizer.get_output_from_indices(codes3.transpose(1, 2))
        x = model.generator.backbone(model.fc_post_a(e))
        logmag = model.generator.head.out(x)[..., :c["hop"] * 2 + 1]
        clipped = float((logmag > math.log(100.0)).float().mean())

    os.makedirs(out_dir, exist_ok=True)
    sd = {}
    for k, v in model.state_dict().items():
        sd[k] = v.contiguous().float()
    if write_encoder_keys:
        # Keys of the encoder side of the real checkpoint (shapes shrunk): a
        # decoder loads none of them and must not mind them.
        ge = torch.Generator().manual_seed(99)
        for k, shape in [("CodecEnc.conv_blocks.0.weight_g", (4, 1, 1)),
                         ("CodecEnc.conv_blocks.0.weight_v", (4, 1, 7)),
                         ("SemanticEncoder_module.initial_conv.weight", (4, 4, 3)),
                         ("semantic_model.encoder.layers.0.ffn1.intermediate_dense.weight",
                          (8, 4)),
                         ("fc_prior.weight", (8, 8)), ("fc_prior.bias", (8,))]:
            sd[k] = torch.randn(shape, generator=ge)
    save_file(sd, os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})
    # The names of transformers' Xcodec2Config; hop = product of downsampling_ratios.
    cfg = {"model_type": "xcodec2", "hidden_size": c["hidden"],
           "num_hidden_layers": c["depth"], "num_attention_heads": c["heads"],
           "intermediate_size": 4 * c["hidden"], "quantization_dim": c["vq_dim"],
           "quantization_levels": c["levels"], "downsampling_ratios": c["ratios"],
           "sampling_rate": 16000}
    assert int(np.prod(c["ratios"])) == c["hop"]
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    codes.numpy().astype("<i4").tofile(os.path.join(out_dir, "codes.i32"))
    with open(os.path.join(out_dir, "codes.txt"), "w") as f:
        f.write(" ".join(str(int(v)) for v in codes) + "\n")
    wav.astype("<f4").tofile(os.path.join(out_dir, "wav.f32"))
    bb.astype("<f4").tofile(os.path.join(out_dir, "backbone.f32"))
    meta = {
        "name": name, "config": c, "torch": torch.__version__, "versions": versions,
        "n_codes": T, "samples": int(wav.shape[0]),
        "wav_max_abs": float(np.abs(wav).max()), "wav_rms": float(np.sqrt(np.mean(
            wav.astype(np.float64) ** 2))),
        "backbone_max_abs": float(np.abs(bb).max()),
        "logmag_fraction_clipped_at_100": clipped,
        "f32_vs_f64_max_abs": float(np.abs(wav - wav64).max()),
        "f32_vs_f64_snr_db": snr_db(wav64, wav),
        "threads1_vs_default_max_abs": float(np.abs(wav - wav1).max()),
        "sensitivity": sens,
    }
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(json.dumps(meta))
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.environ.get("XCODEC2_SRC"),
                    help="a checkout of zhenye234/X-Codec-2.0 (env XCODEC2_SRC)")
    ap.add_argument("--pkgs", default=os.environ.get("XCODEC2_PKGS"),
                    help="a pip --target dir with torchtune, vector-quantize-pytorch, "
                         "einops, einx (env XCODEC2_PKGS)")
    ap.add_argument("--full", metavar="OUTDIR",
                    help="write the full-size random decoder and its output here instead")
    ap.add_argument("--full-codes", type=int, default=FULL["T"],
                    help="number of codes for --full (default %(default)s)")
    a = ap.parse_args()
    if not a.src or not os.path.isfile(os.path.join(a.src, "vq", "codec_decoder_vocos.py")):
        sys.exit("--src must name a checkout of zhenye234/X-Codec-2.0")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    CodecDecoderVocos, ResidualFSQ, versions = import_reference(a.src, a.pkgs)
    if a.full:
        c = dict(FULL, T=a.full_codes)
        build("full", c, a.full, CodecDecoderVocos, ResidualFSQ, versions,
              write_encoder_keys=False)
        return
    for name, c in MODELS.items():
        build(name, c, os.path.join(OUT, name), CodecDecoderVocos, ResidualFSQ, versions)


if __name__ == "__main__":
    main()
