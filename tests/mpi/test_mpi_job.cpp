// The MPI bootstrap as the test ranks see it: the World it reports, the one-job rule, and
// the message and exit code of a rank stopped by the launcher.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "comm/mpi/mpi_job.h"
#include "tests/mpi/mpi_test_env.h"

namespace adakv::test {
namespace {

TEST(MpiJob, KnowsItWasLaunchedByMpirun) {
  EXPECT_TRUE(comm::MpiJob::launched_by_mpi());
}

TEST(MpiJob, WorldIsTheWholeJob) {
  // mpirun tells each process its place in the environment: the World must say the same.
  const comm::World world = test_world();
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::atoi(v) : -1;
  };
  ASSERT_NE(env("OMPI_COMM_WORLD_SIZE"), -1) << "not started by Open MPI's mpirun";
  EXPECT_EQ(world.rank, env("OMPI_COMM_WORLD_RANK"));
  EXPECT_EQ(world.size, env("OMPI_COMM_WORLD_SIZE"));
  EXPECT_EQ(world.local_rank, env("OMPI_COMM_WORLD_LOCAL_RANK"));
  EXPECT_EQ(world.tp_rank, world.rank);
  EXPECT_EQ(world.tp_size, world.size);
  EXPECT_EQ(world.device, -1);
}

TEST(MpiJob, ASecondJobInOneProcessIsRefused) {
  int argc = 1;
  char name[] = "adakv_mpi_tests";
  char* args[] = {name, nullptr};
  char** argv = args;
  EXPECT_THROW((comm::MpiJob{&argc, &argv}), std::logic_error);
}

// A child process inherits the handler; SIGTERM from the launcher ends it with one line on
// stderr and exit code 143.
TEST(MpiJob, StopSignalPrintsTheRankAndExits143) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    raise(SIGTERM);
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string said;
  char buffer[256];
  for (ssize_t got; (got = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) said.append(buffer, got);
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);
  EXPECT_EQ(said, "adakv rank " + std::to_string(test_world().rank) +
                      ": stopped by the launcher (another rank failed or the job was cancelled)\n");
}

}  // namespace
}  // namespace adakv::test
