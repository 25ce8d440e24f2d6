// The tokenizer of a Hugging Face checkpoint directory (tokenizer.json, tokenizer_config.json)
// as the GGUF metadata llama.cpp's converter would write for it (tokenizer.ggml.*,
// tokenizer.chat_template), so that the GGUF vocabulary loader serves both kinds of model.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/gguf/gguf.h"

namespace adakv::hf {

// Throws std::runtime_error naming the file and the field it cannot read or does not support.
std::vector<std::pair<std::string, gguf::Value>> tokenizer_metadata(const std::string& dir);

}  // namespace adakv::hf
