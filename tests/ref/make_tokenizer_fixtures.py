#!/usr/bin/env python3
"""make_tokenizer_fixtures.py: golden token ids for tests/unit/test_tokenizer.c.

Runs Hugging Face tokenizers (and transformers for the chat template) on three
tokenizer.json files and writes, under tests/fixtures/tokenizer/:

  llama3-tokenizer.json.gz  the Llama 3 tokenizer (gzip -n), imported once
                            with --import DIR (tokenizer.json, its README.md
                            and LICENSE.npm-package are copied)
  mkmodel-tokenizer.json    the tokenizer of `pcg-mkmodel --seed 1` (random
                            merges, 1,048 added tokens)
  llama31-chat-template.jinja  the Llama-3.1-style chat template used for the
                            LLaSA prompt goldens (date_string is a variable)
  llama3.json               goldens on the Llama 3 tokenizer
  llasa.json                goldens on Llama 3 + add_tokens(8 tags, 65,536
                            <|s_N|>), built here the way LLaSA's training
                            script does (the C test builds it with
                            tok_add_tokens instead of reading a 30 MB file)
  mkmodel.json              goldens on mkmodel-tokenizer.json
  mkmodel-prompt.txt        one LLaSA prompt on mkmodel-tokenizer.json for the
                            CLI test: the arguments, then the ids
  features.json             small variants of mkmodel-tokenizer.json that use
                            what Llama 3 does not (GPT-2's ByteLevel regex
                            with add_prefix_space, a String Split, "a b"
                            merges without ignore_merges, added tokens with
                            lstrip, rstrip, single_word, normalized), each
                            with its tokenizer.json text and goldens

Each goldens file is {"cases": [{"text", "ids", "decoded", "decoded_skip"}],
"decode_cases": [{"ids", "text", "text_skip"}], "prompts": [{"text",
"prompt_text", "codes", "date", "ids"}]}: ids of encode(text,
add_special_tokens=False), decode(ids, skip_special_tokens=False/True), and
for the LLaSA layouts apply_chat_template(..., continue_final_message=True).

Usage: python3 tests/ref/make_tokenizer_fixtures.py [--import DIR] [--mkmodel BIN]
Needs tokenizers and transformers (tested with tokenizers 0.23, transformers
5.x). Deterministic: the random cases come from a seeded generator.
"""
import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import tokenizers
import transformers
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

TAGS = [
    "<|TEXT_GENERATION_START|>", "<|TEXT_GENERATION_END|>",
    "<|TEXT_UNDERSTANDING_START|>", "<|TEXT_UNDERSTANDING_END|>",
    "<|SPEECH_GENERATION_START|>", "<|SPEECH_GENERATION_END|>",
    "<|SPEECH_UNDERSTANDING_START|>", "<|SPEECH_UNDERSTANDING_END|>",
]

# Llama 3.1's chat template without the tool-calling branches, which the
# LLaSA prompt never takes. What matters: bos, the system header with the
# knowledge and date lines, an empty system message, then per message
# header + content|trim + <|eot_id|>.
TEMPLATE = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

PARAGRAPH = (
    "The quick brown fox jumps over the lazy dog. It's 3:45pm on 2024-07-26, and "
    "WE'RE late -- again! Prices rose 12.5% (from $1,234.56 to $1,388.88).\n\n"
    "  Indented line\twith a tab; \"quotes\" and 'single quotes' and `backticks`.\n"
    "Café naïve coöperate résumé; Straße; ĳ; Ångström; Ωμέγα; Привет, мир!\n"
    "你好，世界。日本語のテキスト、カタカナ。한국어 텍스트입니다.\n"
    "שלום עולם! مرحبا بالعالم ٢٠٢٤. नमस्ते दुनिया। 👋🌍 👨‍👩‍👧‍👦 🏳️‍🌈\r\n"
)


def corpus():
    """The hard strings, then long and random ones."""
    texts = [
        "", " ", "  ", "\t", "\n", "\r\n", "   \t\n ", "\n\n\n", " \n \n ",
        # contractions in every case
        "I'm", "I'M", "you're", "YOU'RE", "You'Re", "he's", "HE'S", "he'S", "we'll",
        "WE'LL", "We'Ll", "they've", "THEY'VE", "it'd", "IT'D", "don't", "DON'T",
        "Don'T", "O'Neil's", "'s'S'sS", "'ll've'd", "rock 'n' roll", "I'ſt", "x'\u212aa",
        "y'all ' s", "''''", "'", "'s", " 's",
        # digits
        "1", "12", "123", "1234", "12345", "1234567890", "3.14159", "1,000,000",
        "-42", "+7e-10", "0x1F", "v1.2.3", "٣٤٥٦٧", "ⅫⅣ", "½¾", "①②③", "１２３４",
        "abc123def4567", "2024年7月26日",
        # combining marks
        "e\u0301", "Ame\u0301lie", "n\u0303o", "a\u0308\u0304", "Z\u0351\u0361a\u0336l\u0337g\u0338o",
        "नमस्ते", "ضَمَّة", "\u0301\u0301 leading marks", "tiếng Việt",
        # CJK
        "你好，世界。", "日本語のテキスト", "한국어 텍스트", "中文English混合123",
        "ｆｕｌｌｗｉｄｔｈ", "龘靐齉", "𠜎𠜱𠝹𠱓",
        # right to left
        "שלום עולם", "مرحبا بالعالم", "عام 2024 م", "abc שלום def", "\u202eevil\u202c",
        # emoji
        "😀", "😀😀😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇯🇵🇺🇸", "❤️",
        "a😀b", " 😀 ", "🤖🦾 robots",
        # whitespace and control characters
        "a  b", "a\t\tb", "a \t b", "line1\nline2\r\nline3\r\r\n\nline4",
        "x   ", "   leading", "  \n  indented\n", "\u00a0", "x\u00a0\u00a0y", "a\x85b",
        "a\x85\x85b c\x85", "a\u2028b\u2029c", "x\u3000 y", "x\u200bb", "\ufeffBOM",
        "\x0b\x0c", "\x01\x02\x7f", "a\x00b", "\r", "\t\n\t\n", "end with newline\n",
        "\uffff\ufffe\ue000\U0010ffff\ufffd",
        # punctuation, code, urls
        "!!!???", "...", "\u2014", "\u00abquoted\u00bb", "C++ && x->y || !z",
        "https://example.com/a?b=c&d=e#f", "user@example.com",
        "def f(x):\n    return x**2\n\n\nclass A:\n\tpass\n", "{\"key\": [1, 2.5, null]}",
        "<html><body>Hi</body></html>", "$$\\frac{a}{b}$$",
        # added-token strings inside text
        "<|begin_of_text|>", "hello<|eot_id|>world", "<|start_header_id|>user<|end_header_id|>\n\nhi",
        "<|begin_of_text", "<|eot_id|", "eot_id|>", "<|reserved_special_token_5|>",
        "<|reserved_special_token_250|><|reserved_special_token_250|>",
        "<|s_12", "<|s_1|><|s_2|>", "<|s_0|>", "<|s_65535|>", "<|s_65536|>", "<|s_01|>",
        "<|s_1023|><|s_1024|>", " <|s_5|> ", "x<|s_5|>y", "<<|s_1|>>", "<|<|s_1|>|>",
        "<|s_1|<|s_2|>", "<|SPEECH_GENERATION_START|><|s_0|><|s_1|><|SPEECH_GENERATION_END|>",
        "<|TEXT_UNDERSTANDING_START|>Hi there<|TEXT_UNDERSTANDING_END|>",
        "Convert the text to speech:<|TEXT_UNDERSTANDING_START|>",
        "<|eot_id|><|s_3|><|begin_of_text|>", " <|eot_id|> ", "<|SPEECH_GENERATION_START",
    ]
    # long inputs
    texts.append(PARAGRAPH * 40)
    texts.append("a" * 5000)
    texts.append("ab" * 2000 + "c")
    texts.append(" " * 3000 + "x")
    texts.append("\n" * 500 + " " * 500)
    texts.append("7" * 1001)
    texts.append("<|s_7|>" * 300)
    texts.append("😀" * 500)
    # random mixtures of the pieces above, and random code points
    rng = random.Random(20240726)
    pieces = [t for t in texts if 0 < len(t) < 100]
    for _ in range(40):
        texts.append("".join(rng.choice(pieces) for _ in range(rng.randint(2, 12))))
    texts.append("".join(rng.choice(pieces) for _ in range(3000)))
    # Code points from long-assigned blocks (Unicode <= 13), so that a
    # difference in Unicode versions between PCRE2 and Oniguruma cannot show.
    ranges = [(0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff),
              (0x5d0, 0x5ea), (0x620, 0x64a), (0x900, 0x97f), (0x3040, 0x30ff),
              (0x4e00, 0x9fa5), (0xac00, 0xd7a3), (0x2000, 0x206f), (0x1f300, 0x1f64f),
              (0x9, 0xd), (0x1d400, 0x1d7ff), (0x10400, 0x1044f)]
    for _ in range(150):
        s = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(ranges)
            s.append(chr(rng.randint(lo, hi)))
        texts.append("".join(s))
    return texts


def random_ids(rng, vocab, speech=None):
    """Id sequences for decode goldens: random tokens, often bytes that do
    not form UTF-8 on their own (lossy decoding), specials and speech ids."""
    out = []
    for _ in range(120):
        n = rng.randint(0, 24)
        ids = []
        for _ in range(n):
            r = rng.random()
            if r < 0.3:
                ids.append(rng.randrange(0, 256))
            elif r < 0.4:
                ids.append(rng.randrange(vocab - 300 if speech else vocab - 256, vocab))
            elif speech and r < 0.55:
                ids.append(rng.randrange(speech[0], speech[0] + speech[1]))
            else:
                ids.append(rng.randrange(0, vocab))
        out.append(ids)
    return out


def goldens(tk, texts, decode_ids):
    cases = []
    for t in texts:
        ids = tk.encode(t, add_special_tokens=False).ids
        cases.append({"text": t, "ids": ids,
                      "decoded": tk.decode(ids, skip_special_tokens=False),
                      "decoded_skip": tk.decode(ids, skip_special_tokens=True)})
    dcases = [{"ids": ids, "text": tk.decode(ids, skip_special_tokens=False),
               "text_skip": tk.decode(ids, skip_special_tokens=True)} for ids in decode_ids]
    return {"cases": cases, "decode_cases": dcases}


def prompt_ids(hf, text, prompt_text, codes, date):
    """The LLaSA model card's prompt, rendered by transformers."""
    content = "<|SPEECH_GENERATION_START|>" + "".join("<|s_%d|>" % c for c in codes)
    chat = [
        {"role": "user", "content": "Convert the text to speech:<|TEXT_UNDERSTANDING_START|>"
         + prompt_text + text + "<|TEXT_UNDERSTANDING_END|>"},
        {"role": "assistant", "content": content},
    ]
    kw = {} if date is None else {"date_string": date}
    r = hf.apply_chat_template(chat, chat_template=TEMPLATE, tokenize=True,
                               continue_final_message=True, **kw)
    if not isinstance(r, list):
        r = r["input_ids"]
    return [int(i) for i in r]


def prompts(hf, n_speech):
    rng = random.Random(7)
    cases = [
        ("Hello world.", "", [], None),
        ("Hello world.", "", [], "01 Jan 2025"),
        ("It's 3:45pm -- WE'RE late!", "", [], None),
        ("  leading and trailing spaces  ", "", [], None),
        ("你好，世界。😀", "", [], "26 Jul 2024"),
        ("line one\nline two\n", "", [], None),
        ("", "", [], None),
        ("Target text.", "This is the prompt transcript. ", [0, 1, 2, n_speech - 1], None),
        ("And this is new.", "Prompt text without a space.",
         [rng.randrange(n_speech) for _ in range(150)], "05 Mar 2026"),
        ("text with <|s_5|> and <|eot_id|> inside", "", [7, 7, 7], None),
    ]
    out = []
    for text, ptext, codes, date in cases:
        out.append({"text": text, "prompt_text": ptext, "codes": codes, "date": date,
                    "ids": prompt_ids(hf, text, ptext, codes, date)})
    return out


FEATURE_TEXTS = [
    "", " ", "hello world", "Hello  world\n", "say hello, hellothere, hello_x, ahello, hello",
    "x <mask> y", "x    <mask>", "<mask>", "   <mask>   ", "a\u3000<mask>",
    "[R]   tail", "[R]\n\nnext", "a[R]b", "<mask>[R]  <mask>", "[R] <mask>",
    "abcab cab", "end.", "wörd hello\u0301 héllo", "hello\u200dhello", "日本hello",
    "<|s_3|><|s_1000|> hello", "I'm OK, you're 'S'?", "   leading", "trailing   ",
    "abab ab ababab", "  two  spaces  ", "tab\there", "new\nline\r\n",
]


def features(mk_json):
    """Variants of the mkmodel tokenizer that exercise the other options."""
    base = json.loads(mk_json)
    out = []

    # GPT-2 style: ByteLevel(add_prefix_space, use_regex), "a b" merges,
    # merges applied to in-vocab words too, added tokens with options.
    d = json.loads(mk_json)
    d["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                          "use_regex": True}
    d["model"]["ignore_merges"] = False
    d["model"]["merges"] = [a + " " + b for a, b in base["model"]["merges"]]
    tk = Tokenizer.from_str(json.dumps(d))
    tk.add_special_tokens([tokenizers.AddedToken("<mask>", lstrip=True, special=True)])
    tk.add_tokens([tokenizers.AddedToken("hello", single_word=True),
                   tokenizers.AddedToken("[R]", rstrip=True, normalized=False),
                   tokenizers.AddedToken("ab", normalized=True),
                   tokenizers.AddedToken("cab", normalized=False)])
    out.append(("gpt2-options", tk))

    # A String Split on spaces before a ByteLevel without regex.
    d = json.loads(mk_json)
    d["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"String": " "}
    out.append(("string-split", Tokenizer.from_str(json.dumps(d))))

    # Two regex Splits, the second with empty matches (a lookahead), whose
    # split points HF takes from onig's find_iter.
    d = json.loads(mk_json)
    d["pre_tokenizer"]["pretokenizers"].insert(
        1, {"type": "Split", "pattern": {"Regex": "(?=[A-Z])|$"}, "behavior": "Isolated",
            "invert": False})
    out.append(("empty-matches", Tokenizer.from_str(json.dumps(d))))

    res = []
    texts = FEATURE_TEXTS + corpus()[:150]
    for name, tk in out:
        g = goldens(tk, texts, random_ids(random.Random(4), tk.get_vocab_size(True)))
        res.append(dict(name=name, tokenizer=tk.to_str(), **g))
    return res


def write_json(name, obj):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")


def fast(path):
    return PreTrainedTokenizerFast(tokenizer_file=path, bos_token="<|begin_of_text|>",
                                   clean_up_tokenization_spaces=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--import", dest="imp", metavar="DIR",
                    help="copy tokenizer.json, README.md, LICENSE.npm-package of Llama 3 from DIR")
    ap.add_argument("--mkmodel", default=os.path.join(ROOT, "bin", "pcg-mkmodel"))
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    gz = os.path.join(OUT, "llama3-tokenizer.json.gz")
    if a.imp:
        with open(os.path.join(a.imp, "tokenizer.json"), "rb") as f:
            data = f.read()
        with open(gz, "wb") as f:
            f.write(gzip.compress(data, compresslevel=9, mtime=0))
        shutil.copyfile(os.path.join(a.imp, "LICENSE.npm-package"), os.path.join(OUT, "LICENSE.npm-package"))
        shutil.copyfile(os.path.join(a.imp, "README.md"), os.path.join(OUT, "llama3-tokenizer.README.md"))
    tmp = tempfile.mkdtemp()
    try:
        llama3 = os.path.join(tmp, "llama3.json")
        with gzip.open(gz, "rb") as f, open(llama3, "wb") as g:
            g.write(f.read())
        subprocess.run([a.mkmodel, "--out", os.path.join(tmp, "m"), "--seed", "1"], check=True)
        shutil.copyfile(os.path.join(tmp, "m", "tokenizer.json"),
                    os.path.join(OUT, "mkmodel-tokenizer.json"))
        with open(os.path.join(OUT, "llama31-chat-template.jinja"), "w") as f:
            f.write(TEMPLATE)
        texts = corpus()
        meta = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__}

        # Llama 3 as shipped.
        tk = Tokenizer.from_file(llama3)
        g = goldens(tk, texts, random_ids(random.Random(1), tk.get_vocab_size(True)))
        write_json("llama3.json", dict(meta, **g))

        # LLaSA: Llama 3 + add_tokens, as LLaSA's train_tts.py does.
        hf = fast(llama3)
        hf.add_tokens(TAGS + ["<|s_%d|>" % i for i in range(65536)])
        assert len(hf) == 193800, len(hf)
        tk = hf.backend_tokenizer
        assert tk.token_to_id("<|s_0|>") == 128264 and tk.token_to_id("<|SPEECH_GENERATION_END|>") == 128261
        g = goldens(tk, texts, random_ids(random.Random(2), 193800, (128264, 65536)))
        for c in g["cases"][:200]:  # transformers' own call agrees with the backend's
            assert hf(c["text"], add_special_tokens=False)["input_ids"] == c["ids"]
        g["prompts"] = prompts(hf, 65536)
        write_json("llasa.json", dict(meta, **g))

        # The scaled-down layout of pcg-mkmodel (1,024 speech tokens).
        mk = os.path.join(OUT, "mkmodel-tokenizer.json")
        hf = fast(mk)
        tk = hf.backend_tokenizer
        first = tk.token_to_id("<|s_0|>")
        n_speech = len([t for t in tk.get_vocab(True) if t.startswith("<|s_")])
        g = goldens(tk, texts, random_ids(random.Random(3), tk.get_vocab_size(True),
                                          (first, n_speech)))
        g["prompts"] = prompts(hf, n_speech)
        write_json("mkmodel.json", dict(meta, **g))
        with open(mk) as f:
            write_json("features.json", dict(meta, variants=features(f.read())))
        p = g["prompts"][7]
        with open(os.path.join(OUT, "mkmodel-prompt.txt"), "w") as f:
            f.write("# pcg-tokenize --llasa-prompt on mkmodel-tokenizer.json: text, prompt text,"
                    " codes, then the expected ids\n")
            f.write(p["text"] + "\n" + p["prompt_text"] + "\n")
            f.write(" ".join(map(str, p["codes"])) + "\n")
            f.write(" ".join(map(str, p["ids"])) + "\n")
    finally:
        shutil.rmtree(tmp)
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
