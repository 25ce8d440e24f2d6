// Which CUDA devices the backend can run on (the kernels are built for compute capability 8.0
// and 9.0; newer devices take the 9.0 PTX).
#pragma once

#include <string>

namespace adakv::kernels::cuda {

inline constexpr int kMinComputeMajor = 8;

// Empty when device `device` exists and is recent enough; else why not (CUDA's own message
// when the driver or the device cannot be asked).
std::string device_problem(int device);

}  // namespace adakv::kernels::cuda
