#include "comm/control_plane.h"

namespace adakv::comm {

std::string ControlPlane::broadcast(const std::string& message) const {
  if (comm_.size() == 1) return message;
  uint64_t bytes = message.size();
  if (is_root()) {
    for (int r = 1; r < comm_.size(); ++r) {
      comm_.post(&bytes, sizeof bytes, r);
      comm_.post(message.data(), bytes, r);
    }
    return message;
  }
  // The followers wait here between commands, for as long as rank 0 has nothing to do.
  comm_.recv_patiently(&bytes, sizeof bytes, 0);
  std::string out(bytes, '\0');
  comm_.recv(out.data(), bytes, 0);
  return out;
}

int32_t ControlPlane::broadcast_token(int32_t token) const {
  if (comm_.size() > 1) comm_.broadcast(&token, sizeof token, 0);
  return token;
}

}  // namespace adakv::comm
