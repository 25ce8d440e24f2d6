// Compiled with -fno-trapping-math (kernels/CMakeLists.txt): under GCC's default trapping math
// the clamp's comparisons count as control flow and the loop stays scalar. No value changes:
// the flag only drops the guarantee that floating-point exceptions are raised where the source
// says.
#include "kernels/cpu/vec_exp.h"

#include <bit>
#include <cstdint>

namespace adakv::kernels {

void exp_inplace(float* x, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    float v = x[i];
    v = v < -87.0f ? -87.0f : (v > 88.0f ? 88.0f : v);
    // Round to nearest by adding and removing 1.5 * 2^23 (exact for |x| < 2^22): GCC does not
    // vectorise this loop when it contains roundf or floorf.
    const float kf = (v * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    // ln2 split in a part exact in float and a correction, so r keeps its low bits.
    float r = v - kf * 0.693145751953125f;
    r = r - kf * 1.428606765330187045e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t k = static_cast<int32_t>(kf);
    const uint32_t bits = static_cast<uint32_t>(k + 127) << 23;
    x[i] = p * std::bit_cast<float>(bits);
  }
}

}  // namespace adakv::kernels
