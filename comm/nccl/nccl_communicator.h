// The NCCL implementation of Communicator: all_reduce, all_gather and broadcast on DEVICE
// buffers of this rank's GPU; barrier is a one-float all_reduce. No CUDA or NCCL types here:
// the stream is a cudaStream_t passed as void*.
//
// Bootstrap: rank 0 makes the NCCL unique id and broadcasts its bytes over `bootstrap` (the
// MPI communicator); every rank then joins with ncclCommInitRank. The calling thread's device
// becomes world.device, or world.local_rank when device is -1 (one rank per GPU).
//
// NcclCompletion::kWait: every collective is enqueued on the stream and then waited for,
// polling NCCL's async error with a deadline (60 s, or env ADAKV_NCCL_TIMEOUT_S seconds): a
// dead or stuck peer aborts the NCCL communicator and throws CommError naming the rank and the
// NCCL error. NcclCompletion::kEnqueue (the device group of a CUDA backend, whose ops share the
// stream): a collective returns once enqueued, after a non-blocking look at NCCL's async error;
// the backend's next wait (a download of logits) waits for it, and a rank that dies ends the
// whole mpirun job. After a failure the object only throws. Sizes 0 are no-ops. Preconditions:
// every rank of `bootstrap` calls make_nccl_communicator, and the collectives, in the same order
// with the same sizes.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/world.h"

namespace adakv::comm {

enum class NcclCompletion { kWait, kEnqueue };

// cuda_stream: the cudaStream_t to run on; nullptr is the default stream.
std::unique_ptr<Communicator> make_nccl_communicator(
    Communicator& bootstrap, const World& world, void* cuda_stream = nullptr,
    NcclCompletion completion = NcclCompletion::kWait);

// The deadline each collective waits: ADAKV_NCCL_TIMEOUT_S when set (positive seconds),
// else 60. Throws CommError on a malformed value.
double nccl_timeout_seconds();

}  // namespace adakv::comm
