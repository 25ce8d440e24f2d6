// Rotary position embedding on adjacent pairs (the layout llama GGUF files are converted to).
#include <cmath>

#include "kernels/ops.h"

namespace adakv::kernels {

Status rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads, size_t head_dim,
                     size_t token_stride, const RopeFrequencies& freqs, Stream) {
  const size_t half = freqs.inv_freq.size();
  if (2 * half > head_dim) return Status::kInvalidArgument;
  const float* inv_freq = freqs.inv_freq.data();
  const float scale = freqs.cos_sin_scale;
#pragma omp parallel for schedule(static) if (T > 4)
  for (size_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(positions[t]);
    float* row = x + t * token_stride;
    for (size_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      float c = std::cos(angle), s = std::sin(angle);
      if (scale != 1.0f) {
        c *= scale;
        s *= scale;
      }
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
