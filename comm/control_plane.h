// The control plane: rank 0 decides, every other rank follows. Messages (commands, step
// plans) go from rank 0 to each rank point to point, posted (Communicator::post): rank 0 never
// waits for a rank still busy with an earlier message (a later pipeline stage), and every rank
// receives them in the order rank 0 sent them. Sampled token ids travel over the group's
// broadcast. On one rank every call returns its argument.
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.h"

namespace adakv::comm {

class ControlPlane {
 public:
  explicit ControlPlane(Communicator& comm) : comm_(comm) {}

  bool is_root() const { return comm_.rank() == 0; }
  int size() const { return comm_.size(); }
  Communicator& comm() const { return comm_; }

  // Every rank calls it, each in its own time; all return rank 0's `message` (ignored
  // elsewhere). Rank 0 returns at once.
  std::string broadcast(const std::string& message) const;
  // Rank 0: returns once every rank has received what it was sent.
  void flush() const { comm_.flush_posts(); }
  // Every rank calls it; all return rank 0's token.
  int32_t broadcast_token(int32_t token) const;

 private:
  Communicator& comm_;
};

}  // namespace adakv::comm
