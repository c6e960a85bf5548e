#!/usr/bin/env python3
"""distill_draft.py: makes a draft model for any LLaSA-layout target: the
target's first k decoder layers, trained to follow the target (the PCG
paper's recipe), written as a Hugging Face model directory that pcg-up
takes with --draft, and measured in the project's own pipeline.

1. Data: the target's own generations. For every line of --texts (and
   --samples seeds each), the C pipeline (pcg-up with the target alone,
   pcg-synth --policy none --tokens) samples the speech; the sequence is the
   LLaSA prompt (pcg-tokenize --llasa-prompt) followed by the speech tokens
   and the end token. For a phoneme voice (a voice.json beside the target,
   as models/demo) the prompt text is the speaker token and espeak-ng's
   phoneme tokens, and each phoneme token is put right before the frame
   where espeak-ng starts it (pcg-phonemize): the sequence the verifier
   builds, token for token (lib/speculate/speculate.c).
2. Student: a LlamaForCausalLM with the target's config but k layers,
   initialised with the target's embeddings, layers 0..k-1, final norm and
   lm_head (tied or not as the target is).
3. Training: KL(target || draft) of the next-token distributions over the
   rows the verifier asks for (the speech tokens and the end token; the
   speech tokens alone for a phoneme voice, whose end is never drawn), at
   every position of the teacher-forced sequences whose next token was
   generated (not the prompt, not a forced phoneme). All of the student's
   weights train (AdamW, warm-up, cosine decay).
4. Output: OUT/config.json (num_hidden_layers = k), OUT/model.safetensors
   (in the target's dtype), the target's tokenizer files, OUT/distill.json
   (what was done and measured).
5. Held-out acceptance (--heldout): pcg-up --target TARGET --draft OUT, then
   pcg-synth --policy sd / pcg over the held-out texts with fixed seeds,
   summing the rounds, drafted and accepted tokens of every utterance; the
   same for each --compare draft (and --eval-init: the untrained k layers,
   pcg-up --draft-layers), on the same texts, speakers and seeds.

Texts: one per line; a line "A<TAB>SPEAKER<TAB>TEXT" (as
bench/table1-sentences.tsv) or "SPEAKER<TAB>TEXT" gives the speaker of a
phoneme voice, else line i is spoken by speaker i mod the voice's speakers.

Usage:
    python3 tools/draft/distill_draft.py --target DIR --texts FILE --out DIR
        [--layers 1] [--samples 1] [--epochs 10 | --steps N] [--heldout FILE]
        [--compare DIR ...] [--eval-init] [--policies sd,pcg] [--device cpu|cuda]

Needs torch, transformers and safetensors (make draft-deps) and the C
programs (make); see tools/draft/README.md.
"""
import argparse
import concurrent.futures as cf
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STATS = re.compile(r"rounds (\d+), drafted (\d+), accepted (\d+), acceptance rate ([0-9.]+), "
                   r"mean acceptance length ([0-9.]+)")
TRIES = 3      # tries of a pcg-synth request in one pipeline (5 and 10 s apart)
RESTARTS = 2   # fresh pipelines for the requests that still failed
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "added_tokens.json", "generation_config.json"]


def die(msg):
    sys.exit("distill_draft: " + msg)


def log(msg):
    print(msg, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, help="the target: a Hugging Face Llama directory")
    p.add_argument("--out", required=True, help="the draft's directory (written)")
    p.add_argument("--texts", help="training texts, one per line")
    p.add_argument("--layers", type=int, default=1, help="k: the draft's decoder layers")
    # data
    p.add_argument("--samples", type=int, default=1, help="generations per text (other seeds)")
    p.add_argument("--max-texts", type=int, default=0, help="use the first N texts (0: all)")
    p.add_argument("--max-tokens", type=int, default=1500,
                   help="speech tokens per generation at most (50 a second)")
    p.add_argument("--temp", type=float, default=0.8, help="sampling temperature (generation "
                   "and the held-out measurement; the pipeline's default)")
    p.add_argument("--top-k", type=int, default=50, help="sampling top-k (as --temp)")
    p.add_argument("--jobs", type=int, default=4, help="pcg-synth requests in flight at once")
    p.add_argument("--data", help="read the sequences from this file (JSON lines) instead of "
                   "generating them")
    p.add_argument("--save-data", help="write the generated sequences here (JSON lines)")
    p.add_argument("--generate-only", action="store_true",
                   help="stop once the sequences are written to --save-data (data for "
                        "tools/mtp/train_heads.py, say)")
    p.add_argument("--synth-timeout-ms", type=int, default=60000,
                   help="pcg-synth's --timeout-ms (a request is tried 3 times, in up to 3 "
                   "pipelines)")
    p.add_argument("--pcg-up-args", default="",
                   help="more pcg-up arguments, e.g. '--device cuda' (one string)")
    # training
    p.add_argument("--epochs", type=float, default=10.0)
    p.add_argument("--steps", type=int, default=0, help="optimizer steps (0: from --epochs)")
    p.add_argument("--batch-tokens", type=int, default=1024,
                   help="tokens per batch (padded; sequences of similar length together)")
    p.add_argument("--lr", type=float, default=0.0,
                   help="peak learning rate (default 4e-3 x 256 / hidden size: 4e-3 for the "
                   "demo voice, 5e-4 for LLaSA-1B)")
    p.add_argument("--warmup", type=float, default=0.05, help="warm-up, a fraction of the steps")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--freeze-embeddings", action="store_true",
                   help="keep the target's embeddings and lm_head; train the layers and the "
                   "final norm only (less memory; less overfitting on little data)")
    p.add_argument("--kd-temp", type=float, default=2.0,
                   help="temperature of both distributions in the KL")
    p.add_argument("--val", type=float, default=0.05,
                   help="fraction of the sequences kept out of training for the "
                   "teacher-forced check (0: none)")
    p.add_argument("--cache-mb", type=int, default=2048,
                   help="keep the teacher's logits (f16) when they fit in this many MB, "
                   "so that the teacher runs once per sequence, not at every step")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:N")
    p.add_argument("--bf16", action="store_true",
                   help="run the teacher in bf16 and the student under bf16 autocast "
                   "(default on cuda)")
    p.add_argument("--log-every", type=int, default=25)
    # measurement
    p.add_argument("--heldout", help="held-out texts to measure acceptance on")
    p.add_argument("--max-heldout", type=int, default=0, help="use the first N (0: all)")
    p.add_argument("--compare", action="append", default=[],
                   help="another draft directory measured on the same texts and seeds "
                   "(repeatable; e.g. the draft shipped with the target)")
    p.add_argument("--eval-init", action="store_true",
                   help="also measure the untrained initialisation (pcg-up --draft-layers)")
    p.add_argument("--eval-only", action="store_true",
                   help="measure the draft already in --out; no generation or training")
    p.add_argument("--policies", default="sd,pcg")
    p.add_argument("--eval-seeds", default="1", help="seeds of the measurement, e.g. 1,2,3")
    p.add_argument("--lookahead", type=int, default=3)
    p.add_argument("--asg", help="the ASG for pcg (default: TARGET/asg, else one built by "
                   "asg-build --theta 0.4 into OUT/asg)")
    p.add_argument("--report", help="also write the summary (JSON) here")
    a = p.parse_args()
    if a.layers < 1:
        p.error("--layers must be at least 1")
    if not a.eval_only and not (a.texts or a.data):
        p.error("give --texts (or --data), or --eval-only")
    if a.eval_only and not a.heldout:
        p.error("--eval-only needs --heldout")
    if a.generate_only and not (a.save_data and a.texts):
        p.error("--generate-only needs --texts and --save-data")
    return a


# ---------------------------------------------------------------- the vocabulary

class Vocab:
    """Ids of the tokens the tools need, from tokenizer.json."""

    def __init__(self, model_dir):
        path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.exists(path):
            die(f"{model_dir}: no tokenizer.json")
        with open(path) as f:
            t = json.load(f)
        self.id_of = dict(t.get("model", {}).get("vocab", {}))
        for x in t.get("added_tokens", []):
            self.id_of[x["content"]] = x["id"]
        first = self.id_of.get("<|s_0|>")
        if first is None:
            die(f"{path}: no <|s_0|>: not a LLaSA vocabulary")
        n = 0
        while self.id_of.get(f"<|s_{n}|>") == first + n:
            n += 1
        self.speech_first, self.speech_count = first, n
        self.end_id = self.id_of.get("<|SPEECH_GENERATION_END|>")
        if self.end_id is None:
            die(f"{path}: no <|SPEECH_GENERATION_END|>")


def read_voice(target):
    path = os.path.join(target, "voice.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        v = json.load(f)
    if v.get("frontend") != "espeak-ng":
        die(f"{path}: front end {v.get('frontend')!r}: only espeak-ng phoneme voices are known")
    v["path"] = path
    return v


def read_texts(path, n_speakers, limit):
    """[(text, speaker)] of a text file (see the module's doc)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            text, spk = parts[-1].strip(), None
            if len(parts) >= 2 and parts[-2].strip().lstrip("-").isdigit():
                spk = int(parts[-2])
            if spk is None or n_speakers == 0:
                spk = len(out) % n_speakers if n_speakers else 0
            elif not 0 <= spk < n_speakers:
                die(f"{path}: speaker {spk} not in [0, {n_speakers})")
            out.append((text, spk))
    if limit:
        out = out[:limit]
    if not out:
        die(f"{path}: no texts")
    return out


# ---------------------------------------------------------------- the C pipeline

def tool_env():
    env = dict(os.environ)
    paths = [os.path.join(ROOT, "bin"), os.path.join(ROOT, "scripts")]
    env["PATH"] = ":".join(p for p in paths if os.path.isdir(p)) + ":" + env.get("PATH", "")
    return env


def run(cmd, env, what):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        die(f"{what} failed ({' '.join(shlex.quote(c) for c in cmd)}):\n{r.stderr.strip()}")
    return r.stdout


class Pipeline:
    """pcg-up in a private runtime directory; pcg-down on exit."""

    def __init__(self, target, draft_args, extra, asg=None):
        self.rt = tempfile.mkdtemp(prefix="pcg-draft-rt.")
        self.env = tool_env()
        self.env["PCG_RUNTIME_DIR"] = self.rt
        self.cmd = ["pcg-up", "--target", target] + draft_args + shlex.split(extra)
        if asg:
            self.cmd += ["--asg", asg]

    def __enter__(self):
        r = subprocess.run(self.cmd, capture_output=True, text=True, env=self.env)
        if r.returncode != 0:
            self.__exit__()
            die(f"pcg-up failed ({' '.join(self.cmd)}):\n{r.stderr.strip()}\n{r.stdout.strip()}")
        return self

    def __exit__(self, *exc):
        subprocess.run(["pcg-down"], capture_output=True, env=self.env)
        shutil.rmtree(self.rt, ignore_errors=True)

    def synth(self, text, speaker, seed, policy, a):
        cmd = ["pcg-synth", "--policy", policy, "--seed", str(seed), "--speaker", str(speaker),
               "--temp", repr(a.temp), "--top-k", str(a.top_k), "--max-tokens",
               str(a.max_tokens), "--lookahead", str(a.lookahead), "--timeout-ms",
               str(a.synth_timeout_ms), "--tokens", "--", text]
        for attempt in range(1, TRIES + 1):
            r = subprocess.run(cmd, capture_output=True, text=True, env=self.env)
            if r.returncode == 0:
                break
            # The same seed gives the same tokens: a request the pipeline
            # dropped is simply asked again, a little later.
            log(f"pcg-synth failed (try {attempt} of {TRIES}, seed {seed}): {r.stderr.strip()}")
            if attempt < TRIES:
                time.sleep(5 * attempt)
        else:
            return None  # run_jobs brings up a fresh pipeline for it
        # the statistics come on standard error, the tokens on standard output
        m = STATS.search(r.stderr)
        if m is None:
            die(f"pcg-synth printed no statistics for {text!r}:\n{r.stderr}")
        line = r.stdout.strip()
        toks = [int(x) for x in line.split()] if re.fullmatch(r"[0-9 ]+", line) else []
        return {"rounds": int(m.group(1)), "drafted": int(m.group(2)),
                "accepted": int(m.group(3))}, toks


def run_jobs(a, draft_args, asg, jobs, fn):
    """fn(pipeline, job) for every job, --jobs at a time, in one pipeline;
    the jobs whose requests kept failing (fn returned None) go again to a
    fresh pipeline, up to RESTARTS times (a pipeline that went bad: see
    README.md). Returns the results in the order of the jobs."""
    out = [None] * len(jobs)
    todo = list(range(len(jobs)))
    for restart in range(RESTARTS + 1):
        if restart:
            log(f"{len(todo)} requests failed: again in a fresh pipeline ({restart} of "
                f"{RESTARTS})")
        with Pipeline(a.target, draft_args, a.pcg_up_args, asg) as pl:
            with cf.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
                for k, r in zip(todo, ex.map(lambda k: fn(pl, jobs[k]), todo)):
                    out[k] = r
        todo = [k for k in todo if out[k] is None]
        if not todo:
            return out
    die(f"{len(todo)} requests failed in {RESTARTS + 1} pipelines")


# ---------------------------------------------------------------- the sequences

def phonemes(voice, text, speaker, env):
    """[(frame, name)] and the number of frames, as the verifier gets them."""
    out = run(["pcg-phonemize", "--voice-file", voice["path"], "--speaker", str(speaker), "--",
               text], env, "pcg-phonemize")
    lines = out.rstrip("\n").split("\n")
    head = lines[0].split()
    if head[:2] != ["#", "frames"]:
        die(f"pcg-phonemize: unexpected output {lines[0]!r}")
    ph = []
    for l in lines[1:]:
        f, name = l.split("\t")
        ph.append((int(f), name))
    return ph, int(head[2])


def make_sequence(a, vocab, voice, tok_path, text, speaker, speech, env):
    """(ids, loss positions): the whole context the target saw, and the
    positions whose next token it generated."""
    if voice is None:
        prompt = run(["pcg-tokenize", "--tokenizer", tok_path, "--llasa-prompt", "--text", text],
                     env, "pcg-tokenize")
        ids = [int(x) for x in prompt.split()]
        loss = []
        for c in speech:
            loss.append(len(ids) - 1)
            ids.append(c)
        if len(speech) < a.max_tokens:  # it stopped by drawing the end token
            loss.append(len(ids) - 1)
            ids.append(vocab.end_id)
        return ids, loss
    ph, frames = phonemes(voice, text, speaker, env)
    if len(speech) != frames:
        die(f"{text!r}: {len(speech)} speech tokens but espeak-ng says {frames} frames")
    unk = vocab.id_of["<|p__|>"]
    names = ["<|p_%s|>" % n if "<|p_%s|>" % n in vocab.id_of else "<|p__|>" for _, n in ph]
    ptext = "<|spk_%d|>" % speaker + "".join(names)
    prompt = run(["pcg-tokenize", "--tokenizer", tok_path, "--llasa-prompt", "--text", ptext],
                 env, "pcg-tokenize")
    ids = [int(x) for x in prompt.split()]
    forced = [vocab.id_of.get(n, unk) for n in names]
    # voice.json's next_phoneme: each phoneme's token is followed by <|n_Y|>,
    # Y the phoneme after it (the last one's: <|n__|>), as the verifier does
    nxt = None
    if voice.get("next_phoneme"):
        unk_n = vocab.id_of["<|n__|>"]
        nxt = [vocab.id_of.get("<|n_%s|>" % (ph[k + 1][1] if k + 1 < len(ph) else "_"), unk_n)
               for k in range(len(ph))]
    loss, j = [], 0
    for f, c in enumerate(speech):  # as spec_round: phonemes due at this frame go first
        while j < len(ph) and ph[j][0] <= f:
            ids.append(forced[j])
            if nxt is not None:
                ids.append(nxt[j])
            j += 1
        loss.append(len(ids) - 1)
        ids.append(c)
    return ids, loss


def generate(a, vocab, voice, items):
    env = tool_env()
    tok_path = os.path.join(a.target, "tokenizer.json")
    jobs = [(i, s, text, spk) for s in range(a.samples) for i, (text, spk) in enumerate(items)]
    t0 = time.time()
    log(f"generating {len(jobs)} sequences ({len(items)} texts x {a.samples}) with the target "
        f"alone (temperature {a.temp}, top-k {a.top_k}) ...")
    done = [0]

    def one(pl, job):
        i, s, text, spk = job
        seed = (a.seed * 1000003 + s * 100003 + i + 1) % 2147483647
        r = pl.synth(text, spk, seed, "none", a)
        if r is None:
            return None
        ids, loss = make_sequence(a, vocab, voice, tok_path, text, spk, r[1], env)
        done[0] += 1
        if done[0] % 50 == 0:
            log(f"  {done[0]}/{len(jobs)} ({time.time() - t0:.0f} s)")
        return {"text": text, "speaker": spk, "seed": seed, "ids": ids, "loss": loss}
    seqs = run_jobs(a, ["--draft-layers", "0"], None, jobs, one)
    n_tok = sum(len(x["loss"]) for x in seqs)
    log(f"generated {len(seqs)} sequences, {n_tok} generated tokens, in {time.time() - t0:.1f} s")
    if a.save_data:
        tmp = a.save_data + ".tmp"
        with open(tmp, "w") as f:
            for x in seqs:
                f.write(json.dumps(x) + "\n")
        os.replace(tmp, a.save_data)
    return seqs, time.time() - t0


# ---------------------------------------------------------------- the student

def target_tensors(target):
    """{name: (file, dtype)} of the target's checkpoint (single file or shards)."""
    from safetensors import safe_open
    idx = os.path.join(target, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        files = sorted(set(wm.values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        with safe_open(os.path.join(target, fn), "pt") as f:
            for k in f.keys():
                out[k] = (fn, f.get_slice(k).get_dtype())
    return out


def load_student(a, cfg_json, tensors, torch):
    """The target's config with k layers, and its weights for them."""
    from safetensors import safe_open
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = dict(cfg_json)
    n = cfg.get("num_hidden_layers")
    if not isinstance(n, int) or not 1 <= a.layers <= n:
        die(f"--layers {a.layers}: the target has {n} layers")
    cfg["num_hidden_layers"] = a.layers
    if isinstance(cfg.get("layer_types"), list):
        cfg["layer_types"] = cfg["layer_types"][:a.layers]
    tied = cfg.get("tie_word_embeddings", True)
    want = [k for k in tensors if k in ("model.embed_tokens.weight", "model.norm.weight") or
            (k == "lm_head.weight" and not tied) or
            (k.startswith("model.layers.") and int(k.split(".")[2]) < a.layers)]
    state, by_file = {}, {}
    for k in want:
        by_file.setdefault(tensors[k][0], []).append(k)
    for fn, keys in by_file.items():
        with safe_open(os.path.join(a.target, fn), "pt") as f:
            for k in keys:
                state[k] = f.get_tensor(k).float()
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",)})
    config.tie_word_embeddings = tied
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (tied and k == "lm_head.weight")]
    if missing or unexpected:
        die(f"the target's weights do not fit a {a.layers}-layer Llama: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}")
    if tied:
        model.tie_weights()
        if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
            die("transformers did not tie lm_head to embed_tokens")
    return model, cfg, tied


def save_student(a, model, cfg, tied, tensors, torch):
    from safetensors.torch import save_file
    os.makedirs(a.out, exist_ok=True)
    dtype = tensors["model.embed_tokens.weight"][1]
    tdt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}.get(dtype)
    if tdt is None:
        die(f"the target's embeddings are {dtype}: want BF16, F16 or F32")
    out = {}
    for k, v in model.state_dict().items():
        if tied and k == "lm_head.weight":
            continue
        if k not in tensors:
            die(f"the draft's tensor {k} is not in the target")
        out[k] = v.detach().to("cpu", tdt).contiguous()
    tmp = os.path.join(a.out, ".model.safetensors.tmp")
    save_file(out, tmp, metadata={"format": "pt"})
    os.replace(tmp, os.path.join(a.out, "model.safetensors"))
    cfg = dict(cfg)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for fn in TOKENIZER_FILES:
        src = os.path.join(a.target, fn)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(a.out, fn))
    n = sum(v.numel() for v in out.values())
    return n, dtype


# ---------------------------------------------------------------- training

def batches(seqs, batch_tokens, rng):
    """Lists of sequence indices of similar length, about batch_tokens each
    (padded), in random order: tools/voice/train_lm.py's buckets."""
    sys.path.insert(0, os.path.join(ROOT, "tools", "voice"))
    from train_lm import batches as lm_batches
    return lm_batches([(s["ids"],) for s in seqs], batch_tokens, rng)


def collate(seqs, idx, pad, torch, device):
    n = max(len(seqs[i]["ids"]) for i in idx)
    x = torch.full((len(idx), n), pad, dtype=torch.long)
    m = torch.zeros((len(idx), n), dtype=torch.bool)
    for r, i in enumerate(idx):
        ids = seqs[i]["ids"]
        x[r, :len(ids)] = torch.tensor(ids)
        m[r, seqs[i]["loss"]] = True
    return x.to(device), m.to(device)


class Distiller:
    def __init__(self, a, teacher, student, rows, torch):
        import torch.nn.functional as F
        self.F, self.torch, self.a = F, torch, a
        self.teacher, self.student = teacher, student
        self.rows = torch.tensor(rows, device=a.device)
        with torch.no_grad():
            self.w_teacher = teacher.lm_head.weight[self.rows].detach()
        self.amp = a.device != "cpu" and a.bf16
        self.cache = None

    def teacher_logits(self, x, m):
        torch = self.torch
        # No attention mask: padding comes after each sequence and causal
        # attention never lets a real position see it.
        with torch.no_grad(), torch.autocast(self.a.device.split(":")[0], torch.bfloat16,
                                             enabled=self.amp):
            ht = self.teacher.model(input_ids=x).last_hidden_state[m]
            return self.F.linear(ht, self.w_teacher).float()

    def build_cache(self, seqs, pad):
        """The teacher's logits at every loss position of every sequence, once
        (f16), when they fit in --cache-mb: then a step runs the student alone."""
        torch = self.torch
        n = sum(len(s["loss"]) for s in seqs) * len(self.rows) * 2
        if n > self.a.cache_mb * 2 ** 20:
            log(f"teacher's logits: {n / 2 ** 20:.0f} MB, over --cache-mb "
                f"{self.a.cache_mb}: the teacher runs at every step")
            return
        self.cache = {}
        for idx in batches(seqs, self.a.batch_tokens, random.Random(0)):
            x, m = collate(seqs, idx, pad, torch, self.a.device)
            zt = self.teacher_logits(x, m).half()
            for i, z in zip(idx, zt.split([len(seqs[i]["loss"]) for i in idx])):
                self.cache[id(seqs[i])] = z
        log(f"teacher's logits cached: {n / 2 ** 20:.0f} MB")

    def logits(self, x, m, seqs=None, idx=None):
        """Teacher's and student's logits over the rows at the loss positions."""
        torch = self.torch
        if self.cache is not None and idx is not None:
            zt = torch.cat([self.cache[id(seqs[i])] for i in idx]).float()
        else:
            zt = self.teacher_logits(x, m)
        with torch.autocast(self.a.device.split(":")[0], torch.bfloat16, enabled=self.amp):
            hs = self.student.model(input_ids=x).last_hidden_state[m]
            ws = self.student.lm_head.weight[self.rows]
            zs = self.F.linear(hs, ws).float()
        return zt, zs

    def kl(self, zt, zs):
        T = self.a.kd_temp
        lp = self.F.log_softmax(zt / T, -1)
        lq = self.F.log_softmax(zs / T, -1)
        return self.F.kl_div(lq, lp, log_target=True, reduction="batchmean")

    def sampling_dist(self, z):
        """The distribution the pipeline samples from: temperature, then top-k."""
        z = z / self.a.temp
        if 0 < self.a.top_k < z.shape[-1]:
            kth = z.topk(self.a.top_k, -1).values[:, -1:]
            z = z.masked_fill(z < kth, float("-inf"))
        return self.F.softmax(z, -1)

    @staticmethod
    def stats():
        return {"kl": 0.0, "top1": 0.0, "accept": 0.0, "n": 0}

    def measure(self, zt, zs, st):
        """Sums of KL, top-1 agreement and sd's acceptance probability of one
        drafted token (sum min(p, q), at the sampling temperature and top-k)."""
        F = self.F
        lp, lq = F.log_softmax(zt, -1), F.log_softmax(zs, -1)
        st["kl"] += float((lp.exp() * (lp - lq)).sum())
        st["top1"] += float((zt.argmax(-1) == zs.argmax(-1)).sum())
        st["accept"] += float(self.torch.minimum(self.sampling_dist(zt),
                                                 self.sampling_dist(zs)).sum())
        st["n"] += zt.shape[0]

    def evaluate(self, seqs, pad):
        torch = self.torch
        st = self.stats()
        self.student.eval()
        with torch.no_grad():
            for idx in batches(seqs, self.a.batch_tokens, random.Random(0)):
                x, m = collate(seqs, idx, pad, torch, self.a.device)
                self.measure(*self.logits(x, m), st)
        self.student.train()
        n = max(st["n"], 1)
        return {"positions": st["n"], "kl": st["kl"] / n, "top1": st["top1"] / n,
                "accept": st["accept"] / n}


def fmt_val(v):
    return (f"KL {v['kl']:.4f}, top-1 agreement {v['top1']:.4f}, "
            f"expected sd acceptance {v['accept']:.4f} ({v['positions']} positions)")


def train(a, seqs, vocab, voice, tensors, cfg_json):
    import torch
    from transformers import LlamaForCausalLM
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device != "cpu" and not a.bf16:
        a.bf16 = True
    t0 = time.time()
    tdtype = torch.bfloat16 if a.bf16 else torch.float32
    teacher = LlamaForCausalLM.from_pretrained(a.target, dtype=tdtype).to(a.device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    student, cfg, tied = load_student(a, cfg_json, tensors, torch)
    student.to(a.device).train()
    rows = list(range(vocab.speech_first, vocab.speech_first + vocab.speech_count))
    if voice is None:
        rows.append(vocab.end_id)
    rng = random.Random(a.seed)
    order = list(range(len(seqs)))
    rng.shuffle(order)
    n_val = int(round(a.val * len(seqs))) if a.val > 0 else 0
    if a.val > 0 and len(seqs) >= 4:
        n_val = max(1, n_val)
    val = [seqs[i] for i in order[:n_val]]
    tr = [seqs[i] for i in order[n_val:]]
    pad = cfg.get("pad_token_id")
    pad = pad if isinstance(pad, int) else 0
    d = Distiller(a, teacher, student, rows, torch)
    lr = a.lr or 4e-3 * 256 / cfg["hidden_size"]
    per_epoch = len(batches(tr, a.batch_tokens, random.Random(0)))
    steps = a.steps or max(1, int(math.ceil(a.epochs * per_epoch)))
    n_params = sum(p.numel() for p in student.parameters())
    log(f"student: {a.layers} of the target's {cfg_json['num_hidden_layers']} layers, "
        f"hidden {cfg['hidden_size']}, {n_params / 1e6:.2f} M parameters "
        f"({'tied' if tied else 'untied'} lm_head); {len(tr)} training sequences "
        f"({sum(len(s['loss']) for s in tr)} positions, {per_epoch} batches an epoch), "
        f"{len(val)} held out; {steps} steps, lr {lr:.1e}; KL over {len(rows)} rows; "
        f"device {a.device}")
    res = {"rows": len(rows), "train_sequences": len(tr), "val_sequences": len(val),
           "steps": steps, "params": n_params, "lr": lr}
    if val:
        res["val_init"] = d.evaluate(val, pad)
        log("teacher-forced, before training: " + fmt_val(res["val_init"]))
    d.build_cache(tr, pad)
    if a.freeze_embeddings:
        student.model.embed_tokens.weight.requires_grad_(False)
        student.lm_head.weight.requires_grad_(False)
    params = [(n_, p) for n_, p in student.named_parameters() if p.requires_grad]
    decay = [p for n_, p in params if p.dim() >= 2]
    nodecay = [p for n_, p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": nodecay, "weight_decay": 0.0}], lr=lr,
                            betas=(0.9, 0.95))
    warm = max(1, int(a.warmup * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) *
        (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))))
    queue, t1, run_loss = [], time.time(), []
    for step in range(1, steps + 1):
        if not queue:
            queue = batches(tr, a.batch_tokens, rng)
        idx = queue.pop()
        x, m = collate(tr, idx, pad, torch, a.device)
        zt, zs = d.logits(x, m, tr, idx)
        loss = d.kl(zt, zs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in params], 1.0)
        opt.step()
        sched.step()
        run_loss.append(loss.item())
        if step % a.log_every == 0 or step == steps or step == 1:
            log(f"step {step}/{steps}: KL {sum(run_loss) / len(run_loss):.4f} "
                f"lr {sched.get_last_lr()[0]:.2e} {time.time() - t1:.0f} s")
            run_loss = []
    res["train_seconds"] = time.time() - t1
    if val:
        res["val_final"] = d.evaluate(val, pad)
        log("teacher-forced, after training:  " + fmt_val(res["val_final"]))
    n, dtype = save_student(a, student, cfg, tied, tensors, torch)
    res["saved_params"], res["dtype"] = n, dtype
    res["seconds"] = time.time() - t0
    log(f"wrote {a.out} ({n / 1e6:.2f} M parameters, {dtype}); training "
        f"{res['train_seconds']:.1f} s")
    return res


# ---------------------------------------------------------------- measurement

def ratio_se(pairs):
    """sum(x) / sum(d) over (x, d) pairs and its standard error over them
    (the ratio estimator's: utterances are the independent units)."""
    D = sum(d for _, d in pairs)
    X = sum(x for x, _ in pairs)
    n = len(pairs)
    if D == 0:
        return 0.0, 0.0
    r = X / D
    if n < 2:
        return r, float("nan")
    v = sum((x - r * d) ** 2 for x, d in pairs) / (n - 1)
    return r, math.sqrt(n * v) / D


def measure(a, label, draft_args, items, policies, seeds, asg):
    """{policy: summary} for one draft over every (text, speaker) x seed."""
    t0 = time.time()
    out = {}
    for pol in policies:  # a fresh pipeline for each
        jobs = [(t, s, seed) for seed in seeds for (t, s) in items]
        res = run_jobs(a, draft_args, asg, jobs,
                       lambda pl, j: (pl.synth(j[0], j[1], j[2], pol, a) or [None])[0])
        per = [(r["rounds"], r["drafted"], r["accepted"]) for r in res]
        # acceptance rate A / D; mean acceptance length 1 + A / R
        rate, rse = ratio_se([(x, d) for _, d, x in per])
        mal, mse = ratio_se([(x, rd) for rd, _, x in per])
        mal += 1
        out[pol] = {"utterances": len(per), "rounds": sum(p[0] for p in per),
                    "drafted": sum(p[1] for p in per), "accepted": sum(p[2] for p in per),
                    "acceptance_rate": rate, "acceptance_rate_se": rse,
                    "mean_acceptance_length": mal, "mean_acceptance_length_se": mse}
        log(f"  {label:>10} {pol:>4}: acceptance rate {rate:.4f} +- {rse:.4f}, mean "
            f"acceptance length {mal:.4f} +- {mse:.4f} ({out[pol]['drafted']} drafted "
            f"over {len(per)} utterances)")
    out["seconds"] = time.time() - t0
    return out


def find_asg(a, policies):
    if "pcg" not in policies:
        return None
    if a.asg:
        return a.asg
    if os.path.exists(os.path.join(a.target, "asg")):
        return None  # pcg-up takes TARGET/asg by itself
    path = os.path.join(a.out, "asg")
    if not os.path.exists(path):
        log(f"no ASG beside the target: asg-build --theta 0.4 -> {path}")
        run(["asg-build", "--model", a.target, "--theta", "0.4", "--quiet", "-o", path],
            tool_env(), "asg-build")
    return path


def evaluate(a):
    voice = read_voice(a.target)
    nsp = len(voice["speakers"]) if voice else 0
    items = read_texts(a.heldout, nsp, a.max_heldout)
    policies = [p for p in a.policies.split(",") if p]
    seeds = [int(s) for s in a.eval_seeds.split(",") if s]
    asg = find_asg(a, policies)
    drafts = [("distilled", ["--draft", a.out])]
    for c in a.compare:
        drafts.append((os.path.basename(os.path.normpath(c)) or c, ["--draft", c]))
    if a.eval_init:
        drafts.append(("init", ["--draft-layers", ",".join(str(i) for i in range(a.layers))]))
    log(f"held-out acceptance: {len(items)} texts x seeds {seeds}, lookahead {a.lookahead}, "
        f"temperature {a.temp}, top-k {a.top_k}")
    res = {"texts": len(items), "seeds": seeds, "lookahead": a.lookahead, "drafts": {}}
    names = set()
    for label, args in drafts:
        while label in names:
            label += "'"
        names.add(label)
        res["drafts"][label] = {"pcg_up": args, **measure(a, label, args, items, policies,
                                                          seeds, asg)}
    log("")
    log(f"{'draft':>12} {'policy':>6} {'acc. rate':>10} {'mean acc. len':>14} {'drafted':>8}")
    for label, r in res["drafts"].items():
        for pol in policies:
            x = r[pol]
            log(f"{label:>12} {pol:>6} {x['acceptance_rate']:>10.4f} "
                f"{x['mean_acceptance_length']:>14.4f} {x['drafted']:>8}")
    return res


# ---------------------------------------------------------------- main

def main():
    a = parse_args()
    # pcg-down still runs (the with blocks) when the tool is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t_all = time.time()
    if not os.path.exists(os.path.join(a.target, "config.json")):
        die(f"{a.target}: no config.json")
    with open(os.path.join(a.target, "config.json")) as f:
        cfg_json = json.load(f)
    report = {"target": a.target, "layers": a.layers, "args": vars(a)}
    prev = os.path.join(a.out, "distill.json")
    if a.eval_only and os.path.exists(prev):  # keep what the training run recorded
        with open(prev) as f:
            report = {**json.load(f), "eval_args": vars(a)}
    if not a.eval_only:
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
            import safetensors  # noqa: F401
        except ImportError as e:
            die(f"{e}: make draft-deps installs torch, transformers and safetensors")
        vocab = Vocab(a.target)
        voice = read_voice(a.target)
        tensors = target_tensors(a.target)
        if a.data:
            with open(a.data) as f:
                seqs = [json.loads(l) for l in f if l.strip()]
            report["generation_seconds"] = 0.0
        else:
            nsp = len(voice["speakers"]) if voice else 0
            items = read_texts(a.texts, nsp, a.max_texts)
            seqs, report["generation_seconds"] = generate(a, vocab, voice, items)
        report["sequences"] = len(seqs)
        report["generated_tokens"] = sum(len(s["loss"]) for s in seqs)
        if a.generate_only:
            write_report(a, report, t_all)
            log(f"done in {report['seconds']:.1f} s")
            return
        report["training"] = train(a, seqs, vocab, voice, tensors, cfg_json)
        write_report(a, report, t_all)  # kept even if the measurement fails
    if a.heldout:
        report["heldout"] = evaluate(a)
    write_report(a, report, t_all)
    log(f"done in {report['seconds']:.1f} s")


def write_report(a, report, t_all):
    report["seconds"] = time.time() - t_all
    os.makedirs(a.out, exist_ok=True)
    for path in [os.path.join(a.out, "distill.json")] + ([a.report] if a.report else []):
        with open(path + ".tmp", "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
