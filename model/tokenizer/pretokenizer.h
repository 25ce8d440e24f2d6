// The pre-tokenizer named by tokenizer.ggml.pre: a list of regex stages, each applied to every
// piece the previous stage produced (a piece's ends are the subject's ends for the next stage,
// as in llama.cpp and in HF tokenizers' Sequence pre-tokenizer).
//
// Known names (as llama.cpp reads them):
//   "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b":
//        every \p{N} character its own piece, then the GPT-2 pattern;
//   "gpt2", "gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "trillion":
//        the GPT-2 pattern;
//   "llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe": the Llama 3 pattern;
//   "qwen2": the Llama 3 pattern with single digits (\p{N} for \p{N}{1,3});
//   "default": llama.cpp's default list (punctuation runs, GPT-2, \p{N}+, then 3 digits).
// The GPT-2 pattern is written as HF tokenizers' ByteLevel has it, with the final `|\s+`
// (llama.cpp's hand-written matcher of the pattern behaves the same way). \s in the patterns means
// the Unicode White_Space property, as in Oniguruma and llama.cpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/regex_splitter.h"

namespace adakv::tokenizer {

// The regex of each stage of the named pre-tokenizer, as written above (\s not yet rewritten), so
// that a tokenizer.json's Split pattern can be matched to a name. Throws as PreTokenizer does.
std::vector<std::string> pretokenizer_patterns(const std::string& name);

// Whether byte-level BPE takes a piece that is a token whole, before merging: for "llama3",
// "llama-v3", "llama-bpe" and "falcon3", as llama.cpp does (Llama 3's tokenizer.json sets
// ignore_merges).
bool pretokenizer_ignores_merges(const std::string& name);

class PreTokenizer {
 public:
  // Throws std::runtime_error listing the known names if name is not one of them.
  explicit PreTokenizer(const std::string& name);

  // Appends the pieces of text in order; together they are exactly text. Thread-safe.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::vector<RegexSplitter> stages_;
};

}  // namespace adakv::tokenizer
