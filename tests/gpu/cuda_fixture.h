// The CUDA backend tests' fixture: a fresh CUDA backend per test, the process's CPU backend as
// the reference (its memory is host memory, so host vectors go to it directly), and the one
// tolerance of the float ops.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/backend/backend_fixture.h"

namespace adakv::test {

namespace k = adakv::kernels;

// The tolerances of the CUDA ops against their CPU twins, all of them here:
// |cuda - cpu| <= tolerance * max |cpu| elementwise (matches_cpu). Ops not listed (copies,
// gathers, the KV pool's stores and reads) are compared bit for bit.
// The element-wise group: RMSNorm's sum order, expf, sinf and cosf.
inline constexpr double kCudaTolerance = 1e-5;
// matmul_quant and the embeddings (a different summation order over K).
inline constexpr double kCudaMatmulTolerance = 1e-5;
// attention_causal and attention_paged (online softmax, a different summation order).
inline constexpr double kCudaAttentionTolerance = 1e-5;
// window_attention_mass, blend_scores, pool_scores.
inline constexpr double kCudaScoreTolerance = 1e-5;

inline testing::AssertionResult matches_cpu(const std::vector<float>& got,
                                            const std::vector<float>& want,
                                            double relative_tolerance = kCudaTolerance) {
  if (got.size() != want.size()) {
    return testing::AssertionFailure() << "sizes " << got.size() << " and " << want.size();
  }
  double max_ref = 1e-30;
  for (float w : want) max_ref = std::max(max_ref, std::fabs(double(w)));
  const double tolerance = relative_tolerance * max_ref;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(double(got[i]) - want[i]) <= tolerance)) {
      return testing::AssertionFailure() << "element " << i << ": cuda " << got[i] << ", cpu "
                                         << want[i] << " (tolerance " << tolerance << ")";
    }
  }
  return testing::AssertionSuccess();
}

class CudaBackendTest : public testing::Test {
 protected:
  void SetUp() override { cuda_ = k::make_cuda_backend(0); }

  k::Backend& cuda() { return *cuda_; }
  static k::Backend& cpu() { return k::cpu_backend(); }
  template <typename T>
  DeviceArray<T> to_cuda(const std::vector<T>& host) {
    return DeviceArray<T>(*cuda_, host);
  }

 private:
  std::unique_ptr<k::Backend> cuda_;
};

}  // namespace adakv::test
