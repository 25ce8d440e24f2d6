#include "kernels/backend.h"

#include <stdexcept>

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
