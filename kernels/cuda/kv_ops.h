// The CUDA backend's KV-pool group: kv_append, kv_copy_rows, kv_gather, kv_block_write,
// kv_block_read over the pool's blocks (kernels/kv_layout.h: f32, bf16 and E4M3 with per-row
// scales), with the semantics of their CPU twins (Backend's methods of the same name). Device
// pointers in, work enqueued on `stream`; arguments the twin rejects throw
// std::invalid_argument naming the op.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kv_layout.h"

namespace adakv::kernels::cuda {

void kv_append(cudaStream_t stream, uint8_t* pool, const KvBlockLayout& layout, const float* k,
               const float* v, size_t stride, size_t n_tokens, size_t n_heads,
               const int32_t* slots);
void kv_copy_rows(cudaStream_t stream, uint8_t* pool, const KvBlockLayout& layout,
                  const int32_t* src, const int32_t* dst, size_t n);
void kv_gather(cudaStream_t stream, float* k, float* v, size_t stride, const uint8_t* pool,
               const KvBlockLayout& layout, const int32_t* slots, size_t n);
void kv_block_write(cudaStream_t stream, uint8_t* block, const KvBlockLayout& layout, size_t row0,
                    const float* k, const float* v, size_t n, size_t src_stride);
void kv_block_read(cudaStream_t stream, const uint8_t* block, const KvBlockLayout& layout,
                   size_t row0, size_t n, float* k, float* v);

}  // namespace adakv::kernels::cuda
