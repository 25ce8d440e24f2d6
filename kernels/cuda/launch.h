// The CUDA backend's kernel launchers: device pointers in, work enqueued on `stream`, nothing
// waited for. Arguments are checked by the caller (cuda_backend.cu) against the ops.h twin's
// rules before they get here; a launcher only throws on a failed launch.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/rope_frequencies.h"

namespace adakv::kernels::cuda {

inline constexpr unsigned kThreads = 256;
// Kernels loop over their work grid-stride, so the grid never needs more blocks than this.
inline constexpr size_t kMaxBlocks = size_t{1} << 16;

// Blocks for `work` items at kThreads per block.
inline unsigned blocks_for(size_t work) {
  return static_cast<unsigned>(std::clamp<size_t>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// The rotation frequencies of rope_adjacent go to the kernel as a parameter: rot_dim / 2 of
// them, up to kMaxRopeFreqs.
inline constexpr size_t kMaxRopeFreqs = 512;

void launch_rmsnorm(float* out, const float* x, const float* w, size_t rows, size_t dim, float eps,
                    cudaStream_t stream);
void launch_rope_adjacent(float* x, const int32_t* positions, size_t T, size_t n_heads,
                          size_t head_dim, size_t token_stride, const RopeFrequencies& freqs,
                          cudaStream_t stream);
void launch_swiglu(float* out, const float* gate_up, size_t T, size_t F, cudaStream_t stream);
void launch_add(float* out, const float* a, const float* b, size_t n, cudaStream_t stream);
void launch_add_bias(float* y, const float* bias, size_t rows, size_t n, size_t ldy,
                     cudaStream_t stream);
void launch_interleave_shards(float* logits, const float* gathered, size_t shards, size_t rows,
                              size_t cols, cudaStream_t stream);

// range[0] <- the smallest of rows[0..n), range[1] <- the largest (n >= 1; range is device
// memory).
void launch_row_range(const int32_t* rows, size_t n, int32_t* range, cudaStream_t stream);
// dst row i <- src row rows[i], row_bytes each (rows already checked to be >= 0).
void launch_gather_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                        size_t row_bytes, const int32_t* rows, size_t n, cudaStream_t stream);

}  // namespace adakv::kernels::cuda
