// The CUDA backend's quantized-weight group: matmul_quant, embed_rows, embed_shard_rows, with
// the semantics of their kernels/quant.h twins (Backend's methods of the same name). Device
// pointers in, work enqueued on `stream`; arguments the twin rejects throw
// std::invalid_argument naming the op.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/quant.h"

namespace adakv::kernels::cuda {

void matmul_quant(cudaStream_t stream, float* y, const float* x, const void* w, WeightFormat f,
                  size_t M, size_t N, size_t K, const MatmulOptions& options);
void embed_rows(cudaStream_t stream, float* out, const void* table, WeightFormat f,
                WeightLayout layout, const int32_t* ids, size_t T, size_t n_rows, size_t dim);
void embed_shard_rows(cudaStream_t stream, float* out, const void* table, WeightFormat f,
                      WeightLayout layout, const int32_t* ids, size_t T, size_t row_begin,
                      size_t n_rows, size_t vocab, size_t dim);

}  // namespace adakv::kernels::cuda
