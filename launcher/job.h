// The process's place in an mpirun job. main() opens the job once (MPI only when mpirun or
// srun started this process); subcommands build their Worker on tp_group() and, on ranks
// other than 0, hand control to Worker::follow() so that rank 0 alone talks to the user.
#pragma once

#include <memory>

#include "comm/communicator.h"
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
// True on rank 0 (and in a plain run): the rank that prints.
bool is_job_root();

}  // namespace adakv::cli
