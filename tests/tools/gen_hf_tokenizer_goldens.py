#!/usr/bin/env python3
r"""Writes tests/data/tokenizer_goldens_hf_<name>.jsonl: the ids HF `tokenizers` gives for a
corpus of strings, for each tokenizer directory that tests/tools/make_hf_tokenizers.py wrote
(smollm2, qwen2.5, llama3, mistral), for tests/e2e/test_hf_tokenizer_oracle.cpp, which builds
adakv's tokenizer from adakv::hf::tokenizer_metadata of the same directory.

  gen_hf_tokenizer_goldens.py DIR [--out-dir tests/data] [--spm tokenizer.model]

Each line: text_b64, parse_special, ids (encode with add_special_tokens, so BOS where the
post-processor adds it), kind. parse_special false is HF's encode_special_tokens (special tokens
in the text are plain text; added tokens that are not special still match), which is adakv's
encode(text, false).

Mistral: with --spm (its tokenizer.model), lines where sentencepiece itself gives other ids than
HF's fast tokenizer carry them as "sentencepiece_ids", and the script prints how many there are.
With merges ordered by score, as make_hf_tokenizers.py writes them, there were none; merges in
id order (transformers' generate_merges without scores) differ on runs of spaces.

Llama 3: with --tiktoken (llama-models' tokenizer.model) and the tiktoken package, lines where
tiktoken (Meta's own tokenizer) gives other ids carry them as "tiktoken_ids", and the script
prints how many there are (none when these goldens were written).
"""
import argparse
import base64
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tokenizer_goldens as common  # noqa: E402  (the string corpora)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Strings at the edges of the pre-tokenizer patterns: contractions (HF matches them
# case-insensitively in the Unicode sense: "'ſ" is "'s"), digit runs, space and newline runs,
# and text the merges alone would split otherwise than the vocabulary.
EDGES = [
    "it's", "IT'S", "It'S", "we'LL", "they'RE", "I'M", "you'Ve", "he'D", "don'T",
    "it'ſ", "a'ſx", "'ſ", "x'K", "'\u212a", "''s", "'s's", "' s",
    "1", "12", "123", "1234", "1234567", "12345678901", " 123 4567", "a1b22c333d4444",
    "\u0661\u0662\u0663\u0664", "\u00b2\u00b3", "\u2460\u2461", "\uff11\uff12\uff13\uff14",
    "  a", "   a", "a  ", "a   \n", " \n \n", "\n \n", "a\n  b", "a \n\n  b", "\r\n\r\n",
    "    four leading spaces", "trailing     ", "a" + " " * 16 + "b", " " * 7, "x\n" + " " * 9 + "y",
    "\t\ta", "a\t\t", "\u00a0a", "a\u00a0\u00a0b", "\u3000\u3000x", "\u2028x", "\u180e x",
    "x\u200by", "!!!\n\n", "...\r\n", " ?!\n", "--\n\n--",
    "\u4e2d\u6587\u5b57\u7b26 mixed \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4",
    "\U0001F600\U0001F680 \U0001F9D1\u200D\U0001F4BB \U0001F1E9\U0001F1EA",
    "caf\u00e9 cafe\u0301 na\u00efve \u00c5ngstr\u00f6m",
    "\u2581already a meta space", "tab\tseparated\tvalues\t",
    # Words that are Llama 3 tokens but that its merges would split (it ignores merges for a
    # piece that is a token), and the same words in other vocabularies.
    "Ti\u1ebfng Vi\u1ec7t: vi\u1ec7c h\u1ee3p nhi\u1ec1u \u0111i\u1ec1u bi\u1ebft",
    "yap\u0131lmaktad\u0131r ektedir mektedir lardan de\u011fi\u015f",
    "\u0445\u0430\u0440\u0430\u043a\u0442 \u043a\u0430\u0436\u0434",
    "def f(x):\n    return x ** 2  # square\n",
]

SPECIALS = {
    "smollm2": ["<|im_start|>user\nHello<|im_end|>\n", "a<|endoftext|>b", "<repo_name>x"],
    "qwen2.5": [
        "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
        "<tool_call>\n{}\n</tool_call>", "<|fim_prefix|>def<|fim_suffix|>x<|fim_middle|>",
    ],
    "llama3": [
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
        "x<|reserved_special_token_7|>y", "<|python_tag|>print(1)<|eom_id|>",
    ],
    "mistral": ["<s>[INST] hi [/INST] hello</s>", "a</s>b", "<unk>"],
}


def corpus(name):
    rng = random.Random(20251205)
    texts = common.HAND + EDGES + common.programmatic(rng, 8)
    texts += [s[:600] for s in common.long_strings(rng)]
    return [(t, False, "text") for t in texts] + [
        (t, p, "special") for t in SPECIALS.get(name, []) for p in (False, True)
    ]


def llama3_tiktoken(model_path):
    """Meta's tokenizer: tiktoken over the ranks, with Llama 3.1's 256 special tokens."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    import make_hf_tokenizers as make

    ranks = load_tiktoken_bpe(model_path)
    specials = make.LLAMA3_SPECIALS + [
        f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(make.LLAMA3_SPECIALS))
    ]
    return tiktoken.Encoding(
        name="llama3",
        pat_str=make.LLAMA3_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={s: len(ranks) + i for i, s in enumerate(specials)},
    )


def main():
    from tokenizers import Tokenizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="the --out of make_hf_tokenizers.py")
    ap.add_argument("--out-dir", default=os.path.join(REPO, "tests", "data"))
    ap.add_argument("--spm", help="Mistral's tokenizer.model, to compare with sentencepiece")
    ap.add_argument("--tiktoken", help="Llama 3's tokenizer.model, to compare with tiktoken")
    a = ap.parse_args()
    for name in ["smollm2", "qwen2.5", "llama3", "mistral"]:
        path = os.path.join(a.dir, name, "tokenizer.json")
        if not os.path.exists(path):
            print(f"{name}: no {path}, skipped")
            continue
        tok = Tokenizer.from_file(path)
        sp = None
        if name == "mistral" and a.spm:
            import sentencepiece

            sp = sentencepiece.SentencePieceProcessor(model_file=a.spm)
        tt = llama3_tiktoken(a.tiktoken) if name == "llama3" and a.tiktoken else None
        out = os.path.join(a.out_dir, f"tokenizer_goldens_hf_{name}.jsonl")
        differ = 0
        lines = corpus(name)
        with open(out, "w") as f:
            for text, parse_special, kind in lines:
                tok.encode_special_tokens = not parse_special
                ids = tok.encode(text, add_special_tokens=True).ids
                line = {
                    "text_b64": base64.b64encode(text.encode()).decode(),
                    "parse_special": parse_special,
                    "ids": ids,
                    "kind": kind,
                }
                if sp is not None and not parse_special:
                    sp_ids = [sp.bos_id()] + sp.encode(text)
                    if sp_ids != ids:
                        line["sentencepiece_ids"] = sp_ids
                        differ += 1
                if tt is not None:
                    bos = tt.n_vocab - 256
                    special = "all" if parse_special else set()
                    tt_ids = [bos] + tt.encode(text, allowed_special=special, disallowed_special=())
                    if tt_ids != ids:
                        line["tiktoken_ids"] = tt_ids
                        differ += 1
                f.write(json.dumps(line) + "\n")
        note = ""
        if sp is not None:
            note = f", sentencepiece differs on {differ}"
        if tt is not None:
            note = f", tiktoken differs on {differ}"
        print(f"{name}: {len(lines)} lines -> {out}{note}")


if __name__ == "__main__":
    main()
