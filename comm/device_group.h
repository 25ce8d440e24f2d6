// The device group of a tensor-parallel group: the collectives on activations (the layers'
// all_reduces, the vocab-parallel embedding's all_reduce and the logits' all_gather), on the
// backend's memory and in its stream order. The host group (the Communicator the engine and
// the control plane use: step plans, token ids, the gain matrix, reports) stays apart, so that
// host traffic never interleaves with a layer's collectives.
//
// Over MPI (CPU backends) each collective runs as host code inside Backend::run_on_host, on a
// communicator of its own (a duplicate of the host group's); NCCL would enqueue on the
// backend's stream instead.
#pragma once

#include <cstddef>
#include <memory>

#include "comm/communicator.h"
#include "kernels/backend.h"

namespace adakv::comm {

class DeviceGroup {
 public:
  // `comm` carries the collectives (its own communicator, not the host group's); `backend`
  // (outliving the group) owns the buffers they read and write.
  DeviceGroup(std::unique_ptr<Communicator> comm, kernels::Backend& backend);

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  // data[0..n) (backend memory) <- the sum over the ranks, in place.
  void all_reduce(float* data, size_t n);
  // out[r * n .. (r + 1) * n) <- rank r's in[0..n) (both backend memory).
  void all_gather(const float* in, size_t n, float* out);
  const CommStats& stats() const { return comm_->stats(); }
  void reset_stats() { comm_->reset_stats(); }

 private:
  std::unique_ptr<Communicator> comm_;
  kernels::Backend* backend_;
};

}  // namespace adakv::comm
