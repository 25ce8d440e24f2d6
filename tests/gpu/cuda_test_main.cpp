// main() of adakv_cuda_backend_tests: without a usable CUDA device it prints why and returns
// ADAKV_SKIP_RETURN_CODE, which ctest (SKIP_RETURN_CODE, tests/gpu/CMakeLists.txt) reports as
// Skipped rather than Passed. --gtest_list_tests lists the tests either way.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_backend.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  std::string why;
  if (!GTEST_FLAG_GET(list_tests) && !adakv::kernels::cuda_device_available(&why)) {
    std::printf("SKIPPED: the CUDA backend tests need a CUDA device: %s\n", why.c_str());
    return ADAKV_SKIP_RETURN_CODE;
  }
  return RUN_ALL_TESTS();
}
