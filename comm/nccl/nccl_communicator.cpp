#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace adakv::comm {
namespace {

std::string on_rank(int rank, int size) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(size);
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device, cudaStream_t stream,
                   float* scratch, double timeout_s, NcclCompletion completion)
      : comm_(comm),
        rank_(rank),
        size_(size),
        device_(device),
        stream_(stream),
        scratch_(scratch),
        timeout_s_(timeout_s),
        completion_(completion) {}

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (comm_) ncclCommDestroy(comm_);
    cudaFree(scratch_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }

 protected:
  void do_all_reduce(float* data, size_t n, ReduceOp op) override {
    if (n == 0) return;
    ncclRedOp_t nccl_op = op == ReduceOp::kMax ? ncclMax : ncclSum;
    run("ncclAllReduce", ncclAllReduce(data, data, n, ncclFloat, nccl_op, live(), stream_));
  }

  void do_all_gather(const float* in, size_t n, float* out) override {
    if (n == 0) return;
    run("ncclAllGather", ncclAllGather(in, out, n, ncclFloat, live(), stream_));
  }

  void do_broadcast(void* data, size_t bytes, int root) override {
    if (bytes == 0) return;
    run("ncclBroadcast", ncclBroadcast(data, data, bytes, ncclChar, root, live(), stream_));
  }

  // Pipeline stages: device bytes to / from one peer, in the stream's order.
  void do_send(const void* data, size_t bytes, int peer) override {
    run("ncclSend", ncclSend(data, bytes, ncclChar, peer, live(), stream_));
  }

  void do_recv(void* data, size_t bytes, int peer) override {
    run("ncclRecv", ncclRecv(data, bytes, ncclChar, peer, live(), stream_));
  }

  void do_barrier() override {
    // A barrier waits in either mode.
    run("ncclAllReduce (barrier)",
        ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, live(), stream_),
        NcclCompletion::kWait);
  }

 private:
  // The communicator, or CommError when an earlier failure aborted it.
  ncclComm_t live() const {
    if (!comm_) {
      throw CommError("NCCL communicator on " + on_rank(rank_, size_) +
                      " was aborted by an earlier failure");
    }
    return comm_;
  }

  // Checks the enqueue, then (kWait) waits for the stream while watching NCCL's async error.
  void run(const char* call, ncclResult_t enqueued) { run(call, enqueued, completion_); }
  void run(const char* call, ncclResult_t enqueued, NcclCompletion completion) {
    if (enqueued != ncclSuccess) fail(call, describe(enqueued));
    if (completion == NcclCompletion::kEnqueue) {
      ncclResult_t async = ncclSuccess;
      ncclResult_t polled = ncclCommGetAsyncError(comm_, &async);
      if (polled != ncclSuccess) fail(call, describe(polled));
      if (async != ncclSuccess && async != ncclInProgress) fail(call, describe(async));
      return;
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    for (;;) {
      cudaError_t state = cudaStreamQuery(stream_);
      if (state == cudaSuccess) return;
      if (state != cudaErrorNotReady) {
        fail(call, std::string("CUDA error: ") + cudaGetErrorString(state));
      }
      ncclResult_t async = ncclSuccess;
      ncclResult_t polled = ncclCommGetAsyncError(comm_, &async);
      if (polled != ncclSuccess) fail(call, describe(polled));
      if (async != ncclSuccess) fail(call, describe(async));
      if (std::chrono::steady_clock::now() > deadline) {
        fail(call, "no completion within " + std::to_string(timeout_s_) +
                       " s (a peer is dead or stuck; ADAKV_NCCL_TIMEOUT_S sets the limit)");
      }
      std::this_thread::yield();
    }
  }

  std::string describe(ncclResult_t result) const {
    std::string text = ncclGetErrorString(result);
    const char* last = comm_ ? ncclGetLastError(comm_) : nullptr;
    if (last && *last) text += std::string(" (") + last + ")";
    return text;
  }

  [[noreturn]] void fail(const char* call, const std::string& reason) {
    std::string message = std::string(call) + " failed on " + on_rank(rank_, size_) + ": " + reason;
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    throw CommError(message);
  }

  ncclComm_t comm_;
  int rank_, size_, device_;
  cudaStream_t stream_;
  float* scratch_;
  double timeout_s_;
  NcclCompletion completion_;
};

// What one rank found before joining NCCL: empty when it can go on.
std::string prepare_device(int device) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess)
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
  if (device < 0 || device >= count) {
    return "CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
           " visible)";
  }
  status = cudaSetDevice(device);
  if (status != cudaSuccess) return std::string("cudaSetDevice: ") + cudaGetErrorString(status);
  return {};
}

}  // namespace

double nccl_timeout_seconds() {
  const char* env = std::getenv("ADAKV_NCCL_TIMEOUT_S");
  if (!env) return 60.0;
  char* end = nullptr;
  double seconds = std::strtod(env, &end);
  if (end == env || *end != '\0' || !std::isfinite(seconds) || seconds <= 0) {
    throw CommError(
        std::string("ADAKV_NCCL_TIMEOUT_S must be a positive number of seconds, got '") + env +
        "'");
  }
  return seconds;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, const World& world,
                                                     void* cuda_stream, NcclCompletion completion) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  const int device = world.device >= 0 ? world.device : world.local_rank;
  const double timeout_s = nccl_timeout_seconds();

  std::string problem = prepare_device(device);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank == 0 && problem.empty()) {
    ncclResult_t made = ncclGetUniqueId(&id);
    if (made != ncclSuccess) problem = std::string("ncclGetUniqueId: ") + ncclGetErrorString(made);
  }
  // Every rank takes part in both collectives, so one rank's failure cannot hang the others.
  bootstrap.broadcast(&id, sizeof id, 0);
  float failed = problem.empty() ? 0.0f : 1.0f;
  bootstrap.all_reduce(&failed, 1, ReduceOp::kMax);
  const std::string where = "NCCL bootstrap on " + on_rank(rank, size) + ": ";
  if (!problem.empty()) throw CommError(where + problem);
  if (failed != 0.0f) throw CommError(where + "another rank could not prepare its GPU");

  ncclComm_t comm = nullptr;
  ncclResult_t joined = ncclCommInitRank(&comm, size, id, rank);
  if (joined != ncclSuccess) {
    throw CommError(where + "ncclCommInitRank: " + ncclGetErrorString(joined));
  }
  float* scratch = nullptr;
  cudaError_t allocated = cudaMalloc(&scratch, sizeof(float));
  if (allocated != cudaSuccess) {
    ncclCommAbort(comm);
    throw CommError(where + "cudaMalloc: " + cudaGetErrorString(allocated));
  }
  return std::make_unique<NcclCommunicator>(comm, rank, size, device,
                                            static_cast<cudaStream_t>(cuda_stream), scratch,
                                            timeout_s, completion);
}

}  // namespace adakv::comm
