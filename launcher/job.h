// The process's place in an mpirun job. main() opens the job once (MPI only when mpirun or
// srun started this process); subcommands build their Worker on tp_group() and, on ranks
// other than 0, hand control to Worker::follow() so that rank 0 alone talks to the user.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/groups.h"
#include "comm/world.h"

namespace adakv::cli {

class Job {
 public:
  Job(int* argc, char*** argv);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
};

// The tensor-parallel group of this job; null when not started by mpirun.
comm::Communicator* tp_group();
comm::World job_world();
// The groups of this job split into `dp` replicas of `pp` pipeline stages
// (comm/parallel_layout.h: TP fastest, then PP, then DP), and this rank's World placed in them:
// the groups are those of this rank's replica, whose first rank is its root. Collective on the
// first call (every rank calls it with the same pp and dp: MPI_Comm_split), the same groups
// afterwards; a later call with other sizes throws. Without mpirun: one rank, pp and dp 1.
struct JobGroups {
  comm::Groups groups;
  comm::World world;
};
JobGroups job_groups(int pp, int dp = 1);

// True on rank 0 (and in a plain run): the rank that prints.
bool is_job_root();

}  // namespace adakv::cli
