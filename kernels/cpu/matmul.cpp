// Dense float32 GEMM through OpenBLAS: y = x w^T with w in PyTorch's [out][in] layout.
//
// OpenBLAS runs single-threaded; the output columns are split across the OpenMP threads
// instead. Two thread pools (OpenMP for the other ops, OpenBLAS's own for GEMMs) would spin-wait
// against each other, each holding cores the other needs.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu_threads.h"
#include "kernels/ops.h"

namespace adakv::kernels {

Status matmul(float* y, const float* x, const float* w, size_t M, size_t N, size_t K,
              bool accumulate, Stream) {
  if (M == 0 || N == 0) return Status::kOk;
  if (K == 0) return Status::kInvalidArgument;
  blas_single_threaded();
  const float beta = accumulate ? 1.0f : 0.0f;
  // Split N in chunks of whole cache lines of output; small products stay on one thread.
  const size_t work = M * N * K;
  const int threads = work < (size_t{1} << 18) ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(threads)
  {
    const size_t n_threads = static_cast<size_t>(omp_get_num_threads());
    const size_t chunk = ((N + n_threads - 1) / n_threads + 15) / 16 * 16;
    const size_t n0 = std::min(N, chunk * static_cast<size_t>(omp_get_thread_num()));
    const size_t n1 = std::min(N, n0 + chunk);
    if (n1 > n0) {
      const int n = static_cast<int>(n1 - n0);
      if (M == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, static_cast<int>(K), 1.0f, w + n0 * K,
                    static_cast<int>(K), x, 1, beta, y + n0, 1);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), n,
                    static_cast<int>(K), 1.0f, x, static_cast<int>(K), w + n0 * K,
                    static_cast<int>(K), beta, y + n0, static_cast<int>(N));
      }
    }
  }
  return Status::kOk;
}

}  // namespace adakv::kernels
