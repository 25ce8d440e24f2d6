// Point to point between pipeline stages: the communicator's send/recv (bytes in order, large
// messages split), the pipeline channel on backend memory (every rank a stage of one pipeline:
// the residual passes down the ranks and each adds to it), and the MPI split that builds a
// job's groups (TP groups of consecutive ranks, pipelines across them).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "comm/mpi/mpi_communicator.h"
#include "comm/parallel_layout.h"
#include "comm/pipeline_channel.h"
#include "tests/mpi/mpi_test_env.h"

namespace adakv::test {
namespace {

namespace k = adakv::kernels;

TEST(PointToPoint, BytesArriveInOrderAroundTheRing) {
  auto comm = test_comm().duplicate();
  const int rank = comm->rank(), size = comm->size();
  if (size == 1) GTEST_SKIP() << "needs two ranks";
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  // Two messages each way, received in the order sent; even ranks send first (no deadlock on
  // a synchronous transport).
  std::vector<int64_t> small{rank, 7}, large(300000, rank), got_small(2), got_large(300000);
  if (rank % 2 == 0) {
    comm->send(small.data(), small.size() * sizeof(int64_t), next);
    comm->send(large.data(), large.size() * sizeof(int64_t), next);
  }
  comm->recv(got_small.data(), got_small.size() * sizeof(int64_t), prev);
  comm->recv(got_large.data(), got_large.size() * sizeof(int64_t), prev);
  if (rank % 2 != 0) {
    comm->send(small.data(), small.size() * sizeof(int64_t), next);
    comm->send(large.data(), large.size() * sizeof(int64_t), next);
  }
  EXPECT_EQ(got_small, (std::vector<int64_t>{prev, 7}));
  EXPECT_EQ(got_large, std::vector<int64_t>(300000, prev));
}

TEST(PointToPoint, SingleCommunicatorHasNone) {
  auto single = comm::make_single_communicator();
  int x = 0;
  EXPECT_THROW(single->send(&x, sizeof x, 0), std::logic_error);
  EXPECT_THROW(single->recv(&x, sizeof x, 0), std::logic_error);
}

class PipelineChannelTest : public testing::TestWithParam<k::BackendKind> {};

TEST_P(PipelineChannelTest, ResidualPassesDownTheStages) {
  auto backend = k::make_backend(GetParam());
  comm::PipelineChannel channel(test_comm().duplicate(), *backend);
  EXPECT_EQ(channel.stage(), test_world().rank);
  EXPECT_EQ(channel.path(), comm::DeviceGroup::Path::kHost);
  const size_t n = 1000;
  std::vector<float> host(n);
  std::iota(host.begin(), host.end(), 0.0f);
  k::Buffer x = backend->allocate(n * sizeof(float));
  // Stage s receives stage s - 1's rows, adds s to every element and sends them on: the last
  // stage holds i + 0 + 1 + ... + (stages - 1).
  if (channel.stage() == 0) {
    backend->upload(x.data(), host.data(), n * sizeof(float));
  } else {
    channel.recv_prev(x.as<float>(), n);
  }
  std::vector<float> add(n, float(channel.stage()));
  k::Buffer b = backend->allocate(n * sizeof(float));
  backend->upload(b.data(), add.data(), n * sizeof(float));
  backend->add(x.as<float>(), x.as<float>(), b.as<float>(), n);
  if (channel.stage() + 1 < channel.stages()) {
    channel.send_next(x.as<float>(), n);
    if (channel.stage() == 0) {
      EXPECT_THROW(channel.recv_prev(x.as<float>(), 1), std::logic_error);
    }
    return;
  }
  std::vector<float> got(n);
  backend->download(got.data(), x.data(), n * sizeof(float));
  const int S = channel.stages();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], float(i) + float(S * (S - 1) / 2)) << i;
}

INSTANTIATE_TEST_SUITE_P(Backends, PipelineChannelTest,
                         testing::Values(k::BackendKind::kCpu, k::BackendKind::kGuarded),
                         [](const auto& info) { return std::string(k::to_string(info.param)); });

TEST(PipelineGroups, SplitGivesTpGroupsAndPipelines) {
  const int size = test_world().size;
  if (size % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  const auto layout = comm::ParallelLayout::from_world(size, 2, 1);
  comm::World w = test_world();
  w = layout.place(w);
  auto tp = comm::make_mpi_split_communicator(w.pp_rank, w.tp_rank);
  auto pipe = comm::make_mpi_split_communicator(w.tp_rank, w.pp_rank);
  EXPECT_EQ(tp->size(), layout.tp);
  EXPECT_EQ(tp->rank(), w.tp_rank);
  EXPECT_EQ(pipe->size(), 2);
  EXPECT_EQ(pipe->rank(), w.pp_rank);
  // The sum of global ranks over each TP group: tp consecutive ranks from pp_rank * tp.
  float r = float(w.rank);
  tp->all_reduce(&r, 1);
  const int first = w.pp_rank * layout.tp;
  EXPECT_EQ(r, float(layout.tp * first + layout.tp * (layout.tp - 1) / 2));
  float p = float(w.rank);
  pipe->all_reduce(&p, 1);
  EXPECT_EQ(p, float(2 * w.tp_rank + layout.tp));
}

}  // namespace
}  // namespace adakv::test
