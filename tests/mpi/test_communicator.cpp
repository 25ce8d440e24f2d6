// The MPI communicator and the control plane under any rank count (ctest: 2, 3, 4, 8 ranks),
// checked against closed forms (tests/mpi/closed_form.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/control_plane.h"
#include "comm/mpi/mpi_communicator.h"
#include "tests/mpi/closed_form.h"
#include "tests/mpi/mpi_test_env.h"

namespace adakv::test {
namespace {

using comm::Communicator;
using comm::ReduceOp;

void check_all_reduce(Communicator& comm, size_t n, ReduceOp op) {
  const int rank = comm.rank(), size = comm.size();
  std::vector<float> data = rank_values(n, rank, size);
  comm.all_reduce(data.data(), n, op);
  if (op == ReduceOp::kSum) {
    EXPECT_TRUE(all_equal(data.data(), n, [&](size_t i) { return sum_value(i, size); }))
        << "sum, n=" << n;
  } else {
    EXPECT_TRUE(all_equal(data.data(), n, [&](size_t i) { return max_value(i, size); }))
        << "max, n=" << n;
  }
}

void check_all_gather(Communicator& comm, size_t n, bool in_place) {
  const int rank = comm.rank(), size = comm.size();
  std::vector<float> out(n * size, -1.0f);
  std::vector<float> mine = rank_values(n, rank, size);
  const float* in = mine.data();
  if (in_place) {
    std::copy(mine.begin(), mine.end(), out.begin() + static_cast<ptrdiff_t>(rank * n));
    in = out.data() + rank * n;
  }
  comm.all_gather(in, n, out.data());
  for (int r = 0; r < size; ++r) {
    EXPECT_TRUE(all_equal(out.data() + r * n, n, [&](size_t i) { return rank_value(i, r, size); }))
        << "block of rank " << r << ", n=" << n << (in_place ? " (in place)" : "");
  }
}

void check_broadcast(Communicator& comm, size_t bytes, int root) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    data[i] = comm.rank() == root ? root_byte(i, root) : static_cast<uint8_t>(~root_byte(i, root));
  }
  comm.broadcast(data.data(), bytes, root);
  EXPECT_TRUE(all_equal(data.data(), bytes, [&](size_t i) { return root_byte(i, root); }))
      << "bytes=" << bytes << " root=" << root;
}

TEST(MpiCommunicator, KnowsItsPlace) {
  Communicator& comm = test_comm();
  EXPECT_STREQ(comm.backend(), "mpi");
  EXPECT_EQ(comm.rank(), test_world().rank);
  EXPECT_EQ(comm.size(), test_world().size);
  EXPECT_GE(comm.size(), 1);
}

TEST(MpiCommunicator, AllReduceSumIsClosedForm) {
  for (size_t n : kFloatCounts) check_all_reduce(test_comm(), n, ReduceOp::kSum);
}

TEST(MpiCommunicator, AllReduceMaxIsClosedForm) {
  for (size_t n : kFloatCounts) check_all_reduce(test_comm(), n, ReduceOp::kMax);
}

TEST(MpiCommunicator, AllGatherGivesRankOrderedBlocks) {
  for (size_t n : kFloatCounts) check_all_gather(test_comm(), n, false);
}

TEST(MpiCommunicator, AllGatherInPlace) {
  for (size_t n : kFloatCounts) check_all_gather(test_comm(), n, true);
}

TEST(MpiCommunicator, BroadcastFromFirstAndLastRank) {
  for (int root : {0, test_comm().size() - 1}) {
    for (size_t bytes : kByteCounts) check_broadcast(test_comm(), bytes, root);
  }
}

// Buffers larger than one MPI call takes are split; a tiny cap exercises that path cheaply.
TEST(MpiCommunicator, SplitsLargeBuffersIntoSeveralCalls) {
  std::unique_ptr<Communicator> comm = comm::make_mpi_world_communicator(7);
  for (size_t n : {size_t{6}, size_t{7}, size_t{8}, size_t{1001}}) {
    check_all_reduce(*comm, n, ReduceOp::kSum);
    check_all_reduce(*comm, n, ReduceOp::kMax);
    check_all_gather(*comm, n, false);
    check_all_gather(*comm, n, true);
    check_broadcast(*comm, n, comm->size() - 1);
  }
}

// The float sum does not depend on the batch: a row's sum is the same bits whether it is
// reduced alone or with any number of other rows, at any position, however the message is
// split (max_count), and it is the rank-ordered sum ((p0 + p1) + p2) + ... of the partials.
constexpr size_t kRowFloats = 576;
const std::vector<size_t> kBatchRows = {1, 2, 3, 8, 17, 64, 768, 1984};
constexpr size_t kMaxRows = 1984;

// kMaxRows rows of partials, random and different per rank, of magnitudes 2^-12..2^12 and
// both signs, so that the order of the additions shows in the last bits.
const std::vector<float>& batch_partials() {
  static const std::vector<float> partials = [] {
    std::mt19937 gen(20240601u + 7919u * static_cast<uint32_t>(test_comm().rank()));
    std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-12, 12);
    std::vector<float> v(kMaxRows * kRowFloats);
    for (float& x : v) x = std::ldexp(mantissa(gen), exponent(gen));
    return v;
  }();
  return partials;
}

// Each row of batch_partials() all_reduced alone (every rank computes it at its first use).
const std::vector<float>& rows_reduced_alone() {
  static const std::vector<float> rows = [] {
    std::vector<float> v = batch_partials();
    for (size_t row = 0; row < kMaxRows; ++row) {
      test_comm().all_reduce(v.data() + row * kRowFloats, kRowFloats);
    }
    return v;
  }();
  return rows;
}

testing::AssertionResult same_bits(const float* got, const float* want, size_t n) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(got + i, want + i, sizeof(float)) != 0 && bad++ == 0) first = i;
  }
  if (bad == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << bad << " of " << n << " floats differ; first at " << first
                                     << " (row " << first / kRowFloats << "): got " << std::hexfloat
                                     << got[first] << ", want " << want[first];
}

// The first `rows` rows of batch_partials() all_reduced together by `comm`.
std::vector<float> reduce_batch(Communicator& comm, size_t rows) {
  const std::vector<float>& partials = batch_partials();
  std::vector<float> batch(partials.begin(), partials.begin() + rows * kRowFloats);
  comm.all_reduce(batch.data(), batch.size());
  return batch;
}

TEST(MpiCommunicator, AllReduceSumOfARowDoesNotDependOnTheBatch) {
  const std::vector<float>& alone = rows_reduced_alone();
  for (size_t rows : kBatchRows) {
    std::vector<float> batch = reduce_batch(test_comm(), rows);
    EXPECT_TRUE(same_bits(batch.data(), alone.data(), batch.size())) << rows << " rows";
  }
}

TEST(MpiCommunicator, AllReduceSumIsTheRankOrderedSumOfThePartials) {
  Communicator& comm = test_comm();
  const int size = comm.size();
  for (size_t rows : kBatchRows) {
    const size_t n = rows * kRowFloats;
    std::vector<float> gathered(n * size);
    comm.all_gather(batch_partials().data(), n, gathered.data());
    std::vector<float> want(gathered.begin(), gathered.begin() + static_cast<ptrdiff_t>(n));
    for (int r = 1; r < size; ++r) {
      for (size_t i = 0; i < n; ++i) want[i] += gathered[r * n + i];
    }
    std::vector<float> batch = reduce_batch(comm, rows);
    EXPECT_TRUE(same_bits(batch.data(), want.data(), n)) << rows << " rows";
  }
}

// Split into pieces of max_count / size floats: tiny ones (gathered whole), and pieces over
// the gather-all threshold (64 KiB) with a ragged tail (segmented).
TEST(MpiCommunicator, AllReduceSumDoesNotDependOnTheSplitting) {
  const std::vector<float>& alone = rows_reduced_alone();
  const size_t size = static_cast<size_t>(test_comm().size());
  const struct {
    size_t max_count;
    std::vector<size_t> rows;
  } cases[] = {{7, {1, 2}}, {1001, {1, 3, 17, 64}}, {size * 20000 + 3, {64, 768, 1984}}};
  for (const auto& c : cases) {
    std::unique_ptr<Communicator> comm = comm::make_mpi_world_communicator(c.max_count);
    for (size_t rows : c.rows) {
      std::vector<float> batch = reduce_batch(*comm, rows);
      EXPECT_TRUE(same_bits(batch.data(), alone.data(), batch.size()))
          << rows << " rows, max_count " << c.max_count;
    }
  }
}

TEST(MpiCommunicator, RejectsAnImpossibleCallSize) {
  EXPECT_THROW(comm::make_mpi_world_communicator(0), std::invalid_argument);
  EXPECT_THROW(comm::make_mpi_world_communicator(comm::kMpiMaxCount + 1), std::invalid_argument);
}

// Every rank passes a root that does not exist: MPI refuses on each rank before any traffic,
// and the error names the call, the rank and MPI's reason.
TEST(MpiCommunicator, FailedCallThrowsCommErrorNamingRankAndCall) {
  std::unique_ptr<Communicator> comm = comm::make_mpi_world_communicator();
  char byte = 0;
  const std::string where = "MPI_Bcast failed on rank " + std::to_string(comm->rank()) + " of " +
                            std::to_string(comm->size()) + ": ";
  try {
    comm->broadcast(&byte, 1, comm->size());
    ADD_FAILURE() << "a broadcast from a missing root did not throw";
  } catch (const comm::CommError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(where, 0), 0u) << e.what();
    EXPECT_GT(std::strlen(e.what()), where.size()) << "no MPI error string";
  }
  check_all_reduce(*comm, 7, ReduceOp::kSum);  // the communicator still works
}

// True on every rank when every rank runs on rank 0's host (one clock for all).
bool one_host(Communicator& comm) {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string root_name = comm::ControlPlane(comm).broadcast(name);
  float elsewhere = root_name == name ? 0.0f : 1.0f;
  comm.all_reduce(&elsewhere, 1, ReduceOp::kMax);
  return elsewhere == 0.0f;
}

// No rank leaves the barrier before the last rank, which sleeps first, has entered it.
TEST(MpiCommunicator, BarrierWaitsForTheLastRank) {
  Communicator& comm = test_comm();
  if (!one_host(comm)) GTEST_SKIP() << "ranks on several hosts: no common clock";
  using Clock = std::chrono::steady_clock;
  const int last = comm.size() - 1;
  comm.barrier();
  int64_t entered_ns = 0;
  if (comm.rank() == last) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    entered_ns = Clock::now().time_since_epoch().count();
  }
  comm.barrier();
  const int64_t left_ns = Clock::now().time_since_epoch().count();
  comm.broadcast(&entered_ns, sizeof entered_ns, last);
  EXPECT_GE(left_ns, entered_ns);
}

TEST(MpiCommunicator, StatsCountCallsAndTime) {
  using Clock = std::chrono::steady_clock;
  std::unique_ptr<Communicator> comm = comm::make_mpi_world_communicator();
  std::vector<float> data(7, 1.0f), gathered(7 * comm->size());
  comm->barrier();
  const auto start = Clock::now();
  for (int call = 0; call < 3; ++call) comm->all_reduce(data.data(), 7);
  comm->all_reduce(data.data(), 0);
  comm->all_gather(data.data(), 7, gathered.data());
  comm->broadcast(data.data(), 7 * sizeof(float), 0);
  // The last rank comes late to one more all-reduce: the others' time in it includes the wait.
  const int last = comm->size() - 1;
  if (comm->rank() == last) std::this_thread::sleep_for(std::chrono::milliseconds(60));
  comm->all_reduce(data.data(), 7);
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  comm->barrier();
  const comm::CommStats& stats = comm->stats();
  EXPECT_EQ(stats.all_reduce_calls, 5u);
  EXPECT_EQ(stats.all_reduce_bytes, 4 * 7 * sizeof(float));
  // Each collective's time is measured (> 0) and within the wall time around the calls.
  EXPECT_GT(stats.all_reduce_s, 0.0);
  EXPECT_GT(stats.all_gather_s, 0.0);
  EXPECT_GT(stats.broadcast_s, 0.0);
  EXPECT_LE(stats.all_reduce_s + stats.all_gather_s + stats.broadcast_s, wall);
  if (comm->size() > 1 && comm->rank() != last) EXPECT_GE(stats.all_reduce_s, 0.05);
  comm->reset_stats();
  EXPECT_EQ(comm->stats().all_reduce_calls, 0u);
  EXPECT_EQ(comm->stats().all_reduce_s, 0.0);
}

TEST(ControlPlane, BroadcastsRankZerosString) {
  comm::ControlPlane plane(test_comm());
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(root_byte(i, 0));
  for (const std::string& sent : {std::string(), std::string("x"), big}) {
    // Other ranks pass a message of another length and content: only rank 0's counts.
    std::string mine = plane.is_root() ? sent : std::string(sent.size() % 5 + 3, '?');
    std::string got = plane.broadcast(mine);
    EXPECT_EQ(got.size(), sent.size());
    EXPECT_TRUE(got == sent) << "message of " << sent.size() << " bytes differs";
  }
}

TEST(ControlPlane, BroadcastsRankZerosToken) {
  comm::ControlPlane plane(test_comm());
  for (int32_t token : {0, 49151, -1, INT32_MAX}) {
    EXPECT_EQ(plane.broadcast_token(plane.is_root() ? token : 12345), token);
  }
}

}  // namespace
}  // namespace adakv::test
