// Reading what a tokenizer.json does to text before its BPE model runs: which of adakv's
// pre-tokenizers (tokenizer.ggml.pre) a byte-level one is, and whether a SentencePiece-style
// one puts "▁" before the text (tokenizer.ggml.add_space_prefix).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace adakv::hf {

// The tokenizer.ggml.pre name of a byte-level BPE tokenizer.json's "pre_tokenizer" section:
//   ByteLevel(use_regex)                                   -> "gpt-2"
//   Sequence[Digits(individual_digits), ByteLevel(use_regex)]  -> "smollm"
//   Sequence[Split(Regex P, Isolated), ByteLevel(no regex)]    -> the name whose pattern is P
//                                                               ("llama-bpe", "qwen2", "gpt-2")
// Throws std::runtime_error naming `file` and the part it does not recognise (a Split pattern
// is quoted), never falling back to a default.
std::string byte_level_pre_name(const nlohmann::json& pre_tokenizer, const std::string& file);

// Whether a SentencePiece-style tokenizer.json ("normalizer": Sequence[Prepend("▁"),
// Replace(" ", "▁")], or "pre_tokenizer": Metaspace) puts "▁" before the text. Throws naming
// `file` and the section when neither turns spaces into "▁" the way adakv's SentencePiece
// tokenizer does.
bool spm_add_space_prefix(const nlohmann::json& normalizer, const nlohmann::json& pre_tokenizer,
                          const std::string& file);

}  // namespace adakv::hf
