#include "comm/communicator.h"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

namespace adakv::comm {
namespace {

class Timer {
 public:
  explicit Timer(double& total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
  ~Timer() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  double& total_;
  std::chrono::steady_clock::time_point t0_;
};

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "single"; }

 protected:
  void do_all_reduce(float*, size_t, ReduceOp) override {}
  void do_all_gather(const float* in, size_t n, float* out) override {
    if (in != out) std::memmove(out, in, n * sizeof(float));
  }
  void do_broadcast(void*, size_t, int) override {}
  void do_barrier() override {}
  void do_all_reduce_int64(int64_t*, size_t, ReduceOp) override {}
  void do_all_gather_bytes(const void* in, size_t bytes, void* out) override {
    if (in != out) std::memmove(out, in, bytes);
  }

 public:
  std::unique_ptr<Communicator> duplicate() const override {
    return std::make_unique<SingleCommunicator>();
  }
};

}  // namespace

void Communicator::all_reduce(float* data, size_t n, ReduceOp op) {
  Timer t(stats_.all_reduce_s);
  ++stats_.all_reduce_calls;
  stats_.all_reduce_bytes += n * sizeof(float);
  do_all_reduce(data, n, op);
}

void Communicator::all_gather(const float* in, size_t n, float* out) {
  Timer t(stats_.all_gather_s);
  do_all_gather(in, n, out);
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  Timer t(stats_.broadcast_s);
  do_broadcast(data, bytes, root);
}

void Communicator::broadcast_patiently(void* data, size_t bytes, int root) {
  do_broadcast_patiently(data, bytes, root);
}

void Communicator::barrier() {
  do_barrier();
}

void Communicator::all_reduce(int64_t* data, size_t n, ReduceOp op) {
  if (n > 0) do_all_reduce_int64(data, n, op);
}

void Communicator::all_gather_bytes(const void* in, size_t bytes, void* out) {
  if (bytes > 0) do_all_gather_bytes(in, bytes, out);
}

void Communicator::send(const void* data, size_t bytes, int peer) {
  Timer t(stats_.send_s);
  if (bytes > 0) do_send(data, bytes, peer);
}

void Communicator::recv(void* data, size_t bytes, int peer) {
  Timer t(stats_.recv_s);
  if (bytes > 0) do_recv(data, bytes, peer);
}

void Communicator::post(const void* data, size_t bytes, int peer) {
  Timer t(stats_.send_s);
  if (bytes > 0) do_post(data, bytes, peer);
}

void Communicator::flush_posts() {
  Timer t(stats_.send_s);
  do_flush_posts();
}

void Communicator::recv_patiently(void* data, size_t bytes, int peer) {
  if (bytes > 0) do_recv_patiently(data, bytes, peer);
}

void Communicator::do_send(const void*, size_t, int) {
  throw std::logic_error(std::string("the ") + backend() + " communicator has no point to point");
}

void Communicator::do_recv(void*, size_t, int) {
  throw std::logic_error(std::string("the ") + backend() + " communicator has no point to point");
}

std::unique_ptr<Communicator> Communicator::duplicate() const {
  throw std::logic_error(std::string("the ") + backend() + " communicator cannot be duplicated");
}

void Communicator::do_all_reduce_int64(int64_t*, size_t, ReduceOp) {
  throw std::logic_error(std::string("the ") + backend() +
                         " communicator carries no host collectives (integer all_reduce)");
}

void Communicator::do_all_gather_bytes(const void*, size_t, void*) {
  throw std::logic_error(std::string("the ") + backend() +
                         " communicator carries no host collectives (byte all_gather)");
}

std::unique_ptr<Communicator> make_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

}  // namespace adakv::comm
