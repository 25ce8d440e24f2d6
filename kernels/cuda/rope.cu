// Rotary position embedding on adjacent pairs, in place (kernels/cpu/rope.cpp's twin).
#include <cmath>

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
                                     RopeFreqs freqs) {
  const size_t n = T * n_heads * half;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < n;
       idx += size_t(gridDim.x) * blockDim.x) {
    const size_t i = idx % half, h = (idx / half) % n_heads, t = idx / (half * n_heads);
    const float angle = static_cast<float>(positions[t]) * freqs.inv_freq[i];
    const float c = cosf(angle), s = sinf(angle);
    float* p = x + t * token_stride + h * head_dim + 2 * i;
    const float a = p[0], b = p[1];
    p[0] = a * c - b * s;
    p[1] = a * s + b * c;
  }
}

}  // namespace

// Preconditions (checked by the caller): rot_dim even, rot_dim <= head_dim, rot_dim / 2 <=
// kMaxRopeFreqs.
void launch_rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads,
                          size_t head_dim, size_t rot_dim, size_t token_stride, float theta,
                          cudaStream_t stream) {
  const size_t half = rot_dim / 2;
  if (T == 0 || n_heads == 0 || half == 0) return;
  // On the host, with the CPU twin's expression, so the angles match it bit for bit.
  RopeFreqs freqs{};
  for (size_t i = 0; i < half; ++i) {
    freqs.inv_freq[i] =
        1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rot_dim));
  }
  rope_adjacent_kernel<<<blocks_for(T * n_heads * half), kThreads, 0, stream>>>(
      x, positions, T, n_heads, head_dim, half, token_stride, freqs);
  check_launch("rope_adjacent_kernel");
}

}  // namespace adakv::kernels::cuda
