// Placeholders until the kernels of kv_ops.h land: each op says it is not implemented yet.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_ops.h"

namespace adakv::kernels::cuda {

void kv_append(cudaStream_t, uint8_t*, const KvBlockLayout&, const float*, const float*, size_t,
               size_t, size_t, const int32_t*) {
  not_implemented("kv_append");
}
void kv_copy_rows(cudaStream_t, uint8_t*, const KvBlockLayout&, const int32_t*, const int32_t*,
                  size_t) {
  not_implemented("kv_copy_rows");
}
void kv_gather(cudaStream_t, float*, float*, size_t, const uint8_t*, const KvBlockLayout&,
               const int32_t*, size_t) {
  not_implemented("kv_gather");
}
void kv_block_write(cudaStream_t, uint8_t*, const KvBlockLayout&, size_t, const float*,
                    const float*, size_t, size_t) {
  not_implemented("kv_block_write");
}
void kv_block_read(cudaStream_t, const uint8_t*, const KvBlockLayout&, size_t, size_t, float*,
                   float*) {
  not_implemented("kv_block_read");
}

}  // namespace adakv::kernels::cuda
