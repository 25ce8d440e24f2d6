#include "kernels/backend.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_backend.h"
#ifdef ADAKV_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace adakv::kernels {

const char* to_string(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCuda:
      return "cuda";
    case BackendKind::kGuarded:
      return "guarded";
    case BackendKind::kCpu:
      break;
  }
  return "cpu";
}

BackendKind backend_kind_from_string(const std::string& name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  if (name == "guarded") return BackendKind::kGuarded;
  throw std::invalid_argument("backend '" + name + "' is not cpu, cuda or guarded");
}

namespace {}  // namespace

int device_count(BackendKind kind) {
  if (kind != BackendKind::kCuda) return 1;
#ifdef ADAKV_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

std::unique_ptr<Backend> make_backend(BackendKind kind, int local_rank) {
  switch (kind) {
    case BackendKind::kCuda:
#ifdef ADAKV_HAVE_CUDA
      try {
        // Ranks of a node take its GPUs in order; more ranks than GPUs share them.
        const int count = cuda_device_count();
        return make_cuda_backend(count > 0 ? local_rank % count : 0);
      } catch (const std::runtime_error& e) {
        throw std::runtime_error(std::string("backend cuda: no CUDA backend can run here: ") +
                                 e.what());
      }
#else
      throw std::runtime_error(
          "backend cuda: this build of adakv has no CUDA backend (built with ADAKV_CUDA=OFF or "
          "without nvcc); run with backend: cpu");
#endif
    case BackendKind::kGuarded:
      return make_guarded_backend();
    case BackendKind::kCpu:
      break;
  }
  return make_cpu_backend();
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = o.owner_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.owner_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (owner_ && data_) owner_->free(data_, bytes_);
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

float* Workspace::floats(size_t slot, size_t floats) {
  if (slot >= slots_.size()) slots_.resize(slot + 1);
  Buffer& b = slots_[slot];
  if (b.bytes() < floats * sizeof(float)) {
    b.reset();
    b = backend_->allocate(floats * sizeof(float));
  }
  return b.as<float>();
}

}  // namespace adakv::kernels
