#include "comm/mpi/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <list>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_error.h"

namespace adakv::comm {
namespace {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size, size_t max_count)
      : comm_(comm),
        max_count_(max_count),
        rank_(rank),
        size_(size),
        counts_(size),
        displs_(size),
        seg_counts_(size),
        seg_displs_(size) {}

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    try {
      do_flush_posts();
    } catch (const CommError&) {
      // A peer that is gone cannot take them; the job is ending anyway.
    }
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }

 protected:
  // The float sum is not MPI_Allreduce: OpenMPI picks its algorithm (and so the order in which
  // it adds the ranks' partials) by message size, so a row's sum would change in the last bits
  // with the number of rows reduced with it, and tensor-parallel results would depend on the
  // batch. Every element is instead summed as ((p0 + p1) + p2) + ... in rank order, the same
  // on every rank, whatever n, the element's position or the piece it travels in (see
  // ordered_sum). The max is exact in any order: MPI_MAX.
  void do_all_reduce(float* data, size_t n, ReduceOp op) override {
    if (op == ReduceOp::kSum) {
      if (size_ == 1) return;
      // A piece's gathered partials (size_ per element) must fit one MPI call, and pieces of at
      // most kPieceBytes keep the scratch and MPI's own buffers small (a prompt slice's
      // all-reduce is several MiB).
      const size_t piece = std::max<size_t>(
          1, std::min(max_count_ / static_cast<size_t>(size_), kPieceBytes / sizeof(float)));
      for (size_t offset = 0; offset < n; offset += piece) {
        ordered_sum(data + offset, static_cast<int>(std::min(n - offset, piece)));
      }
      return;
    }
    for (size_t offset = 0; offset < n; offset += max_count_) {
      int count = chunk(n - offset);
      check(MPI_Allreduce(MPI_IN_PLACE, data + offset, count, MPI_FLOAT, MPI_MAX, comm_),
            "MPI_Allreduce");
    }
  }

  void do_all_gather(const float* in, size_t n, float* out) override {
    if (n == 0) return;
    const bool in_place = in == out + static_cast<size_t>(rank_) * n;
    if (n <= max_count_) {
      const void* send = in_place ? MPI_IN_PLACE : in;
      int count = static_cast<int>(n);
      check(MPI_Allgather(send, count, MPI_FLOAT, out, count, MPI_FLOAT, comm_), "MPI_Allgather");
      return;
    }
    for (size_t offset = 0; offset < n; offset += max_count_) {
      all_gather_slice(in_place ? nullptr : in + offset, offset, chunk(n - offset), n, out);
    }
  }

  void do_broadcast(void* data, size_t bytes, int root) override {
    auto* base = static_cast<char*>(data);
    for (size_t offset = 0; offset < bytes; offset += max_count_) {
      check(MPI_Bcast(base + offset, chunk(bytes - offset), MPI_BYTE, root, comm_), "MPI_Bcast");
    }
  }

  // MPI_Bcast busy-polls while it waits; a follower idle between requests would spin a core.
  // A nonblocking broadcast, waited for patiently (wait_patiently), costs almost nothing and
  // answers a busy root at once.
  void do_broadcast_patiently(void* data, size_t bytes, int root) override {
    auto* base = static_cast<char*>(data);
    for (size_t offset = 0; offset < bytes; offset += max_count_) {
      MPI_Request request;
      check(MPI_Ibcast(base + offset, chunk(bytes - offset), MPI_BYTE, root, comm_, &request),
            "MPI_Ibcast");
      wait_patiently(request, "MPI_Ibcast");
    }
  }

  void do_recv_patiently(void* data, size_t bytes, int peer) override {
    auto* base = static_cast<char*>(data);
    for (size_t offset = 0; offset < bytes; offset += max_count_) {
      MPI_Request request;
      check(MPI_Irecv(base + offset, chunk(bytes - offset), MPI_BYTE, peer, kTag, comm_, &request),
            "MPI_Irecv");
      wait_patiently(request, "MPI_Irecv");
    }
  }

  void do_post(const void* data, size_t bytes, int peer) override {
    reap_posts();
    Posted& p = posted_.emplace_back();
    p.bytes.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    for (size_t offset = 0; offset < bytes; offset += max_count_) {
      MPI_Request request;
      check(MPI_Isend(p.bytes.data() + offset, chunk(bytes - offset), MPI_BYTE, peer, kTag, comm_,
                      &request),
            "MPI_Isend");
      p.requests.push_back(request);
    }
  }

  void do_flush_posts() override {
    for (Posted& p : posted_) {
      check(
          MPI_Waitall(static_cast<int>(p.requests.size()), p.requests.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
    }
    posted_.clear();
  }

  void do_barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  void do_all_reduce_int64(int64_t* data, size_t n, ReduceOp op) override {
    MPI_Op mpi_op = op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
    for (size_t offset = 0; offset < n; offset += max_count_) {
      check(
          MPI_Allreduce(MPI_IN_PLACE, data + offset, chunk(n - offset), MPI_INT64_T, mpi_op, comm_),
          "MPI_Allreduce");
    }
  }

  // One tag for every message: MPI keeps the order of messages between two ranks on one
  // communicator, which is the order both sides issue them in.
  void do_send(const void* data, size_t bytes, int peer) override {
    const auto* base = static_cast<const char*>(data);
    for (size_t offset = 0; offset < bytes; offset += max_count_) {
      check(MPI_Send(base + offset, chunk(bytes - offset), MPI_BYTE, peer, kTag, comm_),
            "MPI_Send");
    }
  }

  void do_recv(void* data, size_t bytes, int peer) override {
    auto* base = static_cast<char*>(data);
    for (size_t offset = 0; offset < bytes; offset += max_count_) {
      check(MPI_Recv(base + offset, chunk(bytes - offset), MPI_BYTE, peer, kTag, comm_,
                     MPI_STATUS_IGNORE),
            "MPI_Recv");
    }
  }

  // Host messages (reports, gain rows) are small: one call, no splitting.
  void do_all_gather_bytes(const void* in, size_t bytes, void* out) override {
    if (bytes > max_count_) {
      throw CommError("all_gather_bytes: " + std::to_string(bytes) +
                      " bytes per rank is more than one MPI call carries");
    }
    const int count = static_cast<int>(bytes);
    check(MPI_Allgather(in, count, MPI_BYTE, out, count, MPI_BYTE, comm_), "MPI_Allgather");
  }

 public:
  std::unique_ptr<Communicator> duplicate() const override {
    MPI_Comm comm;
    check(MPI_Comm_dup(comm_, &comm), "MPI_Comm_dup");
    const int code = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    if (code != MPI_SUCCESS) {
      MPI_Comm_free(&comm);
      check(code, "MPI_Comm_set_errhandler");
    }
    return std::make_unique<MpiCommunicator>(comm, rank_, size_, max_count_);
  }

 private:
  int chunk(size_t left) const { return static_cast<int>(std::min(left, max_count_)); }

  // Tests `request` in a loop for the first microseconds, then between naps that grow to at
  // most 0.5 ms: a rank that waits long does not spin a core.
  void wait_patiently(MPI_Request& request, const char* call) const {
    const auto start = std::chrono::steady_clock::now();
    auto nap = std::chrono::microseconds(20);
    for (int done = 0;;) {
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
      if (done) return;
      if (std::chrono::steady_clock::now() - start < std::chrono::microseconds(200)) continue;
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(500));
    }
  }

  // Frees the copies of the posts whose sends have completed.
  void reap_posts() {
    for (auto it = posted_.begin(); it != posted_.end();) {
      int done = 0;
      check(MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done,
                        MPI_STATUSES_IGNORE),
            "MPI_Testall");
      it = done ? posted_.erase(it) : std::next(it);
    }
  }

  void check(int code, const char* call) const { detail::check_mpi(code, call, rank_, size_); }

  // Small messages (decode): one MPI_Allgather of the partials, then every rank adds the
  // size_ partials of each element in rank order. Larger ones: the piece is cut into size_
  // fixed segments ([count * r / size_, count * (r + 1) / size_) for rank r), MPI_Alltoallv
  // brings rank r every rank's copy of its segment, rank r adds them in rank order, and
  // MPI_Allgatherv (in place) hands every segment to every rank. Both branches add the same
  // floats in the same order (no fast-math: the compiler keeps each element's order), so the
  // threshold changes no bit.
  void ordered_sum(float* data, int count) {
    const int P = size_;
    if (static_cast<size_t>(count) * sizeof(float) <= kGatherAllBytes) {
      const size_t total = static_cast<size_t>(P) * count;
      if (scratch_.size() < total) scratch_.resize(total);
      float* all = scratch_.data();
      check(MPI_Allgather(data, count, MPI_FLOAT, all, count, MPI_FLOAT, comm_), "MPI_Allgather");
      add_in_rank_order(all, count, data);
      return;
    }
    for (int r = 0; r < P; ++r) {
      const int64_t begin = static_cast<int64_t>(count) * r / P;
      const int64_t end = static_cast<int64_t>(count) * (r + 1) / P;
      seg_counts_[r] = static_cast<int>(end - begin);
      seg_displs_[r] = static_cast<int>(begin);
    }
    const int mine = seg_counts_[rank_];
    for (int r = 0; r < P; ++r) {
      counts_[r] = mine;
      displs_[r] = r * mine;
    }
    const size_t total = static_cast<size_t>(P) * mine;
    if (scratch_.size() < total) scratch_.resize(total);
    float* all = scratch_.data();
    check(MPI_Alltoallv(data, seg_counts_.data(), seg_displs_.data(), MPI_FLOAT, all,
                        counts_.data(), displs_.data(), MPI_FLOAT, comm_),
          "MPI_Alltoallv");
    add_in_rank_order(all, mine, data + seg_displs_[rank_]);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, data, seg_counts_.data(), seg_displs_.data(),
                         MPI_FLOAT, comm_),
          "MPI_Allgatherv");
  }

  // out[i] <- ((all[i] + all[m + i]) + all[2m + i]) + ..., size_ blocks of m floats.
  void add_in_rank_order(const float* all, int m, float* out) const {
    for (int i = 0; i < m; ++i) out[i] = all[i];
    for (int r = 1; r < size_; ++r) {
      const float* part = all + static_cast<size_t>(r) * m;
      for (int i = 0; i < m; ++i) out[i] += part[i];
    }
  }

  // Gathers floats [offset, offset + count) of every rank's n-float block: the receive type is
  // `count` floats whose extent is a whole block, so rank r's slice lands at out[r * n +
  // offset]. `in` null means in place.
  void all_gather_slice(const float* in, size_t offset, int count, size_t n, float* out) {
    MPI_Datatype slice, block;
    check(MPI_Type_contiguous(count, MPI_FLOAT, &slice), "MPI_Type_contiguous");
    int code = MPI_Type_create_resized(slice, 0, static_cast<MPI_Aint>(n * sizeof(float)), &block);
    MPI_Type_free(&slice);
    check(code, "MPI_Type_create_resized");
    code = MPI_Type_commit(&block);
    if (code == MPI_SUCCESS) {
      const void* send = in ? static_cast<const void*>(in) : MPI_IN_PLACE;
      code = MPI_Allgather(send, count, MPI_FLOAT, out + offset, 1, block, comm_);
    }
    MPI_Type_free(&block);
    check(code, "MPI_Allgather");
  }

  // Up to this many bytes per rank the float sum gathers every partial on every rank.
  static constexpr size_t kGatherAllBytes = size_t{64} << 10;
  static constexpr size_t kPieceBytes = size_t{1} << 20;
  static constexpr int kTag = 7;

  MPI_Comm comm_;
  size_t max_count_;
  int rank_ = 0;
  int size_ = 1;
  // The float sum's scratch, kept across calls: the gathered partials, and the segments'
  // counts and displacements (received, sent).
  std::vector<float> scratch_;
  std::vector<int> counts_, displs_, seg_counts_, seg_displs_;
  // Each post's copy of its bytes and the requests of its pieces, until they complete.
  struct Posted {
    std::vector<char> bytes;
    std::vector<MPI_Request> requests;
  };
  std::list<Posted> posted_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_split_communicator(int color, int key) {
  int rank = -1, size = 0;
  detail::check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank", -1, 0);
  detail::check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size", rank, 0);
  MPI_Comm comm;
  detail::check_mpi(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm), "MPI_Comm_split", rank,
                    size);
  int code = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int group_rank = 0, group_size = 1;
  if (code == MPI_SUCCESS) code = MPI_Comm_rank(comm, &group_rank);
  if (code == MPI_SUCCESS) code = MPI_Comm_size(comm, &group_size);
  if (code != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    detail::throw_mpi_error("MPI_Comm_split", code, rank, size);
  }
  return std::make_unique<MpiCommunicator>(comm, group_rank, group_size, kMpiMaxCount);
}

std::unique_ptr<Communicator> make_mpi_world_communicator(size_t max_count) {
  if (max_count == 0 || max_count > kMpiMaxCount) {
    throw std::invalid_argument("make_mpi_world_communicator: max_count must be in 1.." +
                                std::to_string(kMpiMaxCount) + ", got " +
                                std::to_string(max_count));
  }
  int rank = -1, size = 0;  // a duplicate has MPI_COMM_WORLD's ranks
  detail::check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank", -1, 0);
  detail::check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size", rank, 0);
  MPI_Comm comm;
  detail::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup", rank, size);
  int code = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (code != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    detail::throw_mpi_error("MPI_Comm_set_errhandler", code, rank, size);
  }
  return std::make_unique<MpiCommunicator>(comm, rank, size, max_count);
}

}  // namespace adakv::comm
