// The 16-bit float formats widened to float32, exactly (every half and bfloat16 is a float32):
// the one scalar conversion of each that the CPU kernels and the GGUF reader use.
#pragma once

#include <cstdint>
#include <cstring>

namespace adakv::kernels {

// IEEE half to float: subnormals, infinities and NaN payloads included.
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf, or NaN with its payload
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float f = static_cast<float>(mant) * 0x1p-24f;
    uint32_t fb;
    std::memcpy(&fb, &f, 4);
    bits = sign | fb;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// bfloat16 is float32's top half.
inline float bf16_to_fp32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace adakv::kernels
