#!/usr/bin/env python3
"""train_lm.py: trains the demo voice's speech LM (a target or a draft) on a
corpus of make_corpus.py encoded by train_codec.py, and writes a Hugging Face
Llama model directory in LLaSA's layout that the C programs load.

The model reads LLaSA's prompt with the text replaced by a speaker token and
espeak-ng's phonemes (lib/text/voice.h), and writes the codec's speech tokens
interleaved with forced phoneme tokens: <|p_X|> comes right before the first
speech token of phoneme X, at the frame where espeak-ng starts it (the
corpus's phones/<id>.txt, made by pcg-phonemize as the verifier makes them at
run time). The loss is on the speech tokens and the end token only. This
hands the model the alignment of text and speech, which a small model does
not learn from little data (see tools/voice/README.md).

The tokenizer (built by the target's run, reused by the draft's with
--tokenizer) is a byte-level BPE trained on the prompt template and English
text with the `tokenizers` library, then the Llama 3 chat tokens and LLaSA's
eight tags, <|s_0|>.. for the speech codes, and the speaker and phoneme
tokens.

Usage:
    python3 tools/voice/train_lm.py --corpus DIR --codes DIR --out MODEL_DIR
        [--tokenizer FILE] [--hidden 256] [--layers 4] [--heads 4] [--kv-heads 2]
        [--ffn 704] [--steps 3000] [--batch-tokens 6144] [--lr 2e-3] [--seed 1]
        [--threads 2] [--pcg-tokenize bin/pcg-tokenize]

Writes MODEL_DIR/config.json, model.safetensors (bf16), tokenizer.json,
tokenizer_config.json and train.log (the loss curve and held-out accuracy).
Deterministic for a given torch version and thread count.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

import torch

DATE = "26 Jul 2024"
TEMPLATE = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: " + DATE +
            "\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
            "Convert the text to speech:<|TEXT_UNDERSTANDING_START|>{text}"
            "<|TEXT_UNDERSTANDING_END|><|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n<|SPEECH_GENERATION_START|>")
CHAT = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
        "<|eot_id|>"]
TAGS = ["<|TEXT_GENERATION_START|>", "<|TEXT_GENERATION_END|>", "<|TEXT_UNDERSTANDING_START|>",
        "<|TEXT_UNDERSTANDING_END|>", "<|SPEECH_GENERATION_START|>", "<|SPEECH_GENERATION_END|>",
        "<|SPEECH_UNDERSTANDING_START|>", "<|SPEECH_UNDERSTANDING_END|>"]


def read_corpus(corpus, codes_dir):
    """(id, speaker, split, phones [(frame, name)], codes [int]) per utterance."""
    out = []
    with open(os.path.join(corpus, "metadata.tsv")) as f:
        next(f)
        for line in f:
            uid, spk, split, _text = line.rstrip("\n").split("\t", 3)
            with open(os.path.join(corpus, "phones", uid + ".txt")) as g:
                head = g.readline().split()
                frames = int(head[2])
                phones = [(int(a), b) for a, b in (l.rstrip("\n").split("\t") for l in g)]
            with open(os.path.join(codes_dir, uid + ".txt")) as g:
                codes = [int(c) for c in g.read().split()]
            if len(codes) != frames:
                sys.exit("train_lm.py: %s: %d codes but %d frames in its phones file"
                         % (uid, len(codes), frames))
            out.append((uid, int(spk), split, phones, codes))
    return out


def build_tokenizer(utts, n_speech, path, text_vocab):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from tokenizers import AddedToken

    tok = Tokenizer(models.BPE())
    split = pre_tokenizers.Split(Regex(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
        r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"), behavior="isolated")
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=text_vocab, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # The template's fixed text, often, so that it becomes a few tokens.
    fixed = TEMPLATE.replace("{text}", " ")
    for t in CHAT + TAGS:
        fixed = fixed.replace(t, " ")
    tok.train_from_iterator([fixed] * 200, trainer)
    phones = sorted({p for u in utts for _, p in u[3]})
    for p in phones:
        if any(c in p for c in "<|>") or not p.isprintable():
            sys.exit("train_lm.py: phoneme name %r cannot be a token" % p)
    speakers = sorted({u[1] for u in utts})
    special = CHAT + TAGS + ["<|s_%d|>" % i for i in range(n_speech)]
    special += ["<|spk_%d|>" % s for s in range(max(speakers) + 1)]
    special += ["<|p_%s|>" % p for p in phones]
    special += ["<|n_%s|>" % p for p in sorted(set(phones) | {"_"})]  # voice.json next_phoneme
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    tok.save(path)
    return tok


def prompt_text(spk, phones):
    return "<|spk_%d|>" % spk + "".join("<|p_%s|>" % p for _, p in phones)


def sequence(tok, ids_of, u, next_phoneme=False):
    """The ids of one utterance and the positions the loss is taken at; with
    next_phoneme each forced <|p_X|> is followed by <|n_Y|>, Y the phoneme
    after X (the last one's: <|n__|>), as the verifier forces them when
    voice.json says "next_phoneme": true."""
    _, spk, _, phones, codes = u
    ids = tok.encode(TEMPLATE.format(text=prompt_text(spk, phones)), add_special_tokens=False).ids
    loss_at = []
    j = 0
    for f, c in enumerate(codes):
        while j < len(phones) and phones[j][0] == f:
            ids.append(ids_of["<|p_%s|>" % phones[j][1]])
            if next_phoneme:
                ids.append(ids_of["<|n_%s|>" % (phones[j + 1][1] if j + 1 < len(phones)
                                                else "_")])
            j += 1
        loss_at.append(len(ids))
        ids.append(ids_of["<|s_%d|>" % c])
    loss_at.append(len(ids))
    ids.append(ids_of["<|SPEECH_GENERATION_END|>"])
    return ids, loss_at


def batches(seqs, batch_tokens, rng):
    """Batches of similar length, about batch_tokens tokens each, in random order."""
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i][0]), rng.random()))
    out, cur, longest = [], [], 0
    for i in order:
        n = len(seqs[i][0])
        if cur and max(longest, n) * (len(cur) + 1) > batch_tokens:
            out.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def collate(seqs, idx, pad):
    n = max(len(seqs[i][0]) for i in idx)
    x = torch.full((len(idx), n), pad, dtype=torch.long)
    y = torch.full((len(idx), n), -100, dtype=torch.long)
    att = torch.zeros((len(idx), n), dtype=torch.long)
    for r, i in enumerate(idx):
        ids, loss_at = seqs[i]
        x[r, :len(ids)] = torch.tensor(ids)
        att[r, :len(ids)] = 1
        for p in loss_at:
            y[r, p] = ids[p]  # transformers shifts the labels itself
    return x, y, att


def evaluate(model, seqs, pad, batch_tokens):
    model.eval()
    tot = correct = 0
    loss = 0.0
    with torch.no_grad():
        for idx in batches(seqs, batch_tokens, random.Random(0)):
            x, y, _ = collate(seqs, idx, pad)
            logits = model(input_ids=x).logits[:, :-1]
            t = y[:, 1:]
            m = t != -100
            loss += torch.nn.functional.cross_entropy(logits[m], t[m], reduction="sum").item()
            correct += (logits[m].argmax(-1) == t[m]).sum().item()
            tot += m.sum().item()
    model.train()
    return loss / tot, correct / tot


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--codes", required=True, help="train_codec.py's codes directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", help="reuse this tokenizer.json (the draft: the target's)")
    ap.add_argument("--speech", type=int, default=1024)
    ap.add_argument("--next-phoneme", action="store_true",
                    help="force <|n_Y|> (the next phoneme) after each <|p_X|> (voice.json's "
                         "next_phoneme)")
    ap.add_argument("--text-vocab", type=int, default=320)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=704)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-tokens", type=int, default=6144)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--write-sequences", metavar="FILE",
                    help="write the training sequences (one line of ids each, what the MTP "
                         "heads train on) with the tokenizer given, and stop")
    ap.add_argument("--pcg-tokenize", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                           "bin", "pcg-tokenize"))
    a = ap.parse_args()

    from tokenizers import Tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    utts = read_corpus(a.corpus, a.codes)
    tok_path = os.path.join(a.out, "tokenizer.json")
    if a.tokenizer:
        tok = Tokenizer.from_file(a.tokenizer)
        if os.path.abspath(a.tokenizer) != os.path.abspath(tok_path):
            tok.save(tok_path)
    else:
        tok = build_tokenizer(utts, a.speech, tok_path, a.text_vocab)
    ids_of = tok.get_vocab()
    for p in {p for u in utts for _, p in u[3]}:
        if "<|p_%s|>" % p not in ids_of:
            sys.exit("train_lm.py: the tokenizer lacks <|p_%s|>" % p)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                   "eos_token": "<|eot_id|>", "model_max_length": 4096}, f, indent=2)

    seqs = {"train": [], "heldout": []}
    for u in utts:
        seqs[u[2]].append(sequence(tok, ids_of, u, a.next_phoneme))
    # The C tokenizer must give the same prompt ids (it renders the prompt
    # at run time): checked on a few utterances.
    for u in utts[:3]:
        want = tok.encode(TEMPLATE.format(text=prompt_text(u[1], u[3])),
                          add_special_tokens=False).ids
        got = subprocess.run([a.pcg_tokenize, "--tokenizer", tok_path, "--llasa-prompt", "--text",
                              prompt_text(u[1], u[3])], capture_output=True, text=True,
                             check=True).stdout.split()
        if [int(g) for g in got] != want:
            sys.exit("train_lm.py: pcg-tokenize and tokenizers disagree on the prompt of " + u[0])
    if a.write_sequences:
        with open(a.write_sequences + ".tmp", "w") as f:
            for ids, _ in seqs["train"]:
                f.write(" ".join(map(str, ids)) + "\n")
        os.replace(a.write_sequences + ".tmp", a.write_sequences)
        print("wrote %d sequences to %s" % (len(seqs["train"]), a.write_sequences))
        return
    n_prompt = len(tok.encode(TEMPLATE.format(text=""), add_special_tokens=False).ids)
    print("%d train / %d held-out utterances, %d tokens of template, vocabulary %d"
          % (len(seqs["train"]), len(seqs["heldout"]), n_prompt, tok.get_vocab_size()),
          flush=True)

    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=a.hidden,
                      intermediate_size=a.ffn, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                      max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=True, bos_token_id=ids_of["<|begin_of_text|>"],
                      eos_token_id=ids_of["<|SPEECH_GENERATION_END|>"],
                      pad_token_id=ids_of["<|end_of_text|>"])
    model = LlamaForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print("model: %d layers, hidden %d, %.2f M parameters" % (a.layers, a.hidden, n_params / 1e6),
          flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": nodecay, "weight_decay": 0.0}], lr=a.lr,
                            betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / a.warmup) *
        (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / a.steps)))))
    pad = ids_of["<|end_of_text|>"]
    log = open(os.path.join(a.out, "train.log"), "w")
    step, t0, queue = 0, time.time(), []
    model.train()
    while step < a.steps:
        if not queue:
            queue = batches(seqs["train"], a.batch_tokens, rng)
        # No attention mask: the padding comes after each sequence, and causal
        # attention never lets a real position see it (its labels are -100).
        x, y, _ = collate(seqs["train"], queue.pop(), pad)
        loss = model(input_ids=x, labels=y).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        if step % 50 == 0 or step == 1:
            line = "step %d loss %.4f lr %.2e %.0f s" % (step, loss.item(), sched.get_last_lr()[0],
                                                         time.time() - t0)
            print(line, flush=True)
            log.write(line + "\n")
        if step % a.eval_every == 0 or step == a.steps:
            hl, ha = evaluate(model, seqs["heldout"][:200], pad, a.batch_tokens)
            line = "step %d held-out loss %.4f accuracy %.4f" % (step, hl, ha)
            print(line, flush=True)
            log.write(line + "\n")
            log.flush()
    model.to(torch.bfloat16).save_pretrained(a.out, safe_serialization=True)
    log.close()
    print("wrote %s in %.0f s" % (a.out, time.time() - t0))


if __name__ == "__main__":
    main()
