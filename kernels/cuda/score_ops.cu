// Placeholders until the kernels of score_ops.h land: each op says it is not implemented yet.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/score_ops.h"

namespace adakv::kernels::cuda {

void window_attention_mass(cudaStream_t, float*, const float*, size_t, const float*, size_t, size_t,
                           size_t, size_t, size_t, size_t, float, float*) {
  not_implemented("window_attention_mass");
}
void blend_scores(cudaStream_t, float*, float*, const float*, const float*, size_t, size_t, size_t,
                  size_t, float) {
  not_implemented("blend_scores");
}
void pool_scores(cudaStream_t, float*, const float*, size_t, size_t, size_t, size_t,
                 const ScorePooling&) {
  not_implemented("pool_scores");
}

}  // namespace adakv::kernels::cuda
