#include "model/hf/hf_tokenizer.h"

#include <stdexcept>

namespace adakv::hf {

std::vector<std::pair<std::string, gguf::Value>> tokenizer_metadata(const std::string& dir) {
  throw std::runtime_error(dir + ": reading tokenizer.json is not implemented yet");
}

}  // namespace adakv::hf
