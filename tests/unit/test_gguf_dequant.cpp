// Block decoding against goldens from the `gguf` PyPI package (tests/tools/gen_dequant_goldens.py),
// compared bit for bit, and the block-size table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gguf/dequant.h"

namespace adakv::gguf {
namespace {

struct Case {
  uint32_t type_id;
  std::vector<uint8_t> raw;
  std::vector<float> expected;
};

struct Goldens {
  std::vector<Case> cases;
  std::vector<std::pair<uint32_t, uint16_t>> f32_to_f16;
  uint64_t f16_table_hash = 0;
};

class Reader {
 public:
  explicit Reader(std::vector<uint8_t> bytes) : b_(std::move(bytes)) {}
  template <class T>
  T get() {
    T v;
    read(&v, sizeof(T));
    return v;
  }
  void read(void* dst, size_t n) {
    if (n > b_.size() - pos_) throw std::runtime_error("golden file is truncated");
    std::memcpy(dst, b_.data() + pos_, n);
    pos_ += n;
  }
  bool at_end() const { return pos_ == b_.size(); }

 private:
  std::vector<uint8_t> b_;
  size_t pos_ = 0;
};

Goldens load_goldens() {
  const std::string path = std::string(ADAKV_TEST_DATA_DIR) + "/dequant_goldens.bin";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  Reader r(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}));
  char magic[8];
  r.read(magic, 8);
  if (std::memcmp(magic, "ADKVDQG1", 8) != 0) throw std::runtime_error("bad golden magic");
  Goldens g;
  const uint32_t n_cases = r.get<uint32_t>();
  for (uint32_t i = 0; i < n_cases; ++i) {
    Case c;
    c.type_id = r.get<uint32_t>();
    const uint32_t n = r.get<uint32_t>();
    const uint32_t n_bytes = r.get<uint32_t>();
    c.raw.resize(n_bytes);
    r.read(c.raw.data(), n_bytes);
    c.expected.resize(n);
    r.read(c.expected.data(), n * sizeof(float));
    g.cases.push_back(std::move(c));
  }
  const uint32_t n_conv = r.get<uint32_t>();
  for (uint32_t i = 0; i < n_conv; ++i) {
    const uint32_t f = r.get<uint32_t>();
    const uint16_t h = r.get<uint16_t>();
    g.f32_to_f16.emplace_back(f, h);
  }
  g.f16_table_hash = r.get<uint64_t>();
  if (!r.at_end()) throw std::runtime_error("trailing bytes in the golden file");
  return g;
}

const Goldens& goldens() {
  static const Goldens g = load_goldens();
  return g;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(GgufDequant, MatchesOracleBitForBit) {
  for (const Case& c : goldens().cases) {
    const GgmlType t = type_from_id(c.type_id);
    SCOPED_TRACE(type_name(t));
    ASSERT_TRUE(can_dequantize(t));
    ASSERT_EQ(bytes_for(t, c.expected.size()), c.raw.size());
    std::vector<float> got(c.expected.size(), -12345.0f);
    dequantize(t, c.raw.data(), got.data(), got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(bits_of(got[i]), bits_of(c.expected[i]))
          << "element " << i << " (block " << i / block_elements(t) << "): got " << got[i]
          << ", oracle " << c.expected[i];
    }
  }
}

TEST(GgufDequant, GoldensCoverEveryDecodableType) {
  std::set<uint32_t> covered;
  for (const Case& c : goldens().cases) covered.insert(c.type_id);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    EXPECT_TRUE(covered.count(static_cast<uint32_t>(t))) << type_name(t);
  }
}

TEST(GgufDequant, Fp32ToFp16MatchesNumpy) {
  ASSERT_FALSE(goldens().f32_to_f16.empty());
  for (const auto& [f, h] : goldens().f32_to_f16) {
    ASSERT_EQ(fp32_to_fp16(float_of(f)), h) << std::hex << "float bits 0x" << f;
  }
}

TEST(GgufDequant, Fp16ToFp32MatchesNumpyForAllHalves) {
  uint64_t hash = 0xCBF29CE484222325ull;  // FNV-1a, as the generator computes it
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t b = bits_of(fp16_to_fp32(static_cast<uint16_t>(h)));
    for (int k = 0; k < 4; ++k) {
      hash ^= (b >> (8 * k)) & 0xFF;
      hash *= 0x100000001B3ull;
    }
  }
  EXPECT_EQ(hash, goldens().f16_table_hash);
}

TEST(GgufDequant, Fp16RoundTripsEveryNonNanHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(GgufDequant, Bf16IsTheHighHalf) {
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xC000), -2.0f);
  EXPECT_EQ(bits_of(bf16_to_fp32(0x8000)), 0x80000000u);
}

TEST(GgufDequant, BlockSizes) {
  struct Expect {
    GgmlType t;
    size_t elems, bytes;
  };
  const Expect table[] = {
      {GgmlType::F32, 1, 4},      {GgmlType::F16, 1, 2},      {GgmlType::BF16, 1, 2},
      {GgmlType::Q4_0, 32, 18},   {GgmlType::Q4_1, 32, 20},   {GgmlType::Q5_0, 32, 22},
      {GgmlType::Q5_1, 32, 24},   {GgmlType::Q8_0, 32, 34},   {GgmlType::Q8_1, 32, 36},
      {GgmlType::Q2_K, 256, 84},  {GgmlType::Q3_K, 256, 110}, {GgmlType::Q4_K, 256, 144},
      {GgmlType::Q5_K, 256, 176}, {GgmlType::Q6_K, 256, 210}, {GgmlType::Q8_K, 256, 292},
  };
  for (const Expect& e : table) {
    SCOPED_TRACE(type_name(e.t));
    EXPECT_EQ(block_elements(e.t), e.elems);
    EXPECT_EQ(block_bytes(e.t), e.bytes);
    EXPECT_EQ(type_from_id(static_cast<uint32_t>(e.t)), e.t);
    EXPECT_EQ(bytes_for(e.t, 4 * e.elems), 4 * e.bytes);
  }
  EXPECT_STREQ(type_name(GgmlType::Q4_1), "Q4_1");
  EXPECT_EQ(bytes_for(GgmlType::Q8_0, 576), 18u * 34u);
}

TEST(GgufDequant, RejectsBadInput) {
  EXPECT_THROW(type_from_id(4), GgufError);  // Q4_2, long removed
  EXPECT_THROW(type_from_id(31), GgufError);
  EXPECT_THROW(type_from_id(0xFFFFFFFF), GgufError);
  EXPECT_THROW(bytes_for(GgmlType::Q4_0, 33), GgufError);
  EXPECT_THROW(bytes_for(GgmlType::Q8_K, ~uint64_t{0} - 255), GgufError);  // overflows
  EXPECT_FALSE(can_dequantize(GgmlType::Q8_1));
  EXPECT_FALSE(can_dequantize(GgmlType::Q8_K));
  EXPECT_FALSE(can_dequantize(static_cast<GgmlType>(5)));
  std::vector<uint8_t> raw(292);
  std::vector<float> out(256);
  EXPECT_THROW(dequantize(GgmlType::Q8_K, raw.data(), out.data(), 256), GgufError);
  EXPECT_THROW(dequantize(GgmlType::Q4_K, raw.data(), out.data(), 100), GgufError);
  EXPECT_NO_THROW(dequantize(GgmlType::F32, nullptr, nullptr, 0));
}

TEST(GgufDequant, Q4_0KnownBlock) {
  // d = 0.5; byte l holds elements l (low nibble) and l + 16 (high nibble).
  std::vector<uint8_t> b(18, 0);
  const uint16_t d = fp32_to_fp16(0.5f);
  std::memcpy(b.data(), &d, 2);
  b[2] = 0xF0;  // element 0 -> q 0 -> -4, element 16 -> q 15 -> 3.5
  b[3] = 0x9A;  // element 1 -> q 10 -> 1, element 17 -> q 9 -> 0.5
  std::vector<float> y(32);
  dequantize(GgmlType::Q4_0, b.data(), y.data(), 32);
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[16], 3.5f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[17], 0.5f);
  EXPECT_EQ(y[2], -4.0f);
}

}  // namespace
}  // namespace adakv::gguf
