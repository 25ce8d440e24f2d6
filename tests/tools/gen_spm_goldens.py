#!/usr/bin/env python3
"""Goldens of a SentencePiece vocabulary (Mistral 7B v0.1's tokenizer.model, shipped in the PyPI
package mistral_common as mistral_common/data/tokenizer.model.v1) for
tests/e2e/test_spm_tokenizer_oracle.cpp.

The oracle is the sentencepiece library itself, which llama.cpp's SPM tokenizer follows. HF
tokenizers' fast pipeline, built as transformers' LlamaConverter builds it (legacy: merges from
SentencePieceExtractor, byte fallback, Prepend + Replace normalizer), is run beside it and its
agreement printed, not used: it differs on runs of spaces, where Mistral's vocabulary holds
whitespace pieces scored -1e9 that sentencepiece merges last and HF's merge ranks do not
(the known fast/slow difference of transformers#25069). (LlamaTokenizerFast(vocab_file=...) of
the oracle venv's transformers builds an empty vocabulary from a bare tokenizer.model.) Each line: text_b64, parse_special, ids (with BOS, as the GGUF's
add_bos_token says), round_trip (whether sentencepiece decodes the ids back to the text).

  gen_spm_goldens.py tokenizer.model [--gguf out.gguf] [--out tests/data/...jsonl]
"""
import argparse
import base64
import json
import os
import random
import sys

import sentencepiece

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tokenizer_goldens as common  # noqa: E402  (the string corpora)
import spm_vocab_gguf  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "tokenizer_goldens_spm.jsonl")

# Characters the 32k vocabulary lacks, so that byte fallback is exercised; and SentencePiece's
# own space symbol written in the text.
EXTRA = [
    "\u2581already a meta space",
    "\U0001F600\U0001F680\U0001F9D1\u200D\U0001F4BB",
    "\u0F00\u0F01 Tibetan, \u1200\u1201 Ethiopic, \u13A0 Cherokee",
    "\U0001D400\U0001D401 math bold",
    "\uFFFD replacement",
    "tab\tseparated\tvalues\t",
    "    four leading spaces",
    "trailing     ",
    "\n",
    "\n\n\n",
    "  ",
    "0123456789 1,234,567.89 3.14159e-10",
    "def f(x):\n    return x ** 2  # square\n",
    "<s> and </s> written as text",
]


def hf_fast(model_path):
    """HF tokenizers' pipeline for a legacy Llama/Mistral tokenizer.model, or None without it."""
    try:
        from tokenizers import Tokenizer, decoders, models, normalizers
        from transformers.convert_slow_tokenizer import SentencePieceExtractor
    except ImportError as e:
        print(f"HF comparison skipped: {e}", file=sys.stderr)
        return None
    r = SentencePieceExtractor(model_path).extract(None)
    tk = Tokenizer(models.BPE(r["vocab"], r["merges"], unk_token="<unk>", fuse_unk=True,
                              byte_fallback=True))
    tk.normalizer = normalizers.Sequence(
        [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                    decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return tk


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("model", help="a SentencePiece tokenizer.model")
    ap.add_argument("--gguf", help="also write the vocabulary GGUF here")
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    sp = sentencepiece.SentencePieceProcessor(model_file=args.model)
    hf = hf_fast(args.model)
    rng = random.Random(1234)
    texts = common.HAND + EXTRA + common.programmatic(rng, 30) + common.long_strings(rng)

    seen, lines, hf_same, hf_total = set(), [], 0, 0
    for text in texts:
        if text in seen:
            continue
        seen.add(text)
        ids = ([sp.bos_id()] + sp.encode(text)) if text else [sp.bos_id()]
        if hf is not None and text:
            hf_total += 1
            hf_same += [sp.bos_id()] + hf.encode(text, add_special_tokens=False).ids == ids
        lines.append({
            "text_b64": base64.b64encode(text.encode("utf-8")).decode(),
            "parse_special": False,
            "ids": ids,
            "round_trip": sp.decode(ids[1:]) == text,
        })
    with open(args.out, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    print(f"{len(lines)} lines -> {args.out}")
    if hf is not None:
        print(f"HF tokenizers' fast pipeline gives the same ids on {hf_same} of {hf_total} "
              "non-empty strings")
    if args.gguf:
        spm_vocab_gguf.write(args.model, args.gguf)


if __name__ == "__main__":
    main()
