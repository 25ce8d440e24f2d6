#!/usr/bin/env python3
r"""Writes Hugging Face tokenizer directories (tokenizer.json, tokenizer_config.json, and
config.json where the model's vocab_size is larger than the tokenizer) for the oracle test of
adakv::hf::tokenizer_metadata (tests/e2e/test_hf_tokenizer_oracle.cpp), without the HF hub:

  smollm2/   SmolLM2-135M-Instruct: vocabulary, merges, special tokens and chat template of the
             GGUF, with the pre-tokenizer of its tokenizer.json on the hub,
             Sequence[Digits(individual_digits), ByteLevel(use_regex)].
  qwen2.5/   Qwen2.5-Coder-0.5B-Instruct the same way: Sequence[Split(Regex(Qwen2's pattern),
             Isolated), ByteLevel(use_regex=False)], vocab_size 151936 in config.json (the ids
             above the tokenizer's are padding). The hub's file also has an NFC normalizer, which
             llama.cpp's converter drops and adakv does not run; it is left out here.
  llama3/    Llama 3.1's tiktoken vocabulary (llama_models/llama3/tokenizer.model in the PyPI
             wheel llama-models), as a BPE tokenizer.json the way transformers' TikTokenConverter
             builds one: byte-level tokens by rank, the merges that make each token from two
             shorter ones ordered by the rank of what they make, ignore_merges, the 256 special
             tokens from 128000, Split(Regex(Llama 3's pattern)) + ByteLevel, and BOS added by
             a TemplateProcessing post-processor.
  mistral/   Mistral 7B v0.1's SentencePiece vocabulary (tokenizer.model in the PyPI wheel
             mistral_common) as transformers' LlamaConverter builds it (legacy form): BPE with
             byte_fallback, the merges that make each piece from two others ordered by the
             piece's score (highest first; ties by id, where transformers puts longer left
             pieces first), normalizer Prepend("▁") + Replace(" ", "▁"), <s> added by
             TemplateProcessing.

Needs the PyPI packages tokenizers, gguf and sentencepiece (no transformers, no torch).

  make_hf_tokenizers.py --out DIR [--smollm2 GGUF] [--qwen GGUF] [--llama3 tokenizer.model]
                        [--mistral tokenizer.model]
Each directory is written only for the inputs given.
"""
import argparse
import base64
import json
import os

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)

LLAMA3_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    "<|image|>",
]

# A short Llama 3 chat template (the hub's also renders tools and dates).
LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)


def byte_chars():
    """GPT-2's byte-to-unicode table: printable bytes stand for themselves, the rest for
    characters from U+0100 up."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)


def save(out_dir, tok, config, model_config=None):
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    write_json(os.path.join(out_dir, "tokenizer_config.json"), config)
    if model_config:
        write_json(os.path.join(out_dir, "config.json"), model_config)


def from_gguf(path, pre_tokenizer, out_dir):
    """A byte-level tokenizer.json with the GGUF's vocabulary, merges and special tokens."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    r = GGUFReader(path)

    def field(name, default=None):
        return r.fields[name].contents() if name in r.fields else default

    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ")) for m in field("tokenizer.ggml.merges")]
    # Padding ids (type 5, "[PAD<id>]") are not tokens of the HF tokenizer; config.json's
    # vocab_size covers them.
    vocab = {t: i for i, t in enumerate(tokens) if types[i] != 5}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    added = []
    for i, t in enumerate(tokens):
        if types[i] in (3, 4):
            added.append(AddedToken(t, special=types[i] == 3, normalized=False))
    tok.add_tokens(added)

    def token(key):
        i = field(key)
        return tokens[i] if i is not None else None

    config = {
        "bos_token": token("tokenizer.ggml.bos_token_id"),
        "eos_token": token("tokenizer.ggml.eos_token_id"),
        "pad_token": token("tokenizer.ggml.padding_token_id"),
        "unk_token": token("tokenizer.ggml.unknown_token_id"),
        "add_bos_token": bool(field("tokenizer.ggml.add_bos_token", False)),
        "chat_template": field("tokenizer.chat_template"),
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    model_config = {"vocab_size": len(tokens)} if len(vocab) + 0 < len(tokens) else None
    save(out_dir, tok, config, model_config)
    # The ids of the added tokens must be the GGUF's.
    for i, t in enumerate(tokens):
        if types[i] in (3, 4) and tok.token_to_id(t) != i:
            raise SystemExit(f"{out_dir}: added token {t!r} got id {tok.token_to_id(t)}, not {i}")


def smollm2(gguf_path, out_dir):
    from tokenizers import pre_tokenizers

    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    from_gguf(gguf_path, pre, out_dir)


def split_then_byte_level(pattern):
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def qwen(gguf_path, out_dir):
    from_gguf(gguf_path, split_then_byte_level(QWEN2_PATTERN), out_dir)


def pair_merges(ranks, order_key):
    """Every (left, right) whose both pieces and their concatenation are tokens, grouped by the
    token they make in `order_key` order, within a token by the pieces' ranks."""
    merges = []
    for token in sorted(ranks, key=order_key):
        local = []
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                local.append((ranks[left], ranks[right], left, right))
        local.sort()
        merges.extend((left, right) for _, _, left, right in local)
    return merges


def llama3(model_path, out_dir):
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    ranks = {}
    with open(model_path, "rb") as f:
        for line in f:
            if line.strip():
                b64, rank = line.split()
                ranks[base64.b64decode(b64)] = int(rank)
    chars = byte_chars()

    def spell(b):
        return "".join(chars[x] for x in b)

    merges = pair_merges(ranks, lambda t: ranks[t])
    vocab = {spell(t): r for t, r in ranks.items()}
    tok = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=[(spell(a), spell(b)) for a, b in merges],
            fuse_unk=False,
            byte_fallback=False,
            ignore_merges=True,
        )
    )
    tok.pre_tokenizer = split_then_byte_level(LLAMA3_PATTERN)
    tok.decoder = decoders.ByteLevel()
    n = len(ranks)
    specials = LLAMA3_SPECIALS + [
        f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(LLAMA3_SPECIALS))
    ]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    for i, s in enumerate(specials):
        assert tok.token_to_id(s) == n + i
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                special_tokens=[("<|begin_of_text|>", n)],
            ),
        ]
    )
    config = {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "chat_template": LLAMA3_TEMPLATE,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    save(out_dir, tok, config)


def mistral(model_path, out_dir):
    import sentencepiece
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

    sp = sentencepiece.SentencePieceProcessor(model_file=model_path)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    ids = {p: i for i, p in enumerate(pieces)}
    scores = [sp.get_score(i) for i in range(len(pieces))]
    merges = pair_merges(ids, lambda p: (-scores[ids[p]], ids[p]))
    tok = Tokenizer(
        models.BPE(vocab=ids, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    )
    tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
    )
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("\u2581", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", ids["<s>"])]
    )
    config = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "tokenizer_class": "LlamaTokenizer",
    }
    save(out_dir, tok, config)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--smollm2")
    ap.add_argument("--qwen")
    ap.add_argument("--llama3")
    ap.add_argument("--mistral")
    a = ap.parse_args()
    if a.smollm2:
        smollm2(a.smollm2, os.path.join(a.out, "smollm2"))
    if a.qwen:
        qwen(a.qwen, os.path.join(a.out, "qwen2.5"))
    if a.llama3:
        llama3(a.llama3, os.path.join(a.out, "llama3"))
    if a.mistral:
        mistral(a.mistral, os.path.join(a.out, "mistral"))


if __name__ == "__main__":
    main()
