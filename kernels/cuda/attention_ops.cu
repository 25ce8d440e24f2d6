// Placeholders until the kernels of attention_ops.h land: each op says it is not implemented yet.
#include "kernels/cuda/attention_ops.h"
#include "kernels/cuda/cuda_check.h"

namespace adakv::kernels::cuda {

void attention_causal(cudaStream_t, float*, const float*, const float*, const float*, size_t,
                      size_t, size_t, size_t, size_t, size_t, size_t, size_t, float) {
  not_implemented("attention_causal");
}
void attention_paged(cudaStream_t, const PagedSequence*, size_t, const uint8_t*,
                     const KvBlockLayout&, size_t, size_t, float) {
  not_implemented("attention_paged");
}

}  // namespace adakv::kernels::cuda
