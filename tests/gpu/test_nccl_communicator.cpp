// The NCCL communicator on device buffers, one GPU per rank, against the same closed forms as
// the MPI tests (tests/mpi/closed_form.h). Without a GPU for every rank, every rank skips.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/nccl/nccl_communicator.h"
#include "tests/mpi/closed_form.h"
#include "tests/mpi/mpi_test_env.h"

namespace adakv::test {
namespace {

using comm::Communicator;
using comm::ReduceOp;

// An owning device buffer of `bytes` (at least 1, so empty ones still have an address).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    cudaError_t status = cudaMalloc(&data_, bytes ? bytes : 1);
    if (status != cudaSuccess) throw std::runtime_error(cudaGetErrorString(status));
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  void upload(const void* host) {
    ASSERT_EQ(cudaMemcpy(data_, host, bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void download(void* host) const {
    ASSERT_EQ(cudaMemcpy(host, data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

class NcclCommunicatorTest : public testing::Test {
 protected:
  // Every rank decides the same: run when each rank has a GPU of its own on its node.
  void SetUp() override {
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) count = 0;
    comm::World world = test_world();
    float missing = world.local_rank < count ? 0.0f : 1.0f;
    test_comm().all_reduce(&missing, 1, ReduceOp::kMax);
    if (missing != 0.0f) {
      GTEST_SKIP() << "needs one CUDA device per rank; rank " << world.rank << " (local rank "
                   << world.local_rank << ") sees " << count
                   << " (cudaGetDeviceCount: " << cudaGetErrorString(status) << ")";
    }
    world.device = world.local_rank;
    nccl_ = comm::make_nccl_communicator(test_comm(), world);
  }

  std::unique_ptr<Communicator> nccl_;
};

TEST_F(NcclCommunicatorTest, KnowsItsPlace) {
  EXPECT_STREQ(nccl_->backend(), "nccl");
  EXPECT_EQ(nccl_->rank(), test_world().rank);
  EXPECT_EQ(nccl_->size(), test_world().size);
}

TEST_F(NcclCommunicatorTest, AllReduceSumAndMaxAreClosedForm) {
  const int rank = nccl_->rank(), size = nccl_->size();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    for (size_t n : kFloatCounts) {
      std::vector<float> host = rank_values(n, rank, size);
      DeviceBuffer device(n * sizeof(float));
      device.upload(host.data());
      nccl_->all_reduce(device.as<float>(), n, op);
      device.download(host.data());
      EXPECT_TRUE(all_equal(
          host.data(), n,
          [&](size_t i) { return op == ReduceOp::kSum ? sum_value(i, size) : max_value(i, size); }))
          << (op == ReduceOp::kSum ? "sum" : "max") << ", n=" << n;
    }
  }
}

TEST_F(NcclCommunicatorTest, AllGatherGivesRankOrderedBlocks) {
  const int rank = nccl_->rank(), size = nccl_->size();
  for (size_t n : kFloatCounts) {
    std::vector<float> mine = rank_values(n, rank, size), out(n * size, -1.0f);
    DeviceBuffer in(n * sizeof(float)), gathered(out.size() * sizeof(float));
    in.upload(mine.data());
    gathered.upload(out.data());
    nccl_->all_gather(in.as<float>(), n, gathered.as<float>());
    gathered.download(out.data());
    for (int r = 0; r < size; ++r) {
      EXPECT_TRUE(
          all_equal(out.data() + r * n, n, [&](size_t i) { return rank_value(i, r, size); }))
          << "block of rank " << r << ", n=" << n;
    }
  }
}

TEST_F(NcclCommunicatorTest, BroadcastFromFirstAndLastRank) {
  for (int root : {0, nccl_->size() - 1}) {
    for (size_t bytes : kByteCounts) {
      std::vector<uint8_t> host(bytes);
      for (size_t i = 0; i < bytes; ++i) {
        host[i] = nccl_->rank() == root ? root_byte(i, root) : ~root_byte(i, root);
      }
      DeviceBuffer device(bytes);
      device.upload(host.data());
      nccl_->broadcast(device.as<void>(), bytes, root);
      device.download(host.data());
      EXPECT_TRUE(all_equal(host.data(), bytes, [&](size_t i) { return root_byte(i, root); }))
          << "bytes=" << bytes << " root=" << root;
    }
  }
}

TEST_F(NcclCommunicatorTest, BarrierAndStats) {
  DeviceBuffer device(7 * sizeof(float));
  const auto start = std::chrono::steady_clock::now();
  for (int call = 0; call < 3; ++call) nccl_->all_reduce(device.as<float>(), 7);
  nccl_->barrier();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(nccl_->stats().all_reduce_calls, 3u);
  EXPECT_EQ(nccl_->stats().all_reduce_bytes, 3 * 7 * sizeof(float));
  // Measured (> 0) and within the wall time around the calls.
  EXPECT_GT(nccl_->stats().all_reduce_s, 0.0);
  EXPECT_LE(nccl_->stats().all_reduce_s, wall);
}

// Needs no GPU: the deadline setting is read from the environment.
TEST(NcclTimeout, ReadsTheEnvironment) {
  unsetenv("ADAKV_NCCL_TIMEOUT_S");
  EXPECT_EQ(comm::nccl_timeout_seconds(), 60.0);
  setenv("ADAKV_NCCL_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(comm::nccl_timeout_seconds(), 2.5);
  for (const char* bad : {"", "abc", "0", "-3", "5s", "inf"}) {
    setenv("ADAKV_NCCL_TIMEOUT_S", bad, 1);
    EXPECT_THROW(comm::nccl_timeout_seconds(), comm::CommError) << "'" << bad << "'";
  }
  unsetenv("ADAKV_NCCL_TIMEOUT_S");
}

}  // namespace
}  // namespace adakv::test
