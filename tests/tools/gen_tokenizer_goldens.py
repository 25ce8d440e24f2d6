#!/usr/bin/env python3
r"""Writes tests/data/tokenizer_goldens.jsonl: token ids for the default model's tokenizer, or
tests/data/tokenizer_goldens_qwen2.jsonl for Qwen2.5's (--model of the qwen2.5-coder-0.5b file).

Usage: python3 tests/tools/gen_tokenizer_goldens.py [--model PATH] [--out PATH]
Needs the PyPI packages gguf, tokenizers, transformers and jinja2; llama-cpp-python is used as a
further cross-check when it is installed.

Qwen2.5 (tokenizer.ggml.pre = "qwen2")
--------------------------------------
The ids come from HF `tokenizers` built from the GGUF's vocabulary and merges with the
pre-tokenizer of Qwen2.5's tokenizer.json:
    Sequence[Split(Regex(QWEN2_PATTERN), behavior="isolated"),
             ByteLevel(add_prefix_space=False, use_regex=False)]
Its vocabulary has a token for every byte, so every byte string round-trips. The chat lines are
rendered with the GGUF's Jinja template and checked against transformers' apply_chat_template;
a conversation the template cannot render (an empty one: it reads messages[0]) is left out.
The sections below describe SmolLM2's vocabulary.

Which oracle writes the ids
---------------------------
The ids come from HF `tokenizers`, built from the GGUF's own vocabulary and merges with the
pre-tokenizer of SmolLM2's tokenizer.json:
    Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]
This is what llama.cpp's "smollm" pre-tokenizer does (tokenizer.ggml.pre = "smollm": every \p{N}
character its own piece, then the GPT-2 pattern).

transformers' own GGUF loader (AutoTokenizer.from_pretrained(dir, gguf_file=...)) is run as a
second oracle, but it is not used for the ids: its converter builds a plain ByteLevel
pre-tokenizer without the Digits step, so it tokenizes some numerals differently (" ²" becomes
"Ġ²" instead of "Ġ" + "²"). ASCII digits come out the same either way, because the vocabulary
has no multi-digit tokens and no "Ġ0".."Ġ9". Lines where the two disagree carry the
transformers ids in the field "transformers_gguf_ids", and the script prints how many there are.

llama-cpp-python (llama.cpp's own "smollm" pre-tokenizer), when installed, is a third oracle.
When these goldens were written (llama-cpp-python 0.3.36) it agreed with the ids on every line
of valid text except the two built around bytes that have no token ("!\x04!", see below); such
lines carry "llama_cpp_ids".

Line format: {"text_b64", "parse_special", "ids", "kind"} and optionally "chat" (the messages)
with "add_generation_prompt" when the text is a rendered chat template, "invalid_utf8", and
"transformers_gguf_ids" / "llama_cpp_ids" where those oracles disagree (for information only).

Bytes the tokenizer cannot encode
---------------------------------
SmolLM2's vocabulary lacks the single-byte tokens of 21 bytes (0x04 0x06 0x13 0x14 0x16 0x1D
0xC0 0xC1 0xF1 0xF2 0xF5-0xFF). HF's BPE drops such a byte (no unknown token is set) before
merging, so its neighbours may still merge ("!\x04!" -> "!!"); llama.cpp keeps it as a barrier
during merging and drops it afterwards ("!", "!"). adakv follows HF, whose tokenizer the model
was trained with.
So decode(encode(s)) == s holds for byte strings without those bytes; with them, the round trip
gives s without them.

Invalid UTF-8
-------------
HF tokenizers only take valid Unicode, and llama.cpp replaces every invalid byte by U+FFFD
(tokens of EF BF BD), which loses the bytes. adakv instead keeps the bytes: PCRE2 matches with
PCRE2_MATCH_INVALID_UTF, so no pre-tokenizer match spans an invalid byte, and every maximal run
of invalid bytes becomes a piece of its own that byte-level BPE encodes. The expected ids of the
invalid-UTF-8 lines are computed here the same way: the text is cut into maximal valid runs
(each pre-tokenized by the oracle on its own) and invalid runs (BPE'd by the oracle's model).
The script checks that this emulation equals the oracle on every valid line.
"""

import argparse
import base64
import json
import os
import random
import sys
import unicodedata

DEFAULT_MODEL = os.path.join(
    os.environ.get("ADAKV_HOME", os.path.expanduser("~/.cache/adakv")),
    "models",
    "SmolLM2-135M-Instruct.Q4_1.gguf",
)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "tokenizer_goldens.jsonl")
QWEN2_OUT = os.path.join(REPO, "tests", "data", "tokenizer_goldens_qwen2.jsonl")

# Qwen2's pre-tokenizer pattern, as in its tokenizer.json.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)


def read_gguf(path):
    from gguf import GGUFReader

    r = GGUFReader(path)

    def field(name):
        return r.fields[name].contents()

    return {
        "tokens": field("tokenizer.ggml.tokens"),
        "merges": field("tokenizer.ggml.merges"),
        "types": field("tokenizer.ggml.token_type"),
        "pre": field("tokenizer.ggml.pre"),
        "chat_template": field("tokenizer.chat_template"),
    }


def pre_tokenizer_of(pre):
    from tokenizers import Regex, pre_tokenizers

    if pre == "smollm":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    if pre == "qwen2":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    raise SystemExit(f"no oracle pre-tokenizer for tokenizer.ggml.pre = {pre!r}")


def build_oracle(meta):
    from tokenizers import AddedToken, Tokenizer, decoders, models

    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizer_of(meta["pre"])
    tok.decoder = decoders.ByteLevel()
    # Control tokens (type 3) are special: text only when the caller parses special tokens.
    # User-defined ones (type 4, e.g. Qwen's <tool_call>) are added tokens that are always
    # matched, as in the model's tokenizer.json and in llama.cpp.
    control = [t for t, ty in zip(meta["tokens"], meta["types"]) if ty == 3]
    user = [t for t, ty in zip(meta["tokens"], meta["types"]) if ty == 4]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])
    return tok, control, user


def bytes_to_unicode():
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_CHARS = bytes_to_unicode()


class Emulator:
    """Expected ids for any byte string (see 'Invalid UTF-8' above)."""

    def __init__(self, oracle, control, user):
        self.oracle = oracle
        # Longest first: leftmost-longest matching, as HF's added-token splitting.
        self.specials = sorted((s.encode() for s in control + user), key=len, reverse=True)
        self.user = sorted((s.encode() for s in user), key=len, reverse=True)
        self.ids = {s.encode(): oracle.token_to_id(s) for s in control + user}

    def split_special(self, data, parse_special=True):
        candidates = self.specials if parse_special else self.user
        out, plain, pos = [], 0, 0
        while pos < len(data):
            hit = next((s for s in candidates if data.startswith(s, pos)), None)
            if hit is None:
                pos += 1
                continue
            if pos > plain:
                out.append(data[plain:pos])
            out.append(self.ids[hit])
            pos += len(hit)
            plain = pos
        if plain < len(data):
            out.append(data[plain:])
        return out

    @staticmethod
    def utf8_runs(data):
        """(is_valid, bytes) runs; invalid bytes are those Python's strict decoder rejects."""
        text = data.decode("utf-8", errors="surrogateescape")
        runs = []
        for ch in text:
            bad = 0xDC80 <= ord(ch) <= 0xDCFF
            piece = bytes([ord(ch) - 0xDC00]) if bad else ch.encode()
            if runs and runs[-1][0] == (not bad):
                runs[-1][1].extend(piece)
            else:
                runs.append([not bad, bytearray(piece)])
        return [(ok, bytes(b)) for ok, b in runs]

    def encode_plain(self, data):
        ids = []
        for ok, run in self.utf8_runs(data):
            if ok:
                pieces = self.oracle.pre_tokenizer.pre_tokenize_str(run.decode())
                spelled = [p for p, _ in pieces]
            else:
                spelled = ["".join(BYTE_CHARS[b] for b in run)]
            for s in spelled:
                ids.extend(t.id for t in self.oracle.model.tokenize(s))
        return ids

    def encode(self, data, parse_special):
        if not parse_special and not self.user:
            return self.encode_plain(data)
        ids = []
        for part in self.split_special(data, parse_special):
            if isinstance(part, int):
                ids.append(part)
            else:
                ids.extend(self.encode_plain(part))
        return ids


def oracle_ids(oracle, text, parse_special):
    oracle.encode_special_tokens = not parse_special
    return oracle.encode(text, add_special_tokens=False).ids


# ---------------------------------------------------------------------------------------------
# The strings.

HAND = [
    "The capital of France is",
    "\n",
    "Hello, world!",
    "Hello world",
    " Hello world",
    "  Hello  world  ",
    "hello   ",
    "trailing space ",
    "trailing spaces   ",
    "trailing tab\t",
    "trailing newline\n",
    "trailing newlines\n\n\n",
    "\n\nleading newlines",
    "   leading spaces",
    "\tleading tab",
    "a  b",
    "a   b",
    "a \tb",
    "a\t b",
    "a \n b",
    "a\n\n\nb",
    "a\r\nb\r\n",
    "line one\nline two\n\nline four",
    " ",
    "  ",
    "\t",
    "\t\t\t",
    "\n\n",
    " \n ",
    "\u00a0",
    "a\u00a0b",
    "a\u3000b",
    "a\u2028b\u2029c",
    "a\u0085b",
    "a\u180eb",
    "a \u180eb \u180e",
    "a\u200bb",
    "a\ufeffb",
    "a\u000bb\u000cc",
    "x\u001cy\u001dz\u001ey\u001fw",
    "!\u0004!",
    "a.\u0006.b \u0013\u0014 \u0016--\u001d--",
    "I'm here. You're there. He's, she'd, we'll, they've.",
    "I'M SHOUTING, YOU'RE NOT",
    "don't won't can't shouldn't",
    "'s 't 're 've 'm 'll 'd",
    "rock'n'roll",
    "12345",
    "3.14159",
    "1,000,000",
    "-42",
    "+1 (555) 123-4567",
    "2024-05-17T12:34:56Z",
    "0x1F600 0b1010 0o777",
    "1e-9 6.022e23",
    "v1.2.3-rc.4",
    "I have 3 apples and 12 oranges.",
    " 1 22 333 4444",
    "½ ¼ ¾ ² ³ ¹",
    " ² ³",
    "x² + y² = z²",
    "Ⅻ Ⅳ ⅷ",
    "٣٤٥ ۱۲۳ १२३",
    "①②③ ⑴⑵",
    "𝟘𝟙𝟚 𝟏𝟐",
    "café résumé naïve",
    "Ångström, Øresund, Ærø",
    "mañana, señor, niño",
    "über, Müller, Straße",
    "e\u0301 (combining acute), n\u0303, a\u0308",
    "Zalgo: Z\u0351\u0358a\u0364\u036bl\u0350g\u0352o\u033e",
    "ﬁ ﬂ ﬀ",
    "Ελληνικά κείμενα",
    "Русский текст, пример.",
    "עברית",
    "العربية",
    "हिन्दी",
    "ภาษาไทย",
    "한국어 텍스트",
    "日本語のテキスト、カタカナ。",
    "中文文本，标点符号。",
    "你好，世界！",
    "混合English和中文123",
    "emoji 😀😃😄",
    "👍🏽",
    "👨‍👩‍👧‍👦 family",
    "🏳️‍🌈",
    "🇫🇷🇯🇵🇺🇸",
    "❤️ ✨ ☕",
    "🤖: beep",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|>",
    "text<|endoftext|>more",
    "<|im_start|user",
    "<|im_start|>>",
    "<<|im_end|>",
    "<repo_name>adakv<file_sep>main.cpp<filename>x",
    "<gh_stars>100",
    "<jupyter_start><jupyter_code>print(1)<jupyter_output>1<empty_output>",
    "<issue_start><issue_comment><issue_closed>",
    "<|fim_prefix|>def f(<|fim_suffix|>)\n<|fim_middle|>",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|repo_name|>adakv<|file_sep|>model/llama.cpp",
    "'S 'T 'RE 'VE 'M 'LL 'D 'Ll 'dD",
    "don'T WON'T It'S",
    "\u017fs '\u017f 'K '\u212a",
    "def foo(x):\n    return x * 2\n",
    "class A:\n    def __init__(self):\n        self.x = []\n\n\n",
    "for i in range(10):\n\tprint(i, end='')\n",
    "if __name__ == \"__main__\":\n    main()\n",
    "lambda x, y: {**x, 'k': [y]}",
    "#include <stdio.h>\nint main(void) {\n  printf(\"%d\\n\", 42);\n  return 0;\n}\n",
    "std::vector<int> v{1, 2, 3}; v.push_back(4);",
    "x->y = (*p)++ + --q; a <<= 2; b >>= 3;",
    "/* comment */ // another\n",
    '{"key": "value", "n": 12, "list": [1, 2.5, null, true], "nested": {"a": {}}}',
    '[\n  {\n    "id": 1\n  }\n]',
    "SELECT * FROM users WHERE id = 42;",
    "<html><body><p class=\"x\">Hi</p></body></html>",
    "$ ls -la | grep foo > out.txt 2>&1",
    "https://example.com/path?query=1&x=y#frag",
    "user@example.com",
    "C:\\Windows\\System32",
    "~!@#$%^&*()_+-=[]{}|;':\",./<>?`",
    "...",
    "!!!???",
    "----------",
    "==========",
    "**bold** _italic_ `code`",
    "# Heading\n\n- item 1\n- item 2\n",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "",
]


def programmatic(rng, per_length=12):
    """Seeded strings from pools of characters and fragments."""
    pools = {
        "ascii": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "digit": "0123456789",
        "punct": "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "space": [" ", "  ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000"],
        "accent": "éèêëàâäñçöüßøåœæíóúý",
        "combining": ["e\u0301", "a\u0308", "o\u0302", "n\u0303", "u\u0328"],
        "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
        "kana": "あいうえおかきくけこアイウエオカキクケコ",
        "hangul": "가나다라마바사아자차카타파하",
        "cyrillic": "абвгдежзийклмнопрстуфхцчшщыэюя",
        "emoji": ["😀", "🚀", "👍🏽", "👨‍💻", "🇩🇪", "❤️", "🎉", "🙈"],
        "word": ["the", "tokenizer", "inference", " runtime", "KV", " cache", "Ada", "head",
                 "budget", " GPU", "hello", " world", "don't", "it's", "we'll"],
        "number": ["42", "3.14", "1,024", "2^10", "-7", "100%", "$9.99", "1e5", "007"],
    }
    names = list(pools)
    out = []
    for length in [1, 2, 3, 5, 8, 13, 21, 34, 55, 89]:
        for _ in range(per_length):
            parts = []
            for _ in range(length):
                pool = pools[rng.choice(names)]
                parts.append(rng.choice(pool))
            out.append("".join(parts))
    # Numbers of many shapes.
    for _ in range(30):
        n = rng.randint(0, 10**rng.randint(1, 15))
        form = rng.choice(["{}", "{:,}", " {}", "{}.{}", "#{}", "({})"])
        out.append(form.format(n, rng.randint(0, 999)))
    # Whitespace runs between words.
    for _ in range(30):
        ws = "".join(rng.choice([" ", "\t", "\n", "\r"]) for _ in range(rng.randint(1, 6)))
        out.append(rng.choice(["a", "word", "x1", "!"]) + ws + rng.choice(["b", "next", "", "2"]))
    return out


def long_strings(rng):
    para = (
        "Ada-KV allocates a KV cache budget per attention head: heads that concentrate "
        "their attention keep fewer tokens, heads that spread it keep more. In 2024, the "
        "paper reported 1.5x-2x savings at equal quality (see Table 3, p. 7). "
    )
    code = "def f(n):\n    if n < 2:\n        return n\n    return f(n - 1) + f(n - 2)\n\n"
    mixed = "Résumé: 東京 🗼 → Paris 🥐; temp −3.5°C; ≈ 42 ± 0.1. "
    out = [para * 3, code * 4, mixed * 4]
    words = (para + mixed).split()
    out.append(" ".join(rng.choice(words) for _ in range(400)))
    return out


# Byte strings that are not valid UTF-8.
INVALID = [
    b"\xff",
    b"\xfe\xff",
    b"\x80",
    b"abc\x80def",
    b"abc\xc3",
    b"\xc3(",
    b"\xe4\xbd",
    b"\xe4\xbd\xa0\xe5\xa5",
    b"hello \xe4\xbd world",
    b"\xc0\xaf",
    b"\xe0\x80\xaf",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xf0\x9f\x98",
    b"\xf0\x9f\x98 smile",
    b"  \xa0\xa1  ",
    b"1\x802\x813",
    b" \x80 ",
    b"'\x80s",
    b"<|im_start|>\xff<|im_end|>",
    b"\x01\x02\x03\x04\x05\x06\x07\x08",
    bytes(range(256)),
    bytes(range(255, -1, -1)),
]


def random_bytes(rng, count):
    out = []
    for _ in range(count):
        n = rng.randint(1, 40)
        out.append(bytes(rng.choice([rng.randint(0, 255), rng.randint(0x80, 0xBF),
                                     rng.randint(0x41, 0x7A), 0x20]) for _ in range(n)))
    return out


CHATS = [
    ([{"role": "user", "content": "What is the capital of France?"}], True),
    ([{"role": "user", "content": "Hi"}], False),
    ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}], True),
    (
        [
            {"role": "user", "content": "Write a haiku."},
            {"role": "assistant", "content": "Leaves fall\nquietly\n— autumn."},
            {"role": "user", "content": "Another, in 日本語 please 🙏"},
        ],
        True,
    ),
    ([{"role": "assistant", "content": "I start."}], True),
    ([], True),
    ([{"role": "user", "content": ""}], True),
    ([{"role": "user", "content": "Code:\n```python\nprint('x')\n```\n"}], True),
]


def render_chat(template, messages, add_generation_prompt):
    import jinja2

    env = jinja2.Environment()
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=add_generation_prompt
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.environ.get("ADAKV_MODEL", DEFAULT_MODEL))
    ap.add_argument("--out", help=f"default {DEFAULT_OUT}, or {QWEN2_OUT} for a qwen2 vocabulary")
    args = ap.parse_args()

    meta = read_gguf(args.model)
    qwen2 = meta["pre"] == "qwen2"
    if args.out is None:
        args.out = QWEN2_OUT if qwen2 else DEFAULT_OUT
    oracle, control, user = build_oracle(meta)
    specials = control + user
    emu = Emulator(oracle, control, user)

    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(
        os.path.dirname(args.model), gguf_file=os.path.basename(args.model)
    )
    try:
        import llama_cpp  # noqa: F401

        llama = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    except Exception as e:  # not installed, or it failed to load
        print(f"llama-cpp-python not used: {e}", file=sys.stderr)
        llama = None

    rng = random.Random(20240517)
    # Qwen2.5's goldens take more random strings (its vocabulary is three times SmolLM2's).
    texts = HAND + programmatic(rng, 40 if qwen2 else 12) + long_strings(rng)
    lines = []
    stats = {"transformers_gguf_diff": 0, "llama_cpp_diff": 0, "llama_cpp_checked": 0}

    def add_valid(text, parse_special, kind, extra=None):
        ids = oracle_ids(oracle, text, parse_special)
        emulated = emu.encode(text.encode(), parse_special)
        assert emulated == ids, f"emulation differs from the oracle on {text!r}"
        line = {"text_b64": base64.b64encode(text.encode()).decode(),
                "parse_special": parse_special, "ids": ids, "kind": kind}
        hf.split_special_tokens = not parse_special
        hf_ids = hf.encode(text, add_special_tokens=False)
        if hf_ids != ids:
            stats["transformers_gguf_diff"] += 1
            line["transformers_gguf_ids"] = hf_ids
            print(f"transformers GGUF tokenizer differs on {text!r}: {hf_ids} vs {ids}",
                  file=sys.stderr)
        if llama is not None:
            stats["llama_cpp_checked"] += 1
            ll = llama.tokenize(text.encode(), add_bos=False, special=parse_special)
            if ll != ids:
                stats["llama_cpp_diff"] += 1
                line["llama_cpp_ids"] = ll
                print(f"llama.cpp differs on {text!r}: {ll} vs {ids}", file=sys.stderr)
        if extra:
            line.update(extra)
        lines.append(line)

    for t in texts:
        has_special = any(s in t for s in specials)
        add_valid(t, has_special, "text")
        if has_special:
            add_valid(t, False, "special_as_text")
    # NFD/NFC forms of the accented strings: both must tokenize as written.
    for t in ["café résumé naïve", "Ångström", "mañana"]:
        add_valid(unicodedata.normalize("NFD", t), False, "nfd")

    for data in INVALID + random_bytes(rng, 40):
        try:
            data.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        parse_special = b"<|" in data
        line = {"text_b64": base64.b64encode(data).decode(), "parse_special": parse_special,
                "ids": emu.encode(data, parse_special), "kind": "bytes",
                "invalid_utf8": not valid}
        if valid:
            assert line["ids"] == oracle_ids(oracle, data.decode(), parse_special)
        lines.append(line)

    template = meta["chat_template"]
    for messages, gen in CHATS:
        try:
            text = render_chat(template, messages, gen)
        except Exception as e:  # jinja2's UndefinedError: the template cannot take them
            print(f"chat {messages!r} left out: {e}", file=sys.stderr)
            continue
        if messages:
            via_hf = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
            assert via_hf == text, (via_hf, text)
        add_valid(text, True, "chat", {"chat": messages, "add_generation_prompt": gen})

    with open(args.out, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=True) + "\n")
    size = os.path.getsize(args.out)
    print(f"wrote {len(lines)} lines ({size} bytes) to {args.out}; "
          f"transformers GGUF tokenizer differs on {stats['transformers_gguf_diff']}; "
          f"llama.cpp checked {stats['llama_cpp_checked']}, differs on {stats['llama_cpp_diff']}")


if __name__ == "__main__":
    main()
