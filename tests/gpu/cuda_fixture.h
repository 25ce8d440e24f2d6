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

// |cuda - cpu| <= kCudaTolerance * max |cpu| elementwise, for the ops whose CUDA and CPU
// results may differ in the last bits (RMSNorm's sum order, expf, sinf and cosf). The other ops
// are compared bit for bit.
inline constexpr double kCudaTolerance = 1e-5;

inline testing::AssertionResult matches_cpu(const std::vector<float>& got,
                                            const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return testing::AssertionFailure() << "sizes " << got.size() << " and " << want.size();
  }
  double max_ref = 1e-30;
  for (float w : want) max_ref = std::max(max_ref, std::fabs(double(w)));
  const double tolerance = kCudaTolerance * max_ref;
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
