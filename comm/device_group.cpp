#include "comm/device_group.h"

#include <stdexcept>

namespace adakv::comm {

DeviceGroup::DeviceGroup(std::unique_ptr<Communicator> comm, kernels::Backend& backend)
    : comm_(std::move(comm)), backend_(&backend) {
  if (!comm_) throw std::invalid_argument("DeviceGroup: no communicator");
}

void DeviceGroup::all_reduce(float* data, size_t n) {
  if (comm_->size() == 1 || n == 0) return;
  backend_->run_on_host([&] { comm_->all_reduce(data, n); });
}

void DeviceGroup::all_gather(const float* in, size_t n, float* out) {
  if (n == 0) return;
  if (comm_->size() == 1) {
    if (in != out) backend_->copy(out, in, n * sizeof(float));
    return;
  }
  backend_->run_on_host([&] { comm_->all_gather(in, n, out); });
}

}  // namespace adakv::comm
