// GGUF images: the reader must accept or throw GgufError, never read outside the image; every
// tensor it yields is dequantized, and the metadata goes through the readers a model load runs
// (hyper-parameters and vocabulary), which may refuse it with any std::exception.
#include "model/gguf/gguf.h"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

#include "model/config.h"
#include "model/gguf/dequant.h"
#include "model/tokenizer/tokenizer.h"

namespace {

using namespace adakv;

// A tensor may claim more elements than a fuzz input could hold bytes for only if the reader
// failed to check it against the data section; decoding stays bounded either way.
constexpr uint64_t kMaxDequantElements = uint64_t(1) << 20;

void dequantize_all(const gguf::GgufFile& f) {
  std::vector<float> out;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (!gguf::can_dequantize(t.type) || t.n_elements > kMaxDequantElements) continue;
    const uint8_t* data = f.tensor_data(t);
    if (t.n_bytes != gguf::bytes_for(t.type, t.n_elements)) __builtin_trap();
    out.resize(t.n_elements);
    gguf::dequantize(t.type, data, out.data(), t.n_elements);
  }
}

void read_metadata(const gguf::GgufFile& f) {
  for (const auto& [key, v] : f.metadata()) {
    try {
      (void)v.as_int();
    } catch (const gguf::GgufError&) {
    }
    try {
      (void)v.as_float();
    } catch (const gguf::GgufError&) {
    }
  }
  try {
    (void)model::ModelConfig::from_gguf(f);
  } catch (const std::exception&) {
  }
  try {
    const tokenizer::Tokenizer tok(tokenizer::vocab_from_gguf(f));
    (void)tok.encode("Hello world 123", /*parse_special=*/true);
  } catch (const std::exception&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const gguf::GgufFile f = gguf::GgufFile::parse(data, size);
    dequantize_all(f);
    read_metadata(f);
  } catch (const gguf::GgufError&) {
  }
  return 0;
}
