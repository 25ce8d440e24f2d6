// float32 -> bfloat16 by its bits, branch-free so that loops over rows vectorise (the KV writes
// of every decode step go through it).
#pragma once

#include <cstdint>

namespace adakv::kernels {

// Round to nearest even on the 16 dropped bits: add half an ulp minus one, plus the lsb that
// stays, so that an exact tie rounds up only when the kept part is odd. Overflow correctly
// carries into the exponent (and from the largest finite values into infinity). A NaN, which
// the addition could carry into an infinity, keeps its payload's top bits with the quiet bit
// forced, so it stays a NaN.
inline uint16_t bf16_bits_rounded(uint32_t bits) {
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t nan = (bits >> 16) | 0x0040u;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

}  // namespace adakv::kernels
