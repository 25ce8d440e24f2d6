#!/usr/bin/env python3
"""Writes a GGUF holding only the tokenizer.ggml.* keys of a SentencePiece tokenizer.model, as
llama.cpp's converter (convert_hf_to_gguf.py, _create_vocab_sentencepiece) writes them for
llama / mistral: model "llama", tokens, scores, token types, bos/eos/unk ids, add_bos_token,
add_space_prefix. Needs the sentencepiece and gguf packages (no torch), so the setup can run it.

  spm_vocab_gguf.py tokenizer.model out.gguf
"""
import sys

import gguf
import sentencepiece


def token_type(sp, i):
    # llama.cpp's order of checks (SentencePieceTokenTypes).
    if sp.is_unknown(i):
        return gguf.TokenType.UNKNOWN
    if sp.is_control(i):
        return gguf.TokenType.CONTROL
    if sp.is_unused(i):
        return gguf.TokenType.UNUSED
    if sp.is_byte(i):
        return gguf.TokenType.BYTE
    return gguf.TokenType.NORMAL


def write(model_path, out_path):
    sp = sentencepiece.SentencePieceProcessor(model_file=model_path)
    n = sp.vocab_size()
    w = gguf.GGUFWriter(out_path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list([sp.id_to_piece(i).encode("utf-8") for i in range(n)])
    w.add_token_scores([sp.get_score(i) for i in range(n)])
    w.add_token_types([int(token_type(sp, i)) for i in range(n)])
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    # The normalizer's add_dummy_prefix, seen from outside rather than read from the protobuf
    # (which would need the protobuf package).
    w.add_add_space_prefix(sp.encode("a", out_type=str)[0].startswith("\u2581"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    write(sys.argv[1], sys.argv[2])
