// The device group of a tensor-parallel group: the collectives on activations (the layers'
// all_reduces, the vocab-parallel embedding's all_reduce and the logits' all_gather), on the
// backend's memory and in its stream order. The host group (the Communicator the engine and
// the control plane use: step plans, token ids, the gain matrix, reports) stays apart, so that
// host traffic never interleaves with a layer's collectives.
//
// How a collective reaches the backend's memory depends on the pair:
//  - a communicator that takes device buffers (NCCL, made on the backend's stream): it is
//    enqueued on that stream and nothing waits for it; the all-reduce is an all-gather and
//    a sum in rank order on the backend, so that every element is ((p0 + p1) + p2) + ... as
//    on the MPI paths, whatever the message size;
//  - a host communicator (MPI) and a backend the host can address (CPU, guarded): it runs as
//    host code inside Backend::run_on_host;
//  - a host communicator and a device backend (CUDA ranks without NCCL, or several ranks on one
//    GPU, which NCCL refuses): the buffer is downloaded, reduced or gathered on the host and
//    uploaded back.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "kernels/backend.h"

namespace adakv::comm {

class DeviceGroup {
 public:
  enum class Path { kDevice, kHost, kStaged };

  // `comm` carries the collectives (its own communicator, not the host group's); `backend`
  // (outliving the group) owns the buffers they read and write. The path follows from the pair
  // (above).
  DeviceGroup(std::unique_ptr<Communicator> comm, kernels::Backend& backend);
  // The path chosen: kStaged works with any pair; kDevice needs a communicator of device
  // buffers, kHost a backend the host can address (std::invalid_argument otherwise).
  DeviceGroup(std::unique_ptr<Communicator> comm, kernels::Backend& backend, Path path);

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  Path path() const { return path_; }
  // data[0..n) (backend memory) <- the sum over the ranks, in place.
  void all_reduce(float* data, size_t n);
  // out[r * n .. (r + 1) * n) <- rank r's in[0..n) (both backend memory).
  void all_gather(const float* in, size_t n, float* out);
  const CommStats& stats() const { return comm_->stats(); }
  void reset_stats() { comm_->reset_stats(); }

 private:
  std::unique_ptr<Communicator> comm_;
  kernels::Backend* backend_;
  Path path_;
  // The staged path's host copies and the device path's gathered partials, kept across calls.
  std::vector<float> staged_in_, staged_out_;
  kernels::Buffer gathered_;
};

// "device", "host" or "staged".
const char* to_string(DeviceGroup::Path path);

}  // namespace adakv::comm
