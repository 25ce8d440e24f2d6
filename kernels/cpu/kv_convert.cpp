// Scalar float32 <-> storage conversions of the KV cache: bfloat16 and OCP FP8 E4M3 (e4m3fn:
// 1 sign, 4 exponent bits with bias 7, 3 mantissa bits, subnormals, no infinities, max 448,
// NaN = S.1111.111). Both encoders round to nearest, ties to even.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/bf16_round.h"
#include "kernels/ops.h"

namespace adakv::kernels {
namespace {

constexpr uint8_t kE4M3Nan = 0x7F;
constexpr uint8_t kE4M3MaxCode = 0x7E;  // 1.75 * 2^8 = 448
constexpr float kE4M3Max = 448.0f;
constexpr float kE4M3MinNormal = 0x1p-6f;

}  // namespace

uint16_t fp32_to_bf16(float x) {
  return bf16_bits_rounded(std::bit_cast<uint32_t>(x));
}

uint8_t fp32_to_e4m3(float x) {
  if (std::isnan(x)) return kE4M3Nan;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const float a = std::fabs(x);
  if (a >= kE4M3Max) return sign | kE4M3MaxCode;  // saturate, infinities included

  if (a < kE4M3MinNormal) {
    // Subnormal range: the value is m * 2^-9 with m = 0..7; scaling by 2^9 is exact and
    // nearbyint rounds ties to even in the default rounding mode. m == 8 is the code of the
    // smallest normal, 2^-6, so the carry needs no special case.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }

  // Normal range: drop 20 of float's 23 mantissa bits with round to nearest even, then rebias
  // the exponent from 127 to 7 (a carry out of the mantissa correctly bumps the exponent).
  const uint32_t abits = bits & 0x7FFFFFFFu;
  const uint32_t lsb = (abits >> 20) & 1u;
  const uint32_t rounded = (abits + 0x7FFFFu + lsb) >> 20;
  const uint32_t code = rounded - (120u << 3);
  // a < 448 rounds to at most 448, so the code never reaches the NaN pattern.
  return sign | static_cast<uint8_t>(code);
}

float e4m3_to_fp32(uint8_t x) {
  const bool negative = (x & 0x80) != 0;
  const int exponent = (x >> 3) & 0xF;
  const int mantissa = x & 0x7;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 7 - 3);
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace adakv::kernels
