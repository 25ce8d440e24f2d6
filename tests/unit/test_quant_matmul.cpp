// matmul_quant (kernels/quant.h) against dequantize-then-float32-matmul, for every weight format
// and every dispatch level this CPU has, on awkward shapes; the levels against each other; and
// 1 vs 2 threads bit for bit. Tolerances: kernels/quant_tolerance.h.
#include <gtest/gtest.h>

#include <algorithm>
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

namespace {

// Random weights: random bytes for the quants, with every fp16 scale field set to a finite value
// of a plausible size (the random bytes elsewhere cover the whole range of the quants, int8 -128
// and Q6_K's negative scales included).
std::vector<uint8_t> random_weights(WeightFormat f, size_t N, size_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t rb = k::row_bytes(f, K);
  std::vector<uint8_t> w(N * rb);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(0.002f, 0.05f);
  auto put_half = [&](uint8_t* p, float v) {
    const uint16_t h = adakv::gguf::fp32_to_fp16(v);
    std::memcpy(p, &h, 2);
  };
  auto scale = [&] { return (byte(rng) & 1 ? 1.0f : -1.0f) * mag(rng); };
  if (f == WeightFormat::kF32) {
    for (size_t i = 0; i < N * K; ++i) {
      const float v = normal(rng);
      std::memcpy(w.data() + 4 * i, &v, 4);
    }
    return w;
  }
  if (f == WeightFormat::kF16 || f == WeightFormat::kBF16) {
    for (size_t i = 0; i < N * K; ++i) {
      const float v = normal(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = f == WeightFormat::kF16 ? adakv::gguf::fp32_to_fp16(v)
                                                 : static_cast<uint16_t>(bits >> 16);
      std::memcpy(w.data() + 2 * i, &h, 2);
    }
    return w;
  }
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  const size_t bb = k::block_bytes(f);
  for (size_t off = 0; off < w.size(); off += bb) {
    uint8_t* b = w.data() + off;
    switch (f) {
      case WeightFormat::kQ8_0:
      case WeightFormat::kQ4_0:
      case WeightFormat::kQ5_0:
        put_half(b, scale());
        break;
      case WeightFormat::kQ4_1:
      case WeightFormat::kQ5_1:
      case WeightFormat::kQ4_K:
      case WeightFormat::kQ5_K:
        put_half(b, scale());
        put_half(b + 2, scale());
        break;
      case WeightFormat::kQ6_K:
        put_half(b + 208, scale() * 0.1f);
        break;
      default:
        break;
    }
  }
  return w;
}

std::vector<float> dequantize(WeightFormat f, const std::vector<uint8_t>& w, size_t N, size_t K) {
  std::vector<float> out(N * K);
  adakv::gguf::dequantize(static_cast<adakv::gguf::GgmlType>(f), w.data(), out.data(), N * K);
  return out;
}

// The float64 reference y = x W^T, the magnitude sum_k |x w| of each element and the activation
// rounding scale sum_k |w| * amax(k) / 127 (quant_tolerance.h).
void reference(const std::vector<float>& x, const std::vector<float>& wf, size_t M, size_t N,
               size_t K, std::vector<double>& ref, std::vector<double>& mag,
               std::vector<double>* act = nullptr) {
  ref.assign(M * N, 0.0);
  mag.assign(M * N, 0.0);
  if (act) act->assign(M * N, 0.0);
  std::vector<double> step(K);
  for (size_t m = 0; m < M; ++m) {
    for (size_t b = 0; b < K; b += 32) {
      double amax = 0;
      for (size_t i = b; i < std::min(K, b + 32); ++i)
        amax = std::max(amax, std::fabs(double(x[m * K + i])));
      for (size_t i = b; i < std::min(K, b + 32); ++i) step[i] = amax / 127.0;
    }
    for (size_t n = 0; n < N; ++n) {
      double s = 0, a = 0, e = 0;
      for (size_t i = 0; i < K; ++i) {
        const double p = double(x[m * K + i]) * wf[n * K + i];
        s += p;
        a += std::fabs(p);
        e += std::fabs(double(wf[n * K + i])) * step[i];
      }
      ref[m * N + n] = s;
      mag[m * N + n] = a;
      if (act) (*act)[m * N + n] = e;
    }
  }
}

std::vector<size_t> ks_for(WeightFormat f) {
  switch (k::block_elements(f)) {
    case 1:
      return {1, 7, 33, 96, 576, 1536};
    case 32:
      return {32, 96, 256, 576, 1536};
    default:
      return {256, 512, 1536};
  }
}

std::string label(WeightFormat f, QuantLevel level, size_t M, size_t N, size_t K) {
  return std::string(k::weight_format_name(f)) + " at " + k::quant_level_name(level) +
         ", M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
}

struct LevelGuard {
  ~LevelGuard() { k::set_quant_level(k::best_quant_level()); }
};

// The default path (int8 activations below 32 rows, the float GEMM from 32) and the int16 dots,
// on every format and awkward shapes.
void check_level_matches_dequantized(QuantLevel level, k::MatmulPath path = k::MatmulPath::kAuto) {
  LevelGuard guard;
  ASSERT_TRUE(k::set_quant_level(level));
  uint32_t seed = 100;
  for (WeightFormat f : k::kAllWeightFormats) {
    k::QuantTolerance tol = k::quant_tolerance(f);
    if (path == k::MatmulPath::kInt16Dots) tol.act *= k::kInt16ActFactor;
    double worst = 0;      // largest |err| / bound
    double worst_rel = 0;  // largest |err| / sum |x w|
    for (size_t K : ks_for(f)) {
      for (size_t N : {1, 7, 769}) {
        const auto w = random_weights(f, N, K, ++seed);
        const auto wf = dequantize(f, w, N, K);
        for (size_t M : {1, 3, 16, 40}) {
          const auto x = adakv::test::random_vector(M * K, ++seed);
          std::vector<float> y(M * N, NAN);
          ASSERT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), f, M, N, K, {0, false, path}),
                    k::Status::kOk)
              << label(f, level, M, N, K);
          std::vector<double> ref, mag, act;
          reference(x, wf, M, N, K, ref, mag, &act);
          for (size_t i = 0; i < M * N; ++i) {
            const double err = std::fabs(double(y[i]) - ref[i]);
            const double bound = tol.act * act[i] + tol.rel * mag[i] + 1e-30;
            worst = std::max(worst, err / bound);
            worst_rel = std::max(worst_rel, err / std::max(mag[i], 1e-30));
            ASSERT_LE(err, bound) << label(f, level, M, N, K) << " at y[" << i / N << "][" << i % N
                                  << "] = " << y[i] << ", reference " << ref[i] << ", magnitude "
                                  << mag[i];
          }
        }
      }
    }
    std::printf("  %-5s at %-6s%s: worst |err| / bound = %.3f, worst |err| / sum|x w| = %.3g\n",
                k::weight_format_name(f), k::quant_level_name(level),
                path == k::MatmulPath::kInt16Dots ? ", int16 dots" : "", worst, worst_rel);
  }
}

}  // namespace

TEST(QuantMatmul, RowBytesAndBlocks) {
  EXPECT_EQ(k::row_bytes(WeightFormat::kF32, 7), 28u);
  EXPECT_EQ(k::row_bytes(WeightFormat::kBF16, 7), 14u);
  EXPECT_EQ(k::row_bytes(WeightFormat::kQ4_1, 576), 18u * 20);
  EXPECT_EQ(k::row_bytes(WeightFormat::kQ8_0, 576), 18u * 34);
  EXPECT_EQ(k::row_bytes(WeightFormat::kQ6_K, 512), 2u * 210);
  EXPECT_EQ(k::row_bytes(WeightFormat::kQ4_K, 576), 0u);  // not a multiple of 256
  EXPECT_EQ(k::row_bytes(WeightFormat::kQ4_0, 33), 0u);
  EXPECT_EQ(k::row_bytes(WeightFormat::kQ4_0, 0), 0u);
  // The block table agrees with the GGUF reader's.
  for (WeightFormat f : k::kAllWeightFormats) {
    const auto t = static_cast<adakv::gguf::GgmlType>(f);
    EXPECT_EQ(k::block_elements(f), adakv::gguf::block_elements(t)) << k::weight_format_name(f);
    EXPECT_EQ(k::block_bytes(f), adakv::gguf::block_bytes(t)) << k::weight_format_name(f);
    EXPECT_TRUE(k::is_weight_format(static_cast<uint32_t>(f)));
  }
  EXPECT_FALSE(k::is_weight_format(10));  // Q2_K: not handled here
}

TEST(QuantMatmul, RejectsBadArguments) {
  std::vector<float> x(64, 1.0f), y(4);
  std::vector<uint8_t> w(4 * 64 * 4);
  EXPECT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), WeightFormat::kQ4_0, 1, 1, 48),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), WeightFormat::kQ4_K, 1, 1, 32),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), WeightFormat::kF32, 1, 1, 0),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), static_cast<WeightFormat>(10), 1, 1, 256),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::matmul_quant(nullptr, x.data(), w.data(), WeightFormat::kQ8_0, 1, 1, 32),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::matmul_quant(nullptr, nullptr, nullptr, WeightFormat::kQ8_0, 0, 5, 32),
            k::Status::kOk);
}

TEST(QuantMatmul, ScalarMatchesDequantized) {
  check_level_matches_dequantized(QuantLevel::kScalar);
  check_level_matches_dequantized(QuantLevel::kScalar, k::MatmulPath::kInt16Dots);
}

TEST(QuantMatmul, Avx2MatchesDequantized) {
  if (!k::cpu_supports(QuantLevel::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2+FMA+F16C";
  check_level_matches_dequantized(QuantLevel::kAvx2);
  check_level_matches_dequantized(QuantLevel::kAvx2, k::MatmulPath::kInt16Dots);
}

TEST(QuantMatmul, Avx512MatchesDequantized) {
  if (!k::cpu_supports(QuantLevel::kAvx512)) {
    EXPECT_FALSE(k::set_quant_level(QuantLevel::kAvx512));
    GTEST_SKIP() << "this CPU lacks AVX-512 F+BW+VL";
  }
  check_level_matches_dequantized(QuantLevel::kAvx512);
  check_level_matches_dequantized(QuantLevel::kAvx512, k::MatmulPath::kInt16Dots);
}

// Activations that 16 bits hold exactly (integers times a power of two per block, each block
// reaching 32767 steps) leave the int16 dots only float32 rounding: a wrong bit in any one
// element shows, where the rounding term of the tolerance could hide it on long rows.
TEST(QuantMatmul, Int16DotsExactWhenActivationsAreInt16) {
  LevelGuard guard;
  for (QuantLevel level : {QuantLevel::kScalar, QuantLevel::kAvx2, QuantLevel::kAvx512}) {
    if (!k::set_quant_level(level)) continue;
    uint32_t seed = 800;
    for (WeightFormat f : k::kAllWeightFormats) {
      if (k::block_elements(f) == 1) continue;
      for (size_t K : ks_for(f)) {
        for (size_t M : {1, 5, 16}) {
          const size_t N = 13;
          std::mt19937 rng(++seed);
          std::uniform_int_distribution<int> q(-32767, 32767);
          std::vector<float> x(M * K);
          for (size_t b = 0; b < M * K; b += 32) {
            const float step = std::ldexp(1.0f, -15 - static_cast<int>(rng() % 8));
            for (size_t i = 0; i < 32; ++i) x[b + i] = step * q(rng);
            x[b + rng() % 32] = step * (rng() % 2 ? 32767 : -32767);
          }
          const auto w = random_weights(f, N, K, ++seed);
          std::vector<float> y(M * N);
          ASSERT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), f, M, N, K,
                                    {0, false, k::MatmulPath::kInt16Dots}),
                    k::Status::kOk);
          std::vector<double> ref, mag;
          reference(x, dequantize(f, w, N, K), M, N, K, ref, mag);
          for (size_t i = 0; i < M * N; ++i) {
            ASSERT_LE(std::fabs(double(y[i]) - ref[i]), k::quant_tolerance(f).rel * mag[i] + 1e-30)
                << label(f, level, M, N, K) << " at " << i;
          }
        }
      }
    }
  }
}

// Activations that 8 bits hold exactly (integers times a power of two per block, each block
// reaching 127 steps) leave only float32 rounding: this catches a wrong bit in any one element
// that the activation-rounding term of the tolerance could hide on long rows.
TEST(QuantMatmul, ExactWhenActivationsAreInt8) {
  LevelGuard guard;
  for (QuantLevel level : {QuantLevel::kScalar, QuantLevel::kAvx2, QuantLevel::kAvx512}) {
    if (!k::set_quant_level(level)) continue;
    uint32_t seed = 700;
    for (WeightFormat f : k::kAllWeightFormats) {
      if (k::block_elements(f) == 1) continue;
      for (size_t K : ks_for(f)) {
        const size_t M = 3, N = 7;
        std::mt19937 rng(++seed);
        std::uniform_int_distribution<int> q(-127, 127);
        std::vector<float> x(M * K);
        for (size_t b = 0; b < M * K; b += 32) {
          const float step = std::ldexp(1.0f, -static_cast<int>(rng() % 8));
          for (size_t i = 0; i < 32; ++i) x[b + i] = step * q(rng);
          x[b + rng() % 32] = step * (rng() % 2 ? 127 : -127);
        }
        const auto w = random_weights(f, N, K, ++seed);
        std::vector<float> y(M * N);
        ASSERT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), f, M, N, K), k::Status::kOk);
        std::vector<double> ref, mag;
        reference(x, dequantize(f, w, N, K), M, N, K, ref, mag);
        for (size_t i = 0; i < M * N; ++i) {
          ASSERT_LE(std::fabs(double(y[i]) - ref[i]), k::quant_tolerance(f).rel * mag[i] + 1e-30)
              << label(f, level, M, N, K) << " at " << i;
        }
      }
    }
  }
}

TEST(QuantMatmul, LevelsAgreeWithScalar) {
  LevelGuard guard;
  int compared = 0;
  for (QuantLevel level : {QuantLevel::kAvx2, QuantLevel::kAvx512}) {
    if (!k::cpu_supports(level)) continue;
    uint32_t seed = 500;
    for (WeightFormat f : k::kAllWeightFormats) {
      for (size_t K : ks_for(f)) {
        const size_t M = 5, N = 33;
        const auto w = random_weights(f, N, K, ++seed);
        const auto x = adakv::test::random_vector(M * K, ++seed);
        std::vector<float> ys(M * N), yl(M * N);
        ASSERT_TRUE(k::set_quant_level(QuantLevel::kScalar));
        ASSERT_EQ(k::matmul_quant(ys.data(), x.data(), w.data(), f, M, N, K), k::Status::kOk);
        ASSERT_TRUE(k::set_quant_level(level));
        ASSERT_EQ(k::matmul_quant(yl.data(), x.data(), w.data(), f, M, N, K), k::Status::kOk);
        std::vector<double> ref, mag;
        reference(x, dequantize(f, w, N, K), M, N, K, ref, mag);
        for (size_t i = 0; i < M * N; ++i) {
          ASSERT_LE(std::fabs(double(yl[i]) - ys[i]), k::kQuantLevelAgreementRel * mag[i] + 1e-30)
              << label(f, level, M, N, K) << " vs scalar at " << i;
        }
        ++compared;
      }
    }
  }
  if (compared == 0) GTEST_SKIP() << "this CPU has only the scalar level";
}

TEST(QuantMatmul, OneAndTwoThreadsAreBitIdentical) {
  LevelGuard guard;
  const int before = k::num_threads();
  for (QuantLevel level : {QuantLevel::kScalar, QuantLevel::kAvx2, QuantLevel::kAvx512}) {
    if (!k::set_quant_level(level)) continue;
    uint32_t seed = 900;
    for (WeightFormat f : k::kAllWeightFormats) {
      for (size_t M : {1, 16, 40}) {
        const size_t N = 769, K = 1536;  // enough work for the threaded path
        const auto w = random_weights(f, N, K, ++seed);
        const auto x = adakv::test::random_vector(M * K, ++seed);
        std::vector<float> y1(M * N), y2(M * N);
        k::set_num_threads(1);
        ASSERT_EQ(k::matmul_quant(y1.data(), x.data(), w.data(), f, M, N, K), k::Status::kOk);
        k::set_num_threads(2);
        ASSERT_EQ(k::matmul_quant(y2.data(), x.data(), w.data(), f, M, N, K), k::Status::kOk);
        EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0)
            << label(f, level, M, N, K);
      }
    }
  }
  k::set_num_threads(before);
}

// The explicit paths, with an output row stride and accumulation: the GEMM equals
// dequantize-then-float32 within float32 rounding at every M, and so do float dots; a row of the
// row-dot paths is bit for bit the same alone as in a batch of M.
TEST(QuantMatmul, ExplicitPathsStridesAndAccumulation) {
  LevelGuard guard;
  uint32_t seed = 900;
  for (QuantLevel level : {QuantLevel::kScalar, QuantLevel::kAvx2, QuantLevel::kAvx512}) {
    if (!k::set_quant_level(level)) continue;
    for (WeightFormat f : k::kAllWeightFormats) {
      const size_t K = k::block_elements(f) == 256 ? 512 : 96, N = 37, ldy = N + 5;
      const auto w = random_weights(f, N, K, ++seed);
      const auto wf = dequantize(f, w, N, K);
      for (k::MatmulPath path : {k::MatmulPath::kRowDots, k::MatmulPath::kFloatDots,
                                 k::MatmulPath::kInt16Dots, k::MatmulPath::kFloatGemm}) {
        // The activation term: 8-bit steps on the int8 path, 16-bit ones on the int16 path,
        // none on the float paths or for float weights.
        const double act_factor = k::block_elements(f) == 1           ? 0.0
                                  : path == k::MatmulPath::kRowDots   ? 1.0
                                  : path == k::MatmulPath::kInt16Dots ? k::kInt16ActFactor
                                                                      : 0.0;
        for (size_t M : {1, 5, 33}) {
          const auto x = adakv::test::random_vector(M * K, ++seed);
          const auto y0 = adakv::test::random_vector(M * ldy, ++seed);
          std::vector<float> y = y0;
          ASSERT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), f, M, N, K, {ldy, true, path}),
                    k::Status::kOk);
          std::vector<double> ref, mag, act;
          reference(x, wf, M, N, K, ref, mag, &act);
          const k::QuantTolerance tol = k::quant_tolerance(f);
          for (size_t m = 0; m < M; ++m) {
            for (size_t n = 0; n < ldy; ++n) {
              const size_t i = m * ldy + n;
              if (n >= N) {
                ASSERT_EQ(y[i], y0[i]) << "wrote outside the row: " << label(f, level, M, N, K);
                continue;
              }
              const size_t r = m * N + n;
              const double bound = act_factor * tol.act * act[r] + tol.rel * mag[r] +
                                   1e-6 * std::fabs(double(y0[i])) + 1e-30;
              ASSERT_LE(std::fabs(double(y[i]) - y0[i] - ref[r]), bound)
                  << label(f, level, M, N, K) << " path " << int(path) << " at " << m << "," << n;
            }
          }
          if (path == k::MatmulPath::kFloatGemm) continue;
          for (size_t m = 0; m < M; ++m) {
            std::vector<float> alone(N);
            ASSERT_EQ(k::matmul_quant(alone.data(), x.data() + m * K, w.data(), f, 1, N, K,
                                      {0, false, path}),
                      k::Status::kOk);
            std::vector<float> batched(M * N);
            ASSERT_EQ(
                k::matmul_quant(batched.data(), x.data(), w.data(), f, M, N, K, {0, false, path}),
                k::Status::kOk);
            for (size_t n = 0; n < N; ++n) {
              ASSERT_EQ(alone[n], batched[m * N + n]) << label(f, level, M, N, K);
            }
          }
        }
      }
    }
  }
  std::vector<float> x(96), y(4);
  std::vector<uint8_t> w(4 * 96 * 4);
  EXPECT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), WeightFormat::kF32, 1, 4, 96, {3}),
            k::Status::kInvalidArgument);  // ldy below N
}

// The float GEMM in row groups: each group's rows are bit for bit those of a GEMM of that group
// alone, with an output stride and accumulation (OpenBLAS's results depend on the call's M, so
// a prompt chunk beside other chunks computes what it computes alone).
TEST(QuantMatmul, GemmRowGroupsEqualEachGroupAlone) {
  LevelGuard guard;
  uint32_t seed = 1200;
  for (QuantLevel level : {QuantLevel::kScalar, QuantLevel::kAvx2}) {
    if (!k::set_quant_level(level)) continue;
    for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kQ4_1, WeightFormat::kQ6_K}) {
      const size_t K = 512, N = 70, ldy = N + 3;
      const std::vector<uint32_t> groups = {40, 1, 0, 513, 7};
      const size_t M = 561;
      const auto w = random_weights(f, N, K, ++seed);
      const auto x = adakv::test::random_vector(M * K, ++seed);
      const auto y0 = adakv::test::random_vector(M * ldy, ++seed);
      std::vector<float> y = y0;
      k::MatmulOptions grouped{ldy, true, k::MatmulPath::kFloatGemm};
      grouped.row_groups = groups.data();
      grouped.n_row_groups = groups.size();
      ASSERT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), f, M, N, K, grouped), k::Status::kOk);
      size_t m0 = 0;
      for (uint32_t rows : groups) {
        std::vector<float> alone(y0.begin() + m0 * ldy, y0.begin() + (m0 + rows) * ldy);
        ASSERT_EQ(k::matmul_quant(alone.data(), x.data() + m0 * K, w.data(), f, rows, N, K,
                                  {ldy, true, k::MatmulPath::kFloatGemm}),
                  k::Status::kOk);
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), y.begin() + m0 * ldy,
                               [](float a, float b) { return std::memcmp(&a, &b, 4) == 0; }))
            << label(f, level, rows, N, K) << " group at row " << m0;
        m0 += rows;
      }
      grouped.n_row_groups = groups.size() - 1;  // 554 rows of 561
      EXPECT_EQ(k::matmul_quant(y.data(), x.data(), w.data(), f, M, N, K, grouped),
                k::Status::kInvalidArgument);
    }
  }
}
