// Error checks of CUDA runtime calls, for the CUDA backend's own files.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace adakv::kernels::cuda {

// Throws std::runtime_error naming `call` and CUDA's description of `status` unless it is
// cudaSuccess.
inline void check_cuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("cuda backend: ") + call + ": " +
                             cudaGetErrorString(status));
  }
}

// The launch status of the last kernel this thread launched (bad configuration, no image for
// this device); faults inside the kernel surface at the next synchronizing call.
inline void check_launch(const char* kernel) {
  check_cuda(cudaGetLastError(), kernel);
}

// What an op of the CUDA backend that has no kernel yet throws.
[[noreturn]] inline void not_implemented(const char* op) {
  throw std::runtime_error(std::string("cuda backend: ") + op + " is not implemented yet");
}

}  // namespace adakv::kernels::cuda
