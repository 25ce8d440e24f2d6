// Interleaved weights (WeightLayout::kInterleaved, kernels/quant.h): products equal
// dequantize-then-float32 within float32 rounding on awkward shapes, on every level this CPU
// has; the levels, the thread counts and a row alone or in any batch give the same bits; the
// embedding lookup reads them as the rows layout does; misuse is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_threads.h"
#include "kernels/quant.h"
#include "kernels/quant_tolerance.h"
#include "model/gguf/dequant.h"
#include "tests/unit/random_data.h"

namespace k = adakv::kernels;
using k::QuantLevel;
using k::WeightFormat;
using k::WeightLayout;

namespace {

constexpr WeightFormat kFormats[] = {WeightFormat::kQ8_0, WeightFormat::kQ4_0, WeightFormat::kQ4_1};
constexpr k::MatmulPath kPaths[] = {k::MatmulPath::kFloatDots, k::MatmulPath::kInt16Dots,
                                    k::MatmulPath::kFloatGemm, k::MatmulPath::kAuto};
constexpr QuantLevel kLevels[] = {QuantLevel::kScalar, QuantLevel::kAvx2, QuantLevel::kAvx512};

// Random quants with finite fp16 scales (and mins) of a plausible size, either sign.
std::vector<uint8_t> random_weights(WeightFormat f, size_t N, size_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(N * k::row_bytes(f, K));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> mag(0.002f, 0.05f);
  const auto put_half = [&](uint8_t* p) {
    const uint16_t h = adakv::gguf::fp32_to_fp16((rng() % 2 ? 1.0f : -1.0f) * mag(rng));
    std::memcpy(p, &h, 2);
  };
  for (size_t off = 0; off < w.size(); off += k::block_bytes(f)) {
    put_half(w.data() + off);
    if (f == WeightFormat::kQ4_1) put_half(w.data() + off + 2);
  }
  return w;
}

std::vector<uint8_t> interleaved(WeightFormat f, const std::vector<uint8_t>& w, size_t N,
                                 size_t K) {
  std::vector<uint8_t> out(k::interleaved_bytes(f, N, K));
  EXPECT_EQ(k::interleave_weights(out.data(), w.data(), f, N, K), k::Status::kOk);
  return out;
}

std::vector<float> product(const std::vector<uint8_t>& wi, WeightFormat f, const float* x, size_t M,
                           size_t N, size_t K, k::MatmulPath path, size_t ldy = 0,
                           bool accumulate = false, std::vector<float> y = {}) {
  if (y.empty()) y.assign(M * (ldy ? ldy : N), NAN);
  k::MatmulOptions o{ldy, accumulate, path};
  o.layout = WeightLayout::kInterleaved;
  EXPECT_EQ(k::matmul_quant(y.data(), x, wi.data(), f, M, N, K, o), k::Status::kOk);
  return y;
}

std::string label(WeightFormat f, QuantLevel level, size_t M, size_t N, size_t K) {
  return std::string(k::weight_format_name(f)) + " at " + k::quant_level_name(level) +
         ", M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
}

struct LevelGuard {
  int threads = k::num_threads();
  ~LevelGuard() {
    k::set_quant_level(k::best_quant_level());
    k::set_num_threads(threads);
  }
};

}  // namespace

TEST(QuantInterleaved, LayoutSizes) {
  EXPECT_EQ(k::interleaved_bytes(WeightFormat::kQ4_1, 16, 576),
            16 * k::row_bytes(WeightFormat::kQ4_1, 576));
  EXPECT_EQ(k::interleaved_bytes(WeightFormat::kQ8_0, 17, 64),
            32 * k::row_bytes(WeightFormat::kQ8_0, 64));
  EXPECT_EQ(k::interleaved_bytes(WeightFormat::kQ4_K, 16, 256), 0u);
  EXPECT_EQ(k::interleaved_bytes(WeightFormat::kQ4_0, 16, 48), 0u);
  EXPECT_FALSE(k::interleavable(WeightFormat::kQ6_K));
  EXPECT_FALSE(k::interleavable(WeightFormat::kF32));
}

// Every path the layout takes, with an output stride and accumulation, against the float64
// product of the dequantized weights: float32 rounding only (no activation rounding).
TEST(QuantInterleaved, MatchesDequantizedOnEveryLevel) {
  LevelGuard guard;
  uint32_t seed = 1;
  int levels = 0;
  for (QuantLevel level : kLevels) {
    if (!k::set_quant_level(level)) continue;
    ++levels;
    for (WeightFormat f : kFormats) {
      for (size_t K : {32, 96, 576, 1536}) {
        for (size_t N : {1, 7, 17, 769}) {
          const auto w = random_weights(f, N, K, ++seed);
          const auto wi = interleaved(f, w, N, K);
          std::vector<float> wf(N * K);
          adakv::gguf::dequantize(static_cast<adakv::gguf::GgmlType>(f), w.data(), wf.data(),
                                  N * K);
          for (size_t M : {1, 2, 3, 16, 21, 40}) {
            const auto x = adakv::test::random_vector(M * K, ++seed);
            std::vector<float> amax(M * K / 32, 0.0f);
            for (size_t i = 0; i < M * K; ++i) {
              amax[i / 32] = std::max(amax[i / 32], std::fabs(x[i]));
            }
            for (k::MatmulPath path : kPaths) {
              const size_t ldy = N + 3;
              const auto y0 = adakv::test::random_vector(M * ldy, ++seed);
              const auto y = product(wi, f, x.data(), M, N, K, path, ldy, true, y0);
              for (size_t m = 0; m < M; ++m) {
                for (size_t n = 0; n < ldy; ++n) {
                  const size_t i = m * ldy + n;
                  if (n >= N) {
                    ASSERT_EQ(y[i], y0[i]) << "wrote outside the row: " << label(f, level, M, N, K);
                    continue;
                  }
                  double ref = 0, mag = 0, act = 0;
                  for (size_t kk = 0; kk < K; ++kk) {
                    const double p = double(x[m * K + kk]) * wf[n * K + kk];
                    ref += p;
                    mag += std::fabs(p);
                    act += std::fabs(wf[n * K + kk]) * amax[m * (K / 32) + kk / 32] / 127;
                  }
                  if (path != k::MatmulPath::kInt16Dots) act = 0;
                  const double bound = k::kInterleavedRel * mag +
                                       k::quant_tolerance(f).act * k::kInt16ActFactor * act +
                                       1e-6 * std::fabs(y0[i]) + 1e-30;
                  ASSERT_LE(std::fabs(double(y[i]) - y0[i] - ref), bound)
                      << label(f, level, M, N, K) << " path " << int(path) << " at " << m << ","
                      << n;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GE(levels, 1);
}

// The dots give the same bits on every level, on any thread count, and for a row alone or in
// any batch.
TEST(QuantInterleaved, LevelsThreadsAndBatchesGiveTheSameBits) {
  LevelGuard guard;
  uint32_t seed = 50;
  for (k::MatmulPath path : {k::MatmulPath::kFloatDots, k::MatmulPath::kInt16Dots})
    for (WeightFormat f : kFormats) {
      const size_t N = 769, K = 1536;  // enough work for the threaded path
      const auto w = random_weights(f, N, K, ++seed);
      const auto wi = interleaved(f, w, N, K);
      const size_t M = 23;
      const auto x = adakv::test::random_vector(M * K, ++seed);
      ASSERT_TRUE(k::set_quant_level(QuantLevel::kScalar));
      k::set_num_threads(1);
      const auto ref = product(wi, f, x.data(), M, N, K, path);
      for (QuantLevel level : kLevels) {
        if (!k::set_quant_level(level)) continue;
        for (int threads : {1, 2}) {
          k::set_num_threads(threads);
          const auto y = product(wi, f, x.data(), M, N, K, path);
          EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0)
              << label(f, level, M, N, K) << " path " << int(path) << ", " << threads << " threads";
          for (size_t m0 : {0, 5, 16}) {
            for (size_t rows : {1, 2, 4, 7}) {
              const auto part = product(wi, f, x.data() + m0 * K, rows, N, K, path);
              EXPECT_EQ(std::memcmp(part.data(), ref.data() + m0 * N, part.size() * sizeof(float)),
                        0)
                  << label(f, level, rows, N, K) << " from row " << m0;
            }
          }
        }
      }
    }
}

TEST(QuantInterleaved, EmbeddingRowsEqualTheRowsLayouts) {
  LevelGuard guard;
  for (WeightFormat f : kFormats) {
    const size_t N = 37, K = 96;
    const auto w = random_weights(f, N, K, 77);
    const auto wi = interleaved(f, w, N, K);
    const int32_t ids[] = {0, 36, 15, 16, 5};
    std::vector<float> a(5 * K), b(5 * K);
    ASSERT_EQ(k::dequantize_rows(a.data(), w.data(), f, ids, 5, N, K), k::Status::kOk);
    ASSERT_EQ(k::dequantize_rows(b.data(), wi.data(), f, ids, 5, N, K, WeightLayout::kInterleaved),
              k::Status::kOk);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << k::weight_format_name(f);
  }
}

TEST(QuantInterleaved, RejectsWhatTheLayoutCannotDo) {
  const size_t N = 16, K = 32;
  std::vector<uint8_t> w(k::row_bytes(WeightFormat::kQ8_0, K) * N), out(w.size());
  std::vector<float> x(K, 1.0f), y(N);
  EXPECT_EQ(k::interleave_weights(out.data(), w.data(), WeightFormat::kQ6_K, N, 256),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::interleave_weights(out.data(), w.data(), WeightFormat::kQ8_0, N, 48),
            k::Status::kInvalidArgument);
  k::MatmulOptions o{0, false, k::MatmulPath::kRowDots};
  o.layout = WeightLayout::kInterleaved;
  EXPECT_EQ(k::matmul_quant(y.data(), x.data(), out.data(), WeightFormat::kQ8_0, 1, N, K, o),
            k::Status::kInvalidArgument);
  o.path = k::MatmulPath::kFloatDots;
  o.layout = WeightLayout::kInterleaved;
  EXPECT_EQ(k::matmul_quant(y.data(), x.data(), out.data(), WeightFormat::kQ5_0, 1, N, K, o),
            k::Status::kInvalidArgument);
}
