// The CUDA backend's scoring group (Ada-KV's observation window): window_attention_mass,
// blend_scores, pool_scores, with the semantics of their kernels/ops.h twins (Backend's methods
// of the same name). Device pointers in, work enqueued on `stream`; arguments the twin rejects
// throw std::invalid_argument naming the op.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/backend.h"

namespace adakv::kernels::cuda {

void window_attention_mass(cudaStream_t stream, float* out, const float* q, size_t q_stride,
                           const float* k, size_t k_stride, size_t n, size_t W, size_t Hq,
                           size_t Hkv, size_t Dh, float scale, float* peak);
void blend_scores(cudaStream_t stream, float* mass, float* peak, const float* window_mass,
                  const float* window_peak, size_t Hq, size_t n_keys, size_t n_window,
                  size_t prefix, float weight);
void pool_scores(cudaStream_t stream, float* scores, const float* mass, size_t n_keys,
                 size_t prefix, size_t Hq, size_t Hkv, const ScorePooling& pooling);

}  // namespace adakv::kernels::cuda
