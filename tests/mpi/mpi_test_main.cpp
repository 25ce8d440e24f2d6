// main() of the test executables that run as the ranks of an mpirun job. Rank 0 prints
// gtest's usual output; the other ranks print only their failures, as "rank R: ...". The exit
// code is the same on every rank: non-zero when a test failed on any rank; where the binary is
// built with ADAKV_SKIP_RETURN_CODE (the GPU tests), that code when every test skipped itself on
// every rank, so that ctest reports Skipped rather than Passed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/mpi/mpi_job.h"
#include "tests/mpi/mpi_test_env.h"

namespace adakv::test {
namespace {

comm::World g_world;
comm::Communicator* g_comm = nullptr;

// The listener of ranks other than 0: silent, except for failed assertions.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}

  void OnTestStart(const testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }

  // Runs under gtest's lock: must not call back into UnitTest (current_test_info()).
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::string text = "rank " + std::to_string(rank_) + ": [" + test_ + "] " +
                       (result.file_name() ? result.file_name() : "?") + ":" +
                       std::to_string(result.line_number()) + ": Failure\n";
    std::string message = result.message();
    for (size_t begin = 0; begin < message.size();) {
      size_t end = std::min(message.find('\n', begin), message.size());
      text += "rank " + std::to_string(rank_) + ": " + message.substr(begin, end - begin) + "\n";
      begin = end + 1;
    }
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_ = "(outside a test)";
};

// Runs the tests; returns 1 on every rank when any rank failed.
int run_tests(const comm::MpiJob& job) {
  g_world = job.world();
  std::unique_ptr<comm::Communicator> comm = job.communicator();
  g_comm = comm.get();
  if (g_world.rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(g_world.rank));
  }
  float failed = RUN_ALL_TESTS() != 0 ? 1.0f : 0.0f;
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  float ran = static_cast<float>(unit.test_to_run_count() - unit.skipped_test_count());
  comm->all_reduce(&ran, 1, comm::ReduceOp::kMax);
  std::vector<float> failures(g_world.size);
  comm->all_gather(&failed, 1, failures.data());
  if (g_world.rank == 0) {
    for (int r = 0; r < g_world.size; ++r) {
      if (failures[r] != 0.0f)
        std::printf("adakv tests: FAILED on rank %d of %d\n", r, g_world.size);
    }
    std::fflush(stdout);
  }
  g_comm = nullptr;
  for (float f : failures) {
    if (f != 0.0f) return 1;
  }
#ifdef ADAKV_SKIP_RETURN_CODE
  if (ran == 0.0f && unit.test_to_run_count() > 0) return ADAKV_SKIP_RETURN_CODE;
#endif
  return 0;
}

}  // namespace

comm::World test_world() {
  return g_world;
}

comm::Communicator& test_comm() {
  if (!g_comm) throw std::logic_error("test_comm() used outside RUN_ALL_TESTS");
  return *g_comm;
}

}  // namespace adakv::test

int main(int argc, char** argv) {
  std::unique_ptr<adakv::comm::MpiJob> job;
  try {
    job = std::make_unique<adakv::comm::MpiJob>(&argc, &argv);
    testing::InitGoogleTest(&argc, argv);
    return adakv::test::run_tests(*job);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: fatal: %s\n", job ? job->world().rank : -1, e.what());
    std::fflush(stderr);
    adakv::comm::MpiJob::abort(1);
  }
}
