// config.json of a Hugging Face checkpoint: parse_config must give metadata or throw
// std::runtime_error naming the field (a JSON syntax error included), never anything else.
#include "model/hf/hf_config.h"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const adakv::hf::HfConfig c = adakv::hf::parse_config(text, "config.json", "fuzz");
    if (c.architecture.empty()) __builtin_trap();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
