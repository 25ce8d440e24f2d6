#include <stdexcept>

#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

namespace adakv::tokenizer {

Vocab vocab_from_gguf(const gguf::GgufFile& file) {
  const std::string model = file.get_string("tokenizer.ggml.model");
  if (model != "gpt2" && model != "llama") {
    throw std::runtime_error("tokenizer: tokenizer.ggml.model is '" + model + "' in " +
                             file.path() +
                             "; supported: byte-level BPE ('gpt2'), SentencePiece BPE ('llama')");
  }
  Vocab v;
  v.model = model;
  v.tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (v.tokens.empty()) {
    throw std::runtime_error("tokenizer: tokenizer.ggml.tokens is empty in " + file.path());
  }
  if (model == "gpt2") {
    if (file.find("tokenizer.ggml.merges") == nullptr) {
      throw std::runtime_error("tokenizer: tokenizer.ggml.merges is missing in " + file.path());
    }
    v.merges = file.get_string_array("tokenizer.ggml.merges");
  } else {
    // SentencePiece merges by score: without scores every merge would tie.
    if (file.find("tokenizer.ggml.scores") == nullptr) {
      throw std::runtime_error("tokenizer: tokenizer.ggml.scores is missing in " + file.path());
    }
    const std::vector<double> scores = file.get_float_array("tokenizer.ggml.scores");
    if (scores.size() != v.tokens.size()) {
      throw std::runtime_error("tokenizer: tokenizer.ggml.scores has " +
                               std::to_string(scores.size()) + " entries for " +
                               std::to_string(v.tokens.size()) + " tokens in " + file.path());
    }
    v.scores.assign(scores.begin(), scores.end());
    v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix", true);
  }
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != v.tokens.size()) {
      throw std::runtime_error("tokenizer: tokenizer.ggml.token_type has " +
                               std::to_string(types.size()) + " entries for " +
                               std::to_string(v.tokens.size()) + " tokens in " + file.path());
    }
    v.token_types.assign(types.begin(), types.end());
  }
  v.pre = file.get_string("tokenizer.ggml.pre", "default");
  const auto n = static_cast<int64_t>(v.tokens.size());
  auto id = [&](const char* key) -> int32_t {
    const int64_t x = file.get_int(key, -1);
    if (x < -1 || x >= n) {
      throw std::runtime_error(std::string("tokenizer: ") + key + " = " + std::to_string(x) +
                               " is outside the vocabulary of " + std::to_string(n) + " in " +
                               file.path());
    }
    return static_cast<int32_t>(x);
  };
  v.bos_id = id("tokenizer.ggml.bos_token_id");
  v.eos_id = id("tokenizer.ggml.eos_token_id");
  v.pad_id = id("tokenizer.ggml.padding_token_id");
  v.unk_id = id("tokenizer.ggml.unknown_token_id");
  v.eot_id = id("tokenizer.ggml.eot_token_id");
  v.eom_id = id("tokenizer.ggml.eom_token_id");
  // llama.cpp adds BOS to SentencePiece vocabularies whose file does not say.
  v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token", model == "llama");
  v.chat_template = file.get_string("tokenizer.chat_template", "");
  return v;
}

}  // namespace adakv::tokenizer
