// model::Linear: a shard of a quantized GGUF matrix computes what the whole matrix computes on
// the shard's rows or columns, and a cut inside a block is refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>

#include "model/gguf/dequant.h"
#include "model/gguf/gguf.h"
#include "model/gguf/writer.h"
#include "model/linear.h"
#include "random_data.h"

namespace {

using adakv::gguf::GgmlType;
using adakv::model::Linear;
namespace k = adakv::kernels;

constexpr size_t kIn = 96, kOut = 5;

// A Q8_0 matrix [out][kIn]: per 32 elements a half scale and 32 int8.
std::vector<uint8_t> q8_0_matrix(uint32_t seed, size_t out = kOut) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q(-127, 127);
  std::vector<uint8_t> bytes;
  for (size_t b = 0; b < out * kIn / 32; ++b) {
    const uint16_t d = adakv::gguf::fp32_to_fp16(0.01f * (1 + b % 7));
    bytes.push_back(d & 0xFF);
    bytes.push_back(d >> 8);
    for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<uint8_t>(q(rng)));
  }
  return bytes;
}

adakv::gguf::GgufFile file_with_matrix() {
  adakv::gguf::GgufWriter w;
  w.add_tensor("m.weight", GgmlType::Q8_0, {kIn, kOut}, q8_0_matrix(7));
  const auto bytes = w.bytes();
  return adakv::gguf::GgufFile::parse(bytes.data(), bytes.size());
}

// The product on the CPU backend, whose upload views the Linear's host memory.
std::vector<float> forward(const Linear& l, const std::vector<float>& x, size_t M = 1) {
  std::vector<float> y(M * l.out_features());
  Linear uploaded = l;
  uploaded.upload(k::cpu_backend());
  EXPECT_EQ(uploaded.weights(), l.data());
  uploaded.forward(k::cpu_backend(), y.data(), x.data(), M, {0, false, k::MatmulPath::kFloatDots});
  return y;
}

TEST(Linear, ColumnShardIsTheWholeMatrixsRows) {
  const auto f = file_with_matrix();
  const Linear whole = Linear::replicated(f, "m.weight", kIn, kOut, k::cpu_backend());
  const Linear shard = Linear::column_parallel(f, "m.weight", kIn, kOut, 1, 3, k::cpu_backend());
  EXPECT_EQ(whole.format(), k::WeightFormat::kQ8_0);
  EXPECT_EQ(shard.out_features(), 3u);
  EXPECT_EQ(shard.bytes(), 3 * k::row_bytes(k::WeightFormat::kQ8_0, kIn));
  const auto x = adakv::test::random_vector(kIn, 3);
  const auto yw = forward(whole, x), ys = forward(shard, x);
  for (size_t n = 0; n < 3; ++n) EXPECT_EQ(ys[n], yw[1 + n]);
}

// A row order (RoPE's halves turned into adjacent pairs) permutes the shard's output rows, in
// the plain layout and in the backend's own.
TEST(Linear, RowOrderPermutesTheShardsRows) {
  const auto f = file_with_matrix();
  const Linear plain = Linear::column_parallel(f, "m.weight", kIn, kOut, 1, 4, k::cpu_backend());
  const std::vector<size_t> order = {2, 0, 3, 1};
  const Linear ordered =
      Linear::column_parallel(f, "m.weight", kIn, kOut, 1, 4, k::cpu_backend(), order);
  EXPECT_EQ(ordered.out_features(), 4u);
  EXPECT_EQ(ordered.layout(), plain.layout());
  const auto x = adakv::test::random_vector(kIn, 3);
  const auto y = forward(plain, x), z = forward(ordered, x);
  for (size_t j = 0; j < order.size(); ++j) EXPECT_EQ(z[j], y[order[j]]) << j;
  EXPECT_THROW(Linear::column_parallel(f, "m.weight", kIn, kOut, 1, 4, k::cpu_backend(),
                                       std::vector<size_t>{0, 1}),
               std::logic_error);
}

TEST(Linear, RowShardIsTheWholeMatrixOnItsColumns) {
  const auto f = file_with_matrix();
  const Linear whole = Linear::replicated(f, "m.weight", kIn, kOut, k::cpu_backend());
  const Linear shard = Linear::row_parallel(f, "m.weight", kIn, kOut, 32, 64, k::cpu_backend());
  EXPECT_EQ(shard.in_features(), 64u);
  EXPECT_EQ(shard.out_features(), kOut);
  auto x = adakv::test::random_vector(kIn, 4);
  std::fill(x.begin(), x.begin() + 32, 0.0f);
  const std::vector<float> xs(x.begin() + 32, x.end());
  const auto yw = forward(whole, x), ys = forward(shard, xs);
  for (size_t n = 0; n < kOut; ++n) EXPECT_NEAR(ys[n], yw[n], 1e-5 * (1 + std::fabs(yw[n])));
}

TEST(Linear, ACutInsideABlockIsAClearError) {
  const auto f = file_with_matrix();
  try {
    Linear::row_parallel(f, "m.weight", kIn, kOut, 16, 48, k::cpu_backend());
    FAIL() << "a cut at column 16 of 32-element blocks was accepted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("m.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("Q8_0"), std::string::npos) << what;
    EXPECT_NE(what.find("blocks of 32"), std::string::npos) << what;
  }
  EXPECT_THROW(Linear::column_parallel(f, "m.weight", kIn, kOut, 4, 2, k::cpu_backend()),
               std::runtime_error);
  EXPECT_THROW(Linear::replicated(f, "missing.weight", kIn, kOut, k::cpu_backend()),
               std::runtime_error);
  EXPECT_THROW(Linear::replicated(f, "m.weight", kIn, kOut + 1, k::cpu_backend()),
               std::runtime_error);
}

// Two matrices of one input, 32 and 16 rows (whole interleaved row groups), and one of another.
adakv::gguf::GgufFile file_with_parts() {
  adakv::gguf::GgufWriter w;
  w.add_tensor("a.weight", GgmlType::Q8_0, {kIn, 32}, q8_0_matrix(11, 32));
  w.add_tensor("b.weight", GgmlType::Q8_0, {kIn, 16}, q8_0_matrix(12, 16));
  w.add_tensor("c.weight", GgmlType::Q8_0, {2 * kIn, 16}, q8_0_matrix(13, 32));
  const auto bytes = w.bytes();
  return adakv::gguf::GgufFile::parse(bytes.data(), bytes.size());
}

// Fused where the layout allows it (interleaved: the AVX-512 level), each row's product the
// same bits as its part's; elsewhere nothing fused and the parts untouched.
TEST(Linear, FusedPartsComputeTheirRowsBitForBit) {
  const auto f = file_with_parts();
  const Linear a0 = Linear::replicated(f, "a.weight", kIn, 32, k::cpu_backend());
  const Linear b0 = Linear::replicated(f, "b.weight", kIn, 16, k::cpu_backend());
  Linear a = a0, b = b0;
  const Linear ab = Linear::fuse({&a, &b});
  constexpr size_t M = 3;
  const auto x = adakv::test::random_vector(M * kIn, 5);
  const auto ya = forward(a0, x, M), yb = forward(b0, x, M);
  if (a0.layout() != k::WeightLayout::kInterleaved) {
    EXPECT_TRUE(ab.empty());
    EXPECT_EQ(a.data(), a0.data());
    EXPECT_EQ(b.data(), b0.data());
    return;
  }
  ASSERT_FALSE(ab.empty());
  EXPECT_EQ(ab.out_features(), 48u);
  EXPECT_EQ(ab.bytes(), a0.bytes() + b0.bytes());
  EXPECT_EQ(a.data(), ab.data());
  EXPECT_EQ(b.data(), ab.data() + k::interleaved_bytes(k::WeightFormat::kQ8_0, 32, kIn));
  const auto y = forward(ab, x, M);
  for (size_t m = 0; m < M; ++m) {
    for (size_t n = 0; n < 32; ++n) EXPECT_EQ(y[m * 48 + n], ya[m * 32 + n]) << m << " " << n;
    for (size_t n = 0; n < 16; ++n) EXPECT_EQ(y[m * 48 + 32 + n], yb[m * 16 + n]) << m << " " << n;
  }
  // The parts now read the fused memory and still compute their own rows.
  EXPECT_EQ(forward(a, x, M), ya);
  EXPECT_EQ(forward(b, x, M), yb);
}

TEST(Linear, ForwardBeforeUploadIsAnError) {
  const auto f = file_with_matrix();
  const Linear l = Linear::replicated(f, "m.weight", kIn, kOut, k::cpu_backend());
  std::vector<float> x(kIn), y(kOut);
  EXPECT_THROW(l.forward(k::cpu_backend(), y.data(), x.data(), 1), std::logic_error);
}

TEST(Linear, PartsOfDifferentInputsAreNotFused) {
  const auto f = file_with_parts();
  Linear a = Linear::replicated(f, "a.weight", kIn, 32, k::cpu_backend());
  Linear c = Linear::replicated(f, "c.weight", 2 * kIn, 16, k::cpu_backend());
  const uint8_t* before = a.data();
  EXPECT_TRUE(Linear::fuse({&a, &c}).empty());
  EXPECT_EQ(a.data(), before);
  Linear none;
  EXPECT_TRUE(Linear::fuse({&a, &none}).empty());
}

}  // namespace
