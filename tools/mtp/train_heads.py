#!/usr/bin/env python3
"""train_heads.py: trains multi-token prediction heads (man/mtp.5) on a frozen
target Llama model and writes them as mtp.safetensors.

The heads (Medusa style, sharing the target's lm_head): with h_t the target's
final hidden state of position t after the final RMSNorm, head k = 1..n
(stored as index i = k - 1) predicts x_{t+1+k}:

    z_k = lm_head(h_t + SiLU(W_k h_t + b_k))

so index i is trained with cross entropy against the token 2 + i places after
position t (the target itself predicts the next one). Optionally (--kl W) a
distillation term W * KL(p || q) is added, p being the target's own
distribution of that same token (its logits at position t + 1 + i, which see
the true tokens in between) and q the head's. Only W_k and b_k train; the
target, lm_head included, stays frozen.

Training data: a text file, one sequence per line, space-separated token ids,
the whole prompt and speech as the model sees them. --loss-from-token ID
restricts the loss to positions t at or after the first occurrence of ID in
the line (e.g. <|SPEECH_GENERATION_START|>), so every token predicted comes
after it; lines without ID are skipped. --self-generate N instead samples N
sequences from the target itself (self-distillation; written to
--write-data when given).

Usage:
    python3 tools/mtp/train_heads.py --model DIR (--data FILE | --self-generate N)
        [--heads 3] [--steps 500] [--batch 8] [--lr 1e-3] [--seed 0] [--threads 2]
        [--loss-from-token ID] [--kl 0] [--held-out 0.1] [--max-len 1024]
        [--rows B:E,...] [--init-std 0] [--dtype model|f32|f16|bf16]
        [--out DIR/mtp.safetensors]

--rows restricts the softmax to vocabulary ranges, as the decoder computes
the heads (llama_rows; for LLaSA the speech tokens and the end token): less
memory, and the heads spend nothing on tokens never asked for.

Prints the loss as it trains, then per-head top-1 accuracy on the held-out
lines (and the target's own next-token accuracy on the same positions, for
scale). Deterministic for a given seed, thread count and torch version.
Needs torch, transformers and safetensors (PyPI); CPU is enough for small
models, a GPU is used when --device cuda is given.
"""
import argparse
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import LlamaForCausalLM

MAX_HEADS = 16  # as lib/engine/mtp.h


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="HF LlamaForCausalLM directory")
    p.add_argument("--data", help="training sequences: one line of token ids each")
    p.add_argument("--self-generate", type=int, default=0, metavar="N",
                   help="sample N sequences from the target instead of --data")
    p.add_argument("--gen-len", type=int, default=64, help="--self-generate: tokens each")
    p.add_argument("--write-data", help="--self-generate: also write the sequences here")
    p.add_argument("--heads", type=int, default=3, help="number of heads n (1..16)")
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--batch", type=int, default=8, help="sequences per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--loss-from-token", type=int, default=None, metavar="ID")
    p.add_argument("--kl", type=float, default=0.0,
                   help="weight of the KL to the target's own shifted distribution")
    p.add_argument("--held-out", type=float, default=0.1,
                   help="fraction of lines kept for evaluation (at least 1 line)")
    p.add_argument("--max-len", type=int, default=1024, help="lines are cut to this")
    p.add_argument("--rows", metavar="B:E,...",
                   help="train and score over these vocabulary ranges only, as the decoder "
                        "asks for them (LLaSA: 128264:193800,128261:128262); tokens outside "
                        "are not predicted")
    p.add_argument("--init-std", type=float, default=0.0,
                   help="initial W std (0: heads start as copies of the target)")
    p.add_argument("--dtype", default="model", choices=["model", "f32", "f16", "bf16"],
                   help="dtype written (model: that of the checkpoint's embeddings)")
    p.add_argument("--compute-dtype", default="f32", choices=["f32", "bf16"],
                   help="dtype the frozen target runs in")
    p.add_argument("--device", default="cpu")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--out", help="output file (default: MODEL/mtp.safetensors)")
    a = p.parse_args()
    if not 1 <= a.heads <= MAX_HEADS:
        p.error(f"--heads must be in 1..{MAX_HEADS}")
    if (a.data is None) == (a.self_generate == 0):
        p.error("give one of --data and --self-generate")
    if a.steps < 0 or a.batch < 1 or a.lr <= 0 or a.kl < 0 or not 0 <= a.held_out < 1:
        p.error("bad --steps, --batch, --lr, --kl or --held-out")
    return a


DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
ST_DTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16"}


def checkpoint_dtype(d):
    """The dtype of model.embed_tokens.weight as stored (single file or shards)."""
    idx = os.path.join(d, "model.safetensors.index.json")
    name = "model.embed_tokens.weight"
    if os.path.exists(idx):
        with open(idx) as f:
            path = os.path.join(d, json.load(f)["weight_map"][name])
    else:
        path = os.path.join(d, "model.safetensors")
    with safe_open(path, "pt") as f:
        return f.get_slice(name).get_dtype()


def read_lines(path, vocab):
    seqs = []
    with open(path) as f:
        for no, line in enumerate(f, 1):
            ids = line.split()
            if not ids:
                continue
            try:
                seq = [int(x) for x in ids]
            except ValueError:
                sys.exit(f"train_heads: {path}: line {no}: not a list of token ids")
            bad = [x for x in seq if not 0 <= x < vocab]
            if bad:
                sys.exit(f"train_heads: {path}: line {no}: id {bad[0]} not in [0, {vocab})")
            seqs.append(seq)
    return seqs


@torch.no_grad()
def self_generate(model, n, length, vocab, seed, device):
    """n sequences sampled from the target (temperature 1) after a random
    first token: training data with the target's own statistics."""
    g = torch.Generator().manual_seed(seed + 1)
    seqs = []
    for _ in range(n):
        first = int(torch.randint(0, vocab, (1,), generator=g))
        ids = torch.tensor([[first]], device=device)
        past = None
        out = [first]
        for _ in range(length - 1):
            o = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = o.past_key_values
            p = torch.softmax(o.logits[0, -1].float(), -1).cpu()
            nxt = int(torch.multinomial(p, 1, generator=g))
            out.append(nxt)
            ids = torch.tensor([[nxt]], device=device)
        seqs.append(out)
    return seqs


class Heads(torch.nn.Module):
    def __init__(self, n, hidden, init_std, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.W = torch.nn.Parameter(init_std * torch.randn(n, hidden, hidden, generator=g))
        self.b = torch.nn.Parameter(torch.zeros(n, hidden))

    def forward(self, h):
        """h [B, T, H] -> the residual outputs [n, B, T, H] (what lm_head reads)."""
        a = torch.einsum("bth,noh->nbto", h, self.W) + self.b[:, None, None, :]
        return h[None] + F.silu(a)


def parse_rows(spec, vocab):
    """The vocabulary ids of --rows in order, or None for the whole vocabulary."""
    if spec is None:
        return None
    ids = []
    for part in spec.split(","):
        b, e = (int(x) for x in part.split(":"))
        if not 0 <= b < e <= vocab:
            sys.exit(f"train_heads: --rows: [{b}, {e}) not within the vocabulary of {vocab}")
        ids.extend(range(b, e))
    return torch.tensor(ids)


class Readout:
    """lm_head over the chosen rows: logits and the column of each token."""

    def __init__(self, model, rows, vocab, device):
        w = model.lm_head.weight.float()
        if rows is None:
            self.w, self.col = w, torch.arange(vocab, device=device)
            self.rows = None
        else:
            rows = rows.to(device)
            self.w, self.rows = w[rows], rows
            self.col = torch.full((vocab,), -1, dtype=torch.long, device=device)
            self.col[rows] = torch.arange(len(rows), device=device)

    def logits(self, u):
        return u @ self.w.T

    def select(self, full_logits):
        return full_logits if self.rows is None else full_logits[..., self.rows]


def loss_start(seq, marker):
    """First position t whose predictions count: at or after the marker."""
    if marker is None:
        return 0
    try:
        return seq.index(marker)
    except ValueError:
        return None


def batch_tensors(seqs, starts, device):
    T = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    start = torch.tensor(starts)
    for r, s in enumerate(seqs):
        ids[r, :len(s)] = torch.tensor(s)
        mask[r, :len(s)] = 1
    return ids.to(device), mask.to(device), start.to(device)


def head_targets(ids, mask, start, i):
    """Targets of index i at every position t: ids[t + 2 + i], and where they
    count (inside the line, t >= start)."""
    B, T = ids.shape
    off = 2 + i
    tgt = torch.zeros_like(ids)
    valid = torch.zeros_like(mask, dtype=torch.bool)
    if T > off:
        tgt[:, :T - off] = ids[:, off:]
        valid[:, :T - off] = mask[:, off:].bool()
    pos = torch.arange(T, device=ids.device)[None, :]
    return tgt, valid & (pos >= start[:, None])


def step_loss(model, heads, ro, ids, mask, start, kl_w):
    with torch.no_grad():
        out = model.model(input_ids=ids, attention_mask=mask)
        h = out.last_hidden_state.float()  # after the final norm: what lm_head reads
        teacher = ro.logits(h) if kl_w > 0 else None
    u = heads(h)
    total, terms = 0.0, []
    for i in range(u.shape[0]):
        tgt, valid = head_targets(ids, mask, start, i)
        valid = valid & (ro.col[tgt] >= 0)
        if not valid.any():
            terms.append(float("nan"))
            continue
        z = ro.logits(u[i][valid])
        ce = F.cross_entropy(z, ro.col[tgt[valid]])
        loss = ce
        if kl_w > 0:
            # The target's distribution of the same token: its logits at t + 1 + i.
            tl = torch.zeros_like(teacher)
            T = ids.shape[1]
            tl[:, :T - 1 - i] = teacher[:, 1 + i:]
            p = F.log_softmax(tl[valid], -1)
            q = F.log_softmax(z, -1)
            loss = loss + kl_w * F.kl_div(q, p, log_target=True, reduction="batchmean")
        total = total + loss
        terms.append(float(ce.detach()))
    return total / u.shape[0], terms


@torch.no_grad()
def evaluate(model, heads, ro, seqs, starts, batch, device):
    n = heads.W.shape[0]
    hit = [0] * n
    cnt = [0] * n
    t_hit = t_cnt = 0
    for k in range(0, len(seqs), batch):
        ids, mask, start = batch_tensors(seqs[k:k + batch], starts[k:k + batch], device)
        out = model.model(input_ids=ids, attention_mask=mask)
        h = out.last_hidden_state.float()
        u = heads(h)
        for i in range(n):
            tgt, valid = head_targets(ids, mask, start, i)
            valid = valid & (ro.col[tgt] >= 0)
            if valid.any():
                pred = ro.logits(u[i][valid]).argmax(-1)
                hit[i] += int((pred == ro.col[tgt[valid]]).sum())
                cnt[i] += int(valid.sum())
        # The target's own next token on the positions head 0 is scored on.
        _, valid = head_targets(ids, mask, start, 0)
        nxt = torch.zeros_like(ids)
        nxt[:, :-1] = ids[:, 1:]
        valid = valid & (ro.col[nxt] >= 0)
        if valid.any():
            pred = ro.logits(h[valid]).argmax(-1)
            t_hit += int((pred == ro.col[nxt[valid]]).sum())
            t_cnt += int(valid.sum())
    return hit, cnt, t_hit, t_cnt


def main():
    a = parse_args()
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.set_num_threads(a.threads)
    t0 = time.time()
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=DTYPES[a.compute_dtype],
                                             attn_implementation="eager").to(a.device)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    H, V = model.config.hidden_size, model.config.vocab_size

    if a.self_generate:
        seqs = self_generate(model, a.self_generate, a.gen_len, V, a.seed, a.device)
        if a.write_data:
            with open(a.write_data, "w") as f:
                for s in seqs:
                    f.write(" ".join(map(str, s)) + "\n")
    else:
        seqs = read_lines(a.data, V)
    seqs = [s[:a.max_len] for s in seqs]
    kept = [(s, loss_start(s, a.loss_from_token)) for s in seqs]
    skipped = sum(1 for _, st in kept if st is None)
    kept = [(s, st) for s, st in kept if st is not None and len(s) >= st + 3]
    if len(kept) < 2:
        sys.exit(f"train_heads: {len(kept)} usable lines (need 2; {skipped} without the "
                 "--loss-from-token id)")
    rng = random.Random(a.seed)
    rng.shuffle(kept)
    n_eval = max(1, int(round(a.held_out * len(kept))))
    ev, tr = kept[:n_eval], kept[n_eval:]
    print(f"train_heads: {len(tr)} training lines, {len(ev)} held out, {skipped} skipped; "
          f"hidden {H}, vocab {V}, {a.heads} heads", flush=True)

    ro = Readout(model, parse_rows(a.rows, V), V, a.device)
    heads = Heads(a.heads, H, a.init_std, a.seed).to(a.device)
    opt = torch.optim.AdamW(heads.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    g = random.Random(a.seed + 2)
    for step in range(1, a.steps + 1):
        pick = [tr[g.randrange(len(tr))] for _ in range(a.batch)]
        ids, mask, start = batch_tensors([s for s, _ in pick], [st for _, st in pick],
                                         a.device)
        loss, terms = step_loss(model, heads, ro, ids, mask, start, a.kl)
        opt.zero_grad()
        if torch.is_tensor(loss):
            loss.backward()
            opt.step()
        if step % a.log_every == 0 or step == a.steps:
            ce = " ".join(f"{x:.3f}" for x in terms)
            print(f"step {step}: loss {float(loss.detach()):.4f} (cross entropy per head: {ce})",
                  flush=True)

    hit, cnt, t_hit, t_cnt = evaluate(model, heads, ro, [s for s, _ in ev], [st for _, st in ev],
                                      a.batch, a.device)
    print(f"held-out top-1 accuracy ({len(ev)} lines):")
    print(f"  target +1: {t_hit / max(t_cnt, 1):.4f} ({t_hit}/{t_cnt})")
    for i in range(a.heads):
        print(f"  mtp.{i} +{i + 2}: {hit[i] / max(cnt[i], 1):.4f} ({hit[i]}/{cnt[i]})")

    dt = a.dtype if a.dtype != "model" else ST_DTYPES.get(checkpoint_dtype(a.model), "f32")
    out = a.out or os.path.join(a.model, "mtp.safetensors")
    tensors = {}
    for i in range(a.heads):
        tensors[f"mtp.{i}.weight"] = heads.W[i].detach().cpu().to(DTYPES[dt]).contiguous()
        tensors[f"mtp.{i}.bias"] = heads.b[i].detach().cpu().to(DTYPES[dt]).contiguous()
    tmp = out + ".tmp"
    save_file(tensors, tmp, metadata={"mtp_heads": str(a.heads), "format": "pcg-mtp"})
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)
    print(f"train_heads: wrote {out} ({dt}) in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
