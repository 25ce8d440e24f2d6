#include "comm/device_group.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace adakv::comm {
namespace {

DeviceGroup::Path path_of(const Communicator& comm, const kernels::Backend& backend) {
  if (std::strcmp(comm.backend(), "nccl") == 0) return DeviceGroup::Path::kDevice;
  return backend.kind() == kernels::BackendKind::kCuda ? DeviceGroup::Path::kStaged
                                                       : DeviceGroup::Path::kHost;
}

}  // namespace

const char* to_string(DeviceGroup::Path path) {
  switch (path) {
    case DeviceGroup::Path::kDevice:
      return "device";
    case DeviceGroup::Path::kStaged:
      return "staged";
    case DeviceGroup::Path::kHost:
      break;
  }
  return "host";
}

DeviceGroup::DeviceGroup(std::unique_ptr<Communicator> comm, kernels::Backend& backend)
    : comm_(std::move(comm)), backend_(&backend) {
  if (!comm_) throw std::invalid_argument("DeviceGroup: no communicator");
  path_ = path_of(*comm_, backend);
}

DeviceGroup::DeviceGroup(std::unique_ptr<Communicator> comm, kernels::Backend& backend, Path path)
    : DeviceGroup(std::move(comm), backend) {
  const Path natural = path_;
  if (path != Path::kStaged && path != natural) {
    throw std::invalid_argument(std::string("DeviceGroup: the ") + to_string(path) +
                                " path does not suit a " + comm_->backend() +
                                " communicator on the " + kernels::to_string(backend.kind()) +
                                " backend (its path is " + to_string(natural) + ")");
  }
  path_ = path;
}

void DeviceGroup::all_reduce(float* data, size_t n) {
  if (comm_->size() == 1 || n == 0) return;
  switch (path_) {
    case Path::kDevice: {
      // NCCL's own all-reduce adds in an order that depends on the message size, so a row's
      // sum would depend on the rows it travels with (batch invariance, and TP on GPUs equal to
      // TP on CPUs). All-gather moves bytes exactly; the sum ((p0 + p1) + p2) + ... in rank
      // order then runs on the backend, as the MPI communicator's ordered sum does.
      const size_t size = static_cast<size_t>(comm_->size());
      if (gathered_.bytes() < size * n * sizeof(float)) {
        gathered_ = backend_->allocate(size * n * sizeof(float));
      }
      float* parts = gathered_.as<float>();
      comm_->all_gather(data, n, parts);
      backend_->add(data, parts, parts + n, n);
      for (size_t r = 2; r < size; ++r) backend_->add(data, data, parts + r * n, n);
      return;
    }
    case Path::kHost:
      backend_->run_on_host([&] { comm_->all_reduce(data, n); });
      return;
    case Path::kStaged:
      staged_in_.resize(n);
      backend_->download(staged_in_.data(), data, n * sizeof(float));
      comm_->all_reduce(staged_in_.data(), n);
      backend_->upload(data, staged_in_.data(), n * sizeof(float));
      return;
  }
}

void DeviceGroup::all_gather(const float* in, size_t n, float* out) {
  if (n == 0) return;
  if (comm_->size() == 1) {
    if (in != out) backend_->copy(out, in, n * sizeof(float));
    return;
  }
  switch (path_) {
    case Path::kDevice:
      comm_->all_gather(in, n, out);
      return;
    case Path::kHost:
      backend_->run_on_host([&] { comm_->all_gather(in, n, out); });
      return;
    case Path::kStaged: {
      const size_t total = n * static_cast<size_t>(comm_->size());
      staged_in_.resize(n);
      staged_out_.resize(total);
      backend_->download(staged_in_.data(), in, n * sizeof(float));
      comm_->all_gather(staged_in_.data(), n, staged_out_.data());
      backend_->upload(out, staged_out_.data(), total * sizeof(float));
      return;
    }
  }
}

}  // namespace adakv::comm
