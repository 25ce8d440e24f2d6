// Placeholders until the kernels of quant_ops.h land: each op says it is not implemented yet.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/quant_ops.h"

namespace adakv::kernels::cuda {

void matmul_quant(cudaStream_t, float*, const float*, const void*, WeightFormat, size_t, size_t,
                  size_t, const MatmulOptions&) {
  not_implemented("matmul_quant");
}
void embed_rows(cudaStream_t, float*, const void*, WeightFormat, WeightLayout, const int32_t*,
                size_t, size_t, size_t) {
  not_implemented("embed_rows");
}
void embed_shard_rows(cudaStream_t, float*, const void*, WeightFormat, WeightLayout, const int32_t*,
                      size_t, size_t, size_t, size_t, size_t) {
  not_implemented("embed_shard_rows");
}

}  // namespace adakv::kernels::cuda
