// Device discovery: device_problem() and the public cuda_device_count() and
// cuda_device_available().
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"

namespace adakv::kernels {
namespace cuda {

std::string device_problem(int device) {
  int count = 0;
  if (const cudaError_t s = cudaGetDeviceCount(&count); s != cudaSuccess) {
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(s);
  }
  if (device < 0 || device >= count) {
    return "CUDA device " + std::to_string(device) + " does not exist (this process sees " +
           std::to_string(count) + ")";
  }
  cudaDeviceProp prop{};
  if (const cudaError_t s = cudaGetDeviceProperties(&prop, device); s != cudaSuccess) {
    return std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(s);
  }
  if (prop.major < kMinComputeMajor) {
    return "CUDA device " + std::to_string(device) + " (" + prop.name +
           ") has compute capability " + std::to_string(prop.major) + "." +
           std::to_string(prop.minor) + "; the CUDA backend needs " +
           std::to_string(kMinComputeMajor) + ".0 or newer";
  }
  return {};
}

}  // namespace cuda

int cuda_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

bool cuda_device_available(std::string* why) {
  const std::string problem = cuda::device_problem(0);
  if (why) *why = problem;
  return problem.empty();
}

}  // namespace adakv::kernels
