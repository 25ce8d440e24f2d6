// The quantized-weight group's kernel math (kernels/cuda/quant_blocks.cuh, quant_tiles.cuh) run on
// the host against the CPU:
//  - half_to_float over all 65536 codes bit for bit against the CPU's converter and against
//    the definition (subnormals, infinities, NaNs and signed zeros included); bf16 likewise;
//  - every format's element decoder against the CPU's dequantize_rows (the scalar level and the
//    best one) bit for bit, on blocks with plausible scales and on wholly random bytes (fp16
//    scales that are subnormal, infinite or NaN), rows at unaligned addresses; the interleaved
//    decoder against dequantize_rows on interleave_weights' layout;
//  - the matmul kernel emulated thread by thread and phase by phase (stage, barrier, multiply,
//    barrier, store) over whole grids, both tile shapes: bit for bit the FMA chain in k order over
//    the CPU's dequantized weights, the same bits whatever M or the tile (batch invariance),
//    ldy > N untouched, accumulate, and within kCudaMatmulTolerance of the CPU's matmul_quant on
//    its float paths;
//  - the embedding kernels' element function against the CPU backend's embed_rows and
//    embed_shard_rows bit for bit;
//  - the host-side argument checks of cuda::matmul_quant / embed_rows / embed_shard_rows that
//    need no device: what the CPU rejects is rejected (std::invalid_argument naming the op), the
//    paths without a kernel throw std::runtime_error, empty calls do nothing; and what
//    embed_shard_rows decides from the scan of its ids (kernels/cuda/quant_plan.h, the scan's
//    definition scan_ids_on_host) is the CPU's token-by-token outcome, message included.
// What stays unproven here: the kernels' launch, the barriers' real effect, the device scan of
// the ids and the device's arithmetic (the GPU tests, tests/gpu/test_cuda_quant.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/quant_impl.h"
#include "kernels/cuda/quant_blocks.cuh"
#include "kernels/cuda/quant_ops.h"
#include "kernels/cuda/quant_plan.h"
#include "kernels/cuda/quant_tiles.cuh"
#include "kernels/half.h"
#include "kernels/quant.h"
#include "tests/gpu/cuda_fixture.h"
#include "tests/unit/random_data.h"

namespace {

namespace k = adakv::kernels;
namespace qb = adakv::kernels::cuda::qblocks;
namespace qt = adakv::kernels::cuda::qtiles;
using adakv::test::kCudaMatmulTolerance;
using adakv::test::matches_cpu;
using adakv::test::random_vector;
using adakv::test::rejects;
using adakv::test::same_bits;
using k::WeightFormat;

k::Backend& cpu() {
  return k::cpu_backend();
}

uint32_t to_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Bit equality, except that any two NaNs are equal (the CPU's SIMD levels and the scalar code
// may quiet a NaN differently).
testing::AssertionResult same_bits_or_nans(const std::vector<float>& got,
                                           const std::vector<float>& want) {
  if (got.size() != want.size()) return testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (to_bits(got[i]) != to_bits(want[i])) {
      return testing::AssertionFailure()
             << "element " << i << ": " << got[i] << " (0x" << std::hex << to_bits(got[i])
             << "), cpu " << want[i] << " (0x" << to_bits(want[i]) << ")";
    }
  }
  return testing::AssertionSuccess();
}

// The scalar level decodes as the GGUF reader (numpy's order, no fused multiply-add), the device
// as the SIMD levels: the two may differ in the last bit and in the sign of a zero.
testing::AssertionResult within_one_ulp(const std::vector<float>& got,
                                        const std::vector<float>& want) {
  if (got.size() != want.size()) return testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (got[i] == want[i]) continue;
    if (std::nextafter(want[i], got[i]) == got[i]) continue;
    return testing::AssertionFailure() << "element " << i << ": " << got[i] << ", cpu " << want[i];
  }
  return testing::AssertionSuccess();
}

// N rows of K elements of format f. Plausible: random quants with finite fp16 scales of
// magnitude 2^-9..2^-4 (the float formats: normal values); otherwise every byte random, so
// scales may be subnormal, infinite or NaN.
std::vector<uint8_t> random_weights(WeightFormat f, size_t N, size_t K, uint32_t seed,
                                    bool plausible = true) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(N * k::row_bytes(f, K));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  if (!plausible) return w;
  auto half = [&](int exp_lo, int exp_hi) {
    const uint32_t exp = exp_lo + rng() % (exp_hi - exp_lo + 1);
    return static_cast<uint16_t>((rng() & 1) << 15 | exp << 10 | (rng() & 0x3FF));
  };
  auto put = [](uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); };
  if (f == WeightFormat::kF32) {
    const auto v = random_vector(N * K, seed);
    std::memcpy(w.data(), v.data(), w.size());
    return w;
  }
  if (f == WeightFormat::kF16 || f == WeightFormat::kBF16) {
    const auto v = random_vector(N * K, seed);
    for (size_t i = 0; i < N * K; ++i) {
      put(w.data() + 2 * i,
          f == WeightFormat::kF16 ? half(10, 16) : static_cast<uint16_t>(to_bits(v[i]) >> 16));
    }
    return w;
  }
  const size_t bb = k::block_bytes(f);
  for (size_t off = 0; off < w.size(); off += bb) {
    uint8_t* b = w.data() + off;
    switch (f) {
      case WeightFormat::kQ8_0:
      case WeightFormat::kQ4_0:
      case WeightFormat::kQ5_0:
        put(b, half(6, 11));
        break;
      case WeightFormat::kQ4_1:
      case WeightFormat::kQ5_1:
      case WeightFormat::kQ4_K:
      case WeightFormat::kQ5_K:
        put(b, half(6, 11));
        put(b + 2, half(6, 11));
        break;
      case WeightFormat::kQ6_K:
        put(b + 208, half(3, 8));
        break;
      default:
        break;
    }
  }
  return w;
}

// Rows [0, N) of w decoded by the CPU backend (dequantize_rows at the current level).
std::vector<float> cpu_rows(WeightFormat f, const uint8_t* w, size_t N, size_t K,
                            k::WeightLayout layout = k::WeightLayout::kRows) {
  std::vector<int32_t> ids(N);
  for (size_t n = 0; n < N; ++n) ids[n] = static_cast<int32_t>(n);
  std::vector<float> out(N * K);
  cpu().embed_rows(out.data(), w, f, layout, ids.data(), N, N, K);
  return out;
}

// Row n of w decoded by qblocks::weight_element.
template <WeightFormat F>
std::vector<float> device_rows(const uint8_t* w, size_t N, size_t K) {
  std::vector<float> out(N * K);
  const size_t rb = k::row_bytes(F, K);
  for (size_t n = 0; n < N; ++n) {
    for (size_t i = 0; i < K; ++i) out[n * K + i] = qb::weight_element<F>(w + n * rb, i);
  }
  return out;
}

// Calls fn(std::integral_constant<WeightFormat, F>{}) for every format of kernels/quant.h.
template <class Fn>
void for_each_format(Fn&& fn) {
  fn(std::integral_constant<WeightFormat, WeightFormat::kF32>{});
  fn(std::integral_constant<WeightFormat, WeightFormat::kF16>{});
  fn(std::integral_constant<WeightFormat, WeightFormat::kBF16>{});
  fn(std::integral_constant<WeightFormat, WeightFormat::kQ8_0>{});
  fn(std::integral_constant<WeightFormat, WeightFormat::kQ4_0>{});
  fn(std::integral_constant<WeightFormat, WeightFormat::kQ4_1>{});
  fn(std::integral_constant<WeightFormat, WeightFormat::kQ5_0>{});
  fn(std::integral_constant<WeightFormat, WeightFormat::kQ5_1>{});
  fn(std::integral_constant<WeightFormat, WeightFormat::kQ4_K>{});
  fn(std::integral_constant<WeightFormat, WeightFormat::kQ5_K>{});
  fn(std::integral_constant<WeightFormat, WeightFormat::kQ6_K>{});
}

struct LevelGuard {
  ~LevelGuard() { k::set_quant_level(k::best_quant_level()); }
};

// ---- Scalar conversions -------------------------------------------------------------------

TEST(DeviceMathQuant, HalfToFloatIsExactOnEveryCode) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float got = qb::half_to_float(h);
    const float cpu_value = k::fp16_to_fp32(static_cast<uint16_t>(h));
    ASSERT_EQ(to_bits(got), to_bits(cpu_value)) << "half 0x" << std::hex << h;
    // The definition: (-1)^s 2^(e - 15) (1 + m / 1024), subnormals m 2^-24.
    const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const double sign = h & 0x8000 ? -1.0 : 1.0;
    if (e == 0x1F) {
      ASSERT_EQ(std::isnan(got), m != 0) << std::hex << h;
      if (m == 0) ASSERT_EQ(got, sign * INFINITY) << std::hex << h;
      // The payload is kept: float's top mantissa bits are the half's.
      if (m != 0) ASSERT_EQ((to_bits(got) >> 13) & 0x3FF, m) << std::hex << h;
    } else {
      const double want = e == 0 ? sign * std::ldexp(double(m), -24)
                                 : sign * std::ldexp(1.0 + m / 1024.0, int(e) - 15);
      ASSERT_EQ(double(got), want) << std::hex << h;
    }
    ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
  }
  EXPECT_EQ(qb::half_to_float(0x0001), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(qb::half_to_float(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(qb::half_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(qb::half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(qb::half_to_float(0xFC00), -INFINITY);
  EXPECT_EQ(to_bits(qb::half_to_float(0x8000)), 0x80000000u);
  EXPECT_EQ(to_bits(qb::half_to_float(0x7E00)), 0x7FC00000u);
}

TEST(DeviceMathQuant, Bf16ToFloatIsExactOnEveryCode) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    ASSERT_EQ(to_bits(qb::bf16_to_float(h)), to_bits(k::bf16_to_fp32(static_cast<uint16_t>(h))))
        << std::hex << h;
    ASSERT_EQ(to_bits(qb::bf16_to_float(h)), h << 16) << std::hex << h;
  }
}

TEST(DeviceMathQuant, BlockGeometryIsTheCpus) {
  for (WeightFormat f : k::kAllWeightFormats) {
    EXPECT_EQ(qb::elements_of(f), k::block_elements(f)) << k::weight_format_name(f);
    EXPECT_EQ(qb::bytes_of(f), k::block_bytes(f)) << k::weight_format_name(f);
    EXPECT_EQ(qb::interleavable_format(f), k::interleavable(f)) << k::weight_format_name(f);
  }
}

// ---- Element decoders ---------------------------------------------------------------------

std::vector<size_t> ks_for(WeightFormat f) {
  switch (k::block_elements(f)) {
    case 1:
      return {1, 7, 33, 96};
    case 32:
      return {32, 96, 256};
    default:
      return {256, 768};
  }
}

TEST(DeviceMathQuant, RowsDecodeAsTheCpuDequantizes) {
  LevelGuard guard;
  uint32_t seed = 10;
  for_each_format([&](auto fc) {
    constexpr WeightFormat F = decltype(fc)::value;
    const char* name = k::weight_format_name(F);
    for (size_t K : ks_for(F)) {
      const size_t N = 23;
      for (bool plausible : {true, false}) {
        const auto w = random_weights(F, N, K, ++seed, plausible);
        const auto got = device_rows<F>(w.data(), N, K);
        ASSERT_TRUE(k::set_quant_level(k::QuantLevel::kScalar));
        const auto scalar = cpu_rows(F, w.data(), N, K);
        k::set_quant_level(k::best_quant_level());
        const auto best = cpu_rows(F, w.data(), N, K);
        if (plausible) {
          EXPECT_TRUE(within_one_ulp(got, scalar))
              << name << " K=" << K << " against the scalar level";
          EXPECT_TRUE(same_bits(got, best)) << name << " K=" << K << " against the "
                                            << k::quant_level_name(k::best_quant_level());
        } else {
          // Random bytes: fp16 scales of every kind, int8 -128, Q6_K's negative scales.
          EXPECT_TRUE(same_bits_or_nans(got, best)) << name << " K=" << K << ", random bytes";
          EXPECT_TRUE(within_one_ulp(got, scalar)) << name << " K=" << K << ", random bytes";
        }
        // A row at an odd address decodes the same (every byte is loaded on its own).
        std::vector<uint8_t> shifted(w.size() + 1);
        std::memcpy(shifted.data() + 1, w.data(), w.size());
        const auto moved = device_rows<F>(shifted.data() + 1, N, K);
        EXPECT_TRUE(same_bits_or_nans(moved, got)) << name << " K=" << K << " unaligned";
      }
    }
  });
}

template <WeightFormat F>
void check_interleaved(uint32_t seed) {
  for (size_t N : {1, 16, 37}) {
    for (size_t K : {32, 96}) {
      for (bool plausible : {true, false}) {
        const auto w = random_weights(F, N, K, seed++, plausible);
        std::vector<uint8_t> il(k::interleaved_bytes(F, N, K));
        ASSERT_EQ(k::interleave_weights(il.data(), w.data(), F, N, K), k::Status::kOk);
        const auto want = cpu_rows(F, il.data(), N, K, k::WeightLayout::kInterleaved);
        std::vector<float> got(N * K);
        for (size_t n = 0; n < N; ++n) {
          for (size_t i = 0; i < K; ++i)
            got[n * K + i] = qb::interleaved_element<F>(il.data(), K, n, i);
        }
        EXPECT_TRUE(same_bits_or_nans(got, want))
            << k::weight_format_name(F) << " N=" << N << " K=" << K
            << (plausible ? "" : ", random bytes");
        if (plausible) {
          // And the rows layout's values (the CPU's two layouts agree on finite weights).
          EXPECT_TRUE(same_bits(got, device_rows<F>(w.data(), N, K)))
              << k::weight_format_name(F) << " N=" << N << " K=" << K << " against kRows";
        }
      }
    }
  }
}

TEST(DeviceMathQuant, InterleavedDecodesAsTheCpuDequantizes) {
  check_interleaved<WeightFormat::kQ8_0>(500);
  check_interleaved<WeightFormat::kQ4_0>(600);
  check_interleaved<WeightFormat::kQ4_1>(700);
}

// ---- The matmul kernel, emulated ----------------------------------------------------------

// matmul_kernel<F, S> (kernels/cuda/quant_ops.cu) on the host: every block of the grid, its
// threads run each phase in turn, the barriers between phases.
template <WeightFormat F, class S>
void emulate_matmul(const qt::MatmulArgs& a) {
  const size_t n_tiles = (a.N + S::BN - 1) / S::BN, m_tiles = (a.M + S::BM - 1) / S::BM;
  std::vector<float> accs(qt::kTileThreads * S::TM * S::TN);
  auto acc_of = [&](unsigned tid) -> float(&)[S::TM][S::TN] {
    return *reinterpret_cast<float(*)[S::TM][S::TN]>(accs.data() + tid * S::TM * S::TN);
  };
  qt::TileSmem<S> smem;
  for (size_t nt = 0; nt < n_tiles; ++nt) {
    for (size_t mt = 0; mt < m_tiles; ++mt) {
      const size_t m0 = mt * S::BM, n0 = nt * S::BN;
      std::fill(accs.begin(), accs.end(), 0.0f);
      for (size_t k0 = 0; k0 < a.K; k0 += qt::kTileK) {
        // Whatever a previous step left must not matter: poison the staging.
        std::memset(&smem, 0xFF, sizeof smem);
        for (unsigned t = 0; t < qt::kTileThreads; ++t)
          qt::stage_tile<F, S>(a, m0, n0, k0, t, smem);
        const unsigned kn = static_cast<unsigned>(std::min<size_t>(qt::kTileK, a.K - k0));
        for (unsigned t = 0; t < qt::kTileThreads; ++t)
          qt::multiply_tile<S>(smem, kn, t, acc_of(t));
      }
      for (unsigned t = 0; t < qt::kTileThreads; ++t) qt::store_tile<S>(a, m0, n0, t, acc_of(t));
    }
  }
}

// The reference: per output one fma chain in k order over the CPU's dequantized weights.
std::vector<float> fma_chain(const std::vector<float>& x, const std::vector<float>& wf, size_t M,
                             size_t N, size_t K) {
  std::vector<float> y(M * N);
  for (size_t m = 0; m < M; ++m) {
    for (size_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (size_t i = 0; i < K; ++i) acc = std::fma(x[m * K + i], wf[n * K + i], acc);
      y[m * N + n] = acc;
    }
  }
  return y;
}

// Columns [0, N) of the rows of a [M][ldy] matrix.
std::vector<float> columns(const std::vector<float>& y, size_t M, size_t N, size_t ldy) {
  std::vector<float> out(M * N);
  for (size_t m = 0; m < M; ++m) {
    for (size_t n = 0; n < N; ++n) out[m * N + n] = y[m * ldy + n];
  }
  return out;
}

template <WeightFormat F, class S>
std::vector<float> run_emulated(const std::vector<float>& x, const std::vector<uint8_t>& w,
                                size_t M, size_t N, size_t K, size_t ldy, bool accumulate,
                                std::vector<float> y) {
  const qt::MatmulArgs a{y.data(), x.data(), w.data(),           M,         N,
                         K,        ldy,      k::row_bytes(F, K), accumulate};
  emulate_matmul<F, S>(a);
  return y;
}

TEST(DeviceMathQuant, MatmulKernelIsTheFmaChainInEveryTile) {
  uint32_t seed = 1000;
  for_each_format([&](auto fc) {
    constexpr WeightFormat F = decltype(fc)::value;
    const char* name = k::weight_format_name(F);
    const std::vector<size_t> ks = ks_for(F);
    for (size_t K : {ks.front(), ks.back()}) {
      for (size_t N : {1, 33, 70}) {
        const auto w = random_weights(F, N, K, ++seed);
        const auto wf = cpu_rows(F, w.data(), N, K);
        for (size_t M : {1, 7, 9, 70}) {
          const std::string at = std::string(name) + " M=" + std::to_string(M) +
                                 " N=" + std::to_string(N) + " K=" + std::to_string(K);
          const auto x = random_vector(M * K, ++seed);
          const auto want = fma_chain(x, wf, M, N, K);
          // Rows padded by 3 columns that must keep their sentinel.
          const size_t ldy = N + 3;
          const std::vector<float> sentinel(M * ldy, -7.25f);
          const auto narrow = run_emulated<F, qt::NarrowTile>(x, w, M, N, K, ldy, false, sentinel);
          const auto wide = run_emulated<F, qt::WideTile>(x, w, M, N, K, ldy, false, sentinel);
          ASSERT_TRUE(same_bits(columns(narrow, M, N, ldy), want)) << at << ", narrow tile";
          ASSERT_TRUE(same_bits(columns(wide, M, N, ldy), want)) << at << ", wide tile";
          for (size_t m = 0; m < M; ++m) {
            for (size_t n = N; n < ldy; ++n) {
              ASSERT_EQ(narrow[m * ldy + n], -7.25f) << at;
              ASSERT_EQ(wide[m * ldy + n], -7.25f) << at;
            }
          }
          // Accumulate: y + the chain, one rounding.
          const auto y0 = random_vector(M * ldy, ++seed);
          const auto acc = run_emulated<F, qt::WideTile>(x, w, M, N, K, ldy, true, y0);
          std::vector<float> acc_want = columns(y0, M, N, ldy);
          for (size_t i = 0; i < acc_want.size(); ++i) acc_want[i] += want[i];
          ASSERT_TRUE(same_bits(columns(acc, M, N, ldy), acc_want)) << at << ", accumulate";

          // Within the tolerance of the CPU's float paths (the tests on the GPU compare so).
          for (k::MatmulPath path : {k::MatmulPath::kFloatDots, k::MatmulPath::kFloatGemm}) {
            std::vector<float> cpu_y(M * N);
            k::MatmulOptions options;
            options.path = path;
            cpu().matmul_quant(cpu_y.data(), x.data(), w.data(), F, M, N, K, options);
            EXPECT_TRUE(matches_cpu(columns(wide, M, N, ldy), cpu_y, kCudaMatmulTolerance))
                << at << (path == k::MatmulPath::kFloatDots ? ", float dots" : ", float gemm");
          }
        }
      }
    }
  });
}

// The chain (the kernel's bits, above) against the CPU's float paths at the shapes of the GPU
// tests (tests/gpu/test_cuda_quant.cpp): kCudaMatmulTolerance holds there.
TEST(DeviceMathQuant, FmaChainIsWithinTheToleranceOfTheCpuAtTheGpuTestsShapes) {
  uint32_t seed = 2000;
  for (WeightFormat f : k::kAllWeightFormats) {
    const size_t K = k::block_elements(f) == 256 ? 1536 : 576, N = 130;
    const auto w = random_weights(f, N, K, ++seed);
    const auto wf = cpu_rows(f, w.data(), N, K);
    for (size_t M : {1, 33, 300}) {
      const auto x = random_vector(M * K, ++seed);
      const auto chain = fma_chain(x, wf, M, N, K);
      for (k::MatmulPath path : {k::MatmulPath::kFloatDots, k::MatmulPath::kFloatGemm}) {
        k::MatmulOptions options;
        options.path = path;
        std::vector<float> want(M * N);
        cpu().matmul_quant(want.data(), x.data(), w.data(), f, M, N, K, options);
        double worst = 0, max_ref = 1e-30;
        for (size_t i = 0; i < want.size(); ++i) {
          max_ref = std::max(max_ref, std::fabs(double(want[i])));
          worst = std::max(worst, std::fabs(double(chain[i]) - want[i]));
        }
        EXPECT_TRUE(matches_cpu(chain, want, kCudaMatmulTolerance))
            << k::weight_format_name(f) << " M=" << M << " K=" << K << " path " << int(path);
        EXPECT_LT(worst / max_ref, kCudaMatmulTolerance / 4)
            << k::weight_format_name(f) << " M=" << M << ": less than 4x of margin";
      }
    }
  }
}

// A row's bits depend on its x row, W and K only: the same row alone, in a small batch (the
// narrow tile) and in a large one (the wide tile, at another position in its tile) agree.
TEST(DeviceMathQuant, MatmulKernelIsBatchInvariant) {
  constexpr WeightFormat F = WeightFormat::kQ4_K;
  const size_t K = 512, N = 45, M = 67;
  const auto w = random_weights(F, N, K, 77);
  const auto x = random_vector(M * K, 78);
  const auto all =
      run_emulated<F, qt::WideTile>(x, w, M, N, K, N, false, std::vector<float>(M * N));
  for (size_t m : {0, 5, 63, 64, 66}) {
    const std::vector<float> row(x.begin() + m * K, x.begin() + (m + 1) * K);
    const auto alone =
        run_emulated<F, qt::NarrowTile>(row, w, 1, N, K, N, false, std::vector<float>(N));
    const std::vector<float> in_all(all.begin() + m * N, all.begin() + (m + 1) * N);
    EXPECT_TRUE(same_bits(alone, in_all)) << "row " << m;
  }
  // Fewer weight rows (a slice of W starting at row 17): the same columns.
  const size_t n0 = 17, n = 9;
  const std::vector<uint8_t> slice(w.begin() + n0 * k::row_bytes(F, K),
                                   w.begin() + (n0 + n) * k::row_bytes(F, K));
  const auto part =
      run_emulated<F, qt::WideTile>(x, slice, M, n, K, n, false, std::vector<float>(M * n));
  for (size_t m = 0; m < M; ++m) {
    for (size_t j = 0; j < n; ++j)
      ASSERT_EQ(to_bits(part[m * n + j]), to_bits(all[m * N + n0 + j]));
  }
}

// ---- The embeddings, element by element -----------------------------------------------------

TEST(DeviceMathQuant, EmbedElementsAreTheCpuBackendsRows) {
  uint32_t seed = 3000;
  for_each_format([&](auto fc) {
    constexpr WeightFormat F = decltype(fc)::value;
    const size_t dim = ks_for(F).back(), vocab = 50;
    const auto table = random_weights(F, vocab, dim, ++seed);
    const size_t rb = k::row_bytes(F, dim);
    const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 40, 39, 12};
    const size_t T = ids.size();
    std::vector<float> want(T * dim), got(T * dim);
    cpu().embed_rows(want.data(), table.data(), F, k::WeightLayout::kRows, ids.data(), T, vocab,
                     dim);
    for (size_t t = 0; t < T; ++t) {
      for (size_t i = 0; i < dim; ++i) {
        got[t * dim + i] = qt::embed_element<F, false>(table.data(), rb, dim, ids[t], 0, vocab, i);
      }
    }
    EXPECT_TRUE(same_bits(got, want)) << k::weight_format_name(F) << " embed_rows";
    // A shard holding rows [20, 40) of the vocabulary.
    const size_t begin = 20, n_rows = 20;
    const uint8_t* shard = table.data() + begin * rb;
    cpu().embed_shard_rows(want.data(), shard, F, k::WeightLayout::kRows, ids.data(), T, begin,
                           n_rows, vocab, dim);
    for (size_t t = 0; t < T; ++t) {
      for (size_t i = 0; i < dim; ++i) {
        got[t * dim + i] = qt::embed_element<F, false>(shard, rb, dim, ids[t], begin, n_rows, i);
      }
    }
    EXPECT_TRUE(same_bits(got, want)) << k::weight_format_name(F) << " embed_shard_rows";
  });
}

TEST(DeviceMathQuant, InterleavedEmbedElementsAreTheCpuBackendsRows) {
  constexpr WeightFormat F = WeightFormat::kQ4_1;
  const size_t dim = 96, vocab = 37;
  const auto w = random_weights(F, vocab, dim, 4000);
  std::vector<uint8_t> table(k::interleaved_bytes(F, vocab, dim));
  ASSERT_EQ(k::interleave_weights(table.data(), w.data(), F, vocab, dim), k::Status::kOk);
  const std::vector<int32_t> ids = {36, 0, 15, 16, 17};
  std::vector<float> want(ids.size() * dim), got(ids.size() * dim);
  cpu().embed_rows(want.data(), table.data(), F, k::WeightLayout::kInterleaved, ids.data(),
                   ids.size(), vocab, dim);
  for (size_t t = 0; t < ids.size(); ++t) {
    for (size_t i = 0; i < dim; ++i) {
      got[t * dim + i] = qt::embed_element<F, true>(table.data(), 0, dim, ids[t], 0, vocab, i);
    }
  }
  EXPECT_TRUE(same_bits(got, want));
}

// ---- Host-side checks (no device needed: they throw before anything is enqueued) ------------

TEST(DeviceMathQuant, MatmulRejectsWhatTheCpuRejects) {
  namespace cu = adakv::kernels::cuda;
  std::vector<float> x(512, 1.0f), y(64);
  std::vector<uint8_t> w(4096);
  auto both = [&](WeightFormat f, size_t M, size_t N, size_t K, const k::MatmulOptions& o,
                  float* yp, const float* xp, const void* wp) {
    return rejects([&] { cu::matmul_quant(nullptr, yp, xp, wp, f, M, N, K, o); }, "matmul_quant") &&
           rejects([&] { cpu().matmul_quant(yp, xp, wp, f, M, N, K, o); }, "matmul_quant");
  };
  const k::MatmulOptions plain;
  EXPECT_TRUE(both(static_cast<WeightFormat>(10), 1, 1, 256, plain, y.data(), x.data(), w.data()));
  EXPECT_TRUE(both(WeightFormat::kF32, 1, 1, 0, plain, y.data(), x.data(), w.data()));
  EXPECT_TRUE(both(WeightFormat::kQ4_0, 1, 1, 48, plain, y.data(), x.data(), w.data()));
  EXPECT_TRUE(both(WeightFormat::kQ4_K, 1, 1, 32, plain, y.data(), x.data(), w.data()));
  k::MatmulOptions narrow_ldy;
  narrow_ldy.ldy = 3;
  EXPECT_TRUE(both(WeightFormat::kQ8_0, 1, 4, 32, narrow_ldy, y.data(), x.data(), w.data()));
  EXPECT_TRUE(both(WeightFormat::kQ8_0, 1, 1, 32, plain, nullptr, x.data(), w.data()));
  EXPECT_TRUE(both(WeightFormat::kQ8_0, 1, 1, 32, plain, y.data(), nullptr, w.data()));
  EXPECT_TRUE(both(WeightFormat::kQ8_0, 1, 1, 32, plain, y.data(), x.data(), nullptr));
  const uint32_t groups[] = {2, 2};
  k::MatmulOptions bad_groups;
  bad_groups.row_groups = groups;
  bad_groups.n_row_groups = 2;
  EXPECT_TRUE(both(WeightFormat::kQ8_0, 5, 1, 32, bad_groups, y.data(), x.data(), w.data()));
  k::MatmulOptions interleaved;
  interleaved.layout = k::WeightLayout::kInterleaved;
  EXPECT_TRUE(both(WeightFormat::kF16, 1, 1, 32, interleaved, y.data(), x.data(), w.data()));
  interleaved.path = k::MatmulPath::kRowDots;
  EXPECT_TRUE(both(WeightFormat::kQ8_0, 1, 1, 32, interleaved, y.data(), x.data(), w.data()));

  // Empty products do nothing (and touch no device).
  cu::matmul_quant(nullptr, nullptr, nullptr, nullptr, WeightFormat::kQ8_0, 0, 5, 32, plain);
  cu::matmul_quant(nullptr, nullptr, nullptr, nullptr, WeightFormat::kQ8_0, 5, 0, 32, plain);

  // The paths without a kernel say so (not an invalid argument: the CPU takes them).
  auto not_implemented = [&](WeightFormat f, const k::MatmulOptions& o) {
    try {
      cu::matmul_quant(nullptr, y.data(), x.data(), w.data(), f, 1, 1, 32, o);
    } catch (const std::invalid_argument& e) {
      return testing::AssertionFailure() << "invalid_argument: " << e.what();
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()).find("matmul_quant") != std::string::npos &&
          std::string(e.what()).find("not implemented") != std::string::npos) {
        return testing::AssertionSuccess();
      }
      return testing::AssertionFailure() << e.what();
    }
    return testing::AssertionFailure() << "accepted";
  };
  for (k::MatmulPath path : {k::MatmulPath::kRowDots, k::MatmulPath::kInt16Dots}) {
    k::MatmulOptions o;
    o.path = path;
    EXPECT_TRUE(not_implemented(WeightFormat::kQ4_0, o));
    EXPECT_TRUE(not_implemented(WeightFormat::kQ8_0, o));
  }
  k::MatmulOptions il;
  il.layout = k::WeightLayout::kInterleaved;
  il.path = k::MatmulPath::kFloatDots;
  EXPECT_TRUE(not_implemented(WeightFormat::kQ8_0, il));
}

TEST(DeviceMathQuant, EmbeddingsRejectWhatTheCpuRejects) {
  namespace cu = adakv::kernels::cuda;
  std::vector<float> out(1024);
  std::vector<uint8_t> table(4096);
  const std::vector<int32_t> ids = {0, 1};
  auto both = [&](WeightFormat f, k::WeightLayout layout, size_t dim, float* o, const void* t,
                  const int32_t* i) {
    return rejects([&] { cu::embed_rows(nullptr, o, t, f, layout, i, 2, 4, dim); }, "embed_rows") &&
           rejects([&] { cpu().embed_rows(o, t, f, layout, i, 2, 4, dim); }, "embed_rows");
  };
  const auto rows = k::WeightLayout::kRows;
  EXPECT_TRUE(both(static_cast<WeightFormat>(10), rows, 256, out.data(), table.data(), ids.data()));
  EXPECT_TRUE(both(WeightFormat::kQ8_0, rows, 0, out.data(), table.data(), ids.data()));
  EXPECT_TRUE(both(WeightFormat::kQ8_0, rows, 48, out.data(), table.data(), ids.data()));
  EXPECT_TRUE(both(WeightFormat::kQ8_0, rows, 32, nullptr, table.data(), ids.data()));
  EXPECT_TRUE(both(WeightFormat::kQ8_0, rows, 32, out.data(), nullptr, ids.data()));
  EXPECT_TRUE(both(WeightFormat::kQ8_0, rows, 32, out.data(), table.data(), nullptr));
  EXPECT_TRUE(both(WeightFormat::kF16, k::WeightLayout::kInterleaved, 32, out.data(), table.data(),
                   ids.data()));
  // No tokens: nothing to do, on either.
  cu::embed_rows(nullptr, nullptr, nullptr, WeightFormat::kQ8_0, rows, nullptr, 0, 4, 32);
  cu::embed_shard_rows(nullptr, nullptr, nullptr, WeightFormat::kQ8_0, rows, nullptr, 0, 0, 4, 8,
                       32);
  EXPECT_TRUE(rejects(
      [&] {
        cu::embed_shard_rows(nullptr, out.data(), table.data(), WeightFormat::kQ8_0, rows, nullptr,
                             2, 0, 4, 8, 32);
      },
      "embed_shard_rows"));
}

// The scan of the ids plus plan_embed_shard_rows decide as the CPU twin's token-by-token loop:
// the same error (type and message) or none, and zeros exactly when no token is in the shard.
TEST(DeviceMathQuant, ShardPlanDecidesAsTheCpuGoesTokenByToken) {
  namespace cu = adakv::kernels::cuda;
  std::mt19937 rng(5000);
  const size_t vocab = 12, begin = 4, n_rows = 4;
  const auto good = random_weights(WeightFormat::kQ8_0, n_rows, 32, 5001);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t T = 1 + rng() % 6;
    std::vector<int32_t> ids(T);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % 16) - 2;  // -2..13: some outside
    const bool bad_table = rng() % 2;
    const size_t dim = bad_table && rng() % 2 ? 48 : 32;
    const void* table = bad_table && dim == 32 ? nullptr : good.data();
    std::vector<float> out(T * dim, 1.0f);
    std::string cpu_error;
    try {
      cpu().embed_shard_rows(out.data(), table, WeightFormat::kQ8_0, k::WeightLayout::kRows,
                             ids.data(), T, begin, n_rows, vocab, dim);
    } catch (const std::invalid_argument& e) {
      cpu_error = e.what();
    }
    std::string plan_error;
    cu::ShardRows action{};
    try {
      const cu::IdScan scan = cu::scan_ids_on_host(ids.data(), T, vocab, begin, begin + n_rows);
      const bool decodable =
          cu::decodable_table(table, WeightFormat::kQ8_0, k::WeightLayout::kRows, dim);
      EXPECT_EQ(decodable, !bad_table);
      action = cu::plan_embed_shard_rows(scan, T, decodable, vocab);
    } catch (const std::invalid_argument& e) {
      plan_error = e.what();
    }
    ASSERT_EQ(plan_error, cpu_error) << "trial " << trial;
    if (cpu_error.empty()) {
      const bool any_inside = std::any_of(ids.begin(), ids.end(), [&](int32_t id) {
        return id >= int32_t(begin) && id < int32_t(begin + n_rows);
      });
      EXPECT_EQ(action == cu::ShardRows::kZeros, bad_table) << "trial " << trial;
      if (bad_table) EXPECT_FALSE(any_inside);
    }
  }
}

}  // namespace
