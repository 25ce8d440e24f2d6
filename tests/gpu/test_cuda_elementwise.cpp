// The CUDA backend's element-wise group (rmsnorm, rope_adjacent, swiglu, add, add_bias,
// interleave_shards) against the CPU backend on awkward shapes: 1, 7 and 769 rows, widths of
// 64 and 576 and odd ones, strided rows, in-place calls.
#include <gtest/gtest.h>

#include <random>
#include <tuple>
#include <vector>

#include "tests/gpu/cuda_fixture.h"
#include "tests/unit/random_data.h"

namespace {

namespace k = adakv::kernels;
using adakv::test::CudaBackendTest;
using adakv::test::DeviceArray;
using adakv::test::matches_cpu;
using adakv::test::random_vector;
using adakv::test::rejects;
using adakv::test::same_bits;

constexpr size_t kRows[] = {1, 7, 769};

class CudaRmsnorm : public CudaBackendTest {};
class CudaRope : public CudaBackendTest {};
class CudaSwiglu : public CudaBackendTest {};
class CudaAdd : public CudaBackendTest {};
class CudaInterleaveShards : public CudaBackendTest {};

TEST_F(CudaRmsnorm, MatchesCpu) {
  uint32_t seed = 1;
  for (size_t rows : kRows) {
    for (size_t dim : {1, 63, 64, 576, 4097}) {
      const auto x = random_vector(rows * dim, seed++, 3.0f);
      const auto w = random_vector(dim, seed++);
      std::vector<float> want(x.size());
      cpu().rmsnorm(want.data(), x.data(), w.data(), rows, dim, 1e-5f);
      DeviceArray<float> dx = to_cuda(x), dw = to_cuda(w);
      DeviceArray<float> out(cuda(), x.size());
      cuda().rmsnorm(out.data(), dx.data(), dw.data(), rows, dim, 1e-5f);
      EXPECT_TRUE(matches_cpu(out.download(), want)) << rows << " x " << dim;
      // In place.
      cuda().rmsnorm(dx.data(), dx.data(), dw.data(), rows, dim, 1e-5f);
      EXPECT_TRUE(matches_cpu(dx.download(), want)) << rows << " x " << dim << " in place";
    }
  }
}

TEST_F(CudaRmsnorm, RejectsEmptyRows) {
  DeviceArray<float> x = to_cuda(std::vector<float>{1, 2});
  EXPECT_TRUE(
      rejects([&] { cuda().rmsnorm(x.data(), x.data(), x.data(), 1, 0, 1e-5f); }, "rmsnorm"));
}

TEST_F(CudaRope, MatchesCpu) {
  std::mt19937 rng(7);
  uint32_t seed = 100;
  struct Shape {
    size_t n_heads, head_dim, rot_dim;
  };
  for (size_t T : kRows) {
    for (const Shape s :
         {Shape{1, 64, 64}, Shape{3, 64, 32}, Shape{9, 576, 576}, Shape{2, 128, 0}}) {
      for (float theta : {10000.0f, 500000.0f}) {
        // Rows padded by 5 floats that must stay as they are.
        const size_t stride = s.n_heads * s.head_dim + 5;
        const auto x = random_vector(T * stride, seed++);
        std::vector<int32_t> positions(T);
        for (auto& p : positions) p = static_cast<int32_t>(rng() % 100000);
        std::vector<float> want = x;
        const k::RopeFrequencies freqs =
            s.rot_dim == 0 ? k::RopeFrequencies{} : k::rope_frequencies(theta, s.rot_dim);
        cpu().rope_adjacent(want.data(), positions.data(), T, s.n_heads, s.head_dim, stride, freqs);
        DeviceArray<float> dx = to_cuda(x);
        DeviceArray<int32_t> dpos = to_cuda(positions);
        cuda().rope_adjacent(dx.data(), dpos.data(), T, s.n_heads, s.head_dim, stride, freqs);
        EXPECT_TRUE(matches_cpu(dx.download(), want))
            << T << " tokens, " << s.n_heads << " heads of " << s.head_dim << ", rot_dim "
            << s.rot_dim << ", theta " << theta;
      }
    }
  }
}

TEST_F(CudaRope, RejectsWhatTheCpuRejects) {
  DeviceArray<float> x = to_cuda(std::vector<float>(64, 1.0f));
  DeviceArray<int32_t> pos = to_cuda(std::vector<int32_t>{3});
  // 32 pairs do not fit a head of 32.
  EXPECT_TRUE(rejects(
      [&] {
        cuda().rope_adjacent(x.data(), pos.data(), 1, 1, 32, 64, k::rope_frequencies(10000.0f, 64));
      },
      "rope_adjacent"));
}

TEST_F(CudaSwiglu, MatchesCpu) {
  uint32_t seed = 200;
  for (size_t T : kRows) {
    for (size_t F : {1, 63, 64, 576, 1001}) {
      const auto gate_up = random_vector(T * 2 * F, seed++, 4.0f);
      std::vector<float> want(T * F);
      cpu().swiglu(want.data(), gate_up.data(), T, F);
      DeviceArray<float> dgu = to_cuda(gate_up);
      DeviceArray<float> out(cuda(), T * F);
      cuda().swiglu(out.data(), dgu.data(), T, F);
      EXPECT_TRUE(matches_cpu(out.download(), want)) << T << " x " << F;
    }
  }
}

// Float addition is exact to the bit on both.
TEST_F(CudaAdd, MatchesCpuBitForBit) {
  uint32_t seed = 300;
  for (size_t n : {size_t{1}, size_t{7}, size_t{769}, size_t{769 * 576 + 1}}) {
    const auto a = random_vector(n, seed++), b = random_vector(n, seed++);
    std::vector<float> want(n);
    cpu().add(want.data(), a.data(), b.data(), n);
    DeviceArray<float> da = to_cuda(a), db = to_cuda(b);
    DeviceArray<float> out(cuda(), n);
    cuda().add(out.data(), da.data(), db.data(), n);
    EXPECT_TRUE(same_bits(out.download(), want)) << n;
    // In place, into either operand.
    cuda().add(da.data(), da.data(), db.data(), n);
    EXPECT_TRUE(same_bits(da.download(), want)) << n << " into a";
    DeviceArray<float> da2 = to_cuda(a);
    cuda().add(db.data(), da2.data(), db.data(), n);
    EXPECT_TRUE(same_bits(db.download(), want)) << n << " into b";
  }
}

// The bias add is one float addition per element: the same bits as the CPU's, over rows whose
// stride exceeds the bias (q, k and v share a row) and grids of more than one block.
TEST_F(CudaAdd, BiasMatchesCpuBitForBit) {
  uint32_t seed = 350;
  for (auto [rows, n, ldy] : {std::tuple<size_t, size_t, size_t>{1, 1, 1},
                              {7, 5, 9},
                              {3, 769, 769},
                              {257, 1152, 1152},
                              {33, 896, 1152}}) {
    const auto y = random_vector(rows * ldy, seed++, 4.0f), bias = random_vector(n, seed++);
    std::vector<float> want = y;
    cpu().add_bias(want.data(), bias.data(), rows, n, ldy);
    DeviceArray<float> dy = to_cuda(y), db = to_cuda(bias);
    cuda().add_bias(dy.data(), db.data(), rows, n, ldy);
    EXPECT_TRUE(same_bits(dy.download(), want)) << rows << " x " << n << " (ldy " << ldy << ")";
  }
}

TEST_F(CudaAdd, BiasRejectsRowsNarrowerThanTheBias) {
  DeviceArray<float> y = to_cuda(std::vector<float>(8, 1.0f)), b = to_cuda(std::vector<float>(4));
  EXPECT_TRUE(rejects([&] { cuda().add_bias(y.data(), b.data(), 2, 4, 3); }, "add_bias"));
}

TEST_F(CudaInterleaveShards, MatchesCpuBitForBit) {
  uint32_t seed = 400;
  for (size_t shards : {1, 3, 8}) {
    for (size_t rows : kRows) {
      for (size_t cols : {5, 64, 577}) {
        const auto gathered = random_vector(shards * rows * cols, seed++);
        std::vector<float> want(gathered.size());
        cpu().interleave_shards(want.data(), gathered.data(), shards, rows, cols);
        DeviceArray<float> dg = to_cuda(gathered);
        DeviceArray<float> out(cuda(), gathered.size());
        cuda().interleave_shards(out.data(), dg.data(), shards, rows, cols);
        EXPECT_TRUE(same_bits(out.download(), want)) << shards << " x " << rows << " x " << cols;
      }
    }
  }
  EXPECT_TRUE(
      rejects([&] { cuda().interleave_shards(nullptr, nullptr, 1, 1, 1); }, "interleave_shards"));
}

}  // namespace
