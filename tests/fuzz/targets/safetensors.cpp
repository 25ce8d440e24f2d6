// safetensors images: the header must parse or throw SafetensorsError, and every tensor it hands
// out must lie inside the image (read whole, so that ASan sees any byte outside it).
#include "model/hf/safetensors.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace adakv::hf;
  try {
    const auto f = SafetensorsFile::parse(data, size);
    const uint8_t* begin = f->image();
    const uint8_t* end = begin + f->image_size();
    unsigned sum = 0;
    for (const SafetensorsTensor& t : f->tensors()) {
      if (t.data < begin || t.n_bytes > uint64_t(end - t.data)) __builtin_trap();
      if (t.n_bytes != t.n_elements * dtype_bytes(t.dtype)) __builtin_trap();
      if (f->find(t.name) == nullptr) __builtin_trap();
      for (uint64_t i = 0; i < t.n_bytes; ++i) sum += t.data[i];
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const SafetensorsError&) {
  }
  return 0;
}
