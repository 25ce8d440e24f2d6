// The control plane: rank 0 decides, every other rank follows. Messages (commands, step
// plans) and sampled token ids travel from rank 0 to all ranks over the group's broadcast.
// On one rank every call returns its argument.
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

  // Every rank calls it; all return rank 0's `message` (ignored elsewhere).
  std::string broadcast(const std::string& message) const;
  // Every rank calls it; all return rank 0's token.
  int32_t broadcast_token(int32_t token) const;

 private:
  Communicator& comm_;
};

}  // namespace adakv::comm
