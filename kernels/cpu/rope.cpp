// Rotary position embedding on adjacent pairs (the layout llama GGUF files are converted to).
#include <cmath>
#include <vector>

#include "kernels/ops.h"

namespace adakv::kernels {

Status rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads, size_t head_dim,
                     size_t rot_dim, size_t token_stride, float theta, Stream) {
  if (rot_dim % 2 != 0 || rot_dim > head_dim) return Status::kInvalidArgument;
  const size_t half = rot_dim / 2;
  // Frequencies as PyTorch computes them (1 / theta^(2i/d) in float) so angles match the
  // reference to the last bit before the sin/cos.
  std::vector<float> inv_freq(half);
  for (size_t i = 0; i < half; ++i) {
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rot_dim));
  }
#pragma omp parallel for schedule(static) if (T > 4)
  for (size_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(positions[t]);
    float* row = x + t * token_stride;
    for (size_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      const float c = std::cos(angle), s = std::sin(angle);
      for (size_t h = 0; h < n_heads; ++h) {
        float* p = row + h * head_dim + 2 * i;
        const float a = p[0], b = p[1];
        p[0] = a * c - b * s;
        p[1] = a * s + b * c;
      }
    }
  }
  return Status::kOk;
}

}  // namespace adakv::kernels
