// The device group's collectives on backend memory, on each path a CPU rank can take (host:
// inside run_on_host; staged: through download and upload, as CUDA ranks without NCCL do), on
// the CPU and the guarded backend, against the closed forms of tests/mpi/closed_form.h.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "comm/device_group.h"
#include "tests/mpi/closed_form.h"
#include "tests/mpi/mpi_test_env.h"

namespace adakv::test {
namespace {

namespace k = adakv::kernels;
using comm::DeviceGroup;

class DeviceGroupTest
    : public testing::TestWithParam<std::tuple<k::BackendKind, DeviceGroup::Path>> {
 protected:
  void SetUp() override {
    backend_ = k::make_backend(std::get<0>(GetParam()));
    group_ =
        std::make_unique<DeviceGroup>(test_comm().duplicate(), *backend_, std::get<1>(GetParam()));
  }

  k::Buffer to_backend(const std::vector<float>& host) {
    k::Buffer b = backend_->allocate(host.size() * sizeof(float));
    backend_->upload(b.data(), host.data(), host.size() * sizeof(float));
    return b;
  }
  std::vector<float> to_host(const k::Buffer& b, size_t n) {
    std::vector<float> host(n);
    backend_->download(host.data(), b.data(), n * sizeof(float));
    return host;
  }

  std::unique_ptr<k::Backend> backend_;
  std::unique_ptr<DeviceGroup> group_;
};

TEST_P(DeviceGroupTest, TakesThePathAsked) {
  EXPECT_EQ(group_->path(), std::get<1>(GetParam()));
  EXPECT_EQ(group_->size(), test_world().size);
}

TEST_P(DeviceGroupTest, AllReduceSums) {
  const int rank = group_->rank(), size = group_->size();
  for (size_t n : kFloatCounts) {
    if (n == 0) continue;
    k::Buffer data = to_backend(rank_values(n, rank, size));
    group_->all_reduce(data.as<float>(), n);
    const std::vector<float> got = to_host(data, n);
    EXPECT_TRUE(all_equal(got.data(), n, [&](size_t i) { return sum_value(i, size); }))
        << "n=" << n;
  }
}

TEST_P(DeviceGroupTest, AllGatherGivesRankOrderedBlocks) {
  const int rank = group_->rank(), size = group_->size();
  for (size_t n : {size_t{1}, size_t{7}, size_t{4096}}) {
    k::Buffer in = to_backend(rank_values(n, rank, size));
    k::Buffer out = backend_->allocate(n * size * sizeof(float));
    group_->all_gather(in.as<float>(), n, out.as<float>());
    const std::vector<float> got = to_host(out, n * size);
    for (int r = 0; r < size; ++r) {
      EXPECT_TRUE(
          all_equal(got.data() + r * n, n, [&](size_t i) { return rank_value(i, r, size); }))
          << "block of rank " << r << ", n=" << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Paths, DeviceGroupTest,
    testing::Combine(testing::Values(k::BackendKind::kCpu, k::BackendKind::kGuarded),
                     testing::Values(DeviceGroup::Path::kHost, DeviceGroup::Path::kStaged)),
    [](const auto& info) {
      return std::string(k::to_string(std::get<0>(info.param))) + "_" +
             comm::to_string(std::get<1>(info.param));
    });

TEST(DeviceGroupPaths, FollowTheCommunicatorAndTheBackend) {
  auto cpu = k::make_backend(k::BackendKind::kCpu);
  EXPECT_EQ(DeviceGroup(test_comm().duplicate(), *cpu).path(), DeviceGroup::Path::kHost);
  // An MPI communicator cannot take device buffers.
  try {
    DeviceGroup(test_comm().duplicate(), *cpu, DeviceGroup::Path::kDevice);
    ADD_FAILURE() << "the device path was taken with an MPI communicator";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("device path does not suit a mpi communicator"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace adakv::test
