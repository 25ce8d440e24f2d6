// The communicators one rank's Worker runs on (none owned; all outlive the Worker):
//   job:  every rank of the replica, in global rank order: the control plane (step plans, token
//         ids), reports, and the Ada-KV gain exchange of scope global across pipeline stages;
//   tp:   the tensor-parallel group of this rank's pipeline stage: the layers' collectives and the
//         per-layer gain exchange;
//   pipe: the ranks of the replica with this rank's tensor-parallel rank, one per stage, ordered
//         by stage (null without pipeline stages): the residual between stages, the logits to
//         rank 0.
// Without pipeline stages job and tp are the same group.
#pragma once

#include "comm/communicator.h"

namespace adakv::comm {

struct Groups {
  Communicator* job = nullptr;
  Communicator* tp = nullptr;
  Communicator* pipe = nullptr;
};

}  // namespace adakv::comm
