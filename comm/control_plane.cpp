#include "comm/control_plane.h"

namespace adakv::comm {

std::string ControlPlane::broadcast(const std::string& message) const {
  if (comm_.size() == 1) return message;
  uint64_t bytes = message.size();
  // The followers wait here between commands, for as long as rank 0 has nothing to do.
  comm_.broadcast_patiently(&bytes, sizeof bytes, 0);
  std::string out = is_root() ? message : std::string(bytes, '\0');
  if (bytes) comm_.broadcast(out.data(), bytes, 0);
  return out;
}

int32_t ControlPlane::broadcast_token(int32_t token) const {
  if (comm_.size() > 1) comm_.broadcast(&token, sizeof token, 0);
  return token;
}

}  // namespace adakv::comm
