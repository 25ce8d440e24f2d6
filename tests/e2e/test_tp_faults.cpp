// A rank that dies mid-decode ends the whole job quickly, with a message naming it: mpirun
// generates on the default model (TP 3, or PP 2 with plans in flight on both stages); once text
// streams, the last rank is killed with SIGKILL. Every other rank must be gone within 10 s,
// mpirun must exit non-zero, and the output must name the dead rank. No hang.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "model_fixture.h"
#include "run_adakv.h"

extern char** environ;

namespace adakv::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// PIDs of the processes whose command line contains `marker`, keyed by their MPI rank.
std::vector<std::pair<int, pid_t>> ranks_with(const std::string& marker) {
  std::vector<std::pair<int, pid_t>> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = slurp(e.path() / "cmdline"), env = slurp(e.path() / "environ");
    for (char& c : cmd) c = c ? c : ' ';
    if (cmd.find(marker) == std::string::npos || cmd.find("mpirun") != std::string::npos) continue;
    const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
    const size_t at = env.find(key);
    if (at == std::string::npos) continue;
    out.emplace_back(std::stoi(env.substr(at + key.size())), pid_t(std::stol(name)));
  }
  return out;
}

// `np` ranks run `generate ... extra`; the last one is killed once text streams.
void killed_rank_ends_the_job(int np, const std::string& extra) {
  const int last = np - 1;
  const std::string victim_name = "rank " + std::to_string(last);
  const auto dir = fs::temp_directory_path() / ("adakv-fault-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string marker = "fault-marker-" + std::to_string(::getpid());
  const std::string cmd = "OMPI_MCA_btl_vader_single_copy_mechanism=none " +
                          std::string(ADAKV_MPIRUN) + " -np " + std::to_string(np) + " " +
                          ADAKV_BINARY + " generate --model " + model_path() + " --prompt '" +
                          marker +
                          ": tell me a long story' --max-tokens 4000 --ignore-eos --threads 1" +
                          extra + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  pid_t shell = 0;
  ASSERT_EQ(::posix_spawn(&shell, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ),
            0);

  // Whatever happens below, no process of the job outlives the test.
  struct Reaper {
    pid_t shell;
    std::string marker;
    ~Reaper() {
      for (auto [rank, pid] : ranks_with(marker)) ::kill(pid, SIGKILL);
      ::kill(shell, SIGKILL);
      ::waitpid(shell, nullptr, WNOHANG);
    }
  } reaper{shell, marker};

  // Wait until decoding streams text (rank 0 writes it), at most 120 s.
  auto streamed = [&] {
    std::error_code ec;
    const auto n = fs::file_size(dir / "out", ec);
    return !ec && n >= 20;
  };
  const auto start = Clock::now();
  while (!streamed() && Clock::now() - start < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(streamed()) << slurp(dir / "err");
  auto ranks = ranks_with(marker);
  ASSERT_EQ(ranks.size(), size_t(np));
  pid_t victim = 0;
  for (auto [rank, pid] : ranks) {
    if (rank == last) victim = pid;
  }
  ASSERT_NE(victim, 0);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto killed = Clock::now();

  // mpirun and every surviving rank must be gone within 10 s.
  int status = 0;
  bool exited = false;
  while (Clock::now() - killed < std::chrono::seconds(10)) {
    if (::waitpid(shell, &status, WNOHANG) == shell) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  if (!exited) {
    for (auto [rank, pid] : ranks_with(marker)) ::kill(pid, SIGKILL);
    ::kill(shell, SIGKILL);
    ::waitpid(shell, &status, 0);
  }
  const std::string err = slurp(dir / "err");
  std::printf("[fault] job ended %.2f s after %s was killed; stderr:\n%s\n", seconds,
              victim_name.c_str(), err.c_str());
  EXPECT_TRUE(exited) << "the job was still running 10 s after " << victim_name << " died";
  EXPECT_TRUE(ranks_with(marker).empty()) << "some ranks outlived the job";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find(victim_name), std::string::npos) << "no message names the dead rank";
  EXPECT_NE(err.find("adakv rank 0: stopped"), std::string::npos);
  fs::remove_all(dir);
}

TEST(TensorParallelFaults, KilledRankEndsTheJobNamingIt) {
  killed_rank_ends_the_job(3, "");
}

TEST(PipelineFaults, KilledLastStageEndsTheJobNamingIt) {
  killed_rank_ends_the_job(2, " --pp 2");
}

}  // namespace
}  // namespace adakv::test
