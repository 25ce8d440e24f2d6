// Rotary position embedding on adjacent pairs, in place (kernels/cpu/rope.cpp's twin).
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace adakv::kernels::cuda {
namespace {

struct RopeFreqs {
  float inv_freq[kMaxRopeFreqs];
};

// One thread per (token, head, pair): x: [T][n_heads][head_dim], token_stride floats apart.
__global__ void rope_adjacent_kernel(float* x, const int32_t* positions, size_t T, size_t n_heads,
                                     size_t head_dim, size_t half, size_t token_stride,
                                     RopeFreqs freqs, float scale) {
  const size_t n = T * n_heads * half;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < n;
       idx += size_t(gridDim.x) * blockDim.x) {
    const size_t i = idx % half, h = (idx / half) % n_heads, t = idx / (half * n_heads);
    const float angle = static_cast<float>(positions[t]) * freqs.inv_freq[i];
    float c = cosf(angle), s = sinf(angle);
    if (scale != 1.0f) {
      c *= scale;
      s *= scale;
    }
    float* p = x + t * token_stride + h * head_dim + 2 * i;
    const float a = p[0], b = p[1];
    p[0] = a * c - b * s;
    p[1] = a * s + b * c;
  }
}

}  // namespace

// Preconditions (checked by the caller): freqs.rot_dim() <= head_dim, freqs.inv_freq.size() <=
// kMaxRopeFreqs.
void launch_rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads,
                          size_t head_dim, size_t token_stride, const RopeFrequencies& freqs,
                          cudaStream_t stream) {
  const size_t half = freqs.inv_freq.size();
  if (T == 0 || n_heads == 0 || half == 0) return;
  // Computed on the host once per model (kernels/rope_frequencies.h), the CPU twin's values.
  RopeFreqs table{};
  std::copy(freqs.inv_freq.begin(), freqs.inv_freq.end(), table.inv_freq);
  rope_adjacent_kernel<<<blocks_for(T * n_heads * half), kThreads, 0, stream>>>(
      x, positions, T, n_heads, head_dim, half, token_stride, table, freqs.cos_sin_scale);
  check_launch("rope_adjacent_kernel");
}

}  // namespace adakv::kernels::cuda
