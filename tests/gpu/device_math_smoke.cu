// A check that the device-math test binary builds and runs on the host (see CMakeLists.txt).
#include <gtest/gtest.h>

namespace {

__host__ __device__ inline float twice(float x) { return 2.0f * x; }

TEST(DeviceMath, HostDeviceFunctionsRunOnTheHost) { EXPECT_EQ(twice(1.5f), 3.0f); }

}  // namespace
