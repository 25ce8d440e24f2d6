// Corrupt and truncated safetensors images: every case must parse or throw SafetensorsError,
// never crash, throw anything else, or hand out a tensor pointer outside the image. Run under
// ASan+UBSan too (-DADAKV_SANITIZE=ON).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/hf/safetensors.h"

namespace adakv::hf {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes valid_image() {
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
                             R"("c":{"dtype":"F16","shape":[],"data_offsets":[32,34]}})";
  std::string h = header;
  h.resize((h.size() + 7) / 8 * 8, ' ');
  Bytes out(8);
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  out.insert(out.end(), h.begin(), h.end());
  for (int i = 0; i < 34; ++i) out.push_back(static_cast<uint8_t>(i * 7));
  return out;
}

// Parses and reads every tensor byte; "" on success, else the SafetensorsError message.
std::string try_parse(const Bytes& b) {
  try {
    const auto f = SafetensorsFile::parse(b.data(), b.size());
    const uint8_t *begin = f->image(), *end = begin + f->image_size();
    unsigned sum = 0;
    for (const auto& t : f->tensors()) {
      EXPECT_TRUE(t.data >= begin && t.data + t.n_bytes <= end) << t.name;
      for (uint64_t i = 0; i < t.n_bytes; ++i) sum += t.data[i];
    }
    (void)sum;
    return "";
  } catch (const SafetensorsError& e) {
    return e.what();
  }
}

TEST(CorruptSafetensors, ValidImageParses) {
  EXPECT_EQ(try_parse(valid_image()), "");
}

TEST(CorruptSafetensors, EveryTruncationThrows) {
  const Bytes full = valid_image();
  for (size_t n = 0; n < full.size(); ++n) {
    const Bytes cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_NE(try_parse(cut), "") << "truncated to " << n << " bytes";
  }
}

TEST(CorruptSafetensors, RandomByteFlipsParseOrThrow) {
  const Bytes base = valid_image();
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 20000; ++trial) {
    Bytes b = base;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      b[rng() % b.size()] = static_cast<uint8_t>(rng());
    }
    try_parse(b);  // EXPECTs inside; anything but SafetensorsError escapes and fails the test
  }
}

}  // namespace
}  // namespace adakv::hf
