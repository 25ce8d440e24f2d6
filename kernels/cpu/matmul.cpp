// Dense float32 GEMM through OpenBLAS: y = x w^T with w in PyTorch's [out][in] layout.
#include <cblas.h>

#include "kernels/ops.h"

namespace adakv::kernels {

Status matmul(float* y, const float* x, const float* w, size_t M, size_t N, size_t K,
              bool accumulate, Stream) {
  if (M == 0 || N == 0) return Status::kOk;
  if (K == 0) return Status::kInvalidArgument;
  const float beta = accumulate ? 1.0f : 0.0f;
  if (M == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(N), static_cast<int>(K), 1.0f, w,
                static_cast<int>(K), x, 1, beta, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M),
                static_cast<int>(N), static_cast<int>(K), 1.0f, x, static_cast<int>(K), w,
                static_cast<int>(K), beta, y, static_cast<int>(N));
  }
  return Status::kOk;
}

}  // namespace adakv::kernels
