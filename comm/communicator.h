// The collectives tensor parallelism needs, behind one interface with two implementations:
// MPI (host buffers, comm/mpi/) and NCCL (device buffers, comm/nccl/, built with CUDA).
// Model code calls all_reduce at the two row-parallel outputs and nowhere else.
//
// Every rank of the group must make the same calls in the same order with the same sizes.
// A failure (a dead peer, a transport error) throws CommError naming the rank and the call;
// the caller does not retry: the job is over (OpenMPI 4.1 has no recovery).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace adakv::comm {

enum class ReduceOp { kSum, kMax };

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Seconds and calls spent in each collective since construction (for benchmarks).
struct CommStats {
  double all_reduce_s = 0, all_gather_s = 0, broadcast_s = 0, send_s = 0, recv_s = 0;
  size_t all_reduce_calls = 0, all_reduce_bytes = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "single", "mpi", "nccl"

  // data[0..n) <- op over every rank's data[0..n), in place. Over MPI the float sum of every
  // element is ((p0 + p1) + p2) + ... in rank order, bit-identical on every rank and whatever
  // n or the element's position: a row's sum does not depend on the rows reduced with it, so
  // tensor-parallel results do not depend on the batch. NCCL (ncclAllReduce) promises no such
  // order. The max is exact in any order.
  void all_reduce(float* data, size_t n, ReduceOp op = ReduceOp::kSum);
  // out[r * n .. (r + 1) * n) <- rank r's in[0..n); out holds size() * n floats.
  void all_gather(const float* in, size_t n, float* out);
  // The host group's integer and byte collectives (counts and bytes travel exactly, never as
  // floats). A device-only transport (NCCL) throws std::logic_error.
  void all_reduce(int64_t* data, size_t n, ReduceOp op = ReduceOp::kSum);
  // out[r * bytes .. (r + 1) * bytes) <- rank r's in[0..bytes).
  void all_gather_bytes(const void* in, size_t bytes, void* out);
  // data[0..bytes) <- root's data[0..bytes).
  void broadcast(void* data, size_t bytes, int root = 0);
  // The same, for a rank that may wait long (a follower idle between requests): it waits
  // without spinning a core. Every rank of the broadcast must call this one.
  void broadcast_patiently(void* data, size_t bytes, int root = 0);
  void barrier();
  // Point to point (pipeline stages): bytes [0, bytes) to / from rank `peer` of this group.
  // Messages between two ranks arrive in the order they were sent; send may return before the
  // peer received (the buffer is reusable on return). A transport without point to point throws
  // std::logic_error.
  void send(const void* data, size_t bytes, int peer);
  void recv(void* data, size_t bytes, int peer);
  // send() that never waits for the peer (a pipeline stage, or the root of the control plane,
  // running ahead of the ranks that receive): the bytes are copied and go out in order with
  // this rank's other messages to `peer`. Copies are freed as their sends complete; every
  // post has completed when flush_posts() returns (and before the communicator is freed).
  void post(const void* data, size_t bytes, int peer);
  void flush_posts();
  // recv() for a rank that may wait long (a follower idle between commands): it waits without
  // spinning a core.
  void recv_patiently(void* data, size_t bytes, int peer);
  // A new communicator over the same ranks whose messages never match this one's (collective:
  // every rank calls it together). Throws std::logic_error where the transport has none.
  virtual std::unique_ptr<Communicator> duplicate() const;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  virtual void do_all_reduce(float* data, size_t n, ReduceOp op) = 0;
  virtual void do_all_gather(const float* in, size_t n, float* out) = 0;
  virtual void do_broadcast(void* data, size_t bytes, int root) = 0;
  virtual void do_broadcast_patiently(void* data, size_t bytes, int root) {
    do_broadcast(data, bytes, root);
  }
  virtual void do_barrier() = 0;
  virtual void do_all_reduce_int64(int64_t* data, size_t n, ReduceOp op);
  virtual void do_all_gather_bytes(const void* in, size_t bytes, void* out);
  virtual void do_send(const void* data, size_t bytes, int peer);
  virtual void do_recv(void* data, size_t bytes, int peer);
  // Default: a blocking send (a transport whose sends return before the peer receives).
  virtual void do_post(const void* data, size_t bytes, int peer) { do_send(data, bytes, peer); }
  virtual void do_flush_posts() {}
  virtual void do_recv_patiently(void* data, size_t bytes, int peer) { do_recv(data, bytes, peer); }

 private:
  CommStats stats_;
};

// The group of one rank: all_reduce and broadcast leave the data as it is.
std::unique_ptr<Communicator> make_single_communicator();

}  // namespace adakv::comm
