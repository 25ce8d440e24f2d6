// The CUDA backend's entry points. Plain C++ only: code outside kernels/cuda never sees a CUDA
// header. Declared in every build; defined only when adakv is built with CUDA
// (ADAKV_HAVE_CUDA), so callers outside kernels/ go through make_backend(BackendKind::kCuda).
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"

namespace adakv::kernels {

// The backend on CUDA device `device` (its index among the devices this process sees), with
// one stream of its own. Throws std::runtime_error naming the CUDA call that failed (no such
// device, a device older than compute capability 8.0, no driver).
std::unique_ptr<Backend> make_cuda_backend(int device);

// The CUDA devices this process sees (0 without a driver or a device).
int cuda_device_count();

// Whether this process can run the CUDA backend on device 0; when not, *why (if given) says why
// (no driver, no device, a device older than compute capability 8.0).
bool cuda_device_available(std::string* why);

}  // namespace adakv::kernels
