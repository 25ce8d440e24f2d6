// The link of one rank to its neighbouring pipeline stages: the residual stream of a step's rows
// goes from stage s to stage s + 1 (the rank of the same tensor-parallel rank there), on the
// backend's memory and in its stream order, as the device group's collectives do.
//
// `pipe` is the communicator of one pipeline: the ranks of one replica that share a
// tensor-parallel rank, ordered by stage (its rank is the stage). Every tensor-parallel rank of a
// stage holds the whole residual (the layers' all-reduces leave it replicated), so each pipeline
// carries its own copy and no stage gathers or scatters.
//
// How a message reaches the backend's memory follows the pair, as in comm/device_group.h: a
// communicator of device buffers (NCCL) sends on the stream; a host communicator (MPI) sends
// inside Backend::run_on_host on a backend the host can address, else stages through host memory.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/device_group.h"
#include "kernels/backend.h"

namespace adakv::comm {

class PipelineChannel {
 public:
  // `pipe` (its own communicator, not shared with host traffic); `backend` outlives the channel.
  PipelineChannel(std::unique_ptr<Communicator> pipe, kernels::Backend& backend);

  int stage() const { return pipe_->rank(); }
  int stages() const { return pipe_->size(); }
  DeviceGroup::Path path() const { return path_; }

  // data[0..n) (backend memory) to the next stage; the previous stage's into data[0..n).
  // Both sides must agree on n (they follow the same step plan). The send does not wait for
  // the next stage to receive (it may still be busy with an earlier step): over a host
  // communicator the bytes are posted (Communicator::post), over NCCL they are in the stream's
  // order.
  void send_next(const float* data, size_t n);
  void recv_prev(float* data, size_t n);
  const CommStats& stats() const { return pipe_->stats(); }
  void reset_stats() { pipe_->reset_stats(); }

 private:
  std::unique_ptr<Communicator> pipe_;
  kernels::Backend* backend_;
  DeviceGroup::Path path_;
  std::vector<float> staged_;
};

}  // namespace adakv::comm
