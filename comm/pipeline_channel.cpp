#include "comm/pipeline_channel.h"

#include <cstring>
#include <stdexcept>

namespace adakv::comm {

PipelineChannel::PipelineChannel(std::unique_ptr<Communicator> pipe, kernels::Backend& backend)
    : pipe_(std::move(pipe)), backend_(&backend) {
  if (!pipe_) throw std::invalid_argument("PipelineChannel: no communicator");
  if (std::strcmp(pipe_->backend(), "nccl") == 0) {
    path_ = DeviceGroup::Path::kDevice;
  } else {
    path_ = backend.kind() == kernels::BackendKind::kCuda ? DeviceGroup::Path::kStaged
                                                          : DeviceGroup::Path::kHost;
  }
}

void PipelineChannel::send_next(const float* data, size_t n) {
  if (n == 0) return;
  const int next = stage() + 1;
  if (next >= stages()) throw std::logic_error("the last pipeline stage has no next stage");
  const size_t bytes = n * sizeof(float);
  switch (path_) {
    case DeviceGroup::Path::kDevice:
      pipe_->send(data, bytes, next);
      return;
    case DeviceGroup::Path::kHost:
      backend_->run_on_host([&] { pipe_->post(data, bytes, next); });
      return;
    case DeviceGroup::Path::kStaged:
      staged_.resize(n);
      backend_->download(staged_.data(), data, bytes);
      pipe_->post(staged_.data(), bytes, next);
      return;
  }
}

void PipelineChannel::recv_prev(float* data, size_t n) {
  if (n == 0) return;
  const int prev = stage() - 1;
  if (prev < 0) throw std::logic_error("the first pipeline stage has no previous stage");
  const size_t bytes = n * sizeof(float);
  switch (path_) {
    case DeviceGroup::Path::kDevice:
      pipe_->recv(data, bytes, prev);
      return;
    case DeviceGroup::Path::kHost:
      backend_->run_on_host([&] { pipe_->recv(data, bytes, prev); });
      return;
    case DeviceGroup::Path::kStaged:
      staged_.resize(n);
      pipe_->recv(staged_.data(), bytes, prev);
      backend_->upload(data, staged_.data(), bytes);
      return;
  }
}

}  // namespace adakv::comm
