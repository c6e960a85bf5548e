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
the whole prompt and speech as the model sees them; or JSON lines as
tools/draft/distill_draft.py --save-data writes them (`ids`, and `loss`: the
positions whose next token the target generated; the target's own samples, so
that the heads learn the distribution they are checked against). Head i at
position t is trained only where every token from t + 1 to t + 2 + i is one the
target drew (in --rows, and generated where `loss` says so): the decoder stops a
round of MTP drafts short of a forced token, since heads computed before it do
not see it. --loss-from-token ID
restricts the loss to positions t at or after the first occurrence of ID in
the line (e.g. <|SPEECH_GENERATION_START|>), so every token predicted comes
after it; lines without ID are skipped. --self-generate N instead samples N
sequences from the target itself (self-distillation; written to
--write-data when given).

Usage:
    python3 tools/mtp/train_heads.py --model DIR (--data FILE | --self-generate N)
        [--heads 3] [--steps 500] [--batch 8] [--lr 1e-3] [--seed 0] [--threads 2]
        [--loss-from-token ID] [--kl 0] [--ce 1] [--held-out 0.1] [--max-len 1024]
        [--warmup 0] [--cosine] [--eval-every 0] [--temp 0.8] [--top-k 50]
        [--rows B:E,...] [--init FILE | --init-std 0] [--dtype model|f32|f16|bf16]
        [--out DIR/mtp.safetensors]

--rows restricts the softmax to vocabulary ranges, as the decoder computes
the heads (llama_rows; for LLaSA the speech tokens and the end token): less
memory, and the heads spend nothing on tokens never asked for.

The frozen target's hidden states are computed once and kept (--cache-mb), so
a step costs the heads and lm_head's rows alone. --warmup and --cosine shape the
learning rate (linear warm-up, cosine decay to a tenth).

Prints the loss as it trains; every --eval-every steps (and at the end) the
held-out expected acceptance of each head, sum_x min(p, q) at the sampling
--temp and --top-k (p the target's distribution of the token, q the head's),
and the mean acceptance length it implies for a round of all the heads' drafts,
1 + sum_k prod_{j<=k} a_j (the curve of MAL against steps); at the end per-head
top-1 accuracy on the held-out lines (and the target's own next-token accuracy
on the same positions, for scale). Deterministic for a given seed, thread count and torch version.
Needs torch, transformers and safetensors (PyPI); CPU is enough for small
models, a GPU is used when --device cuda is given.
"""
import argparse
import json
import math
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
    p.add_argument("--data", help="training sequences: one line of token ids each, or JSON "
                        "lines with ids and loss (distill_draft.py --save-data)")
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
    p.add_argument("--ce", type=float, default=1.0,
                   help="weight of the cross entropy against the token in the line")
    p.add_argument("--warmup", type=int, default=0, help="steps of linear learning-rate warm-up")
    p.add_argument("--cosine", action="store_true",
                   help="cosine decay of the learning rate to a tenth over the steps")
    p.add_argument("--eval-every", type=int, default=0,
                   help="held-out expected acceptance every N steps (0: at the end only)")
    p.add_argument("--temp", type=float, default=0.8, help="sampling temperature of the "
                   "expected acceptance (the pipeline's default)")
    p.add_argument("--top-k", type=int, default=50, help="sampling top-k of the same (0: none)")
    p.add_argument("--cache-mb", type=int, default=4096,
                   help="keep the target's hidden states of every line when they fit")
    p.add_argument("--held-out", type=float, default=0.1,
                   help="fraction of lines kept for evaluation (at least 1 line)")
    p.add_argument("--max-len", type=int, default=1024, help="lines are cut to this")
    p.add_argument("--rows", metavar="B:E,...",
                   help="train and score over these vocabulary ranges only, as the decoder "
                        "asks for them (LLaSA: 128264:193800,128261:128262); tokens outside "
                        "are not predicted")
    p.add_argument("--init", metavar="FILE",
                   help="start from these heads (an mtp.safetensors with --heads heads)")
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
    if a.steps < 0 or a.batch < 1 or a.lr <= 0 or a.kl < 0 or a.ce < 0 or a.kl + a.ce == 0 \
            or not 0 <= a.held_out < 1 or a.temp <= 0 or a.top_k < 0:
        p.error("bad --steps, --batch, --lr, --kl, --ce, --held-out, --temp or --top-k")
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
    """The lines of --data: (ids, gen), gen the set of positions whose next
    token was generated (None for a line of ids: every position)."""
    seqs = []
    with open(path) as f:
        for no, line in enumerate(f, 1):
            if line.lstrip().startswith("{"):
                try:
                    x = json.loads(line)
                    seq = [int(t) for t in x["ids"]]
                    gen = set(int(t) for t in x["loss"])
                except (ValueError, KeyError, TypeError):
                    sys.exit(f"train_heads: {path}: line {no}: not a JSON object with "
                             "lists ids and loss")
            else:
                ids = line.split()
                if not ids:
                    continue
                try:
                    seq = [int(x) for x in ids]
                except ValueError:
                    sys.exit(f"train_heads: {path}: line {no}: not a list of token ids")
                gen = None
            bad = [x for x in seq if not 0 <= x < vocab]
            if bad:
                sys.exit(f"train_heads: {path}: line {no}: id {bad[0]} not in [0, {vocab})")
            seqs.append((seq, gen))
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

    def one(self, i, h):
        """Head i alone: h [N, H] -> [N, H]."""
        return h + F.silu(h @ self.W[i].T + self.b[i])


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


@torch.no_grad()
def hidden_states(model, seqs, device, keep_dtype):
    """The target's final normed hidden state of every position of every line,
    one tensor [sum of lengths, H] (what lm_head reads), and each line's offset."""
    parts, offs, o = [], [], 0
    for seq, _, _ in seqs:
        out = model.model(input_ids=torch.tensor([seq], device=device))
        parts.append(out.last_hidden_state[0].to(keep_dtype).cpu())
        offs.append(o)
        o += len(seq)
    return torch.cat(parts), offs


def head_examples(seqs, offs, ro, n_heads):
    """For head i: the rows of the hidden states it reads (t), the column of
    the token it predicts (t + 2 + i) and the row whose target logits give that
    token's distribution (t + 1 + i). A position counts where t >= the line's
    start and every token from t + 1 to t + 2 + i was drawn by the target (in
    the rows, and generated where the line says)."""
    src = [[] for _ in range(n_heads)]
    col = [[] for _ in range(n_heads)]
    for (seq, gen, start), o in zip(seqs, offs):
        ids = torch.tensor(seq)
        c = ro.col[ids]
        ok = c >= 0
        if gen is not None:
            g = torch.zeros(len(seq), dtype=torch.bool)
            g[[u + 1 for u in gen if 0 <= u + 1 < len(seq)]] = True
            ok &= g
        # bad[u] prefix sums: the window t+1 .. t+2+i holds no bad token
        pre = torch.zeros(len(seq) + 1, dtype=torch.long)
        pre[1:] = torch.cumsum((~ok).long(), 0)
        for i in range(n_heads):
            last = len(seq) - 3 - i  # t + 2 + i <= len - 1
            if last < start:
                continue
            t = torch.arange(start, last + 1)
            good = (pre[t + 3 + i] - pre[t + 1]) == 0
            t = t[good]
            src[i].append(t + o)
            col[i].append(c[t + 2 + i])
    cat = lambda xs: torch.cat(xs) if xs else torch.zeros(0, dtype=torch.long)  # noqa: E731
    return [cat(x) for x in src], [cat(x) for x in col]


def sampling_log_probs(z, temp, top_k):
    """log p of the sampler: logits / temp, all but the top_k set to -inf."""
    z = z / temp
    if 0 < top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    return F.log_softmax(z, -1)


def head_loss(heads, ro, H, src, col, i, a, device):
    """The loss of head i on the examples src/col (indices into H)."""
    h = H[src].to(device).float()
    z = ro.logits(heads.one(i, h))
    loss = a.ce * F.cross_entropy(z, col.to(device)) if a.ce > 0 else 0.0
    if a.kl > 0:
        with torch.no_grad():
            p = F.log_softmax(ro.logits(H[src + 1 + i].to(device).float()), -1)
        loss = loss + a.kl * F.kl_div(F.log_softmax(z, -1), p, log_target=True,
                                      reduction="batchmean")
    return loss


@torch.no_grad()
def evaluate(heads, ro, H, src, col, a, device, chunk=4096):
    """Per head: expected acceptance sum_x min(p, q) at the sampler's settings,
    top-1 accuracy and count; and the target's own next-token accuracy on the
    positions of head 0."""
    acc, top1, cnt = [], [], []
    for i in range(len(src)):
        s_a = s_t = 0.0
        for k in range(0, len(src[i]), chunk):
            sx, cx = src[i][k:k + chunk], col[i][k:k + chunk].to(device)
            zq = ro.logits(heads.one(i, H[sx].to(device).float()))
            zp = ro.logits(H[sx + 1 + i].to(device).float())
            q = sampling_log_probs(zq, a.temp, a.top_k).exp()
            p = sampling_log_probs(zp, a.temp, a.top_k).exp()
            s_a += float(torch.minimum(p, q).sum())
            s_t += float((zq.argmax(-1) == cx).sum())
        n = len(src[i])
        acc.append(s_a / max(n, 1))
        top1.append(s_t / max(n, 1))
        cnt.append(n)
    t_hit = 0
    for k in range(0, len(src[0]), chunk):
        sx = src[0][k:k + chunk]
        # the target at t + 1 predicts t + 2, the token head 0 predicts from t
        z = ro.logits(H[sx + 1].to(device).float())
        t_hit += int((z.argmax(-1) == col[0][k:k + chunk].to(device)).sum())
    return acc, top1, cnt, t_hit / max(len(src[0]), 1)


def mal(acc):
    """Mean acceptance length of a round drafting with every head:
    1 + sum_k prod_{j<=k} a_j (the heads' acceptances taken as independent)."""
    m, run = 1.0, 1.0
    for x in acc:
        run *= x
        m += run
    return m


def report_eval(step, ev):
    acc, _, _, _ = ev
    print(f"step {step}: held-out expected acceptance " +
          " ".join(f"{x:.3f}" for x in acc) + f"; mean acceptance length {mal(acc):.3f}",
          flush=True)


def lr_at(a, step):
    f = 1.0
    if a.warmup and step <= a.warmup:
        f = step / a.warmup
    elif a.cosine:
        r = (step - a.warmup) / max(1, a.steps - a.warmup)
        f = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * r))
    return a.lr * f


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
        seqs = [(s, None) for s in seqs]
    else:
        seqs = read_lines(a.data, V)
    seqs = [(s[:a.max_len], g) for s, g in seqs]
    kept = [(s, g, loss_start(s, a.loss_from_token)) for s, g in seqs]
    skipped = sum(1 for _, _, st in kept if st is None)
    kept = [(s, g, st) for s, g, st in kept if st is not None and len(s) >= st + 3]
    if len(kept) < 2:
        sys.exit(f"train_heads: {len(kept)} usable lines (need 2; {skipped} without the "
                 "--loss-from-token id)")
    rng = random.Random(a.seed)
    rng.shuffle(kept)
    n_eval = max(1, int(round(a.held_out * len(kept))))
    ev, tr = kept[:n_eval], kept[n_eval:]
    n_pos = sum(len(s) for s, _, _ in kept)
    keep = torch.float32 if n_pos * H * 4 <= a.cache_mb << 20 else torch.bfloat16
    print(f"train_heads: {len(tr)} training lines, {len(ev)} held out, {skipped} skipped; "
          f"hidden {H}, vocab {V}, {a.heads} heads", flush=True)

    ro = Readout(model, parse_rows(a.rows, V), V, a.device)
    Htr, otr = hidden_states(model, tr, a.device, keep)
    Hev, oev = hidden_states(model, ev, a.device, keep)
    str_, ctr = head_examples(tr, otr, ro, a.heads)
    sev, cev = head_examples(ev, oev, ro, a.heads)
    if len(str_[0]) == 0 or len(sev[0]) == 0:
        sys.exit("train_heads: no position to train or score head 0 on")
    per_step = max(1, round(a.batch * len(str_[0]) / max(1, len(tr))))
    print(f"train_heads: target's hidden states of {n_pos} positions in "
          f"{time.time() - t0:.1f} s; head 0 has {len(str_[0])} training positions, "
          f"{len(sev[0])} held out; {per_step} positions a head a step", flush=True)

    heads = Heads(a.heads, H, a.init_std, a.seed).to(a.device)
    if a.init:
        with safe_open(a.init, "pt") as f, torch.no_grad():
            have = int(f.metadata().get("mtp_heads", 0)) if f.metadata() else 0
            if have != a.heads:
                sys.exit(f"train_heads: --init {a.init}: {have} heads, --heads is {a.heads}")
            for i in range(a.heads):
                heads.W[i].copy_(f.get_tensor(f"mtp.{i}.weight").float())
                heads.b[i].copy_(f.get_tensor(f"mtp.{i}.bias").float())
    opt = torch.optim.AdamW(heads.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    g = torch.Generator().manual_seed(a.seed + 2)
    if a.eval_every:
        report_eval(0, evaluate(heads, ro, Hev, sev, cev, a, a.device))
    for step in range(1, a.steps + 1):
        for grp in opt.param_groups:
            grp["lr"] = lr_at(a, step)
        total, terms = 0.0, []
        for i in range(a.heads):
            if len(str_[i]) == 0:
                terms.append(float("nan"))
                continue
            pick = torch.randint(0, len(str_[i]), (per_step,), generator=g)
            loss = head_loss(heads, ro, Htr, str_[i][pick], ctr[i][pick], i, a, a.device)
            total = total + loss
            terms.append(float(loss.detach()))
        total = total / a.heads
        opt.zero_grad()
        total.backward()
        opt.step()
        if step % a.log_every == 0 or step == a.steps:
            print(f"step {step}: loss {float(total.detach()):.4f} (per head: " +
                  " ".join(f"{x:.3f}" for x in terms) + ")", flush=True)
        if a.eval_every and step % a.eval_every == 0 and step != a.steps:
            report_eval(step, evaluate(heads, ro, Hev, sev, cev, a, a.device))

    e = evaluate(heads, ro, Hev, sev, cev, a, a.device)
    report_eval(a.steps, e)
    acc, top1, cnt, t1 = e
    print(f"held-out top-1 accuracy ({len(ev)} lines):")
    print(f"  target +1: {t1:.4f} ({len(sev[0])} positions)")
    for i in range(a.heads):
        print(f"  mtp.{i} +{i + 2}: {top1[i]:.4f} ({cnt[i]} positions; expected acceptance "
              f"{acc[i]:.4f})")

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
