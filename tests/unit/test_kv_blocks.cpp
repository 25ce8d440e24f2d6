// KV storage: bf16 and OCP FP8 E4M3 conversions against values computed here from the formats'
// definitions, and KV block write/read round trips for every dtype.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "tests/unit/random_data.h"
#include "tests/unit/tolerances.h"

namespace k = adakv::kernels;

namespace {

using adakv::test::random_vector;

// E4M3 (e4m3fn) from its definition: bias 7, 3 mantissa bits, exponent field 0 is subnormal
// (m/8 * 2^-6), S.1111.111 is NaN, everything else (1 + m/8) * 2^(e-7).
double e4m3_spec(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * (m / 8.0) * std::pow(2.0, -6);
  return sign * (1.0 + m / 8.0) * std::pow(2.0, e - 7);
}

// The E4M3 code nearest to x by exhaustive search, ties to the even code; |x| <= 448.
uint8_t e4m3_nearest(double x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  uint8_t best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double dc = std::fabs(e4m3_spec(c) - a), db = std::fabs(e4m3_spec(best) - a);
    if (dc < db || (dc == db && (c & 1) == 0)) best = static_cast<uint8_t>(c);
  }
  return sign | best;
}

// bf16 from its definition: the top 16 bits of a float32.
double bf16_spec(uint16_t h) {
  const int e = (h >> 7) & 0xFF, m = h & 0x7F;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0xFF) {
    return m ? std::numeric_limits<double>::quiet_NaN()
             : sign * std::numeric_limits<double>::infinity();
  }
  if (e == 0) return sign * (m / 128.0) * std::pow(2.0, -126);
  return sign * (1.0 + m / 128.0) * std::pow(2.0, e - 127);
}

uint16_t bits_hi(float x) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
}

}  // namespace

// ---- bf16 ----------------------------------------------------------------------------------

TEST(Bf16Convert, DecodesEveryCodeToItsDefinition) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const double want = bf16_spec(static_cast<uint16_t>(h));
    const float got = k::bf16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
    }
  }
}

TEST(Bf16Convert, RoundsToNearestWithTiesToEven) {
  // 1 = 0x3F80 and 1 + 2^-7 = 0x3F81 are neighbours; 1 + 2^-8 is their exact midpoint.
  EXPECT_EQ(k::fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(k::fp32_to_bf16(1.0f + 0x1p-8f), 0x3F80);                 // tie -> even (down)
  EXPECT_EQ(k::fp32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);             // tie -> even (up)
  EXPECT_EQ(k::fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);      // just above the tie
  EXPECT_EQ(k::fp32_to_bf16(1.0f + 3 * 0x1p-8f - 0x1p-20f), 0x3F81);  // just below the tie
  EXPECT_EQ(k::fp32_to_bf16(-(1.0f + 0x1p-8f)), 0xBF80);
  EXPECT_EQ(k::fp32_to_bf16(-(1.0f + 3 * 0x1p-8f)), 0xBF82);
  // A carry out of the mantissa bumps the exponent: 2 - 2^-9 lies above the midpoint to 2.
  EXPECT_EQ(k::fp32_to_bf16(2.0f - 0x1p-9f), 0x4000);
  EXPECT_EQ(k::fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(k::fp32_to_bf16(-0.0f), 0x8000);
  // The largest float lies above the midpoint between bf16's largest finite and infinity.
  EXPECT_EQ(k::fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
}

TEST(Bf16Convert, NanStaysNan) {
  // A NaN with only low payload bits would round into an infinity if rounded like a number.
  for (uint32_t bits : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0x7F80FFFFu}) {
    const uint16_t h = k::fp32_to_bf16(std::bit_cast<float>(bits));
    EXPECT_TRUE(std::isnan(k::bf16_to_fp32(h))) << std::hex << bits << " -> " << h;
    EXPECT_EQ(h & 0x8000, (bits >> 16) & 0x8000) << std::hex << bits;
  }
}

TEST(Bf16Convert, MatchesExhaustiveNearestOnRandomFloats) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200000; ++trial) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isfinite(x)) continue;
    // The two bf16 neighbours of x are its truncation and the next code away from zero.
    const uint16_t lo = bits_hi(x), hi = static_cast<uint16_t>(lo + 1);
    // Rounding treats infinity as the next step, 2^128, past the largest finite value.
    auto value = [](uint16_t h) {
      return (h & 0x7FFF) == 0x7F80 ? std::copysign(std::ldexp(1.0, 128), (h & 0x8000) ? -1 : 1)
                                    : bf16_spec(h);
    };
    const double dlo = std::fabs(value(lo) - x), dhi = std::fabs(value(hi) - x);
    const uint16_t want = (dlo < dhi || (dlo == dhi && (lo & 1) == 0)) ? lo : hi;
    ASSERT_EQ(k::fp32_to_bf16(x), want) << std::hexfloat << x;
  }
}

// ---- E4M3 ----------------------------------------------------------------------------------

TEST(E4M3Convert, DecodesAll256CodesToTheSpec) {
  for (int c = 0; c < 256; ++c) {
    const double want = e4m3_spec(static_cast<uint8_t>(c));
    const float got = k::e4m3_to_fp32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << c;
    }
  }
  // Landmarks of the OCP table.
  EXPECT_EQ(k::e4m3_to_fp32(0x7E), 448.0f);
  EXPECT_EQ(k::e4m3_to_fp32(0x38), 1.0f);
  EXPECT_EQ(k::e4m3_to_fp32(0x08), 0x1p-6f);
  EXPECT_EQ(k::e4m3_to_fp32(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(k::e4m3_to_fp32(0x01), 0x1p-9f);
  EXPECT_EQ(k::e4m3_to_fp32(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(k::e4m3_to_fp32(0x7F)));
  EXPECT_TRUE(std::isnan(k::e4m3_to_fp32(0xFF)));
}

TEST(E4M3Convert, EncodeInvertsDecodeForEveryCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(k::fp32_to_e4m3(k::e4m3_to_fp32(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(E4M3Convert, MidpointsRoundToEvenCode) {
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = k::e4m3_to_fp32(static_cast<uint8_t>(c));
    const float hi = k::e4m3_to_fp32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: float has far more mantissa bits
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(k::fp32_to_e4m3(mid), even) << "between codes " << c << " and " << c + 1;
    EXPECT_EQ(k::fp32_to_e4m3(-mid), 0x80 | even);
    EXPECT_EQ(k::fp32_to_e4m3(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(k::fp32_to_e4m3(std::nextafter(mid, 1000.0f)), c + 1);
  }
}

TEST(E4M3Convert, SaturatesAndMapsNanToNanCode) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, 3e38f, inf}) {
    EXPECT_EQ(k::fp32_to_e4m3(x), 0x7E) << x;
    EXPECT_EQ(k::fp32_to_e4m3(-x), 0xFE) << x;
  }
  EXPECT_EQ(k::fp32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(k::fp32_to_e4m3(std::bit_cast<float>(0x7F800001u)), 0x7F);
}

TEST(E4M3Convert, HandlesSubnormals) {
  EXPECT_EQ(k::fp32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(k::fp32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(k::fp32_to_e4m3(0x1p-9f), 0x01);   // smallest subnormal
  EXPECT_EQ(k::fp32_to_e4m3(0x1p-10f), 0x00);  // tie between 0 and 2^-9 -> 0
  EXPECT_EQ(k::fp32_to_e4m3(0x1p-10f + 0x1p-20f), 0x01);
  EXPECT_EQ(k::fp32_to_e4m3(3 * 0x1p-10f), 0x02);    // tie between codes 1 and 2 -> 2
  EXPECT_EQ(k::fp32_to_e4m3(7.5f * 0x1p-9f), 0x08);  // tie 7 vs 8 -> the smallest normal
  EXPECT_EQ(k::fp32_to_e4m3(6.5f * 0x1p-9f), 0x06);
  EXPECT_EQ(k::fp32_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(k::fp32_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(k::fp32_to_e4m3(-5 * 0x1p-9f), 0x85);
}

TEST(E4M3Convert, RandomValuesRoundToNearestWithinHalfUlp) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> log2_mag(-12.0f, 8.8f);  // 2^8.8 ~ 446 < 448
  for (int trial = 0; trial < 20000; ++trial) {
    const float x = std::exp2(log2_mag(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
    const uint8_t code = k::fp32_to_e4m3(x);
    ASSERT_EQ(code, e4m3_nearest(x)) << std::hexfloat << x;
    const float back = k::e4m3_to_fp32(code);
    if (std::fabs(x) >= 0x1p-6f) {
      ASSERT_LE(std::fabs(back - x), adakv::test::kE4M3Rel * std::fabs(x)) << x;
    } else {
      ASSERT_LE(std::fabs(back - x), 0x1p-10f) << x;  // half the subnormal spacing 2^-9
    }
  }
  // Normal draws, the distribution of activations, scaled into the normal range.
  for (float x : random_vector(20000, 6, 40.0f)) {
    if (std::fabs(x) < 0x1p-6f || std::fabs(x) > 448.0f) continue;
    const float back = k::e4m3_to_fp32(k::fp32_to_e4m3(x));
    ASSERT_LE(std::fabs(back - x), adakv::test::kE4M3Rel * std::fabs(x)) << x;
  }
}

// ---- KV blocks -----------------------------------------------------------------------------

TEST(KvBlock, LayoutSizes) {
  k::KvBlockLayout f32{16, 64, k::KvDtype::kF32};
  k::KvBlockLayout bf16{16, 64, k::KvDtype::kBF16};
  k::KvBlockLayout e4m3{16, 64, k::KvDtype::kE4M3};
  EXPECT_EQ(f32.block_bytes(), 2u * 16 * 64 * 4);
  EXPECT_EQ(bf16.block_bytes(), 2u * 16 * 64 * 2);
  EXPECT_EQ(e4m3.block_bytes(), 2u * 16 * 64 + 2 * 16 * 4);
  EXPECT_EQ(e4m3.v_offset(), 16u * 64);
  EXPECT_EQ(e4m3.scales_offset(), 2u * 16 * 64);
}

namespace {

// Writes rows [row0, row0 + n) of a block prefilled with a byte pattern from padded source
// rows, then checks that the rows outside that range kept their bytes and returns the block.
std::vector<uint8_t> write_rows(const k::KvBlockLayout& layout, size_t row0, size_t n,
                                const std::vector<float>& kin, const std::vector<float>& vin,
                                size_t stride) {
  std::vector<uint8_t> block(layout.block_bytes(), 0xA5);
  const std::vector<uint8_t> before = block;
  k::check(k::kv_block_write(block.data(), layout, row0, kin.data(), vin.data(), n, stride),
           "kv_block_write");
  const size_t row_bytes = layout.head_dim * layout.elem_bytes();
  for (size_t r = 0; r < layout.block_tokens; ++r) {
    if (r >= row0 && r < row0 + n) continue;
    for (size_t part : {layout.k_offset(), layout.v_offset()}) {
      EXPECT_EQ(std::memcmp(block.data() + part + r * row_bytes,
                            before.data() + part + r * row_bytes, row_bytes),
                0)
          << "row " << r << " was overwritten";
    }
    if (layout.dtype == k::KvDtype::kE4M3) {
      for (size_t which : {0, 1}) {
        const size_t off = layout.scales_offset() + (which * layout.block_tokens + r) * 4;
        EXPECT_EQ(std::memcmp(block.data() + off, before.data() + off, 4), 0) << "scale " << r;
      }
    }
  }
  return block;
}

// The value a block is expected to return for x (the writer's scale applied for E4M3).
float stored_value(float x, k::KvDtype dtype, float scale) {
  switch (dtype) {
    case k::KvDtype::kF32:
      return x;
    case k::KvDtype::kBF16:
      return k::bf16_to_fp32(k::fp32_to_bf16(x));
    case k::KvDtype::kE4M3:
      return k::e4m3_to_fp32(k::fp32_to_e4m3(x / scale)) * scale;
  }
  return 0;
}

}  // namespace

TEST(KvBlock, RoundTripsPartialBlocksAtAnyRowOffset) {
  for (k::KvDtype dtype : {k::KvDtype::kF32, k::KvDtype::kBF16, k::KvDtype::kE4M3}) {
    for (size_t dim : {1, 7, 64}) {
      const k::KvBlockLayout layout{16, dim, dtype};
      for (auto [row0, n] : {std::pair<size_t, size_t>{0, 16}, {0, 1}, {3, 5}, {15, 1}, {9, 7}}) {
        const size_t stride = dim + 3;  // padded source rows
        const auto kin = random_vector(n * stride, 20 + row0, 2.0f);
        const auto vin = random_vector(n * stride, 30 + n, 0.5f);
        const auto block = write_rows(layout, row0, n, kin, vin, stride);
        std::vector<float> kout(n * dim), vout(n * dim);
        k::check(k::kv_block_read(block.data(), layout, row0, n, kout.data(), vout.data()),
                 "kv_block_read");
        for (size_t i = 0; i < n; ++i) {
          for (int which = 0; which < 2; ++which) {
            const float* src = (which == 0 ? kin : vin).data() + i * stride;
            const float* got = (which == 0 ? kout : vout).data() + i * dim;
            float amax = 0;
            for (size_t d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(src[d]));
            float scale = 1;
            if (dtype == k::KvDtype::kE4M3) {
              std::memcpy(&scale,
                          block.data() + layout.scales_offset() +
                              (which * layout.block_tokens + row0 + i) * sizeof(float),
                          sizeof(float));
              ASSERT_EQ(scale, amax / 448.0f);
            }
            for (size_t d = 0; d < dim; ++d) {
              ASSERT_EQ(got[d], stored_value(src[d], dtype, scale))
                  << "dtype " << int(dtype) << " dim " << dim << " row " << i << " d " << d;
              const float err = std::fabs(got[d] - src[d]);
              if (dtype == k::KvDtype::kF32) continue;
              if (dtype == k::KvDtype::kBF16) {
                ASSERT_LE(err, adakv::test::kBF16Rel * std::fabs(src[d]));
              } else {
                // Half an ulp relative in E4M3's normal range; below it (values under
                // 2^-6 / 448 of the row max) half the subnormal spacing, absolute. The slack
                // covers the float division by the scale.
                const float bound =
                    std::max(adakv::test::kE4M3Rel * std::fabs(src[d]), 0x1p-10f * scale);
                ASSERT_LE(err, bound * (1 + 1e-5f)) << src[d] << " max " << amax;
              }
            }
          }
        }
      }
    }
  }
}

TEST(KvBlock, E4M3ZeroRowHasUnitScale) {
  const k::KvBlockLayout layout{4, 8, k::KvDtype::kE4M3};
  const std::vector<float> zeros(8, 0.0f);
  std::vector<uint8_t> block(layout.block_bytes(), 0xFF);
  k::check(k::kv_block_write(block.data(), layout, 2, zeros.data(), zeros.data(), 1, 8), "write");
  for (size_t which : {0, 1}) {
    float scale;
    std::memcpy(&scale, block.data() + layout.scales_offset() + (which * 4 + 2) * 4, 4);
    EXPECT_EQ(scale, 1.0f);
  }
  std::vector<float> kout(8, 1.0f), vout(8, 1.0f);
  k::check(k::kv_block_read(block.data(), layout, 2, 1, kout.data(), vout.data()), "read");
  for (size_t d = 0; d < 8; ++d) {
    EXPECT_EQ(kout[d], 0.0f);
    EXPECT_EQ(vout[d], 0.0f);
  }
}

// The block reader decodes E4M3 with its own (vectorised) code path: check it on every code.
TEST(KvBlock, E4M3ReadDecodesEveryCodeLikeTheScalarDecoder) {
  const k::KvBlockLayout layout{4, 64, k::KvDtype::kE4M3};  // 256 K bytes
  std::vector<uint8_t> block(layout.block_bytes());
  for (size_t c = 0; c < 256; ++c) {
    block[layout.k_offset() + c] = static_cast<uint8_t>(c);
    block[layout.v_offset() + c] = static_cast<uint8_t>(255 - c);
  }
  const float scales[8] = {1, 1, 1, 1, 2, 2, 2, 2};  // K rows scale 1, V rows scale 2
  std::memcpy(block.data() + layout.scales_offset(), scales, sizeof(scales));
  std::vector<float> kout(256), vout(256);
  k::check(k::kv_block_read(block.data(), layout, 0, 4, kout.data(), vout.data()), "read");
  for (size_t c = 0; c < 256; ++c) {
    const float want_k = k::e4m3_to_fp32(static_cast<uint8_t>(c));
    const float want_v = 2 * k::e4m3_to_fp32(static_cast<uint8_t>(255 - c));
    if (std::isnan(want_k)) {
      EXPECT_TRUE(std::isnan(kout[c])) << c;
    } else {
      EXPECT_EQ(kout[c], want_k) << c;
      EXPECT_EQ(std::signbit(kout[c]), std::signbit(want_k)) << c;
    }
    if (std::isnan(want_v)) {
      EXPECT_TRUE(std::isnan(vout[c])) << c;
    } else {
      EXPECT_EQ(vout[c], want_v) << c;
    }
  }
}

TEST(KvBlock, RejectsRowsPastTheBlock) {
  const k::KvBlockLayout layout{16, 4, k::KvDtype::kBF16};
  std::vector<uint8_t> block(layout.block_bytes());
  std::vector<float> rows(17 * 4);
  EXPECT_EQ(k::kv_block_write(block.data(), layout, 10, rows.data(), rows.data(), 7, 4),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::kv_block_write(block.data(), layout, 17, rows.data(), rows.data(), 0, 4),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::kv_block_read(block.data(), layout, 0, 17, rows.data(), rows.data()),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::kv_block_write(block.data(), layout, 0, rows.data(), rows.data(), 2, 3),
            k::Status::kInvalidArgument);  // overlapping source rows
  EXPECT_EQ(k::kv_block_write(block.data(), layout, 10, rows.data(), rows.data(), 6, 4),
            k::Status::kOk);
  const k::KvBlockLayout unknown{16, 4, static_cast<k::KvDtype>(7)};
  EXPECT_EQ(k::kv_block_read(block.data(), unknown, 0, 1, rows.data(), rows.data()),
            k::Status::kInvalidArgument);
}
