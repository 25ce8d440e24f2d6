// The CUDA backend's attention group: attention_causal (a prompt's rows over their own keys)
// and attention_paged (ragged rows over the per-head block tables of the KV pool), with the
// semantics of their kernels/ops.h twins (Backend's methods of the same name). Device pointers
// in (PagedSequence's pointers included), work enqueued on `stream`; arguments the twin rejects
// throw std::invalid_argument naming the op.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kv_layout.h"
#include "kernels/ops.h"

namespace adakv::kernels::cuda {

void attention_causal(cudaStream_t stream, float* out, const float* q, const float* k,
                      const float* v, size_t T, size_t n_kv, size_t Hq, size_t Hkv, size_t Dh,
                      size_t q_stride, size_t kv_stride, size_t out_stride, float scale);
void attention_paged(cudaStream_t stream, const PagedSequence* seqs, size_t n_seqs,
                     const uint8_t* pool, const KvBlockLayout& layout, size_t Hq, size_t Hkv,
                     float scale);

}  // namespace adakv::kernels::cuda
