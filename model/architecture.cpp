#include "model/architecture.h"

#include <fmt/format.h>

#include <stdexcept>

namespace adakv::model {

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> known = {
      {"llama", RopePairs::kAdjacent, false},
      // Qwen2 / Qwen2.5: llama plus biases on q, k and v; llama.cpp's converter leaves q and k in
      // Hugging Face's order (llama.cpp rotates them NEOX-style).
      {"qwen2", RopePairs::kHalves, true},
  };
  return known;
}

const Architecture& find_architecture(const std::string& name, const std::string& file) {
  std::string names;
  for (const Architecture& a : architectures()) {
    if (name == a.name) return a;
    names += fmt::format("{}{}", names.empty() ? "" : ", ", a.name);
  }
  throw std::runtime_error(fmt::format(
      "{}: general.architecture is '{}', which adakv does not run (known: {})", file, name, names));
}

const char* to_string(RopePairs pairs) {
  return pairs == RopePairs::kAdjacent ? "adjacent pairs" : "halves (NEOX)";
}

}  // namespace adakv::model
